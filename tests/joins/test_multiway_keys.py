"""Multiway join on keys of any hashable type (strings, decimals, dates, ...) against the nested-loop
reference, whose keys are Python values compared with ``==``."""

from __future__ import annotations

import datetime as dt
import decimal
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import PlanError, SchemaError
from splice.core.records import Data
from splice.joins.common.key_codec import KeyCodec
from splice.joins.multiway.multiway_join import MultiwayJoin, key_classes
from splice.testing import OperatorHarness, check_operator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reference.multiway_join import multiway_count_join  # noqa: E402

D = decimal.Decimal
C, ORD, LI = 2, 3, 4
SIDS = (C, ORD, LI)
# customer.ck (string) = orders.ck (large_string); orders.ok (decimal 6,2) = lineitem.ok (decimal 9,3);
# lineitem.s (string_view... as string) joins customer.ck in the triangle
SCHEMAS = {
    C: pa.schema([("ck", pa.string()), ("id", pa.int64())]),
    ORD: pa.schema([("ok", pa.decimal128(6, 2)), ("ck", pa.large_string()), ("id", pa.int64())]),
    LI: pa.schema([("ok", pa.decimal128(9, 3)), ("s", pa.string()), ("id", pa.int64())]),
}
CHAIN = ((C, "ck", ORD, "ck"), (ORD, "ok", LI, "ok"))
TRIANGLE = (*CHAIN, (C, "ck", LI, "s"))
REF = {C: 0, ORD: 1, LI: 2}
SPLITS = [1, 2, 7, 49, 50, 51, 100]

text = st.one_of(st.none(), st.sampled_from(["", "a", "b", "ab", "é", "a\x00"]))
dec = st.one_of(st.none(), st.sampled_from([D("0"), D("1.5"), D("-2.25"), D("1.50")]))
arrival = st.one_of(
    st.tuples(st.just(0), st.fixed_dictionaries({"ck": text})),
    st.tuples(st.just(1), st.fixed_dictionaries({"ok": dec, "ck": text})),
    st.tuples(st.just(2), st.fixed_dictionaries({"ok": dec, "s": text})),
)
# skew: most tuples share one key
skewed = st.one_of(
    st.tuples(st.just(0), st.fixed_dictionaries({"ck": st.sampled_from(["a", "a", "a", "b", None])})),
    st.tuples(st.just(1), st.fixed_dictionaries({"ok": st.sampled_from([D("1.5"), D("1.5"), None]),
                                                 "ck": st.sampled_from(["a", "a", "b"])})),
    st.tuples(st.just(2), st.fixed_dictionaries({"ok": st.sampled_from([D("1.500"), D("1.5"), D("2")]),
                                                 "s": st.sampled_from(["a", "b"])})),
)


def to_records(arrivals: list, split: int) -> list[Data]:
    """Runs of one stream cut into batches of ``split`` rows; ``id`` = arrival index."""
    recs: list[Data] = []
    i = 0
    while i < len(arrivals):
        j = i
        while j < len(arrivals) and arrivals[j][0] == arrivals[i][0] and j - i < split:
            j += 1
        sid = SIDS[arrivals[i][0]]
        schema = SCHEMAS[sid]
        cols = [pa.array([k if f.name == "id" else a[1].get(f.name) for k, a in enumerate(arrivals[i:j], i)],
                         f.type) for f in schema]
        recs.append(Data(sid, pa.record_batch(cols, schema=schema)))
        i = j
    return recs


def expected(arrivals: list, window: int | None, predicates: tuple) -> list[tuple]:
    preds = [(REF[a], ca, REF[b], cb) for a, ca, b, cb in predicates]
    res = multiway_count_join(3, preds, arrivals, window)
    ids = [[i for i, a in enumerate(arrivals) if a[0] == s] for s in range(3)]
    return sorted(tuple(ids[s][q] for s, q in enumerate(r)) for r in res)


def got_ids(table: pa.Table) -> list[tuple]:
    return sorted(zip(table.column("id").to_pylist(), table.column("id_right").to_pylist(),
                      table.column("id_right_right").to_pylist(), strict=True))


def null_counts(arrivals: list, predicates: tuple) -> dict[int, int]:
    """Per stream, the tuples with a null in one of its join columns."""
    cols = {s: {c for a, ca, b, cb in predicates for x, c in ((a, ca), (b, cb)) if x == s} for s in SIDS}
    return {s: sum(1 for x, d in arrivals if SIDS[x] == s and any(d[c] is None for c in cols[s])) for s in SIDS}


@settings(max_examples=40)
@given(arrivals=st.lists(st.one_of(arrival, skewed), max_size=90),
       window=st.one_of(st.none(), st.integers(1, 64)), split=st.sampled_from(SPLITS),
       impl=st.sampled_from(["fast", "hbsj"]), triangle=st.booleans())
def test_string_and_decimal_keys_equal_nested_loop(arrivals, window, split, impl, triangle) -> None:
    if impl == "hbsj" and window is None:
        window = 64
    preds = TRIANGLE if triangle else CHAIN
    spec = MultiwayJoin(SIDS, preds, window, impl=impl, table_size=2 if impl == "hbsj" else None)
    h = OperatorHarness(spec, SCHEMAS)
    got = h.run(to_records(arrivals, split))
    assert got.schema.names == ["ck", "id", "ok", "ck_right", "id_right", "ok_right", "s", "id_right_right"]
    assert got.schema.field("ck_right").type == pa.large_string()  # columns keep their own types
    assert got_ids(got) == expected(arrivals, window, preds)
    stats = h.logic.stats()  # type: ignore[attr-defined]
    assert stats["null_keys"] == null_counts(arrivals, preds)
    if impl == "hbsj":  # per stage and join column: every non-null value went to a table or the overflow
        for sid, per_col in stats["stages"].items():
            for col, st_ in zip(spec.attrs[sid], per_col, strict=True):
                n = sum(1 for x, d in arrivals if SIDS[x] == sid and d[col] is not None)
                assert sum(st_["table_inserts"]) + st_["overflow_inserts"] == n


@pytest.mark.parametrize("impl", ["fast", "hbsj"])
def test_forced_code_collisions_never_match_distinct_keys(monkeypatch: pytest.MonkeyPatch, impl: str) -> None:
    """Every hashed key gets one of two codes: only the equality check keeps distinct keys apart."""
    real = KeyCodec.encode

    def colliding(self, columns, stream, names):  # type: ignore[no-untyped-def]
        codes, valid = real(self, columns, stream, names)
        return (codes if self.exact else codes & 1), valid

    monkeypatch.setattr(KeyCodec, "encode", colliding)
    rng = np.random.default_rng(3)
    names = ["a", "b", "c", "ab", None]
    decs = [D("1"), D("2.5"), D("-3"), None]
    arrivals: list = []
    for _ in range(240):
        s = int(rng.integers(0, 3))
        ck, ok = names[int(rng.integers(0, 5))], decs[int(rng.integers(0, 4))]
        arrivals.append((s, {"ck": ck} if s == 0 else {"ok": ok, "ck": ck} if s == 1 else {"ok": ok, "s": ck}))
    for preds in (CHAIN, TRIANGLE):
        spec = MultiwayJoin(SIDS, preds, 24, impl=impl)  # type: ignore[arg-type]
        got = OperatorHarness(spec, SCHEMAS).run(to_records(arrivals, 7))
        want = expected(arrivals, 24, preds)
        assert got_ids(got) == want and len(want) > 20


@pytest.mark.parametrize("window", [None, 5])
def test_operator_contract_with_string_keys(window: int | None) -> None:
    """Snapshot/restore at every record (codes are derived from the retained rows, the null-key
    counts are kept), empty batches, reordered columns."""
    rng = np.random.default_rng(8)
    names = ["x", "y", None]
    arrivals: list = []
    for _ in range(60):
        s = int(rng.integers(0, 3))
        ck, ok = names[int(rng.integers(0, 3))], [D("1"), D("2")][int(rng.integers(0, 2))]
        arrivals.append((s, {"ck": ck} if s == 0 else {"ok": ok, "ck": ck} if s == 1 else {"ok": ok, "s": ck}))
    spec = MultiwayJoin(SIDS, TRIANGLE, window)
    got = check_operator(spec, SCHEMAS, to_records(arrivals, 4))
    assert got_ids(got) == expected(arrivals, window, TRIANGLE) and got.num_rows > 0
    h = OperatorHarness(spec, SCHEMAS)
    recs = to_records(arrivals, 4)
    for r in recs[:7]:
        h.step(r)
    h.snapshot_and_restore()
    for r in recs[7:]:
        h.step(r)
    assert h.logic.stats()["null_keys"] == null_counts(arrivals, TRIANGLE)  # type: ignore[attr-defined]


# -- key types ------------------------------------------------------------------------------------------

TYPED = [
    # one key tied across three streams: (type of stream C, ORD, LI), values of rows 0 and 1
    ((pa.int16(), pa.int64(), pa.int32()), [3, -7]),
    ((pa.date32(), pa.date64(), pa.date32()), [dt.date(2020, 1, 2), dt.date(1969, 12, 31)]),
    ((pa.timestamp("s"), pa.timestamp("ms"), pa.timestamp("us")), [dt.datetime(2020, 1, 1, 5), dt.datetime(1960, 3, 1)]),
    ((pa.binary(2), pa.large_binary(), pa.binary()), [b"ab", b"\x00\x01"]),
    ((pa.bool_(), pa.int8(), pa.bool_()), [True, False]),
    ((pa.uint64(), pa.uint64(), pa.uint64()), [2**64 - 1, 3]),
    ((pa.decimal128(4, 1), pa.decimal128(10, 4), pa.decimal256(20, 2)), [D("1.5"), D("-2.0")]),
    ((pa.dictionary(pa.int8(), pa.string()), pa.string(), pa.large_string()), ["p", "q"]),
]


@pytest.mark.parametrize("types,values", TYPED, ids=lambda x: str(x)[:24])
@pytest.mark.parametrize("impl", ["fast", "hbsj"])
def test_key_types_cast_to_one_type(types, values, impl) -> None:
    """A chain a.k = b.k, b.k = c.k over three differently typed columns: rows with equal values
    join, whatever the width, unit, scale or encoding."""
    schemas = {s: pa.schema([("k", t), ("id", pa.int64())]) for s, t in zip(SIDS, types, strict=True)}
    preds = ((C, "k", ORD, "k"), (ORD, "k", LI, "k"))
    recs = []
    for s, t in zip(SIDS, types, strict=True):
        plain = t.value_type if pa.types.is_dictionary(t) else t
        try:
            col = pa.array(values, plain).cast(t)
        except pa.ArrowTypeError:  # booleans as int8
            col = pa.array(values).cast(t)
        recs.append(Data(s, pa.record_batch([col, pa.array([0, 1])], schema=schemas[s])))
    got = OperatorHarness(MultiwayJoin(SIDS, preds, 4, impl=impl), schemas).run(recs)
    assert got_ids(got) == [(0, 0, 0), (1, 1, 1)]


def test_key_classes_tie_columns_through_predicates() -> None:
    k = key_classes(TRIANGLE)
    assert k[(C, "ck")] == k[(ORD, "ck")] == k[(LI, "s")] != k[(ORD, "ok")] == k[(LI, "ok")]


def test_incompatible_key_types_name_stream_and_column() -> None:
    bad = {**SCHEMAS, ORD: pa.schema([("ok", pa.decimal128(6, 2)), ("ck", pa.int64()), ("id", pa.int64())])}
    with pytest.raises(SchemaError, match=r"stream 2 column 'ck' is string.*stream 3 column 'ck' is int64"):
        MultiwayJoin(SIDS, CHAIN, 4).output_schema(bad)
    # each predicate fits, but the triangle ties a string key to a decimal one
    tri = ((C, "ck", ORD, "ck"), (ORD, "ok", LI, "ok"), (C, "ck", LI, "ok"))
    with pytest.raises(SchemaError, match=r"do not cast safely to one type.*stream 4 column 'ok'"):
        MultiwayJoin(SIDS, tri, 4).build(SCHEMAS)
    with pytest.raises(SchemaError, match="stream 4 has no key column 'zz'"):
        MultiwayJoin(SIDS, ((C, "ck", ORD, "ck"), (ORD, "ok", LI, "zz")), 4).output_schema(SCHEMAS)
    nested = {**SCHEMAS, C: pa.schema([("ck", pa.list_(pa.string())), ("id", pa.int64())])}
    with pytest.raises(SchemaError, match="stream 2 column 'ck'"):
        MultiwayJoin(SIDS, CHAIN, 4).output_schema(nested)


def test_bad_windows_and_plans() -> None:
    for w in (0, -1, -64):
        with pytest.raises(PlanError, match="window size must be >= 1"):
            MultiwayJoin(SIDS, CHAIN, w)
    with pytest.raises(PlanError, match="unknown impl"):
        MultiwayJoin(SIDS, CHAIN, 4, impl="nested")  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="table_size must be >= 1"):
        MultiwayJoin(SIDS, CHAIN, 4, impl="hbsj", table_size=0)
    with pytest.raises(PlanError, match="with itself"):
        MultiwayJoin(SIDS, (*CHAIN, (C, "ck", C, "id")), 4)
    with pytest.raises(PlanError, match="unknown stream id 4"):
        MultiwayJoin(SIDS, CHAIN, 4).output_schema({C: SCHEMAS[C], ORD: SCHEMAS[ORD]})
