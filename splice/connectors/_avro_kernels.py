"""Numba kernels that decode flat Avro records (the binary encoding of the Avro 1.11
specification, section "Binary Encoding") into column arrays, every record of a poll in one call.

A record is its fields in order: ``long``/``int`` as zig-zag varints, ``boolean`` as one byte,
``float``/``double`` as 4/8 little-endian bytes, ``string``/``bytes`` as a varint length and the
bytes, and a nullable field as the union ``["null", T]``: a varint branch index (0: null, 1: T)
before the value. The tests compare the kernels with fastavro on random records.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["LONG", "BOOLEAN", "FLOAT", "DOUBLE", "STRING", "decode_records", "gather_strings",
           "OK", "TRUNCATED", "BAD_UNION", "TRAILING", "BAD_VARINT"]

#: field kinds
LONG, BOOLEAN, FLOAT, DOUBLE, STRING = 0, 1, 2, 3, 4
#: per-record status
OK, TRUNCATED, BAD_UNION, TRAILING, BAD_VARINT = 0, 1, 2, 3, 4


@njit(cache=True, nogil=True)
def _varint(buf: np.ndarray, pos: int, end: int) -> tuple[np.int64, int, int]:
    """(value, next position, status) of the zig-zag varint at ``pos``."""
    acc = np.uint64(0)
    shift = 0
    while True:
        if pos >= end:
            return np.int64(0), pos, TRUNCATED
        b = np.uint64(buf[pos])
        pos += 1
        if shift > 63:
            return np.int64(0), pos, BAD_VARINT
        acc |= (b & np.uint64(0x7F)) << np.uint64(shift)
        if b < np.uint64(0x80):
            break
        shift += 7
    value = np.int64(acc >> np.uint64(1)) ^ -np.int64(acc & np.uint64(1))
    return value, pos, OK


@njit(cache=True, nogil=True)
def decode_records(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, kinds: np.ndarray,
                   nullable: np.ndarray, values: np.ndarray, valid: np.ndarray,
                   status: np.ndarray) -> None:
    """Decode record ``i`` (bytes ``buf[starts[i]:ends[i]]``) into row ``i`` of ``values`` (one
    int64 per field: the number, the float's or double's bits, or a string's start in ``buf``)
    and ``valid``; a string's length goes to ``values[i, f + n_fields]``. ``status[i]`` says
    whether the record decoded whole (``OK``) or why not."""
    n_fields = kinds.shape[0]
    for i in range(starts.shape[0]):
        pos = starts[i]
        end = ends[i]
        st = OK
        for f in range(n_fields):
            if nullable[f]:
                branch, pos, st = _varint(buf, pos, end)
                if st != OK:
                    break
                if branch == 0:
                    valid[i, f] = False
                    values[i, f] = 0
                    continue
                if branch != 1:
                    st = BAD_UNION
                    break
            valid[i, f] = True
            k = kinds[f]
            if k == LONG:
                v, pos, st = _varint(buf, pos, end)
                values[i, f] = v
            elif k == BOOLEAN:
                if pos + 1 > end:
                    st = TRUNCATED
                else:
                    values[i, f] = 1 if buf[pos] != 0 else 0
                    pos += 1
            elif k == FLOAT or k == DOUBLE:
                width = 4 if k == FLOAT else 8
                if pos + width > end:
                    st = TRUNCATED
                else:
                    bits = np.uint64(0)
                    for b in range(width):
                        bits |= np.uint64(buf[pos + b]) << np.uint64(8 * b)
                    values[i, f] = np.int64(bits)
                    pos += width
            else:
                length, pos, st = _varint(buf, pos, end)
                if st == OK and (length < 0 or pos + length > end):
                    st = TRUNCATED
                if st == OK:
                    values[i, f] = pos
                    values[i, f + n_fields] = length
                    pos += length
            if st != OK:
                break
        if st == OK and pos != end:
            st = TRAILING
        status[i] = st


@njit(cache=True, nogil=True)
def gather_strings(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                   rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Arrow string offsets and characters of ``rows`` (null rows have length 0)."""
    n = rows.shape[0]
    offsets = np.empty(n + 1, dtype=np.int32)
    offsets[0] = 0
    total = 0
    for j in range(n):
        total += lengths[rows[j]]
        offsets[j + 1] = total
    data = np.empty(max(total, 1), dtype=np.uint8)
    for j in range(n):
        r = rows[j]
        s = starts[r]
        o = offsets[j]
        for b in range(lengths[r]):
            data[o + b] = buf[s + b]
    return offsets, data
