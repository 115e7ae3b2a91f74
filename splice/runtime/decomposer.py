"""Decomposer and composer: only the columns deployed queries use travel the path.

The decomposer cuts each arriving batch of a source stream down to the union of the columns that
the deployed queries read from it. When some query asks for other columns in its results
(``compose=``), the decomposer numbers the rows (``__row_id``, consecutive per stream) and keeps
those columns of the batch in the stream's **parse table**; the composer re-attaches them to
result rows by row id.

Retention. Each composing query *holds* the stream's parse table from a **low-water row id**
``L``: no result row of that query tapped from now on has a row id below ``L``. A query holds
from the first row pushed after its deployment; the engine raises ``L`` (:meth:`hold`) as it
learns that the query's units keep no older row (see :mod:`splice.runtime.engine`, fences), and
lets go (:meth:`release`) once the query's last unit has retired. Whole batches below every
holder's ``L`` are freed; with no holder the table is empty::

    parse table of s:  [0..99] [100..199] [200..299] [300..399]
    holders:           q1: L=250   q2: L=120
    freed:             [0..99]            (every row < min L = 120)

So a stateless composing query keeps only the batches in flight, and a stateful one the rows
its operators still keep (when they can say which) or, when they cannot, every row it has seen.
The table is safe to use from several threads (the path taps results on executor threads).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from splice.core.errors import InternalError, SchemaError
from splice.core.stream import Stream

__all__ = ["Decomposer", "ParseTable", "ROW_ID"]

ROW_ID = "__row_id"


@dataclass
class ParseTable:
    """Batches of one stream's composed columns by first row id (ascending, contiguous ids)."""

    starts: list[int] = field(default_factory=list)
    batches: list[pa.RecordBatch] = field(default_factory=list)
    nbytes: int = 0

    def add(self, start: int, batch: pa.RecordBatch) -> None:
        self.starts.append(start)
        self.batches.append(batch)
        self.nbytes += batch.nbytes

    def clear(self) -> None:
        self.starts.clear()
        self.batches.clear()
        self.nbytes = 0

    def trim(self, below: int) -> None:
        """Free every batch whose rows all have ids below ``below``."""
        k = 0
        while k < len(self.batches) and self.starts[k] + self.batches[k].num_rows <= below:
            self.nbytes -= self.batches[k].nbytes
            k += 1
        if k:
            del self.starts[:k]
            del self.batches[:k]

    def gather(self, row_ids: np.ndarray, columns: list[str], stream: str) -> list[pa.Array]:
        """The ``columns`` of the rows ``row_ids`` (in the order given)."""
        if len(row_ids) == 0:
            return []
        lo, hi = int(row_ids.min()), int(row_ids.max())
        if not self.starts or lo < self.starts[0] or hi >= self.starts[-1] + self.batches[-1].num_rows:
            raise InternalError(f"stream {stream!r}: row ids {lo}..{hi} are not in the parse table")
        first = int(np.searchsorted(self.starts, lo, side="right")) - 1
        last = int(np.searchsorted(self.starts, hi, side="right"))
        # batches parked while other queries composed other columns: take this query's columns
        table = pa.Table.from_batches([b.select(columns) for b in self.batches[first:last]])
        idx = pa.array(row_ids - self.starts[first])
        return [table.column(c).take(idx).combine_chunks() for c in columns]


class Decomposer:
    """Per source stream: which columns travel, row numbering, and the parse table."""

    def __init__(self) -> None:
        self.travel: dict[int, list[str] | None] = {}
        self.numbered: dict[int, bool] = {}
        self.next_row: dict[int, int] = {}
        self.tables: dict[int, ParseTable] = {}
        #: per stream: composing query -> (low-water row id, the columns it composes)
        self.holders: dict[int, dict[str, tuple[int, tuple[str, ...]]]] = {}
        self._parked: dict[int, list[str]] = {}  # per stream: the columns the parse table keeps
        self._lock = threading.Lock()

    def configure(self, stream: Stream, used: list[set[str] | None],
                  composing: Mapping[str, Sequence[str]]) -> None:
        """Set what travels for ``stream`` from now on, given each deployed query's used columns
        and the deployed queries that compose columns of it (query -> columns).

        A composing query not yet holding the table holds it from the next row; one no longer
        deployed keeps holding until :meth:`release`.
        """
        sid = stream.id
        if not used:
            travel: list[str] | None = []
        elif any(u is None for u in used):
            travel = None
        else:
            union = set().union(*[u for u in used if u is not None])
            travel = [n for n in stream.schema.names if n in union]
        with self._lock:
            self.travel[sid] = travel
            self.numbered[sid] = bool(composing)
            self.tables.setdefault(sid, ParseTable())
            holders = self.holders.setdefault(sid, {})
            for query, cols in composing.items():
                if query not in holders:
                    holders[query] = (self.next_row.get(sid, 0), tuple(cols))
            self._settle(stream)

    def _settle(self, stream: Stream) -> None:
        """Parked columns and freed batches after the holders changed (lock held)."""
        sid = stream.id
        holders = self.holders.get(sid, {})
        wanted = {c for _, cols in holders.values() for c in cols}
        self._parked[sid] = [n for n in stream.schema.names if n in wanted]
        table = self.tables.get(sid)
        if table is None:
            return
        if not holders:
            table.clear()
        else:
            table.trim(min(low for low, _ in holders.values()))

    def hold(self, stream: Stream, query: str, low: int) -> None:
        """Query ``query`` taps no more result rows of ``stream`` with ids below ``low``."""
        with self._lock:
            holders = self.holders.get(stream.id)
            if holders is None or query not in holders or low <= holders[query][0]:
                return
            holders[query] = (low, holders[query][1])
            table = self.tables.get(stream.id)
            if table is not None:
                table.trim(min(lw for lw, _ in holders.values()))

    def release(self, stream: Stream, query: str) -> None:
        """Query ``query`` composes from ``stream`` no more (its last unit retired)."""
        with self._lock:
            holders = self.holders.get(stream.id)
            if holders is not None and holders.pop(query, None) is not None:
                self._settle(stream)

    def clear(self) -> None:
        """Free every parse table (no result can be tapped any more: the input ended)."""
        with self._lock:
            for table in self.tables.values():
                table.clear()

    def split(self, stream: Stream, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Cut ``batch`` to the travelling columns; number it and park its composed columns
        when a deployed query composes."""
        sid = stream.id
        travel = self.travel.get(sid)
        out = batch if travel is None else batch.select(travel)
        if self.numbered.get(sid):
            with self._lock:
                start = self.next_row.get(sid, 0)
                self.next_row[sid] = start + batch.num_rows
                self.tables[sid].add(start, batch.select(self._parked[sid]))
            ids = pa.array(np.arange(start, start + batch.num_rows, dtype=np.int64))
            out = out.append_column(ROW_ID, ids)
        return out

    def compose(self, stream: Stream, result: pa.RecordBatch, columns: list[str], query: str) -> pa.RecordBatch:
        """Re-attach ``columns`` of ``stream`` to ``result`` by its row-id column."""
        if ROW_ID not in result.schema.names:
            raise SchemaError(f"query {query!r}: result has no {ROW_ID!r} column to compose by")
        ids = result.column(ROW_ID).to_numpy(zero_copy_only=False)
        if len(ids) == 0:
            arrays = [pa.array([], type=stream.schema.field(c).type) for c in columns]
        else:
            with self._lock:
                arrays = self.tables[stream.id].gather(ids, columns, stream.name)
        out = result.drop_columns([ROW_ID])
        for name, arr in zip(columns, arrays, strict=True):
            out = out.append_column(stream.schema.field(name), arr)
        return out

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tables.values())
