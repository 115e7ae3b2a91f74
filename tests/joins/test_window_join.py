"""Window join against the nested-loop reference, state after each watermark, bad input."""

from __future__ import annotations

from collections import Counter
from unittest.mock import patch

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import PlanError, SchemaError, StateError
from splice.core.records import Data, End, Watermark
from splice.joins.temporal import window_join
from splice.joins.temporal._window_kernels import arrival_windows, expand_windows, window_pairs
from splice.joins.temporal.window_join import WindowJoin, WindowJoinLogic
from splice.testing import OperatorHarness, check_operator, rows_of, run_operator
from tests.joins.test_interval_join import L, R, _schemas, streams
from tests.reference.temporal_kernels import arrival_windows_py, expand_windows_py, window_pairs_py
from tests.reference.time_joins import WindowJoinRef


def _ms(rows: list[tuple]) -> Counter:
    return Counter(repr(r) for r in rows)


def _run_both(spec: WindowJoin, ls: pa.Schema, rs: pa.Schema, records: list) -> OperatorHarness:
    ref = WindowJoinRef(L, R, spec.on, spec.time, spec.size, spec.slide, spec.how,
                        names=(ls.names, rs.names))
    h = OperatorHarness(spec, {L: ls, R: rs})
    for rec in records:
        h.step(rec)
        if isinstance(rec, Data):
            ref.push(rec.stream_id, rec.batch)
        elif isinstance(rec, Watermark):
            ref.watermark(rec.stream_id, rec.time)
        else:
            ref.end()
        if not isinstance(rec, End):
            logic = h.logic
            assert isinstance(logic, WindowJoinLogic)
            for sid in (L, R):
                assert _ms(rows_of(logic.retained(sid))) == _ms(ref.retained(sid)), \
                    f"state of {sid} after {rec}"
    # emission order: window by window, each its pairs, padded left rows, padded right rows
    assert [repr(r) for r in rows_of(h.result())] == [repr(r) for r in ref.out]
    late = Counter(repr(r) for b in h.late for r in rows_of(pa.Table.from_batches([b])))
    assert late == _ms(ref.L.late + ref.R.late)
    return h


@settings(max_examples=40)
@given(streams(), st.sampled_from(["inner", "left", "right", "full"]),
       st.sampled_from([(5, 5), (10, 10), (10, 5), (9, 3), (1, 1)]), st.data())
def test_window_join_equals_reference(s, how, size_slide, data):
    ls, rs, records = s
    size, slide = size_slide
    spec = WindowJoin(left=L, right=R, on="k", time="ts", size=size, slide=slide, how=how)
    h = _run_both(spec, ls, rs, records)
    at = data.draw(st.integers(0, len(records)))
    got, _ = run_operator(spec, {L: ls, R: rs}, records, restore_at=at)
    assert rows_of(got) == rows_of(h.result())


@settings(max_examples=40)
@given(streams(), st.sampled_from(["inner", "left", "right", "full"]),
       st.sampled_from([(5, 5), (10, 5), (9, 3), (1, 1)]))
def test_window_join_in_small_groups_equals_reference(s, how, size_slide):
    ls, rs, records = s
    size, slide = size_slide
    spec = WindowJoin(left=L, right=R, on="k", time="ts", size=size, slide=slide, how=how)
    with patch.object(window_join, "_GROUP_PAIRS", 3):  # a close of many windows: many groups
        _run_both(spec, ls, rs, records)


def test_a_large_close_is_matched_in_groups_of_windows():
    ls, rs = _schemas()
    n = 3000
    rng = np.random.default_rng(0)
    left = pa.record_batch({"k": rng.integers(0, 50, n), "ts": np.arange(n),
                            "v": np.arange(n)}, schema=ls)
    right = pa.record_batch({"k": rng.integers(0, 50, n), "ts": np.arange(n) + 1,
                             "w": [f"r{i}" for i in range(n)]}, schema=rs)
    spec = WindowJoin(left=L, right=R, on="k", time="ts", size=40, slide=10, how="full")
    results, groups = [], []
    made = WindowJoinLogic._groups

    def spy(self: WindowJoinLogic, *args: object) -> list[tuple[int, int]]:
        groups.append(made(self, *args))
        return groups[-1]

    for pairs in (10**9, 500):
        h = OperatorHarness(spec, {L: ls, R: rs})
        h.push(L, left)
        h.push(R, right)
        with patch.object(window_join, "_GROUP_PAIRS", pairs), \
                patch.object(WindowJoinLogic, "_groups", spy):
            h.end()  # one close of every window
        results.append(rows_of(h.result()))
    assert len(groups[0]) == 1 and len(groups[1]) > 10
    assert results[1] == results[0]
    ref = WindowJoinRef(L, R, "k", "ts", 40, 10, "full", names=(ls.names, rs.names))
    ref.push(L, left)
    ref.push(R, right)
    ref.end()
    assert [repr(r) for r in results[1]] == [repr(r) for r in ref.out]


@settings(max_examples=200)
@given(st.lists(st.integers(-40, 40), max_size=30), st.sampled_from([(5, 5), (10, 3), (1, 1)]),
       st.integers(-12, 12), st.integers(0, 8), st.integers(0, 1000))
def test_expand_windows_matches_twin(ts, size_slide, lo_k, span, offset):
    size, slide = size_slide
    t = np.array(ts, dtype=np.int64)
    # first open window: the first covering the time, or later when earlier ones had closed
    k_open = np.maximum((t - size) // slide + 1, lo_k - 2)
    codes = np.arange(len(t), dtype=np.int64) * 7 - 3
    want, wm = expand_windows_py(k_open, t, codes, slide, lo_k, lo_k + span, offset)
    for ordered in (False, True):
        if ordered:  # in time order: the same pairs, by window, then row
            o = np.argsort(t, kind="stable")
            t, k_open, codes = t[o], k_open[o], codes[o]
            want, wm = expand_windows_py(k_open, t, codes, slide, lo_k, lo_k + span, offset,
                                         window_major=True)
        buf, cap, m = expand_windows(k_open, t, codes, slide, lo_k, lo_k + span, offset, ordered)
        got = np.concatenate([buf[:m], buf[cap : cap + m], buf[2 * cap : 2 * cap + m]])
        assert m == wm and got.tolist() == want.tolist()
    windows = got[m : 2 * m]
    assert ((windows >= lo_k) & (windows <= lo_k + span)).all()


_NONE = np.iinfo(np.int64).min  # no window closed yet


@settings(max_examples=300)
@given(st.lists(st.integers(-20, 80), max_size=30), st.sampled_from([(5, 5), (10, 3), (1, 1)]),
       st.one_of(st.just(_NONE), st.integers(-5, 10)))
def test_arrival_windows_match_twin(ts, size_slide, closed):
    size, slide = size_slide
    t = np.array(ts, dtype=np.int64)
    args = (size, slide, closed)
    late, k_open = arrival_windows(t, *args)
    want_late, want_open = arrival_windows_py(t, *args)
    assert late.tolist() == want_late.tolist()
    assert k_open[~late].tolist() == want_open[~want_late].tolist()


@settings(max_examples=200)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 4)), max_size=40),
       st.lists(st.tuples(st.integers(0, 6), st.integers(0, 4)), max_size=40))
def test_window_pairs_match_twin(left, right):
    # windows nondecreasing, duplicate codes within a window (the chains keep right order)
    def cols(pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
        a = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)
        return a[:, 0].copy(), a[:, 1] * 1_000_003 - 2  # spread codes, some negative

    lw, lc = cols(left)
    rw, rc = cols(right)
    buf, cap, k = window_pairs(lw, lc, rw, rc)
    wi, wj = window_pairs_py(lw, lc, rw, rc)
    assert buf[:k].tolist() == wi.tolist() and buf[cap : cap + k].tolist() == wj.tolist()


@settings(max_examples=15)
@given(streams(key_kind="two"), st.sampled_from(["inner", "full"]))
def test_window_join_two_keys(s, how):
    ls, rs, records = s
    spec = WindowJoin(left=L, right=R, on=["k", "k2"], time="ts", size=8, slide=4, how=how)
    _run_both(spec, ls, rs, records)


@settings(max_examples=10)
@given(streams(key_kind="str"), st.sampled_from(["left", "right"]))
def test_window_join_string_keys(s, how):
    ls, rs, records = s
    _run_both(WindowJoin(left=L, right=R, on="k", time="ts", size=6, how=how), ls, rs, records)


def test_contract_suite_and_emission_at_window_close():
    ls, rs = _schemas()
    lt = pa.table({"k": [1, 2, None, 1], "ts": [1, 2, 3, 12], "v": [0, 1, 2, 3]}, schema=ls)
    rt = pa.table({"k": [1, 2, 1, None], "ts": [4, 11, 13, 14], "w": list("abcd")}, schema=rs)
    records = [Data(L, lt.slice(0, 3).to_batches()[0]), Data(R, rt.slice(0, 2).to_batches()[0]),
               Watermark(L, 9), Watermark(R, 9), Data(L, lt.slice(3).to_batches()[0]),
               Data(R, rt.slice(2).to_batches()[0]), End()]
    for how in ("inner", "left", "right", "full"):
        spec = WindowJoin(left=L, right=R, on="k", time="ts", size=10, how=how)
        check_operator(spec, {L: ls, R: rs}, records, ordered=True)
    spec = WindowJoin(left=L, right=R, on="k", time="ts", size=10, how="full")
    h = OperatorHarness(spec, {L: ls, R: rs})
    logic = h.logic
    assert isinstance(logic, WindowJoinLogic)
    h.step(records[0])
    h.step(records[1])
    assert h.step(records[2]).num_rows == 0  # only the left watermark passed 9
    out = h.step(records[3])  # window [0, 10) closes
    assert rows_of(out) == [(1, 1, 0, 1, 4, "a"), (2, 2, 1, None, None, None),
                            (None, 3, 2, None, None, None)]
    assert logic.retained(L).num_rows == 0
    assert logic.retained(R).column("w").to_pylist() == ["b"]
    h.step(records[4])
    h.step(records[5])
    out = h.step(records[6])
    assert rows_of(out) == [(1, 12, 3, 1, 13, "c"), (None, None, None, 2, 11, "b"),
                            (None, None, None, None, 14, "d")]


def test_hopping_pairs_once_per_shared_window():
    ls, rs = _schemas()
    spec = WindowJoin(left=L, right=R, on="k", time="ts", size=10, slide=5)
    h = OperatorHarness(spec, {L: ls, R: rs})
    h.push(L, pa.record_batch({"k": [1], "ts": [7], "v": [0]}, schema=ls))
    h.push(R, pa.record_batch({"k": [1], "ts": [8], "w": ["a"]}, schema=rs))
    h.end()
    assert h.result().num_rows == 2  # windows [0, 10) and [5, 15)


def test_windows_closed_together_are_emitted_one_after_another():
    ls, rs = _schemas()
    spec = WindowJoin(left=L, right=R, on="k", time="ts", size=10, how="full")  # only the watermarks below close windows
    h = OperatorHarness(spec, {L: ls, R: rs})
    h.push(L, pa.record_batch({"k": [1, 2, 1, 3], "ts": [1, 2, 11, 12], "v": [0, 1, 2, 3]},
                              schema=ls))
    h.push(R, pa.record_batch({"k": [4, 1, 1], "ts": [3, 5, 15], "w": ["a", "b", "c"]},
                              schema=rs))
    assert h.result().num_rows == 0  # no watermark yet: both windows open
    h.watermark(L, 100)
    h.watermark(R, 100)  # closes windows [0, 10) and [10, 20) at once
    got = [(r["v"], r["w"]) for r in h.result().to_pylist()]
    assert got == [(0, "b"), (1, None), (None, "a"), (2, "c"), (3, None)]


def test_late_rows_and_bad_input():
    ls, rs = _schemas()
    spec = WindowJoin(left=L, right=R, on="k", time="ts", size=10)
    h = OperatorHarness(spec, {L: ls, R: rs})
    h.push(L, pa.record_batch({"k": [1], "ts": [25], "v": [0]}, schema=ls))
    h.push(R, pa.record_batch({"k": [1], "ts": [25], "w": ["a"]}, schema=rs))
    h.watermark(L, 24)
    h.watermark(R, 24)
    # both watermarks are 24: window [10, 20) closed, a row at 15 is late
    h.push(R, pa.record_batch({"k": [1, 1], "ts": [15, 21], "w": ["b", "c"]}, schema=rs))
    logic = h.logic
    assert isinstance(logic, WindowJoinLogic)
    assert logic.late_rows == {L: 0, R: 1}
    assert [r for b in h.late for r in b.column("w").to_pylist()] == ["b"]
    with pytest.raises(PlanError, match="slide 20 > size 10"):
        WindowJoin(left=L, right=R, on="k", time="ts", size=10, slide=20)
    with pytest.raises(PlanError, match="size and slide must be >= 1"):
        WindowJoin(left=L, right=R, on="k", time="ts", size=0)
    mism = pa.schema([("k", pa.float64()), ("ts", pa.int64()), ("w", pa.string())])
    with pytest.raises(SchemaError, match="key type mismatch"):
        WindowJoin(left=L, right=R, on="k", time="ts", size=5).output_schema({L: ls, R: mism})
    with pytest.raises(SchemaError, match="stream 2 has no time column 'at'"):
        WindowJoin(left=L, right=R, on="k", time="at", size=5).output_schema({L: ls, R: rs})


def test_budget_of_an_input_that_never_advances():
    ls, rs = _schemas()

    def feed(spec: WindowJoin) -> WindowJoinLogic:
        logic = spec.build({L: ls, R: rs})
        assert isinstance(logic, WindowJoinLogic)
        for i in range(100):
            ts = np.arange(i * 100, (i + 1) * 100)
            logic.on_batch(L, pa.record_batch({"k": ts % 7, "ts": ts, "v": ts}, schema=ls))
        return logic

    with pytest.raises(StateError, match="over the budget of 100000 bytes.*never advances"):
        feed(WindowJoin(left=L, right=R, on="k", time="ts", size=100, state_budget=100_000))


def test_freed_rows_of_an_ordered_batch_are_sliced_then_copied():
    # a time-ordered batch keeps its parent's buffers (and counts them) while it keeps at least
    # half its rows; a smaller remainder is copied and counted alone
    ls, rs = _schemas()
    logic = WindowJoin(left=L, right=R, on="k", time="ts", size=10).build({L: ls, R: rs})
    assert isinstance(logic, WindowJoinLogic)
    ts = np.arange(100)
    logic.on_batch(L, pa.record_batch({"k": ts % 7, "ts": ts, "v": ts}, schema=ls))
    whole = logic.L.nbytes
    logic.on_watermark(R, 1_000)
    logic.on_watermark(L, 39)  # windows up to [30, 40) close: rows 0..39 are freed
    (b,) = logic.L.batches
    assert b.times.tolist() == list(range(40, 100)) and b.batch.column("v")[0].as_py() == 40
    assert logic.L.nbytes == whole  # a slice: the parent's buffers are still held
    logic.on_watermark(L, 79)  # 20 of the 60 rows remain: copied
    (b,) = logic.L.batches
    assert b.times.tolist() == list(range(80, 100))
    assert b.batch.column("v").to_pylist() == list(range(80, 100))
    assert b.batch.nbytes < whole // 3
    assert logic.L.nbytes == b.nbytes < whole
    assert logic.retained(L).column("ts").to_pylist() == list(range(80, 100))


@pytest.mark.parametrize("how,slide", [("inner", None), ("left", 50)])
def test_cli_window_join_equals_sql(tmp_path, how, slide):
    import duckdb
    import pyarrow.parquet as pq

    from splice.cli import main

    rng = np.random.default_rng(5)
    n = 2000
    lt = pa.table({"id": rng.integers(0, 40, n), "ts": rng.integers(0, 3000, n), "x": np.arange(n)})
    rt = pa.table({"id": rng.integers(0, 40, n), "ts": rng.integers(0, 3000, n), "y": np.arange(n)})
    pq.write_table(lt, tmp_path / "l.parquet")
    pq.write_table(rt, tmp_path / "r.parquet")
    argv = ["join", "--kind", "window", "--left", str(tmp_path / "l.parquet"),
            "--right", str(tmp_path / "r.parquet"), "--on", "id", "--time", "ts",
            "--size", "100", "--how", how, "--batch-size", "300",
            "--out", str(tmp_path / "o.parquet")]
    if slide:
        argv += ["--slide", str(slide)]
    assert main(argv) == 0
    got = pq.read_table(tmp_path / "o.parquet")
    sl = slide or 100
    # windows as rows: k from floor((ts-100)/sl)+1 to floor(ts/sl)
    want = duckdb.sql(f"""
        WITH lw AS (SELECT l.*, k FROM lt l, range(floor((l.ts - 100) / {sl})::BIGINT + 1, l.ts // {sl} + 1) t(k)),
             rw AS (SELECT r.*, k FROM rt r, range(floor((r.ts - 100) / {sl})::BIGINT + 1, r.ts // {sl} + 1) t(k))
        SELECT lw.id, lw.ts, lw.x, rw.id, rw.ts, rw.y FROM lw {how.upper()} JOIN rw
        ON lw.id = rw.id AND lw.k = rw.k""").fetchall()
    assert Counter(rows_of(got)) == Counter(want)
