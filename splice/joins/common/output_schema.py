"""The output schema of a join that emits pairs: the left input's fields, then the right's.

A right column whose name the left (or an earlier right column) already has gets the suffix
``_right``, repeated until the name is free (polars' convention).

>>> import pyarrow as pa
>>> pair_output_schema(pa.schema([("k", pa.int64())]), pa.schema([("k", pa.int64())]))[1]
['k_right']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, get_args

import pyarrow as pa

from splice.core.errors import PlanError

__all__ = ["pair_output_schema", "JoinType", "check_pair_join"]

#: which unmatched rows a join keeps: none, the left's, the right's or both (null-padded)
JoinType = Literal["inner", "left", "right", "full"]


def pair_output_schema(left: pa.Schema, right: pa.Schema) -> tuple[pa.Schema, list[str]]:
    """(the output schema, the right columns' names in it)."""
    taken = set(left.names)
    names = []
    for f in right:
        n = f.name
        while n in taken:
            n = n + "_right"
        taken.add(n)
        names.append(n)
    fields = list(left) + [pa.field(n, f.type, f.nullable) for n, f in zip(names, right, strict=True)]
    return pa.schema(fields), names


def check_pair_join(spec: Any) -> None:
    """Normalize and check a two-input join spec in place: ``on``/``right_on`` become tuples
    (``right_on`` defaults to ``on``) of the same non-zero length, ``how`` is a join type, and
    ``left`` and ``right`` are different streams."""
    def columns(value: str | Sequence[str]) -> tuple[str, ...]:
        return (value,) if isinstance(value, str) else tuple(value)

    on = columns(spec.on)
    right_on = on if spec.right_on is None else columns(spec.right_on)
    object.__setattr__(spec, "on", on)
    object.__setattr__(spec, "right_on", right_on)
    if spec.how not in get_args(JoinType):
        raise PlanError(f"{spec.name}: how={spec.how!r}, expected one of {get_args(JoinType)}")
    if spec.left == spec.right:
        raise PlanError(f"{spec.name}: left and right must be different streams, both are {spec.left}")
    if not on or len(on) != len(right_on):
        raise PlanError(f"{spec.name}: need the same non-zero number of key columns per side, "
                        f"got {list(on)} and {list(right_on)}")
