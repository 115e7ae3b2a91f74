"""Small operators for runtime tests: they make the path's behaviour easy to observe."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from splice.core.operator import InputSchemas, OperatorLogic, OperatorSpec


@dataclass(frozen=True)
class Repeat(OperatorSpec):
    """Emit each input batch ``times`` times (0 emits nothing), tagging rows with ``tag``."""

    times: int
    tag: int
    name: str = "repeat"

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        return next(iter(inputs.values())).append(pa.field("tag", pa.int64()))

    @property
    def stateless(self) -> bool:
        return True

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        return _RepeatLogic(self.times, self.tag)


class _RepeatLogic(OperatorLogic):
    def __init__(self, times: int, tag: int):
        self.times, self.tag = times, tag

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        tagged = batch.append_column("tag", pa.array([self.tag] * batch.num_rows, pa.int64()))
        return [tagged] * self.times


@dataclass(frozen=True)
class CountAll(OperatorSpec):
    """Blocking count of input rows, emitted at END."""

    name: str = "count_all"

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        return pa.schema([("n", pa.int64())])

    def columns_used(self, inputs: InputSchemas):
        return {sid: set() for sid in inputs}

    @property
    def blocking(self) -> bool:
        return True

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        return _CountLogic(0 if state is None else state)


class _CountLogic(OperatorLogic):
    def __init__(self, n: int):
        self.n = n

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        self.n += batch.num_rows
        return []

    def on_end(self) -> list[pa.RecordBatch]:
        return [pa.record_batch({"n": pa.array([self.n], pa.int64())})]

    def snapshot(self) -> Any:
        return self.n


@dataclass(frozen=True)
class FailOn(OperatorSpec):
    """Pass batches through; raise when column ``column`` holds ``value`` (a failing UDF)."""

    column: str
    value: int
    name: str = "fail_on"

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        return next(iter(inputs.values()))

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        return _FailLogic(self.column, self.value)


class _FailLogic(OperatorLogic):
    def __init__(self, column: str, value: int):
        self.column, self.value = column, value

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        if pc.any(pc.equal(batch.column(self.column), self.value)).as_py():
            raise ValueError(f"user function failed on {self.column} = {self.value}")
        return [batch]


@dataclass(frozen=True)
class Delay(OperatorSpec):
    """Hold back the last ``rows`` rows seen; emit the rest in arrival order (all at END).

    With ``report`` its logic says the least value of a column among the rows it holds
    (``retained_min``), so the decomposer can free composed rows behind it; without, it cannot
    tell."""

    rows: int
    report: bool = True
    name: str = "delay"

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        return next(iter(inputs.values()))

    def columns_used(self, inputs: InputSchemas):
        return {sid: set() for sid in inputs}

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        return (_ReportingDelay if self.report else _DelayLogic)(self.rows)


class _DelayLogic(OperatorLogic):
    def __init__(self, rows: int):
        self.rows = rows
        self.held: pa.Table | None = None

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        table = pa.Table.from_batches([batch]) if self.held is None else pa.concat_tables(
            [self.held, pa.Table.from_batches([batch])])
        cut = max(0, table.num_rows - self.rows)
        self.held = table.slice(cut)
        return table.slice(0, cut).combine_chunks().to_batches()

    def on_end(self) -> list[pa.RecordBatch]:
        held, self.held = self.held, None
        return [] if held is None else held.combine_chunks().to_batches()


class _ReportingDelay(_DelayLogic):
    def retained_min(self, column: str) -> int | None:
        if self.held is None or self.held.num_rows == 0:
            return None
        return pc.min(self.held.column(column)).as_py()
