"""Band joins (IBWJ) of every index and thread count against the nested-loop reference."""

from __future__ import annotations

import argparse
from typing import Any
from unittest import mock

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
from splice.index._window import M_CHANGES, M_THRESH, new_descents
from splice.joins.band import band_join as band_join_module
from splice.joins.band._band_kernels import join_seq_run
from splice.joins.band.band_join import BandCore, BandJoin, probe_offsets
from splice.joins.band.band_tables import run as band_run
from splice.joins.common.join_windows import POSITION, TimeWindow
from splice.testing import check_operator, run_operator
from tests.reference.band_join import (
    nested_loop_band_join,
    nested_loop_band_time_join,
    window_band_join,
)
from tests.reference.hash_window_join import merged_order

INDEXES = list(INDEX_KINDS)


def _core_pairs(core, sides, keys, chunk):
    gs, ps = [], []
    for c0 in range(0, len(keys), chunk):
        g, p = core.run(np.array(sides[c0 : c0 + chunk], np.int8), np.array(keys[c0 : c0 + chunk]))
        gs += (g + c0).tolist()
        ps += p.tolist()
    return list(zip(gs, ps, strict=True))


@settings(max_examples=60)
@given(
    index=st.sampled_from(INDEXES),
    data=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 40)), max_size=300),
    wl=st.integers(1, 40),
    wr=st.integers(1, 40),
    band=st.one_of(st.tuples(st.just("eps"), st.sampled_from([0, 0.5, 1, 3])),
                   st.tuples(st.just("range"), st.tuples(st.integers(-5, 5), st.integers(0, 6)))),
    self_join=st.booleans(),
    as_float=st.booleans(),
    chunk=st.sampled_from([1, 2, 7, 49, 50, 51, 100, 1000]),
    merge_ratio=st.sampled_from([0.05, 0.25, 1.0]),
    depth=st.integers(0, 1),
    chain=st.integers(2, 4),
    prefetch=st.sampled_from([0, 1, 2]),
)
def test_core_matches_nested_loops(index, data, wl, wr, band, self_join, as_float, chunk,
                                   merge_ratio, depth, chain, prefetch):
    sides = [0 if self_join else s for s, _ in data]
    keys = [float(k) / 2 if as_float else k for _, k in data]
    if band[0] == "eps":
        lower, upper = -float(band[1]), float(band[1])
    else:
        lower, upper = float(band[1][0]), float(band[1][0] + band[1][1])
    dtype = np.dtype(np.float64 if as_float else np.int64)
    core = BandCore(index, (wl, wr), dtype, lower, upper, self_join, merge_ratio, depth, chain)
    # on by window size only from 2**17 tuples (the inserts' nodes from 2**19): forced here
    core.prefetch = prefetch
    want = nested_loop_band_join(sides, keys, (wl, wr), lower, upper, self_join)
    assert _core_pairs(core, sides, keys, chunk) == want


@settings(max_examples=60)
@given(
    data=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 30)), max_size=200),
    windows=st.tuples(st.integers(1, 30), st.integers(1, 30)),
    lower=st.integers(-4, 2),
    width=st.integers(0, 4),
    self_join=st.booleans(),
)
def test_window_reference_is_the_nested_loop(data, windows, lower, width, self_join):
    sides = [s for s, _ in data]
    keys = [k / 2 for _, k in data]
    assert (window_band_join(sides, keys, windows, lower, lower + width, self_join)
            == nested_loop_band_join(sides, keys, windows, lower, lower + width, self_join))


@pytest.mark.parametrize("index", ["imtree", "pimtree"])
@pytest.mark.parametrize("self_join", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_prefetched_descents_follow_merges(index, self_join, threads):
    """A search starts from the descent its prefetch made, and an insert from the partition its
    prefetch routed to, only while no merge has rebuilt the ``T_S`` they came from since:
    windows of many leaves (and PIM-Tree partitions), a merge every few hundred arrivals, calls
    of mixed streams and of one stream, prefetching forced on (the serial join's at level 2, its
    inserts' nodes too); the serial join and the key-range join (each range on its own
    thread)."""
    rng = np.random.default_rng(11)
    n, windows = 16000, (4200, 5000)
    run_len = rng.integers(1, 400, n)
    sides = (np.repeat(np.arange(len(run_len)) % 2, run_len)[: n // 2].tolist()
             + rng.integers(0, 2, n - n // 2).tolist())
    keys = rng.integers(0, 8000, n).astype(np.float64).tolist()
    join: Any
    if threads == 1:
        join = BandCore(index, windows, np.dtype(np.float64), -2.0, 3.0, self_join,
                        merge_ratio=0.05, insertion_depth=1)
        indexes = join.indexes
    else:
        join = KeyRangeJoin(index, windows, np.dtype(np.float64), -2.0, 3.0, self_join, 0.05, 1,
                            threads)
        join.small_call = 0
        indexes = [part[0] for part in join.parts]
    join.prefetch = 2 if threads == 1 else True
    # the first half in runs of one stream, a call each (the serial join's loop of one stream),
    # the rest interleaved at random, in calls of 700
    cuts = [c for c in np.cumsum(run_len).tolist() if c < n // 2] + list(range(n // 2, n, 700))
    got = []
    for c0, c1 in zip([0] + cuts, cuts + [n], strict=True):
        g, p = join.run(np.array(sides[c0:c1], np.int8), np.array(keys[c0:c1]))
        got += list(zip((g + c0).tolist(), p.tolist(), strict=True))
    assert all(ix.merges > 20 for ix in indexes)
    if index == "pimtree":
        assert all(ix.partitions > 1 for ix in indexes)
    assert got == window_band_join(sides, keys, windows, -2.0, 3.0, self_join)


@pytest.mark.parametrize("chain_length", [2, 3, 5])
@pytest.mark.parametrize("self_join", [False, True])
@pytest.mark.parametrize("short_ring", [False, True])
def test_prefetched_chain_descents_follow_link_changes(chain_length, self_join, short_ring):
    """An IB-chain search starts from the archived links' leaves its prefetch found only while
    no link was opened or disposed of since: links of a few hundred arrivals (several leaves
    each), calls of one stream and of both, prefetching forced on. A ring without room for the
    links (``short_ring``) makes the searches descend themselves."""
    rng = np.random.default_rng(chain_length)
    n, windows = 12000, (600, 700)
    run_len = rng.integers(1, 300, n)
    sides = (np.repeat(np.arange(len(run_len)) % 2, run_len)[: n // 2].tolist()
             + rng.integers(0, 2, n - n // 2).tolist())
    keys = rng.integers(0, 3000, n).astype(np.float64).tolist()
    join = BandCore("ibchain", windows, np.dtype(np.float64), -2.0, 3.0, self_join,
                    chain_length=chain_length)
    join.prefetch = True
    if short_ring:
        join._descents = new_descents()
    cuts = [c for c in np.cumsum(run_len).tolist() if c < n // 2] + list(range(n // 2, n, 700))
    got = []
    for c0, c1 in zip([0] + cuts, cuts + [n], strict=True):
        g, p = join.run(np.array(sides[c0:c1], np.int8), np.array(keys[c0:c1]))
        got += list(zip((g + c0).tolist(), p.tolist(), strict=True))
    assert all(ix.meta[M_CHANGES] > 10 for ix in join.indexes)
    assert got == window_band_join(sides, keys, windows, -2.0, 3.0, self_join)


def test_output_room_follows_the_call_not_the_largest_call():
    # a buffer kept at the largest call's size made every later small call allocate and free
    # megabytes; the room now follows the call's tuples at the highest rate seen
    rng = np.random.default_rng(5)
    core = BandCore("pimtree", (5000, 5000), np.dtype(np.float64), -3.0, 3.0, False)
    sides = rng.integers(0, 2, 40010).astype(np.int8)
    keys = rng.random(40010) * 10000
    g, _ = core.run(sides[:40000], keys[:40000])
    assert len(g) > 2 * 40000  # a rate above the first guess: the room grew within the call
    g, p = core.run(sides[40000:], keys[40000:])
    assert (g.base if g.base is not None else g).size <= 1024 + int(core._rate * 10) + 1
    want = window_band_join(sides.tolist(), keys.tolist(), (5000, 5000), -3.0, 3.0)
    assert [(i + 40000, j) for i, j in zip(g.tolist(), p.tolist(), strict=True)] == [
        (i, j) for i, j in want if i >= 40000]


def test_keys_from_arrow_and_numpy_share_one_compiled_loop():
    # an Arrow column's NumPy view is read-only, a NumPy array writable: numba would compile
    # the join loop (a minute per key type) once for each unless the core makes them one type
    rng = np.random.default_rng(2)
    sides = rng.integers(0, 2, 300).astype(np.int8)
    keys = rng.integers(0, 50, 300)
    arrow_keys = pa.array(keys).to_numpy()
    assert not arrow_keys.flags.writeable and keys.flags.writeable
    got = []
    for k in (keys, arrow_keys):
        core = BandCore("pimtree", (40, 40), np.dtype(np.int64), -2.0, 2.0)
        g, p = core.run(sides, k)
        got.append(list(zip(g.tolist(), p.tolist(), strict=True)))
    want = window_band_join(sides.tolist(), keys.tolist(), (40, 40), -2.0, 2.0)
    assert want and got[0] == want and got[1] == want
    assert join_seq_run.signatures
    # the keys inside the loop's BandArrivals argument
    assert not any(dict(zip(sig[0].fields, sig[0].types, strict=True))["keys"].mutable
                   for sig in join_seq_run.signatures)


def test_integer_bounds_round_inward():
    lo, hi = probe_offsets(-1.5, 2.5, np.dtype(np.int64), False)
    assert lo.tolist() == [-1, -2] and hi.tolist() == [2, 1]


def _schemas():
    return {2: pa.schema([("x", pa.int32()), ("a", pa.string())]),
            3: pa.schema([("x", pa.float32()), ("b", pa.int64())])}


def _records(n=60, seed=0):
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(0, n, 6):
        sid = 2 if (i // 6) % 3 else 3
        xs = rng.integers(0, 30, 6)
        if sid == 2:
            b = pa.record_batch({"x": pa.array(xs, pa.int32()),
                                 "a": [f"r{i + j}" for j in range(6)]})
        else:
            b = pa.record_batch({"x": pa.array(xs, pa.float32()), "b": np.arange(i, i + 6)})
        recs.append(Data(sid, b))
    return recs + [End()]


@pytest.mark.parametrize("index", ["pimtree", "ibchain", "nlwj"])
def test_operator_contract_and_reference(index):
    spec = BandJoin(left=2, right=3, on="x", eps=1.0, window=(7, 5), index=index,
                    merge_ratio=0.25, insertion_depth=0)
    recs = _records()
    got = check_operator(spec, _schemas(), recs, restore_points=[0, 3, 7])
    sides, keys, rows = [], [], []
    for r in recs:
        if isinstance(r, Data):
            for row in r.batch.to_pylist():
                sides.append(0 if r.stream_id == 2 else 1)
                keys.append(float(row["x"]))
                rows.append(row)
    want = nested_loop_band_join(sides, keys, (7, 5), -1.0, 1.0)
    per_side = [[row for s, row in zip(sides, rows, strict=True) if s == k] for k in (0, 1)]
    expect = []
    for g, p in want:
        probe = rows[g]
        partner = per_side[1 - sides[g]][p]
        lrow, rrow = (probe, partner) if sides[g] == 0 else (partner, probe)
        expect.append((lrow["x"], lrow["a"], rrow["x"], rrow["b"]))
    assert got.schema.names == ["x", "a", "x_right", "b"]
    assert list(zip(*[got.column(i).to_pylist() for i in range(4)], strict=True)) == expect


def test_self_join_operator():
    spec = BandJoin(left=2, right=None, on="x", lower=0, upper=2, window=3, index="bptree")
    schema = {2: pa.schema([("x", pa.int64()), ("i", pa.int64())])}
    recs = [Data(2, pa.record_batch({"x": [5, 6, 7, 5, 9], "i": [0, 1, 2, 3, 4]})), End()]
    got = check_operator(spec, schema, recs)
    # a pairs with earlier b when 0 <= b.x - a.x <= 2
    assert got.to_pydict() == {"x": [5, 5, 5], "i": [3, 3, 3], "x_right": [5, 6, 7],
                               "i_right": [0, 1, 2]}


def test_merge_ratio_falls_with_the_window_unless_given():
    def ratio(**kw: Any) -> float:
        return BandJoin(left=2, right=3, on="x", eps=1.0, **kw).ratio

    assert ratio(window=1 << 10) == ratio(window=1 << 13) == 1 / 8
    assert ratio(window=(1 << 10, (1 << 13) + 1)) == ratio(window=1 << 19) == 1 / 16
    assert ratio(window=(1 << 19) + 1) == ratio(window=1 << 23) == 1 / 32
    assert ratio(window=1 << 23, merge_ratio=0.5) == 0.5
    assert ratio(window=TimeWindow(100, "ts")) == 1 / 8
    core = BandJoin(left=2, right=3, on="x", eps=1.0, window=1 << 19,
                    index="imtree").make_core(np.dtype(np.float64))
    assert all(ix.meta[M_THRESH] == (1 << 19) // 16 for ix in core.indexes)


def test_bad_input():
    with pytest.raises(PlanError, match="eps"):
        BandJoin(left=2, right=3, on="x", eps=-1.0)
    with pytest.raises(PlanError, match="window"):
        BandJoin(left=2, right=3, on="x", eps=1.0, window=0)
    with pytest.raises(PlanError, match="merge ratio"):
        BandJoin(left=2, right=3, on="x", eps=1.0, merge_ratio=0.0)
    with pytest.raises(PlanError, match="merge ratio"):
        BandJoin(left=2, right=3, on="x", eps=1.0, merge_ratio=2.0)
    with pytest.raises(PlanError, match="insertion depth"):
        BandJoin(left=2, right=3, on="x", eps=1.0, window=1024, insertion_depth=1)
    with pytest.raises(PlanError, match="threads"):
        BandJoin(left=2, right=3, on="x", eps=1.0, threads=0)
    with pytest.raises(PlanError, match="lower <= upper"):
        BandJoin(left=2, right=3, on="x", lower=2, upper=1)
    spec = BandJoin(left=2, right=3, on="x", eps=1.0, window=4)
    big = pa.array([1, 2**63], pa.uint64())
    with pytest.raises(SchemaError, match=r"stream '3'.*column 'x' \(uint64\) exceeds int64"):
        run_operator(spec, {2: pa.schema([("x", pa.int64())]), 3: pa.schema([("x", pa.uint64())])},
                     [Data(3, pa.record_batch({"x": big}))])
    with pytest.raises(PlanError, match="self-join has one"):
        BandJoin(left=2, right=None, on="x", eps=1.0, order="t")
    with pytest.raises(SchemaError, match="stream 3: band join order column 't' is missing"):
        BandJoin(left=2, right=3, on="x", eps=1.0, order="t").output_schema(
            {2: pa.schema([("x", pa.int64()), ("t", pa.int64())]), 3: pa.schema([("x", pa.int64())])})
    with pytest.raises(SchemaError, match="numeric"):
        spec.output_schema({2: pa.schema([("x", pa.string())]), 3: pa.schema([("x", pa.int64())])})


def _args(**kw):
    base = dict(on="x", eps=1.0, lower=None, upper=None, window="4", index="pimtree", threads=1,
                task_size=4, merge_ratio=None, insertion_depth=None, arrival=None, time=None,
                batch_size=65536)
    base.update(kw)
    return argparse.Namespace(**base)


def test_command_run_and_cli(tmp_path):
    rng = np.random.default_rng(3)
    left = pa.table({"x": rng.integers(0, 50, 300), "t": np.arange(0, 600, 2)})
    right = pa.table({"x": rng.random(200) * 50, "t": np.arange(1, 600, 3)})
    sides = [0] * 300 + [1] * 200
    order = np.argsort(np.concatenate([left["t"].to_numpy(), right["t"].to_numpy()]), kind="stable")
    allkeys = np.concatenate([left["x"].to_numpy(), right["x"].to_numpy()]).astype(float)
    want = nested_loop_band_join([sides[i] for i in order], allkeys[order].tolist(), (16, 8),
                                 -1.0, 1.0)
    ref = None
    for index in INDEXES:
        out = band_run(left, right, _args(window="16,8", index=index, arrival="t", batch_size=33))
        assert out.schema.names == ["x", "t", "x_right", "t_right"]
        assert out.num_rows == len(want)
        if ref is None:
            ref = out
        assert out.equals(ref), index
    lp, rp, op = tmp_path / "l.parquet", tmp_path / "r.parquet", tmp_path / "o.parquet"
    pq.write_table(left, lp)
    pq.write_table(right, rp)
    rc = main(["join", "--kind", "band", "--left", str(lp), "--right", str(rp), "--on", "x",
               "--eps", "1", "--window", "16,8", "--arrival", "t", "--out", str(op), "--json"])
    assert rc == 0
    assert pq.read_table(op).equals(ref)
    for mode in ("key_range", "task_queue"):
        rc = main(["join", "--kind", "band", "--left", str(lp), "--right", str(rp), "--on", "x",
                   "--eps", "1", "--window", "16,8", "--arrival", "t", "--threads", "2",
                   "--parallel-mode", mode, "--out", str(op)])
        assert rc == 0
        assert pq.read_table(op).equals(ref), mode
    rc = main(["join", "--kind", "band", "--left", str(lp), "--right", str(rp), "--on", "x",
               "--eps", "-1", "--window", "16", "--out", str(op)])
    assert rc == 2
    with pytest.raises(PlanError, match="threads"):
        band_run(left, right, _args(threads=0))
    with pytest.raises(PlanError, match="insertion depth"):
        band_run(left, right, _args(insertion_depth=3))


# --- parallel joins -------------------------------------------------------------------------

from splice.joins.band.parallel_band import KeyRangeJoin, RoundRobinJoin, TaskQueueJoin  # noqa: E402


@settings(max_examples=25)
@given(
    data=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 25)), max_size=400),
    wl=st.integers(1, 30),
    wr=st.integers(1, 30),
    eps=st.sampled_from([0, 1, 2]),
    self_join=st.booleans(),
    threads=st.integers(1, 3),
    task=st.sampled_from([1, 2, 3, 8]),
    merge=st.sampled_from(["nonblocking", "blocking"]),
    index=st.sampled_from(["imtree", "pimtree"]),
    merge_ratio=st.sampled_from([0.02, 0.3, 1.0]),
    chunk=st.sampled_from([7, 50, 1000]),
)
def test_task_queue_join_matches_nested_loops(data, wl, wr, eps, self_join, threads, task, merge,
                                              index, merge_ratio, chunk):
    sides = [0 if self_join else s for s, _ in data]
    keys = [k for _, k in data]
    join = TaskQueueJoin(index, (wl, wr), np.dtype(np.int64), -eps, eps, self_join, merge_ratio,
                         1, threads, task, merge)
    want = nested_loop_band_join(sides, keys, (wl, wr), -eps, eps, self_join)
    assert _core_pairs(join, sides, keys, chunk) == want


@settings(max_examples=40)
@given(
    n=st.integers(0, 600),
    seed=st.integers(0, 2**32 - 1),
    domain=st.sampled_from([4, 16, 100]),
    wl=st.integers(1, 30),
    wr=st.integers(1, 30),
    band=st.tuples(st.integers(-3, 3), st.integers(0, 4)),
    self_join=st.booleans(),
    as_float=st.booleans(),
    threads=st.sampled_from([1, 2, 3, 4, 5, 7]),
    index=st.sampled_from(["imtree", "pimtree"]),
    merge_ratio=st.sampled_from([0.02, 0.3, 1.0]),
    chunk=st.sampled_from([1, 7, 20, 1000]),
    prefetch=st.booleans(),
    rebalance_every=st.sampled_from([0, 1, 3]),
    here=st.booleans(),
    slice_min=st.sampled_from([1, 40, 16_384]),
)
def test_key_range_join_matches_nested_loops(n, seed, domain, wl, wr, band, self_join, as_float,
                                             threads, index, merge_ratio, chunk, prefetch,
                                             rebalance_every, here, slice_min):
    # streams of hundreds of tuples (hypothesis' own lists stay short): many keys equal to the
    # ranges' bounds, bands reaching across them, keys drifting so that the ranges move
    rng = np.random.default_rng(seed)
    sides = [0 if self_join else int(s) for s in rng.integers(0, 2, n)]
    drift = np.linspace(0, domain * rng.random(), n)
    keys = [float(k) / 2 if as_float else int(k)
            for k in (rng.integers(0, domain, n) + drift).astype(np.int64)]
    lower, upper = float(band[0]), float(band[0] + band[1])
    dtype = np.dtype(np.float64 if as_float else np.int64)
    join = KeyRangeJoin(index, (wl, wr), dtype, lower, upper, self_join, merge_ratio, 1, threads)
    join.prefetch = prefetch  # on by window size only from 2**17 tuples: forced here
    join.small_call = 10**9 if here else 0  # every call on the calling thread, or none
    join.slice_min = slice_min  # chunks listed and interleaved in one slice or one per thread
    want = nested_loop_band_join(sides, keys, (wl, wr), lower, upper, self_join)
    got = []
    for i, c0 in enumerate(range(0, len(keys), chunk)):
        g, p = join.run(np.array(sides[c0 : c0 + chunk], np.int8),
                        np.array(keys[c0 : c0 + chunk], dtype))
        got += list(zip((g + c0).tolist(), p.tolist(), strict=True))
        if rebalance_every and i % rebalance_every == 0:
            join.rebalance()  # the ranges re-derived from the latest keys, the entries moved
    assert got == want


def test_key_range_join_remembers_the_latest_keys():
    # the keys the ranges are re-derived from: the latest half-windows' worth, kept in a ring
    # (by the listing pass, each thread its slice) that calls of any length wrap around
    from splice.joins.band.parallel_band import RECENT_KEYS

    join = KeyRangeJoin("pimtree", (1 << 17, 1 << 17), np.dtype(np.int64), -1, 1, False, 0.25,
                        1, 2)
    seen = np.zeros(0, np.int64)
    for size in (5, 40_000, 30_000, 1, 70_000, 65_535, 3):
        keys = np.arange(len(seen), len(seen) + size, dtype=np.int64)
        join.run(np.zeros(size, np.int8), keys)
        seen = np.concatenate([seen, keys])
        assert np.array_equal(join._recent_keys(), seen[-RECENT_KEYS:])
    join.windows = (1024, 1024)  # smaller windows: half their worth, at least 1,024
    assert np.array_equal(join._recent_keys(), seen[-1024:])


def test_key_range_join_follows_moving_keys(monkeypatch):
    # keys drifting upwards: each new tuple lands in the last range until the ranges are
    # re-derived; the entries move between ranges and the rows stay the nested-loop join's.
    # Fed in calls of 500 tuples, and in one call cut into chunks of 700 (checked after each),
    # the rows of chunks from 100 tuples on interleaved on every thread
    import splice.joins.band.parallel_band as parallel_band

    monkeypatch.setattr(parallel_band, "CHUNK", 700)
    monkeypatch.setattr(parallel_band, "MERGE_SLICE", 100)
    monkeypatch.setattr(parallel_band, "SMALL_CALL", 0)  # every range on its own thread
    rng = np.random.default_rng(8)
    n = 20_000
    sides = rng.integers(0, 2, n).astype(np.int8)
    keys = np.round(rng.normal(np.linspace(0, 400, n), 3.0)).astype(np.int64)
    ref = BandCore("nlwj", (300, 200), np.dtype(np.int64), -1, 2)
    g0, p0 = ref.run(sides, keys)
    for threads in (2, 3, 5):
        join = KeyRangeJoin("pimtree", (300, 200), np.dtype(np.int64), -1, 2, False, 0.25, 1,
                            threads)
        gs, ps = [], []
        for c0 in range(0, n, 500):
            g, p = join.run(sides[c0 : c0 + 500], keys[c0 : c0 + 500])
            gs.append(g + c0)
            ps.append(p)
        assert np.array_equal(np.concatenate(gs), g0) and np.array_equal(np.concatenate(ps), p0)
        assert join.rebalances >= 5, join.rebalances
        held = [sum(ix.state.ibt_meta[0, 0] for ix in part) for part in join.parts]
        assert min(held) > 0, held  # every range holds part of the windows after the drift
        whole = KeyRangeJoin("pimtree", (300, 200), np.dtype(np.int64), -1, 2, False, 0.25, 1,
                             threads)
        g, p = whole.run(sides, keys)
        assert np.array_equal(g, g0) and np.array_equal(p, p0)
        assert whole.rebalances >= 5, whole.rebalances


@settings(max_examples=15)
@given(
    data=st.lists(st.tuples(st.integers(0, 1), st.floats(0, 20)), max_size=300),
    wl=st.integers(1, 30),
    wr=st.integers(1, 30),
    self_join=st.booleans(),
    threads=st.integers(2, 3),
    index=st.sampled_from(INDEXES),
)
def test_round_robin_join_matches_nested_loops(data, wl, wr, self_join, threads, index):
    sides = [0 if self_join else s for s, _ in data]
    keys = [k for _, k in data]
    join = RoundRobinJoin(index, (wl, wr), np.dtype(np.float64), -1.0, 1.0, self_join, 0.25, 1,
                          3, threads)
    want = nested_loop_band_join(sides, keys, (wl, wr), -1.0, 1.0, self_join)
    assert _core_pairs(join, sides, keys, 64) == want


@pytest.mark.parametrize("merge", ["nonblocking", "blocking"])
def test_parallel_stress_tiny_windows_frequent_merges(merge):
    rng = np.random.default_rng(11)
    n = 30_000
    sides = rng.integers(0, 2, n).astype(np.int8)
    keys = rng.integers(0, 50, n)
    for w, task in (((1, 2), 1), ((3, 5), 2), ((16, 16), 3)):
        ref = BandCore("nlwj", w, np.dtype(np.int64), -1, 1)
        g0, p0 = ref.run(sides, keys)
        join = TaskQueueJoin("pimtree", w, np.dtype(np.int64), -1, 1, False, 0.01, 1, 3, task,
                             merge)
        g, p = join.run(sides, keys)
        assert np.array_equal(g, g0) and np.array_equal(p, p0), (w, task)
        # blocking merges happen at every trigger; nonblocking ones are skipped while another
        # is in progress, so how many run depends on thread timing
        assert join.merges > (100 if merge == "blocking" else 0), (w, task, join.merges)


@pytest.mark.parametrize("parallel", ["auto", "task_queue", "key_range"])
def test_parallel_operator_contract(parallel):
    spec = BandJoin(left=2, right=3, on="x", eps=1.0, window=(7, 5), index="pimtree",
                    merge_ratio=0.25, insertion_depth=0, threads=2, task_size=2,
                    parallel=parallel)
    serial = BandJoin(left=2, right=3, on="x", eps=1.0, window=(7, 5), index="nlwj")
    recs = _records(120, seed=5)
    got = check_operator(spec, _schemas(), recs, restore_points=[0, 5, 11])
    want, _ = run_operator(serial, _schemas(), recs)
    assert got.equals(want)
    rr = BandJoin(left=2, right=3, on="x", eps=1.0, window=(7, 5), index="bptree", threads=3)
    got, _ = run_operator(rr, _schemas(), recs)
    assert got.equals(want)
    with pytest.raises(PlanError, match="task-queue"):
        BandJoin(left=2, right=3, on="x", eps=1.0, index="bptree", threads=2,
                 parallel="task_queue")
    with pytest.raises(PlanError, match="key-range"):
        BandJoin(left=2, right=3, on="x", eps=1.0, index="nlwj", threads=2,
                 parallel="key_range")


def test_command_threads(tmp_path):
    rng = np.random.default_rng(4)
    left = pa.table({"x": rng.random(5000) * 100})
    right = pa.table({"x": rng.random(4000) * 100})
    want = band_run(left, right, _args(window="300", index="nlwj", eps=0.05))
    for index, threads, mode in (("pimtree", 2, "auto"), ("imtree", 3, "key_range"),
                                 ("pimtree", 2, "task_queue"), ("ibchain", 2, "auto"),
                                 ("nlwj", 2, "round_robin")):
        got = band_run(left, right, _args(window="300", index=index, threads=threads, eps=0.05,
                                          batch_size=1000, parallel_mode=mode))
        assert got.equals(want), (index, threads, mode)


def _stream_and_nested_loops(seed, n, key_range, windows, eps):
    """A seeded two-stream input of ``n`` integer keys below ``key_range`` and the nested-loop
    join's rows over ``windows`` and the band ``[-eps, eps]``."""
    rng = np.random.default_rng(seed)
    sides = rng.integers(0, 2, n).astype(np.int8)
    keys = rng.integers(0, key_range, n)
    ref = BandCore("nlwj", windows, np.dtype(np.int64), -eps, eps)
    return sides, keys, ref.run(sides, keys)


@pytest.mark.parametrize("threads", [4, 8])
def test_task_queue_many_threads_and_statistics(threads):
    # more threads than cores: preempted lock holders and merges under contention
    n = 6000
    sides, keys, (g0, p0) = _stream_and_nested_loops(threads, n, 400, (300, 200), 2)
    join = TaskQueueJoin("pimtree", (300, 200), np.dtype(np.int64), -2, 2, False, 0.5, 1,
                         threads, 2)
    g, p = join.run(sides, keys)
    assert np.array_equal(g, g0) and np.array_equal(p, p0)
    lat = np.concatenate(join.task_latency)
    assert len(lat) == n // 2 and (lat >= 0).all()
    assert join.merges > 0 and join.waits.shape == (5,)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_task_queue_join_over_many_chunks(monkeypatch, threads):
    # small chunks: scratch and thread buffers reused from chunk to chunk, each chunk's rows
    # written after the previous ones, and more rows than the first result buffer holds
    import splice.joins.band.parallel_band as parallel_band

    monkeypatch.setattr(parallel_band, "CHUNK", 97)
    n = 5000
    sides, keys, (g0, p0) = _stream_and_nested_loops(threads, n, 6, (16, 9), 1)
    assert len(g0) > 2 * n + 1024
    join = TaskQueueJoin("pimtree", (16, 9), np.dtype(np.int64), -1, 1, False, 0.25, 1,
                         threads, 4)
    for part in (slice(0, 1234), slice(1234, n)):
        g, p = join.run(sides[part], keys[part])
        mine = (g0 >= part.start) & (g0 < part.stop)
        assert np.array_equal(g + part.start, g0[mine]) and np.array_equal(p, p0[mine])


# --- keys that never match ---------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    data=st.lists(st.tuples(st.integers(0, 1), st.one_of(
        st.integers(0, 20), st.none(), st.sampled_from([float("nan"), float("inf"), -float("inf")]))),
        max_size=120),
    as_float=st.booleans(),
    index=st.sampled_from(["pimtree", "bptree", "ibchain", "nlwj"]),
    windows=st.tuples(st.integers(1, 12), st.integers(1, 12)),
    chunk=st.sampled_from([1, 7, 50]),
)
def test_null_nan_and_infinite_keys_never_match_and_are_counted(data, as_float, index, windows, chunk):
    """A null or NaN key (and an infinite one) joins nothing, never raises, still takes its place
    in its count window, and is counted per input."""
    if not as_float:  # integer keys: only nulls can be missing
        data = [(s, k if k is None or isinstance(k, int) else None) for s, k in data]
    typ = pa.float64() if as_float else pa.int64()
    schemas = {2: pa.schema([("x", typ), ("i", pa.int64())]), 3: pa.schema([("x", typ), ("i", pa.int64())])}
    recs = []
    for c0 in range(0, len(data), chunk):
        part = data[c0:c0 + chunk]
        for side in (0, 1):
            rows = [(c0 + j, k) for j, (s, k) in enumerate(part) if s == side]
            if rows:
                recs.append(Data(2 + side, pa.record_batch(
                    {"x": pa.array([k for _, k in rows], typ, from_pandas=False),
                     "i": [g for g, _ in rows]}, schema=schemas[2 + side])))
    order = [i for r in recs for i in r.batch.column("i").to_pylist()]
    spec = BandJoin(left=2, right=3, on="x", eps=1.0, window=windows, index=index)
    out, h = run_operator(spec, schemas, recs)
    keys = [data[i][1] for i in order]
    sides = [data[i][0] for i in order]
    want = nested_loop_band_join(sides, [None if k is None else float(k) for k in keys], windows, -1.0, 1.0)
    per = [[order[g] for g, s in enumerate(sides) if s == k] for k in (0, 1)]
    expect = [(order[g], per[1 - sides[g]][p]) if sides[g] == 0 else (per[1 - sides[g]][p], order[g])
              for g, p in want]
    assert list(zip(out.column("i").to_pylist(), out.column("i_right").to_pylist(), strict=True)) == expect
    stats = h.logic.stats()
    for s, name in enumerate(("left", "right")):
        mine = [k for side, k in data if side == s]
        assert stats[name]["null_keys"] == sum(k is None or (isinstance(k, float) and k != k) for k in mine)
        assert stats[name]["infinite_keys"] == sum(isinstance(k, float) and abs(k) == float("inf") for k in mine)


# --- the arrival order inside the operator ----------------------------------------------------

OSCHEMAS = {2: pa.schema([("x", pa.int64()), ("id", pa.int64()), ("t", pa.int64()), ("pos", pa.int64())]),
            3: pa.schema([("x", pa.float64()), ("id", pa.int64()), ("t", pa.int64()), ("pos", pa.int64())])}


@st.composite
def _two_inputs(draw, max_rows=80):
    """Two inputs: ``x`` (nulls, duplicates), ``id`` the row, ``t`` nondecreasing per input
    (ties within and across inputs), ``pos`` one random interleaving's global position."""
    n = draw(st.integers(0, max_rows))
    sides = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    keys = draw(st.lists(st.one_of(st.none(), st.integers(0, 12)), min_size=n, max_size=n))
    steps = draw(st.lists(st.sampled_from([0, 0, 1, 2, 3]), min_size=n, max_size=n))
    out = []
    for s in (0, 1):
        idx = [i for i in range(n) if sides[i] == s]
        out.append({"x": [keys[i] for i in idx], "id": list(range(len(idx))),
                    "t": np.cumsum([steps[i] for i in idx], dtype=np.int64).tolist(), "pos": idx})
    return out


def _path(draw, inputs, watermarks):
    """Each input cut into batches (sizes 1, 2, 7, 49, 50, 51, 100 or random), the two inputs'
    batches in a random interleaving, now and then a watermark lagging the batch's newest time."""
    cuts = []
    for cols in inputs:
        n = len(cols["id"])
        split = draw(st.sampled_from([1, 2, 7, 49, 50, 51, 100, "random"]))
        sizes = draw(st.lists(st.integers(1, 12), min_size=n, max_size=n)) if split == "random" else [split] * n
        bounds, at = [], 0
        for size in sizes:
            if at >= n:
                break
            bounds.append((at, min(n, at + size)))
            at += size
        cuts.append(bounds)
    recs, nxt = [], [0, 0]
    for s in draw(st.permutations([0] * len(cuts[0]) + [1] * len(cuts[1]))):
        a, b = cuts[s][nxt[s]]
        nxt[s] += 1
        schema = OSCHEMAS[2 + s]
        recs.append(Data(2 + s, pa.record_batch({c: pa.array(inputs[s][c][a:b], schema.field(c).type)
                                                 for c in schema.names}, schema=schema)))
        if watermarks and draw(st.booleans()):
            recs.append(Watermark(2 + s, inputs[s]["t"][b - 1] - draw(st.integers(-1, 6))))
    return recs


def _ordered_reference(inputs, order, window, recs):
    """(left id, right id) of the nested-loop join over the rows not late on this path, merged
    by ``order`` (ties left first); and the late rows' (stream, id)."""
    wm, late = {2: None, 3: None}, [set(), set()]
    for r in recs:
        if isinstance(r, Watermark):
            wm[r.stream_id] = r.time if wm[r.stream_id] is None else max(wm[r.stream_id], r.time)
        elif isinstance(r, Data) and isinstance(window, TimeWindow) and wm[r.stream_id] is not None:
            late[r.stream_id - 2] |= {i for i, t in zip(r.batch.column("id").to_pylist(),
                                                        r.batch.column("t").to_pylist(), strict=True)
                                      if t <= wm[r.stream_id]}
    kept = [[i for i in cols["id"] if i not in late[s]] for s, cols in enumerate(inputs)]
    if order == POSITION:
        seq = merged_order(None, None, (len(kept[0]), len(kept[1])))
    else:
        seq = merged_order([inputs[0][order][i] for i in kept[0]], [inputs[1][order][i] for i in kept[1]])
    rows = [(s, kept[s][j]) for s, j in seq]
    sides = [s for s, _ in rows]
    keys = [inputs[s]["x"][i] for s, i in rows]
    keys = [None if k is None else float(k) for k in keys]
    if isinstance(window, TimeWindow):
        pairs = nested_loop_band_time_join(sides, keys, [inputs[s]["t"][i] for s, i in rows],
                                           window.length, -1.0, 1.0)
    else:
        pairs = nested_loop_band_join(sides, keys, window, -1.0, 1.0)
    out = []
    for g, p in pairs:
        s, i = rows[g]
        other = kept[1 - s][p]
        out.append((i, other) if s == 0 else (other, i))
    return out, sorted((2 + s, i) for s in (0, 1) for i in late[s])


@settings(max_examples=50, deadline=None)
@given(data=st.data(), inputs=_two_inputs(), order=st.sampled_from(["t", "pos", POSITION]),
       window=st.one_of(st.tuples(st.integers(1, 30), st.integers(1, 30)),
                        st.builds(TimeWindow, st.integers(0, 8), st.just("t"))),
       index=st.sampled_from(["pimtree", "bptree", "ibchain", "nlwj", "pimtree/2", "imtree/3"]),
       time_slice=st.sampled_from([1, 5, 1 << 15]))
def test_order_inside_the_operator_equals_the_merged_sequence(data, inputs, order, window, index,
                                                               time_slice):
    """Whatever batches the path cuts and however it interleaves the two inputs, the operator
    joins their rows in the order of ``order`` (ties left first): the rows, in the order, of the
    nested-loop join over that merged sequence; late rows go to the late output. (Time windows
    ordered by time join long releases in slices, retiring between them.)"""
    index, _, threads = index.partition("/")
    recs = _path(data.draw, inputs, isinstance(window, TimeWindow))
    spec = BandJoin(left=2, right=3, on="x", eps=1.0, window=window, index=index, merge_ratio=0.25,
                    threads=int(threads or 1), order=order)
    with mock.patch.object(band_join_module, "TIME_SLICE", time_slice):
        out, h = run_operator(spec, OSCHEMAS, [*recs, End()])
    want, late = _ordered_reference(inputs, order, window, recs)
    assert list(zip(out.column("id").to_pylist(), out.column("id_right").to_pylist(), strict=True)) == want
    assert sorted((sid, i) for sid, b in zip(h.late_inputs, h.late, strict=True)
                  for i in b.column("id").to_pylist()) == late
    assert all(v["waiting"] == 0 for v in h.logic.stats().values())


@pytest.mark.parametrize("window", [(6, 4), TimeWindow(3, "t")], ids=["count", "time"])
@pytest.mark.parametrize("order", ["t", POSITION])
@pytest.mark.parametrize("index", ["pimtree", "bptree", "pimtree/2"])
def test_ordered_operator_contract(window, order, index):
    """Snapshot/restore before every record (rows waiting for their place included), empty
    batches, reordered columns: the uninterrupted output, in order."""
    index, _, threads = index.partition("/")
    rng = np.random.default_rng(8)
    inputs = [{"x": [None if v == 0 else int(v) for v in rng.integers(0, 9, 40)], "id": list(range(40)),
               "t": np.cumsum(rng.integers(0, 3, 40)).tolist(), "pos": list(range(40))} for _ in (0, 1)]
    recs, at = [], [0, 0]
    while at[0] < 40 or at[1] < 40:
        s = int(rng.integers(0, 2)) if at[0] < 40 and at[1] < 40 else (0 if at[0] < 40 else 1)
        hi = min(40, at[s] + int(rng.integers(1, 8)))
        schema = OSCHEMAS[2 + s]
        recs.append(Data(2 + s, pa.record_batch({c: pa.array(inputs[s][c][at[s]:hi], schema.field(c).type)
                                                 for c in schema.names}, schema=schema)))
        if isinstance(window, TimeWindow) and rng.random() < 0.3:
            recs.append(Watermark(2 + s, inputs[s]["t"][hi - 1] - 1))
        at[s] = hi
    recs.append(End())
    spec = BandJoin(left=2, right=3, on="x", eps=1.0, window=window, index=index, merge_ratio=0.25,
                    threads=int(threads or 1), order=order)
    got = check_operator(spec, OSCHEMAS, recs)
    want, _ = _ordered_reference(inputs, order, window, recs)
    assert list(zip(got.column("id").to_pylist(), got.column("id_right").to_pylist(), strict=True)) == want
    assert len(want) > 10


def test_ordered_rows_out_of_order_name_the_stream_column_and_row():
    spec = BandJoin(left=2, right=3, on="x", eps=1.0, window=4, order="t")
    logic = spec.build(OSCHEMAS)
    schema = OSCHEMAS[3]
    logic.on_batch(3, pa.record_batch({"x": [1.0], "id": [0], "t": [4], "pos": [0]}, schema=schema))
    with pytest.raises(SchemaError, match=r"stream 3 .*column 't'.*row 1 \(row 0 of this batch\) has 3 after 4"):
        logic.on_batch(3, pa.record_batch({"x": [1.0], "id": [1], "t": [3], "pos": [1]}, schema=schema))


@pytest.mark.parametrize("typ,far", [(pa.int64(), 1 << 61), (pa.float64(), 1e300)])
def test_keys_that_never_match_stay_apart_from_keys_near_their_stand_in(typ, far):
    """A key that cannot match is indexed under a stand-in far from real keys; a real key there
    finds it as a candidate, and the pair is dropped."""
    schemas = {2: pa.schema([("x", typ)]), 3: pa.schema([("x", typ)])}
    for order in (None, POSITION):
        spec = BandJoin(left=2, right=3, on="x", eps=1.0, window=8, index="bptree", order=order)
        bad = [None, float("nan")] if pa.types.is_floating(typ) else [None]
        out, h = run_operator(spec, schemas, [
            Data(2, pa.record_batch({"x": pa.array([*bad, far], typ)})),
            Data(3, pa.record_batch({"x": pa.array([far, -far], typ)})), End()])
        assert out.to_pydict() == {"x": [far], "x_right": [far]}
        assert h.logic.stats()["left"]["null_keys"] == len(bad)
