"""OrderBy and TopK: sort a stream by keys, ascending or descending, nulls last.

``OrderBy(keys)`` is ``ORDER BY k1 [ASC|DESC], ...``: it buffers every batch and emits the sorted
rows at END (blocking). The sort is stable, so rows with equal keys keep their arrival order,
which makes the output deterministic for a given arrival order. ``TopK(keys, k)`` is ``ORDER BY
... LIMIT k``: the same order, but its state never holds more than ``k`` rows — each batch is
merged with the current top k and cut back to k (ties broken by arrival order, earlier first).

Keys are column names, or ``(name, "ascending" | "descending")`` pairs; ``"asc"``/``"desc"``
are accepted too. Nulls sort after every value in both directions (SQL's ``NULLS LAST``).

>>> import pyarrow as pa
>>> from splice.testing import OperatorHarness
>>> h = OperatorHarness(TopK([("x", "desc")], k=2), {2: pa.schema([("x", pa.int64())])})
>>> _ = h.push(2, pa.record_batch({"x": [3, None, 7, 5]}))
>>> h.end().to_pydict()
{'x': [7, 5]}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import pyarrow as pa
import pyarrow.compute as pc

from splice.core.errors import PlanError, SchemaError, StateError
from splice.core.operator import InputSchemas, OperatorLogic, OperatorSpec

__all__ = ["OrderBy", "TopK", "SortOrder"]

SortOrder = Literal["ascending", "descending"]
_ALIASES = {"asc": "ascending", "desc": "descending", "ascending": "ascending", "descending": "descending"}


def _normalize_keys(keys: Any, name: str) -> tuple[tuple[str, SortOrder], ...]:
    if isinstance(keys, str):
        keys = [keys]
    out: list[tuple[str, SortOrder]] = []
    for k in keys:
        if isinstance(k, str):
            out.append((k, "ascending"))
            continue
        try:
            col, order = k
        except (TypeError, ValueError) as exc:
            raise PlanError(f"{name}: sort key {k!r} is not a name or (name, order) pair") from exc
        norm = _ALIASES.get(str(order).lower())
        if norm is None:
            raise PlanError(
                f"{name}: sort order {order!r} of {col!r} is not one of {', '.join(get_args(SortOrder))}"
            )
        out.append((col, norm))  # type: ignore[arg-type]
    if not out:
        raise PlanError(f"{name}: needs at least one sort key")
    return tuple(out)


def _single_input(inputs: InputSchemas, name: str) -> tuple[int, pa.Schema]:
    if len(inputs) != 1:
        raise PlanError(f"{name} takes exactly one input stream, got {len(inputs)}")
    return next(iter(inputs.items()))


def _check_keys(schema: pa.Schema, keys: Sequence[tuple[str, str]], name: str) -> None:
    for col, _ in keys:
        if col not in schema.names:
            raise SchemaError(
                f"{name}: sort key {col!r} does not exist (columns: {', '.join(schema.names)})"
            )
        t = schema.field(col).type
        if pa.types.is_nested(t) or pa.types.is_null(t):
            raise SchemaError(f"{name}: cannot sort by {col!r} of type {t}")


def sort_table(table: pa.Table, keys: Sequence[tuple[str, str]]) -> pa.Table:
    """``table`` stably sorted by ``keys``, nulls last."""
    if table.num_rows <= 1:
        return table
    idx = pc.sort_indices(table, sort_keys=[(k, order, "at_end") for k, order in keys])
    return table.take(idx)


@dataclass(frozen=True)
class OrderBy(OperatorSpec):
    """``ORDER BY keys`` over all input, emitted at END; stable, nulls last (see module doc)."""

    keys: Any
    name: str = "order_by"

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", _normalize_keys(self.keys, self.name))

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        _, schema = _single_input(inputs, self.name)
        _check_keys(schema, self.keys, self.name)
        return schema

    @property
    def blocking(self) -> bool:
        return True

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        schema = self.output_schema(inputs)
        return _OrderByLogic(self, schema, state)


class _OrderByLogic(OperatorLogic):
    """State ``BUFFER``: every batch received so far, in arrival order."""

    def __init__(self, spec: OrderBy, schema: pa.Schema, state: Any):
        self.spec = spec
        self.schema = schema
        self.buffer: list[pa.RecordBatch] = []
        self.rows = 0
        self.nbytes = 0
        if state is not None:
            try:
                for b in state["buffer"]:
                    self._keep(b)
            except (KeyError, TypeError) as exc:
                raise StateError(f"{spec.name}: cannot restore state: {exc}") from exc

    def _keep(self, batch: pa.RecordBatch) -> None:
        if not batch.schema.equals(self.schema, check_metadata=False):
            try:
                batch = batch.select(self.schema.names)
            except KeyError as exc:
                raise SchemaError(f"{self.spec.name}: batch lacks a column: {exc}") from exc
        self.buffer.append(batch)
        self.rows += batch.num_rows
        self.nbytes += batch.nbytes

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        if batch.num_rows:
            self._keep(batch)
        return []

    def on_end(self) -> list[pa.RecordBatch]:
        if not self.buffer:
            return []
        table = pa.Table.from_batches(self.buffer, schema=self.schema)
        self.buffer, self.rows, self.nbytes = [], 0, 0
        out = sort_table(table, self.spec.keys).combine_chunks()
        return [b for b in out.to_batches() if b.num_rows]

    def snapshot(self) -> Any:
        return {"buffer": tuple(self.buffer)}

    def state_bytes(self) -> int:
        return self.nbytes


@dataclass(frozen=True)
class TopK(OperatorSpec):
    """``ORDER BY keys LIMIT k``, keeping at most ``k`` rows in state; emitted at END."""

    keys: Any
    k: int
    name: str = "top_k"

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", _normalize_keys(self.keys, self.name))
        if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 0:
            raise PlanError(f"{self.name}: k must be an int >= 0, got {self.k!r}")

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        _, schema = _single_input(inputs, self.name)
        _check_keys(schema, self.keys, self.name)
        return schema

    @property
    def blocking(self) -> bool:
        return True

    def columns_used(self, inputs: InputSchemas) -> Mapping[int, set[str]]:
        # the other columns pass through: the composer may re-attach them instead
        sid, _ = _single_input(inputs, self.name)
        return {sid: {k for k, _ in self.keys}}

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        return _TopKLogic(self, self.output_schema(inputs), state)


class _TopKLogic(OperatorLogic):
    """State ``TOP``: the best ``k`` rows so far, sorted, ties in arrival order."""

    def __init__(self, spec: TopK, schema: pa.Schema, state: Any):
        self.spec = spec
        self.schema = schema
        self.top = schema.empty_table()
        if state is not None:
            try:
                self.top = pa.Table.from_batches(list(state["top"]), schema=schema)
            except (KeyError, TypeError) as exc:
                raise StateError(f"{spec.name}: cannot restore state: {exc}") from exc

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        if batch.num_rows == 0 or self.spec.k == 0:
            return []
        if not batch.schema.equals(self.schema, check_metadata=False):
            # the columns in the declared order, under the declared fields (a row-id column may
            # arrive nullable where the view declares it not null)
            batch = pa.RecordBatch.from_arrays(batch.select(self.schema.names).columns,
                                               schema=self.schema)
        incoming = pa.Table.from_batches([batch], schema=self.schema)
        merged = pa.concat_tables([self.top, incoming])
        self.top = sort_table(merged, self.spec.keys).slice(0, self.spec.k).combine_chunks()
        return []

    def on_end(self) -> list[pa.RecordBatch]:
        out = [b for b in self.top.to_batches() if b.num_rows]
        self.top = self.schema.empty_table()
        return out

    def snapshot(self) -> Any:
        return {"top": tuple(self.top.to_batches())}

    def retained_min(self, column: str) -> int | None:
        if column not in self.top.schema.names or self.top.num_rows == 0:
            return None
        least = pc.min(self.top.column(column)).as_py()
        return None if least is None else int(least)

    def state_bytes(self) -> int:
        return int(self.top.nbytes)
