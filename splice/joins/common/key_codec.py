"""Join keys: the common type of each key column pair, and an ``int64`` code per row of the keys.

The joins' indexes and kernels work on one ``int64`` per tuple. :class:`KeyCodec` turns a row's
key tuple into that code:

* **Common types.** Per key column, the left and the right type must agree or be safely castable
  to one common type (:func:`common_key_types`): integers (and booleans) of any width become
  ``int64`` (``uint64`` only pairs with ``uint64``), floats ``float64``, ``string`` /
  ``large_string`` / ``string_view`` one string type, binaries one binary type, ``date32`` and
  ``date64`` ``date64``, timestamps (same time zone), times and durations the finer unit, decimals
  the larger scale. Anything else is a :class:`~splice.core.errors.SchemaError` naming the
  stream and the column. Both sides cast their key columns to the common types before encoding.
  (The interval and window joins ask for equal types, :func:`check_key_types`.)
* **Codes.** One column of a type that fits a word (integers, booleans, temporal types, floats,
  decimals of precision <= 18) is its own code, its exact word
  (:func:`~splice.kernels.key_words.exact_words`): equal codes mean equal keys (``-0.0`` equals
  ``0.0``, NaN equals NaN, as in DataFusion and PostgreSQL). Strings and binaries get a 64-bit
  hash of their bytes (:func:`~splice.kernels.hashing.hash_bytes`), other types a hash of their
  string form, several columns their codes combined
  (:func:`~splice.kernels.hashing.combine_codes`). These are not exact: the indexes match on the
  code, and every candidate pair is checked for real key equality (:meth:`KeyCodec.equal`,
  :func:`keys_equal`) before it is emitted, so distinct keys never match.
* **Nulls.** A row with a null in any key column is not valid: it never matches (it still takes
  its window position) and the joins count it.

Codes are derived from the rows, never state: a restored join encodes its retained rows again.
There is no key dictionary, so nothing grows with the number of distinct keys (the group-by's
coder, which must decode its keys, is the one that interns).

>>> import pyarrow as pa
>>> types = common_key_types(pa.schema([("a", pa.string()), ("b", pa.int32())]),
...                          pa.schema([("a", pa.large_string()), ("b", pa.int64())]),
...                          ["a", "b"], ["a", "b"], "left", "right")
>>> types
[DataType(large_string), DataType(int64)]
>>> codec = KeyCodec(types)
>>> codes, valid = codec.encode([pa.array(["x", "x", None]), pa.array([1, 1, 2], pa.int32())], "left", ["a", "b"])
>>> bool(codes[0] == codes[1]), valid.tolist(), codec.exact
(True, [True, True, False], False)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from splice.core.errors import SchemaError
from splice.kernels.hashing import combine_codes, hash_bytes
from splice.kernels.key_words import exact_words, is_exact_type

__all__ = ["KeyCodec", "check_key_types", "common_key_type", "common_key_types", "keys_equal"]

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


def _plain(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    return arr


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
    """Casts the key columns of either side to the common types, encodes them into ``int64``
    codes and checks candidate pairs (see the module docstring)."""

    def __init__(self, types: Sequence[pa.DataType]) -> None:
        self.types = [t.value_type if pa.types.is_dictionary(t) else t for t in types]
        #: codes are the keys themselves: no equality check after matching
        self.exact = len(self.types) == 1 and is_exact_type(self.types[0])

    def cast(self, columns: Sequence[pa.Array | pa.ChunkedArray], stream: str = "?",
             names: Sequence[str] = ()) -> list[pa.Array]:
        """The key columns as plain arrays of the common types."""
        out = []
        for i, (col, t) in enumerate(zip(columns, self.types, strict=True)):
            col = _plain(col)
            if col.type != t:
                name = names[i] if i < len(names) else str(i)
                try:
                    col = col.cast(t)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise SchemaError(f"stream {stream}: join key column {name!r} of type {col.type} "
                                      f"does not cast to the join's key type {t}: {exc}") from exc
            out.append(col)
        return out

    def encode(self, columns: Sequence[pa.Array | pa.ChunkedArray], stream: str = "?",
               names: Sequence[str] = ()) -> tuple[np.ndarray, np.ndarray | None]:
        """``(codes, valid)`` of the rows; ``valid`` is False where any key column is null, and
        ``None`` when none is."""
        arrays = self.cast(columns, stream, names)
        valid: np.ndarray | None = None
        for a in arrays:
            if a.null_count:
                v = a.is_valid().to_numpy(zero_copy_only=False)
                valid = v if valid is None else valid & v
        if self.exact:
            return exact_words(arrays[0]), valid
        h = combine_codes([(exact_words(a) if is_exact_type(t) else _hash_codes(a)).view(np.uint64)
                           for a, t in zip(arrays, self.types, strict=True)])
        return h.view(np.int64), valid

    def equal(self, left: Sequence[pa.Array | pa.ChunkedArray], right: Sequence[pa.Array | pa.ChunkedArray],
              left_name: str, right_name: str, left_on: Sequence[str], right_on: Sequence[str]) -> np.ndarray:
        """Row-wise real equality of candidate pairs (gathered key columns of both sides)."""
        return keys_equal(self.cast(left, left_name, left_on), self.cast(right, right_name, right_on))


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
            eq = exact_words(a) == exact_words(b)  # NaN == NaN, -0.0 == 0.0, as the codes say
        else:
            eq = pc.equal(a, b).fill_null(False).to_numpy(zero_copy_only=False)
        mask = eq if mask is None else mask & eq
    assert mask is not None
    return mask
