"""Decomposer and composer: only the columns deployed queries use travel the path.

The decomposer cuts each arriving batch of a source stream down to the union of the columns that
the deployed queries read from it. When some query asks for other columns in its results, the
decomposer numbers the rows (``__row_id``, consecutive per stream) and keeps the full batch in the
stream's **parse table**; the composer re-attaches the requested columns to result rows by row id.

Parse-table entries are released as soon as no deployed query can still refer to them: right
after the batch has passed the path when every composing query is stateless, otherwise when the
last composing query on the stream is undeployed (the retained bytes are reported).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from splice.core.errors import PlanError, SchemaError
from splice.core.stream import Stream

__all__ = ["Decomposer", "ParseTable", "ROW_ID"]

ROW_ID = "__row_id"


@dataclass
class ParseTable:
    """Full batches of one stream by first row id (ascending, contiguous ids)."""

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

    def gather(self, row_ids: np.ndarray, columns: list[str], stream: str) -> list[pa.Array]:
        """The ``columns`` of the rows ``row_ids`` (in the order given)."""
        if len(row_ids) == 0:
            schema = self.batches[0].schema if self.batches else None
            return [pa.array([], type=schema.field(c).type if schema else pa.null()) for c in columns]
        if not self.starts or row_ids.min() < self.starts[0]:
            raise PlanError(f"stream {stream!r}: row ids no longer in the parse table")
        first = int(np.searchsorted(self.starts, row_ids.min(), side="right")) - 1
        last = int(np.searchsorted(self.starts, row_ids.max(), side="right"))
        table = pa.Table.from_batches(self.batches[first:last])
        idx = pa.array(row_ids - self.starts[first])
        return [table.column(c).take(idx).combine_chunks() for c in columns]


class Decomposer:
    """Per source stream: which columns travel, row numbering, and the parse table."""

    def __init__(self) -> None:
        self.travel: dict[int, list[str] | None] = {}
        self.numbered: dict[int, bool] = {}
        self.retain: dict[int, bool] = {}
        self.next_row: dict[int, int] = {}
        self.tables: dict[int, ParseTable] = {}

    def configure(self, stream: Stream, used: list[set[str] | None], composing: list[bool]) -> None:
        """Set what travels for ``stream`` given each deployed query's used columns.

        ``composing[i]`` is True when query i composes columns (needs row ids) and is stateful.
        """
        sid = stream.id
        if not used:
            self.travel[sid] = []
        elif any(u is None for u in used):
            self.travel[sid] = None
        else:
            union = set().union(*[u for u in used if u is not None])
            self.travel[sid] = [n for n in stream.schema.names if n in union]
        self.numbered[sid] = bool(composing)
        self.retain[sid] = any(composing)
        self.tables.setdefault(sid, ParseTable())
        if not self.numbered[sid]:
            self.tables[sid].clear()

    def split(self, stream: Stream, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Cut ``batch`` to the travelling columns; number and park it when a query composes."""
        sid = stream.id
        travel = self.travel.get(sid)
        out = batch if travel is None else batch.select(travel)
        if self.numbered.get(sid):
            start = self.next_row.get(sid, 0)
            self.next_row[sid] = start + batch.num_rows
            ids = pa.array(np.arange(start, start + batch.num_rows, dtype=np.int64))
            out = out.append_column(ROW_ID, ids)
            self.tables[sid].add(start, batch)
        return out

    def passed(self, stream_id: int) -> None:
        """A batch of ``stream_id`` has left the path: drop parse entries nobody can still use."""
        if not self.retain.get(stream_id, False):
            t = self.tables.get(stream_id)
            if t is not None and t.batches:
                t.clear()

    def compose(self, stream: Stream, result: pa.RecordBatch, columns: list[str], query: str) -> pa.RecordBatch:
        """Re-attach ``columns`` of ``stream`` to ``result`` by its row-id column."""
        if ROW_ID not in result.schema.names:
            raise SchemaError(f"query {query!r}: result has no {ROW_ID!r} column to compose by")
        ids = result.column(ROW_ID).to_numpy(zero_copy_only=False)
        arrays = self.tables[stream.id].gather(ids, columns, stream.name)
        out = result.drop_columns([ROW_ID])
        for name, arr in zip(columns, arrays, strict=True):
            f = stream.schema.field(name)
            out = out.append_column(f, arr)
        return out

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tables.values())
