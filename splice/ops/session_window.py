"""Session windows on event time: per key, rows closer than ``gap`` form one window.

Semantics (Flink's session windows). For each group of ``keys``, order its rows by time; a row
starts a new session when it comes ``gap`` or more after the previous row (time units of the time
column), else it joins the previous row's session. A session's window is ``[first time, last
time + gap)``; the operator emits one row per session::

    window_start, window_end, keys..., aggregates...

A session is complete when the watermark ``W`` reaches ``window_end - 1`` (no later row can come
within ``gap`` of its last row); it is emitted then and its rows freed. A row is **late** when
its time is at or behind the watermark when it arrives: counted (``late_rows``), handed to
:meth:`drain_late` whole, never folded in. Because no accepted row is behind the watermark, an
emitted session can never grow again. END emits every open session. Sessions emitted together
come in key order, then time.

State: the rows of open sessions (only the columns the aggregates and keys read, plus the time),
re-sessioned at each watermark with one sort; aggregates are those of
:class:`~splice.ops.aggregate.GroupBy` (exact decimals, nulls skipped).

>>> import pyarrow as pa
>>> from splice.ops.aggregate import Agg
>>> from splice.testing import OperatorHarness
>>> spec = SessionWindowAggregate("t", gap=5, keys=["k"], aggregates=[Agg("n", "count")])
>>> h = OperatorHarness(spec, {2: pa.schema([("k", pa.int64()), ("t", pa.int64())])})
>>> _ = h.push(2, pa.record_batch({"k": [1, 1, 1, 2], "t": [1, 4, 20, 3]}))
>>> h.watermark(2, 12).to_pydict()
{'window_start': [1, 3], 'window_end': [9, 8], 'k': [1, 2], 'n': [2, 1]}
>>> h.end().to_pydict()
{'window_start': [20], 'window_end': [25], 'k': [1], 'n': [1]}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from splice.core.errors import PlanError, SchemaError, StateError
from splice.core.operator import InputSchemas, OperatorLogic
from splice.core.time import MIN_TIME, time_values
from splice.ops.aggregate import (
    Agg,
    GroupAggregator,
    freeze_keys_and_aggregates,
    plan_aggregates,
)
from splice.ops.window_aggregate import TimedAggregateSpec, WindowEmitter, time_array

__all__ = ["SessionWindowAggregate"]

_SESSION = "__session"
_RESERVED = ("window_start", "window_end", _SESSION)


@dataclass(frozen=True)
class SessionWindowAggregate(TimedAggregateSpec):
    """Group-by aggregation per session of ``keys`` on ``time_column`` (module docstring)."""

    time_column: str
    gap: int
    keys: Sequence[str] = ()
    aggregates: Sequence[Agg] = ()
    name: str = "session_window"

    def __post_init__(self) -> None:
        freeze_keys_and_aggregates(self)
        if isinstance(self.gap, bool) or not isinstance(self.gap, int) or self.gap < 1:
            raise PlanError(f"{self.name}: gap must be an integer >= 1, got {self.gap!r}")
        for k in _RESERVED:
            if k in self.keys or any(a.name == k for a in self.aggregates):
                raise PlanError(f"{self.name}: {k!r} is reserved for the session bounds")

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        _, schema = self._schema(inputs)
        return _SessionLogic(self, schema, self.output_schema(inputs), state)


def _changes(col: pa.Array) -> np.ndarray:
    """``out[i]``: row ``i + 1`` differs from row ``i`` (nulls equal each other only)."""
    a, b = col.slice(1), col.slice(0, len(col) - 1)
    diff = pc.fill_null(pc.not_equal(a, b), False)
    nulls = pc.not_equal(pc.is_null(a), pc.is_null(b))
    return np.asarray(pc.or_(diff, nulls).to_numpy(zero_copy_only=False), dtype=bool)


class _SessionLogic(WindowEmitter):
    def __init__(self, spec: SessionWindowAggregate, schema: pa.Schema, out: pa.Schema, state: Any):
        self.spec = spec
        self.schema = out
        self.time_type = schema.field(spec.time_column).type
        self.gap = int(spec.gap)
        plan = plan_aggregates(schema, spec.keys, spec.aggregates, spec.name)
        self.reads = sorted(plan.columns() | set(spec.keys) | {spec.time_column})
        self.kept = pa.schema([schema.field(c) for c in self.reads])
        sessioned = self.kept.append(pa.field(_SESSION, pa.int64(), False))
        self.plan = plan_aggregates(sessioned, (*spec.keys, _SESSION), spec.aggregates, spec.name)
        self.watermark = int(MIN_TIME)
        self.pending: list[pa.RecordBatch] = []
        self.late: list[tuple[int, pa.RecordBatch]] = []
        self.late_rows = 0
        if state is not None:
            try:
                self.watermark = int(state["watermark"])
                self.late_rows = int(state["late_rows"])
                self.late = [(int(sid), b) for sid, b in state["late"]]
                self.pending = list(state["pending"])
            except (KeyError, TypeError, ValueError) as exc:
                raise StateError(f"{spec.name}: cannot restore state: {exc}") from exc

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        t = time_values(batch, self.spec.time_column, f"{self.spec.name} input {stream_id}")
        late = t <= self.watermark
        if late.any():
            self.late.append((stream_id, batch.filter(pa.array(late))))
            self.late_rows += int(late.sum())
            batch = batch.filter(pa.array(~late))
        if batch.num_rows:
            self.pending.append(batch.select(self.reads))
        return []

    def _emit(self, everything: bool) -> list[pa.RecordBatch]:
        if not self.pending:
            return []
        rows = pa.Table.from_batches(self.pending, schema=self.kept).combine_chunks()
        order = [(k, "ascending") for k in self.spec.keys] + [(self.spec.time_column, "ascending")]
        rows = rows.take(pc.sort_indices(rows, options=pc.SortOptions(order)))
        t = time_values(rows, self.spec.time_column, self.spec.name)
        n = rows.num_rows
        starts = np.zeros(n, dtype=bool)
        if n:
            starts[0] = True
            new = np.diff(t) >= self.gap
            for k in self.spec.keys:
                new |= _changes(rows.column(k).combine_chunks())
            starts[1:] = new
        session = np.cumsum(starts) - 1
        firsts = np.flatnonzero(starts)
        lasts = np.concatenate([firsts[1:], [n]]) - 1
        ends = t[lasts] + self.gap
        done = np.ones(len(firsts), bool) if everything else ends - 1 <= self.watermark
        if not done.any():
            return []
        closed_rows = done[session]
        closed = rows.filter(pa.array(closed_rows))
        self.pending = [] if closed_rows.all() else rows.filter(pa.array(~closed_rows)).to_batches()
        ids = session[closed_rows]
        agg = GroupAggregator(self.plan)
        columns = [c.combine_chunks() for c in closed.columns]
        try:
            agg.update(pa.RecordBatch.from_arrays(
                [*columns, pa.array(ids, pa.int64())],
                schema=self.kept.append(pa.field(_SESSION, pa.int64(), False))))
        except SchemaError as exc:
            raise SchemaError(f"{self.spec.name}: {exc}") from exc
        cols = agg.result_columns()
        nkeys = len(self.spec.keys)
        sid = np.asarray(cols[nkeys].to_numpy(zero_copy_only=False), dtype=np.int64)
        bounds = [time_array(t[firsts[sid]], self.time_type), time_array(ends[sid], self.time_type)]
        return [pa.RecordBatch.from_arrays(bounds + cols[:nkeys] + cols[nkeys + 1:],
                                           schema=self.schema)]


    def on_end(self) -> list[pa.RecordBatch]:
        return self._emit(everything=True)

    def snapshot(self) -> Any:
        return {"watermark": self.watermark, "late_rows": self.late_rows,
                "late": tuple(self.late), "pending": tuple(self.pending)}

    def state_bytes(self) -> int:
        return sum(b.nbytes for b in self.pending)
