"""Conditions operators need of their input rows, checked where rows enter the engine.

An operator that cannot process some row (an event time that is null, a decimal too wide for
its exact arithmetic) says so up front: :meth:`~splice.core.operator.OperatorSpec.input_checks`
returns :class:`RowCheck` s per input. The engine runs the checks of every deployed query on
each batch pushed to a source stream, before the batch is accepted, and applies the stream's
bad-input policy to the rows that fail: ``fail`` refuses the batch with an error naming the
stream, the row, the column and the reason; ``dead_letter`` routes those rows to the dead
letters, counted, and pushes the rest. An operator therefore never meets such a row on the
path, and a query never stops on one silently.

>>> import pyarrow as pa
>>> check = not_null("ts", "event time")
>>> check.bad(pa.record_batch({"ts": [1, None, 3]})).tolist()
[False, True, False]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

__all__ = ["RowCheck", "not_null", "decimal_fits_64"]


@dataclass(frozen=True)
class RowCheck:
    """A condition on column ``column``: ``bad(batch)`` marks the rows that fail it (``None``
    when none does); ``reason`` says what is wrong with them."""

    column: str
    reason: str
    bad: Callable[[pa.RecordBatch], np.ndarray | None]


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    i = batch.schema.get_field_index(name)
    return batch.column(i) if i >= 0 else None


def not_null(column: str, what: str) -> RowCheck:
    """Rows whose ``column`` (the ``what``: an event time, a key) is null."""

    def bad(batch: pa.RecordBatch) -> np.ndarray | None:
        col = _column(batch, column)
        if col is None or not col.null_count:
            return None
        return np.asarray(col.is_null())

    return RowCheck(column, f"null {what} in column {column!r}", bad)


def decimal_fits_64(column: str) -> RowCheck:
    """Rows whose decimal ``column`` holds an unscaled value outside the signed 64-bit range
    (exact aggregation sums unscaled values as 64-bit words)."""

    def bad(batch: pa.RecordBatch) -> np.ndarray | None:
        col = _column(batch, column)
        if col is None or not pa.types.is_decimal128(col.type) or col.type.precision <= 18:
            return None
        buf = col.buffers()[1]
        words = np.frombuffer(buf, dtype=np.int64, count=2 * (col.offset + len(col)))
        words = words.reshape(-1, 2)[col.offset:]
        lo, hi = words[:, 0], words[:, 1]
        out = (hi != (lo >> 63)) | (lo == np.iinfo(np.int64).min)
        if col.null_count:
            out &= np.asarray(col.is_valid())
        return out if out.any() else None

    return RowCheck(column, f"decimal in column {column!r} beyond 64 bits (2**63 - 1 unscaled)",
                    bad)
