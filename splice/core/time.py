"""Event time: integer time values of a column, and watermarks with bounded out-of-orderness.

Time is an ``int64`` in the time column's own unit: days for ``date32``, the timestamp's unit for
timestamps (ms for ``timestamp[ms]``), the value itself for integer columns. A watermark ``W`` on a
stream promises that no later record of that stream has time ``<= W``; a record with time ``<= W``
that arrives anyway is *late*.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from splice.core.errors import SchemaError

__all__ = ["time_values", "BoundedOutOfOrderness", "is_temporal", "MIN_TIME"]

#: The watermark of a stream before any record: every time value is after it.
MIN_TIME = np.iinfo(np.int64).min


def is_temporal(t: pa.DataType) -> bool:
    return pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_integer(t)


def time_values(batch: pa.RecordBatch | pa.Table, column: str, stream: str = "?") -> np.ndarray:
    """``int64`` time values of ``column``; raises naming the stream when absent, wrong or null."""
    if column not in batch.schema.names:
        raise SchemaError(f"stream {stream!r}: time column {column!r} is missing")
    col = batch.column(column)
    t = col.type
    if not is_temporal(t):
        raise SchemaError(
            f"stream {stream!r}: time column {column!r} has type {t}, expected timestamp, date or integer"
        )
    if col.null_count:
        raise SchemaError(f"stream {stream!r}: time column {column!r} has {col.null_count} null(s)")
    if pa.types.is_date64(t):
        col = pc.divide(col.cast(pa.int64()), 86_400_000)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if pa.types.is_timestamp(t) or pa.types.is_date32(t):
        col = col.view(pa.int64()) if pa.types.is_timestamp(t) else col.cast(pa.int32()).cast(pa.int64())
    elif col.type != pa.int64():
        col = col.cast(pa.int64())
    return col.to_numpy(zero_copy_only=False)


@dataclass
class BoundedOutOfOrderness:
    """Watermark = max time seen - ``delay`` - 1, so rows at most ``delay`` behind are on time."""

    delay: int = 0
    max_time: int = MIN_TIME

    def observe(self, times: np.ndarray) -> None:
        if len(times):
            m = int(times.max())
            if m > self.max_time:
                self.max_time = m

    def current(self) -> int:
        if self.max_time == MIN_TIME:
            return MIN_TIME
        return self.max_time - self.delay - 1
