"""Sliding windows for stream joins: count-based and time-based, and the rows they retain.

A **count window** of size ``w`` over stream R holds, after the ``n``-th tuple of R arrived, the
tuples ``n - w + 1 .. n`` of R (arrival order on the data path). A **time window** of length
``D`` pairs tuples whose event times differ by at most ``D``; its tuples are evicted by watermark:
once the watermark of the opposite stream is ``W``, no future opposite tuple can have a time
``<= W``, so a stored tuple with time ``<= W - D`` can never match again.

A two-way window join processes an arriving r (stream R) as the seeds define::

    probe W_S with r   ->   expire from W_R   ->   insert r into W_R

so within a batch, row i sees exactly the tuples that arrived before it.

:class:`RowStore` keeps the payload rows of a window, addressed by their per-stream sequence
number, in a few Arrow chunks of geometrically decreasing size (appends and evictions are
amortized O(log n) row copies; a gather is one ``take``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from splice.core.errors import PlanError

__all__ = ["CountWindow", "TimeWindow", "JoinWindow", "parse_count_window", "RowStore"]


@dataclass(frozen=True)
class CountWindow:
    """The last ``size`` tuples of each stream, by arrival order (``size >= 1``)."""

    size: int

    def __post_init__(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, int | np.integer):
            raise PlanError(f"count window size must be an integer, got {self.size!r}")
        if self.size < 1:
            raise PlanError(f"count window size must be >= 1, got {self.size}")


@dataclass(frozen=True)
class TimeWindow:
    """Tuples whose event times (column ``column`` on both inputs) differ by at most ``length``."""

    length: int
    column: str

    def __post_init__(self) -> None:
        if self.length < 0:
            raise PlanError(f"time window length must be >= 0, got {self.length}")


JoinWindow = CountWindow | TimeWindow


def parse_count_window(text: str | int | None) -> int | None:
    """``'unbounded'``/``None`` -> ``None``; ``'1024'`` or ``'2^10'`` -> 1024; else PlanError."""
    if text is None:
        return None
    if isinstance(text, int):
        return CountWindow(text).size
    t = text.strip().lower()
    if t in ("unbounded", "none", "inf"):
        return None
    try:
        value = 2 ** int(t[2:]) if t.startswith("2^") else int(t)
    except ValueError:
        raise PlanError(f"window must be 'unbounded' or a positive integer, got {text!r}") from None
    return CountWindow(value).size


class RowStore:
    """Payload rows of one stream's window, by per-stream sequence number ``0, 1, 2, ...``."""

    def __init__(self, schema: pa.Schema, first_seq: int = 0) -> None:
        self.schema = schema
        self._chunks: list[pa.RecordBatch] = []
        self._starts: list[int] = []
        self.end = first_seq  # next sequence number

    @property
    def start(self) -> int:
        """First sequence number still held."""
        return self._starts[0] if self._starts else self.end

    def append(self, batch: pa.RecordBatch) -> int:
        """Store ``batch`` (rows ``end .. end + len - 1``); return its first sequence number."""
        first = self.end
        if batch.num_rows == 0:
            return first
        self._chunks.append(batch)
        self._starts.append(first)
        self.end += batch.num_rows
        # Keep chunk sizes geometrically decreasing: O(log n) chunks, amortized O(log n) copies.
        while len(self._chunks) >= 2 and self._chunks[-2].num_rows < 2 * self._chunks[-1].num_rows:
            b = self._chunks.pop()
            self._starts.pop()
            a = self._chunks.pop()
            self._chunks.append(pa.concat_batches([a, b]))
        return first

    def evict_before(self, seq: int) -> None:
        """Forget rows with sequence number ``< seq`` (whole chunks only)."""
        while self._chunks and self._starts[0] + self._chunks[0].num_rows <= seq:
            self._chunks.pop(0)
            self._starts.pop(0)

    def take(self, seqs: np.ndarray) -> pa.Table:
        """Rows with the given sequence numbers (all held), in that order."""
        idx = pa.array(np.asarray(seqs, dtype=np.int64) - self.start)
        if len(self._chunks) == 1:
            return pa.Table.from_batches([self._chunks[0].take(idx)])
        return pa.Table.from_batches(self._chunks, schema=self.schema).take(idx)

    def rows_from(self, seq: int) -> pa.Table:
        """Rows ``seq .. end - 1`` as one table (for snapshots)."""
        t = pa.Table.from_batches(self._chunks, schema=self.schema)
        return t.slice(max(0, seq - self.start)).combine_chunks()

    def nbytes(self) -> int:
        return sum(c.nbytes for c in self._chunks)
