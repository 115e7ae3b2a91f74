"""Avro records decoded by the numba kernel against fastavro, the reference reader and writer,
on random records: nulls, extremes of each type, unicode and empty strings, truncated and
trailing bytes."""

from __future__ import annotations

import io
import math

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.connectors.avro_records import avro_schema, decode_avro

fastavro = pytest.importorskip("fastavro")

SCHEMA = pa.schema([pa.field("k", pa.int64(), False), ("n", pa.int32()), ("s", pa.string()),
                    ("d", pa.float64()), ("f", pa.float32()), ("b", pa.bool_())])
PARSED = fastavro.parse_schema(avro_schema(SCHEMA))


def _encode(row: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, PARSED, row)
    return out.getvalue()


def _decode(payload: bytes) -> dict:
    return fastavro.schemaless_reader(io.BytesIO(payload), PARSED)


_row = st.fixed_dictionaries({
    "k": st.integers(-(2**63), 2**63 - 1),
    "n": st.none() | st.integers(-(2**31), 2**31 - 1),
    "s": st.none() | st.text(max_size=20),
    "d": st.none() | st.floats(allow_nan=False),
    "f": st.none() | st.floats(width=32, allow_nan=False),
    "b": st.none() | st.booleans(),
})


def _same(a: dict, b: dict) -> bool:
    for key, x in a.items():
        y = b[key]
        if isinstance(x, float) and isinstance(y, float):
            if not (x == y or (math.isnan(x) and math.isnan(y))):
                return False
        elif x != y:
            return False
    return True


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(_row, max_size=30), cut=st.data())
def test_the_kernel_reads_what_fastavro_writes(rows, cut):
    payloads = [_encode(r) for r in rows]
    broken = set()
    for i in cut.draw(st.sets(st.integers(0, max(len(payloads) - 1, 0)), max_size=3)):
        if i < len(payloads) and len(payloads[i]) > 1:
            keep = cut.draw(st.integers(0, len(payloads[i]) - 1))
            payloads[i] = payloads[i][:keep] if keep else payloads[i] + b"\x00"
            broken.add(i)
    batch, bad = decode_avro(payloads, SCHEMA)
    assert {i for i, _ in bad} == broken
    good = [i for i in range(len(rows)) if i not in broken]
    got = batch.to_pylist()
    assert len(got) == len(good)
    for i, row in zip(good, got, strict=True):
        assert _same(_decode(payloads[i]), row)


def test_confluent_framing_and_missing_values():
    payload = b"\x00\x00\x00\x00\x07" + _encode({"k": 3, "n": None, "s": "x", "d": 1.0, "f": None,
                                                 "b": True})
    batch, bad = decode_avro([payload, None, b"\x00\x00"], SCHEMA, confluent=True)
    assert batch.to_pylist() == [{"k": 3, "n": None, "s": "x", "d": 1.0, "f": None, "b": True}]
    assert [i for i, _ in bad] == [1, 2]
