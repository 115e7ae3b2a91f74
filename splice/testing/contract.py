"""The operator contract suite: checks every operator must pass, whatever it computes.

``check_operator(spec, inputs, records)`` runs the records straight through, then again with
(1) a snapshot/restore (through pickle) before every record position, (2) an empty batch before
each data batch, (3) input columns reordered, and (4) the spec itself pickled. Each variant must
emit the same rows as the straight run (compared as ordered lists when ``ordered``, else as
multisets).
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence

import pyarrow as pa

from splice.core.operator import OperatorSpec
from splice.core.records import Data
from splice.testing.harness import Step, run_operator

__all__ = ["check_operator", "rows_of", "assert_same_rows"]


def rows_of(table: pa.Table) -> list[tuple]:
    cols = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return list(zip(*cols, strict=True)) if cols else [()] * table.num_rows


def _key(row: tuple) -> tuple:
    return tuple((v is None, repr(type(v)), v if v is not None else 0) for v in row)


def assert_same_rows(got: pa.Table, want: pa.Table, ordered: bool, what: str = "") -> None:
    """Assert equal column names and rows (ordered, or as multisets)."""
    assert got.schema.names == want.schema.names, f"{what}: columns {got.schema.names} != {want.schema.names}"
    g, w = rows_of(got), rows_of(want)
    if not ordered:
        g, w = sorted(g, key=_key), sorted(w, key=_key)
    assert g == w, f"{what}: rows differ\n got={g[:20]}\nwant={w[:20]}"


def _reorder(schema: pa.Schema) -> list[str]:
    return list(reversed(schema.names))


def check_operator(
    spec: OperatorSpec,
    inputs: Mapping[int, pa.Schema],
    records: Sequence[Step],
    ordered: bool = True,
    restore_points: Sequence[int] | None = None,
) -> pa.Table:
    """Run the contract suite; return the straight run's output."""
    want, _ = run_operator(spec, inputs, records)

    spec2 = pickle.loads(pickle.dumps(spec))
    got, _ = run_operator(spec2, inputs, records)
    assert_same_rows(got, want, ordered, f"{spec.name}: pickled spec")

    points = range(len(records) + 1) if restore_points is None else restore_points
    for p in points:
        got, _ = run_operator(spec, inputs, records, restore_at=p)
        assert_same_rows(got, want, ordered, f"{spec.name}: snapshot/restore before record {p}")

    with_empty: list[Step] = []
    for r in records:
        if isinstance(r, Data):
            with_empty.append(Data(r.stream_id, r.batch.slice(0, 0)))
        with_empty.append(r)
    got, _ = run_operator(spec, inputs, with_empty)
    assert_same_rows(got, want, ordered, f"{spec.name}: empty batches")

    reordered: list[Step] = [
        Data(r.stream_id, r.batch.select(_reorder(r.batch.schema))) if isinstance(r, Data) else r
        for r in records
    ]
    rinputs = {sid: pa.schema([s.field(n) for n in _reorder(s)]) for sid, s in inputs.items()}
    got, _ = run_operator(spec, rinputs, reordered)
    assert_same_rows(got.select(want.schema.names), want, ordered, f"{spec.name}: reordered columns")
    return want
