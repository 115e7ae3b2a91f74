"""Windowed aggregation against a row-at-a-time replay, eviction by watermark, late rows."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import PlanError, SchemaError
from splice.core.records import Data, End, Watermark
from splice.ops.aggregate import Agg
from splice.ops.window_aggregate import WindowAggregate
from splice.testing import OperatorHarness, check_operator, rebatch, run_operator
from tests.reference.aggregates import window_aggregate as ref_window

DEC = pa.decimal128(10, 2)
SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", DEC)])
AGGS = [Agg("n", "count"), Agg("s", "sum", "v"), Agg("m", "max", "v")]
REF_AGGS = [("n", "count", None), ("s", "sum", lambda r: r["v"]), ("m", "max", lambda r: r["v"])]


@st.composite
def streams(draw: st.DrawFn) -> tuple[pa.Table, list[int]]:
    """Rows with times drifting upwards but out of order, and watermark positions/values."""
    n = draw(st.integers(0, 100))
    base = draw(st.lists(st.integers(-3, 6), min_size=n, max_size=n))
    times, t = [], draw(st.integers(-20, 20))
    for b in base:
        t += b
        times.append(t + draw(st.integers(-8, 0)))
    k = draw(st.lists(st.one_of(st.none(), st.sampled_from(["a", "b", "long key!"])), min_size=n, max_size=n))
    v = draw(st.lists(st.one_of(st.none(), st.integers(-999, 999).map(lambda x: Decimal(x).scaleb(-2))), min_size=n, max_size=n))
    table = pa.table({"t": times, "k": k, "v": v}, schema=SCHEMA)
    lags = draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
    return table, lags


def _records(table: pa.Table, lags: list[int], size: int, every: int) -> tuple[list, list]:
    """Batches of ``size`` rows; after every ``every`` batches a watermark = max time - lag."""
    recs, ref, seen = [], [], None
    rows = table.to_pylist()
    for i, b in enumerate(rebatch(table, size)):
        recs.append(Data(2, b))
        for r in rows[i * size : i * size + b.num_rows]:
            ref.append(("row", r))
            seen = r["t"] if seen is None else max(seen, r["t"])
        if (i + 1) % every == 0 and seen is not None:
            wm = seen - lags[i % len(lags)]
            recs.append(Watermark(2, wm))
            ref.append(("wm", wm))
    recs.append(End())
    ref.append(("end", None))
    return recs, ref


def _rows(out: pa.Table) -> list[tuple]:
    cols = [out.column(i).to_pylist() for i in range(out.num_columns)]
    return list(zip(*cols, strict=True))


@settings(max_examples=30)
@given(
    streams(),
    st.sampled_from([1, 2, 7, 49, 50, 51, 100]),
    st.sampled_from([(5, None), (10, 5), (10, 3), (4, 4), (7, 2)]),
    st.integers(1, 3),
    st.sampled_from([0, 2]),
)
def test_window_aggregate_matches_replay(
    stream: tuple[pa.Table, list[int]], size: int, window: tuple[int, int | None], every: int,
    lateness: int,
) -> None:
    table, lags = stream
    wsize, slide = window
    spec = WindowAggregate("t", wsize, slide, keys=["k"], aggregates=AGGS, allowed_lateness=lateness)
    recs, ref = _records(table, lags, size, every)
    out, h = run_operator(spec, {2: SCHEMA}, recs)
    want, late = ref_window(ref, "t", wsize, slide or wsize, ["k"], REF_AGGS, lateness)
    assert _rows(out) == want
    got_late = pa.Table.from_batches(h.late, schema=SCHEMA).to_pylist() if h.late else []
    assert got_late == late
    assert h.logic.late_rows == len(late)  # type: ignore[attr-defined]


def test_eviction_leaves_only_open_windows() -> None:
    spec = WindowAggregate("t", 10, 5, keys=["k"], aggregates=[Agg("n", "count")])
    h = OperatorHarness(spec, {2: SCHEMA})
    h.push(2, pa.record_batch({"t": [1, 7, 12, 23], "k": ["a"] * 4, "v": [None] * 4}, schema=SCHEMA))
    assert h.logic.open_windows() == [-5, 0, 5, 10, 15, 20]  # type: ignore[attr-defined]
    out = h.watermark(2, 9)
    assert _rows(out) == [(-5, 5, "a", 1), (0, 10, "a", 2)]
    assert h.logic.open_windows() == [5, 10, 15, 20]  # type: ignore[attr-defined]
    out = h.watermark(2, 19)
    assert _rows(out) == [(5, 15, "a", 2), (10, 20, "a", 1)]
    assert h.logic.open_windows() == [15, 20]  # type: ignore[attr-defined]
    assert h.logic.agg.n_groups == 2  # type: ignore[attr-defined]  # emitted groups dropped
    assert h.logic.state_bytes() > 0
    h.push(2, pa.record_batch({"t": [3, 16], "k": ["b", "b"], "v": [None, None]}, schema=SCHEMA))
    assert [b.to_pylist() for b in h.late] == [[{"t": 3, "k": "b", "v": None}]]
    assert _rows(h.end()) == [(15, 25, "a", 1), (15, 25, "b", 1), (20, 30, "a", 1)]


def test_date_windows_as_in_the_demo() -> None:
    schema = pa.schema([("d", pa.date32()), ("mode", pa.string())])
    spec = WindowAggregate("d", 365, keys=["mode"], aggregates=[Agg("n", "count")])
    days = [dt.date(1995, 1, 1), dt.date(1995, 6, 1), dt.date(1996, 6, 1)]
    batch = pa.record_batch({"d": days, "mode": ["AIR", "AIR", "MAIL"]}, schema=schema)
    out, _ = run_operator(spec, {2: schema}, [Data(2, batch), End()])
    assert out.schema.field("window_start").type == pa.date32()
    rows = _rows(out)
    assert [r[2:] for r in rows] == [("AIR", 2), ("MAIL", 1)]
    assert rows[0][0] <= days[0] < rows[0][1]


def test_contract_suite() -> None:
    table = pa.table(
        {"t": [5, 1, 12, 3, 30, 14, 2], "k": ["a", None, "b", "a", "a", "b", "a"],
         "v": pa.array([Decimal(i) for i in range(7)], DEC)},
        schema=SCHEMA,
    )
    b = rebatch(table, 2)
    recs = [Data(2, b[0]), Watermark(2, 4), Data(2, b[1]), Watermark(2, 11), Data(2, b[2]),
            Data(2, b[3]), Watermark(2, 20), End()]
    check_operator(WindowAggregate("t", 10, 5, keys=["k"], aggregates=AGGS), {2: SCHEMA}, recs)


def test_bad_input() -> None:
    with pytest.raises(PlanError, match="slide"):
        WindowAggregate("t", 10, 11, aggregates=AGGS)
    with pytest.raises(PlanError, match="size"):
        WindowAggregate("t", 0, aggregates=AGGS)
    with pytest.raises(PlanError, match="reserved"):
        WindowAggregate("t", 5, keys=["window_start"])
    with pytest.raises(SchemaError, match="'when'"):
        WindowAggregate("when", 5, aggregates=AGGS).output_schema({2: SCHEMA})
    with pytest.raises(SchemaError, match="'k'.*string"):
        WindowAggregate("k", 5, aggregates=AGGS).output_schema({2: SCHEMA})
    with pytest.raises(SchemaError, match="'zz'"):
        WindowAggregate("t", 5, aggregates=[Agg("s", "sum", "zz")]).output_schema({2: SCHEMA})
