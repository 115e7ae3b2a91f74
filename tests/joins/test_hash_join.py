"""Hash window joins (fast, HB-SJ, SplitJoin) against the nested-loop reference."""

from __future__ import annotations

import sys
from pathlib import Path

import mmh3
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import PlanError, SchemaError
from splice.core.records import Data, End, Watermark
from splice.joins.common.join_windows import (
    POSITION,
    CountWindow,
    RowStore,
    TimeWindow,
    parse_count_window,
)
from splice.joins.hash._hash_kernels import (
    SEED1,
    SEED2,
    HashArrivals,
    InsertBuffer,
    ProbeBuffers,
    RingPositions,
    drain,
    fx_join_sequence,
    fx_probe,
    fx_update,
    hb_probe,
    hb_update,
    ring_positions,
)
from splice.joins.hash.hash_window_join import (
    FastIndex,
    HashWindowJoin,
    join_sequence,
    time_join_sequence,
)
from splice.joins.hash.hbsj import HBSJIndex
from splice.kernels.hashing import murmur3_32
from splice.testing import OperatorHarness, check_operator, rows_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reference.hash_window_join import count_window_join, merged_order, time_window_join  # noqa: E402

L, R = 2, 3
SCHEMA = pa.schema([("k", pa.int64()), ("id", pa.int64())])
INPUTS = {L: SCHEMA, R: SCHEMA}
SPLITS = [1, 2, 7, 49, 50, 51, 100]


# -- Murmur3 -----------------------------------------------------------------------------------


def test_murmur3_equals_mmh3_on_random_keys() -> None:
    rng = np.random.default_rng(7)
    keys = np.concatenate([rng.integers(-(2**63), 2**63 - 1, 500, dtype=np.int64),
                           np.array([0, 1, -1, 2**63 - 1, -(2**63)], np.int64)])
    for seed in (SEED1, SEED2, 42):
        for k in keys.tolist():
            want = mmh3.hash(np.int64(k).tobytes(), seed, signed=False)
            assert murmur3_32(k, seed) == want
            assert murmur3_32.py_func(k, seed) == want


# -- the reference, as arrivals -> batches ---------------------------------------------------------


arrival_lists = st.lists(
    st.tuples(st.integers(0, 1), st.one_of(st.none(), st.integers(-3, 8))), max_size=160
)
skewed = st.lists(st.tuples(st.integers(0, 1), st.sampled_from([1, 1, 1, 1, 2, None])), max_size=160)


def to_records(arrivals: list[tuple[int, int | None]], split: int) -> list[Data]:
    """Runs of one side, cut into batches of ``split`` rows; ``id`` = global arrival index."""
    recs: list[Data] = []
    i = 0
    while i < len(arrivals):
        j = i
        while j < len(arrivals) and arrivals[j][0] == arrivals[i][0] and j - i < split:
            j += 1
        side = arrivals[i][0]
        b = pa.record_batch({"k": pa.array([a[1] for a in arrivals[i:j]], pa.int64()),
                             "id": pa.array(range(i, j), pa.int64())}, schema=SCHEMA)
        recs.append(Data(L if side == 0 else R, b))
        i = j
    return recs


def expected_rows(arrivals: list[tuple[int, int | None]], pairs: list[tuple[int, int]]) -> list[tuple]:
    ids = [[i for i, a in enumerate(arrivals) if a[0] == s] for s in (0, 1)]
    return [(arrivals[ids[0][ls]][1], ids[0][ls], arrivals[ids[1][rs]][1], ids[1][rs]) for ls, rs in pairs]


def run_join(spec: HashWindowJoin, records: list) -> tuple[pa.Table, OperatorHarness]:
    h = OperatorHarness(spec, INPUTS)
    return h.run(records), h


@settings(max_examples=40)
@given(arrivals=st.one_of(arrival_lists, skewed), w=st.integers(1, 64), split=st.sampled_from(SPLITS),
       impl=st.sampled_from(["fast", "hbsj"]), parallel=st.integers(1, 3),
       table_size=st.sampled_from([None, 1, 2, 4]))
def test_count_window_join_equals_nested_loop(arrivals, w, split, impl, parallel, table_size) -> None:
    spec = HashWindowJoin(L, R, "k", CountWindow(w), impl=impl, parallel=parallel, table_size=table_size)
    got, h = run_join(spec, to_records(arrivals, split))
    assert got.schema.names == ["k", "id", "k_right", "id_right"]
    assert rows_of(got) == expected_rows(arrivals, count_window_join(arrivals, w))
    st_ = h.logic.stats()  # type: ignore[attr-defined]
    nulls = sum(1 for a in arrivals if a[1] is None)
    assert st_["left"]["null_keys"] + st_["right"]["null_keys"] == nulls


@settings(max_examples=30)
@given(arrivals=st.one_of(arrival_lists, skewed), w=st.integers(1, 64),
       impl=st.sampled_from(["fast", "hbsj"]), parallel=st.integers(1, 3),
       chunk=st.sampled_from([1, 7, 50, 1 << 20]), table_size=st.sampled_from([None, 1, 8]))
def test_mixed_sequence_equals_nested_loop(arrivals, w, impl, parallel, chunk, table_size) -> None:
    """Both streams interleaved inside one batch (the `splice join` path)."""
    sides = np.array([a[0] for a in arrivals], np.int8)
    keys = np.array([a[1] or 0 for a in arrivals], np.int64)
    valid = np.array([a[1] is not None for a in arrivals], np.bool_)
    _, ls, rs, stats = join_sequence(sides, keys, valid, w, impl, parallel, table_size, chunk)
    assert list(zip(ls.tolist(), rs.tolist(), strict=True)) == count_window_join(arrivals, w)
    assert stats["null_keys"] == int((~valid).sum())


@pytest.mark.parametrize("w", [1500, 4000, 10**12])
@pytest.mark.parametrize("parallel", [1, 3])
def test_count_windows_larger_than_the_start_grow_as_they_fill(w, parallel) -> None:
    # a count window's ring starts at 1,024 positions and doubles up to the window (a window
    # longer than the stream holds only the stream): the joins across each doubling, in one
    # sequence (chunked) and through the operator, equal the reference
    rng = np.random.default_rng(w + parallel)
    arrivals = [(int(s), None if k == 9 else int(k))
                for s, k in zip(rng.integers(0, 2, 6000), rng.integers(0, 400, 6000), strict=True)]
    want = count_window_join(arrivals, w)
    sides = np.array([a[0] for a in arrivals], np.int8)
    keys = np.array([a[1] or 0 for a in arrivals], np.int64)
    valid = np.array([a[1] is not None for a in arrivals], np.bool_)
    for chunk in (777, 1 << 20):
        _, ls, rs, _ = join_sequence(sides, keys, valid, w, "fast", parallel, None, chunk)
        assert list(zip(ls.tolist(), rs.tolist(), strict=True)) == want
    spec = HashWindowJoin(L, R, "k", CountWindow(w), impl="fast", parallel=parallel)
    got, h = run_join(spec, to_records(arrivals, 500))
    assert rows_of(got) == expected_rows(arrivals, want)
    ix = FastIndex(1, w)
    ix.insert(np.arange(3000), keys[None, :3000], valid[None, :3000])
    assert ix.cap == min(w, 4096)


def test_within_batch_sees_only_earlier_rows() -> None:
    arr = [(0, 1), (0, 1), (1, 1), (0, 1), (1, 1)]
    spec = HashWindowJoin(L, R, "k", CountWindow(2))
    got, _ = run_join(spec, to_records(arr, 100))
    assert rows_of(got) == expected_rows(arr, count_window_join(arr, 2))
    assert rows_of(got) == [(1, 0, 1, 2), (1, 1, 1, 2), (1, 3, 1, 2), (1, 1, 1, 4), (1, 3, 1, 4)]


def test_hbsj_overflow_statistics() -> None:
    ix = HBSJIndex(n_attrs=1, window=8, table_size=4)
    ix.insert(np.arange(8), np.full((1, 8), 5), np.ones((1, 8), bool))
    s = ix.stats()[0]
    assert s["table_inserts"] == [1, 1, 1, 1] and s["overflow_inserts"] == 4 and s["overflow_now"] == 4
    i, q = ix.probe(0, np.array([5]), np.array([True]))
    assert q.tolist() == list(range(8))
    assert ix.stats()[0]["overflow_comparisons"] == 4
    ix.insert(np.arange(8, 12), np.full((1, 4), 6), np.ones((1, 4), bool))  # 0..3 expire: slots free
    assert ix.stats()[0]["overflow_now"] == 4
    assert ix.probe(0, np.array([5]), np.array([True]))[1].tolist() == [4, 5, 6, 7]


def test_hbsj_unbounded_index_grows() -> None:
    """Without a count window HB-SJ's ordered window grows, re-placing its tuples and keeping the
    statistics counters."""
    ix = HBSJIndex(n_attrs=1, window=None, table_size=2)
    n = 3000  # past the first capacity of 1,024: the window grows twice
    keys = np.array([np.arange(n) % 3])
    ix.insert(np.arange(n), keys, np.ones((1, n), bool))
    assert ix.cap >= n and len(ix.live_seqs()) == n
    s = ix.stats()[0]
    assert sum(s["table_inserts"]) + s["overflow_inserts"] == n and s["overflow_now"] == n - 6
    _, q = ix.probe(0, np.array([1]), np.array([True]))
    assert q.tolist() == [x for x in range(n) if x % 3 == 1]


# -- kernels against their plain-Python twins -------------------------------------------------------


@settings(max_examples=10)
@given(keys=st.lists(st.integers(-4, 4), min_size=1, max_size=60), w=st.integers(1, 9))
def test_kernels_equal_python_twins(keys, w) -> None:
    n = len(keys)
    seqs = np.arange(n, dtype=np.int64)
    k2 = np.array([keys], np.int64)
    v2 = np.array([[x != 0 for x in keys]], np.bool_)
    e = seqs - w
    positions = RingPositions(np.where(e >= 0, e % w, -1), seqs % w)
    a, b = FastIndex(1, w), FastIndex(1, w)
    fx_update(a.arrays, positions, seqs, k2, v2)
    fx_update.py_func(b.arrays, positions, seqs, k2, v2)
    for x, y in zip(a.arrays, b.arrays, strict=True):
        assert np.array_equal(x, y)
    pk = np.arange(-4, 5, dtype=np.int64)
    pv = np.ones(len(pk), np.bool_)
    r1 = drain(fx_probe, len(pk), w, a.arrays, 0, pk, pv)
    r2 = drain(fx_probe.py_func, len(pk), w, a.arrays, 0, pk, pv)
    small = np.empty(w + 1, np.int64), np.empty(w + 1, np.int64)  # resumes after each probe
    n1, nxt = fx_probe(a.arrays, 0, pk, pv, 0, *small)
    assert nxt <= len(pk) and n1 <= w + 1
    assert all(np.array_equal(x, y) for x, y in zip(r1, r2, strict=True))
    c, d = HBSJIndex(1, w, 2), HBSJIndex(1, w, 2)
    hb_update(c.arrays, positions, seqs, k2, v2)
    hb_update.py_func(d.arrays, positions, seqs, k2, v2)
    for x, y in zip(c.arrays, d.arrays, strict=True):
        assert np.array_equal(x, y)
    scratch = ProbeBuffers(np.empty(w + 4, np.int64), np.empty(w + 4, np.int64))
    r3 = drain(hb_probe, len(pk), w + 4, c.arrays, 0, pk, pv, scratch)
    r4 = drain(hb_probe.py_func, len(pk), w + 4, d.arrays, 0, pk, pv, scratch)
    assert all(np.array_equal(x, y) for x, y in zip(r1, r3, strict=True))
    assert all(np.array_equal(x, y) for x, y in zip(r3, r4, strict=True))
    sides = np.array([i % 2 for i in range(n)], np.int8)
    sq = np.array([i // 2 for i in range(n)], np.int64)
    arrivals = HashArrivals(sides, sq, k2[0], v2[0])
    lx, rx, ly, ry = FastIndex(1, w), FastIndex(1, w), FastIndex(1, w), FastIndex(1, w)
    seq_positions = ring_positions(sq, w, w, 0, 1)
    insert_buf = InsertBuffer(np.empty((1, 1), np.int64), np.empty((1, 1), np.bool_))
    o1 = drain(fx_join_sequence, n, w, arrivals, seq_positions, lx.arrays, rx.arrays, insert_buf)
    o2 = drain(fx_join_sequence.py_func, n, w, arrivals, seq_positions, ly.arrays, ry.arrays, insert_buf)
    assert all(np.array_equal(x, y) for x, y in zip(o1, o2, strict=True))


# -- operator contract, snapshots -------------------------------------------------------------------


@pytest.mark.parametrize("impl,parallel", [("fast", 1), ("hbsj", 1), ("fast", 3), ("hbsj", 2)])
def test_operator_contract(impl: str, parallel: int) -> None:
    rng = np.random.default_rng(3)
    arr = [(int(rng.integers(0, 2)), int(rng.integers(0, 5)) if rng.random() > 0.1 else None)
           for _ in range(60)]
    spec = HashWindowJoin(L, R, "k", CountWindow(5), impl=impl, parallel=parallel)  # type: ignore[arg-type]
    got = check_operator(spec, INPUTS, to_records(arr, 7))
    assert rows_of(got) == expected_rows(arr, count_window_join(arr, 5))


def test_stats_survive_restore() -> None:
    spec = HashWindowJoin(L, R, "k", CountWindow(6), impl="hbsj", table_size=1)
    recs = to_records([(0, 1)] * 6 + [(1, 1)], 3)
    h = OperatorHarness(spec, INPUTS)
    h.step(recs[0])
    h.snapshot_and_restore()
    for r in recs[1:]:
        h.step(r)
    s = h.logic.stats()["left"]  # type: ignore[attr-defined]
    assert s["index"]["overflow_inserts"] == 2 and s["stored"] == 6


# -- time windows -----------------------------------------------------------------------------------


TSCHEMA = pa.schema([("k", pa.int64()), ("id", pa.int64()), ("t", pa.int64())])


@settings(max_examples=30)
@given(
    rows=st.lists(st.tuples(st.integers(0, 1), st.one_of(st.none(), st.integers(0, 4)),
                            st.integers(0, 60)), max_size=80),
    length=st.integers(0, 10), wm_every=st.integers(1, 20), lag=st.integers(0, 15),
    parallel=st.integers(1, 2), impl=st.sampled_from(["fast", "hbsj"]),
    table_size=st.sampled_from([None, 1, 4]),
)
def test_time_window_join_equals_nested_loop(rows, length, wm_every, lag, parallel, impl, table_size) -> None:
    events: list[tuple[str, int, int | None, int]] = []
    recs: list = []
    seen = [-(10**9), -(10**9)]
    for i, (side, k, t) in enumerate(rows):
        events.append(("row", side, k, t))
        b = pa.record_batch({"k": pa.array([k], pa.int64()), "id": [i], "t": [t]}, schema=TSCHEMA)
        recs.append(Data(L if side == 0 else R, b))
        seen[side] = max(seen[side], t)
        if i % wm_every == wm_every - 1:
            wm = seen[side] - lag
            events.append(("wm", side, wm, 0))
            recs.append(Watermark(L if side == 0 else R, wm))
    pairs, late = time_window_join(events, length)
    spec = HashWindowJoin(L, R, "k", TimeWindow(length, "t"), parallel=parallel, impl=impl,
                          table_size=table_size)
    h = OperatorHarness(spec, {L: TSCHEMA, R: TSCHEMA})
    got = h.run(recs)
    ids = [[i for i, r in enumerate(rows) if r[0] == s] for s in (0, 1)]
    want = sorted((ids[0][a], ids[1][b]) for a, b in pairs)
    got_pairs = sorted(zip(got.column("id").to_pylist(), got.column("id_right").to_pylist(), strict=True))
    assert got_pairs == want
    got_late = sum(b.num_rows for b in h.late)
    assert got_late == len(late)


# -- bad input --------------------------------------------------------------------------------------


def test_bad_window_sizes() -> None:
    for w in (0, -3):
        with pytest.raises(PlanError, match="window size must be >= 1"):
            CountWindow(w)
        with pytest.raises(PlanError, match="window size must be >= 1"):
            FastIndex(1, w)
        with pytest.raises(PlanError, match="window size must be >= 1"):
            HBSJIndex(1, w)
    with pytest.raises(PlanError, match=r"hbsj: a count window of 5000000000 tuples needs about "
                                        r"\d+\.\d GiB for its ring and hash tables"):
        HBSJIndex(1, 5_000_000_000)
    for bad in (1.5, True, "4"):
        with pytest.raises(PlanError, match="must be an integer"):
            CountWindow(bad)  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="time window length must be >= 0, got -1"):
        TimeWindow(-1, "t")
    with pytest.raises(PlanError, match=">= 0"):
        time_join_sequence(np.zeros(1, np.int8), np.zeros(1, np.int64), np.ones(1, bool), np.zeros(1, np.int64),
                           -1, True)
    for kw in ({"parallel": 0}, {"table_size": 0}, {"impl": "nested"}):
        with pytest.raises(PlanError, match="parallel|table_size|impl"):
            HashWindowJoin(L, R, "k", CountWindow(4), **kw)  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="different streams"):
        HashWindowJoin(L, L, "k", CountWindow(4))
        with pytest.raises(PlanError, match=">= 1"):
            join_sequence(np.zeros(1, np.int8), np.zeros(1, np.int64), np.ones(1, bool), w)
    with pytest.raises(PlanError):
        parse_count_window("zero")
    assert parse_count_window("2^10") == 1024 and parse_count_window("unbounded") is None


def test_key_type_mismatch_names_streams_and_columns() -> None:
    spec = HashWindowJoin(L, R, "k", CountWindow(4))
    bad = {L: SCHEMA, R: pa.schema([("k", pa.string()), ("id", pa.int64())])}
    with pytest.raises(SchemaError, match="'k'.*string"):
        spec.output_schema(bad)
    bad2 = {L: SCHEMA, R: pa.schema([("k", pa.date32()), ("id", pa.int64())])}
    with pytest.raises(SchemaError, match="differ.*stream 3.*date32"):
        spec.build(bad2)
    with pytest.raises(SchemaError, match="no key column 'x'"):
        HashWindowJoin(L, R, "x", CountWindow(4)).output_schema(INPUTS)


def test_unknown_stream() -> None:
    spec = HashWindowJoin(L, 9, "k", CountWindow(4))
    with pytest.raises(PlanError, match="unknown right stream id 9"):
        spec.output_schema(INPUTS)
    h = OperatorHarness(HashWindowJoin(L, R, "k", CountWindow(4)), INPUTS)
    with pytest.raises(PlanError, match="unknown stream id 7"):
        h.push(7, pa.record_batch({"k": [1], "id": [1]}, schema=SCHEMA))
    h.push(L, pa.record_batch({"k": [1], "id": [1]}, schema=SCHEMA))  # still works afterwards


def test_row_store_keeps_few_chunks() -> None:
    store = RowStore(SCHEMA)
    for i in range(1000):
        store.append(pa.record_batch({"k": [i], "id": [i]}, schema=SCHEMA))
    assert len(store._chunks) <= 12
    assert store.take(np.array([999, 0, 500])).column("k").to_pylist() == [999, 0, 500]
    store.evict_before(990)
    assert store.take(np.array([995])).column("id").to_pylist() == [995]


# -- the `splice join --kind hash` command ------------------------------------------------------------


def _files(tmp_path: Path) -> tuple[str, str]:
    import pyarrow.parquet as pq

    lp, rp = tmp_path / "l.parquet", tmp_path / "r.parquet"
    pq.write_table(pa.table({"k": pa.array([1, 2, 1, None, 2], pa.int64()), "a": [1, 2, 3, 4, 5],
                             "t": [1, 2, 3, 4, 5]}), lp)
    pq.write_table(pa.table({"k": [1, 1, 2, 2], "a": [10, 20, 30, 40], "t": [1, 3, 5, 7]}), rp)
    return str(lp), str(rp)


@pytest.mark.parametrize("impl,parallel", [("fast", 1), ("hbsj", 1), ("fast", 2), ("hbsj", 2)])
def test_cli_count_window(tmp_path: Path, impl: str, parallel: int, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    import pyarrow.parquet as pq

    from splice.cli import main

    lp, rp = _files(tmp_path)
    out = str(tmp_path / "o.parquet")
    capsys.readouterr()
    assert main(["join", "--kind", "hash", "--left", lp, "--right", rp, "--on", "k", "--window", "2",
                 "--impl", impl, "--parallel", str(parallel), "--out", out, "--json"]) == 0
    m = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]
    assert m["input_rows"] == 9 and m["output_rows"] == 7 and m["null_keys"] == 1
    assert m["seconds"] > 0 and m["rows_per_s"] > 0 and m["load_seconds"] >= 0
    if impl == "hbsj":  # every tuple with a key went to one of the four tables or the overflow buffer
        for side, stored in (("left", 4), ("right", 4)):
            st = m["hbsj"][side]
            assert sum(st["table_inserts"]) + st["overflow_inserts"] == stored
            assert st["probes"] == parallel * 4  # the other input's tuples with a key, at every PU
    else:
        assert "hbsj" not in m
    got = pq.read_table(out)
    assert got.schema.names == ["k", "a", "t", "k_right", "a_right", "t_right"]
    # L1 R10 L2 R20 L3 R30 L4(null) R40 L5: see the nested-loop walk in the docs
    assert list(zip(got["a"].to_pylist(), got["a_right"].to_pylist(), strict=True)) == [
        (1, 10), (1, 20), (3, 10), (3, 20), (2, 30), (5, 30), (5, 40)]


def test_cli_time_window_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow.parquet as pq

    from splice.cli import main

    lp, rp = _files(tmp_path)
    out = str(tmp_path / "o.parquet")
    assert main(["join", "--kind", "hash", "--left", lp, "--right", rp, "--on", "k", "--time", "t",
                 "--window-time", "2", "--out", out]) == 0
    got = pq.read_table(out)
    pairs = sorted(zip(got["a"].to_pylist(), got["a_right"].to_pylist(), strict=True))
    assert pairs == [(1, 10), (1, 20), (3, 10), (3, 20), (5, 30), (5, 40)]
    assert main(["join", "--kind", "hash", "--left", lp, "--right", rp, "--on", "k", "--window", "0",
                 "--out", out]) == 2
    assert main(["join", "--kind", "hash", "--left", lp, "--right", rp, "--on", "zz", "--window", "3",
                 "--out", out]) == 2
    assert main(["join", "--kind", "hash", "--left", lp, "--right", rp, "--on", "k", "--out", out]) == 2
    assert main(["join", "--kind", "hash", "--left", lp, "--right", rp, "--on", "k", "--window", "3",
                 "--how", "left", "--out", out]) == 2
    err = capsys.readouterr().err
    assert ">= 1" in err and "stream 'left' has no key column 'zz'" in err and "--window N" in err and "inner joins only" in err


@pytest.mark.parametrize("impl,parallel", [("fast", 1), ("hbsj", 1), ("hbsj", 2)])
def test_cli_time_window_metrics(tmp_path: Path, impl: str, parallel: int,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`--json` with a time window: null keys counted, the retained state, HB-SJ's figures."""
    import json

    from splice.cli import main

    lp, rp = _files(tmp_path)
    out = str(tmp_path / "o.parquet")
    capsys.readouterr()
    assert main(["join", "--kind", "hash", "--left", lp, "--right", rp, "--on", "k", "--time", "t",
                 "--window-time", "2", "--impl", impl, "--parallel", str(parallel), "--out", out, "--json"]) == 0
    m = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]
    assert m["input_rows"] == 9 and m["output_rows"] == 6 and m["null_keys"] == 1 and m["retained_max"] >= 1
    assert ("hbsj" in m) == (impl == "hbsj")
    if impl == "hbsj":
        st = m["hbsj"]["left"]
        assert sum(st["table_inserts"]) + st["overflow_inserts"] == 4  # left tuples with a key


def test_cli_rejects_bad_windows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from splice.cli import main

    lp, rp = _files(tmp_path)
    base = ["join", "--kind", "hash", "--left", lp, "--right", rp, "--on", "k", "--out", str(tmp_path / "o.parquet")]
    for extra in (["--window", "-3"], ["--window", "0"], ["--window", "2^x"], ["--time", "t", "--window-time", "-1"],
                  ["--window-time", "2"], ["--window", "2", "--time", "t", "--window-time", "2"]):
        assert main(base + extra) == 2, extra
    err = capsys.readouterr().err
    assert "got -3" in err and "--window-time must be >= 0, got -1" in err and "needs --time" in err
    assert "not both" in err and "'2^x'" in err
    import pyarrow.parquet as pq

    sp = tmp_path / "s.parquet"
    pq.write_table(pa.table({"k": ["1", "2"], "t": [1, 2]}), sp)
    assert main(["join", "--kind", "hash", "--left", lp, "--right", str(sp), "--on", "k", "--window", "2",
                 "--out", str(tmp_path / "o.parquet")]) == 2
    assert "stream 'left' column 'k' is int64, stream 'right' column 'k' is string" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: --parallel must be >= 1
        main(base + ["--window", "2", "--parallel", "0"])
    assert "expected an integer >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("impl", ["fast", "hbsj"])
def test_time_window_operator_contract(impl: str) -> None:
    """Snapshot/restore at every record, empty batches, reordered columns, with watermarks."""
    rng = np.random.default_rng(11)
    recs: list = []
    seen = [0, 0]
    for i in range(40):
        side = int(rng.integers(0, 2))
        t = int(seen[side] + rng.integers(0, 4))
        seen[side] = t
        b = pa.record_batch({"k": pa.array([int(rng.integers(0, 3))], pa.int64()), "id": [i], "t": [t]},
                            schema=TSCHEMA)
        recs.append(Data(L if side == 0 else R, b))
        if i % 5 == 4:
            recs.append(Watermark(L if side == 0 else R, t - 2))
    spec = HashWindowJoin(L, R, "k", TimeWindow(3, "t"), impl=impl)  # type: ignore[arg-type]
    got = check_operator(spec, {L: TSCHEMA, R: TSCHEMA}, recs)
    assert got.num_rows > 0


@settings(max_examples=30)
@given(rows=st.lists(st.tuples(st.integers(0, 1), st.one_of(st.none(), st.integers(0, 4)),
                               st.integers(0, 40)), max_size=100),
       length=st.integers(0, 10), by_time=st.booleans(), capacity=st.sampled_from([1, 16, 1024]),
       impl=st.sampled_from(["fast", "hbsj"]), table_size=st.sampled_from([None, 1, 4]))
def test_time_sequence_equals_nested_loop(rows, length, by_time, capacity, impl, table_size) -> None:
    """The command's one-call time join (fast or HB-SJ): nothing late, arrival sorted by time or
    not; rings small enough to be reused and grown many times."""
    if by_time:
        rows = sorted(rows, key=lambda r: r[2])
    sides = np.array([r[0] for r in rows], np.int8)
    keys = np.array([r[1] or 0 for r in rows], np.int64)
    valid = np.array([r[1] is not None for r in rows], np.bool_)
    times = np.array([r[2] for r in rows], np.int64)
    _, ls, rs, stats = time_join_sequence(sides, keys, valid, times, length, by_time, capacity, impl,
                                          table_size)
    want, late = time_window_join([("row", s, k, t) for s, k, t in rows], length)
    assert not late
    assert list(zip(ls.tolist(), rs.tolist(), strict=True)) == want
    assert stats["null_keys"] == int((~valid).sum())


def test_time_ring_kernels_equal_python_twins(monkeypatch: pytest.MonkeyPatch) -> None:
    import splice.joins.hash.hash_window_join as hwj

    rng = np.random.default_rng(5)
    n = 300
    sides = rng.integers(0, 2, n).astype(np.int8)
    keys = rng.integers(0, 6, n)
    valid = rng.random(n) > 0.1
    times = np.sort(rng.integers(0, 30, n))  # ~20 live tuples per side: the 16-slot ring grows
    got = time_join_sequence(sides, keys, valid, times, 3, True, 16)
    hb = time_join_sequence(sides, keys, valid, times, 3, True, 16, "hbsj", 4)
    # out of time order after the first 100: walks stop at the window's edge, then no longer
    shuffled = np.concatenate([times[:100], rng.permutation(times[100:])])
    unsorted = time_join_sequence(sides, keys, valid, shuffled, 3, False, 16)
    monkeypatch.setattr(hwj, "fx_time_ring_sequence", hwj.fx_time_ring_sequence.py_func)
    monkeypatch.setattr(hwj, "fx_ring_relink", hwj.fx_ring_relink.py_func)
    monkeypatch.setattr(hwj, "hb_time_sequence", hwj.hb_time_sequence.py_func)
    unsorted_twin = time_join_sequence(sides, keys, valid, shuffled, 3, False, 16)
    assert all(np.array_equal(a, b) for a, b in zip(unsorted[:3], unsorted_twin[:3], strict=True))
    want, _ = time_window_join([("row", int(s), int(k) if v else None, int(t))
                                for s, k, v, t in zip(sides, keys, valid, shuffled, strict=True)], 3)
    assert list(zip(unsorted[1].tolist(), unsorted[2].tolist(), strict=True)) == want
    twin = time_join_sequence(sides, keys, valid, times, 3, True, 16)
    assert all(np.array_equal(a, b) for a, b in zip(got[:3], twin[:3], strict=True))
    assert got[3] == twin[3] and got[3]["grows"] >= 1  # the twin grew the ring the same way
    hb_twin = time_join_sequence(sides, keys, valid, times, 3, True, 16, "hbsj", 4)
    assert all(np.array_equal(a, b) for a, b in zip(hb[:3], hb_twin[:3], strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(hb[:3], got[:3], strict=True))
    assert hb[3] == hb_twin[3] and hb[3]["left"]["overflow_inserts"] > 0  # tables of 4 overflow


@pytest.mark.parametrize("impl", ["fast", "hbsj"])
def test_time_sequence_retires_by_watermark_on_a_long_input(impl: str) -> None:
    """Arrival by time: the rings stay the size of one window however long the input; with no
    watermarks (arrival not by time) every tuple is retained."""
    n = 200_000
    rng = np.random.default_rng(2)
    sides = (np.arange(n) % 2).astype(np.int8)
    keys = rng.integers(0, 40, n)
    valid = np.ones(n, np.bool_)
    times = np.arange(n) // 4  # about 2 tuples per side per time unit
    ai, ls, rs, stats = time_join_sequence(sides, keys, valid, times, 8, True, 16, impl)  # type: ignore[arg-type]
    assert stats["capacity"] <= 64 and stats["retained"] <= 128  # a window holds ~18 per side
    lt, rt = times[sides == 0], times[sides == 1]
    lk, rk = keys[sides == 0], keys[sides == 1]
    assert np.all(lk[ls] == rk[rs]) and np.all(np.abs(lt[ls] - rt[rs]) <= 8)
    # on a prefix, the same pairs as the walk without watermarks, which retains every tuple
    m = 20_000
    _, ls2, rs2, unbounded = time_join_sequence(sides[:m], keys[:m], valid[:m], times[:m], 8, False, 16,
                                                impl)  # type: ignore[arg-type]
    assert unbounded["capacity"] >= m // 2
    pre = ai < m
    assert sorted(zip(ls[pre].tolist(), rs[pre].tolist(), strict=True)) == sorted(
        zip(ls2.tolist(), rs2.tolist(), strict=True))


# -- the arrival order inside the operator -----------------------------------------------------------

OSCHEMA = pa.schema([("k", pa.int64()), ("id", pa.int64()), ("t", pa.int64()), ("pos", pa.int64())])


@st.composite
def two_inputs(draw: st.DrawFn, max_rows: int = 90) -> list[dict[str, list]]:
    """Two inputs as column lists: ``k`` (nulls and duplicates), ``id`` the row, ``t`` an event
    time nondecreasing per input (ties within and across inputs), ``pos`` a global arrival
    position (one random interleaving of the two inputs)."""
    n = draw(st.integers(0, max_rows))
    sides = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    keys = draw(st.lists(st.one_of(st.none(), st.integers(0, 5)), min_size=n, max_size=n))
    steps = draw(st.lists(st.sampled_from([0, 0, 1, 2, 3]), min_size=n, max_size=n))
    out = []
    for s in (0, 1):
        idx = [i for i in range(n) if sides[i] == s]
        out.append({"k": [keys[i] for i in idx], "id": list(range(len(idx))),
                    "t": np.cumsum([steps[i] for i in idx], dtype=np.int64).tolist(), "pos": idx})
    return out


def path(draw: st.DrawFn, inputs: list[dict[str, list]], watermarks: bool = False) -> list:
    """Each input cut into batches (sizes 1, 2, 7, 49, 50, 51, 100 or random), the two inputs'
    batches in a random interleaving; with ``watermarks``, now and then after a batch a
    watermark of its input, lagging its newest time by a random amount (rows can be late)."""
    cuts = []
    for cols in inputs:
        n = len(cols["id"])
        split = draw(st.sampled_from([*SPLITS, 0]))  # 0: random sizes
        sizes = draw(st.lists(st.integers(1, 12), min_size=n, max_size=n)) if split == 0 else [split] * n
        bounds, at = [], 0
        for size in sizes:
            if at >= n:
                break
            bounds.append((at, min(n, at + size)))
            at += size
        cuts.append(bounds)
    turns = draw(st.permutations([0] * len(cuts[0]) + [1] * len(cuts[1])))
    recs: list = []
    nxt = [0, 0]
    for s in turns:
        a, b = cuts[s][nxt[s]]
        nxt[s] += 1
        cols = inputs[s]
        batch = pa.record_batch({c: pa.array(cols[c][a:b], pa.int64()) for c in OSCHEMA.names}, schema=OSCHEMA)
        recs.append(Data(L if s == 0 else R, batch))
        if watermarks and draw(st.booleans()):
            recs.append(Watermark(L if s == 0 else R, int(cols["t"][b - 1]) - draw(st.integers(-1, 6))))
    return recs


def late_rows(recs: list) -> list[set[int]]:
    """Per input, the ids of its rows that are late on this path (time <= its watermark then)."""
    wm: dict[int, int] = {}
    late: list[set[int]] = [set(), set()]
    for r in recs:
        if isinstance(r, Watermark):
            wm[r.stream_id] = max(wm.get(r.stream_id, r.time), r.time)
        elif isinstance(r, Data) and r.stream_id in wm:
            s = 0 if r.stream_id == L else 1
            late[s] |= {i for i, t in zip(r.batch.column("id").to_pylist(), r.batch.column("t").to_pylist(),
                                          strict=True) if t <= wm[r.stream_id]}
    return late


def ordered_reference(inputs: list[dict[str, list]], order: str, window: CountWindow | TimeWindow,
                      late: list[set[int]]) -> list[tuple[int, int]]:
    """(left id, right id) of the nested-loop join over the rows that are not late, in the order
    of ``order`` (ties left first)."""
    kept = [[i for i in cols["id"] if i not in late[s]] for s, cols in enumerate(inputs)]
    if order == POSITION:
        seq = merged_order(None, None, (len(kept[0]), len(kept[1])))
    else:
        seq = merged_order([inputs[0][order][i] for i in kept[0]], [inputs[1][order][i] for i in kept[1]])
    rows = [(s, kept[s][j]) for s, j in seq]
    if isinstance(window, CountWindow):
        pairs = count_window_join([(s, inputs[s]["k"][i]) for s, i in rows], window.size)
    else:
        pairs, none_late = time_window_join(
            [("row", s, inputs[s]["k"][i], inputs[s]["t"][i]) for s, i in rows], window.length)
        assert not none_late
    return [(kept[0][a], kept[1][b]) for a, b in pairs]


def id_pairs(t: pa.Table) -> list[tuple[int, int]]:
    return list(zip(t.column("id").to_pylist(), t.column("id_right").to_pylist(), strict=True))


@settings(max_examples=60, deadline=None)
@given(data=st.data(), inputs=two_inputs(), order=st.sampled_from(["t", "pos", POSITION]),
       window=st.one_of(st.builds(CountWindow, st.integers(1, 40)),
                        st.builds(TimeWindow, st.integers(0, 8), st.just("t"))),
       impl=st.sampled_from(["fast", "hbsj"]), parallel=st.integers(1, 3),
       table_size=st.sampled_from([None, 1, 4]))
def test_order_inside_the_operator_equals_the_merged_sequence(data, inputs, order, window, impl, parallel,
                                                               table_size) -> None:
    """Whatever batches the path cuts and however it interleaves the two inputs, the operator
    joins their rows in the order of ``order`` (ties left first) and emits exactly the rows, in
    the order, of the join over that merged sequence; over time windows with watermarks, late
    rows go to the late output with their stream id and the rest join as if they never came."""
    recs = path(data.draw, inputs, watermarks=isinstance(window, TimeWindow))
    spec = HashWindowJoin(L, R, "k", window, impl=impl, parallel=parallel, table_size=table_size, order=order)
    h = OperatorHarness(spec, {L: OSCHEMA, R: OSCHEMA})
    got = h.run([*recs, End()])
    late = late_rows(recs)
    assert id_pairs(got) == ordered_reference(inputs, order, window, late)
    assert sorted((sid, i) for sid, b in zip(h.late_inputs, h.late, strict=True)
                  for i in b.column("id").to_pylist()) == sorted(
        (L if s == 0 else R, i) for s in (0, 1) for i in late[s])
    st_ = h.logic.stats()  # type: ignore[attr-defined]
    for s, name in enumerate(("left", "right")):
        cols = inputs[s]
        assert st_[name]["null_keys"] == sum(k is None for i, k in enumerate(cols["k"]) if i not in late[s])
        assert st_[name]["late"] == len(late[s]) and st_[name]["waiting"] == 0


@settings(max_examples=40, deadline=None)
@given(data=st.data(), inputs=two_inputs(), length=st.integers(0, 8), impl=st.sampled_from(["fast", "hbsj"]),
       parallel=st.integers(1, 2), shuffle=st.booleans())
def test_time_window_pairs_do_not_depend_on_the_interleaving(data, inputs, length, impl, parallel,
                                                             shuffle) -> None:
    """Path order (``order=None``), nothing late: the set of pairs is every pair with equal keys
    and times at most D apart, however the inputs interleave; each input's watermark after a
    batch is just below the earliest time still to come on it (times out of order too)."""
    if shuffle:  # each input's rows out of time order
        for cols in inputs:
            perm = data.draw(st.permutations(range(len(cols["id"]))))
            for c in ("k", "t"):
                cols[c] = [cols[c][i] for i in perm]
    recs = []
    for r in path(data.draw, inputs):
        recs.append(r)
        s = 0 if r.stream_id == L else 1
        last = r.batch.column("id").to_pylist()[-1]
        rest = inputs[s]["t"][last + 1:]
        if rest and data.draw(st.booleans()):
            recs.append(Watermark(r.stream_id, min(rest) - 1))
    spec = HashWindowJoin(L, R, "k", TimeWindow(length, "t"), impl=impl, parallel=parallel)
    h = OperatorHarness(spec, {L: OSCHEMA, R: OSCHEMA})
    got = h.run(recs)
    whole, late = time_window_join(
        [("row", s, inputs[s]["k"][i], inputs[s]["t"][i]) for s in (0, 1) for i in inputs[s]["id"]], length)
    assert not late and not h.late
    assert sorted(id_pairs(got)) == sorted(whole)


@pytest.mark.parametrize("window", [CountWindow(5), TimeWindow(3, "t")], ids=["count", "time"])
@pytest.mark.parametrize("order", ["t", POSITION])
@pytest.mark.parametrize("impl,parallel", [("fast", 1), ("hbsj", 1), ("fast", 2)])
def test_ordered_operator_contract(window: CountWindow | TimeWindow, order: str, impl: str, parallel: int) -> None:
    """Snapshot/restore before every record (rows still waiting for their place included),
    empty batches, reordered columns: the uninterrupted output, in order."""
    rng = np.random.default_rng(17)
    inputs = []
    for _ in (0, 1):
        n = 45
        inputs.append({"k": [None if x == 4 else int(x) for x in rng.integers(0, 5, n)], "id": list(range(n)),
                       "t": np.cumsum(rng.integers(0, 3, n)).tolist(), "pos": list(range(n))})
    recs: list = []
    at = [0, 0]
    while at[0] < 45 or at[1] < 45:
        s = int(rng.integers(0, 2)) if at[0] < 45 and at[1] < 45 else (0 if at[0] < 45 else 1)
        b = int(rng.integers(1, 9))
        cols = inputs[s]
        hi = min(45, at[s] + b)
        recs.append(Data(L if s == 0 else R, pa.record_batch(
            {c: pa.array(cols[c][at[s]:hi], pa.int64()) for c in OSCHEMA.names}, schema=OSCHEMA)))
        if isinstance(window, TimeWindow) and rng.random() < 0.3:
            recs.append(Watermark(L if s == 0 else R, cols["t"][hi - 1] - 1))
        at[s] = hi
    recs.append(End())
    spec = HashWindowJoin(L, R, "k", window, impl=impl, parallel=parallel, order=order)  # type: ignore[arg-type]
    got = check_operator(spec, {L: OSCHEMA, R: OSCHEMA}, recs)
    assert id_pairs(got) == ordered_reference(inputs, order, window, [set(), set()]) and got.num_rows > 10


def test_ordered_snapshot_keeps_the_waiting_rows() -> None:
    """A snapshot taken while rows wait for their place holds them, and the restored join
    releases them where the uninterrupted one does."""
    spec = HashWindowJoin(L, R, "k", CountWindow(8), order="t")
    left = pa.record_batch({"k": [1, 1, 2], "id": [0, 1, 2], "t": [1, 4, 9], "pos": [0, 1, 2]}, schema=OSCHEMA)
    right = pa.record_batch({"k": [1, 2], "id": [0, 1], "t": [4, 20], "pos": [0, 1]}, schema=OSCHEMA)
    h = OperatorHarness(spec, {L: OSCHEMA, R: OSCHEMA})
    assert h.push(L, left).num_rows == 0
    assert h.logic.stats()["left"]["waiting"] == 3  # type: ignore[attr-defined]
    h.snapshot_and_restore()
    assert h.logic.stats()["left"]["waiting"] == 3  # type: ignore[attr-defined]
    # left 1, left 4, right 4 (ties left first), left 9; right 20 waits for the end
    assert id_pairs(h.push(R, right)) == [(0, 0), (1, 0)]
    h.snapshot_and_restore()
    assert id_pairs(h.end()) == [(2, 1)]


def test_out_of_order_rows_name_the_stream_column_and_row() -> None:
    spec = HashWindowJoin(L, R, "k", CountWindow(4), order="t")
    h = OperatorHarness(spec, {L: OSCHEMA, R: OSCHEMA})
    h.push(L, pa.record_batch({"k": [1, 2], "id": [0, 1], "t": [3, 5], "pos": [0, 1]}, schema=OSCHEMA))
    bad = pa.record_batch({"k": [1, 2, 3], "id": [2, 3, 4], "t": [5, 7, 6], "pos": [2, 3, 4]}, schema=OSCHEMA)
    with pytest.raises(SchemaError, match=r"stream 2 .*column 't'.*row 4 \(row 2 of this batch\) has 6 after 7"):
        h.push(L, bad)
    with pytest.raises(SchemaError, match=r"stream 2 .*row 2 \(row 0 of this batch\) has 2 after 5"):
        h.push(L, pa.record_batch({"k": [1], "id": [2], "t": [2], "pos": [2]}, schema=OSCHEMA))
    # nothing was taken from the refused batches
    h.push(L, pa.record_batch({"k": [1], "id": [2], "t": [5], "pos": [2]}, schema=OSCHEMA))
    assert h.logic.stats()["left"]["waiting"] == 3  # type: ignore[attr-defined]
    with pytest.raises(SchemaError, match="stream 3 has no order column 'zz'"):
        HashWindowJoin(L, R, "k", CountWindow(4), order="zz").build(
            {L: OSCHEMA.append(pa.field("zz", pa.int64())), R: OSCHEMA})
    with pytest.raises(SchemaError, match="order column 'k' has type string"):
        HashWindowJoin(L, R, "id", CountWindow(4), order="k").build(
            {L: pa.schema([("k", pa.string()), ("id", pa.int64())]), R: pa.schema([("k", pa.string()), ("id", pa.int64())])})
    with pytest.raises(PlanError, match="order must name a column"):
        HashWindowJoin(L, R, "k", CountWindow(4), order="")


@pytest.mark.parametrize("impl", ["fast", "hbsj"])
@pytest.mark.parametrize("parallel", [1, 2, 3])
@pytest.mark.parametrize("order", [None, "t"])
def test_time_rings_grow_and_retire_on_every_pu(impl: str, parallel: int, order: str | None) -> None:
    """Long inputs through every PU's rings, retiring by watermark (from the path, where the
    rings grow to hold batches; or each input's own times when ordered by them, where they stay
    the size of a window): the pairs equal the whole sequence joined in one call."""
    rng = np.random.default_rng(parallel)
    n = 12_000
    t = np.sort(rng.integers(0, n // 3, n))
    sides = rng.integers(0, 2, n).astype(np.int8)
    keys = rng.integers(0, 30, n)
    valid = rng.random(n) > 0.05
    _, want_l, want_r, _ = time_join_sequence(sides, keys, valid, t, 40, True)
    recs: list = []
    ids = [np.flatnonzero(sides == s) for s in (0, 1)]
    at = [0, 0]
    while at[0] < len(ids[0]) or at[1] < len(ids[1]):
        # the input whose next batch starts earliest goes next, as the command's sources take turns
        s = min((x for x in (0, 1) if at[x] < len(ids[x])), key=lambda x: (t[ids[x][at[x]]], x))
        rows = ids[s][at[s]:at[s] + int(rng.integers(1, 2000))]
        at[s] += len(rows)
        b = pa.record_batch({"k": pa.array(np.where(valid[rows], keys[rows], 0), mask=~valid[rows]),
                             "id": pa.array(at[s] - len(rows) + np.arange(len(rows))), "t": pa.array(t[rows]),
                             "pos": pa.array(rows)}, schema=OSCHEMA)
        recs.append(Data(L if s == 0 else R, b))
        if order is None:
            recs.append(Watermark(L if s == 0 else R, int(t[rows[-1]]) - 1))
    spec = HashWindowJoin(L, R, "k", TimeWindow(40, "t"), impl=impl, parallel=parallel, order=order)  # type: ignore[arg-type]
    h = OperatorHarness(spec, {L: OSCHEMA, R: OSCHEMA})
    got = h.run([*recs, End()])
    assert sorted(id_pairs(got)) == sorted(zip(want_l.tolist(), want_r.tolist(), strict=True))
    core = h.logic.core  # type: ignore[attr-defined]
    if order is None:  # a ring holds what came since the other input's last watermark: batches
        assert all(r.grows >= 1 for r in core.pus) and core.slots() <= 2 * 8192
    else:  # one window: ~60 tuples of each input
        assert core.slots() == 2 * parallel * 256
