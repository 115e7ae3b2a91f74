"""The output schema of a join that emits pairs: the left input's fields, then the right's.

A right column whose name the left (or an earlier right column) already has gets the suffix
``_right``, repeated until the name is free (polars' convention).

>>> import pyarrow as pa
>>> pair_output_schema(pa.schema([("k", pa.int64())]), pa.schema([("k", pa.int64())]))[1]
['k_right']
"""

from __future__ import annotations

from typing import Literal

import pyarrow as pa

__all__ = ["pair_output_schema", "JoinType"]

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
