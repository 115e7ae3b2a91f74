"""Stateless operators: selection, projection with derived columns, and round-robin reindexing.

Each output row derives from one input row of the same batch, so these operators keep no state
and may be replicated across processing units (the synchronizer restores order after them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from splice.core.errors import PlanError, SchemaError
from splice.core.operator import InputSchemas, OperatorLogic, OperatorSpec
from splice.ops.expressions import as_expression, evaluate, expression_columns, result_types

__all__ = ["Select", "Project"]


def _single_input(inputs: InputSchemas, name: str) -> pa.Schema:
    if len(inputs) != 1:
        raise PlanError(f"{name} takes exactly one input stream, got {len(inputs)}")
    return next(iter(inputs.values()))


@dataclass(frozen=True)
class Select(OperatorSpec):
    """σ_p: keep the rows for which ``predicate`` is true (null counts as false).

    >>> import pyarrow as pa, pyarrow.compute as pc
    >>> from splice.testing import OperatorHarness
    >>> h = OperatorHarness(Select(pc.field("x") > 1), {2: pa.schema([("x", pa.int64())])})
    >>> h.push(2, pa.record_batch({"x": [1, 2, None, 3]})).to_pydict()
    {'x': [2, 3]}
    """

    predicate: pc.Expression
    name: str = "select"

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        schema = _single_input(inputs, self.name)
        types = result_types(schema, [self.predicate], ["_p"], f"{self.name} {self.predicate}")
        if not pa.types.is_boolean(types.field("_p").type):
            raise SchemaError(
                f"{self.name}: predicate {self.predicate} is of type {types.field('_p').type}, "
                "expected boolean"
            )
        return schema

    def columns_used(self, inputs: InputSchemas) -> Mapping[int, set[str]]:
        return {sid: expression_columns(self.predicate, s.names) for sid, s in inputs.items()}

    @property
    def stateless(self) -> bool:
        return True

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        self.output_schema(inputs)
        return _SelectLogic(self.predicate)


class _SelectLogic(OperatorLogic):
    def __init__(self, predicate: pc.Expression):
        self.predicate = predicate

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        mask = evaluate(batch, [self.predicate], ["_p"]).column(0)
        out = batch.filter(mask, null_selection_behavior="drop")
        return [out] if out.num_rows else []


@dataclass(frozen=True)
class Project(OperatorSpec):
    """π: output one column per entry of ``columns`` (name -> column name or expression).

    Derived columns are expressions: ``Project({"k": "k", "v2": pc.field("v") * 2})``.
    """

    columns: Mapping[str, pc.Expression | str] = field(default_factory=dict)
    name: str = "project"

    def __post_init__(self) -> None:
        if not self.columns:
            raise PlanError(f"{self.name}: no output columns given")
        object.__setattr__(self, "columns", dict(self.columns))

    def _exprs(self) -> list[pc.Expression]:
        return [as_expression(v) for v in self.columns.values()]

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        schema = _single_input(inputs, self.name)
        return result_types(schema, self._exprs(), list(self.columns), self.name)

    def columns_used(self, inputs: InputSchemas) -> Mapping[int, set[str]]:
        out: dict[int, set[str]] = {}
        for sid, s in inputs.items():
            used: set[str] = set()
            for e in self._exprs():
                used |= expression_columns(e, s.names)
            out[sid] = used
        return out

    @property
    def stateless(self) -> bool:
        return True

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        self.output_schema(inputs)
        plain = all(isinstance(v, str) for v in self.columns.values())
        return _ProjectLogic(self._exprs(), list(self.columns), list(self.columns.values()) if plain else None)


class _ProjectLogic(OperatorLogic):
    def __init__(self, exprs: list[pc.Expression], names: list[str], plain: list[Any] | None):
        self.exprs = exprs
        self.names = names
        self.plain = plain

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        if self.plain is not None:  # renames and reorders only: no kernel call
            cols = [batch.column(c) for c in self.plain]
            return [pa.RecordBatch.from_arrays(cols, names=self.names)]
        return [evaluate(batch, self.exprs, self.names)]
