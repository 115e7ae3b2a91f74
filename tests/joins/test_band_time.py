"""Band joins over time windows against the nested-loop reference (watermarks, late tuples)."""

from __future__ import annotations

import argparse

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.cli import main
from splice.core.errors import PlanError, SchemaError
from splice.core.records import Data, End, Watermark
from splice.index import INDEX_KINDS
from splice.index._window import M_W
from splice.joins.band.band_join import BandJoin
from splice.joins.band.band_tables import run as band_run
from splice.joins.band.band_time import TimeBandCore
from splice.joins.common.join_windows import TimeWindow
from splice.testing import check_operator, run_operator
from tests.reference.band_join import nested_loop_band_time_join

#: A time-window core's inputs: (side, key, time jitter) per tuple, then the join's settings.
_CORE_CASE = dict(
    data=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 30), st.integers(0, 12)),
                  max_size=300),
    length=st.integers(0, 40),
    eps=st.sampled_from([0, 1, 3]),
    self_join=st.booleans(),
    chunk=st.sampled_from([1, 2, 7, 49, 50, 51, 100]),
    merge_ratio=st.sampled_from([0.05, 0.5, 1.0]),
)


@settings(max_examples=60)
@given(index=st.sampled_from(list(INDEX_KINDS)), **_CORE_CASE)
def test_time_core_matches_nested_loops(index, data, length, eps, self_join, chunk, merge_ratio):
    _check_time_core(index, data, length, eps, self_join, chunk, merge_ratio, threads=1)


@settings(max_examples=150)
@given(index=st.sampled_from(["imtree", "pimtree"]), threads=st.sampled_from([2, 3]),
       here=st.booleans(), **_CORE_CASE)
def test_parallel_time_core_matches_nested_loops(index, data, length, eps, self_join, chunk,
                                                 merge_ratio, threads, here):
    # here: the ranges of every call on the calling thread; else each on its own thread
    _check_time_core(index, data, length, eps, self_join, chunk, merge_ratio, threads,
                     small_call=10**9 if here else 0)


def _check_time_core(index, data, length, eps, self_join, chunk, merge_ratio, threads,
                     small_call=None):
    # times drift upward with bounded disorder; watermarks trail each stream's future minimum
    sides = [0 if self_join else s for s, _, _ in data]
    keys = [k for _, k, _ in data]
    times = [i // 3 + j for i, (_, _, j) in enumerate(data)]
    core = TimeBandCore(index, np.dtype(np.int64), -eps, eps, length, self_join, merge_ratio, 1, 3,
                        threads)
    if small_call is not None:
        core.core.small_call = small_call
    n = len(keys)
    got = []
    streams = 1 if self_join else 2
    for c0 in range(0, n, chunk):
        c1 = min(n, c0 + chunk)
        g, p = core.run(np.array(sides[c0:c1], np.int8), np.array(keys[c0:c1]),
                        np.array(times[c0:c1]))
        got += list(zip((g + c0).tolist(), p.tolist(), strict=True))
        for s in range(streams):
            future = [t for t, side in zip(times[c1:], sides[c1:], strict=True) if side == s]
            if not future:
                continue
            wm = min(future) - 1
            o = 0 if self_join else 1 - s
            upto = wm - length
            first = core.evict(o, upto)
            # state: every tuple of o that can still match is held, and the held count is
            # exactly what arrived from `first` on
            mine = [t for t, side in zip(times[:c1], sides[:c1], strict=True) if side == o]
            live = [pos for pos, t in enumerate(mine) if t > upto]
            assert not live or first <= live[0]
            assert core.cnt[o] == len(mine) - first
    assert got == nested_loop_band_time_join(sides, keys, times, length, -eps, eps, self_join)


@pytest.mark.parametrize("index", ["imtree", "pimtree"])
@pytest.mark.parametrize("self_join", [False, True])
@pytest.mark.parametrize("small_call", [0, 10**9])
def test_parallel_time_core_grows_and_follows_the_keys(index, self_join, small_call):
    # enough tuples that the windows outgrow their first capacity (every range re-indexed) and
    # keys that move, so that the key ranges are re-derived; the serial nested loops decide
    rng = np.random.default_rng(5)
    n = 12_000
    sides = np.zeros(n, np.int8) if self_join else rng.integers(0, 2, n).astype(np.int8)
    keys = np.concatenate([rng.integers(0, 1000, n // 3), rng.integers(2000, 2400, n - n // 3)])
    times = np.arange(n) // 2 + rng.integers(0, 20, n)  # out of order within 20
    length, eps = 1500, 2
    par = TimeBandCore(index, np.dtype(np.int64), -eps, eps, length, self_join, 0.1, 1, 2, 3)
    par.core.small_call = small_call  # ranges on their own threads, or on the calling one
    ref = TimeBandCore("nlwj", np.dtype(np.int64), -eps, eps, length, self_join)
    streams = 1 if self_join else 2
    # per stream, the smallest time still to come after each tuple: the watermark's bound
    future = []
    for s in range(streams):
        t = np.where(sides == s, times, np.iinfo(np.int64).max)
        future.append(np.minimum.accumulate(t[::-1])[::-1])
    matched = 0
    for c0 in range(0, n, 500):
        c1 = min(n, c0 + 500)
        args = (sides[c0:c1], keys[c0:c1], times[c0:c1])
        g, p = par.run(*args)
        want_g, want_p = ref.run(*args)
        assert np.array_equal(g, want_g) and np.array_equal(p, want_p)
        matched += len(g)
        if c1 < n:
            for s in range(streams):
                o = 0 if self_join else 1 - s
                upto = int(future[s][c1]) - 1 - length
                par.evict(o, upto)
                ref.evict(o, upto)
    assert matched > n
    assert par.rebuilds > 0 and par.core.rebalances > 0
    assert par._capacity(0) > 1024
    for s in range(streams):  # every range's merges drop what eviction passed
        span = par._next(s) - par.live[s]
        assert span < par._capacity(s)
        assert all(part[s].meta[M_W] == span for part in par.core.parts)


def _schemas():
    return {2: pa.schema([("x", pa.int64()), ("ts", pa.int64()), ("a", pa.int64())]),
            3: pa.schema([("x", pa.float64()), ("ts", pa.int64()), ("b", pa.int64())])}


def _records(rng, n_batches, self_join=False):
    recs = []
    row = 0
    clock = [0, 0]
    for _ in range(n_batches):
        sid = 2 if self_join or rng.random() < 0.5 else 3
        s = sid - 2
        m = int(rng.integers(0, 6))
        ts = clock[s] + rng.integers(-6, 8, m)  # some rows fall behind the watermark
        clock[s] += 3
        xs = rng.integers(0, 25, m)
        ids = np.arange(row, row + m)
        row += m
        if sid == 2:
            b = pa.record_batch({"x": pa.array(xs, pa.int64()), "ts": pa.array(ts, pa.int64()),
                                 "a": pa.array(ids, pa.int64())})
        else:
            b = pa.record_batch({"x": pa.array(xs, pa.float64()), "ts": pa.array(ts, pa.int64()),
                                 "b": pa.array(ids, pa.int64())})
        recs.append(Data(sid, b))
        if rng.random() < 0.4:
            recs.append(Watermark(sid, int(clock[s] - 4)))
    return recs + [End()]


def _reference(recs, length, eps, self_join):
    """Ids of (left, right) pairs, and ids of late rows, tuple at a time."""
    wm = {2: -(1 << 62), 3: -(1 << 62)}
    sides, keys, times, ids, late = [], [], [], [], []
    for r in recs:
        if isinstance(r, Watermark):
            wm[r.stream_id] = max(wm[r.stream_id], r.time)
        elif isinstance(r, Data):
            idc = "a" if r.stream_id == 2 else "b"
            for row in r.batch.to_pylist():
                if row["ts"] <= wm[r.stream_id]:
                    late.append(row[idc])
                    continue
                sides.append(r.stream_id - 2)
                keys.append(float(row["x"]))
                times.append(row["ts"])
                ids.append(row[idc])
    pairs = nested_loop_band_time_join(sides, keys, times, length, -eps, eps, self_join)
    per = [[i for s, i in zip(sides, ids, strict=True) if s == k] for k in (0, 1)]
    out = []
    for g, p in pairs:
        o = 0 if self_join else 1 - sides[g]
        partner = per[o][p]
        out.append((ids[g], partner) if sides[g] == 0 else (partner, ids[g]))
    return out, sorted(late)


@settings(max_examples=25)
@given(seed=st.integers(0, 10_000), length=st.integers(0, 12), eps=st.sampled_from([0.0, 2.0]),
       index=st.sampled_from(["pimtree", "bptree", "ibchain", "nlwj", "pimtree/2", "imtree/3"]),
       self_join=st.booleans())
def test_time_operator_matches_reference(seed, length, eps, index, self_join):
    rng = np.random.default_rng(seed)
    recs = _records(rng, 40, self_join)
    index, _, threads = index.partition("/")
    spec = BandJoin(left=2, right=None if self_join else 3, on="x", eps=eps,
                    window=TimeWindow(length, "ts"), index=index, merge_ratio=0.25,
                    threads=int(threads or 1))
    schemas = _schemas() if not self_join else {2: _schemas()[2]}
    out, h = run_operator(spec, schemas, recs)
    want, late = _reference(recs, length, eps, self_join)
    right = "a_right" if self_join else "b"
    assert list(zip(out.column("a").to_pylist(), out.column(right).to_pylist(), strict=True)) == want
    got_late = []
    for b in h.late:
        got_late += b.column("a" if "a" in b.schema.names else "b").to_pylist()
    assert sorted(got_late) == late
    check_operator(spec, schemas, recs, restore_points=[0, len(recs) // 3, len(recs) - 2])


@pytest.mark.parametrize("index", ["pimtree", "bptree"])
def test_time_window_eviction_bounds_state(index):
    # times in order, a watermark after every batch: the state stays about one window
    spec = BandJoin(left=2, right=3, on="x", eps=1.0, window=TimeWindow(50, "ts"), index=index)
    schemas = _schemas()
    logic = spec.build(schemas)
    held = []
    for i in range(200):
        sid = 2 + i % 2
        ts = pa.array(np.arange(i * 10, i * 10 + 10), pa.int64())
        cols = {"x": pa.array(np.arange(10), schemas[sid].field("x").type), "ts": ts,
                "a" if sid == 2 else "b": pa.array(np.arange(10), pa.int64())}
        logic.on_batch(sid, pa.record_batch(cols))
        logic.on_watermark(sid, i * 10 + 9)
        held.append(logic.core.held())
    assert max(held[50:]) <= 4 * 60  # twice the live tuples of both windows, at most
    core = logic.core
    if index == "pimtree":
        # evicted in place: the index's window starts at the first live tuple, no rebuilds
        assert core.rebuilds == 0
        for s in (0, 1):
            assert core.core.indexes[s].meta[M_W] == core._next(s) - core.live[s] <= 60
    else:
        assert core.rebuilds > 10


@pytest.mark.parametrize("index", ["pimtree", "bptree"])
def test_ordered_by_time_retires_without_watermarks(index):
    # ordered by its time column, each input's own times stand for its watermark: the state
    # stays about one window with no watermark on the path, and rows wait at most a batch
    spec = BandJoin(left=2, right=3, on="x", eps=1.0, window=TimeWindow(50, "ts"), index=index,
                    order="ts")
    schemas = _schemas()
    logic = spec.build(schemas)
    held, waiting = [], []
    for i in range(200):
        sid = 2 + i % 2
        ts = pa.array(np.arange((i // 2) * 20, (i // 2) * 20 + 20, 2) + (sid - 2), pa.int64())
        cols = {"x": pa.array(np.arange(10), schemas[sid].field("x").type), "ts": ts,
                "a" if sid == 2 else "b": pa.array(np.arange(10), pa.int64())}
        logic.on_batch(sid, pa.record_batch(cols))
        held.append(logic.core.held())
        waiting.append(sum(v["waiting"] for v in logic.stats().values()))
    assert max(held[50:]) <= 4 * 60 and max(waiting) <= 10


def test_time_window_bad_input():
    for index, parallel in (("bptree", "auto"), ("ibchain", "round_robin"),
                            ("pimtree", "task_queue"), ("imtree", "round_robin")):
        with pytest.raises(PlanError, match=f"key ranges of an imtree or pimtree.*{index}"):
            BandJoin(left=2, right=3, on="x", eps=1.0, window=TimeWindow(5, "ts"), index=index,
                     threads=2, parallel=parallel)
    with pytest.raises(PlanError, match="key ranges.*'nlwj'"):
        TimeBandCore("nlwj", np.dtype(np.int64), -1, 1, 5, threads=2)
    spec = BandJoin(left=2, right=3, on="x", eps=1.0, window=TimeWindow(5, "t"))
    with pytest.raises(SchemaError, match="time column 't'"):
        spec.output_schema(_schemas())
    with pytest.raises(PlanError, match=">= 0"):
        TimeWindow(-1, "ts")


def _args(**kw):
    base = dict(on="x", eps=None, lower=None, upper=None, window=None, arrival=None, time=None,
                index="pimtree", threads=1, task_size=8, merge_ratio=0.25, insertion_depth=2,
                batch_size=65_536, window_time=None)
    base.update(kw)
    return argparse.Namespace(**base)


def test_command_time_window(tmp_path):
    rng = np.random.default_rng(9)
    left = pa.table({"x": rng.integers(0, 50, 400), "ts": np.sort(rng.integers(0, 2000, 400))})
    right = pa.table({"x": rng.integers(0, 50, 300), "ts": np.sort(rng.integers(0, 2000, 300))})
    got = band_run(left, right, _args(eps=1.0, time="ts", window_time=30, batch_size=37))
    # the reference in the command's arrival order: by time, ties left first
    seq = sorted([(t, 0, i) for i, t in enumerate(left["ts"].to_pylist())]
                 + [(t, 1, i) for i, t in enumerate(right["ts"].to_pylist())])
    tabs = [left.to_pylist(), right.to_pylist()]
    sides = [s for _, s, _ in seq]
    keys = [tabs[s][i]["x"] for _, s, i in seq]
    times = [t for t, _, _ in seq]
    rows = [i for _, _, i in seq]
    pairs = nested_loop_band_time_join(sides, keys, times, 30, -1.0, 1.0)
    per = [[i for s, i in zip(sides, rows, strict=True) if s == k] for k in (0, 1)]
    want = []
    for g, p in pairs:
        other = per[1 - sides[g]][p]
        li, ri = (rows[g], other) if sides[g] == 0 else (other, rows[g])
        want.append((tabs[0][li]["x"], tabs[0][li]["ts"], tabs[1][ri]["x"], tabs[1][ri]["ts"]))
    assert got.schema.names == ["x", "ts", "x_right", "ts_right"]
    assert list(zip(*[got.column(i).to_pylist() for i in range(4)], strict=True)) == want
    assert band_run(left, right, _args(eps=1.0, time="ts", window_time=30, batch_size=37,
                                       threads=2)).equals(got)
    lp, rp, op = tmp_path / "l.parquet", tmp_path / "r.parquet", tmp_path / "o.parquet"
    pq.write_table(left, lp)
    pq.write_table(right, rp)
    rc = main(["join", "--kind", "band", "--left", str(lp), "--right", str(rp), "--on", "x",
               "--eps", "1", "--time", "ts", "--window-time", "30", "--index", "ibchain",
               "--out", str(op), "--json"])
    assert rc == 0
    assert pq.read_table(op).equals(got)
    with pytest.raises(PlanError, match="--time"):
        band_run(left, right, _args(eps=1.0, window_time=30))
    with pytest.raises(PlanError, match="not both"):
        band_run(left, right, _args(eps=1.0, time="ts", window_time=30, window="10"))
