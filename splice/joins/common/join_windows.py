"""Sliding windows for stream joins: count-based and time-based, and the rows they retain.

A **count window** of size ``w`` over stream R holds, after the ``n``-th tuple of R arrived, the
tuples ``n - w + 1 .. n`` of R (arrival order on the data path). A **time window** of length
``D`` pairs tuples whose event times differ by at most ``D``; its tuples are evicted by watermark:
once the watermark of the opposite stream is ``W``, no future opposite tuple can have a time
``<= W``, so a stored tuple with time ``<= W - D`` can never match again.

A two-way window join processes an arriving r (stream R) as Diba and the PIM-Tree paper define::

    probe W_S with r   ->   expire from W_R   ->   insert r into W_R

so within a batch, row i sees exactly the tuples that arrived before it.

**Arrival order inside the join.** A join whose spec names an ``order`` merges its two inputs
itself (:class:`ArrivalMerge`): rows are joined in the order of that column, ties left first, or,
with :data:`POSITION`, row ``i`` of the left input just before row ``i`` of the right, whatever
batches the data path cuts and however it interleaves the two inputs. It holds each input's rows
until their place is known and hands them on as a :class:`Release`: the merged prefix both
inputs have covered.

:class:`RowStore` keeps the payload rows of a window, addressed by their per-stream sequence
number, in a few Arrow chunks of geometrically decreasing size (appends and evictions are
amortized O(log n) row copies; a gather is one ``take``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from splice.core.errors import PlanError, SchemaError, StateError
from splice.core.ordered_merge import batch_turns, merge_order
from splice.core.time import time_values

__all__ = [
    "CountWindow",
    "TimeWindow",
    "JoinWindow",
    "parse_count_window",
    "RowStore",
    "POSITION",
    "ArrivalMerge",
    "Release",
    "drive_tables",
    "conform",
]

#: ``order=POSITION``: each input's own running row count 0, 1, 2, ..., ties left first, so row
#: ``i`` of the left input arrives just before row ``i`` of the right.
POSITION = "#position"


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


_EMPTY = np.zeros(0, np.int64)


def conform(batch: pa.RecordBatch, schema: pa.Schema, what: str, stream: int) -> pa.RecordBatch:
    """``batch`` with the columns of ``schema``, in its order and with its fields (nullability,
    metadata), so that a join's batches of one input concatenate; SchemaError naming the stream
    when a column is missing or of another type."""
    if batch.schema.equals(schema, check_metadata=True):
        return batch
    names = batch.schema.names
    for f in schema:
        if f.name not in names:
            raise SchemaError(f"{what}: stream {stream}: a batch has no column {f.name!r}")
        t = batch.schema.field(f.name).type
        if t != f.type:
            raise SchemaError(f"{what}: stream {stream}: column {f.name!r} of a batch is {t}, "
                              f"the stream's is {f.type}")
    return pa.RecordBatch.from_arrays([batch.column(n) for n in schema.names], schema=schema)


@dataclass(frozen=True)
class Release:
    """Rows of both inputs in one arrival order: the ``i``-th row comes from input
    ``sides[i]`` (0 left, 1 right); ``rows[s]`` holds input ``s``'s rows in their own order
    (``None`` when it has none here) and ``positions[s]`` their places in the merged order."""

    sides: np.ndarray
    rows: tuple[pa.RecordBatch | None, pa.RecordBatch | None]
    positions: tuple[np.ndarray, np.ndarray]

    @classmethod
    def single(cls, side: int, batch: pa.RecordBatch) -> Release:
        """One batch of one input, in its own order (a join without ``order``)."""
        pos = np.arange(batch.num_rows, dtype=np.int64)
        if side == 0:
            return cls(np.zeros(batch.num_rows, np.int8), (batch, None), (pos, _EMPTY))
        return cls(np.ones(batch.num_rows, np.int8), (None, batch), (_EMPTY, pos))

    def __len__(self) -> int:
        return len(self.sides)


class ArrivalMerge:
    """Two inputs merged into one arrival order inside a join, whatever their batches.

    Semantics: the rows are ordered by ``(v, input, row)``, where ``v`` is the row's value in
    column ``order`` (``int64`` as :func:`~splice.core.time.time_values` reads it: integers,
    timestamps, dates) or, for :data:`POSITION`, its input's running row count; ``input`` is 0
    for the left and 1 for the right, so ties go left first. That is the order
    :func:`splice.io.arrival.arrival_positions` gives for ``arrival=``/``time=`` (or neither).
    Each input must send its rows in nondecreasing ``v``; a row out of order is a
    :class:`~splice.core.errors.SchemaError` naming the stream, the column and the row.

    Release. A row's place is known once no later row of the other input can come before it.
    With ``floor[s]`` the least value a later row of input ``s`` can have (its last value for a
    column; its row count for positions, which never repeat; or ``W + 1`` after a watermark
    ``W`` when ``order`` is the event-time column, :meth:`advance`), a pending left row with
    value ``v`` is released once ``v <= floor[right]``, a right row once ``v < floor[left]``,
    and every row at the end. What is released is a prefix of the merged order: the
    :func:`~splice.core.ordered_merge.merge_order` of the two inputs' released rows (left row
    ``i`` lands at ``i + #{right values < v_i}``, right row ``j`` at ``j + #{left values <= v_j}``).

    State: each input's pending rows and their values, its row count, last value and floor
    (:meth:`snapshot`, :meth:`restore`).

    >>> import pyarrow as pa
    >>> m = ArrivalMerge("t", (2, 3), (pa.schema([("t", pa.int64())]),) * 2, "join")
    >>> m.add(0, pa.record_batch({"t": [1, 5, 9]}))
    >>> m.release() is None                        # the right input has shown nothing yet
    True
    >>> m.add(1, pa.record_batch({"t": [1, 6]}))
    >>> r = m.release()                 # left 1, right 1, left 5, right 6; left 9 waits
    >>> r.sides.tolist(), r.rows[0].num_rows, r.rows[1].num_rows
    ([0, 1, 0, 1], 2, 2)
    """

    def __init__(self, order: str, streams: tuple[int, int], schemas: tuple[pa.Schema, pa.Schema],
                 name: str) -> None:
        if not isinstance(order, str) or not order:
            raise PlanError(f"{name}: order must name a column both inputs carry, or be POSITION, "
                            f"got {order!r}")
        self.order = order
        self.streams = streams
        self.schemas = schemas
        self.name = name
        self._rows: list[list[pa.RecordBatch]] = [[], []]
        self._values: list[np.ndarray] = [_EMPTY, _EMPTY]
        #: rows each input has sent
        self.seen = [0, 0]
        #: the last order value each input has shown (column orders)
        self.last: list[int | None] = [None, None]
        #: the least value a later row of each input can have (None: unknown yet)
        self.floor: list[int | None] = [None, None]

    @property
    def by_position(self) -> bool:
        return self.order == POSITION

    def pending(self, side: int) -> int:
        """Rows of input ``side`` waiting for their place."""
        return len(self._values[side])

    def add(self, side: int, batch: pa.RecordBatch) -> None:
        """Take one batch of input ``side`` (checked for order first: nothing changes when it
        is out of order)."""
        n = batch.num_rows
        if n == 0:
            return
        stream = self.streams[side]
        if self.by_position:
            v = self.seen[side] + np.arange(n, dtype=np.int64)
        else:
            v = time_values(batch, self.order, str(stream))
            prev = self.last[side]
            down = np.flatnonzero(v[1:] < v[:-1]) + 1
            at = 0 if prev is not None and v[0] < prev else (int(down[0]) if len(down) else -1)
            if at >= 0:
                before = prev if at == 0 else int(v[at - 1])
                raise SchemaError(
                    f"{self.name}: stream {stream} must arrive in nondecreasing order of column "
                    f"{self.order!r}, but its row {self.seen[side] + at} (row {at} of this batch) "
                    f"has {int(v[at])} after {before}")
        self._rows[side].append(batch)
        self._values[side] = np.concatenate([self._values[side], v]) if len(self._values[side]) else v
        self.seen[side] += n
        self.last[side] = int(v[-1])
        floor = self.seen[side] if self.by_position else int(v[-1])
        self.advance(side, floor)

    def advance(self, side: int, floor: int) -> None:
        """No later row of input ``side`` has an order value below ``floor``."""
        cur = self.floor[side]
        if cur is None or floor > cur:
            self.floor[side] = int(floor)

    def release(self, final: bool = False) -> Release | None:
        """The merged prefix both inputs have covered (everything when ``final``), or None."""
        lv, rv = self._values
        if final:
            kl, kr = len(lv), len(rv)
        else:
            fl, fr = self.floor
            kl = 0 if fr is None else int(np.searchsorted(lv, fr, "right"))
            kr = 0 if fl is None else int(np.searchsorted(rv, fl, "left"))
        if kl == 0 and kr == 0:
            return None
        right = merge_order([lv[:kl], rv[:kr]]) >= kl  # where each merged row comes from
        lpos, rpos = np.flatnonzero(~right), np.flatnonzero(right)
        sides = right.astype(np.int8)
        return Release(sides, (self._take(0, kl), self._take(1, kr)), (lpos, rpos))

    def _table(self, side: int) -> pa.Table:
        if not self._rows[side]:
            return self.schemas[side].empty_table()
        return pa.Table.from_batches(self._rows[side])

    def _take(self, side: int, k: int) -> pa.RecordBatch | None:
        """Pop the first ``k`` pending rows of input ``side`` as one batch."""
        if k == 0:
            return None
        t = self._table(side)
        rest = t.slice(k)
        self._rows[side] = [b for b in rest.to_batches() if b.num_rows]
        self._values[side] = self._values[side][k:]
        head = t.slice(0, k).combine_chunks().to_batches()
        return head[0] if len(head) == 1 else pa.concat_batches(head)

    def nbytes(self) -> int:
        return sum(b.nbytes for rows in self._rows for b in rows)

    def snapshot(self) -> dict[str, Any]:
        return {"rows": [self._table(s) for s in (0, 1)],
                "values": [v.copy() for v in self._values],
                "seen": list(self.seen), "last": list(self.last), "floor": list(self.floor)}

    def restore(self, state: Any) -> None:
        try:
            tables, values = state["rows"], state["values"]
            self.seen = [int(x) for x in state["seen"]]
            self.last = [None if x is None else int(x) for x in state["last"]]
            self.floor = [None if x is None else int(x) for x in state["floor"]]
        except (TypeError, KeyError) as exc:
            raise StateError(f"{self.name}: unreadable arrival-order snapshot") from exc
        for s in (0, 1):
            t = tables[s].select(self.schemas[s].names)
            self._rows[s] = [b for b in t.to_batches() if b.num_rows]
            self._values[s] = np.asarray(values[s], np.int64)


# -- two whole tables through a join that merges its inputs ----------------------------------


def _in_order(table: pa.Table, order: str, side: str) -> pa.Table:
    """``table`` sorted by ``order`` (stable; as it is when sorted already)."""
    table = table.combine_chunks()
    if order == POSITION:
        return table
    v = time_values(table, order, side)
    if len(v) > 1 and bool(np.any(v[1:] < v[:-1])):
        return table.take(pa.array(np.argsort(v, kind="stable")))
    return table


def drive_tables(spec: Any, left: pa.Table, right: pa.Table, batch_size: int = 65_536,
                 watch: Any = None) -> tuple[pa.Table, Any]:
    """Run a two-input join ``spec`` (streams 0 and 1, with an ``order``) over two whole tables
    as the engine's path carries a join's inputs: each table ordered by ``spec.order`` (a
    stable sort, skipped when it is in order already), cut into batches of ``batch_size`` rows,
    the two inputs' batches taking turns by the order value their next batch starts with
    (:func:`~splice.core.ordered_merge.batch_turns`; by rows sent for :data:`POSITION`, whose
    values are those counts), one ``on_batch`` per batch, then ``on_end``; ``watch(logic)``
    after every batch. Returns (the output, the logic)."""
    if batch_size < 1:
        raise PlanError(f"--batch-size must be >= 1, got {batch_size}")
    inputs = {0: left.schema, 1: right.schema}
    schema = spec.output_schema(inputs)
    logic = spec.build(inputs)
    sides = ("left", "right")
    ordered = [_in_order(t, spec.order, side) for t, side in zip((left, right), sides, strict=True)]
    column = None if spec.order == POSITION else spec.order
    out: list[pa.RecordBatch] = []
    for side, batch in batch_turns([t.to_batches(max_chunksize=batch_size) for t in ordered],
                                   column, sides):
        out.extend(logic.on_batch(side, batch))
        if watch is not None:
            watch(logic)
    out.extend(logic.on_end())
    return pa.Table.from_batches(out, schema=schema), logic
