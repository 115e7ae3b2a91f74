"""A transactional operator for the data path: events in, events with their outcome out.

``TransactionalOperator(tables, ...)`` keeps shared state in a :class:`TxnEngine`. Each input row
is an event whose transaction is declared one of two ways (exactly one must be given):

* ``builder(engine, events, lo, hi) -> OpBatch`` (or ``(OpBatch, NonDeterministic)``), per
  punctuation interval: ``events`` maps each input column to a NumPy array (a fixed-size list
  column to a 2-D array), and the builder turns rows ``lo..hi`` into one transaction per row,
  transaction ``i`` being row ``lo + i``, with whole-column operations: the form of
  :class:`~splice.workloads.txn_apps.TxnApp`'s builders, which run unchanged here. No Python
  runs per event. While interval k executes, interval k+1 is built and planned
  (:meth:`TxnEngine.submit`), so interval k's output leaves with a later call.
* ``fn(row) -> [Access, ...]``, per event (see :mod:`splice.txn.api`): rows become Python dicts.

Every ``punctuation`` rows, and at each watermark and at END, the pending rows form one batch (a
punctuation interval) that runs with the engine's scheduler. Output rows are the input rows in
arrival order plus ``committed`` (bool), ``abort_reason`` (string, empty when committed) and
``results`` (per transaction, the value each operation read or wrote: in access order with
``fn``, null for object accesses; in the batch's operation order with ``builder``; null for the
operations of an event refused before execution, bad input or late), i.e. the post-processing
input. Snapshots hold the tables (object columns as JSON, see
:meth:`~splice.txn.state_tables.StateStore.snapshot`), the pending rows as an Arrow batch of the
input's schema, the commit and abort counts and, with ``builder``, the output of intervals that
ran but had not left yet (a batch of the output's schema); a snapshot without the last two (as
written before they existed) restores with none.

>>> import pyarrow as pa
>>> from splice.testing.harness import OperatorHarness
>>> from splice.txn import StateTable
>>> from splice.txn.api import add
>>> spec = TransactionalOperator((StateTable("acct", 4, initial=10.0),), _example_debit, 2)
>>> h = OperatorHarness(spec, {1: pa.schema([("k", pa.int64()), ("amount", pa.float64())])})
>>> out = h.push(1, pa.record_batch({"k": [0, 0, 1], "amount": [6.0, 6.0, 1.0]}))
>>> out.column("committed").to_pylist(), out.column("abort_reason").to_pylist()
([True, False], ['', 'condition failed'])
>>> h.end().column("results").to_pylist()
[[9.0]]

The same debits built per interval, as columns:

>>> from splice.txn import ADD, COND_GE, OpBatchBuilder
>>> def debits(engine, ev, lo, hi):
...     b = OpBatchBuilder(ev["ts"][lo:hi])
...     amount = ev["amount"][lo:hi]
...     b.add(range(hi - lo), engine.store.cells(0, ev["k"][lo:hi]), ADD, -amount, COND_GE, amount)
...     return b.build()
>>> spec = TransactionalOperator((StateTable("acct", 4, initial=10.0),), builder=debits,
...                              punctuation=2)
>>> h = OperatorHarness(spec, {1: pa.schema([("ts", pa.int64()), ("k", pa.int64()),
...                                          ("amount", pa.float64())])})
>>> _ = h.push(1, pa.record_batch({"ts": [1, 2, 3], "k": [0, 0, 1], "amount": [6.0, 6.0, 1.0]}))
>>> _ = h.end()
>>> out = h.result()
>>> out.column("committed").to_pylist(), out.column("results").to_pylist()
([True, False, True], [[4.0], [4.0], [9.0]])
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from splice.core.errors import PlanError, SchemaError, SpliceError, StateError
from splice.core.operator import InputSchemas, OperatorLogic, OperatorSpec
from splice.core.row_checks import RowCheck, not_null
from splice.txn._kernels import txn_offsets
from splice.txn.api import Access, add, run_events
from splice.txn.ops import REASONS, OpBatch
from splice.txn.state_tables import StateTable
from splice.txn.txn_engine import BatchResult, NonDeterministic, TxnEngine

__all__ = ["TransactionalOperator", "IntervalBuilder"]

#: ``builder(engine, events, lo, hi)``: rows ``lo..hi`` of ``events`` (column -> NumPy array) as
#: a batch of one transaction per row, with the non-deterministic accesses when it has some.
IntervalBuilder = Callable[[TxnEngine, Mapping[str, np.ndarray], int, int],
                           OpBatch | tuple[OpBatch, NonDeterministic | None]]

_RESULTS = pa.list_(pa.float64())
_OUT_FIELDS = [
    pa.field("committed", pa.bool_()),
    pa.field("abort_reason", pa.string()),
    pa.field("results", _RESULTS),
]
_OUT_NAMES = frozenset(f.name for f in _OUT_FIELDS)
#: abort reason code -> text, for a ``take`` over a batch's reason codes
_REASON_TEXT = pa.array([REASONS.get(i, f"reason {i}") for i in range(max(REASONS) + 1)],
                        pa.string())


def _example_debit(row: dict[str, Any]) -> list[Access]:
    return [add("acct", row["k"], -row["amount"], require_ge=row["amount"])]


def _callable_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__


@dataclass(frozen=True)
class TransactionalOperator(OperatorSpec):
    """Spec: the shared tables, the per-event ``fn`` or the per-interval ``builder`` (exactly
    one), rows per punctuation, the scheduler, its threads and (``nested``) a scheduler per
    transaction group."""

    tables: tuple[StateTable, ...]
    fn: Callable[[dict[str, Any]], Sequence[Access]] | None = None
    punctuation: int = 10_240
    threads: int = 1
    scheduler: str = "auto"
    name: str = "transactions"
    udf: Any = None  # the engine's numba user function for ``update`` accesses
    builder: IntervalBuilder | None = None
    #: transaction group -> scheduler (``TxnEngine(nested=...)``), kept as sorted pairs
    nested: tuple[tuple[int, str], ...] | Mapping[int, str] = ()
    #: with ``builder``: the builder sees each interval's rows in the order of this column
    #: (stable: equal times in arrival order), as a batch's transactions run in timestamp order;
    #: the output keeps arrival order
    time_column: str | None = None

    def __post_init__(self) -> None:
        if self.punctuation < 1:
            raise PlanError(f"{self.name}: punctuation must be >= 1, got {self.punctuation}")
        if not self.tables:
            raise PlanError(f"{self.name}: declare at least one state table")
        if (self.fn is None) == (self.builder is None):
            raise PlanError(f"{self.name}: give exactly one of fn= (a function per event: row -> "
                            "accesses) and builder= (a function per punctuation interval: "
                            "(engine, columns, lo, hi) -> OpBatch)")
        given = self.fn if self.fn is not None else self.builder
        if not callable(given):
            raise PlanError(f"{self.name}: {'fn' if self.fn is not None else 'builder'} must be "
                            f"callable, got {given!r}")
        if isinstance(self.nested, Mapping):
            object.__setattr__(self, "nested", tuple(sorted(self.nested.items())))
        if self.nested and self.builder is None:
            raise PlanError(f"{self.name}: nested schedulers need builder= (transaction groups "
                            "are set per batch)")
        if self.time_column is not None and self.builder is None:
            raise PlanError(f"{self.name}: time_column orders the rows a builder= sees; fn= sees "
                            "each event in arrival order")

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        if len(inputs) != 1:
            raise SchemaError(f"{self.name}: expects exactly one input stream, got {len(inputs)}")
        schema = next(iter(inputs.values()))
        clash = {f.name for f in _OUT_FIELDS} & set(schema.names)
        if clash:
            raise SchemaError(f"{self.name}: input already has columns {sorted(clash)}")
        if self.time_column is not None and not (
                self.time_column in schema.names
                and pa.types.is_integer(schema.field(self.time_column).type)):
            raise SchemaError(f"{self.name}: time_column {self.time_column!r} is not an integer "
                              "column of the input")
        return pa.schema(list(schema) + _OUT_FIELDS)

    def input_checks(self, inputs: InputSchemas) -> Mapping[int, Sequence[RowCheck]]:
        """With ``builder``, no column may be null (the builder reads columns as NumPy arrays);
        ``fn`` sees nulls as ``None``."""
        if self.builder is None:
            return {}
        return {sid: [not_null(n, "value") for n in schema.names] for sid, schema in inputs.items()}

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        return _TransactionalLogic(self, self.output_schema(inputs), state)


class _Columns(Mapping[str, np.ndarray]):
    """An interval's columns as NumPy arrays, each converted when the builder first reads it
    (writable copies: numba compiles read-only arrays as another type); a fixed-size list
    column becomes a 2-D array."""

    def __init__(self, batch: pa.RecordBatch, operator: str) -> None:
        self.batch = batch
        self.operator = operator
        self.cache: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        got = self.cache.get(name)
        if got is not None:
            return got
        i = self.batch.schema.get_field_index(name)
        if i < 0:
            raise KeyError(name)
        col = self.batch.column(i)
        if col.null_count:
            raise SchemaError(f"{self.operator}: column {name!r} holds nulls; the engine refuses "
                              "such rows where they enter (the stream's bad-input policy)")
        if pa.types.is_fixed_size_list(col.type):
            flat = col.flatten()
            if flat.null_count:
                raise SchemaError(f"{self.operator}: column {name!r} holds null list items")
            got = flat.to_numpy(zero_copy_only=False).reshape(len(col), col.type.list_size)
        elif pa.types.is_boolean(col.type):
            # the bitmap unpacked here: Arrow's own conversion of a large boolean array costs
            # tens of milliseconds the first time in a process
            data = col.buffers()[1]
            bits = np.zeros(0, np.uint8) if data is None else np.frombuffer(data, np.uint8)
            got = np.unpackbits(bits, count=col.offset + len(col),
                                bitorder="little")[col.offset:].view(np.bool_)
        else:
            got = col.to_numpy(zero_copy_only=False)
        if not got.flags.writeable:  # a view of Arrow's buffer
            got = got.copy()
        self.cache[name] = got
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(self.batch.schema.names)

    def __len__(self) -> int:
        return self.batch.num_columns


def _concat(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatch:
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=schema)
    if len(batches) == 1:
        return batches[0]
    return pa.concat_batches(batches)


class _TransactionalLogic(OperatorLogic):
    """State: ``engine`` (the tables), ``pending`` (input rows waiting for their punctuation, as
    Arrow batches), ``inflight`` (intervals handed to the engine, not completed; builder only)
    and ``unsent`` (output of completed intervals that leaves with the next call)."""

    def __init__(self, spec: TransactionalOperator, schema: pa.Schema, state: Any) -> None:
        self.spec = spec
        self.schema = schema
        self.input_schema = pa.schema([f for f in schema if f.name not in _OUT_NAMES])
        self.engine = TxnEngine(spec.tables, threads=spec.threads, scheduler=spec.scheduler,
                                udf=spec.udf, nested=dict(spec.nested) or None)
        self.pending: deque[pa.RecordBatch] = deque()
        self.pending_rows = 0
        #: intervals submitted: their rows (in the order the builder saw), batch, and the order
        #: that sorted them by time (None when they arrived in order)
        self.inflight: deque[tuple[pa.RecordBatch, OpBatch, np.ndarray | None]] = deque()
        self.unsent: list[pa.RecordBatch] = []
        self.checksum: str | None = None
        #: transactions committed and aborted since the stream began (kept in snapshots)
        self.committed = self.aborted = 0
        if state is not None:
            self._restore(state)

    def _restore(self, state: Any) -> None:
        try:
            self.engine.store.restore(state)
            last = state["last_punctuation"]
            self.engine.last_punctuation = None if last is None else int(last)
            pending = state["pending"]
            if not isinstance(pending, pa.RecordBatch):
                raise TypeError(f"pending rows are a {type(pending).__name__}, not an Arrow batch")
            pending = pending.select(self.input_schema.names)
            if pending.num_rows:
                self.pending, self.pending_rows = deque([pending]), pending.num_rows
            counts = state.get("counts", (0, 0))  # absent in older snapshots
            self.committed, self.aborted = int(counts[0]), int(counts[1])
            unsent = state.get("unsent")  # absent in snapshots of the per-event form
            if unsent is not None:
                if not isinstance(unsent, pa.RecordBatch):
                    raise TypeError(f"unsent rows are a {type(unsent).__name__}, not an Arrow batch")
                self.unsent = [unsent.select(self.schema.names)]
        except (KeyError, TypeError, ValueError, StateError, pa.ArrowException) as exc:
            raise StateError(f"{self.spec.name}: cannot restore state: {exc}") from exc

    # -- the per-event form ----------------------------------------------------------------------
    def _run_rows(self, rows: pa.RecordBatch) -> pa.RecordBatch:
        assert self.spec.fn is not None
        outcomes = run_events(self.engine, rows.to_pylist(), self.spec.fn)
        flags = [o.committed for o in outcomes]
        self.committed += sum(flags)
        self.aborted += len(flags) - sum(flags)
        committed = pa.array(flags, pa.bool_())
        reason = pa.array([o.reason for o in outcomes], pa.string())
        # object accesses' results are Python objects, a refused event's are NaN: null
        results = pa.array([[v if isinstance(v, float) and v == v else None for v in o.results]
                            for o in outcomes], pa.list_(pa.float64()))
        return pa.RecordBatch.from_arrays([*rows.columns, committed, reason, results],
                                          schema=self.schema)

    # -- the per-interval form -------------------------------------------------------------------
    def _built(self, columns: _Columns, lo: int, hi: int) -> tuple[OpBatch, NonDeterministic | None]:
        builder = self.spec.builder
        assert builder is not None
        try:
            built = builder(self.engine, columns, lo, hi)
        except SpliceError as exc:
            raise type(exc)(f"{self.spec.name}: builder {_callable_name(builder)} on a punctuation "
                            f"interval of {hi - lo} rows: {exc}") from exc
        except Exception as exc:
            raise PlanError(f"{self.spec.name}: builder {_callable_name(builder)} raised "
                            f"{type(exc).__name__}: {exc}") from exc
        batch, nd = built if isinstance(built, tuple) else (built, None)
        if not isinstance(batch, OpBatch) or batch.num_txns != hi - lo:
            got = (f"{batch.num_txns} transactions" if isinstance(batch, OpBatch)
                   else type(batch).__name__)
            raise PlanError(f"{self.spec.name}: builder {_callable_name(builder)} must return an "
                            f"OpBatch of one transaction per row ({hi - lo}), got {got}")
        return batch, nd

    def _output(self, rows: pa.RecordBatch, batch: OpBatch, res: BatchResult) -> pa.RecordBatch:
        """The interval's rows and outcomes, column by column: reasons by a ``take`` over their
        codes, results as a list array whose offsets count each transaction's operations."""
        n = rows.num_rows
        done = int(np.count_nonzero(res.committed))
        self.committed += done
        self.aborted += n - done
        offsets = txn_offsets(batch.op_txn, n)
        if res.reason.any():
            reason = _REASON_TEXT.take(pa.array(res.reason, pa.int8()))
            # a refused transaction's operations never ran: NaN, null in the output
            values = pa.array(res.op_result, pa.float64(), from_pandas=True)
        else:  # every transaction committed: n empty strings, every operation ran
            reason = pa.StringArray.from_buffers(n, pa.py_buffer(np.zeros(n + 1, np.int32)),
                                                 pa.py_buffer(b""))
            values = pa.array(res.op_result, pa.float64())
        results = pa.ListArray.from_buffers(_RESULTS, n, [None, pa.py_buffer(offsets)],
                                            children=[values])
        return pa.RecordBatch.from_arrays(
            [*rows.columns, pa.array(res.committed, pa.bool_()), reason, results],
            schema=self.schema)

    def _completed(self, results: list[BatchResult]) -> list[pa.RecordBatch]:
        out = []
        for res in results:
            rows, batch, order = self.inflight.popleft()
            done = self._output(rows, batch, res)
            if order is not None:  # back to arrival order
                arrival = np.empty_like(order)
                arrival[order] = np.arange(order.shape[0])
                done = done.take(pa.array(arrival))
            out.append(done)
        return out

    # -- intervals -------------------------------------------------------------------------------
    def _runs(self, force: bool) -> Iterator[pa.RecordBatch]:
        """Take the pending rows of every complete interval (and, when ``force``, the rest) in
        runs: a zero-copy slice of one arriving batch holding whole intervals, or one interval
        gathered from several batches (the only rows copied)."""
        p = self.spec.punctuation
        pending = self.pending
        while self.pending_rows >= p or (force and self.pending_rows):
            head = pending[0]
            if head.num_rows >= p:
                take = head.num_rows - head.num_rows % p
                pending[0] = head.slice(take)
                run = head.slice(0, take)
            else:
                need, parts = min(p, self.pending_rows), []
                while need:
                    head = pending[0]
                    part = head.slice(0, need)
                    pending[0] = head.slice(part.num_rows)
                    parts.append(part)
                    need -= part.num_rows
                    if not pending[0].num_rows:
                        pending.popleft()
                run = pa.concat_batches(parts) if len(parts) > 1 else parts[0]
            if pending and not pending[0].num_rows:
                pending.popleft()
            self.pending_rows -= run.num_rows
            yield run

    def _flush(self, force: bool) -> list[pa.RecordBatch]:
        """Run every complete interval of the pending rows (and, when ``force``, the rest);
        return the output that is ready."""
        out, self.unsent = self.unsent, []
        p = self.spec.punctuation
        for run in self._runs(force):
            if self.spec.builder is None:
                for lo in range(0, run.num_rows, p):
                    out.append(self._run_rows(run.slice(lo, p)))
                continue
            columns = _Columns(run, self.spec.name)
            times = (None if self.spec.time_column is None
                     else run.column(self.spec.time_column).to_numpy(zero_copy_only=False))
            for lo in range(0, run.num_rows, p):
                hi = min(lo + p, run.num_rows)
                rows, order = run.slice(lo, hi - lo), None
                if times is not None and bool(np.any(np.diff(times[lo:hi]) < 0)):
                    # out of order: this interval's rows sorted by time, on their own columns
                    order = np.argsort(times[lo:hi], kind="stable")
                    rows = rows.take(pa.array(order))
                    batch, nd = self._built(_Columns(rows, self.spec.name), 0, hi - lo)
                else:
                    batch, nd = self._built(columns, lo, hi)
                self.inflight.append((rows, batch, order))
                out += self._completed(self.engine.submit(batch, nd))
        if force:
            out += self._completed(self.engine.drain())
        return out

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        if batch.num_rows:
            self.pending.append(batch)
            self.pending_rows += batch.num_rows
        return self._flush(False)

    def on_watermark(self, stream_id: int, time: int) -> list[pa.RecordBatch]:
        return self._flush(True)

    def on_end(self) -> list[pa.RecordBatch]:
        out = self._flush(True)
        self.checksum = self.engine.store.checksum()
        self.engine.close()
        return out

    def snapshot(self) -> Any:
        """The tables, the last punctuation, the rows waiting for the next one (as a batch of
        the input's schema: whatever Python values its columns hold, a checkpoint holds), the
        commit and abort counts, and the output of intervals that ran but has not left yet (a
        batch of the output's schema: the interval executing now completes first, so the tables
        hold its effect and a restored logic emits its output once)."""
        self.unsent += self._completed(self.engine.drain())
        state = {**self.engine.store.snapshot(), "last_punctuation": self.engine.last_punctuation,
                 "pending": _concat(list(self.pending), self.input_schema),
                 "counts": (self.committed, self.aborted)}
        if self.unsent:
            state["unsent"] = _concat(self.unsent, self.schema)
        return state

    def state_bytes(self) -> int:
        return (self.engine.store.nbytes() + sum(b.nbytes for b in self.pending)
                + sum(b.nbytes for b in self.unsent))

    def metrics(self) -> dict[str, Any]:
        """Transactions ``committed`` and ``aborted`` since the stream began (across restores)
        and, once the input has ended, the tables' ``state_checksum``."""
        out: dict[str, Any] = {"committed": self.committed, "aborted": self.aborted}
        if self.checksum is not None:
            out["state_checksum"] = self.checksum
        return out
