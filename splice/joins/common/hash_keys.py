"""Join keys of the hash window joins: one or several columns of any hashable type, as int64 codes.

The window indexes (fast, HB-SJ, SplitJoin) and their numba kernels work on one ``int64`` per
tuple. :class:`HashKeys` turns a row's key tuple into that code:

* **Common types.** Per key column, the left and the right type must agree or be safely castable
  to one common type (:func:`common_key_types`): integers (and booleans) of any width become
  ``int64`` (``uint64`` only pairs with ``uint64``), floats ``float64``, ``string`` /
  ``large_string`` / ``string_view`` one string type, binaries one binary type, ``date32`` and
  ``date64`` ``date64``, timestamps (same time zone), times and durations the finer unit, decimals
  the larger scale. Anything else is a :class:`~splice.core.errors.SchemaError` naming the
  stream and the column. Both sides cast their key columns to the common types before encoding.
* **Codes** (:class:`~splice.joins.common.key_codec.KeyCodec`, shared with the interval and window
  joins): one integer, boolean, temporal or floating column is its own code, *exact*: equal
  codes mean equal keys. Strings, binaries, decimals and several columns get a 64-bit hash, not
  exact: the indexes match on the hash, and every candidate pair is then checked for real key
  equality (:meth:`HashKeys.equal`) before it is emitted, so distinct keys never match.
* **Nulls.** A row with a null in any key column is not valid: it never matches (it still takes
  its window position) and the joins count it.

Codes are derived from the rows, never state: a restored join encodes its retained rows again.
There is no key dictionary, so nothing grows with the number of distinct keys.

>>> import pyarrow as pa
>>> types = common_key_types(pa.schema([("a", pa.string()), ("b", pa.int32())]),
...                          pa.schema([("a", pa.large_string()), ("b", pa.int64())]),
...                          ["a", "b"], ["a", "b"], "left", "right")
>>> types
[DataType(large_string), DataType(int64)]
>>> hk = HashKeys(types)
>>> codes, valid = hk.encode([pa.array(["x", "x", None]), pa.array([1, 1, 2], pa.int32())], "left", ["a", "b"])
>>> bool(codes[0] == codes[1]), valid.tolist(), hk.exact
(True, [True, True, False], False)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from splice.core.errors import SchemaError
from splice.joins.common.key_codec import KeyCodec, keys_equal

__all__ = ["HashKeys", "common_key_type", "common_key_types"]

_TIME_UNITS = ("s", "ms", "us", "ns")


def _plain_type(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


def _is_int(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_boolean(t)


def _is_str(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_bin(t: pa.DataType) -> bool:
    return (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or pa.types.is_binary_view(t))


def _finer(a: str, b: str) -> str:
    return a if _TIME_UNITS.index(a) >= _TIME_UNITS.index(b) else b


def _common(lt: pa.DataType, rt: pa.DataType) -> pa.DataType | None:
    """The type both key columns cast to without loss, or None."""
    if pa.types.is_nested(lt) or pa.types.is_nested(rt) or pa.types.is_null(lt) or pa.types.is_null(rt):
        return None
    if _is_int(lt) and _is_int(rt):
        if pa.types.is_uint64(lt) or pa.types.is_uint64(rt):
            return lt if lt == rt else None
        return pa.int64()
    if pa.types.is_floating(lt) and pa.types.is_floating(rt):
        return pa.float64()
    if _is_str(lt) and _is_str(rt):
        return pa.large_string() if pa.types.is_large_string(lt) or pa.types.is_large_string(rt) else pa.string()
    if _is_bin(lt) and _is_bin(rt):
        return pa.large_binary() if pa.types.is_large_binary(lt) or pa.types.is_large_binary(rt) else pa.binary()
    if pa.types.is_date(lt) and pa.types.is_date(rt):
        return lt if lt == rt else pa.date64()
    if pa.types.is_timestamp(lt) and pa.types.is_timestamp(rt):
        if lt.tz != rt.tz:
            return None
        return pa.timestamp(_finer(lt.unit, rt.unit), lt.tz)
    if pa.types.is_duration(lt) and pa.types.is_duration(rt):
        return pa.duration(_finer(lt.unit, rt.unit))
    if pa.types.is_time(lt) and pa.types.is_time(rt):
        unit = _finer(lt.unit, rt.unit)
        return pa.time32(unit) if unit in ("s", "ms") else pa.time64(unit)
    if pa.types.is_decimal(lt) and pa.types.is_decimal(rt):
        scale = max(lt.scale, rt.scale)
        precision = max(lt.precision - lt.scale, rt.precision - rt.scale) + scale
        if precision <= 38 and not (pa.types.is_decimal256(lt) or pa.types.is_decimal256(rt)):
            return pa.decimal128(precision, scale)
        return pa.decimal256(precision, scale) if precision <= 76 else None
    return None


def common_key_types(
    left: pa.Schema, right: pa.Schema, left_on: Sequence[str], right_on: Sequence[str],
    left_name: str, right_name: str, what: str = "hash window join",
) -> list[pa.DataType]:
    """Per key column, the common type of the two sides (see the module doc), else SchemaError."""
    if not left_on or len(left_on) != len(right_on):
        raise SchemaError(f"{what}: expected the same non-zero number of key columns on both sides, "
                          f"got {list(left_on)} and {list(right_on)}")
    out = []
    for lc, rc in zip(left_on, right_on, strict=True):
        for schema, c, name in ((left, lc, left_name), (right, rc, right_name)):
            if c not in schema.names:
                raise SchemaError(f"{what}: stream {name} has no key column {c!r} "
                                  f"(columns: {', '.join(schema.names)})")
        lt, rt = left.field(lc).type, right.field(rc).type
        t = _common(_plain_type(lt), _plain_type(rt))
        if t is None:
            raise SchemaError(
                f"{what}: join key types differ and do not cast safely to one type: stream {left_name} "
                f"column {lc!r} is {lt}, stream {right_name} column {rc!r} is {rt}"
            )
        out.append(t)
    return out


def common_key_type(columns: Sequence[tuple[str, str, pa.DataType]], what: str = "hash window join"
                    ) -> pa.DataType:
    """The one type that every ``(stream, column, type)`` of ``columns`` casts to safely.

    For key columns that predicates tie together (``a.x = b.y`` and ``b.y = c.z`` make ``x``,
    ``y`` and ``z`` one key): they share one type, so one codec gives equal keys equal codes.
    Else :class:`~splice.core.errors.SchemaError` naming the streams and columns that clash.
    """
    if not columns:
        raise SchemaError(f"{what}: no key columns")
    s0, c0, t0 = columns[0]
    t = _common(_plain_type(t0), _plain_type(t0))
    if t is None:
        raise SchemaError(f"{what}: stream {s0} column {c0!r} has type {t0}, which cannot be a join key")
    for s, c, ct in columns[1:]:
        u = _common(t, _plain_type(ct))
        if u is None:
            others = ", ".join(f"stream {x} column {y!r} is {z}" for x, y, z in columns if (x, y) != (s, c))
            raise SchemaError(
                f"{what}: join key types differ and do not cast safely to one type: stream {s} column "
                f"{c!r} is {ct}, joined to {others}"
            )
        t = u
    return t


class HashKeys:
    """Encodes the key columns of either side into int64 codes and checks candidate pairs."""

    def __init__(self, types: Sequence[pa.DataType]) -> None:
        self.types = list(types)
        self.codec = KeyCodec(self.types)
        #: codes are the keys themselves: no equality check after matching
        self.exact = self.codec.exact

    def cast(self, columns: Sequence[pa.Array | pa.ChunkedArray], stream: str, names: Sequence[str]
             ) -> list[pa.Array]:
        """The key columns as plain arrays of the common types."""
        out = []
        for col, t, name in zip(columns, self.types, names, strict=True):
            if isinstance(col, pa.ChunkedArray):
                col = col.combine_chunks()
            if pa.types.is_dictionary(col.type):
                col = col.dictionary_decode()
            if col.type != t:
                try:
                    col = col.cast(t)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise SchemaError(f"stream {stream}: join key column {name!r} of type {col.type} "
                                      f"does not cast to the join's key type {t}: {exc}") from exc
            out.append(col)
        return out

    def encode(self, columns: Sequence[pa.Array | pa.ChunkedArray], stream: str, names: Sequence[str]
               ) -> tuple[np.ndarray, np.ndarray]:
        """``(codes, valid)`` of the rows; ``valid`` is False where any key column is null."""
        cols = self.cast(columns, stream, names)
        codes, valid = self.codec.encode(cols)
        n = len(cols[0])
        v = np.ones(n, np.bool_) if valid is None else np.ascontiguousarray(valid, np.bool_)
        return np.ascontiguousarray(codes, np.int64), v

    def equal(self, left: Sequence[pa.Array | pa.ChunkedArray], right: Sequence[pa.Array | pa.ChunkedArray],
              left_name: str, right_name: str, left_on: Sequence[str], right_on: Sequence[str]) -> np.ndarray:
        """Row-wise real equality of candidate pairs (gathered key columns of both sides)."""
        return keys_equal(self.cast(left, left_name, left_on), self.cast(right, right_name, right_on))
