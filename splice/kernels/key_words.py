"""A key column's values as exact int64 words: the value coding every keyed structure starts from.

A column whose type holds at most 64 bits of value codes each value as one ``int64`` word, the
value itself: integers, booleans, dates, times, timestamps and durations (their stored integer),
decimal128 of precision <= 18 (the unscaled value) and floats (the float64 bit pattern, with
``-0.0`` folded onto ``0.0`` and every NaN onto one NaN, so that equal words mean SQL-equal
values and NaN equals NaN as in DataFusion and PostgreSQL). Equal values get equal words and
unequal values unequal words, within one type.

Two structures build on it, with different contracts:

* the group-by's key coder (:class:`splice.ops.aggregate.GroupKeyCoder`) must give every key an
  *exact, decodable* word, so it packs short strings into the word and interns what does not
  fit (its dictionary is state, checkpointed with the groups);
* the joins' key codec (:class:`splice.joins.common.key_codec.KeyCodec`) needs only *equal keys,
  equal codes*: it uses these words where one exact column is the key and a hash otherwise, and
  checks candidate pairs for real equality, so it keeps no dictionary at all.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["is_exact_type", "exact_words"]


def is_exact_type(t: pa.DataType) -> bool:
    """Whether :func:`exact_words` codes every value of type ``t`` exactly."""
    return (
        pa.types.is_integer(t)
        or pa.types.is_boolean(t)
        or (pa.types.is_temporal(t) and not pa.types.is_interval(t))
        or pa.types.is_floating(t)
        or (pa.types.is_decimal128(t) and t.precision <= 18)
    )


def exact_words(arr: pa.Array) -> np.ndarray:
    """The ``int64`` word of each value of ``arr`` (a type of :func:`is_exact_type`); a null's
    word is 0 (callers keep the null mask apart)."""
    t = arr.type
    if pa.types.is_decimal(t):
        words = np.frombuffer(arr.buffers()[1], dtype=np.int64,
                              count=2 * (arr.offset + len(arr))).reshape(-1, 2)[arr.offset :, 0]
        out = words.copy()
        if arr.null_count:
            out[np.asarray(arr.is_null())] = 0
        return out
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
        arr = arr.view(pa.int64() if t.bit_width == 64 else pa.int32())
    v = arr.to_numpy(zero_copy_only=False)
    if v.dtype == np.uint64:
        return v.view(np.int64)
    return v.astype(np.int64, copy=False)
