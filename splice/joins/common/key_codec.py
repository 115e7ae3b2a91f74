"""Equi-key codes shared by the joins: an ``int64`` code per row of one or several key columns.

**Key codes.** Every retained or arriving row gets an ``int64`` code of its equi-key:

* one integer, boolean, date, time, timestamp or duration column: the value itself (exact —
  equal codes mean equal keys);
* one floating-point column: the bits of the value with ``-0.0`` folded onto ``0.0`` and every NaN
  onto one NaN (exact; NaN keys therefore match each other, as in DataFusion and PostgreSQL);
* strings and binaries: a 64-bit hash of the bytes; other types: a hash of their string form;
  several columns: the codes mixed together. These codes are *not* exact: equal keys have equal
  codes, and pairs with equal codes are checked for real key equality before they are emitted.

A row whose key has a null in any key column gets ``valid = False`` and never matches.

The hash of a variable-length value is :func:`~splice.kernels.hashing.hash_bytes` of its bytes,
and several columns combine with :func:`~splice.kernels.hashing.combine_codes`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from splice.core.errors import SchemaError
from splice.kernels.hashing import combine_codes, hash_bytes

__all__ = ["KeyCodec", "check_key_types", "keys_equal"]


def _is_exact_type(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_boolean(t)
        or pa.types.is_temporal(t)
        or pa.types.is_floating(t)
    )


def _plain(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    return arr


def _int_codes(arr: pa.Array) -> np.ndarray:
    """Exact int64 codes of a fixed-width column (nulls become 0; the valid mask excludes them)."""
    t = arr.type
    if arr.null_count:
        arr = arr.fill_null(False if pa.types.is_boolean(t) else 0)
    if pa.types.is_boolean(t):
        return arr.to_numpy(zero_copy_only=False).astype(np.int64)
    if pa.types.is_floating(t):
        v = arr.to_numpy(zero_copy_only=False).astype(np.float64)
        v = np.where(v == 0.0, 0.0, v)  # -0.0 == 0.0
        v = np.where(np.isnan(v), np.nan, v)
        return v.view(np.int64)
    if pa.types.is_temporal(t):
        width = t.bit_width
        arr = arr.view(pa.int64() if width == 64 else pa.int32())
    v = arr.to_numpy(zero_copy_only=False)
    if v.dtype == np.uint64:
        return v.view(np.int64)
    return v.astype(np.int64, copy=False)


def _hash_codes(arr: pa.Array) -> np.ndarray:
    """64-bit hash codes of a variable-length or other column (not exact)."""
    t = arr.type
    if not (pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t)
            or pa.types.is_large_binary(t)):
        arr = arr.cast(pa.string())
        t = arr.type
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    bufs = arr.buffers()
    n = len(arr)
    offsets = np.frombuffer(bufs[1], dtype=np.int64 if large else np.int32)[arr.offset : arr.offset + n + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return hash_bytes(offsets, data).view(np.int64)


class KeyCodec:
    """Encodes the equi-key columns of one side into ``int64`` codes (see the module docstring).

    Both sides of a join use codecs built from the same key types, so equal keys get equal codes.
    """

    def __init__(self, types: Sequence[pa.DataType]):
        self.types = [t.value_type if pa.types.is_dictionary(t) else t for t in types]
        self.exact = len(self.types) == 1 and _is_exact_type(self.types[0])

    def encode(self, columns: Sequence[pa.Array | pa.ChunkedArray]) -> tuple[np.ndarray, np.ndarray | None]:
        """Return ``(codes, valid)``; ``valid`` is ``None`` when no key has a null."""
        arrays = [_plain(c) for c in columns]
        valid: np.ndarray | None = None
        for a in arrays:
            if a.null_count:
                v = a.is_valid().to_numpy(zero_copy_only=False)
                valid = v if valid is None else valid & v
        if self.exact:
            return _int_codes(arrays[0]), valid
        h = combine_codes([(_int_codes(a) if _is_exact_type(t) else _hash_codes(a)).view(np.uint64)
                           for a, t in zip(arrays, self.types, strict=True)])
        return h.view(np.int64), valid


def check_key_types(
    left: pa.Schema, right: pa.Schema, left_on: Sequence[str], right_on: Sequence[str], what: str,
    left_name: str, right_name: str,
) -> list[pa.DataType]:
    """The key types, or :class:`SchemaError` naming the stream and column that do not fit."""
    if len(left_on) != len(right_on) or not left_on:
        raise SchemaError(f"{what}: expected the same non-zero number of key columns on both sides, "
                          f"got {list(left_on)} and {list(right_on)}")
    types = []
    for lc, rc in zip(left_on, right_on, strict=True):
        for schema, c, side in ((left, lc, left_name), (right, rc, right_name)):
            if c not in schema.names:
                raise SchemaError(f"{what}: stream {side!r} has no key column {c!r} "
                                  f"(columns: {', '.join(schema.names)})")
        lt, rt = left.field(lc).type, right.field(rc).type
        plain_l = lt.value_type if pa.types.is_dictionary(lt) else lt
        plain_r = rt.value_type if pa.types.is_dictionary(rt) else rt
        if plain_l != plain_r:
            raise SchemaError(f"{what}: key type mismatch: stream {left_name!r} column {lc!r} is "
                              f"{lt}, stream {right_name!r} column {rc!r} is {rt}")
        if pa.types.is_nested(plain_l):
            raise SchemaError(f"{what}: key column {lc!r} has nested type {lt}, not supported")
        types.append(plain_l)
    return types


def keys_equal(left: Sequence[pa.Array], right: Sequence[pa.Array]) -> np.ndarray:
    """Row-wise real equality of two equally long lists of key columns (the check after codes)."""
    mask: np.ndarray | None = None
    for a, b in zip(left, right, strict=True):
        a, b = _plain(a), _plain(b)
        if pa.types.is_floating(a.type):
            eq = _int_codes(a) == _int_codes(b)  # NaN == NaN, -0.0 == 0.0, as the codes say
        else:
            eq = pc.equal(a, b).fill_null(False).to_numpy(zero_copy_only=False)
        mask = eq if mask is None else mask & eq
    assert mask is not None
    return mask
