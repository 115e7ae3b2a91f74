"""Read and write the files the command line takes: Parquet and CSV, view types normalized."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from splice.core.errors import PlanError
from splice.core.stream import normalize_schema

__all__ = ["read_table", "write_table"]


def read_table(path: str | Path) -> pa.Table:
    """Read a ``.parquet`` or ``.csv`` file into one table with plain (non-view) types."""
    p = Path(path)
    if not p.exists():
        raise PlanError(f"input file {str(p)!r} does not exist")
    suffix = p.suffix.lower()
    if suffix in (".parquet", ".pq"):
        table = pq.read_table(p)
    elif suffix == ".csv":
        table = pacsv.read_csv(p)
    else:
        raise PlanError(f"input file {str(p)!r}: unknown format {suffix!r} (use .parquet or .csv)")
    target = normalize_schema(table.schema)
    if target != table.schema:
        table = table.cast(target)
    return table.replace_schema_metadata(None)


def write_table(table: pa.Table, path: str | Path) -> None:
    """Write ``table`` as Parquet (``.parquet``) or CSV (``.csv``), by the path's suffix."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.suffix.lower() == ".csv":
        pacsv.write_csv(table, p)
    else:
        pq.write_table(table, p)
