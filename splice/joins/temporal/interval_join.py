"""Interval join: equi-key pairs whose right time lies in a band around the left time.

Semantics (Flink's ``IntervalJoin``, with outer joins)::

    L ⋈ R = { (l, r) : key(l) = key(r), key(l) not null,
                       l.ts + lower <= r.ts <= l.ts + upper }

(either bound can be made exclusive; times are integers, so ``(a, b)`` is ``[a + 1, b - 1]``).
``how`` is ``inner``, ``left``, ``right`` or ``full``: outer joins also emit every row of the
outer side(s) that matched nothing, null-padded, when it retires. Output columns are the left
input's, then the right input's, a right column whose name is taken getting the suffix
``_right``. The output time of a pair is ``max(l.ts, r.ts)``; :meth:`output_watermark` says how
far the output has reached.

Algorithm. Both inputs arrive on one input port, told apart by stream id. Bounds are normalized
once, mirrored per side: an arriving row of side ``S`` at time ``t`` matches opposite rows with
time in ``[t + lo_S, t + hi_S]`` where ``(lo_L, hi_L) = (lower, upper)`` and
``(lo_R, hi_R) = (-upper, -lower)``; one method serves both sides. An arriving batch

1. drops its *late* rows (time ``<=`` its side's watermark) to the late side output, counted per
   stream (:meth:`drain_late`, ``late_rows``);
2. probes the opposite side's retained rows: at ``index_threshold`` (1,024) retained rows or fewer
   the whole side goes through the :class:`~splice.joins.temporal.matcher.Matcher` (the full probe); above
   it the side's :class:`~splice.joins.temporal._key_index.KeyIndex` yields only the rows of the probed
   keys near the probe's time;
3. locates the matched opposite rows by batch and row (sorted by batch/row order when they lie in
   several batches, so each is read once) and gathers their payload straight into output order
   from NumPy views of the retained batches' buffers (made once per batch, when its side is
   indexed or at its first gather), except what the pairs already give: the opposite key of one
   exact key column of one type (integers, booleans, temporal types) is the arriving row's key,
   and an indexed side's ``int64`` times come from the index entries the probe reads; codes that
   are not exact are checked for real key equality. The output batch is assembled by one kernel
   and handed to Arrow through its C data interface (:mod:`splice.joins.common._c_batches`), the
   arriving batch's columns shared, not copied, when each of its rows matched once, in order;
   columns of types only Arrow gathers make it of Arrow arrays instead;
4. is retained (LEFT_BUFFER / RIGHT_BUFFER: a list of Arrow batches with their times, key codes
   and matched flags), except rows that already can never match a future row.

State and cleanup. A row of side ``S`` at time ``t`` can match no future opposite row once the
opposite watermark ``W_O`` reaches ``t + hi_S``; it then *retires* (null-padded if its side is
outer and it never matched). Each side keeps one retirement threshold ``W_O - hi_S``, so retained
rows are exactly those with ``t > W_O - hi_S``. Cached minimum times per batch let cleanup skip
batches entirely in the future; a batch whose rows all retired is freed. The key index is built
when arrivals take a side above ``index_threshold`` rows (rows that retire on arrival are never
stored, so they never count), appended to on arrival, compacted on retirement, dropped when the
side falls back to the threshold or fewer, and rebuilt after restore, at the first probe (never
checkpointed).

Watermarks. Each side's watermark is the one the data path delivers (:meth:`on_watermark`): the
source's bounded out-of-orderness, raised where an input idles (:mod:`splice.core.time`); the
operator makes none of its own. Null padding order: the matches of an arriving batch in the
order of its rows (each with its opposite rows in arrival order), then the rows that retired,
left side first, each side in arrival order.

Null keys. A row with a null in any key column matches nothing: it is counted
(``null_keys``), never stored, and an outer side emits it null-padded at once.

Memory. ``state_bytes()`` is a running total of payload batches, times, key codes, matched flags,
cached minima and index arrays. Without a budget, a stored batch is counted when the total is
next asked for (``RecordBatch.nbytes`` sums every buffer's referenced range, the costliest line of
a small push), so each batch is counted once and a check is O(1) amortized; with
``state_budget`` set, the batch is counted on arrival, and one that would take state over the
budget raises :class:`~splice.core.errors.StateError` before it is stored.

>>> import pyarrow as pa
>>> from splice.testing import OperatorHarness
>>> s = pa.schema([("k", pa.int64()), ("ts", pa.int64())])
>>> h = OperatorHarness(IntervalJoin(left=2, right=3, on="k", time="ts", lower=-1, upper=1),
...                     {2: s, 3: s})
>>> _ = h.push(2, pa.record_batch({"k": [1, 2], "ts": [10, 10]}, schema=s))
>>> h.push(3, pa.record_batch({"k": [1, 1], "ts": [11, 13]}, schema=s)).to_pylist()
[{'k': 1, 'ts': 10, 'k_right': 1, 'ts_right': 11}]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from splice.core.errors import PlanError, SchemaError, StateError
from splice.core.operator import InputSchemas, OperatorLogic, OperatorSpec
from splice.core.row_checks import RowCheck, not_null
from splice.core.time import MIN_TIME, is_temporal, time_values
from splice.joins.common._c_batches import MINE, PASS, THEIRS, TIMES, BatchAssembler
from splice.joins.common.key_codec import KeyCodec, check_key_types, keys_equal
from splice.joins.common.output_schema import JoinType, check_pair_join
from splice.joins.temporal._interval_kernels import (
    gather_bits,
    gather_var,
    is_arange,
    locate,
    time_range,
)
from splice.joins.temporal._key_index import KeyIndex
from splice.joins.temporal.matcher import Matcher, MatchMethod

__all__ = ["IntervalJoin", "JoinType", "join_output_schema"]


MAX_TIME = int(np.iinfo(np.int64).max)
_MIN = int(MIN_TIME)
#: Fixed bytes accounted per retained batch: cached min/max time, row counters, row id start.
_BATCH_OVERHEAD = 48


def _clamp(t: int) -> int:
    return _MIN if t < _MIN else MAX_TIME if t > MAX_TIME else t


def join_output_schema(left: pa.Schema, right: pa.Schema, how: str, what: str) -> pa.Schema:
    """Left's fields then right's; a taken right name gets ``_right``; padded sides nullable."""
    taken = set(left.names)
    fields = [pa.field(f.name, f.type, f.nullable or how in ("right", "full")) for f in left]
    for f in right:
        name = f.name
        if name in taken:
            name = f"{name}_right"
            if name in taken or name in right.names:
                raise SchemaError(f"{what}: right column {f.name!r} would be renamed {name!r}, "
                                  "which is taken; rename one of the inputs' columns")
        taken.add(name)
        fields.append(pa.field(name, f.type, f.nullable or how in ("left", "full")))
    return pa.schema(fields)


def check_time_join_inputs(spec: Any, inputs: InputSchemas) -> tuple[pa.Schema, pa.Schema]:
    """Validate a time-bounded join's two inputs once; return (left schema, right schema).

    Both stream ids must be inputs, each time column present and temporal, the two time types
    equal (or both integers), and the key columns of comparable types.
    """
    ls, rs = (_input(spec, inputs, sid, label) for sid, label in ((spec.left, "left"), (spec.right, "right")))
    lt, rt = spec.time_columns
    types = []
    for schema, col, sid in ((ls, lt, spec.left), (rs, rt, spec.right)):
        if col not in schema.names:
            raise SchemaError(f"{spec.name}: stream {sid} has no time column {col!r} "
                              f"(columns: {', '.join(schema.names)})")
        t = schema.field(col).type
        if not is_temporal(t):
            raise SchemaError(f"{spec.name}: stream {sid} time column {col!r} has type {t}, "
                              "expected timestamp, date or integer")
        types.append(t)
    if types[0] != types[1] and not all(pa.types.is_integer(t) for t in types):
        raise SchemaError(f"{spec.name}: time columns differ in type: stream {spec.left} "
                          f"{lt!r} is {types[0]}, stream {spec.right} {rt!r} is {types[1]}")
    assert isinstance(spec.on, tuple) and isinstance(spec.right_on, tuple)
    check_key_types(ls, rs, spec.on, spec.right_on, spec.name, str(spec.left), str(spec.right))
    return ls, rs


def _input(spec: Any, inputs: InputSchemas, sid: int, label: str) -> pa.Schema:
    if sid not in inputs:
        raise PlanError(f"{spec.name}: {label} stream id {sid} is not among the inputs {sorted(inputs)}")
    return inputs[sid]


def conform(batch: pa.RecordBatch, schema: pa.Schema, stream: str, what: str) -> pa.RecordBatch:
    """``batch`` with the declared column order, or :class:`SchemaError` naming the column."""
    if batch.schema.equals(schema, check_metadata=False):
        return batch
    names = set(batch.schema.names)
    for f in schema:
        if f.name not in names:
            raise SchemaError(f"{what}: batch of stream {stream!r} lacks column {f.name!r}")
        got = batch.schema.field(f.name).type
        if got != f.type:
            raise SchemaError(f"{what}: stream {stream!r} column {f.name!r} has type {got}, "
                              f"expected {f.type}")
    return batch.select(schema.names)


def concat_batches(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatch:
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=schema)
    if len(batches) == 1:
        return batches[0]
    return pa.concat_batches(batches)


@dataclass(frozen=True)
class IntervalJoin(OperatorSpec):
    """Spec of the interval join ``L ⋈ R`` (see the module docstring for semantics).

    ``left``/``right`` are the stream ids of the two inputs; ``on`` the key column(s) (of both
    sides, or of the left side when ``right_on`` is given); ``time`` the event-time column (of
    both, or of the left when ``right_time`` is given); ``lower``/``upper`` the band in the time
    column's unit. ``state_budget`` is in bytes; ``matcher`` picks the engine of the full probe.
    """

    left: int
    right: int
    on: str | Sequence[str]
    time: str
    lower: int
    upper: int
    how: JoinType = "inner"
    right_on: str | Sequence[str] | None = None
    right_time: str | None = None
    lower_inclusive: bool = True
    upper_inclusive: bool = True
    state_budget: int | None = None
    index_threshold: int = 1024
    matcher: MatchMethod = "auto"
    name: str = field(default="interval_join")

    def __post_init__(self) -> None:
        check_pair_join(self)
        lo, hi = self.bounds
        if lo > hi:
            raise PlanError(f"{self.name}: lower bound {self.lower} is above upper bound "
                            f"{self.upper} (as inclusive bounds: [{lo}, {hi}]): nothing can match")
        if self.state_budget is not None and self.state_budget <= 0:
            raise PlanError(f"{self.name}: state_budget must be > 0 bytes, got {self.state_budget}")
        if self.index_threshold < 0:
            raise PlanError(f"{self.name}: index_threshold must be >= 0")
        Matcher(self.matcher)  # validates the name

    @property
    def bounds(self) -> tuple[int, int]:
        """The band as inclusive integer bounds ``(lo, hi)``: ``lo <= r.ts - l.ts <= hi``."""
        lo = int(self.lower) + (0 if self.lower_inclusive else 1)
        hi = int(self.upper) - (0 if self.upper_inclusive else 1)
        return lo, hi

    @property
    def time_columns(self) -> tuple[str, str]:
        return self.time, self.right_time or self.time

    def _check(self, inputs: InputSchemas) -> tuple[pa.Schema, pa.Schema]:
        return check_time_join_inputs(self, inputs)

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        ls, rs = self._check(inputs)
        return join_output_schema(ls, rs, self.how, self.name)

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        schema = self.output_schema(inputs)
        logic = IntervalJoinLogic(self, inputs, schema)
        if state is not None:
            logic.restore(state)
        return logic

    def columns_used(self, inputs: InputSchemas) -> Mapping[int, set[str]] | None:
        return None

    def input_checks(self, inputs: InputSchemas) -> Mapping[int, Sequence[RowCheck]]:
        return time_checks(self)


def time_checks(spec: Any) -> dict[int, list[RowCheck]]:
    """A time-bounded join needs an event time in every row of both inputs."""
    lt, rt = spec.time_columns
    return {spec.left: [not_null(lt, "event time")], spec.right: [not_null(rt, "event time")]}


_EMPTY = np.zeros(0, dtype=np.int64)
_GROUP0 = np.zeros(1, dtype=np.int64)
_NO_BITS = np.zeros(0, dtype=np.uint8)
#: Arriving batches of this many rows or more probe only the rows whose band reaches the opposite
#: side's time range (below it, the check costs more than it can save).
_PRUNE_ROWS = 32
_FIXED_WIDTHS: dict[int, type] = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
#: Output batches of pairs through :mod:`~splice.joins.common._c_batches` (else from Arrow arrays); off
#: only where pyarrow cannot import a batch through the C data interface.
_C_BATCHES = hasattr(pa.RecordBatch, "_import_from_c") and hasattr(pa.RecordBatch, "_export_to_c")


def _column_plan(t: pa.DataType) -> tuple[str, Any]:
    """How a column of type ``t`` is gathered: ``(kind, dtype of its values or offsets)``.

    ``kind`` is ``"fixed"`` (integers, floats, temporal types of 1, 2, 4 or 8 bytes a value),
    ``"var"`` (string and binary, and their large variants with 64-bit offsets) or ``"arrow"``
    (any other type, gathered by Arrow's ``take``). Decided once per input schema.
    """
    if pa.types.is_dictionary(t) or isinstance(t, pa.ExtensionType) or pa.types.is_boolean(t):
        return "arrow", None
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return "var", np.int32
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return "var", np.int64
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t):
        try:
            width = t.bit_width
        except ValueError:
            return "arrow", None
        if width in _FIXED_WIDTHS:
            return "fixed", _FIXED_WIDTHS[width]
    return "arrow", None


class _ColumnView:
    """NumPy views of one column's buffers, so that matched rows are gathered by NumPy indexing
    and :func:`~splice.joins.temporal._interval_kernels.gather_var` instead of an Arrow ``take``.

    Made once per retained batch (see :class:`_Buffered`). ``bits`` is the validity bitmap
    (``None`` without nulls), read from bit ``bit_offset``.
    """

    __slots__ = ("array", "kind", "type", "values", "offsets", "bits", "bit_offset", "source")

    def __init__(self, array: pa.Array, plan: tuple[str, Any]):
        self.array = array
        self.type = array.type
        kind, dtype = plan
        self.values: np.ndarray = _EMPTY
        self.offsets: np.ndarray = _EMPTY
        self.bits: np.ndarray | None = None
        self.bit_offset = array.offset
        #: the column as a source row of :func:`~splice.joins.common._c_batches.assemble` (code 0:
        #: not gathered there)
        self.source = (0, 0, 0, 0, 0, 0)
        if kind != "arrow":
            bufs = array.buffers()
            n, off = len(array), array.offset
            if kind == "fixed":
                if bufs[1] is None:
                    kind = "arrow"
                else:
                    self.values = np.frombuffer(bufs[1], dtype=dtype)[off : off + n]
            else:
                self.offsets = np.frombuffer(bufs[1], dtype=dtype)[off : off + n + 1]
                self.values = (np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None
                               else np.zeros(0, dtype=np.uint8))
            if array.null_count and kind != "arrow":
                self.bits = np.frombuffer(bufs[0], dtype=np.uint8)
            if kind != "arrow":
                w = np.dtype(dtype).itemsize
                self.source = (w if kind == "fixed" else -w, n,
                               bufs[0].address if self.bits is not None else 0, off,
                               bufs[1].address + off * w,
                               bufs[2].address if kind == "var" and bufs[2] is not None else 0)
        self.kind = kind

    def take(self, rows: np.ndarray) -> pa.Array:
        """Rows ``rows`` (positions in this column, any order, repeats allowed) as an array."""
        kind = self.kind
        if kind == "fixed":
            bits = self.bits
            validity = (None if bits is None
                        else pa.py_buffer(gather_bits(bits, self.bit_offset, rows)))
            return pa.Array.from_buffers(self.type, len(rows),
                                         [validity, pa.py_buffer(self.values[rows])])
        if kind == "var":
            bits = self.bits
            buf, off_at, data_at = gather_var(self.offsets, self.values,
                                              _NO_BITS if bits is None else bits,
                                              self.bit_offset, rows)
            if off_at >= 0:
                # one buffer holds bitmap, offsets and values: Arrow slices of it
                m = len(rows)
                whole = pa.py_buffer(buf)
                return pa.Array.from_buffers(
                    self.type, m,
                    [None if bits is None else whole.slice(0, (m + 7) >> 3),
                     whole.slice(off_at, (m + 1) * self.offsets.itemsize),
                     whole.slice(data_at)])
            # repeated rows overflow 32-bit offsets: Arrow's take says so
        return self.array.take(pa.array(rows))


def column_views(columns: list[pa.Array], plans: list[tuple[str, Any]]
                 ) -> list[_ColumnView]:
    return [_ColumnView(c, p) for c, p in zip(columns, plans, strict=True)]


class _Buffered:
    """One retained batch of one side: payload, times, key codes, matched flags, cached bounds.

    ``views`` (the payload's NumPy views for gathering) are made at the first gather from this
    batch and live as long as it does; ``nbytes`` is ``-1`` until the side counts it.
    """

    __slots__ = ("start", "batch", "times", "codes", "matched", "min_time", "max_time",
                 "n_alive", "nbytes", "views", "sources")

    def __init__(self, start: int, batch: pa.RecordBatch, times: np.ndarray, codes: np.ndarray,
                 matched: np.ndarray | None, min_time: int, max_time: int, nbytes: int = -1):
        self.start = start
        self.batch = batch
        self.times = times
        self.codes = codes
        self.matched = matched
        self.min_time = min_time
        self.max_time = max_time
        self.n_alive = len(times)
        self.nbytes = nbytes
        self.views: list[_ColumnView] | None = None
        self.sources: np.ndarray | None = None

    def count_bytes(self) -> int:
        """Bytes of payload, times, codes, flags and fixed overhead (``batch.nbytes`` is the
        costly part: it sums the referenced ranges of every buffer)."""
        if self.nbytes < 0:
            m = self.matched
            self.nbytes = (self.batch.nbytes + self.times.nbytes + self.codes.nbytes
                           + (m.nbytes if m is not None else 0) + _BATCH_OVERHEAD)
        return self.nbytes

    def make_views(self, plans: list[tuple[str, Any]]) -> list[_ColumnView]:
        if self.views is None:
            self.views = column_views(self.batch.columns, plans)
        return self.views

    def source_table(self, plans: list[tuple[str, Any]]) -> np.ndarray:
        """The columns as source rows of :func:`~splice.joins.common._c_batches.assemble`, shape
        ``(1, columns, 6)``; made once."""
        if self.sources is None:
            self.sources = np.array([[v.source for v in self.make_views(plans)]],
                                    dtype=np.int64)
        return self.sources

    def columns(self, rows: np.ndarray, plans: list[tuple[str, Any]], skip: tuple[int, ...] = ()
                ) -> list[pa.Array | None]:
        """Rows ``rows`` of every column but those in ``skip`` (``None`` there)."""
        views = self.views if self.views is not None else self.make_views(plans)
        if not skip:
            return [v.take(rows) for v in views]
        return [None if c in skip else v.take(rows) for c, v in enumerate(views)]


#: Batches added since the side's byte total was last brought up to date, at most.
_PENDING_MAX = 64


class _IntervalSide:
    """Declared state of one input (LEFT_BUFFER or RIGHT_BUFFER) and its watermarks."""

    def __init__(self, label: str, sid: int, schema: pa.Schema, keys: Sequence[str], time: str,
                 lo: int, hi: int, outer: bool, codec: KeyCodec):
        self.label = label
        self.sid = sid
        self.stream = f"{label} (stream {sid})"
        self.schema = schema
        self.keys = list(keys)
        self.key_index = [schema.get_field_index(k) for k in self.keys]
        self.time = time
        self.time_index = schema.get_field_index(time)
        self.time_int64 = schema.field(time).type == pa.int64()
        # one int64 key: its values are its codes (no codec call on the hot path)
        self.int64_key = len(self.keys) == 1 and schema.field(self.keys[0]).type == pa.int64()
        self.plans = [_column_plan(f.type) for f in schema]
        self.lo, self.hi = lo, hi
        self.outer = outer
        self.codec = codec
        self.batches: list[_Buffered] = []
        self._starts: np.ndarray | None = None  # start row id per batch, made when needed
        self.n_alive = 0
        self._bytes = 0  # bytes of counted batches and the index
        self._pending: list[_Buffered] = []  # batches added but not counted yet
        self.next_id = 0
        self.threshold = _MIN  # retained rows have time > threshold
        self.wm_delivered = _MIN
        self.index: KeyIndex | None = None
        self.late_rows = 0
        self.null_keys = 0

    # -- bookkeeping -------------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes held: a running total, brought up to date with the batches added since the
        last call (each batch is counted once, so a check costs O(1) amortized)."""
        if self._pending:
            for b in self._pending:
                self._bytes += b.count_bytes()
            self._pending.clear()
        return self._bytes

    @property
    def starts(self) -> np.ndarray:
        if self._starts is None:
            self._starts = np.array([b.start for b in self.batches], dtype=np.int64)
        return self._starts

    def encode(self, columns: list[pa.Array]) -> tuple[np.ndarray, np.ndarray | None]:
        """Key codes of a batch's ``columns`` and the mask of its valid (non-null) keys, ``None``
        if all are."""
        if self.int64_key:
            col = columns[self.key_index[0]]
            if not col.null_count:
                return col.to_numpy(), None
        return self.codec.encode([columns[i] for i in self.key_index])

    def add(self, batch: pa.RecordBatch, times: np.ndarray, codes: np.ndarray,
            matched: np.ndarray | None, min_time: int, max_time: int, threshold: int,
            nbytes: int = -1) -> None:
        start = self.next_id
        n = len(times)
        self.next_id += n
        buf = _Buffered(start, batch, times, codes, matched, min_time, max_time, nbytes)
        self.batches.append(buf)
        self._starts = None
        self.n_alive += n
        if nbytes >= 0:
            self._bytes += nbytes
        else:
            self._pending.append(buf)
            if len(self._pending) > _PENDING_MAX:
                _ = self.nbytes
        if self.index is not None:
            before = self.index.nbytes
            self.index.insert(codes, times, start)
            self._bytes += self.index.nbytes - before
            buf.make_views(self.plans)
        elif self.n_alive > threshold:
            self.build_index()  # arrival promotes a side above the threshold

    def build_index(self) -> None:
        """Index the retained rows by key; with it, the views for gathering every batch's
        payload (an indexed side is probed selectively, batch by batch, many times over)."""
        if len(self.batches) == 1 and self.batches[0].n_alive == len(self.batches[0].times):
            b = self.batches[0]  # one whole batch: consecutive ids, no id array to write
            self.index = KeyIndex(b.codes, b.times, b.start, (self.lo, self.hi))
        else:  # arrays made for the index: it counts their bytes
            codes, times, ids = self.alive_arrays()
            self.index = KeyIndex(codes, times, ids, (self.lo, self.hi), codes_owned=True)
        self._bytes += self.index.nbytes
        for b in self.batches:
            b.make_views(self.plans)

    def drop_index(self) -> None:
        if self.index is not None:
            self._bytes -= self.index.nbytes
            self.index = None

    def alive_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(codes, times, row ids)`` of every retained row, in arrival order."""
        cs, ts, ids = [], [], []
        thr = self.threshold
        for b in self.batches:
            rid = np.arange(b.start, b.start + len(b.times), dtype=np.int64)
            if b.n_alive == len(b.times):
                cs.append(b.codes)
                ts.append(b.times)
                ids.append(rid)
            else:
                m = b.times > thr
                cs.append(b.codes[m])
                ts.append(b.times[m])
                ids.append(rid[m])
        if not cs:
            return _EMPTY, _EMPTY, _EMPTY
        if len(cs) == 1:
            return cs[0], ts[0], ids[0]
        return np.concatenate(cs), np.concatenate(ts), np.concatenate(ids)

    def locate(self, row_ids: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """Where the rows ``row_ids`` (non-empty) lie: see
        :func:`~splice.joins.temporal._interval_kernels.locate` (``cuts`` is ``None`` for one batch)."""
        if len(self.batches) == 1:
            start = self.batches[0].start
            return (row_ids - start if start else row_ids), _EMPTY, _GROUP0, None
        return locate(row_ids, self.starts)

    def columns(self, rows: np.ndarray, inv: np.ndarray, groups: np.ndarray,
                cuts: np.ndarray | None, skip: tuple[int, ...] = ()) -> list[pa.Array | None]:
        """The payload columns of the located rows, one row per pair (in the pairs' order);
        ``None`` for the columns in ``skip`` (which the caller has from elsewhere)."""
        if len(groups) == 1:
            return self.batches[int(groups[0])].columns(rows, self.plans, skip)
        assert cuts is not None
        # rows of several batches: each gathered once, in batch/row order, then spread to pairs
        bats = [self.batches[g] for g in groups.tolist()]
        spans = list(zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True))
        out: list[pa.Array | None] = [None] * len(self.plans)
        if all(b.views is not None for b in bats):
            # fixed-width columns without nulls (the common key, time and measure columns):
            # NumPy gathers from the cached views, no Arrow call but the array's creation
            for c, (kind, _) in enumerate(self.plans):
                if kind != "fixed" or c in skip:
                    continue
                views = [b.views[c] for b in bats if b.views is not None]
                if any(v.kind != "fixed" or v.bits is not None for v in views):
                    continue
                vals = np.concatenate([v.values[rows[a:z]]
                                       for v, (a, z) in zip(views, spans, strict=True)])
                if len(inv):
                    vals = vals[inv]
                out[c] = pa.Array.from_buffers(views[0].type, len(vals),
                                               [None, pa.py_buffer(vals)])
        if any(a is None and c not in skip for c, a in enumerate(out)):
            parts = []
            for b, (a, z) in zip(bats, spans, strict=True):
                rows_g = rows[a:z]
                if z - a == len(b.times) and rows_g[0] == 0:
                    parts.append(b.batch)
                else:
                    parts.append(b.batch.take(pa.array(rows_g)))
            whole = pa.concat_batches(parts)
            if len(inv):
                whole = whole.take(pa.array(inv))
            out = [whole.column(c) if a is None and c not in skip else a
                   for c, a in enumerate(out)]
        return out

    def mark(self, rows: np.ndarray, groups: np.ndarray, cuts: np.ndarray | None) -> None:
        """Flag the located rows matched (an outer side)."""
        if len(groups) == 1:
            m = self.batches[int(groups[0])].matched
            assert m is not None
            m[rows] = True
            return
        assert cuts is not None
        for i, g in enumerate(groups.tolist()):
            m = self.batches[g].matched
            assert m is not None
            m[rows[cuts[i] : cuts[i + 1]]] = True

    def _forget(self, b: _Buffered) -> None:
        """Take a freed batch out of the byte total (or out of the batches not counted yet)."""
        if b.nbytes >= 0:
            self._bytes -= b.nbytes
        else:
            self._pending.remove(b)

    def retire(self, threshold: int, index_threshold: int) -> list[pa.RecordBatch]:
        """Retire rows with ``time <= threshold``; return the unmatched ones of an outer side.

        Nothing is done when the threshold did not move; batches entirely in the future are
        skipped by their cached minimum time.
        """
        if threshold <= self.threshold:
            return []
        old = self.threshold
        self.threshold = threshold
        alive_before = self.n_alive
        out: list[pa.RecordBatch] = []
        keep: list[_Buffered] = []
        dropped = False
        for b in self.batches:
            if b.min_time > threshold:  # cached minimum: entirely in the future
                keep.append(b)
                continue
            if b.max_time <= threshold:
                gone = None if b.n_alive == len(b.times) else b.times > old
                n = b.n_alive
                self._forget(b)
                dropped = True
            else:
                gone = (b.times > old) & (b.times <= threshold)
                n = int(np.count_nonzero(gone))
                b.n_alive -= n
                b.min_time = int(b.times[b.times > threshold].min())
                keep.append(b)
            self.n_alive -= n
            if self.outer and n:
                assert b.matched is not None
                unmatched = ~b.matched if gone is None else gone & ~b.matched
                if unmatched.all():
                    out.append(b.batch)
                elif unmatched.any():
                    out.append(b.batch.filter(pa.array(unmatched)))
        if dropped:
            self.batches = keep
            self._starts = None
        if self.index is not None and self.n_alive != alive_before:  # nothing retired: skip
            if self.n_alive <= index_threshold:
                self.drop_index()
            else:
                before = self.index.nbytes
                self.index.retire(threshold)
                self._bytes += self.index.nbytes - before
        return out

    def retained(self) -> pa.Table:
        """The rows still in state, in arrival order."""
        parts = []
        for b in self.batches:
            parts.append(b.batch if b.n_alive == len(b.times)
                         else b.batch.filter(pa.array(b.times > self.threshold)))
        return pa.Table.from_batches(parts, schema=self.schema)


class TwoSidedJoinLogic(OperatorLogic):
    """What the interval and window join logics share: two sides ``L`` and ``R`` (each with a
    stream id ``sid``, ``late_rows``, ``nbytes`` and ``retained()``), and the late side output."""

    spec: Any
    L: Any
    R: Any
    _late: list[tuple[int, pa.RecordBatch]]

    def _sides(self, stream_id: int) -> tuple[Any, Any]:
        """(the side of ``stream_id``, the other side)."""
        if stream_id == self.L.sid:
            return self.L, self.R
        if stream_id == self.R.sid:
            return self.R, self.L
        raise PlanError(f"{self.spec.name}: stream id {stream_id} is neither the left "
                        f"({self.L.sid}) nor the right ({self.R.sid}) input")

    def drain_late(self) -> list[tuple[int, pa.RecordBatch]]:
        late, self._late = self._late, []
        return late

    @property
    def late_rows(self) -> dict[int, int]:
        """Rows refused as late so far, per input stream id."""
        return {self.L.sid: self.L.late_rows, self.R.sid: self.R.late_rows}

    @property
    def null_keys(self) -> dict[int, int]:
        """Rows whose key has a null (they match nothing) so far, per input stream id."""
        return {self.L.sid: self.L.null_keys, self.R.sid: self.R.null_keys}

    def metrics(self) -> dict[str, Any]:
        return {"null_keys": self.L.null_keys + self.R.null_keys,
                "late_rows": self.L.late_rows + self.R.late_rows}

    def state_bytes(self) -> int:
        return int(self.L.nbytes + self.R.nbytes)

    def retained(self, stream_id: int) -> pa.Table:
        """The rows of input ``stream_id`` still held in state, in arrival order."""
        return self._sides(stream_id)[0].retained()


class IntervalJoinLogic(TwoSidedJoinLogic):
    """Runtime of :class:`IntervalJoin`; built by ``IntervalJoin.build``."""

    def __init__(self, spec: IntervalJoin, inputs: InputSchemas, schema: pa.Schema):
        self.spec = spec
        self.schema = schema
        ls, rs = inputs[spec.left], inputs[spec.right]
        assert isinstance(spec.on, tuple) and isinstance(spec.right_on, tuple)
        lo, hi = spec.bounds
        lt, rt = spec.time_columns
        codec = KeyCodec([ls.field(c).type for c in spec.on])
        self.exact = codec.exact
        self.L = _IntervalSide("left", spec.left, ls, spec.on, lt, lo, hi,
                       spec.how in ("left", "full"), codec)
        self.R = _IntervalSide("right", spec.right, rs, spec.right_on, rt, -hi, -lo,
                       spec.how in ("right", "full"), KeyCodec([rs.field(c).type for c in spec.right_on]))
        self.matcher = Matcher(spec.matcher)
        self.index_threshold = spec.index_threshold
        self._late: list[tuple[int, pa.RecordBatch]] = []
        self._nl = len(ls.names)
        # a schema of nullable fields without metadata is what a batch made from arrays and
        # names has: the output is then made that way, which spares Arrow checking a schema
        # (docs/lab/time-joins.md, "The selective push's fixed cost")
        plain = pa.schema([pa.field(f.name, f.type) for f in schema])
        self._names: list[str] | None = (schema.names if schema.equals(plain, check_metadata=True)
                                         else None)
        # One exact key column of one plain type on both sides (integers, booleans, temporal
        # types: equal codes are equal values, bit for bit): a pair's opposite key is the
        # arriving row's key, so the opposite key column is never gathered.
        lk, rk = ls.field(spec.on[0]).type, rs.field(spec.right_on[0]).type
        self._same_key = (len(spec.on) == 1 and lk == rk
                          and (pa.types.is_integer(lk) or pa.types.is_boolean(lk)
                               or pa.types.is_temporal(lk)))
        # pairs' output batches assembled in one kernel (see _c_batches), per arriving side,
        # whether the index gives the opposite times and whether the arriving rows come whole
        self._assembler = BatchAssembler(schema) if _C_BATCHES else None
        self._plans = {(left, times, whole): self._output_plan(left, times, whole)
                       for left in (True, False) for times in (True, False)
                       for whole in (True, False)}

    def _output_plan(self, left: bool, times: bool, whole: bool) -> np.ndarray | None:
        """The :func:`~splice.joins.common._c_batches.assemble` plan of the pairs of an arriving batch
        of the left side (``left``) or the right, with the opposite times from the index
        (``times``) and every arriving row once, in order (``whole``); ``None`` when a column
        it would gather is of a type gathered only by Arrow (the output is then made of Arrow
        arrays), or the join checks keys beyond their codes."""
        if not self.exact:
            return None
        s, o = (self.L, self.R) if left else (self.R, self.L)

        def code(plan: tuple[str, Any]) -> int:
            kind, dtype = plan
            w = np.dtype(dtype).itemsize if kind != "arrow" else 0
            return w if kind == "fixed" else -w if kind == "var" else 0

        mine = [(PASS, c, 0) if whole else (MINE, c, code(p)) for c, p in enumerate(s.plans)]
        theirs = [(THEIRS, c, code(p)) for c, p in enumerate(o.plans)]
        if self._same_key:
            theirs[o.key_index[0]] = mine[s.key_index[0]]
        if times and o.time_int64:
            theirs[o.time_index] = (TIMES, 0, 8)
        rows = mine + theirs if left else theirs + mine
        if any(src != PASS and src != TIMES and c == 0 for src, _, c in rows):
            return None
        return np.array(rows, dtype=np.int64).reshape(len(rows), 3)

    # -- watermarks --------------------------------------------------------------------------

    def watermark(self, stream_id: int) -> int:
        """The watermark of input ``stream_id`` (``MIN_TIME`` before any)."""
        return int(self._sides(stream_id)[0].wm_delivered)

    def output_watermark(self) -> int | None:
        wl, wr = self.L.wm_delivered, self.R.wm_delivered
        if wl == _MIN or wr == _MIN:
            return None
        return min(wl, wr, wr - self.L.hi, wl - self.R.hi)

    # -- the data path -----------------------------------------------------------------------

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        s, o = self._sides(stream_id)
        batch = conform(batch, s.schema, s.stream, self.spec.name)
        n = batch.num_rows
        if n == 0:
            return []
        cols = batch.columns
        col = cols[s.time_index]
        if s.time_int64 and not col.null_count:
            t = col.to_numpy()
        else:
            t = time_values(batch, s.time, s.stream)
        codes, valid = s.encode(cols)
        tmin, tmax, ordered = time_range(t)

        if valid is not None:
            s.null_keys += n - int(np.count_nonzero(valid))

        # 1. late rows: time <= this side's watermark
        late: np.ndarray | None = None
        if tmin <= s.wm_delivered:
            late = t <= s.wm_delivered
            self._late.append((s.sid, batch.filter(pa.array(late))))
            s.late_rows += int(np.count_nonzero(late))
        live = valid if late is None else (~late if valid is None else valid & ~late)

        # 2-3. probe the opposite side
        out: list[pa.RecordBatch] = []
        matched = np.zeros(n, dtype=bool) if s.outer else None
        if o.n_alive:
            res = self._probe(s, o, batch, cols, t, codes, live, matched, tmin, tmax,
                              ordered)
            if res is not None:
                out.append(res)

        # 4. retain what can still match; retire by the (possibly advanced) watermarks
        thr_s = _clamp(o.wm_delivered - s.hi)
        thr_o = _clamp(s.wm_delivered - o.hi)
        if live is None and tmin > thr_s:  # every row is kept: no mask to build
            store: np.ndarray | None = None
            n_store = n
        else:
            store = t > thr_s
            if live is not None:
                store &= live
            n_store = int(np.count_nonzero(store))
        immediate: pa.RecordBatch | None = None
        if s.outer and store is not None:
            assert matched is not None
            pad = ~store & ~matched
            if late is not None:
                pad &= ~late
            if pad.any():
                immediate = batch.filter(pa.array(pad))
        retired_s = s.retire(thr_s, self.index_threshold)
        retired_o = o.retire(thr_o, self.index_threshold)
        if immediate is not None:
            retired_s.append(immediate)
        if n_store:
            if n_store == n:
                kb, kt, kc, km = batch, t, codes, matched
            else:
                assert store is not None
                kb = batch.filter(pa.array(store))
                kt, kc = t[store], codes[store]
                km = matched[store] if matched is not None else None
                tmin, tmax, _ = time_range(kt)
            nbytes = self._check_budget(s, kb, kt)
            s.add(kb, kt, kc, km, tmin, tmax, self.index_threshold, nbytes)
        if retired_s or retired_o:
            pl, pr = (retired_s, retired_o) if s is self.L else (retired_o, retired_s)
            out.extend(self._pad(self.L, pl))
            out.extend(self._pad(self.R, pr))
        return out

    def _probe(self, s: _IntervalSide, o: _IntervalSide, batch: pa.RecordBatch, cols: list[pa.Array],
               t: np.ndarray, codes: np.ndarray, live: np.ndarray | None,
               matched: np.ndarray | None, tmin: int, tmax: int,
               ordered: bool) -> pa.RecordBatch | None:
        """The pairs of the arriving rows (``batch``, its ``cols``, times ``t`` from ``tmin``
        to ``tmax``, key ``codes``, rows ``live``) with the opposite side's retained rows, as
        output rows; flags matched rows.

        Only rows whose band reaches the opposite side's time range probe: when a large batch
        arrives after the other side's rows were mostly retired, most of it cannot match yet.
        """
        if len(t) >= _PRUNE_ROWS:
            # the opposite rows lie in [omin, omax]: a row at t can match only if
            # omin - hi <= t <= omax - lo
            bats = o.batches
            if len(bats) == 1:
                omin, omax = bats[0].min_time, bats[0].max_time
            else:
                omin = min(b.min_time for b in bats)
                omax = max(b.max_time for b in bats)
            first, last = omin - s.hi, omax - s.lo
        else:
            first, last = tmin, tmax
        window: np.ndarray | None = None
        if tmin > last or tmax < first:
            return None
        if tmin < first or tmax > last:
            if ordered:
                a, z = np.searchsorted(t, [first, last + 1])
                window = np.zeros(len(t), dtype=bool)
                window[a:z] = True
            else:
                window = (t >= first) & (t <= last)
            live = window if live is None else live & window
        if live is None:
            rows = None
            pc_, pt = codes, t
        else:
            rows = np.flatnonzero(live)
            if len(rows) == 0:
                return None
            pc_, pt = codes[rows], t[rows]
        if o.index is None and o.n_alive > self.index_threshold:
            o.build_index()  # restored state: the derived index is rebuilt at its first probe
        # the opposite rows' int64 times of an indexed side come with the pairs (from the index
        # entries the probe reads), not from the payload
        et: np.ndarray | None = None
        in_order: bool | None = None  # pi is 0 .. len(t)-1 (None: not known yet)
        if o.index is not None:
            pi, rid, et, in_order = o.index.probe_times(pc_, pt, s.lo, s.hi)
            if rows is not None:  # positions among the probing rows only
                in_order = None
            if not o.time_int64:
                et = None
        else:
            bc, bt, bids = o.alive_arrays()
            pi, pj = self.matcher.pairs(pc_, pt, bc, bt, s.lo, s.hi)
            rid = bids[pj]
        if len(pi) == 0:
            return None
        if rows is not None:
            pi = rows[pi]
        # where the opposite rows lie, by batch and row: the payload of each is read once per pair
        loc = o.locate(rid)
        marked = False  # matched rows flagged (once, whichever way the output is made)
        if self._assembler is not None and self.exact:
            if o.outer:
                o.mark(loc[0], loc[2], loc[3])
            if matched is not None:
                matched[pi] = True
            marked = True
            if in_order is None:
                in_order = is_arange(pi, len(t))
            plan = self._plans[(s is self.L, et is not None, in_order)]
            if plan is not None:
                rows, inv, groups, cuts = loc
                if len(groups) == 1:
                    tabs = o.batches[int(groups[0])].source_table(o.plans)
                else:
                    tabs = np.concatenate([o.batches[g].source_table(o.plans)
                                           for g in groups.tolist()])
                res = self._assembler.build(batch, plan, tabs, rows, inv,
                                            _EMPTY if cuts is None else cuts, pi,
                                            _EMPTY if et is None else et)
                if res is not None:
                    return res
        skip = ((o.key_index[0],) if self._same_key else ()) + (
            (o.time_index,) if et is not None else ())
        theirs = o.columns(*loc, skip)
        if not self.exact:  # equal codes: check the keys themselves
            ok = keys_equal([cols[c].take(pa.array(pi)) for c in s.key_index],
                            [theirs[c] for c in o.key_index])  # type: ignore[misc]
            if not ok.all():
                keep = np.flatnonzero(ok)
                if len(keep) == 0:
                    return None
                pi, rid = pi[keep], rid[keep]
                in_order = None
                if et is not None:
                    et = et[keep]
                sel = pa.array(keep)
                theirs = [None if a is None else a.take(sel) for a in theirs]
                loc = o.locate(rid)
        if not marked:
            if o.outer:
                o.mark(loc[0], loc[2], loc[3])
            if matched is not None:
                matched[pi] = True
        if in_order if in_order is not None else is_arange(pi, len(t)):
            mine = cols
        else:
            mine = [v.take(pi) for v in column_views(cols, s.plans)]
        if self._same_key:
            theirs[o.key_index[0]] = mine[s.key_index[0]]
        if et is not None:
            theirs[o.time_index] = pa.Array.from_buffers(pa.int64(), len(et),
                                                          [None, pa.py_buffer(et)])
        arrays = mine + theirs if s is self.L else theirs + mine
        if self._names is not None:
            return pa.RecordBatch.from_arrays(arrays, names=self._names)
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _pad(self, s: _IntervalSide, parts: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
        out = []
        for p in parts:
            n = p.num_rows
            if s is self.L:
                nulls = [pa.nulls(n, f.type) for f in self.schema][self._nl:]
                arrays = p.columns + nulls
            else:
                nulls = [pa.nulls(n, f.type) for f in self.schema][: self._nl]
                arrays = nulls + p.columns
            out.append(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
        return out

    def _check_budget(self, s: _IntervalSide, batch: pa.RecordBatch, times: np.ndarray) -> int:
        """With a budget: the bytes ``batch`` will take, or :class:`StateError` before it is
        stored. Without one: ``-1`` (the side counts the batch when next asked)."""
        budget = self.spec.state_budget
        if budget is None:
            return -1
        own = (batch.nbytes + 2 * times.nbytes + (len(times) if s.outer else 0)
               + _BATCH_OVERHEAD)
        extra = own
        if s.index is not None or s.n_alive + len(times) > self.index_threshold:
            extra += 3 * times.nbytes
        total = self.L.nbytes + self.R.nbytes + extra
        if total > budget:
            o = self.R if s is self.L else self.L
            raise StateError(
                f"{self.spec.name}: state would reach {total} bytes with {len(times)} more rows "
                f"of stream {s.stream}, over the budget of {budget} bytes; it holds "
                f"{s.n_alive} rows of {s.stream} and {o.n_alive} of {o.stream}, watermark of "
                f"{o.stream} is {o.wm_delivered} (an input that never advances keeps the "
                "other's rows: give its source a watermark strategy with an idle timeout)"
            )
        return own

    def on_watermark(self, stream_id: int, time: int) -> list[pa.RecordBatch]:
        s, o = self._sides(stream_id)
        if time > s.wm_delivered:
            s.wm_delivered = int(time)
        return self._retire_all()

    def _retire_all(self) -> list[pa.RecordBatch]:
        L, R = self.L, self.R
        pl = L.retire(_clamp(R.wm_delivered - L.hi), self.index_threshold)
        pr = R.retire(_clamp(L.wm_delivered - R.hi), self.index_threshold)
        return self._pad(L, pl) + self._pad(R, pr)

    def on_end(self) -> list[pa.RecordBatch]:
        pl = self.L.retire(MAX_TIME, self.index_threshold)
        pr = self.R.retire(MAX_TIME, self.index_threshold)
        return self._pad(self.L, pl) + self._pad(self.R, pr)

    def indexed(self, stream_id: int) -> bool:
        """Whether input ``stream_id``'s retained rows are currently key-indexed."""
        return self._sides(stream_id)[0].index is not None

    # -- snapshots ---------------------------------------------------------------------------

    def snapshot(self) -> Any:
        sides = []
        for s in (self.L, self.R):
            parts = []
            for b in s.batches:
                if b.n_alive == len(b.times):
                    parts.append((b.batch, None if b.matched is None else b.matched.copy()))
                else:
                    m = b.times > s.threshold
                    parts.append((b.batch.filter(pa.array(m)),
                                  None if b.matched is None else b.matched[m]))
            sides.append({"batches": parts, "threshold": s.threshold,
                          "wm_delivered": s.wm_delivered, "late_rows": s.late_rows,
                          "null_keys": s.null_keys})
        return {"version": 2, "sides": sides, "late": list(self._late)}

    def restore(self, state: Any) -> None:
        if not isinstance(state, dict) or state.get("version") != 2:
            raise StateError(f"{self.spec.name}: cannot restore state of an unknown format")
        for s, snap in zip((self.L, self.R), state["sides"], strict=True):
            s.threshold = snap["threshold"]
            s.wm_delivered = snap["wm_delivered"]
            s.late_rows = snap["late_rows"]
            s.null_keys = snap["null_keys"]
            for batch, matched in snap["batches"]:
                batch = conform(batch, s.schema, s.stream, self.spec.name)
                t = time_values(batch, s.time, s.stream)
                codes, _ = s.encode(batch.columns)
                m = None
                if s.outer:
                    m = np.zeros(len(t), bool) if matched is None else np.array(matched, bool)
                lo, hi, _ = time_range(t)
                s.add(batch, t, codes, m, lo, hi, MAX_TIME)  # no index: built at the first probe
        self._late = list(state["late"])
