"""Updating aggregation: ``GROUP BY keys`` over an unbounded stream, as a changelog.

Semantics (Flink's retract stream of a non-windowed aggregate). The operator keeps each group's
aggregates as :class:`~splice.ops.aggregate.GroupBy` computes them (exact decimals, nulls skipped,
null keys a group of their own). It emits on every watermark, and at the end of its input, the
groups that changed since its last emission: for a group emitted before, first its old row with
``op = '-'``, then its new row with ``op = '+'``; a new group only the ``'+'`` row. Rows carry
``op`` first, then the keys, then the aggregates. Replaying the changelog (add each ``'+'``,
remove each ``'-'``) gives, at any emission, the answer over the rows seen so far; after the last
emission, the answer over all of them. No row is ever late: a watermark only says when to emit.

State: the groups' aggregate state, which groups changed since the last emission, and the rows
last emitted (:meth:`snapshot`). An emission reads every group's result once (its cost grows with
the groups, not with the rows since the last one) and sends only the changed ones.

>>> import pyarrow as pa
>>> from splice.ops.aggregate import Agg
>>> from splice.testing import OperatorHarness
>>> h = OperatorHarness(UpdatingAggregate(["k"], [Agg("n", "count")]), {2: pa.schema([("k", pa.int64())])})
>>> _ = h.push(2, pa.record_batch({"k": [1, 1, 2]}))
>>> h.watermark(2, 10).to_pydict()
{'op': ['+', '+'], 'k': [1, 2], 'n': [2, 1]}
>>> _ = h.push(2, pa.record_batch({"k": [2]}))
>>> h.end().to_pydict()
{'op': ['-', '+'], 'k': [2, 2], 'n': [1, 2]}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from splice.core.errors import PlanError, SchemaError, StateError
from splice.core.operator import InputSchemas, OperatorLogic, OperatorSpec
from splice.core.row_checks import RowCheck
from splice.ops.aggregate import (
    Agg,
    AggPlan,
    GroupAggregator,
    decimal_checks,
    filtered_plan,
    freeze_keys_and_aggregates,
    grouping_columns,
    skip_mask,
)

__all__ = ["UpdatingAggregate", "OP"]

#: the changelog column: ``'+'`` adds a row to the answer, ``'-'`` removes one
OP = "op"


def _single_input(inputs: InputSchemas, name: str) -> tuple[int, pa.Schema]:
    if len(inputs) != 1:
        raise PlanError(f"{name}: takes one input, got {len(inputs)}")
    (sid, schema), = inputs.items()
    return sid, schema


@dataclass(frozen=True)
class UpdatingAggregate(OperatorSpec):
    """``SELECT keys..., aggregates... [WHERE where] GROUP BY keys`` as a changelog (see the
    module docstring); ``keys=[]`` is one global group."""

    keys: Sequence[str]
    aggregates: Sequence[Agg]
    where: pc.Expression | None = None
    name: str = "updating_aggregate"

    def __post_init__(self) -> None:
        freeze_keys_and_aggregates(self)
        if not self.aggregates and not self.keys:
            raise PlanError(f"{self.name}: needs at least one key or aggregate")
        if OP in self.keys or any(a.name == OP for a in self.aggregates):
            raise PlanError(f"{self.name}: {OP!r} names the changelog column; rename the output")

    def plan(self, inputs: InputSchemas) -> AggPlan:
        return filtered_plan(inputs, self.keys, self.aggregates, self.where, self.name)

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        return pa.schema([pa.field(OP, pa.string(), False), *self.plan(inputs).output_fields()])

    def columns_used(self, inputs: InputSchemas) -> Mapping[int, set[str]]:
        return grouping_columns(self, inputs)

    def input_checks(self, inputs: InputSchemas) -> Mapping[int, Sequence[RowCheck]]:
        sid, schema = _single_input(inputs, self.name)
        return {sid: decimal_checks(schema, self.plan(inputs).columns())}

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        return _UpdatingLogic(self, self.plan(inputs), state)


class _UpdatingLogic(OperatorLogic):
    def __init__(self, spec: UpdatingAggregate, plan: AggPlan, state: Any):
        self.spec = spec
        self.schema = pa.schema([pa.field(OP, pa.string(), False), *plan.output_fields()])
        self.result_schema = pa.schema(plan.output_fields())
        try:
            self.agg = GroupAggregator(plan, None if state is None else state["groups"])
            self.changed = (np.zeros(0, bool) if state is None
                            else np.asarray(state["changed"], dtype=bool).copy())
            self.last: pa.Table | None = None if state is None else state["last"]
        except (KeyError, TypeError, IndexError) as exc:
            raise StateError(f"{spec.name}: cannot restore state: {exc}") from exc

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        try:
            skip = skip_mask(batch, self.spec.where) if self.spec.where is not None else None
            gids = self.agg.update(batch, skip)
        except SchemaError as exc:
            raise SchemaError(f"{self.spec.name} (stream {stream_id}): {exc}") from exc
        n = self.agg.n_groups
        if self.changed.shape[0] < n:
            grown = np.zeros(max(n, 2 * self.changed.shape[0]), bool)
            grown[: self.changed.shape[0]] = self.changed
            self.changed = grown
        touched = gids[gids >= 0] if skip is not None else gids
        self.changed[touched] = True
        return []

    def _emit(self) -> list[pa.RecordBatch]:
        n = self.agg.n_groups
        which = np.flatnonzero(self.changed[:n])
        if which.size == 0:
            return []
        now = pa.Table.from_arrays(self.agg.result_columns(), schema=self.result_schema)
        take = pa.array(which)
        parts = []
        if self.last is not None:
            old = which[which < self.last.num_rows]
            if old.size:
                parts.append(self._tagged(self.last.take(pa.array(old)), "-"))
        parts.append(self._tagged(now.take(take), "+"))
        # a copy: the result columns may view the aggregate state, which later batches change
        self.last = now.take(pa.array(np.arange(now.num_rows)))
        self.changed[:n] = False
        out = pa.concat_tables(parts).combine_chunks()
        return out.to_batches()

    def _tagged(self, rows: pa.Table, op: str) -> pa.Table:
        ops = pa.repeat(pa.scalar(op, pa.string()), rows.num_rows)
        return pa.Table.from_arrays([ops, *rows.columns], schema=self.schema)

    def on_watermark(self, stream_id: int, time: int) -> list[pa.RecordBatch]:
        return self._emit()

    def on_end(self) -> list[pa.RecordBatch]:
        return self._emit()

    def snapshot(self) -> Any:
        return {"groups": self.agg.snapshot(), "changed": self.changed[: self.agg.n_groups].copy(),
                "last": self.last}

    def state_bytes(self) -> int:
        return self.agg.nbytes() + (self.last.nbytes if self.last is not None else 0)
