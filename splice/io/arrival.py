"""Arrival order of two join inputs on the one data path.

The command line contract: inputs arrive in the order of ``arrival`` (a global position column
both inputs carry) when given; otherwise by the ``time`` column, ties left first; with neither,
row ``i`` of the left input arrives just before row ``i`` of the right input. Consecutive rows of
one side travel as one batch (at most ``batch_size`` rows), so a batch never mixes streams.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from splice.core.errors import SchemaError
from splice.core.ordered_merge import merge_sources
from splice.core.time import time_values

__all__ = ["arrival_positions", "interleave", "LEFT", "RIGHT"]

LEFT = 0
RIGHT = 1


def _key(table: pa.Table, column: str, side: str) -> np.ndarray:
    if column not in table.schema.names:
        raise SchemaError(f"stream {side!r}: column {column!r} is missing")
    return time_values(table, column, side)


def arrival_positions(
    left: pa.Table, right: pa.Table, arrival: str | None = None, time: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Return (side, row) arrays listing every input row in arrival order: the ordered merge
    (:func:`~splice.core.ordered_merge.merge_sources`) of the two inputs' order values."""
    nl, nr = left.num_rows, right.num_rows
    if arrival is not None:
        kl, kr = _key(left, arrival, "left"), _key(right, arrival, "right")
    elif time is not None:
        kl, kr = _key(left, time, "left"), _key(right, time, "right")
    else:
        kl, kr = np.arange(nl, dtype=np.int64), np.arange(nr, dtype=np.int64)
    inputs, rows = merge_sources([kl, kr])  # ties: left before right, then row order
    return inputs.astype(np.int8), rows


def interleave(
    left: pa.Table,
    right: pa.Table,
    arrival: str | None = None,
    time: str | None = None,
    batch_size: int = 65_536,
) -> list[tuple[int, pa.RecordBatch]]:
    """The two inputs as a list of ``(side, batch)`` in arrival order (runs of one side)."""
    sides, rows = arrival_positions(left, right, arrival, time)
    out: list[tuple[int, pa.RecordBatch]] = []
    if len(sides) == 0:
        return out
    change = np.flatnonzero(np.diff(sides)) + 1
    starts = np.concatenate([[0], change])
    ends = np.concatenate([change, [len(sides)]])
    tables = (left, right)
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        side = int(sides[s])
        idx = rows[s:e]
        # A run is usually a contiguous slice; take() only when it is not.
        contiguous = idx[-1] - idx[0] == len(idx) - 1 and bool(np.all(np.diff(idx) == 1))
        for cs in range(0, e - s, batch_size):
            part = idx[cs : cs + batch_size]
            t = tables[side]
            sub = t.slice(int(part[0]), len(part)) if contiguous else t.take(pa.array(part))
            out.extend((side, b) for b in sub.combine_chunks().to_batches() if b.num_rows)
    return out
