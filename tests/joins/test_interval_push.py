"""The interval join's push path: its bookkeeping kernels against their twins, the payload gather
from cached column views against Arrow's ``take``, and the derived caches (views, key index,
byte totals, batch starts) against a recount after arrivals, retirement, demotion and restore."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import InternalError
from splice.joins.temporal._interval_kernels import (
    gather_bits,
    gather_var,
    hash_band_pairs,
    is_arange,
    locate,
    time_range,
    var_parts,
)
from splice.joins.temporal._key_index import KeyIndex
from splice.joins.temporal.interval_join import (
    _BATCH_OVERHEAD,
    IntervalJoin,
    IntervalJoinLogic,
    _column_plan,
    _IntervalSide,
    column_views,
)
from splice.testing import rows_of, run_operator
from tests.joins.test_interval_join import L, R, _schemas
from tests.reference.temporal_kernels import (
    band_pairs_py,
    gather_bits_py,
    gather_var_py,
    index_probe_py,
    locate_py,
    time_range_py,
)

# -- kernels and their twins ------------------------------------------------------------------


@given(st.lists(st.integers(-50, 50), min_size=1, max_size=40))
def test_time_range_matches_twin(values):
    t = np.array(values, dtype=np.int64)
    assert tuple(time_range(t)) == time_range_py(t)


@given(st.lists(st.integers(0, 6), max_size=20), st.integers(0, 8))
def test_is_arange(values, n):
    pi = np.array(values, dtype=np.int64)
    assert is_arange(pi, n) == (len(pi) == n and pi.tolist() == list(range(n)))


@given(st.lists(st.integers(1, 9), min_size=1, max_size=6), st.data())
def test_locate_matches_twin(sizes, data):
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    total = int(sum(sizes))
    ids = np.array(data.draw(st.lists(st.integers(0, total - 1), min_size=1, max_size=30)),
                   dtype=np.int64)
    if data.draw(st.booleans()):
        ids = np.unique(ids)  # the common case: every opposite row once, in arrival order
    got, want = locate(ids, starts), locate_py(ids, starts)
    for g, w in zip(got, want, strict=True):
        assert g.tolist() == w.tolist()
    rows, inv, groups, cuts = got
    # every pair finds its row id back: batch start + row within the batch
    batch_of = np.repeat(groups, np.diff(cuts))
    ids_back = rows + starts[batch_of]
    assert (ids_back[inv] if len(inv) else ids_back).tolist() == ids.tolist()


@given(st.lists(st.booleans(), min_size=1, max_size=70), st.integers(0, 9), st.data())
def test_gather_bits_matches_twin(flags, offset, data):
    bits = np.packbits(np.array([False] * offset + flags), bitorder="little")
    rows = np.array(data.draw(st.lists(st.integers(0, len(flags) - 1), max_size=40)),
                    dtype=np.int64)
    got = gather_bits(bits, offset, rows)
    assert got.tolist() == gather_bits_py(bits, offset, rows).tolist()
    assert np.unpackbits(got, bitorder="little")[: len(rows)].tolist() == [
        int(flags[r]) for r in rows.tolist()]


@pytest.mark.parametrize("large", [False, True])
@given(st.lists(st.one_of(st.none(), st.binary(max_size=12)), min_size=1, max_size=30),
       st.data())
def test_gather_var_matches_twin(large, values, data):
    arr = pa.array(values, pa.large_binary() if large else pa.binary())
    bufs = arr.buffers()
    off = np.frombuffer(bufs[1], np.int64 if large else np.int32)[: len(arr) + 1]
    dat = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    bits = np.frombuffer(bufs[0], np.uint8) if arr.null_count else np.zeros(0, np.uint8)
    rows = np.array(data.draw(st.lists(st.integers(0, len(values) - 1), max_size=40)),
                    dtype=np.int64)
    gathered = gather_var(off, dat, bits, 0, rows)
    buf, off_at, data_at = gathered
    assert off_at % 8 == 0 and data_at % 8 == 0 and off_at >= (len(rows) + 7) // 8
    got = var_parts(gathered, len(rows), off.dtype.type, bool(arr.null_count))
    want = gather_var_py(off, dat, bits, 0, rows)
    assert got[0].dtype == off.dtype and got[0].tolist() == want[0].tolist()
    assert bytes(got[1]) == bytes(want[1]) == b"".join(values[r] or b"" for r in rows.tolist())
    assert got[2].tolist() == want[2].tolist()
    if arr.null_count:
        flags = np.unpackbits(got[2], bitorder="little")[: len(rows)].tolist()
        assert flags == [int(values[r] is not None) for r in rows.tolist()]


def test_key_index_table_always_has_a_free_slot():
    # distinct codes up to the capacity: the probe of an absent code must still end
    for n in (0, 1, 40, 63, 64, 100, 1000):
        idx = KeyIndex(np.arange(n, dtype=np.int64), np.zeros(n, np.int64),
                       np.arange(n, dtype=np.int64))
        cap = idx.capacity
        extra = cap - n
        idx.insert(np.arange(n, n + extra, dtype=np.int64), np.zeros(extra, np.int64),
                   np.arange(n, n + extra, dtype=np.int64))
        assert idx.table.shape[0] > cap
        pi, rid = idx.probe(np.array([-5, 0], np.int64), np.zeros(2, np.int64), 0, 0)
        assert rid.tolist() == ([0] if cap else [])
        twin = index_probe_py(idx.e_code, idx.e_time, idx.n, np.array([-5, 0]),
                              np.zeros(2, np.int64), 0, 0)
        assert pi.tolist() == twin[0].tolist()


# -- the payload gather against Arrow's take --------------------------------------------------

_ARRAYS = [
    pa.array([1, None, 3, 4, None, 6, 7, 8, 9, 10], pa.int64()),
    pa.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], pa.int8()),
    pa.array([0.5, None, -0.0, float("nan"), 2, 3, 4, 5, 6, 7], pa.float32()),
    pa.array(np.arange(10, dtype=np.float16)),
    pa.array(["a", None, "ccc", "", "dddd", None, "e", "ff", "g", "hhhhhhhh"]),
    pa.array([b"x", b"", None, b"yy", b"z", b"w", b"v", b"u", b"t", b"s"], pa.large_binary()),
    pa.array(["p", "q", None, "r", "s", "t", "u", "v", "w", "x"], pa.large_string()),
    pa.array(list(range(10)), pa.timestamp("ms", tz="UTC")),
    pa.array(list(range(10)), pa.date32()),
    pa.array([None] + list(range(9)), pa.duration("us")),
    pa.array([True, None, False, True, False, True, True, False, None, True]),
    pa.array(["a", "b", "a", None, "c", "a", "b", "c", "a", "b"]).dictionary_encode(),
    pa.array([Decimal("1.5"), None] + [Decimal(i) for i in range(8)], pa.decimal128(10, 2)),
    pa.array([[1], None, [2, 3], [], [4], [5], [6], [7], [8], [9]]),
]


@pytest.mark.parametrize("arr", _ARRAYS, ids=[str(a.type) for a in _ARRAYS])
@given(st.lists(st.integers(0, 7), min_size=1, max_size=25), st.integers(0, 2))
def test_column_view_take_equals_arrow_take(arr, rows, offset):
    sliced = arr.slice(offset, 8)  # views must honour array offsets (values and validity bits)
    (view,) = column_views([sliced], [_column_plan(sliced.type)])
    idx = np.array(rows, dtype=np.int64)
    got = view.take(idx)
    want = sliced.take(pa.array(idx))
    assert got.type == want.type
    assert got.to_pylist() == want.to_pylist() or (
        repr(got.to_pylist()) == repr(want.to_pylist()))  # NaN != NaN
    got.validate(full=True)


def test_column_plans():
    assert _column_plan(pa.int64())[0] == "fixed"
    assert _column_plan(pa.string())[0] == "var"
    assert _column_plan(pa.large_binary()) == ("var", np.int64)
    for t in (pa.bool_(), pa.decimal128(5, 1), pa.list_(pa.int8()),
              pa.dictionary(pa.int8(), pa.string()), pa.month_day_nano_interval()):
        assert _column_plan(t)[0] == "arrow"


# -- derived caches against a recount ---------------------------------------------------------


def _recount(side: _IntervalSide) -> int:
    """The side's bytes from scratch: every retained batch, then the index."""
    total = 0
    for b in side.batches:
        m = b.matched
        total += (b.batch.nbytes + b.times.nbytes + b.codes.nbytes
                  + (m.nbytes if m is not None else 0) + _BATCH_OVERHEAD)
    return total + (side.index.nbytes if side.index is not None else 0)


def _check_caches(logic: IntervalJoinLogic) -> None:
    for side in (logic.L, logic.R):
        assert side.nbytes == _recount(side)
        assert side.starts.tolist() == [b.start for b in side.batches]
        assert side.n_alive == sum(int((b.times > side.threshold).sum()) for b in side.batches)
        if side.index is not None:
            assert side.n_alive > logic.index_threshold
            alive = [b.start + np.flatnonzero(b.times > side.threshold) for b in side.batches]
            assert sorted(side.index.row_ids.tolist()) == np.concatenate(alive).tolist()
            assert all(b.views is not None for b in side.batches)  # made with the index


@settings(max_examples=25)
@given(st.sampled_from(["inner", "full"]), st.sampled_from([0, 5, 40]), st.data())
def test_caches_follow_arrivals_retirement_demotion_and_restore(how, threshold, data):
    ls, rs = _schemas()
    spec = IntervalJoin(left=L, right=R, on="k", time="ts", lower=-6, upper=6, how=how,
                        index_threshold=threshold)
    logic = spec.build({L: ls, R: rs})
    assert isinstance(logic, IntervalJoinLogic)
    t = 0
    records = []
    for step in range(data.draw(st.integers(1, 25))):
        kind = data.draw(st.sampled_from(["left", "right", "right", "wm"]))
        if kind == "wm":
            sid = data.draw(st.sampled_from([L, R]))
            at = t - data.draw(st.integers(0, 20))
            records.append(("wm", sid, at))
            logic.on_watermark(sid, at)
        else:
            n = data.draw(st.integers(1, 30))
            ts = t + np.sort(np.array(data.draw(st.lists(st.integers(0, 8), min_size=n,
                                                         max_size=n)), dtype=np.int64))
            ks = np.array(data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)))
            if kind == "left":
                batch = pa.record_batch({"k": ks, "ts": ts, "v": ts}, schema=ls)
                sid = L
            else:
                batch = pa.record_batch({"k": ks, "ts": ts, "w": ts.astype(str)}, schema=rs)
                sid = R
            records.append(("data", sid, batch))
            logic.on_batch(sid, batch)
            t = int(ts.max())
        _check_caches(logic)
        # restore mid-stream: no index, no views, same byte total; rebuilt at the first probe
        if step == 3:
            snap = logic.snapshot()
            fresh = spec.build({L: ls, R: rs}, snap)
            assert isinstance(fresh, IntervalJoinLogic)
            for s in (fresh.L, fresh.R):
                assert s.index is None and all(b.views is None for b in s.batches)
            assert fresh.state_bytes() == sum(_recount(s) for s in (fresh.L, fresh.R))
    logic.on_end()
    assert logic.state_bytes() == 0 and not logic.L.batches and not logic.R.batches


def test_demotion_drops_the_index_and_its_bytes_and_answers_stay_equal():
    ls, rs = _schemas()
    spec = IntervalJoin(left=L, right=R, on="k", time="ts", lower=-10, upper=10, how="left",
                        index_threshold=100)
    logic = spec.build({L: ls, R: rs})
    assert isinstance(logic, IntervalJoinLogic)
    ts = np.arange(300, dtype=np.int64)
    logic.on_batch(L, pa.record_batch({"k": ts % 13, "ts": ts, "v": ts}, schema=ls))
    assert logic.indexed(L) and logic.L.index is not None
    with_index = logic.state_bytes()
    assert with_index == sum(_recount(s) for s in (logic.L, logic.R))
    logic.on_watermark(R, 230)  # left rows with ts + 10 <= 230 retire: 79 remain
    assert logic.retained(L).num_rows == 79 and not logic.indexed(L)
    assert logic.state_bytes() == sum(_recount(s) for s in (logic.L, logic.R)) < with_index
    # the next probe goes through the full probe over the surviving rows and finds them
    out = logic.on_batch(R, pa.record_batch({"k": [0, 1], "ts": [260, 299], "w": ["a", "b"]},
                                            schema=rs))
    got = Counter((r[2], r[5]) for b in out for r in rows_of(pa.Table.from_batches([b])))
    want = Counter((int(x), w) for w, k, at in (("a", 0, 260), ("b", 1, 299))
                   for x in ts[(ts > 221) & (ts % 13 == k) & (abs(ts - at) <= 10)])
    assert got == want


def test_restored_operator_rebuilds_index_and_views_at_first_probe():
    ls, rs = _schemas()
    spec = IntervalJoin(left=L, right=R, on="k", time="ts", lower=-5, upper=5,
                        index_threshold=50)
    ts = np.arange(200, dtype=np.int64)
    records_l = pa.record_batch({"k": ts % 7, "ts": ts, "v": ts}, schema=ls)
    probe = pa.record_batch({"k": [4, 3], "ts": [100, 150], "w": ["x", "y"]}, schema=rs)
    logic = spec.build({L: ls, R: rs})
    assert isinstance(logic, IntervalJoinLogic)
    logic.on_batch(L, records_l)
    fresh = spec.build({L: ls, R: rs}, logic.snapshot())
    assert isinstance(fresh, IntervalJoinLogic)
    assert not fresh.indexed(L) and fresh.L.batches[0].views is None
    want = rows_of(pa.Table.from_batches(logic.on_batch(R, probe)))
    got = rows_of(pa.Table.from_batches(fresh.on_batch(R, probe)))
    assert got == want and got
    assert fresh.indexed(L) and fresh.L.batches[0].views is not None


def test_repeated_opposite_rows_and_several_batches_gather_in_pair_order():
    # one left row matched by many right rows, across several retained batches, with nulls in
    # the payload: output equals the plain (never indexed) operator row for row
    ls, rs = _schemas()
    rng = np.random.default_rng(5)
    records = []
    from splice.core.records import Data, End

    for i in range(6):
        ts = np.sort(rng.integers(i * 50, i * 50 + 60, 40)).astype(np.int64)
        v = pa.array([None if x % 5 == 0 else int(x) for x in range(40)], pa.int64())
        records.append(Data(L, pa.record_batch({"k": rng.integers(0, 3, 40), "ts": ts, "v": v},
                                               schema=ls)))
        w = pa.array([None if x % 4 == 0 else f"w{x}" * (x % 3) for x in range(40)])
        records.append(Data(R, pa.record_batch({"k": rng.integers(0, 3, 40), "ts": ts, "w": w},
                                               schema=rs)))
    records.append(End())
    outs = []
    for threshold in (0, 10**9):
        spec = IntervalJoin(left=L, right=R, on="k", time="ts", lower=-30, upper=30, how="full",
                            index_threshold=threshold)
        got, _ = run_operator(spec, {L: ls, R: rs}, records)
        got.validate(full=True)
        outs.append(rows_of(got))
    assert outs[0] == outs[1]


@settings(max_examples=60)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(-40, 40)), max_size=60),
       st.lists(st.tuples(st.integers(0, 5), st.integers(-40, 40)), max_size=30),
       st.integers(-12, 6), st.integers(0, 12), st.integers(-30, 30))
def test_key_index_time_buckets_equal_brute_force(entries, probes, lo, width, retire_at):
    # chains per (key, time bucket as wide as the band): a probe reads at most two buckets,
    # and rows come back in arrival order; after retirement too
    hi = lo + width
    codes = np.array([e[0] for e in entries], dtype=np.int64)
    times = np.array([e[1] for e in entries], dtype=np.int64)
    ids = np.arange(len(entries), dtype=np.int64) * 3 + 7
    half = len(entries) // 2
    idx = KeyIndex(codes[:half], times[:half], ids[:half], (lo, hi))
    assert 2**idx.shift >= hi - lo + 1
    idx.insert(codes[half:], times[half:], ids[half:])
    pc_ = np.array([p[0] for p in probes], dtype=np.int64)
    pt = np.array([p[1] for p in probes], dtype=np.int64)
    for stage in range(2):
        alive = np.ones(len(entries), bool) if stage == 0 else times > retire_at
        pi, rid = idx.probe(pc_, pt, lo, hi)
        want = [(i, int(ids[j])) for i in range(len(probes)) for j in range(len(entries))
                if alive[j] and codes[j] == pc_[i] and pt[i] + lo <= times[j] <= pt[i] + hi]
        assert list(zip(pi.tolist(), rid.tolist(), strict=True)) == want
        idx.retire(retire_at)
    got = hash_band_pairs(pc_, pt, codes, times, lo, hi)
    want2 = band_pairs_py(pc_, pt, codes, times, lo, hi)
    assert got[0].tolist() == want2[0].tolist() and got[1].tolist() == want2[1].tolist()


def test_key_index_refuses_a_band_wider_than_its_buckets():
    idx = KeyIndex(np.zeros(3, np.int64), np.arange(3, dtype=np.int64),
                   np.arange(3, dtype=np.int64), (-2, 2))
    with pytest.raises(InternalError, match="wider than a bucket"):
        idx.probe(np.zeros(1, np.int64), np.zeros(1, np.int64), -10, 10)


@pytest.mark.parametrize("shuffled", [False, True])
@pytest.mark.parametrize("how", ["inner", "full"])
def test_large_batches_probe_only_rows_that_reach_the_other_side(shuffled, how):
    # a 400-row batch arrives after the other side kept only its last rows: most of it lies
    # beyond their band; the result and state still equal the nested-loop reference
    from splice.core.records import Data, End, Watermark
    from tests.joins.test_interval_join import _run_both

    ls, rs = _schemas()
    rng = np.random.default_rng(9)
    records = []
    for i in range(4):
        ts = np.arange(i * 400, (i + 1) * 400, dtype=np.int64)
        lt = rng.permutation(ts) if shuffled else ts
        records.append(Data(L, pa.record_batch({"k": rng.integers(0, 5, 400), "ts": lt,
                                                "v": np.arange(400)}, schema=ls)))
        rt = rng.permutation(ts) if shuffled else ts
        records.append(Data(R, pa.record_batch({"k": rng.integers(0, 5, 400), "ts": rt,
                                                "w": rt.astype(str)}, schema=rs)))
        if not shuffled:  # each side's watermark trails its newest row by one
            records += [Watermark(L, int(ts[-1]) - 1), Watermark(R, int(ts[-1]) - 1)]
    records.append(End())
    spec = IntervalJoin(left=L, right=R, on="k", time="ts", lower=-7, upper=5, how=how,
                        index_threshold=100)
    _run_both(spec, ls, rs, records)


@settings(max_examples=40)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 60)), min_size=1, max_size=80),
       st.integers(0, 3), st.integers(0, 5), st.integers(-5, 70))
def test_key_index_consecutive_ids_without_an_id_array(entries, cut_kind, gap, retire_at):
    # ids given as a first id (one whole batch) stay implicit while arrivals continue them; a gap
    # or a retirement writes them out; answers equal brute force all along
    codes = np.array([e[0] for e in entries], dtype=np.int64)
    times = np.array([e[1] for e in entries], dtype=np.int64)
    cut = [0, len(entries) // 3, len(entries) // 2, len(entries)][cut_kind]
    base = 100
    idx = KeyIndex(codes[:cut], times[:cut], base, (-4, 4))
    assert idx._rowid is None
    start = base + cut + gap
    idx.insert(codes[cut:], times[cut:], start)
    assert (idx._rowid is None) == (gap == 0)
    ids = np.concatenate([np.arange(base, base + cut), np.arange(start, start + len(entries) - cut)])
    assert idx.row_ids.tolist() == ids.tolist()
    pc_ = np.arange(5, dtype=np.int64)
    pt = np.full(5, 30, dtype=np.int64)
    for alive in (np.ones(len(entries), bool), times > retire_at):
        pi, rid = idx.probe(pc_, pt, -4, 4)
        want = [(i, int(ids[j])) for i in range(5) for j in range(len(entries))
                if alive[j] and codes[j] == pc_[i] and 26 <= times[j] <= 34]
        assert list(zip(pi.tolist(), rid.tolist(), strict=True)) == want
        idx.retire(retire_at)


@settings(max_examples=40)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(-40, 40)), max_size=60),
       st.lists(st.tuples(st.integers(0, 5), st.integers(-40, 40)), max_size=30),
       st.integers(-12, 6), st.integers(0, 12))
def test_key_index_probe_times_are_the_matched_rows_times(entries, probes, lo, width):
    # the times that come with the pairs (read from the index entries) equal the matched rows'
    # own times, pair by pair, before and after a gap in the ids
    hi = lo + width
    codes = np.array([e[0] for e in entries], dtype=np.int64)
    times = np.array([e[1] for e in entries], dtype=np.int64)
    half = len(entries) // 2
    idx = KeyIndex(codes[:half], times[:half], 10, (lo, hi))
    idx.insert(codes[half:], times[half:], 10 + half + 3)
    ids = np.concatenate([np.arange(10, 10 + half), np.arange(13 + half, 13 + len(entries))])
    pc_ = np.array([p[0] for p in probes], dtype=np.int64)
    pt = np.array([p[1] for p in probes], dtype=np.int64)
    pi, rid, et, in_order = idx.probe_times(pc_, pt, lo, hi)
    assert in_order == (pi.tolist() == list(range(len(probes))))
    want = [(i, int(ids[j]), int(times[j])) for i in range(len(probes))
            for j in range(len(entries))
            if codes[j] == pc_[i] and pt[i] + lo <= times[j] <= pt[i] + hi]
    assert list(zip(pi.tolist(), rid.tolist(), et.tolist(), strict=True)) == want
    assert (pi.tolist(), rid.tolist()) == tuple(x.tolist() for x in idx.probe(pc_, pt, lo, hi))


_KEY_TYPES = {
    "int32": (pa.int32(), lambda k: k),
    "uint8": (pa.uint8(), lambda k: k),
    "bool": (pa.bool_(), lambda k: bool(k % 2)),
    "timestamp": (pa.timestamp("ms"), lambda k: k * 1000),
    "date32": (pa.date32(), lambda k: k),
    # -0.0 and 0.0 are equal keys with different values: each side keeps its own
    "float64": (pa.float64(), lambda k: -0.0 if k == 0 else float(k)),
}


@settings(max_examples=15)
@pytest.mark.parametrize("kind", list(_KEY_TYPES))
@given(st.lists(st.tuples(st.booleans(), st.sampled_from([None, 0, 1, 2, 3]), st.integers(0, 30)),
                min_size=1, max_size=60),
       st.sampled_from([0, 3, 1024]), st.sampled_from(["inner", "full"]), st.data())
def test_opposite_key_and_time_columns_equal_the_reference(kind, rows, threshold, how, data):
    # the opposite key column of a pair is the arriving row's key (one exact key column of one
    # type: integers, booleans, temporal types) and an indexed side's time column comes from its
    # index; floats are gathered (-0.0 and 0.0 match but differ): outputs equal the reference
    from splice.core.records import Data, End
    from tests.joins.test_interval_join import _run_both

    key_type, conv = _KEY_TYPES[kind]
    ls = pa.schema([("k", key_type), ("ts", pa.int64()), ("v", pa.int64())])
    rs = pa.schema([("k", key_type), ("ts", pa.int64()), ("w", pa.string())])
    rows = sorted(rows, key=lambda r: r[2])
    records: list = []
    pos = 0
    while pos < len(rows):
        side = rows[pos][0]
        size = data.draw(st.sampled_from([1, 2, 7, 50]))
        run = []
        while pos < len(rows) and rows[pos][0] == side and len(run) < size:
            run.append(rows[pos])
            pos += 1
        # left keys as converted, right keys as plain numbers where that differs (0.0)
        keys = [None if k is None else conv(k) if side or kind != "float64" else float(k)
                for _, k, _ in run]
        ts = [t for _, _, t in run]
        if side:
            b = pa.record_batch({"k": pa.array(keys, key_type), "ts": ts,
                                 "v": list(range(pos - len(run), pos))}, schema=ls)
            records.append(Data(L, b))
        else:
            b = pa.record_batch({"k": pa.array(keys, key_type), "ts": ts,
                                 "w": [f"r{i}" for i in range(pos - len(run), pos)]}, schema=rs)
            records.append(Data(R, b))
    records.append(End())
    spec = IntervalJoin(left=L, right=R, on="k", time="ts", lower=-5, upper=3, how=how,
                        index_threshold=threshold)
    h = _run_both(spec, ls, rs, records)
    assert h.logic._same_key == (kind != "float64")


# codes k * C (C the bucket multiplier, wrapped to int64): code k*C in bucket b and code
# (k + 1)*C in bucket b - 1 share a chain, so every chain mixes entries of several codes
_MIXER = 0xC2B2AE3D27D4EB4F
_COLLIDING = [int(np.array([(k * _MIXER) % 2**64], np.uint64).view(np.int64)[0])
              for k in range(-2, 3)]


@given(st.lists(st.tuples(st.sampled_from(_COLLIDING), st.integers(-40, 40)), max_size=60),
       st.lists(st.tuples(st.sampled_from(_COLLIDING), st.integers(-40, 40)), min_size=1,
                max_size=6))
def test_index_probe_keeps_codes_apart_when_their_bucket_keys_collide(entries, probes):
    _check_probe_against_twin(entries, probes, -3, 4)


def _check_probe_against_twin(entries, probes, lo, hi):
    """Index ``(code, time)`` entries, probe with ``(code, time)`` probes over ``[lo, hi]``,
    assert the pairs and entry times of the plain twin; return ``(pi, in_order)``."""
    codes = np.array([c for c, _ in entries], np.int64)
    times = np.array([t for _, t in entries], np.int64)
    idx = KeyIndex(codes, times, np.arange(len(entries), dtype=np.int64), (lo, hi))
    pc_ = np.array([c for c, _ in probes], np.int64)
    pt = np.array([t for _, t in probes], np.int64)
    pi, rid, et, in_order = idx.probe_times(pc_, pt, lo, hi)
    want_i, want_j = index_probe_py(codes, times, len(entries), pc_, pt, lo, hi)
    assert pi.tolist() == want_i.tolist() and rid.tolist() == want_j.tolist()
    assert et.tolist() == times[want_j].tolist()
    return pi, in_order


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 20)), max_size=80),
       st.lists(st.tuples(st.integers(0, 3), st.integers(0, 20)), min_size=1, max_size=5))
def test_index_probe_pairs_and_times_match_twin_past_the_first_buffer(entries, probes):
    # few keys and few probes: pairs often outnumber the first buffers (16), so the second pass
    # into a larger buffer runs; the one-buffer result splits into pairs and entry times
    pi, in_order = _check_probe_against_twin(entries, probes, -5, 5)
    assert in_order == (pi.tolist() == list(range(len(probes))))
