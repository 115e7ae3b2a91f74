"""What a Python user hands the engine and gets back: dicts of columns, Arrow PyCapsule objects,
a clear TypeError for anything else, and results as an iterator of batches."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import splice
from splice.core.errors import SchemaError, StateError
from splice.ops import Select
from splice.runtime import Query

SCHEMA = pa.schema([("k", pa.int64()), ("x", pa.float64())])


class CapsuleOnly:
    """A foreign table that speaks only the Arrow PyCapsule stream interface (as pandas and
    polars data frames do)."""

    def __init__(self, table: pa.Table) -> None:
        self._table = table

    def __arrow_c_stream__(self, requested_schema=None):
        return self._table.__arrow_c_stream__(requested_schema)


def _engine() -> splice.Engine:
    eng = splice.Engine()
    eng.define_stream("s", SCHEMA)
    return eng


def test_push_takes_dicts_capsules_and_arrow_and_batches_iterate_once():
    with _engine() as eng:
        handle = eng.deploy(Query.chain("big", "s", Select(pc.field("x") > 1.0)))
        eng.push("s", {"k": [1, 2, 3], "x": [0.5, 1.5, 2.5]})
        eng.push("s", CapsuleOnly(pa.table({"k": [4], "x": [9.0]}, schema=SCHEMA)))
        first = [b.to_pydict() for b in handle.batches()]
        eng.push("s", pa.record_batch({"k": [5], "x": [3.0]}, schema=SCHEMA))
        eng.end()
        second = [b.to_pydict() for b in handle.batches()]
    assert first == [{"k": [2, 3], "x": [1.5, 2.5]}, {"k": [4], "x": [9.0]}]
    assert second == [{"k": [5], "x": [3.0]}]
    assert list(handle.batches()) == []  # each batch is handed over once


def test_push_refuses_what_it_cannot_read_by_name():
    with _engine() as eng:
        with pytest.raises(TypeError, match="push takes a pyarrow Table or RecordBatch.*got list"):
            eng.push("s", [(1, 2.0)])
        with pytest.raises(SchemaError, match="stream 's'"):
            eng.push("s", {"k": ["a"], "x": [1.0]})
        with pytest.raises(SchemaError, match="stream 's'"):
            eng.push("s", {"k": [1]})  # a column missing


def test_a_query_failure_reaches_the_pusher_and_the_iterator():
    def explode(batch: pa.RecordBatch) -> None:
        raise RuntimeError("sink is down")

    with _engine() as eng:
        handle = eng.deploy(Query.chain("ok", "s", Select(pc.field("x") > 0.0)))
        eng.deploy(Query.chain("bad", "s", Select(pc.field("x") > 0.0)), on_output=explode)
        with pytest.raises(StateError, match="query 'bad' failed"):
            eng.push("s", {"k": [1], "x": [1.0]})
        eng.push("s", {"k": [2], "x": [2.0]})  # the other queries go on
        assert [b.num_rows for b in handle.batches()] == [1, 1]
