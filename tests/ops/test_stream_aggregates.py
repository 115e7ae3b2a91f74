"""The session window and the updating aggregate under the operator contract (pickled specs,
snapshot/restore before every record, empty batches, reordered columns), and their bad input."""

from __future__ import annotations

import pyarrow as pa
import pytest

from splice.core.errors import PlanError, SchemaError
from splice.core.records import Data, End, Watermark
from splice.ops.aggregate import Agg
from splice.ops.session_window import SessionWindowAggregate
from splice.ops.updating_aggregate import UpdatingAggregate
from splice.testing import rebatch
from splice.testing.contract import check_operator

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.string()), ("v", pa.int64())])
AGGS = [Agg("n", "count"), Agg("s", "sum", "v"), Agg("hi", "max", "v")]


def _records() -> list:
    table = pa.table({"t": [5, 1, 12, 3, 30, 14, 2, 31], "k": ["a", None, "b", "a", "a", "b", "a", "b"],
                      "v": [1, 2, None, 4, 5, 6, 7, 8]}, schema=SCHEMA)
    b = rebatch(table, 2)
    return [Data(2, b[0]), Watermark(2, 2), Data(2, b[1]), Watermark(2, 11), Data(2, b[2]),
            Data(2, b[3]), Watermark(2, 20), End()]


def test_session_window_contract() -> None:
    out = check_operator(SessionWindowAggregate("t", 4, keys=["k"], aggregates=AGGS), {2: SCHEMA},
                         _records())
    assert out.num_rows > 0


def test_updating_aggregate_contract() -> None:
    out = check_operator(UpdatingAggregate(["k"], AGGS), {2: SCHEMA}, _records())
    assert set(out.column("op").to_pylist()) == {"+", "-"}


def test_bad_specs_and_inputs_name_the_problem() -> None:
    with pytest.raises(PlanError, match="gap"):
        SessionWindowAggregate("t", 0, aggregates=AGGS)
    with pytest.raises(PlanError, match="reserved"):
        SessionWindowAggregate("t", 3, keys=["window_start"], aggregates=AGGS)
    with pytest.raises(PlanError, match="changelog"):
        UpdatingAggregate(["op"], AGGS)
    with pytest.raises(SchemaError, match="time column 'k' has type string"):
        SessionWindowAggregate("k", 3, aggregates=AGGS).output_schema({2: SCHEMA})
