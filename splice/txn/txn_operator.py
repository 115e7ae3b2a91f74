"""A transactional operator for the data path: events in, events with their outcome out.

``TransactionalOperator(tables, fn, punctuation)`` keeps shared state in a :class:`TxnEngine`.
Each input row is an event; ``fn(row) -> [Access, ...]`` declares its transaction (see
:mod:`splice.txn.api`). Every ``punctuation`` rows, and at each watermark and at END, the pending
events form one batch (a punctuation interval) that runs with the engine's scheduler. Output rows
are the input rows in arrival order plus ``committed`` (bool), ``abort_reason`` (string, empty when
committed) and ``results`` (the value each access read or wrote; null for object accesses), i.e.
the post-processing input. Snapshots hold the tables (object columns as JSON, see
:meth:`~splice.txn.state_tables.StateStore.snapshot`) and the pending rows as an Arrow batch.

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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from splice.core.errors import PlanError, SchemaError, StateError
from splice.core.operator import InputSchemas, OperatorLogic, OperatorSpec
from splice.txn.api import Access, add, run_events
from splice.txn.state_tables import StateTable
from splice.txn.txn_engine import TxnEngine

__all__ = ["TransactionalOperator"]

_OUT_FIELDS = [
    pa.field("committed", pa.bool_()),
    pa.field("abort_reason", pa.string()),
    pa.field("results", pa.list_(pa.float64())),
]
_OUT_NAMES = frozenset(f.name for f in _OUT_FIELDS)


def _example_debit(row: dict[str, Any]) -> list[Access]:
    return [add("acct", row["k"], -row["amount"], require_ge=row["amount"])]


@dataclass(frozen=True)
class TransactionalOperator(OperatorSpec):
    """Spec: the shared tables, the per-event function, rows per punctuation, the scheduler."""

    tables: tuple[StateTable, ...]
    fn: Callable[[dict[str, Any]], Sequence[Access]]
    punctuation: int = 10_240
    threads: int = 1
    scheduler: str = "auto"
    name: str = "transactions"
    udf: Any = None  # the engine's numba user function for ``update`` accesses

    def __post_init__(self) -> None:
        if self.punctuation < 1:
            raise PlanError(f"{self.name}: punctuation must be >= 1, got {self.punctuation}")
        if not self.tables:
            raise PlanError(f"{self.name}: declare at least one state table")

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        if len(inputs) != 1:
            raise SchemaError(f"{self.name}: expects exactly one input stream, got {len(inputs)}")
        schema = next(iter(inputs.values()))
        clash = {f.name for f in _OUT_FIELDS} & set(schema.names)
        if clash:
            raise SchemaError(f"{self.name}: input already has columns {sorted(clash)}")
        return pa.schema(list(schema) + _OUT_FIELDS)

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        return _TransactionalLogic(self, self.output_schema(inputs), state)


class _TransactionalLogic(OperatorLogic):
    def __init__(self, spec: TransactionalOperator, schema: pa.Schema, state: Any) -> None:
        self.spec = spec
        self.schema = schema
        self.engine = TxnEngine(spec.tables, threads=spec.threads, scheduler=spec.scheduler,
                                udf=spec.udf)
        self.pending: list[dict[str, Any]] = []
        if state is not None:
            self._restore(state)

    def _input_schema(self) -> pa.Schema:
        return pa.schema([f for f in self.schema if f.name not in _OUT_NAMES])

    def _restore(self, state: Any) -> None:
        try:
            self.engine.store.restore(state)
            last = state["last_punctuation"]
            self.engine.last_punctuation = None if last is None else int(last)
            pending = state["pending"]
            if not isinstance(pending, pa.RecordBatch):
                raise TypeError(f"pending rows are a {type(pending).__name__}, not an Arrow batch")
            self.pending = pending.select(self._input_schema().names).to_pylist()
        except (KeyError, TypeError, ValueError, StateError, pa.ArrowException) as exc:
            raise StateError(f"{self.spec.name}: cannot restore state: {exc}") from exc

    def _run(self, rows: list[dict[str, Any]]) -> pa.RecordBatch:
        outcomes = run_events(self.engine, rows, self.spec.fn)
        cols = {f.name: [r.get(f.name) for r in rows] for f in self.schema
                if f.name not in ("committed", "abort_reason", "results")}
        cols["committed"] = [o.committed for o in outcomes]
        cols["abort_reason"] = [o.reason for o in outcomes]
        # object accesses' results are Python objects: null in the float list
        cols["results"] = [[v if isinstance(v, float) else None for v in o.results]
                           for o in outcomes]
        return pa.RecordBatch.from_pydict(cols, schema=self.schema)

    def _flush(self, force: bool) -> list[pa.RecordBatch]:
        out = []
        p = self.spec.punctuation
        while len(self.pending) >= p or (force and self.pending):
            rows, self.pending = self.pending[:p], self.pending[p:]
            out.append(self._run(rows))
        return out

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        self.pending.extend(batch.to_pylist())
        return self._flush(False)

    def on_watermark(self, stream_id: int, time: int) -> list[pa.RecordBatch]:
        return self._flush(True)

    def on_end(self) -> list[pa.RecordBatch]:
        out = self._flush(True)
        self.engine.close()
        return out

    def snapshot(self) -> Any:
        """The tables, the last punctuation and the rows waiting for the next one (as a batch
        of the input's schema: whatever Python values its columns hold, a checkpoint holds)."""
        pending = pa.RecordBatch.from_pylist(self.pending, schema=self._input_schema())
        return {**self.engine.store.snapshot(), "last_punctuation": self.engine.last_punctuation,
                "pending": pending}

    def state_bytes(self) -> int:
        return self.engine.store.nbytes()
