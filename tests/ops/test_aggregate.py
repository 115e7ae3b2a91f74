"""GroupBy against the row-loop reference, the contract suite, the kernels' twins, bad input."""

from __future__ import annotations

import datetime as dt
import pickle
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import PlanError, SchemaError
from splice.core.records import Data, End
from splice.kernels import group_keys as G
from splice.ops import _agg_kernels as K
from splice.ops.aggregate import Agg, GroupBy
from splice.ops.arithmetic import col, decimal_words, lit, parse
from splice.testing import OperatorHarness, check_operator, rebatch, run_operator
from tests.reference import aggregate_kernels as R
from tests.reference import group_keys as RG
from tests.reference.aggregates import group_by as ref_group_by

SIZES = [1, 2, 7, 49, 50, 51, 100]
DEC = pa.decimal128(12, 2)
SCHEMA = pa.schema(
    [
        ("k", pa.string()),
        ("n", pa.int32()),
        ("x", DEC),
        ("y", pa.int64()),
        ("f", pa.float64()),
        ("d", pa.date32()),
    ]
)
WORDS = ["a", "b", "", "long string key", "another long one", "ü"]


@st.composite
def tables(draw: st.DrawFn, max_rows: int = 120) -> pa.Table:
    n = draw(st.integers(0, max_rows))
    k = draw(st.lists(st.one_of(st.none(), st.sampled_from(WORDS)), min_size=n, max_size=n))
    nn = draw(st.lists(st.one_of(st.none(), st.integers(-3, 3)), min_size=n, max_size=n))
    x = draw(
        st.lists(
            st.one_of(st.none(), st.integers(-(10**7), 10**7).map(lambda v: Decimal(v).scaleb(-2))),
            min_size=n, max_size=n,
        )
    )
    y = draw(st.lists(st.one_of(st.none(), st.integers(-(2**40), 2**40)), min_size=n, max_size=n))
    f = draw(
        st.lists(
            st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False).map(lambda v: round(v, 3))),
            min_size=n, max_size=n,
        )
    )
    d = draw(
        st.lists(
            st.one_of(st.none(), st.dates(dt.date(1990, 1, 1), dt.date(2000, 1, 1))),
            min_size=n, max_size=n,
        )
    )
    return pa.table({"k": k, "n": nn, "x": x, "y": y, "f": f, "d": d}, schema=SCHEMA)


def _mul(a: Decimal | None, b: Decimal | None) -> Decimal | None:
    return None if a is None or b is None else a * b


AGGS = [
    (Agg("rows", "count"), ("rows", "count", None)),
    (Agg("cx", "count", "x"), ("cx", "count", lambda r: r["x"])),
    (Agg("sx", "sum", "x"), ("sx", "sum", lambda r: r["x"])),
    (Agg("ax", "avg", "x"), ("ax", "avg", lambda r: r["x"])),
    (Agg("mnx", "min", "x"), ("mnx", "min", lambda r: r["x"])),
    (Agg("mxx", "max", "x"), ("mxx", "max", lambda r: r["x"])),
    (Agg("sy", "sum", "y"), ("sy", "sum", lambda r: r["y"])),
    (Agg("ay", "avg", "y * 3"), ("ay", "avg", lambda r: None if r["y"] is None else r["y"] * 3)),
    (Agg("sf", "sum", "f"), ("sf", "sum", lambda r: r["f"])),
    (Agg("mnk", "min", "k"), ("mnk", "min", lambda r: r["k"])),
    (Agg("mxd", "max", "d"), ("mxd", "max", lambda r: r["d"])),
    (
        Agg("sxy", "sum", "x * (1 - x) + 0.5"),
        ("sxy", "sum", lambda r: None if r["x"] is None else r["x"] * (1 - r["x"]) + Decimal("0.5")),
    ),
    (
        Agg("sxx", "sum", col("x") * col("x") * 2),
        ("sxx", "sum", lambda r: _mul(_mul(r["x"], r["x"]), Decimal(2))),
    ),
]
#: avg(x) also has sum(x) in the plan: DuckDB computes it via the sum
VIA_SUM = [a.name == "ax" for a, _ in AGGS]


def _data(table: pa.Table, size: int) -> list[Data]:
    return [Data(2, b) for b in rebatch(table, size)]


def _expected(table: pa.Table, keys: list[str]) -> list[tuple]:
    return ref_group_by(table.to_pylist(), keys, [r for _, r in AGGS], VIA_SUM)


def _rows(out: pa.Table) -> list[tuple]:
    cols = [out.column(i).to_pylist() for i in range(out.num_columns)]
    return list(zip(*cols, strict=True))


def _same(got: list[tuple], want: list[tuple]) -> None:
    assert len(got) == len(want), (got, want)
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g, w, strict=True):
            if isinstance(b, float) and isinstance(a, float):
                assert a == pytest.approx(b, rel=1e-12, abs=1e-9), (g, w)
            else:
                assert a == b and type(a) is type(b), (g, w)


@settings(max_examples=25)
@given(tables(), st.sampled_from(SIZES), st.sampled_from([["k"], ["k", "n"], [], ["d", "n"]]))
def test_group_by_matches_reference(table: pa.Table, size: int, keys: list[str]) -> None:
    spec = GroupBy(keys, [a for a, _ in AGGS])
    out, _ = run_operator(spec, {2: SCHEMA}, [*_data(table, size), End()])
    _same(_rows(out), _expected(table, keys))


def test_decimal_sums_are_exact_beyond_64_bits_and_typed_like_duckdb() -> None:
    big = Decimal(9 * 10**17 - 1)
    dec = pa.decimal128(18, 0)
    table = pa.table({"v": pa.array([big] * 100 + [-big, None], dec)})
    spec = GroupBy([], [Agg("s", "sum", "v"), Agg("a", "avg", "v"), Agg("m", "max", "v")])
    for size in (7, 49):  # int64 partials per batch, then limbs per row
        out, _ = run_operator(spec, {2: table.schema}, [*_data(table, size), End()])
        assert out.schema.field("s").type == pa.decimal128(38, 0)
        assert out.column("s").to_pylist() == [big * 99]
        assert out.column("a").to_pylist() == [float(big * 99) / 101]
        assert out.column("m").type == dec and out.column("m").to_pylist() == [big]
    keyed = GroupBy(["k"], [Agg("s", "sum", "v")])
    ktable = table.append_column("k", pa.array([i % 3 for i in range(len(table))]))
    out, _ = run_operator(keyed, {2: ktable.schema}, [*_data(ktable, 100), End()])
    want: dict[int, Decimal] = {}
    for r in ktable.to_pylist():
        if r["v"] is not None:
            want[r["k"]] = want.get(r["k"], Decimal(0)) + r["v"]
    assert dict(zip(out.column("k").to_pylist(), out.column("s").to_pylist(), strict=True)) == want


def test_decimal_product_types_and_values() -> None:
    p = pa.array([Decimal("10.00"), Decimal("3.33"), None], DEC)
    d = pa.array([Decimal("0.10"), Decimal("0.05"), Decimal("0.01")], DEC)
    t = pa.array([Decimal("0.02"), Decimal("0.08"), Decimal("0.00")], DEC)
    table = pa.table({"p": p, "d": d, "t": t})
    spec = GroupBy(
        [],
        [
            Agg("dp", "sum", "p * (1 - d)"),
            Agg("ch", "sum", "p * (1 - d) * (1 + t)"),
            Agg("mn", "min", "p * (1 - d)"),
        ],
    )
    out = OperatorHarness(spec, {2: table.schema})
    out.push(2, table.to_batches()[0])
    res = out.end()
    assert res.schema.field("dp").type == pa.decimal128(38, 4)
    assert res.schema.field("ch").type == pa.decimal128(38, 6)
    assert res.column("dp").to_pylist() == [Decimal("9.0000") + Decimal("3.1635")]
    ch = Decimal("9.0000") * Decimal("1.02") + Decimal("3.1635") * Decimal("1.08")
    assert res.column("ch").to_pylist() == [ch]
    assert res.column("mn").to_pylist() == [Decimal("3.1635")]


def test_null_keys_form_one_group_of_their_own() -> None:
    table = pa.table({"k": ["a", None, "a", None], "j": [None, None, 1, None], "v": [1, 2, 3, 4]})
    spec = GroupBy(["k", "j"], [Agg("n", "count"), Agg("s", "sum", "v")])
    out, _ = run_operator(spec, {2: table.schema}, [*_data(table, 1), End()])
    assert _rows(out) == [("a", None, 1, 1), (None, None, 2, 6), ("a", 1, 1, 3)]


def test_global_aggregate_over_no_rows_is_one_row_of_nulls_and_zero_counts() -> None:
    schema = pa.schema([("v", DEC)])
    spec = GroupBy([], [Agg("n", "count"), Agg("s", "sum", "v"), Agg("a", "avg", "v")])
    empty = pa.record_batch([pa.array([], DEC)], schema=schema)
    out, _ = run_operator(spec, {2: schema}, [Data(2, empty), End()])
    assert _rows(out) == [(0, None, None)]
    keyed = GroupBy(["v"], [Agg("n", "count")])
    out, _ = run_operator(keyed, {2: schema}, [End()])
    assert out.num_rows == 0


def test_key_types_round_trip() -> None:
    table = pa.table(
        {
            "b": pa.array([True, False, None, True]),
            "dec": pa.array([Decimal("1.5"), None, Decimal("-2.25"), Decimal("1.5")], pa.decimal128(10, 2)),
            "wide": pa.array([Decimal("1"), Decimal("2"), None, Decimal("1")], pa.decimal128(30, 0)),
            "fl": pa.array([0.5, float("nan"), None, 0.5]),
            "ts": pa.array([1, 2, None, 1], pa.timestamp("ms")),
            "bin": pa.array([b"x" * 10, b"", None, b"x" * 10], pa.binary()),
            "ls": pa.array(["q" * 9, "r", None, "q" * 9], pa.large_string()),
            "i8": pa.array([1, -1, None, 1], pa.int8()),
        }
    )
    keys = table.schema.names
    spec = GroupBy(keys, [Agg("n", "count")])
    out, _ = run_operator(spec, {2: table.schema}, [*_data(table, 2), End()])
    assert out.schema == pa.schema([table.schema.field(k) for k in keys] + [pa.field("n", pa.int64())])
    rows = _rows(out)
    assert len(rows) == 3 and rows[0][-1] == 2
    assert rows[0][:-1] == tuple(table.slice(0, 1).to_pylist()[0].values())
    assert rows[2][:-1] == (None, Decimal("-2.25"), None, None, None, None, None, None)


def test_dictionary_keys_are_coded_by_value() -> None:
    arr = pa.array(["x", "y", "x", "long long key"]).dictionary_encode()
    batch = pa.record_batch({"k": arr, "v": [1, 2, 3, 4]})
    spec = GroupBy(["k"], [Agg("s", "sum", "v")])
    out, _ = run_operator(spec, {2: batch.schema}, [Data(2, batch), End()])
    assert _rows(out) == [("x", 4), ("y", 2), ("long long key", 4)]


def test_where_keeps_only_matching_rows() -> None:
    table = pa.table({"k": ["a", "b", "a", "b"], "v": [1, 2, 3, None]})
    spec = GroupBy(["k"], [Agg("s", "sum", "v"), Agg("n", "count")], where=pc.field("v") >= 2)
    out, _ = run_operator(spec, {2: table.schema}, [*_data(table, 3), End()])
    assert _rows(out) == [("b", 2, 1), ("a", 3, 1)]
    assert spec.columns_used({2: table.schema}) == {2: {"k", "v"}}


def test_contract_suite() -> None:
    table = pa.table(
        {
            "k": ["a", None, "long key here", "a", "b", None, "a"],
            "v": pa.array([Decimal(i) / 4 for i in range(6)] + [None], pa.decimal128(10, 2)),
            "i": [1, 2, 3, None, 5, 6, 7],
        }
    )
    spec = GroupBy(
        ["k"],
        [Agg("n", "count"), Agg("s", "sum", "v"), Agg("a", "avg", "v * i"), Agg("m", "min", "k")],
    )
    check_operator(spec, {2: table.schema}, [*_data(table, 2), End()])
    check_operator(GroupBy([], [Agg("s", "sum", "i")]), {2: table.schema}, [*_data(table, 3), End()])


def test_snapshot_is_a_copy() -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    h = OperatorHarness(GroupBy(["k"], [Agg("s", "sum", "v")]), {2: schema})
    h.push(2, pa.record_batch({"k": [1, 2], "v": [10, 20]}, schema=schema))
    snap = h.logic.snapshot()
    frozen = pickle.dumps(snap)
    h.push(2, pa.record_batch({"k": [1, 3], "v": [1, 1]}, schema=schema))
    assert pickle.dumps(snap) == frozen
    assert h.logic.state_bytes() > 0


# ---------------------------------------------------------------------------------- bad input


def test_missing_column_is_a_schema_error_naming_it() -> None:
    spec = GroupBy(["k"], [Agg("s", "sum", "nope * 2")])
    with pytest.raises(SchemaError, match="'nope'"):
        spec.output_schema({2: SCHEMA})
    with pytest.raises(SchemaError, match="'missing_key'"):
        GroupBy(["missing_key"], [Agg("n", "count")]).output_schema({2: SCHEMA})


def test_sum_over_strings_is_a_clear_error() -> None:
    with pytest.raises(SchemaError, match="sum needs a numeric input.*'?k'?.*string"):
        GroupBy([], [Agg("s", "sum", "k")]).output_schema({2: SCHEMA})
    with pytest.raises(SchemaError, match="numeric"):
        GroupBy([], [Agg("s", "sum", "k * 2")]).output_schema({2: SCHEMA})


def test_bad_specs_are_plan_errors() -> None:
    with pytest.raises(PlanError, match="unknown function"):
        Agg("m", "median", "x")  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="needs an input"):
        Agg("s", "sum")
    with pytest.raises(PlanError, match="list of column names"):
        GroupBy("k", [Agg("n", "count")])
    with pytest.raises(PlanError, match="named twice"):
        GroupBy(["k"], [Agg("k", "count")]).output_schema({2: SCHEMA})
    with pytest.raises(PlanError, match="one input"):
        GroupBy(["k"], [Agg("n", "count")]).output_schema({2: SCHEMA, 3: SCHEMA})


def test_values_beyond_64_bits_are_refused_not_wrong() -> None:
    t = pa.table({"v": pa.array([Decimal(10**20)], pa.decimal128(30, 0))})
    h = OperatorHarness(GroupBy([], [Agg("s", "sum", "v")]), {2: t.schema})
    with pytest.raises(SchemaError, match="64 bits"):
        h.push(2, t.to_batches()[0])
    t = pa.table({"v": pa.array([2**62, 3])})
    h = OperatorHarness(GroupBy([], [Agg("s", "sum", "v * v")]), {2: t.schema})
    with pytest.raises(SchemaError, match="exceed 64 bits"):
        h.push(2, t.to_batches()[0])


# ---------------------------------------------------------------------------------- arithmetic


def test_expression_forms_agree() -> None:
    text = parse("l_extendedprice * (1 - l_discount)")
    built = col("l_extendedprice") * (1 - col("l_discount"))
    arrow = Agg("a", "sum", pc.field("l_extendedprice") * (pc.scalar(1) - pc.field("l_discount")))
    assert text == built == arrow.expr
    assert parse("`a b` * 0.05") == col("a b") * lit("0.05")
    with pytest.raises(SchemaError, match="not supported"):
        parse("a / b")


# ---------------------------------------------------------------------------------- kernels


@settings(max_examples=30)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 2)), max_size=300), st.booleans())
def test_assign_groups_matches_twin(pairs: list[tuple[int, int]], with_skip: bool) -> None:
    keys = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    skip = (keys[:, 0] == 0) if with_skip else np.zeros(0, dtype=bool)
    table: dict[tuple[int, ...], int] = {}
    want = RG.py_assign_groups(keys, skip, table)
    gids, _, gkeys, n = G.assign_groups(
        keys, skip, np.full(4, -1, dtype=np.int64), np.zeros((0, 2), dtype=np.int64), 0
    )
    assert gids.tolist() == want.tolist()
    assert n == len(table)
    assert [tuple(r) for r in gkeys[:n].tolist()] == list(table)


def test_assign_groups_hash_path_many_groups() -> None:
    rng = np.random.default_rng(1)
    keys = rng.integers(-(2**62), 2**62, size=(500, 1)) // 7 * np.array([[1]])
    keys = np.concatenate([keys, keys[::-1]])
    table: dict[tuple[int, ...], int] = {}
    want = RG.py_assign_groups(keys, np.zeros(0, dtype=bool), table)
    gids, *_ = G.assign_groups(
        keys, np.zeros(0, dtype=bool), np.full(2, -1, dtype=np.int64), np.zeros((1, 1), dtype=np.int64), 0
    )
    assert gids.tolist() == want.tolist()


@settings(max_examples=30)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=10)), max_size=50))
def test_pack_strings_matches_twin_and_round_trips(values: list[bytes | None]) -> None:
    arr = pa.array(values, pa.binary())
    keys = np.zeros((len(values), 1), dtype=np.int64)
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32, count=len(values) + 1)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and bufs[2].size else np.zeros(1, np.uint8)
    valid = np.array([v is not None for v in values], dtype=bool)
    n_long = G.pack_strings(offsets, data, valid, keys, 0)
    assert keys[:, 0].tolist() == RG.py_pack_strings(values)
    assert n_long == sum(1 for v in values if v is not None and len(v) > 7)
    short = np.where(keys[:, 0] >= 0, keys[:, 0], -1)
    offs, out = G.unpack_strings(short)
    for i, v in enumerate(values):
        if v is not None and len(v) <= 7:
            assert bytes(out[offs[i] : offs[i + 1]]) == v


@settings(max_examples=30)
@given(
    st.lists(st.tuples(st.integers(-1, 3), st.integers(-(2**62), 2**62), st.booleans()), max_size=200)
)
def test_sum_and_extreme_kernels_match_twins(rows: list[tuple[int, int, bool]]) -> None:
    gids = np.array([r[0] for r in rows], dtype=np.int64)
    vals = np.array([r[1] for r in rows], dtype=np.int64)
    valid = np.array([r[2] for r in rows], dtype=bool)
    hi, lo = np.zeros(4, np.int64), np.zeros(4, np.int64)
    K.sum128(gids, vals, valid, hi, lo)
    want: dict[int, int] = {}
    R.py_sum128(gids, vals, valid, want)
    assert K.limbs_to_int(hi, lo) == [want.get(g, 0) for g in range(4)]
    hi_n, lo_n = hi.copy(), lo.copy()
    K.normalize128(hi, lo)
    R.py_normalize128(hi_n, lo_n)
    assert (hi.tolist(), lo.tolist()) == (hi_n.tolist(), lo_n.tolist())
    assert all(0 <= x < 2**32 for x in lo.tolist())
    assert K.limbs_to_int(hi, lo) == [want.get(g, 0) for g in range(4)]
    small = vals >> 20  # small enough for the per-batch int64 path
    part, ppart = np.zeros(4, np.int64), np.zeros(4, np.int64)
    K.sum_i64(gids, small, valid, part)
    R.py_sum_i64(gids, small, valid, ppart)
    assert part.tolist() == ppart.tolist()
    hi2, lo2 = np.zeros(4, np.int64), np.zeros(4, np.int64)
    K.fold128(hi2, lo2, part)
    K.fold128(hi2, lo2, part)
    assert K.limbs_to_int(hi2, lo2) == [2 * int(p) for p in part]
    for kern, twin, fill in ((K.min_i64, R.py_min_i64, 2**63 - 1), (K.max_i64, R.py_max_i64, -(2**63))):
        a, b = np.full(4, fill, np.int64), np.full(4, fill, np.int64)
        kern(gids, vals, valid, a)
        twin(gids, vals, valid, b)
        assert a.tolist() == b.tolist()
    c1, c2 = np.zeros(4, np.int64), np.zeros(4, np.int64)
    K.count_rows(gids, valid, c1)
    R.py_count_rows(gids, valid, c2)
    assert c1.tolist() == c2.tolist()
    f = vals.astype(np.float64)
    s1, s2 = np.zeros(4), np.zeros(4)
    K.sum_f64(gids, f, valid, s1)
    R.py_sum_f64(gids, f, valid, s2)
    assert s1.tolist() == s2.tolist()


def test_decimal_low_words_matches_twin() -> None:
    arr = pa.array([Decimal(5), None, Decimal(-(2**63) + 1), Decimal(2**63)], pa.decimal128(38, 0))
    valid = np.asarray(arr.is_valid())
    words = decimal_words(arr)
    a = K.decimal_low_words(words, valid)
    b = R.py_decimal_low_words(words, valid)
    assert a[0].tolist() == b[0].tolist() and a[1:] == b[1:] == (2**63 - 1, False)
    sliced = arr.slice(0, 3)
    a = K.decimal_low_words(decimal_words(sliced), np.asarray(sliced.is_valid()))
    assert a[1:] == (2**63 - 1, True)


@settings(max_examples=30)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=50))
def test_max_abs_matches_twin_on_strided_views(values: list[int]) -> None:
    words = np.zeros((len(values), 2), dtype=np.int64)
    words[:, 0] = values
    assert K.max_abs(words[:, 0]) == R.py_max_abs(words[:, 0])
