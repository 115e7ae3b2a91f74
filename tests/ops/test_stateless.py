import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from splice.core.errors import PlanError, SchemaError
from splice.core.records import Data, End
from splice.ops import Project, Select
from splice.testing import check_operator, rebatch

SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.float64())])
SIZES = [1, 2, 7, 49, 50, 51, 100]

rows = st.lists(
    st.tuples(st.one_of(st.none(), st.integers(-50, 50)),
              st.one_of(st.none(), st.floats(-10, 10, allow_nan=False))),
    max_size=120,
)


@given(rows, st.sampled_from(SIZES))
def test_select_equals_a_row_filter(data, size):
    table = pa.table({"a": pa.array([r[0] for r in data], pa.int64()),
                      "b": pa.array([r[1] for r in data], pa.float64())})
    records = [Data(2, b) for b in rebatch(table, size)] + [End()]
    out = check_operator(Select(pc.field("a") > 3), {2: SCHEMA}, records, restore_points=[0, 1])
    want = [r for r in data if r[0] is not None and r[0] > 3]
    assert list(zip(out.column("a").to_pylist(), out.column("b").to_pylist(), strict=True)) == want


@given(rows, st.sampled_from(SIZES))
def test_project_derives_columns_row_by_row(data, size):
    table = pa.table({"a": pa.array([r[0] for r in data], pa.int64()),
                      "b": pa.array([r[1] for r in data], pa.float64())})
    spec = Project({"twice": pc.field("a") * 2, "b": "b"})
    records = [Data(2, b) for b in rebatch(table, size)] + [End()]
    out = check_operator(spec, {2: SCHEMA}, records, restore_points=[0])
    assert out.column("twice").to_pylist() == [None if r[0] is None else 2 * r[0] for r in data]
    assert out.column("b").to_pylist() == [r[1] for r in data]


def test_bad_expressions_name_the_column():
    with pytest.raises(SchemaError, match="column 'zz' does not exist"):
        Project({"x": pc.field("zz") + 1}).output_schema({2: SCHEMA})
    with pytest.raises(SchemaError, match="expected boolean"):
        Select(pc.field("a") + 1).output_schema({2: SCHEMA})
    with pytest.raises(PlanError, match="no output columns"):
        Project({})
