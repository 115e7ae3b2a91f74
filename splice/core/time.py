"""Event time: integer time values of a column, and the watermark strategy every source declares.

Time is an ``int64`` in the time column's own unit: days for ``date32``, the timestamp's unit for
timestamps (ms for ``timestamp[ms]``), the value itself for integer columns. A watermark ``W`` on a
stream promises that no later record of that stream has time ``<= W``; a record with time ``<= W``
that arrives anyway is *late*: the operator that finds it counts it and hands it to the query's
late side output, never drops it.

One model serves the whole engine. A source declares a :class:`WatermarkStrategy`: after each of
its batches the engine puts ``Watermark(max time seen - D - 1)`` on the data path (bounded
out-of-orderness ``D``: a row at most ``D`` behind the newest row before it is on time). Operators
never make watermarks of their own; they take them from the path. Where an operator's inputs meet,
an input with an idle timeout ``I`` whose watermark lags the most advanced other input by more than
``I`` is held at ``that watermark - I``, so an input that stops advancing cannot hold the others'
state forever (its rows that then come behind are late). Both quantities are in the time column's
unit, so a replay of the same input makes the same watermarks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from splice.core.errors import PlanError, SchemaError

__all__ = ["time_values", "WatermarkStrategy", "BoundedOutOfOrderness", "is_temporal", "MIN_TIME"]

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


@dataclass(frozen=True)
class WatermarkStrategy:
    """How a source's watermarks follow its rows: bounded out-of-orderness and an idle timeout.

    ``max_out_of_orderness`` ``D``: after each batch the watermark is ``max time seen - D - 1``.
    ``idle_timeout`` ``I`` (``None``: never idle): where this stream meets other inputs of an
    operator, its watermark is taken as at least ``max(other watermarks) - I``. Both are in the
    time column's unit.

    >>> WatermarkStrategy(20).watermark(1_000)
    979
    """

    max_out_of_orderness: int = 0
    idle_timeout: int | None = None

    def __post_init__(self) -> None:
        for label, v in (("max_out_of_orderness", self.max_out_of_orderness),
                         ("idle_timeout", self.idle_timeout)):
            if v is None and label == "idle_timeout":
                continue
            if not isinstance(v, int | np.integer) or isinstance(v, bool) or v < 0:
                raise PlanError(f"watermark strategy: {label} must be an integer >= 0, got {v!r}")

    def watermark(self, max_time: int) -> int:
        """The watermark after rows up to ``max_time`` (``MIN_TIME`` before any row)."""
        if max_time == MIN_TIME:
            return int(MIN_TIME)
        return int(max_time) - int(self.max_out_of_orderness) - 1


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
