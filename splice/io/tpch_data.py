"""TPC-H data, generated with tpchgen-cli into a cache directory and reused when present."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from splice.core.errors import PlanError
from splice.core.stream import normalize_schema

__all__ = ["tpch_dir", "generate", "load_table", "load_tables", "load_tables_checked", "TABLES", "SCHEMAS",
           "EDGE_COLUMNS"]

TABLES = ("lineitem", "orders", "customer", "part", "partsupp", "supplier", "nation", "region")

_DEC = pa.decimal128(15, 2)
#: the streamed tables' columns as tpchgen-cli writes them (view types normalized): what a file
#: in ``--data-dir`` must conform to when inputs are checked (``--bad-input``)
SCHEMAS: dict[str, pa.Schema] = {
    "lineitem": pa.schema([
        ("l_orderkey", pa.int64()), ("l_partkey", pa.int64()), ("l_suppkey", pa.int64()),
        ("l_linenumber", pa.int32()), ("l_quantity", _DEC), ("l_extendedprice", _DEC),
        ("l_discount", _DEC), ("l_tax", _DEC), ("l_returnflag", pa.string()), ("l_linestatus", pa.string()),
        ("l_shipdate", pa.date32()), ("l_commitdate", pa.date32()), ("l_receiptdate", pa.date32()),
        ("l_shipinstruct", pa.string()), ("l_shipmode", pa.string()), ("l_comment", pa.string())]),
    "orders": pa.schema([
        ("o_orderkey", pa.int64()), ("o_custkey", pa.int64()), ("o_orderstatus", pa.string()),
        ("o_totalprice", _DEC), ("o_orderdate", pa.date32()), ("o_orderpriority", pa.string()),
        ("o_clerk", pa.string()), ("o_shippriority", pa.int32()), ("o_comment", pa.string())]),
    "customer": pa.schema([
        ("c_custkey", pa.int64()), ("c_name", pa.string()), ("c_address", pa.string()),
        ("c_nationkey", pa.int64()), ("c_phone", pa.string()), ("c_acctbal", _DEC),
        ("c_mktsegment", pa.string()), ("c_comment", pa.string())]),
}
#: per streamed table: the columns the queries key, group or join on (must not be null), and
#: its event-time column
EDGE_COLUMNS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "lineitem": (("l_orderkey", "l_linenumber", "l_returnflag", "l_linestatus"), "l_shipdate"),
    "orders": (("o_orderkey", "o_custkey"), "o_orderdate"),
    "customer": (("c_custkey", "c_mktsegment"), None),
}


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


def load_tables_checked(
    names: tuple[str, ...],
    sf: float,
    data_dir: str | Path | None = None,
    policy: str = "fail",
    dead_letter: str | Path | None = None,
    dedupe_on: tuple[str, ...] = (),
    max_row_bytes: int | None = None,
    state_backend: str = "memory",
    batch_size: int = 65_536,
) -> tuple[dict[str, pa.Table], dict[str, Any]]:
    """The tables ``names``, checked at the edge as they are read; (tables, metrics).

    Each table is read batch by batch (``batch_size`` rows) through an
    :class:`~splice.io.bad_input.EdgeValidator` against :data:`SCHEMAS` (schema drift), its
    :data:`EDGE_COLUMNS` (null ids, keys, times), NaN/inf floats and ``max_row_bytes``; then,
    with ``dedupe_on``, through a :class:`~splice.io.dedupe.Deduplicator` on those columns
    (every table that has them all; ids kept in the ``state_backend`` keyed state). ``policy``
    ``"fail"`` raises on the first bad row; ``"dead_letter"`` writes bad rows with their reason
    to ``dead_letter`` (JSON lines) and counts them in the metrics (``dead_letter_rows``,
    ``dead_letter_reasons``). Never dropped silently.
    """
    from splice.io.bad_input import DeadLetterSink, EdgeValidator, check_policy
    from splice.io.dedupe import Deduplicator
    from splice.io.sources import bounded_batches

    check_policy(policy)
    if policy == "fail" and dead_letter is not None:
        raise PlanError("--dead-letter needs --bad-input dead-letter")
    sink = DeadLetterSink(dead_letter) if policy == "dead_letter" else None
    if dedupe_on and not any(all(c in SCHEMAS[n].names for c in dedupe_on) for n in names):
        raise PlanError(f"--dedupe-on {','.join(dedupe_on)}: no input table ({', '.join(names)}) has "
                        "all of those columns")
    tables: dict[str, pa.Table] = {}
    duplicates = 0
    for n in names:
        raw = load_table(n, sf, data_dir)
        schema = SCHEMAS[n]
        keys, time_column = EDGE_COLUMNS[n]
        validator = EdgeValidator(n, schema, keys=keys, time_column=time_column, policy=policy,  # type: ignore[arg-type]
                                  sink=sink, max_row_bytes=max_row_bytes)
        dedupe = None
        if dedupe_on and all(c in schema.names for c in dedupe_on):
            dedupe = Deduplicator(n, schema, dedupe_on, policy, sink, backend=state_backend)  # type: ignore[arg-type]
        good = []
        try:
            for b in bounded_batches(raw, batch_size):
                checked = validator.check(b)
                if dedupe is not None and checked.num_rows:
                    checked = dedupe.check(checked)
                if checked.num_rows:
                    good.append(checked)
        finally:
            if dedupe is not None:
                duplicates += dedupe.duplicates
                dedupe.close()
        tables[n] = pa.Table.from_batches(good, schema=schema).combine_chunks()
    metrics: dict[str, Any] = {}
    if sink is not None:
        sink.publish()
        metrics = {"dead_letter_rows": sink.total, "dead_letter_reasons": dict(sink.counts)}
    return tables, metrics
