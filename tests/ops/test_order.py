"""OrderBy and TopK against a stable Python sort (nulls last), and the contract suite."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import PlanError, SchemaError
from splice.core.records import Data, End
from splice.ops.order import OrderBy, TopK
from splice.testing import check_operator, rebatch, run_operator
from tests.reference.aggregates import order_by as ref_order_by
from tests.reference.aggregates import top_k as ref_top_k

SIZES = [1, 2, 7, 49, 50, 51, 100]
SCHEMA = pa.schema([("a", pa.int64()), ("s", pa.string()), ("f", pa.float64()), ("pos", pa.int64())])


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    n = draw(st.integers(0, 120))
    a = draw(st.lists(st.one_of(st.none(), st.integers(-3, 3)), min_size=n, max_size=n))
    s = draw(st.lists(st.one_of(st.none(), st.sampled_from(["x", "y", "zz", ""])), min_size=n, max_size=n))
    f = draw(st.lists(st.one_of(st.none(), st.floats(-5, 5, allow_nan=False)), min_size=n, max_size=n))
    return pa.table({"a": a, "s": s, "f": f, "pos": list(range(n))}, schema=SCHEMA)


KEYS = st.lists(
    st.tuples(st.sampled_from(["a", "s", "f"]), st.sampled_from(["ascending", "descending"])),
    min_size=1, max_size=3, unique_by=lambda k: k[0],
)


def _records(table: pa.Table, size: int) -> list:
    return [*(Data(2, b) for b in rebatch(table, size)), End()]


@settings(max_examples=30)
@given(tables(), KEYS, st.sampled_from(SIZES))
def test_order_by_matches_stable_sort(table: pa.Table, keys: list[tuple[str, str]], size: int) -> None:
    out, _ = run_operator(OrderBy(keys), {2: SCHEMA}, _records(table, size))
    assert out.to_pylist() == ref_order_by(table.to_pylist(), keys)


@settings(max_examples=30)
@given(tables(), KEYS, st.sampled_from(SIZES), st.integers(0, 20))
def test_top_k_matches_sort_then_limit(
    table: pa.Table, keys: list[tuple[str, str]], size: int, k: int
) -> None:
    out, h = run_operator(TopK(keys, k), {2: SCHEMA}, _records(table, size)[:-1])
    assert h.logic.snapshot()["top"] == () or sum(b.num_rows for b in h.logic.snapshot()["top"]) <= k
    h.end()
    assert h.result().to_pylist() == ref_top_k(table.to_pylist(), keys, k)
    del out


def test_contract_suite() -> None:
    table = pa.table(
        {"a": [3, None, 1, 3, 2, None, 1], "s": ["x", "y", None, "a", "b", "c", "d"],
         "f": [0.5] * 7, "pos": list(range(7))},
        schema=SCHEMA,
    )
    check_operator(OrderBy([("a", "desc"), "s"]), {2: SCHEMA}, _records(table, 2))
    check_operator(TopK([("a", "asc")], 3), {2: SCHEMA}, _records(table, 3))


def test_bad_input() -> None:
    with pytest.raises(SchemaError, match="'nope'"):
        OrderBy(["nope"]).output_schema({2: SCHEMA})
    with pytest.raises(PlanError, match="sort order"):
        OrderBy([("a", "sideways")])
    with pytest.raises(PlanError, match="k must be"):
        TopK(["a"], -1)
    with pytest.raises(PlanError, match="at least one"):
        OrderBy([])
