"""Interval join against the nested-loop reference, its kernels against their twins, bad input."""

from __future__ import annotations

import pickle
from collections import Counter

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import PlanError, SchemaError, StateError
from splice.core.records import Data, End, Watermark
from splice.joins.common.key_codec import KeyCodec
from splice.joins.temporal._interval_kernels import band_pairs, hash_band_pairs
from splice.joins.temporal._key_index import KeyIndex
from splice.joins.temporal.interval_join import IntervalJoin, IntervalJoinLogic, _IntervalSide
from splice.joins.temporal.matcher import Matcher
from splice.kernels.hashing import hash_bytes
from splice.testing import OperatorHarness, check_operator, rows_of, run_operator
from tests.reference.hashing import hash_bytes_py
from tests.reference.temporal_kernels import band_pairs_py, index_probe_py
from tests.reference.time_joins import IntervalJoinRef

L, R = 2, 3
BATCH_SIZES = [1, 2, 7, 49, 50, 51, 100]


def _schemas(key_type: pa.DataType | None = None, two_keys: bool = False
             ) -> tuple[pa.Schema, pa.Schema]:
    key_type = key_type or pa.int64()
    extra = [("k2", pa.int32())] if two_keys else []
    ls = pa.schema([("k", key_type), *extra, ("ts", pa.int64()), ("v", pa.int64())])
    rs = pa.schema([("k", key_type), *extra, ("ts", pa.int64()), ("w", pa.string())])
    return ls, rs


def _nullable_multiset(rows: list[tuple]) -> Counter:
    return Counter(repr(r) for r in rows)


# -- kernels and their twins ------------------------------------------------------------------

@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 30)), max_size=40),
       st.lists(st.tuples(st.integers(0, 5), st.integers(0, 30)), max_size=40),
       st.integers(-5, 5), st.integers(0, 8))
def test_band_pairs_matches_twin(p, b, lo, width):
    pc_ = np.array([x[0] for x in p], dtype=np.int64)
    pt = np.array([x[1] for x in p], dtype=np.int64)
    bc = np.array(sorted(x[0] for x in b), dtype=np.int64)
    bt = np.array([x[1] for x in sorted(b, key=lambda x: x[0])], dtype=np.int64)
    got = band_pairs(pc_, pt, bc, bt, lo, lo + width)
    want = band_pairs_py(pc_, pt, bc, bt, lo, lo + width)
    assert got[0].tolist() == want[0].tolist()
    assert got[1].tolist() == want[1].tolist()


@given(st.lists(st.one_of(st.text(max_size=8), st.none()), max_size=30))
def test_hash_bytes_matches_twin_and_is_equal_for_equal_strings(values):
    arr = pa.array(values, pa.string())
    codes, valid = KeyCodec([pa.string()]).encode([arr])
    bufs = arr.buffers()
    off = np.frombuffer(bufs[1], np.int32)[: len(arr) + 1]
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    assert hash_bytes(off, data).tolist() == hash_bytes_py(off, data).tolist()
    # equal strings, equal codes, whatever the array they sit in (offsets, slices, large)
    sliced = pa.array([None] + values, pa.large_string()).slice(1)
    codes2, _ = KeyCodec([pa.large_string()]).encode([sliced])
    ok = [v is not None for v in values]
    assert codes[ok].tolist() == codes2[ok].tolist()
    if any(v is None for v in values):
        assert valid is not None and valid.tolist() == ok


def test_key_index_insert_retire_probe_equal_brute_force():
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 50, 500)
    times = rng.integers(0, 1000, 500)
    ids = np.arange(500)
    idx = KeyIndex(codes[:200], times[:200], ids[:200])
    idx.insert(codes[200:], times[200:], ids[200:])
    idx.retire(300)
    alive = times > 300
    assert sorted(idx.row_ids.tolist()) == ids[alive].tolist()
    assert idx.nbytes >= 7 * 8 * int(alive.sum())
    pcodes, ptimes = rng.integers(0, 60, 40), rng.integers(200, 900, 40)
    pi, rid = idx.probe(pcodes, ptimes, -20, 30)
    got = sorted(zip(pi.tolist(), rid.tolist(), strict=True))
    want = sorted((i, j) for i in range(40) for j in ids[alive].tolist()
                  if codes[j] == pcodes[i] and ptimes[i] - 20 <= times[j] <= ptimes[i] + 30)
    assert got == want
    # per probe row, opposite rows come in arrival (row id) order
    for i in set(pi.tolist()):
        r = rid[pi == i]
        assert (np.diff(r) > 0).all()
    # the kernel pair equals its plain twin on the surviving entries
    twin = index_probe_py(idx.e_code, idx.e_time, idx.n, pcodes, ptimes, -20, 30)
    assert pi.tolist() == twin[0].tolist()
    assert rid.tolist() == idx.e_rowid[twin[1]].tolist()


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 30)), max_size=60),
       st.lists(st.tuples(st.integers(0, 5), st.integers(0, 30)), max_size=60))
def test_hash_band_pairs_matches_twin(p, b):
    pc_ = np.array([x[0] for x in p], dtype=np.int64)
    pt = np.array([x[1] for x in p], dtype=np.int64)
    bc = np.array([x[0] for x in b], dtype=np.int64)
    bt = np.array([x[1] for x in b], dtype=np.int64)
    got = hash_band_pairs(pc_, pt, bc, bt, -3, 4)
    want = band_pairs_py(pc_, pt, bc, bt, -3, 4)
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


@pytest.mark.parametrize("method", ["numba", "acero", "datafusion"])
def test_matcher_engines_agree(method):
    rng = np.random.default_rng(7)
    pc_, pt = rng.integers(0, 20, 300), rng.integers(0, 500, 300)
    bc, bt = rng.integers(0, 20, 400), rng.integers(0, 500, 400)
    want = band_pairs_py(pc_, pt, bc, bt, -10, 25)
    got = Matcher(method).pairs(pc_, pt, bc, bt, -10, 25)
    assert sorted(zip(*got, strict=True)) == sorted(zip(*want, strict=True))
    m = Matcher(method)
    for _ in range(3):  # the long-lived context does not grow a catalog
        m.pairs(pc_, pt, bc, bt, -10, 25)
    if method == "datafusion":
        assert m._ctx.catalog().schema().names() == set()


# -- random streams against the reference ------------------------------------------------------

@st.composite
def streams(draw, key_kind: str = "int", max_rows: int = 60):
    nl = draw(st.integers(0, max_rows))
    nr = draw(st.integers(0, max_rows))
    keys = st.sampled_from([None, 0, 1, 2, 3])
    span = draw(st.sampled_from([20, 200]))
    jitter = draw(st.sampled_from([0, 3, 10]))

    def rows(n):
        ks = draw(st.lists(keys, min_size=n, max_size=n))
        ts = sorted(draw(st.lists(st.integers(0, span), min_size=n, max_size=n)))
        noise = draw(st.lists(st.integers(-jitter, jitter), min_size=n, max_size=n))
        return ks, [t + e for t, e in zip(ts, noise, strict=True)], ts

    lk, lts, lorder = rows(nl)
    rk, rts, rorder = rows(nr)
    two = key_kind == "two"
    ls, rs = _schemas(pa.string() if key_kind == "str" else pa.int64(), two)

    def conv(k):
        if key_kind == "str":
            return None if k is None else f"key-{k}"
        return k

    lcols = {"k": [conv(k) for k in lk]}
    rcols = {"k": [conv(k) for k in rk]}
    if two:
        lcols["k2"] = [None if k == 3 else (k or 0) % 2 for k in lk]
        rcols["k2"] = [(k or 0) % 2 for k in rk]
    lt = pa.table({**lcols, "ts": lts, "v": list(range(nl))}, schema=ls)
    rt = pa.table({**rcols, "ts": rts, "w": [f"r{i}" for i in range(nr)]}, schema=rs)
    # arrival: by the un-jittered time, side broken by a coin; runs cut into batch sizes
    order = sorted([(t, draw(st.booleans()), 0, i) for i, t in enumerate(lorder)]
                   + [(t, draw(st.booleans()), 1, i) for i, t in enumerate(rorder)])
    records: list = []
    pos = 0
    seen = {L: -1, R: -1}
    while pos < len(order):
        side = order[pos][2]
        size = draw(st.sampled_from(BATCH_SIZES))
        run = []
        while pos < len(order) and order[pos][2] == side and len(run) < size:
            run.append(order[pos][3])
            pos += 1
        sid, table = (L, lt) if side == 0 else (R, rt)
        batch = table.take(pa.array(run, pa.int64())).combine_chunks().to_batches()[0]
        records.append(Data(sid, batch))
        seen[sid] = max(seen[sid], max(batch.column("ts").to_pylist()))
        if draw(st.integers(0, 3)) == 0:
            wsid = draw(st.sampled_from([L, R]))
            if seen[wsid] >= 0:
                records.append(Watermark(wsid, seen[wsid] - draw(st.integers(0, 15))))
    records.append(End())
    return ls, rs, records


def _run_both(spec: IntervalJoin, ls, rs, records, check_state: bool = True):
    inputs = {L: ls, R: rs}
    lo, hi = spec.bounds
    ref = IntervalJoinRef(L, R, spec.on, spec.time, lo, hi, spec.how, names=(ls.names, rs.names))
    h = OperatorHarness(spec, inputs)
    for rec in records:
        h.step(rec)
        if isinstance(rec, Data):
            ref.push(rec.stream_id, rec.batch)
        elif isinstance(rec, Watermark):
            ref.watermark(rec.stream_id, rec.time)
        else:
            ref.end()
        if check_state and not isinstance(rec, End):
            logic = h.logic
            assert isinstance(logic, IntervalJoinLogic)
            for sid in (L, R):
                got = _nullable_multiset(rows_of(logic.retained(sid)))
                assert got == _nullable_multiset(ref.retained(sid)), f"state of {sid} after {rec}"
    got = rows_of(h.result())
    assert _nullable_multiset(got) == _nullable_multiset(ref.out)
    late = Counter(repr(r) for b in h.late for r in rows_of(pa.Table.from_batches([b])))
    assert late == _nullable_multiset(ref.L.late + ref.R.late)
    return h


@settings(max_examples=40)
@given(streams(), st.sampled_from(["inner", "left", "right", "full"]),
       st.integers(-12, 4), st.integers(0, 12), st.sampled_from([0, 3, 1024]), st.data())
def test_interval_join_equals_reference(s, how, lower, width, threshold, data):
    ls, rs, records = s
    spec = IntervalJoin(left=L, right=R, on="k", time="ts", lower=lower, upper=lower + width,
                        how=how, index_threshold=threshold)
    h = _run_both(spec, ls, rs, records)
    # snapshot mid-stream, restore into a fresh operator, finish: same rows as uninterrupted
    at = data.draw(st.integers(0, len(records)))
    got, _ = run_operator(spec, {L: ls, R: rs}, records, restore_at=at)
    assert Counter(map(repr, rows_of(got))) == Counter(map(repr, rows_of(h.result())))


@settings(max_examples=15)
@given(streams(key_kind="str"), st.sampled_from(["inner", "full"]), st.sampled_from([0, 1024]),
       st.booleans(), st.booleans())
def test_string_keys_and_exclusive_bounds(s, how, threshold, lo_incl, hi_incl):
    ls, rs, records = s
    spec = IntervalJoin(left=L, right=R, on="k", time="ts", lower=-5, upper=5, how=how,
                        lower_inclusive=lo_incl, upper_inclusive=hi_incl,
                        index_threshold=threshold)
    _run_both(spec, ls, rs, records)


@settings(max_examples=15)
@given(streams(key_kind="two"), st.sampled_from(["left", "right"]), st.sampled_from([0, 1024]),
       st.sampled_from(["numba", "acero", "datafusion"]))
def test_two_key_columns_every_engine(s, how, threshold, method):
    ls, rs, records = s
    spec = IntervalJoin(left=L, right=R, on=["k", "k2"], time="ts", lower=-4, upper=6, how=how,
                        index_threshold=threshold, matcher=method)
    _run_both(spec, ls, rs, records)


def test_contract_suite_every_join_type():
    ls, rs = _schemas()
    lt = pa.table({"k": [1, 2, None, 1, 3], "ts": [1, 2, 3, 9, 20], "v": [0, 1, 2, 3, 4]}, schema=ls)
    rt = pa.table({"k": [1, 1, 2, None, 3], "ts": [0, 4, 3, 5, 40], "w": list("abcde")}, schema=rs)
    records = [Data(L, lt.slice(0, 2).to_batches()[0]), Data(R, rt.slice(0, 3).to_batches()[0]),
               Watermark(R, 6), Data(L, lt.slice(2).to_batches()[0]), Watermark(L, 12),
               Data(R, rt.slice(3).to_batches()[0]), End()]
    for how in ("inner", "left", "right", "full"):
        for threshold in (0, 1024):
            spec = IntervalJoin(left=L, right=R, on="k", time="ts", lower=-2, upper=3, how=how,
                                index_threshold=threshold)
            out = check_operator(spec, {L: ls, R: rs}, records, ordered=True)
            assert out.num_rows > 0


# -- both sides of the 1,024-row threshold, against DuckDB ------------------------------------

@pytest.mark.parametrize("how", ["inner", "left", "full"])
def test_large_state_indexed_equals_sql_and_unindexed(how, monkeypatch):
    rng = np.random.default_rng(3)
    n = 6000
    ls, rs = _schemas()
    lt = pa.table({"k": rng.integers(0, 300, n), "ts": np.sort(rng.integers(0, 3000, n)),
                   "v": np.arange(n)}, schema=ls)
    rt = pa.table({"k": rng.integers(0, 300, n), "ts": np.sort(rng.integers(0, 3000, n)),
                   "w": [f"r{i}" for i in range(n)]}, schema=rs)
    spec = IntervalJoin(left=L, right=R, on="k", time="ts", lower=-400, upper=600, how=how)
    records = []
    for i, start in enumerate(range(0, n, 1500)):  # state crosses 1,024 rows and back
        pair = [Data(L, lt.slice(start, 1500).to_batches()[0]),
                Data(R, rt.slice(start, 1500).to_batches()[0])]
        records.extend(pair if i % 2 == 0 else pair[::-1])
    records.append(End())
    built: list[int] = []
    promote = _IntervalSide.build_index

    def spy(side: _IntervalSide) -> None:
        built.append(side.sid)
        promote(side)

    monkeypatch.setattr(_IntervalSide, "build_index", spy)
    h = OperatorHarness(spec, {L: ls, R: rs})
    for r in records:
        h.step(r)
    assert L in built and R in built  # both sides were probed through the key index
    got = h.result()
    plain, _ = run_operator(IntervalJoin(left=L, right=R, on="k", time="ts", lower=-400, upper=600,
                                         how=how, index_threshold=10**9), {L: ls, R: rs}, records)
    assert Counter(rows_of(got)) == Counter(rows_of(plain))
    sql_how = {"inner": "INNER", "left": "LEFT", "full": "FULL"}[how]
    want = duckdb.sql(
        f"SELECT l.k, l.ts, l.v, r.k AS k_right, r.ts AS ts_right, r.w FROM lt l {sql_how} JOIN rt r "
        "ON l.k = r.k AND r.ts BETWEEN l.ts - 400 AND l.ts + 600").arrow()
    if hasattr(want, "read_all"):
        want = want.read_all()
    assert Counter(rows_of(got)) == Counter(rows_of(want))


# -- state after each watermark, padding order, late rows -------------------------------------

def test_state_after_each_watermark_and_padding_order():
    ls, rs = _schemas()
    spec = IntervalJoin(left=L, right=R, on="k", time="ts", lower=-2, upper=3, how="full")
    h = OperatorHarness(spec, {L: ls, R: rs})
    logic = h.logic
    assert isinstance(logic, IntervalJoinLogic)
    h.push(L, pa.record_batch({"k": [1, 2, 3], "ts": [10, 11, 30], "v": [0, 1, 2]}, schema=ls))
    h.push(R, pa.record_batch({"k": [1, 5], "ts": [12, 13], "w": ["a", "b"]}, schema=rs))
    # left rows retire once W_R >= ts + 3; right rows once W_L >= ts + 2
    out = h.watermark(R, 12)
    assert logic.retained(L).column("v").to_pylist() == [0, 1, 2]
    assert out.num_rows == 0
    out = h.watermark(R, 14)  # left ts=10 and ts=11 retire (11 + 3 <= 14)
    assert logic.retained(L).column("v").to_pylist() == [2]
    assert out.to_pydict()["v"] == [1]  # v=0 matched; v=1 padded
    out = h.watermark(L, 15)  # right ts 12 and 13 retire (<= 15 - 2)
    assert logic.retained(R).num_rows == 0
    assert out.to_pydict()["w"] == ["b"]  # "a" matched
    assert logic.output_watermark() == min(15, 14, 14 - 3, 15 - 2)
    out = h.end()
    assert out.to_pydict() == {"k": [3], "ts": [30], "v": [2], "k_right": [None],
                               "ts_right": [None], "w": [None]}
    assert logic.state_bytes() == 0


def test_late_rows_are_counted_and_side_output():
    ls, rs = _schemas()
    spec = IntervalJoin(left=L, right=R, on="k", time="ts", lower=-5, upper=5)
    h = OperatorHarness(spec, {L: ls, R: rs})
    h.push(L, pa.record_batch({"k": [1, 1], "ts": [10, 20], "v": [0, 1]}, schema=ls))
    h.watermark(L, 17)  # the path's watermark: ts=17 is late, ts=16 too; 18 is on time
    h.push(L, pa.record_batch({"k": [1, 1, 1], "ts": [17, 16, 18], "v": [2, 3, 4]}, schema=ls))
    logic = h.logic
    assert isinstance(logic, IntervalJoinLogic)
    assert logic.late_rows == {L: 2, R: 0}
    assert [r for b in h.late for r in b.column("v").to_pylist()] == [2, 3]
    assert h.late_inputs == [L]
    assert logic.retained(L).column("v").to_pylist() == [0, 1, 4]


def test_null_keys_never_match_and_pad_in_outer():
    ls, rs = _schemas()
    spec = IntervalJoin(left=L, right=R, on="k", time="ts", lower=-5, upper=5, how="full")
    h = OperatorHarness(spec, {L: ls, R: rs})
    h.push(L, pa.record_batch({"k": [None, 1], "ts": [1, 1], "v": [0, 1]}, schema=ls))
    out = h.push(R, pa.record_batch({"k": [None, 1], "ts": [2, 2], "w": ["a", "b"]}, schema=rs))
    h.end()
    rows = rows_of(h.result())
    assert (1, 1, 1, 1, 2, "b") in rows
    assert (None, 1, 0, None, None, None) in rows
    assert (None, None, None, None, 2, "a") in rows
    assert len(rows) == 3
    assert out.num_rows == 2  # the match, and the right null-key row padded on arrival


def test_timestamp_time_and_right_on_right_time():
    ls = pa.schema([("id", pa.int32()), ("at", pa.timestamp("ms"))])
    rs = pa.schema([("ref", pa.int32()), ("seen", pa.timestamp("ms"))])
    spec = IntervalJoin(left=L, right=R, on="id", right_on="ref", time="at", right_time="seen",
                        lower=0, upper=1000)
    h = OperatorHarness(spec, {L: ls, R: rs})
    h.push(L, pa.record_batch({"id": [1], "at": pa.array([5000], pa.timestamp("ms"))}, schema=ls))
    out = h.push(R, pa.record_batch({"ref": [1, 1], "seen": pa.array([5500, 6500],
                                                                     pa.timestamp("ms"))},
                                    schema=rs))
    assert out.num_rows == 1 and out.schema.names == ["id", "at", "ref", "seen"]


# -- bad input ---------------------------------------------------------------------------------

def test_bad_input_errors_name_stream_and_column():
    ls, rs = _schemas()
    with pytest.raises(PlanError, match="lower bound 5 is above upper bound 1"):
        IntervalJoin(left=L, right=R, on="k", time="ts", lower=5, upper=1)
    with pytest.raises(PlanError, match="as inclusive bounds"):
        IntervalJoin(left=L, right=R, on="k", time="ts", lower=1, upper=1, upper_inclusive=False)
    with pytest.raises(SchemaError, match="stream 3 has no time column 'when'"):
        IntervalJoin(left=L, right=R, on="k", time="ts", right_time="when", lower=0,
                     upper=1).output_schema({L: ls, R: rs})
    bad = pa.schema([("k", pa.int64()), ("ts", pa.string()), ("w", pa.string())])
    with pytest.raises(SchemaError, match="stream 3 time column 'ts' has type string"):
        IntervalJoin(left=L, right=R, on="k", time="ts", lower=0, upper=1).output_schema({L: ls, R: bad})
    mism = pa.schema([("k", pa.string()), ("ts", pa.int64()), ("w", pa.string())])
    with pytest.raises(SchemaError, match="key type mismatch: stream '2' column 'k' is int64"):
        IntervalJoin(left=L, right=R, on="k", time="ts", lower=0, upper=1).output_schema({L: ls, R: mism})
    with pytest.raises(SchemaError, match="stream '3' has no key column 'x'"):
        IntervalJoin(left=L, right=R, on="k", right_on="x", time="ts", lower=0,
                     upper=1).output_schema({L: ls, R: rs})
    with pytest.raises(PlanError, match="different streams"):
        IntervalJoin(left=L, right=L, on="k", time="ts", lower=0, upper=1)
    with pytest.raises(PlanError, match="stream id 9"):
        IntervalJoin(left=L, right=9, on="k", time="ts", lower=0, upper=1).output_schema({L: ls, R: rs})
    h = OperatorHarness(IntervalJoin(left=L, right=R, on="k", time="ts", lower=0, upper=1),
                        {L: ls, R: rs})
    with pytest.raises(SchemaError, match="stream 'left \\(stream 2\\)': time column 'ts' has 1 null"):
        h.push(L, pa.record_batch({"k": [1], "ts": pa.array([None], pa.int64()), "v": [1]},
                                  schema=ls))
    with pytest.raises(SchemaError, match="lacks column 'v'"):
        h.push(L, pa.record_batch({"k": [1], "ts": [1]}))


def test_side_that_never_advances_hits_budget_with_clear_error():
    ls, rs = _schemas()

    def feed(spec: IntervalJoin) -> IntervalJoinLogic:
        logic = spec.build({L: ls, R: rs})
        assert isinstance(logic, IntervalJoinLogic)
        for i in range(200):
            ts = np.arange(i * 100, (i + 1) * 100)
            logic.on_batch(L, pa.record_batch({"k": ts % 7, "ts": ts, "v": ts}, schema=ls))
        return logic

    with pytest.raises(StateError, match="over the budget of 200000 bytes.*never advances"):
        feed(IntervalJoin(left=L, right=R, on="k", time="ts", lower=-10, upper=10,
                          state_budget=200_000))


def test_state_bytes_flat_over_a_long_run_and_cached():
    ls, rs = _schemas()
    spec = IntervalJoin(left=L, right=R, on="k", time="ts", lower=-100, upper=100)
    logic = spec.build({L: ls, R: rs})
    peaks = []
    for i in range(60):
        ts = np.arange(i * 2048, (i + 1) * 2048)
        logic.on_batch(L, pa.record_batch({"k": ts % 101, "ts": ts, "v": ts}, schema=ls))
        logic.on_batch(R, pa.record_batch({"k": ts % 97, "ts": ts, "w": pa.array(ts.astype(str))},
                                          schema=rs))
        for sid in (L, R):  # the path's watermarks: each input's newest time minus one
            logic.on_watermark(sid, int(ts[-1]) - 1)
        peaks.append(logic.state_bytes())
    assert max(peaks[30:]) <= max(peaks[:30]) * 1.05


def test_spec_pickles_and_snapshot_is_immutable():
    ls, rs = _schemas()
    spec = IntervalJoin(left=L, right=R, on=["k"], time="ts", lower=-1, upper=1, how="left")
    assert pickle.loads(pickle.dumps(spec)) == spec
    h = OperatorHarness(spec, {L: ls, R: rs})
    h.push(L, pa.record_batch({"k": [1], "ts": [5], "v": [0]}, schema=ls))
    snap = h.logic.snapshot()
    h.push(R, pa.record_batch({"k": [1], "ts": [5], "w": ["a"]}, schema=rs))
    assert snap["sides"][0]["batches"][0][1].tolist() == [False]


# -- the command line --------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["inner", "full"])
def test_cli_interval_join_equals_sql(tmp_path, capsys, how):
    import json

    import pyarrow.parquet as pq

    from splice.cli import main

    rng = np.random.default_rng(11)
    n = 3000
    pos = rng.permutation(2 * n)
    lt = pa.table({"id": rng.integers(0, 50, n), "ts": np.sort(rng.integers(0, 5000, n)),
                   "x": np.arange(n), "pos": np.sort(pos[:n])})
    rt = pa.table({"id": rng.integers(0, 50, n), "ts": rng.integers(0, 5000, n),
                   "y": np.arange(n), "pos": np.sort(pos[n:])})
    pq.write_table(lt, tmp_path / "l.parquet")
    pq.write_table(rt, tmp_path / "r.parquet")
    argv = ["join", "--kind", "interval", "--left", str(tmp_path / "l.parquet"),
            "--right", str(tmp_path / "r.parquet"), "--on", "id", "--time", "ts",
            "--lower", "-20", "--upper", "30", "--how", how, "--batch-size", "500",
            "--out", str(tmp_path / "o.parquet"), "--json"]
    assert main(argv + ["--arrival", "pos"]) == 2  # a time-based join streams by time
    assert "--arrival orders count windows" in capsys.readouterr().err
    assert main(argv) == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]
    got = pq.read_table(tmp_path / "o.parquet")
    assert got.schema.names == ["id", "ts", "x", "pos", "id_right", "ts_right", "y", "pos_right"]
    sql_how = "INNER" if how == "inner" else "FULL"
    want = duckdb.sql(
        f"SELECT l.*, r.* FROM lt l {sql_how} JOIN rt r ON l.id = r.id "
        "AND r.ts BETWEEN l.ts - 20 AND l.ts + 30").arrow()
    if hasattr(want, "read_all"):
        want = want.read_all()
    assert Counter(rows_of(got)) == Counter(rows_of(want))
    assert metrics["output_rows"] == got.num_rows and metrics["input_rows"] == 2 * n


def test_cli_interval_requires_bounds_and_time(tmp_path, capsys):
    import pyarrow.parquet as pq

    from splice.cli import main

    pq.write_table(pa.table({"id": [1], "ts": [1]}), tmp_path / "a.parquet")
    base = ["join", "--kind", "interval", "--left", str(tmp_path / "a.parquet"), "--right",
            str(tmp_path / "a.parquet"), "--on", "id", "--out", str(tmp_path / "o.parquet")]
    assert main(base + ["--time", "ts"]) == 2
    assert "--lower and --upper are required" in capsys.readouterr().err
    assert main(base + ["--lower", "0", "--upper", "1"]) == 2
    assert "--time is required" in capsys.readouterr().err
    assert main(base + ["--time", "nope", "--lower", "0", "--upper", "1"]) == 2
    assert "time column 'nope'" in capsys.readouterr().err
    assert main(base + ["--time", "ts", "--lower", "2", "--upper", "1"]) == 2
    assert "lower bound 2 is above upper bound 1" in capsys.readouterr().err
