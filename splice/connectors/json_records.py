"""JSON records (one object per record, as Kafka carries them) decoded into Arrow batches.

The records of a poll are joined with newlines and read by Arrow's JSON reader against the
table's schema in one call, so no Python runs per record once the payloads are in a list. A
record that does not parse, or whose fields do not convert to the schema's types, makes that
call fail: only then are the records read one at a time, to name the bad ones, which the
source's bad-input policy fails on or sets aside. Fields not in the schema are ignored; a field
missing from a record is null.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.json as pj

__all__ = ["decode_json"]


def _read(buf: bytes, schema: pa.Schema, newlines_in_values: bool) -> pa.Table:
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore",
                              newlines_in_values=newlines_in_values)
    return pj.read_json(io.BytesIO(buf), read_options=pj.ReadOptions(block_size=1 << 24),
                        parse_options=options)


def _as_batch(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    table = table.select(schema.names).cast(schema).combine_chunks()
    if table.num_rows == 0:
        return pa.RecordBatch.from_pylist([], schema=schema)
    return table.to_batches()[0]


def decode_json(payloads: Sequence[bytes | None], schema: pa.Schema
                ) -> tuple[pa.RecordBatch, list[tuple[int, str]]]:
    """The records of ``payloads`` as one batch of ``schema``, and ``(index, reason)`` of each
    record that could not be read (left out of the batch)."""
    if not payloads:
        return _as_batch(schema.empty_table(), schema), []
    if None not in payloads:
        buf = b"\n".join(payloads)  # type: ignore[arg-type]
        multiline = buf.count(b"\n") != len(payloads) - 1
        try:
            table = _read(buf, schema, multiline)
            if table.num_rows == len(payloads):
                return _as_batch(table, schema), []
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    good: list[pa.Table] = []
    bad: list[tuple[int, str]] = []
    for i, p in enumerate(payloads):
        if p is None or not p.strip():
            bad.append((i, "empty record (no value)"))
            continue
        try:
            t = _read(p, schema, b"\n" in p)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            bad.append((i, f"not a JSON record of the table's columns: {str(exc).splitlines()[0]}"))
            continue
        if t.num_rows != 1:
            bad.append((i, f"holds {t.num_rows} JSON values, expected one object"))
            continue
        good.append(t)
    table = pa.concat_tables(good) if good else schema.empty_table()
    return _as_batch(table, schema), bad
