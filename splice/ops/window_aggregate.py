"""Tumbling and hopping windowed aggregation on event time, closed by watermarks.

Semantics. With ``size`` and ``slide`` (``slide = size`` for tumbling windows) in the time
column's units (days for dates, the unit of a timestamp, the value of an integer column), the
windows are ``[s, s + size)`` for every ``s`` that is a multiple of ``slide`` (aligned at 0). A row
with time ``t`` belongs to every window with ``s <= t < s + size``. For each window and each
group of ``keys`` the operator emits one row::

    window_start, window_end, keys..., aggregates...

Rows arrive whole (every column of the input, not only those the aggregates read), so that a
late row goes to the late side output as it arrived.

A window is complete when a watermark ``W >= s + size - 1 + allowed_lateness`` arrives (no later
row can have a time inside it, up to the allowed lateness): its rows are emitted then, in window
order and, within a window, in first-seen group order, and its state is freed. A row is **late**
when every window it belongs to is already complete; late rows are counted (``late_rows``) and
returned by ``drain_late()``, never dropped silently. A row that arrives while some of its windows
are complete counts only in the open ones. END flushes every remaining window.

State ``WINDOWS``: one :class:`~splice.ops.aggregate.GroupAggregator` whose groups are keyed by
the window's index (``start // slide``) and the keys, so that a batch spanning many windows is
folded in one pass of the hash-aggregate kernels; a watermark emits the complete windows' groups as
one batch and the table drops them once they are half of it. Aggregates are those of
:class:`~splice.ops.aggregate.GroupBy` (exact decimals, nulls skipped).

>>> import pyarrow as pa
>>> from splice.ops.aggregate import Agg
>>> from splice.testing import OperatorHarness
>>> spec = WindowAggregate("t", size=10, aggregates=[Agg("n", "count")])
>>> h = OperatorHarness(spec, {2: pa.schema([("t", pa.int64())])})
>>> _ = h.push(2, pa.record_batch({"t": [1, 12, 5]}))
>>> h.watermark(2, 9).to_pydict()
{'window_start': [0], 'window_end': [10], 'n': [2]}
>>> _ = h.push(2, pa.record_batch({"t": [3]}))          # window [0, 10) is complete: late
>>> h.late[0].to_pydict(), h.end().to_pydict()
({'t': [3]}, {'window_start': [10], 'window_end': [20], 'n': [1]})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from splice.core.errors import PlanError, SchemaError, StateError
from splice.core.operator import InputSchemas, OperatorLogic, OperatorSpec
from splice.core.row_checks import RowCheck, not_null
from splice.core.time import MIN_TIME, time_values
from splice.ops.aggregate import (
    Agg,
    AggPlan,
    GroupAggregator,
    _from_int64,
    decimal_checks,
    freeze_keys_and_aggregates,
    plan_aggregates,
)

__all__ = ["WindowAggregate", "TimedAggregateSpec", "WindowEmitter", "timed_input", "window_bounds_schema", "time_array"]


def timed_input(inputs: InputSchemas, time_column: str, name: str) -> tuple[int, pa.Schema]:
    """The one input of a windowed operator, whose ``time_column`` must be a timestamp, date or
    integer column."""
    if len(inputs) != 1:
        raise PlanError(f"{name} takes exactly one input stream, got {len(inputs)}")
    sid, schema = next(iter(inputs.items()))
    if time_column not in schema.names:
        raise SchemaError(f"{name} (stream {sid}): time column {time_column!r} does not exist "
                          f"(columns: {', '.join(schema.names)})")
    t = schema.field(time_column).type
    if not (pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_integer(t)):
        raise SchemaError(f"{name} (stream {sid}): time column {time_column!r} has type {t}, "
                          "expected a timestamp, date or integer column")
    return sid, schema


def window_bounds_schema(schema: pa.Schema, time_column: str, plan: AggPlan) -> pa.Schema:
    """``window_start``, ``window_end`` (of the time column's type), then the groups' columns."""
    t = schema.field(time_column).type
    bounds = [pa.field("window_start", t, False), pa.field("window_end", t, False)]
    return pa.schema(bounds + plan.output_fields())


def time_array(values: np.ndarray, time_type: pa.DataType) -> pa.Array:
    """``int64`` time values (days for dates) as an array of ``time_type``."""
    if pa.types.is_date64(time_type):
        values = values * 86_400_000
    return _from_int64(values, None, time_type)


class TimedAggregateSpec(OperatorSpec):
    """What the windowed aggregations share: one input with an event-time column, aggregates
    planned over it, ``window_start``/``window_end`` before the groups, whole rows in (a late
    row goes to the late side output as it arrived). Subclasses are frozen dataclasses with
    ``time_column``, ``keys``, ``aggregates`` and ``name``."""

    time_column: str
    keys: Sequence[str]
    aggregates: Sequence[Agg]
    name: str

    def _schema(self, inputs: InputSchemas) -> tuple[int, pa.Schema]:
        return timed_input(inputs, self.time_column, self.name)

    def plan(self, inputs: InputSchemas) -> AggPlan:
        _, schema = self._schema(inputs)
        return plan_aggregates(schema, self.keys, self.aggregates, self.name)

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        _, schema = self._schema(inputs)
        return window_bounds_schema(schema, self.time_column, self.plan(inputs))

    def columns_used(self, inputs: InputSchemas) -> Mapping[int, set[str]] | None:
        return None  # whole rows: a late row goes to the late side output as it arrived

    def input_checks(self, inputs: InputSchemas) -> Mapping[int, Sequence[RowCheck]]:
        sid, schema = self._schema(inputs)
        return {sid: [not_null(self.time_column, "event time"),
                      *decimal_checks(schema, self.plan(inputs).columns())]}


@dataclass(frozen=True)
class WindowAggregate(TimedAggregateSpec):
    """Group-by aggregation per tumbling (``slide=None``) or hopping window of ``time_column``.

    See the module docstring for the semantics. ``size``, ``slide`` and ``allowed_lateness`` are
    integers in the time column's units; ``slide`` must divide nothing in particular but must
    satisfy ``0 < slide <= size`` (a slide beyond the size would leave rows in no window).
    """

    time_column: str
    size: int
    slide: int | None = None
    keys: Sequence[str] = ()
    aggregates: Sequence[Agg] = ()
    allowed_lateness: int = 0
    name: str = "window_aggregate"

    def __post_init__(self) -> None:
        freeze_keys_and_aggregates(self)
        for label, v in (("size", self.size), ("allowed_lateness", self.allowed_lateness)):
            if not isinstance(v, int | np.integer) or isinstance(v, bool):
                raise PlanError(f"{self.name}: {label} must be an integer, got {v!r}")
        if self.size <= 0:
            raise PlanError(f"{self.name}: window size must be > 0, got {self.size}")
        if self.allowed_lateness < 0:
            raise PlanError(f"{self.name}: allowed_lateness must be >= 0, got {self.allowed_lateness}")
        if self.slide is not None:
            if not isinstance(self.slide, int | np.integer) or isinstance(self.slide, bool):
                raise PlanError(f"{self.name}: slide must be an integer, got {self.slide!r}")
            if not 0 < self.slide <= self.size:
                raise PlanError(
                    f"{self.name}: slide must satisfy 0 < slide <= size ({self.size}), got {self.slide}"
                )
        for k in ("window_start", "window_end"):
            if k in self.keys or any(a.name == k for a in self.aggregates):
                raise PlanError(f"{self.name}: {k!r} is reserved for the window bounds")

    @property
    def step(self) -> int:
        return int(self.slide if self.slide is not None else self.size)

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        return _WindowLogic(self, self.plan(inputs), self.output_schema(inputs), state)


class WindowEmitter(OperatorLogic):
    """What the windowed aggregations' logic shares: a watermark emits the windows it completes
    (``_emit``), and the late rows wait in ``late`` for :meth:`drain_late`."""

    watermark: int
    late: list[tuple[int, pa.RecordBatch]]

    def _emit(self, everything: bool) -> list[pa.RecordBatch]:
        raise NotImplementedError

    def on_watermark(self, stream_id: int, time: int) -> list[pa.RecordBatch]:
        if time <= self.watermark:
            return []
        self.watermark = int(time)
        return self._emit(everything=False)

    def drain_late(self) -> list[tuple[int, pa.RecordBatch]]:
        out, self.late = self.late, []
        return out


class _WindowLogic(WindowEmitter):
    def __init__(self, spec: WindowAggregate, plan: AggPlan, schema: pa.Schema, state: Any):
        self.spec = spec
        self.plan = plan
        self.schema = schema
        self.time_type = schema.field("window_start").type
        self.size = int(spec.size)
        self.slide = spec.step
        self.lateness = int(spec.allowed_lateness)
        self.watermark = int(MIN_TIME)
        self.late: list[tuple[int, pa.RecordBatch]] = []
        self.late_rows = 0
        #: the columns the aggregates read (rows arrive whole, for the late side output)
        self.reads = sorted(plan.columns() | {spec.time_column})
        groups = None
        if state is not None:
            try:
                self.watermark = int(state["watermark"])
                self.late_rows = int(state["late_rows"])
                self.late = [(int(sid), b) for sid, b in state["late"]]
                groups = state["groups"]
            except (KeyError, TypeError, ValueError) as exc:
                raise StateError(f"{spec.name}: cannot restore state: {exc}") from exc
        #: WINDOWS: one group per (window index, keys), the window index ``start // slide``
        #: being the group's extra key word
        self.agg = GroupAggregator(plan, groups, extra_words=1)
        #: groups already emitted, dropped from the table once they are half of it
        self.emitted = np.zeros(0, dtype=bool)

    def _closed(self, windows: np.ndarray) -> np.ndarray:
        """Whether the windows of index ``windows`` are complete under the current watermark."""
        if self.watermark == MIN_TIME:
            return np.zeros(len(windows), dtype=bool)
        return windows * self.slide + (self.size - 1 + self.lateness) <= self.watermark

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        t = time_values(batch, self.spec.time_column, f"{self.spec.name} input {stream_id}")
        last = t // self.slide  # the index of each row's latest window
        late = self._closed(last)
        any_late = bool(late.any())
        if any_late:
            self.late.append((stream_id, batch.filter(pa.array(late))))
            self.late_rows += int(late.sum())
        if batch.num_columns > len(self.reads):
            batch = batch.select(self.reads)
        try:
            if self.size == self.slide:
                self.agg.update(batch, late if any_late else None, last)
            else:
                rows, windows = self._hops(t, last)
                if len(rows):
                    self.agg.update(batch.take(pa.array(rows)), None, windows)
        except SchemaError as exc:
            raise SchemaError(f"{self.spec.name} (stream {stream_id}): {exc}") from exc
        return []

    def _hops(self, t: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each (row, open window index) pair of hopping windows, in row order so that groups
        are first seen in the order of their rows."""
        rows_parts, window_parts = [], []
        for j in range((self.size + self.slide - 1) // self.slide):
            w = last - j
            ok = (w * self.slide + self.size > t) & ~self._closed(w)
            rows_parts.append(np.flatnonzero(ok))
            window_parts.append(w[ok])
        rows = np.concatenate(rows_parts)
        order = np.argsort(rows, kind="stable")
        return rows[order], np.concatenate(window_parts)[order]

    def _emit(self, everything: bool) -> list[pa.RecordBatch]:
        """The complete windows' rows (every window's, with ``everything``) as one batch, in
        window order and first-seen group order within a window."""
        n = self.agg.n_groups
        if n == 0:
            return []
        windows = self.agg.extra_column()
        done = self._alive()
        if not everything:
            done &= self._closed(windows)
        chosen = np.flatnonzero(done)
        if len(chosen) == 0:
            return []
        chosen = chosen[np.argsort(windows[chosen], kind="stable")]
        starts = windows[chosen] * self.slide
        bounds = [self._time_array(starts), self._time_array(starts + self.size)]
        out = pa.RecordBatch.from_arrays(bounds + self.agg.result_columns(chosen),
                                         schema=self.schema)
        self.emitted[chosen] = True
        if 2 * int(self.emitted[:n].sum()) >= n:
            self._compact()
        return [out]

    def _compact(self) -> None:
        """Drop the emitted groups from the table."""
        alive = self._alive()
        if not alive.all():
            self.agg.keep_groups(np.flatnonzero(alive))
        self.emitted = np.zeros(0, dtype=bool)

    def open_windows(self) -> list[int]:
        """The starts of the windows holding groups not yet emitted, in order."""
        live = self.agg.extra_column()[self._alive()]
        return [int(w) * self.slide for w in np.unique(live)]

    def _alive(self) -> np.ndarray:
        """Whether each group is still to be emitted."""
        n = self.agg.n_groups
        if len(self.emitted) < n:
            self.emitted = np.concatenate([self.emitted, np.zeros(n - len(self.emitted), bool)])
        return ~self.emitted[:n]

    def _time_array(self, values: np.ndarray) -> pa.Array:
        return time_array(values, self.time_type)

    def on_end(self) -> list[pa.RecordBatch]:
        out = self._emit(everything=True)
        self._compact()
        return out

    def output_watermark(self) -> int | None:
        if self.watermark == MIN_TIME:
            return None
        return self.watermark - self.lateness

    def snapshot(self) -> Any:
        self._compact()
        return {
            "watermark": self.watermark,
            "late_rows": self.late_rows,
            "late": tuple(self.late),
            "groups": self.agg.snapshot(),
        }

    def state_bytes(self) -> int:
        return self.agg.nbytes()
