"""An input ordered by time equals ``np.argsort(times, kind="stable")`` row for row, in memory and
through spilled runs alike; it replays, and closing it removes its runs."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import PlanError, SchemaError
from splice.core.time import time_values
from splice.io.bad_input import DeadLetterSink
from splice.io.time_order import TimeOrderedInput, order_by_time

BIG = 1 << 40  # a budget every test input fits
TINY = 1  # a budget that makes every batch its own run


def _reference(table: pa.Table, column: str) -> pa.Table:
    return table.take(pa.array(np.argsort(time_values(table, column, "ref"), kind="stable")))


def _rows(ordered: TimeOrderedInput, batch_size: int) -> tuple[pa.Table, list[int]]:
    batches = list(ordered.batches(batch_size))
    return pa.Table.from_batches(batches, ordered.schema), [b.num_rows for b in batches]


TIMES = st.one_of(
    st.lists(st.integers(-50, 50), max_size=120),  # many duplicates, negative times
    st.lists(st.integers(-(2**62), 2**62), max_size=60),
    st.integers(0, 80).map(lambda n: [7] * n),  # all equal
    st.lists(st.integers(-1000, 1000), max_size=80).map(sorted),
    st.lists(st.integers(-1000, 1000), max_size=80).map(lambda v: sorted(v, reverse=True)),
)


@settings(max_examples=40)
@given(times=TIMES, kind=st.sampled_from(["int64", "timestamp", "date32", "int32"]),
       run_batch=st.sampled_from([1, 2, 7, 50]), out_batch=st.sampled_from([1, 2, 7, 49, 50, 51, 100]))
def test_both_paths_equal_the_stable_argsort(times: list[int], kind: str, run_batch: int, out_batch: int) -> None:
    values = np.array(times, dtype=np.int64)
    col = {"int64": pa.array(values, pa.int64()),
           "timestamp": pa.array(values, pa.int64()).cast(pa.timestamp("us")),
           "date32": pa.array(np.clip(values, -(2**31), 2**31 - 1).astype(np.int32), pa.int32()).cast(pa.date32()),
           "int32": pa.array(np.clip(values, -(2**31), 2**31 - 1).astype(np.int32), pa.int32())}[kind]
    table = pa.table({"id": pa.array(np.arange(len(times)), pa.int64()), "t": col})
    want = _reference(table, "t")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "in.parquet"
        pq.write_table(table, path, row_group_size=13)
        got = {}
        for budget in (BIG, TINY):
            with order_by_time(path, "in", "t", memory_budget=budget, spill_dir=d, batch_size=run_batch) as o:
                assert o.spilled == (budget == TINY) and o.num_rows == len(times)
                first = _rows(o, out_batch)
                assert first[0].equals(want)
                assert _rows(o, out_batch) == first  # replayable: the same batches again
                sizes = first[1]
                assert all(s == out_batch for s in sizes[:-1]) and all(0 < s <= out_batch for s in sizes)
                got[budget] = first
            assert list(Path(d).glob("splice-runs-*")) == []  # closed: the runs are gone
        assert got[BIG] == got[TINY]


def test_spilled_runs_are_removed_by_close(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    table = pa.table({"id": np.arange(1000), "ts": rng.integers(0, 50, 1000)})
    path = tmp_path / "in.csv"
    pacsv.write_csv(table, path)
    spill = tmp_path / "spill"
    spill.mkdir()
    o = order_by_time(path, "in", "ts", memory_budget=4_000, spill_dir=spill, batch_size=64)
    assert o.spilled and len(o.runs) > 1 and all(r.exists() and r.parent.parent == spill for r in o.runs)
    assert _rows(o, 100)[0].equals(_reference(table, "ts"))
    o.close()
    assert list(spill.iterdir()) == []
    with pytest.raises(PlanError, match="closed"):
        o.batches(10)


def test_bad_rows_follow_the_policy_on_both_paths(tmp_path: Path) -> None:
    lines = ["k,ts"] + [f"{i},{(i * 7919) % 100}" for i in range(12_000)]
    lines[11_000] = "1,"  # a null time past the rows the types are inferred from
    lines[11_500] = "2,x"
    path = tmp_path / "in.csv"
    path.write_text("\n".join(lines) + "\n")
    results = []
    for budget in (BIG, 10_000):
        sink = DeadLetterSink()
        with order_by_time(path, "left", "ts", memory_budget=budget, policy="dead_letter", sink=sink,
                           batch_size=1000) as o:
            assert o.spilled == (budget != BIG)
            results.append(_rows(o, 500)[0])
        assert sink.counts == {"null time column ts": 1, "column ts: not a valid int64": 1}
        with pytest.raises(SchemaError, match=r"input 'left' .*, data row 11000: time column 'ts' is null"):
            order_by_time(path, "left", "ts", memory_budget=budget, batch_size=1000)
    assert results[0].equals(results[1]) and results[0].num_rows == 11_998
    ts = results[0].column("ts").to_numpy()
    assert np.all(ts[:-1] <= ts[1:])


def test_a_time_column_of_the_wrong_type_is_named(tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"ts": ["a", "b"]}), path)
    for budget in (BIG, TINY):
        with pytest.raises(SchemaError, match=r"stream 'events': time column 'ts' has type string"):
            order_by_time(path, "events", "ts", memory_budget=budget, spill_dir=tmp_path)
    assert list(tmp_path.glob("splice-runs-*")) == []
    with pytest.raises(PlanError, match="memory budget"):
        order_by_time(path, "events", "ts", memory_budget=0)


def test_an_input_in_order_is_not_copied(tmp_path: Path) -> None:
    table = pa.table({"ts": np.arange(100), "v": np.arange(100) * 2})
    path = tmp_path / "in.parquet"
    pq.write_table(table, path)
    with order_by_time(path, "in", "ts", memory_budget=BIG) as o:
        batches = list(o.batches(30))
        assert pa.Table.from_batches(batches).equals(table)
        assert len({b.column(0).buffers()[1].address for b in batches}) == 1  # slices of one buffer
