"""Avro records (binary encoding, a flat record whose schema the table's column list gives)
decoded into Arrow batches by one numba call per poll (:mod:`splice.connectors._avro_kernels`).

The writer's schema is the column list: each column is a field of the same name in that order,
``BIGINT``/``INT``/``SMALLINT``/``TINYINT``, ``DATE`` (days) and ``TIMESTAMP`` (in its unit) as
``long``/``int``, ``BOOLEAN`` as ``boolean``, ``DOUBLE`` as ``double``, ``FLOAT``/``REAL`` as
``float``, ``VARCHAR`` as ``string``; a column that is not ``NOT NULL`` is the union ``["null",
T]``. ``confluent=True`` skips the 5-byte header (magic byte, schema id) that Confluent's
serializers put before each record. :func:`avro_schema` is that schema, for producers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from splice.connectors import _avro_kernels as K
from splice.core.errors import PlanError

__all__ = ["decode_avro", "avro_schema", "avro_kinds"]

_REASONS = {K.TRUNCATED: "the record ends inside a field",
            K.BAD_UNION: "a union branch other than null (0) or the value (1)",
            K.TRAILING: "bytes left after the last field",
            K.BAD_VARINT: "an integer longer than 10 bytes"}


def _kind(t: pa.DataType, column: str) -> tuple[int, str]:
    if pa.types.is_integer(t) or pa.types.is_date(t) or pa.types.is_timestamp(t):
        return K.LONG, "long"
    if pa.types.is_boolean(t):
        return K.BOOLEAN, "boolean"
    if pa.types.is_float32(t):
        return K.FLOAT, "float"
    if pa.types.is_float64(t):
        return K.DOUBLE, "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return K.STRING, "string"
    raise PlanError(f"Avro: column {column!r} has type {t}, which Avro records here do not carry "
                    "(integers, dates, timestamps, booleans, floats, doubles, strings)")


def avro_kinds(schema: pa.Schema) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's field kinds and nullability of ``schema``'s columns."""
    kinds = np.array([_kind(f.type, f.name)[0] for f in schema], dtype=np.int64)
    nullable = np.array([f.nullable for f in schema], dtype=np.bool_)
    return kinds, nullable


def avro_schema(schema: pa.Schema, name: str = "record") -> dict[str, Any]:
    """The Avro schema (as JSON data) of records of ``schema``'s columns."""
    fields = []
    for f in schema:
        t: Any = _kind(f.type, f.name)[1]
        fields.append({"name": f.name, "type": ["null", t] if f.nullable else t})
    return {"type": "record", "name": name, "fields": fields}


def decode_avro(payloads: Sequence[bytes | None], schema: pa.Schema, confluent: bool = False
                ) -> tuple[pa.RecordBatch, list[tuple[int, str]]]:
    """The records of ``payloads`` as one batch of ``schema``, and ``(index, reason)`` of each
    record that could not be read (left out of the batch)."""
    kinds, nullable = avro_kinds(schema)
    n = len(payloads)
    missing = [i for i, p in enumerate(payloads) if p is None]
    values = [b"" if p is None else p for p in payloads] if missing else payloads
    lengths = np.fromiter(map(len, values), np.int64, n)  # type: ignore[arg-type]
    ends = np.cumsum(lengths)
    starts = ends - lengths
    if confluent:
        starts = starts + 5
    buf = np.frombuffer(b"".join(values), dtype=np.uint8)  # type: ignore[arg-type]
    if not len(buf):
        buf = np.zeros(1, dtype=np.uint8)
    width = len(kinds)
    out = np.zeros((n, 2 * width), dtype=np.int64)
    valid = np.zeros((n, max(width, 1)), dtype=np.bool_)
    status = np.zeros(n, dtype=np.int64)
    short = starts > ends
    if short.any():  # a Confluent header longer than the record
        starts = np.minimum(starts, ends)
    K.decode_records(buf, starts, ends, kinds, nullable, out, valid, status)
    status[short] = K.TRUNCATED
    status[missing] = K.TRUNCATED
    bad = [(int(i), "empty record (no value)" if i in missing else
            f"not an Avro record of the table's columns: {_REASONS[int(status[i])]}")
           for i in np.flatnonzero(status != K.OK)]
    rows = np.flatnonzero(status == K.OK)
    columns = [_column(f, kinds[c], out, valid, c, width, rows, buf) for c, f in enumerate(schema)]
    return pa.RecordBatch.from_arrays(columns, schema=schema), bad


def _column(field: pa.Field, kind: int, out: np.ndarray, valid: np.ndarray, c: int, width: int,
            rows: np.ndarray, buf: np.ndarray) -> pa.Array:
    ok = valid[rows, c]
    mask = None if ok.all() else ~ok
    raw = out[rows, c]
    t = field.type
    if kind == K.STRING:
        offsets, data = K.gather_strings(buf, out[:, c], np.where(valid[:, c], out[:, c + width], 0),
                                         rows)
        validity = None if mask is None else pa.array(ok).buffers()[1]
        arr = pa.Array.from_buffers(pa.string(), len(rows), [validity, pa.py_buffer(offsets),
                                                             pa.py_buffer(data)])
        return arr.cast(t)
    if kind == K.DOUBLE:
        return pa.array(raw.view(np.float64), pa.float64(), mask=mask)
    if kind == K.FLOAT:
        return pa.array(raw.astype(np.uint32).view(np.float32), pa.float32(), mask=mask)
    if kind == K.BOOLEAN:
        return pa.array(raw.astype(bool), pa.bool_(), mask=mask)
    ints = pa.array(raw, pa.int64(), mask=mask)
    if pa.types.is_date(t):
        return ints.cast(pa.int32()).cast(pa.date32()).cast(t)
    if pa.types.is_timestamp(t):
        return ints.cast(t)
    return ints.cast(t)  # a value that does not fit the column's width raises here
