"""Evaluate Arrow compute expressions over one batch, and find the columns they read.

Expressions are ``pyarrow.compute.Expression`` objects (``pc.field("x") > 5``): picklable, typed,
and evaluated by Arrow's vectorized kernels through an Acero project node.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.acero as acero
import pyarrow.compute as pc

from splice.core.errors import SchemaError

__all__ = ["evaluate", "expression_columns", "as_expression", "result_types"]

_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def as_expression(value: pc.Expression | str) -> pc.Expression:
    """A column name becomes ``pc.field(name)``; an expression is returned as it is."""
    if isinstance(value, str):
        return pc.field(value)
    if isinstance(value, pc.Expression):
        return value
    raise SchemaError(f"expected a column name or a pyarrow.compute.Expression, got {value!r}")


def expression_columns(expr: pc.Expression, names: Sequence[str]) -> set[str]:
    """The columns of ``names`` that ``expr`` may read (a safe over-approximation)."""
    text = str(expr)
    tokens = set(_FIELD.findall(text))
    return {n for n in names if n in tokens or f'"{n}"' in text}


def evaluate(
    batch: pa.RecordBatch, exprs: Sequence[pc.Expression], names: Sequence[str]
) -> pa.RecordBatch:
    """A batch with one column per expression, computed over ``batch``."""
    source = acero.Declaration(
        "table_source", acero.TableSourceNodeOptions(pa.Table.from_batches([batch]))
    )
    project = acero.Declaration("project", acero.ProjectNodeOptions(list(exprs), list(names)))
    table = acero.Declaration.from_sequence([source, project]).to_table(use_threads=False)
    if table.num_rows == 0:
        return pa.RecordBatch.from_pylist([], schema=table.schema)
    return table.combine_chunks().to_batches()[0]


def result_types(
    schema: pa.Schema, exprs: Sequence[pc.Expression], names: Sequence[str], where: str
) -> pa.Schema:
    """The schema ``exprs`` produce over ``schema``; a missing column raises naming it."""
    try:
        empty = pa.RecordBatch.from_pylist([], schema=schema)
        return evaluate(empty, exprs, names).schema
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        msg = str(exc).splitlines()[0]
        m = re.search(r"FieldRef\.Name\((\w+)\)", msg)
        if m:
            raise SchemaError(
                f"{where}: column {m.group(1)!r} does not exist (columns: {', '.join(schema.names)})"
            ) from exc
        raise SchemaError(f"{where}: {msg}") from exc
