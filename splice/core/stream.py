"""Streams: an id on the data path, a name, an Arrow schema and an optional event-time column."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from splice.core.errors import PlanError, SchemaError
from splice.core.time import WatermarkStrategy

__all__ = ["Stream", "StreamCatalog", "normalize_schema", "normalize_batch"]

#: Stream ids below this value are reserved for control traffic, as in Diba where ids 0 and 1
#: tag processing-block and network instructions.
FIRST_STREAM_ID = 2


def _plain_type(t: pa.DataType) -> pa.DataType:
    if t == pa.string_view():
        return pa.string()
    if t == pa.binary_view():
        return pa.binary()
    return t


def normalize_schema(schema: pa.Schema) -> pa.Schema:
    """Replace view types (``string_view``, ``binary_view``) that some Arrow kernels reject."""
    fields = [pa.field(f.name, _plain_type(f.type), f.nullable) for f in schema]
    return pa.schema(fields)


def normalize_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Cast view-typed columns of ``batch`` to their plain equivalents (no copy when none)."""
    target = normalize_schema(batch.schema)
    if target.equals(batch.schema, check_metadata=False) and not batch.schema.metadata:
        return batch
    return batch.cast(target) if target != batch.schema else batch.replace_schema_metadata(None)


@dataclass(frozen=True)
class Stream:
    """A named, typed stream on the data path.

    ``id`` tags every batch of the stream on the path; ``time_column``, when given, names the
    event-time column (a timestamp, date or integer column) used by watermarks and windows;
    ``watermark`` is the source's :class:`~splice.core.time.WatermarkStrategy` (a derived stream
    carries its input's, for the idle timeout where it meets other inputs).
    """

    id: int
    name: str
    schema: pa.Schema
    time_column: str | None = None
    watermark: WatermarkStrategy | None = None

    def __post_init__(self) -> None:
        if self.time_column is not None:
            if self.time_column not in self.schema.names:
                raise SchemaError(
                    f"stream {self.name!r}: time column {self.time_column!r} is not in its schema "
                    f"(columns: {', '.join(self.schema.names)})"
                )
            t = self.schema.field(self.time_column).type
            if not (pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_integer(t)):
                raise SchemaError(
                    f"stream {self.name!r}: time column {self.time_column!r} has type {t}, "
                    "expected a timestamp, date or integer column"
                )

    def check_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Return ``batch`` in this stream's column order, or raise naming what does not match."""
        if batch.schema.equals(self.schema, check_metadata=False):
            return batch
        batch = normalize_batch(batch)
        if batch.schema.equals(self.schema, check_metadata=False):
            return batch
        names = set(batch.schema.names)
        missing = [n for n in self.schema.names if n not in names]
        if missing:
            raise SchemaError(
                f"stream {self.name!r}: batch lacks column(s) {', '.join(map(repr, missing))}"
            )
        extra = [n for n in batch.schema.names if n not in set(self.schema.names)]
        if extra:
            raise SchemaError(
                f"stream {self.name!r}: batch has unknown column(s) {', '.join(map(repr, extra))}"
            )
        for f in self.schema:
            got = batch.schema.field(f.name).type
            if got != f.type:
                raise SchemaError(
                    f"stream {self.name!r}: column {f.name!r} has type {got}, expected {f.type}"
                )
        return batch.select(self.schema.names)


class StreamCatalog:
    """The streams an engine knows, by name and by id; ids are handed out in definition order."""

    def __init__(self) -> None:
        self._by_name: dict[str, Stream] = {}
        self._by_id: dict[int, Stream] = {}
        self._next_id = FIRST_STREAM_ID

    def define(self, name: str, schema: pa.Schema, time_column: str | None = None,
               watermark: WatermarkStrategy | None = None) -> Stream:
        if name in self._by_name:
            raise PlanError(f"stream {name!r} is already defined")
        stream = Stream(self._next_id, name, normalize_schema(schema), time_column, watermark)
        self._next_id += 1
        self._by_name[name] = stream
        self._by_id[stream.id] = stream
        return stream

    def drop(self, name: str) -> None:
        stream = self[name]
        del self._by_name[name]
        del self._by_id[stream.id]

    def __getitem__(self, name: str) -> Stream:
        try:
            return self._by_name[name]
        except KeyError:
            known = ", ".join(sorted(self._by_name)) or "none"
            raise PlanError(f"unknown stream {name!r} (defined streams: {known})") from None

    def by_id(self, stream_id: int) -> Stream:
        try:
            return self._by_id[stream_id]
        except KeyError:
            raise PlanError(f"unknown stream id {stream_id}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[Stream]:
        return iter(self._by_name.values())
