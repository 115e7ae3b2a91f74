"""The join of finite inputs (Arrow's hash join at their end) under the operator contract and
against a nested-loop reference, every join type, null keys and keys of two integer widths."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from splice.core.errors import PlanError
from splice.core.records import Data, End
from splice.joins.hash.table_join import TableJoin
from splice.testing import rebatch, run_operator
from splice.testing.contract import check_operator, rows_of
from tests.reference.equi_join import equi_join_rows

L = pa.schema([("k", pa.int64()), ("a", pa.int64())])
R = pa.schema([("k", pa.int32()), ("a", pa.int64())])


keys = st.lists(st.one_of(st.none(), st.integers(0, 6)), max_size=30)


@pytest.mark.parametrize("how", ["inner", "left", "right", "full"])
@given(lk=keys, rk=keys, size=st.integers(1, 7))
def test_every_join_type_matches_a_nested_loop(how, lk, rk, size) -> None:
    left = pa.table({"k": pa.array(lk, pa.int64()), "a": list(range(len(lk)))}, schema=L)
    right = pa.table({"k": pa.array(rk, pa.int32()), "a": list(range(100, 100 + len(rk)))}, schema=R)
    records = [Data(2, b) for b in rebatch(left, size)] + [Data(3, b) for b in rebatch(right, size)]
    out, _ = run_operator(TableJoin(2, 3, "k", how=how), {2: L, 3: R}, [*records, End()])
    assert out.schema.names == ["k", "a", "k_right", "a_right"]
    got = sorted(rows_of(out), key=lambda r: tuple((v is None, v) for v in r))
    assert got == equi_join_rows(left, right, how)


def test_contract_and_bad_specs() -> None:
    left = pa.table({"k": [1, 2, None, 2], "a": [1, 2, 3, 4]}, schema=L)
    right = pa.table({"k": pa.array([2, 2, 5], pa.int32()), "a": [7, 8, 9]}, schema=R)
    records = [Data(2, rebatch(left, 2)[0]), Data(3, right.to_batches()[0]),
               Data(2, rebatch(left, 2)[1]), End()]
    check_operator(TableJoin(2, 3, "k", how="full"), {2: L, 3: R}, records, ordered=False)
    with pytest.raises(PlanError, match="how"):
        TableJoin(2, 3, "k", how="outer")  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="different streams"):
        TableJoin(2, 2, "k")
