"""Hash window joins on several key columns and on strings, binaries, dates, decimals, ...

Every join (fast, HB-SJ, SplitJoin; count and time windows; the operator and the command)
against the nested-loop reference, whose keys are Python tuples compared with ``==``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import PlanError, SchemaError
from splice.core.records import Data, Watermark
from splice.joins.common.join_windows import CountWindow, TimeWindow
from splice.joins.common.key_codec import KeyCodec, common_key_types
from splice.joins.hash.hash_tables import hash_join_tables, hash_time_join_tables
from splice.joins.hash.hash_window_join import HashWindowJoin
from splice.testing import OperatorHarness, check_operator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reference.hash_window_join import count_window_join, time_window_join, tuple_key  # noqa: E402

L, R = 2, 3
# the two inputs' key types differ but cast to one type per column
LSCHEMA = pa.schema([("s", pa.string()), ("n", pa.int32()), ("id", pa.int64()), ("t", pa.int64())])
RSCHEMA = pa.schema([("s", pa.large_string()), ("n", pa.int64()), ("id", pa.int64()), ("t", pa.int64())])
SPLITS = [1, 2, 7, 49, 50, 51, 100]

Key = tuple[str | None, int | None]
part_s = st.one_of(st.none(), st.sampled_from(["", "a", "b", "ab", "é", "a\x00"]))
part_n = st.one_of(st.none(), st.integers(-2, 2))
arrivals_st = st.lists(st.tuples(st.integers(0, 1), st.tuples(part_s, part_n)), max_size=120)
skewed_st = st.lists(st.tuples(st.integers(0, 1), st.sampled_from([("a", 1)] * 4 + [("a", 2), ("b", 1),
                                                                                     (None, 1)])),
                     max_size=120)


def ref_key(k: Key) -> tuple | None:
    """The reference's key: the tuple, or None when any part is null (never matches)."""
    return tuple_key(k)


def batch(side: int, rows: list[tuple[int, Key, int]]) -> pa.RecordBatch:
    schema = LSCHEMA if side == 0 else RSCHEMA
    return pa.record_batch({"s": [r[1][0] for r in rows], "n": [r[1][1] for r in rows],
                            "id": [r[0] for r in rows], "t": [r[2] for r in rows]}, schema=schema)


def to_records(arrivals: Sequence[tuple[int, Key]], split: int) -> list[Data]:
    """Runs of one side cut into batches of ``split`` rows; ``id`` = arrival index, ``t`` = 0."""
    recs: list[Data] = []
    i = 0
    while i < len(arrivals):
        j = i
        while j < len(arrivals) and arrivals[j][0] == arrivals[i][0] and j - i < split:
            j += 1
        side = arrivals[i][0]
        recs.append(Data(L if side == 0 else R, batch(side, [(x, arrivals[x][1], 0) for x in range(i, j)])))
        i = j
    return recs


def want_ids(arrivals: Sequence[tuple[int, Key]], pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    ids = [[i for i, a in enumerate(arrivals) if a[0] == s] for s in (0, 1)]
    return [(ids[0][a], ids[1][b]) for a, b in pairs]


def got_ids(t: pa.Table) -> list[tuple[int, int]]:
    return list(zip(t.column("id").to_pylist(), t.column("id_right").to_pylist(), strict=True))


@settings(max_examples=40)
@given(arrivals=st.one_of(arrivals_st, skewed_st), w=st.integers(1, 64), split=st.sampled_from(SPLITS),
       impl=st.sampled_from(["fast", "hbsj"]), parallel=st.integers(1, 3),
       table_size=st.sampled_from([None, 1, 4]))
def test_multi_column_string_keys_equal_nested_loop(arrivals, w, split, impl, parallel, table_size) -> None:
    spec = HashWindowJoin(L, R, ["s", "n"], CountWindow(w), impl=impl, parallel=parallel, table_size=table_size)
    h = OperatorHarness(spec, {L: LSCHEMA, R: RSCHEMA})
    got = h.run(to_records(arrivals, split))
    ref = [(s, ref_key(k)) for s, k in arrivals]
    assert got_ids(got) == want_ids(arrivals, count_window_join(ref, w))
    st_ = h.logic.stats()  # type: ignore[attr-defined]
    assert st_["left"]["null_keys"] + st_["right"]["null_keys"] == sum(k is None for _, k in ref)


@pytest.mark.parametrize("impl", ["fast", "hbsj"])
def test_forced_code_collisions_never_match_distinct_keys(monkeypatch: pytest.MonkeyPatch, impl: str) -> None:
    """Every key gets one of two codes: only the equality check keeps distinct keys apart."""
    real = KeyCodec.encode

    def colliding(self, columns, stream, names):  # type: ignore[no-untyped-def]
        codes, valid = real(self, columns, stream, names)
        return codes & 1, valid

    monkeypatch.setattr(KeyCodec, "encode", colliding)
    rng = np.random.default_rng(1)
    names = ["a", "b", "c", "ab", None]
    arrivals = [(int(rng.integers(0, 2)), (names[int(rng.integers(0, 5))], int(rng.integers(0, 3))))
                for _ in range(300)]
    ref = [(s, ref_key(k)) for s, k in arrivals]
    spec = HashWindowJoin(L, R, ["s", "n"], CountWindow(16), impl=impl)  # type: ignore[arg-type]
    got = OperatorHarness(spec, {L: LSCHEMA, R: RSCHEMA}).run(to_records(arrivals, 7))
    want = want_ids(arrivals, count_window_join(ref, 16))
    assert got_ids(got) == want and len(want) > 50
    left, right = _tables(arrivals)
    out, _ = hash_join_tables(left, right, ["s", "n"], 16, arrival="pos", impl=impl)
    assert got_ids(out) == want


@settings(max_examples=30)
@given(rows=st.lists(st.tuples(st.integers(0, 1), st.tuples(part_s, part_n), st.integers(0, 50)), max_size=80),
       length=st.integers(0, 8), wm_every=st.integers(1, 15), lag=st.integers(0, 10),
       impl=st.sampled_from(["fast", "hbsj"]), parallel=st.integers(1, 2))
def test_time_window_multi_keys_equal_nested_loop(rows, length, wm_every, lag, impl, parallel) -> None:
    events: list[tuple[str, int, Key | None, int]] = []
    recs: list = []
    seen = [-(10**9), -(10**9)]
    for i, (side, k, t) in enumerate(rows):
        events.append(("row", side, ref_key(k), t))
        recs.append(Data(L if side == 0 else R, batch(side, [(i, k, t)])))
        seen[side] = max(seen[side], t)
        if i % wm_every == wm_every - 1:
            events.append(("wm", side, seen[side] - lag, 0))
            recs.append(Watermark(L if side == 0 else R, seen[side] - lag))
    pairs, late = time_window_join(events, length)
    spec = HashWindowJoin(L, R, ("s", "n"), TimeWindow(length, "t"), impl=impl, parallel=parallel)
    h = OperatorHarness(spec, {L: LSCHEMA, R: RSCHEMA})
    got = h.run(recs)
    ids = [[i for i, r in enumerate(rows) if r[0] == s] for s in (0, 1)]
    assert sorted(got_ids(got)) == sorted((ids[0][a], ids[1][b]) for a, b in pairs)
    assert sum(b.num_rows for b in h.late) == len(late)


@pytest.mark.parametrize("impl,window", [("fast", CountWindow(5)), ("hbsj", CountWindow(5)),
                                         ("fast", TimeWindow(3, "t")), ("hbsj", TimeWindow(3, "t"))])
def test_operator_contract_with_string_keys(impl: str, window: CountWindow | TimeWindow) -> None:
    """Snapshot/restore at every record (codes are derived from the retained rows), empty
    batches, reordered columns."""
    rng = np.random.default_rng(4)
    recs: list = []
    seen = [0, 0]
    for i in range(30):
        side = int(rng.integers(0, 2))
        seen[side] += int(rng.integers(0, 3))
        k = (["x", "y", None][int(rng.integers(0, 3))], int(rng.integers(0, 2)))
        recs.append(Data(L if side == 0 else R, batch(side, [(i, k, seen[side])])))
        if i % 5 == 4:
            recs.append(Watermark(L if side == 0 else R, seen[side] - 2))
    spec = HashWindowJoin(L, R, ["s", "n"], window, impl=impl)  # type: ignore[arg-type]
    got = check_operator(spec, {L: LSCHEMA, R: RSCHEMA}, recs)
    assert got.num_rows > 0


# -- key types ------------------------------------------------------------------------------------------

D = decimal.Decimal
TYPED_CASES = [
    # (left type, right type, left values, right values): row i of each side has the same key
    (pa.date32(), pa.date64(), [dt.date(2020, 1, 2), dt.date(1999, 12, 31)],
     [dt.date(2020, 1, 2), dt.date(1999, 12, 31)]),
    (pa.timestamp("s"), pa.timestamp("ms"), [dt.datetime(2020, 1, 1, 5), dt.datetime(1960, 3, 1)],
     [dt.datetime(2020, 1, 1, 5), dt.datetime(1960, 3, 1)]),
    (pa.decimal128(5, 1), pa.decimal128(8, 3), [D("1.5"), D("-2.0")], [D("1.500"), D("-2.000")]),
    (pa.binary(2), pa.large_binary(), [b"ab", b"\x00\x01"], [b"ab", b"\x00\x01"]),
    (pa.bool_(), pa.int8(), [True, False], [1, 0]),
    (pa.uint64(), pa.uint64(), [2**64 - 1, 3], [2**64 - 1, 3]),
    (pa.float32(), pa.float64(), [1.5, -0.0], [1.5, 0.0]),
    (pa.dictionary(pa.int8(), pa.string()), pa.string(), ["p", "q"], ["p", "q"]),
]


@pytest.mark.parametrize("lt,rt,lv,rv", TYPED_CASES, ids=lambda x: str(x)[:20])
@pytest.mark.parametrize("impl", ["fast", "hbsj"])
def test_key_types_cast_to_one_type(lt, rt, lv, rv, impl) -> None:
    ls = pa.schema([("k", lt), ("id", pa.int64())])
    rs = pa.schema([("k", rt), ("id", pa.int64())])
    left = pa.record_batch([pa.array(lv, None if pa.types.is_dictionary(lt) else lt).cast(lt), pa.array([0, 1])], schema=ls)
    right = pa.record_batch([pa.array(rv, rt).cast(rt), pa.array([0, 1])], schema=rs)
    h = OperatorHarness(HashWindowJoin(L, R, "k", CountWindow(4), impl=impl), {L: ls, R: rs})
    got = h.run([Data(L, left), Data(R, right)])
    assert sorted(got_ids(got)) == [(0, 0), (1, 1)]


@pytest.mark.parametrize("lt,rt", [
    (pa.int64(), pa.string()), (pa.uint64(), pa.int64()), (pa.string(), pa.binary()),
    (pa.timestamp("s", "UTC"), pa.timestamp("s")), (pa.date32(), pa.timestamp("s")),
    (pa.int64(), pa.float64()), (pa.list_(pa.int64()), pa.list_(pa.int64())),
])
def test_incompatible_key_types_name_stream_and_column(lt, rt) -> None:
    spec = HashWindowJoin(L, R, ["n", "k"], CountWindow(4))
    ls = pa.schema([("n", pa.int64()), ("k", lt)])
    rs = pa.schema([("n", pa.int64()), ("k", rt)])
    with pytest.raises(SchemaError, match=r"stream 2 column 'k' is .*stream 3 column 'k' is"):
        spec.output_schema({L: ls, R: rs})


def test_key_column_lists_are_validated() -> None:
    with pytest.raises(PlanError, match="as many columns"):
        HashWindowJoin(L, R, ["a", "b"], CountWindow(2), right_on=["a"])
    with pytest.raises(PlanError, match="one or more key columns"):
        HashWindowJoin(L, R, [], CountWindow(2))
    spec = HashWindowJoin(L, R, ["s"], CountWindow(2), right_on="n")
    with pytest.raises(SchemaError, match="do not cast"):
        spec.output_schema({L: LSCHEMA, R: RSCHEMA})
    assert common_key_types(LSCHEMA, RSCHEMA, ["n", "s"], ["n", "s"], "l", "r") == [pa.int64(), pa.large_string()]


# -- the command ------------------------------------------------------------------------------------------


def _tables(arrivals: Sequence[tuple[int, Key]]) -> tuple[pa.Table, pa.Table]:
    """The arrivals as two tables with a global arrival column ``pos`` (and ``id`` = pos)."""
    out = []
    for side in (0, 1):
        rows = [(i, k) for i, (s, k) in enumerate(arrivals) if s == side]
        schema = LSCHEMA if side == 0 else RSCHEMA
        out.append(pa.table({"s": [k[0] for _, k in rows], "n": [k[1] for _, k in rows],
                             "id": [i for i, _ in rows], "t": [i for i, _ in rows]}, schema=schema)
                   .append_column("pos", pa.array([i for i, _ in rows], pa.int64())))
    return out[0], out[1]


@pytest.mark.parametrize("impl,parallel", [("fast", 1), ("hbsj", 1), ("fast", 2), ("hbsj", 3)])
def test_cli_multi_column_keys(tmp_path: Path, impl: str, parallel: int) -> None:
    from splice.cli import main

    rng = np.random.default_rng(9)
    names = ["a", "b", "ab", None]
    arrivals = [(int(rng.integers(0, 2)), (names[int(rng.integers(0, 4))], int(rng.integers(0, 3))))
                for _ in range(400)]
    ref = [(s, ref_key(k)) for s, k in arrivals]
    left, right = _tables(arrivals)
    lp, rp, out = tmp_path / "l.parquet", tmp_path / "r.parquet", str(tmp_path / "o.parquet")
    pq.write_table(left, lp)
    pq.write_table(right, rp)
    base = ["join", "--kind", "hash", "--left", str(lp), "--right", str(rp), "--on", "s,n", "--impl", impl,
            "--parallel", str(parallel), "--out", out, "--batch-size", "50"]
    assert main(base + ["--window", "8", "--arrival", "pos"]) == 0
    got = pq.read_table(out)
    assert got.schema.names[:4] == ["s", "n", "id", "t"] and "s_right" in got.schema.names
    assert got_ids(got) == want_ids(arrivals, count_window_join(ref, 8))
    # time window over t = arrival index, arriving by time
    assert main(base + ["--time", "t", "--window-time", "6"]) == 0
    pairs, _ = time_window_join([("row", s, k, i) for i, (s, k) in enumerate(ref)], 6)
    assert sorted(got_ids(pq.read_table(out))) == sorted(want_ids(arrivals, pairs))


@pytest.mark.parametrize("impl,parallel", [("fast", 1), ("hbsj", 1), ("fast", 2)])
def test_cli_time_window_state_stays_bounded(impl: str, parallel: int) -> None:
    """`--time TS --window-time D` retires tuples by watermark as the input streams: on a long
    input the join holds about one window's tuples, not the input."""
    n = 40_000 if impl == "fast" and parallel == 1 else 12_000
    rng = np.random.default_rng(3)
    t = np.arange(n) // 2
    # runs of 64 rows per side, so the batch-by-batch operator paths get real batches
    side = (np.arange(n) // 64) % 2
    tab = pa.table({"k": rng.integers(0, 50, n).astype(str), "t": t, "id": np.arange(n)})
    left, right = tab.filter(pa.array(side == 0)), tab.filter(pa.array(side == 1))
    got, stats = hash_time_join_tables(left, right, "k", "t", 16, impl=impl, parallel=parallel)
    assert stats["retained_max"] <= 1024 and stats["retained_end"] <= 1024  # n / 2 rows per side
    ids_l, ids_r = got.column("id").to_numpy(), got.column("id_right").to_numpy()
    assert np.all(np.abs(t[ids_l] - t[ids_r]) <= 16)
    assert got.column("k").equals(got.column("k_right"))
    # the same pairs as with no eviction at all (arrival order given: no watermarks)
    left2 = left.append_column("pos", left.column("id"))
    right2 = right.append_column("pos", right.column("id"))
    full, fstats = hash_time_join_tables(left2, right2, "k", "t", 16, arrival="pos")
    assert fstats["retained_end"] >= n // 2
    assert sorted(got_ids(got)) == sorted(got_ids(full))


@settings(max_examples=25)
@given(arrivals=st.one_of(arrivals_st, skewed_st), w=st.integers(1, 40), length=st.integers(0, 12),
       impl=st.sampled_from(["fast", "hbsj"]), parallel=st.integers(1, 2),
       batch_size=st.sampled_from([1, 7, 50, 65_536]))
def test_command_paths_equal_nested_loop(arrivals, w, length, impl, parallel, batch_size) -> None:
    """`hash_join_tables` (count) and `hash_time_join_tables` (time, arriving by time) on
    two-column string keys with nulls and duplicates, both inputs interleaved."""
    if not arrivals:
        return
    ref = [(s, ref_key(k)) for s, k in arrivals]
    left, right = _tables(arrivals)
    got, stats = hash_join_tables(left, right, ["s", "n"], w, arrival="pos", impl=impl, parallel=parallel,
                                  batch_size=batch_size)
    assert got_ids(got) == want_ids(arrivals, count_window_join(ref, w))
    assert stats["null_keys"] == sum(k is None for _, k in ref)
    # t = arrival index // 3: several tuples per time unit, arrival by time (ties left first)
    lt = left.set_column(3, "t", pa.array([i // 3 for i in left.column("id").to_pylist()], pa.int64()))
    rt = right.set_column(3, "t", pa.array([i // 3 for i in right.column("id").to_pylist()], pa.int64()))
    order = sorted(range(len(arrivals)), key=lambda i: (i // 3, arrivals[i][0]))
    pairs, late = time_window_join([("row", ref[i][0], ref[i][1], i // 3) for i in order], length)
    assert not late
    ordered = [arrivals[i] for i in order]
    ids = [[order[j] for j, a in enumerate(ordered) if a[0] == s] for s in (0, 1)]
    out, _ = hash_time_join_tables(lt, rt, ["s", "n"], "t", length, impl=impl, parallel=parallel,
                                   batch_size=batch_size)
    assert sorted(got_ids(out)) == sorted((ids[0][a], ids[1][b]) for a, b in pairs)


@pytest.mark.parametrize("window", [["--window", "8"], ["--window-time", "5", "--impl", "hbsj"]])
def test_cli_checkpointed_multi_column_keys_equal_plain(tmp_path: Path, window: list[str]) -> None:
    """With --checkpoint-dir the join runs as an operator on the engine: same rows as the plain
    command (the operator re-encodes its keys when restored)."""
    from splice.cli import main

    rng = np.random.default_rng(6)
    names = ["a", "b", None]
    arrivals = [(int(rng.integers(0, 2)), (names[int(rng.integers(0, 3))], int(rng.integers(0, 2))))
                for _ in range(240)]
    left, right = _tables(arrivals)
    lp, rp = tmp_path / "l.parquet", tmp_path / "r.parquet"
    pq.write_table(left, lp)
    pq.write_table(right, rp)
    common = ["join", "--kind", "hash", "--left", str(lp), "--right", str(rp), "--on", "s,n", "--time", "t",
              "--batch-size", "16", *window]
    assert main([*common, "--out", str(tmp_path / "plain.parquet")]) == 0
    assert main([*common, "--out", str(tmp_path / "ck.parquet"), "--checkpoint-dir", str(tmp_path / "d"),
                 "--checkpoint-interval", "0.05"]) == 0
    want, got = pq.read_table(tmp_path / "plain.parquet"), pq.read_table(tmp_path / "ck.parquet")
    assert want.num_rows > 0 and sorted(got_ids(got)) == sorted(got_ids(want))
