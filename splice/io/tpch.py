"""TPC-H data, generated with tpchgen-cli into a cache directory and reused when present."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from splice.core.errors import PlanError
from splice.core.stream import normalize_schema

__all__ = ["tpch_dir", "generate", "load_table", "load_tables", "TABLES"]

TABLES = ("lineitem", "orders", "customer", "part", "partsupp", "supplier", "nation", "region")


def tpch_dir(sf: float, data_dir: str | Path | None = None) -> Path:
    """Cache directory for scale factor ``sf`` (``$SPLICE_DATA_DIR`` or ``~/.cache/splice``)."""
    root = Path(data_dir or os.environ.get("SPLICE_DATA_DIR") or Path.home() / ".cache" / "splice")
    return root / "tpch" / f"sf{sf:g}"


def _tpchgen() -> str:
    exe = Path(sys.executable).with_name("tpchgen-cli")
    if exe.exists():
        return str(exe)
    found = shutil.which("tpchgen-cli")
    if found is None:
        raise PlanError("tpchgen-cli is not installed (pip install tpchgen-cli)")
    return found


def generate(sf: float, tables: tuple[str, ...], data_dir: str | Path | None = None) -> Path:
    """Generate the missing ``tables`` as Parquet at scale factor ``sf``; return the directory."""
    if sf <= 0:
        raise PlanError(f"TPC-H scale factor must be > 0, got {sf}")
    unknown = [t for t in tables if t not in TABLES]
    if unknown:
        raise PlanError(f"unknown TPC-H table(s): {', '.join(unknown)}")
    out = tpch_dir(sf, data_dir)
    missing = [t for t in tables if not (out / f"{t}.parquet").exists()]
    if missing:
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [_tpchgen(), "parquet", "-s", f"{sf:g}", f"--tables={','.join(missing)}",
             f"--output-dir={tmp}"],
            check=True, capture_output=True,
        )
        out.mkdir(parents=True, exist_ok=True)
        for t in missing:
            os.replace(tmp / f"{t}.parquet", out / f"{t}.parquet")
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def load_table(name: str, sf: float, data_dir: str | Path | None = None) -> pa.Table:
    """One TPC-H table as an Arrow table, generating it first when not cached.

    ``string_view`` columns (as tpchgen-cli writes them) are cast to ``string``.
    """
    path = generate(sf, (name,), data_dir) / f"{name}.parquet"
    table = pq.read_table(path)
    target = normalize_schema(table.schema)
    return table.cast(target).replace_schema_metadata(None).combine_chunks()


def load_tables(names: tuple[str, ...], sf: float, data_dir: str | Path | None = None) -> dict[str, pa.Table]:
    generate(sf, names, data_dir)
    return {n: load_table(n, sf, data_dir) for n in names}
