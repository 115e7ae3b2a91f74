"""Equi-key codes and the key index of the time-bounded joins.

**Key codes.** Every retained or arriving row gets an ``int64`` code of its equi-key:

* one integer, boolean, date, time, timestamp or duration column: the value itself (exact —
  equal codes mean equal keys);
* one floating-point column: the bits of the value with ``-0.0`` folded onto ``0.0`` and every NaN
  onto one NaN (exact; NaN keys therefore match each other, as in DataFusion and PostgreSQL);
* strings and binaries: a 64-bit hash of the bytes; other types: a hash of their string form;
  several columns: the codes mixed together. These codes are *not* exact: equal keys have equal
  codes, and pairs with equal codes are checked for real key equality before they are emitted.

A row whose key has a null in any key column gets ``valid = False`` and never matches.

**Key index** (the seed's hybrid, above 1,024 retained rows): the retained rows of one side in a
chained hash table over their codes and time buckets
(:func:`~splice.joins.temporal._interval_kernels.index_probe`). A chain holds the rows of one key whose
times fall in one bucket of ``2**shift`` time units, at least the band's width, so a probe reads
at most two chains (the buckets its band ``[t + lo, t + hi]`` touches) and touches nothing else:
not the rows of other keys, nor the rows of its key far from its time. Row ids grow in arrival
order and chains link entries in insertion order, so the probe merges its two chains into
batch/row order. The index is derived, never checkpointed: arrival appends to it, watermark
retirement compacts it, restore rebuilds it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from splice.core.errors import InternalError, SchemaError, StateError
from splice.joins.temporal._interval_kernels import (
    band_shift,
    hash_bytes,
    index_insert,
    new_table,
    probe_pairs,
)

__all__ = ["KeyCodec", "KeyIndex"]

_MIX = np.uint64(0x9E3779B97F4A7C15)


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
        h: np.ndarray | None = None
        for a, t in zip(arrays, self.types, strict=True):
            c = (_int_codes(a) if _is_exact_type(t) else _hash_codes(a)).view(np.uint64)
            if h is None:
                h = c * _MIX if len(arrays) > 1 else c
            else:
                h = (h ^ (c + _MIX + (h << np.uint64(6)) + (h >> np.uint64(2)))) * _MIX
        assert h is not None
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


class KeyIndex:
    """Retained rows of one side in a chained hash table over key codes and time buckets; see
    the module docstring.

    Entries (row id, and the pair (time, next) side by side) sit in arrays with spare capacity,
    appended on arrival and linked into the chain of their (code, bucket), so a chain lists rows
    in arrival order; retirement compacts the surviving entries and relinks them. The probe
    reads no codes (see :func:`~splice.joins.temporal._interval_kernels.index_probe`), so the index keeps
    the code arrays it is given by reference, in entry order, and reads them only to rebuild:
    the side's retained batches hold those arrays anyway. The table has at least 1.2 slots per
    entry of capacity. ``nbytes`` (entry and table capacity, and the codes the index made itself
    when it rebuilt) is a cached total, so budget checks are O(1).
    """

    __slots__ = ("_codes", "link", "_rowid", "_base", "n", "table", "nbytes", "shift")

    def __init__(self, codes: np.ndarray, times: np.ndarray, row_ids: np.ndarray | int,
                 band: tuple[int, int] = (0, 2**63 - 1), codes_owned: bool = False):
        """``codes``: kept by reference, not copied (the caller does not change them; with
        ``codes_owned`` the index counts them in ``nbytes``: an array made for it alone).
        ``row_ids``: the rows' ids, or the first id of consecutive ones (one whole batch: no
        id array is written until retirement or a gap needs one). ``band`` = the ``(lo, hi)``
        the index will be probed with: chains are per key and time bucket of
        ``2**band_shift(lo, hi)`` (one bucket, a chain per key, by default)."""
        self.shift = band_shift(*band)
        self._rebuild(codes, times, row_ids, codes_owned)

    def _rebuild(self, codes: np.ndarray, times: np.ndarray, row_ids: np.ndarray | int,
                 codes_owned: bool) -> None:
        n = len(codes)
        cap = max(64, n + n // 4)  # room for arrivals before the next rebuild
        if cap >= 2**31:
            raise StateError(f"key index: {n} rows, more than one index holds (2**31)")
        self._codes = [codes]
        self.link = np.empty((cap, 2), dtype=np.int64)
        self.link[:n, 0] = times
        if isinstance(row_ids, (int, np.integer)):
            self._rowid: np.ndarray | None = None  # entry e has id _base + e
            self._base = int(row_ids)
        else:
            self._rowid = np.empty(cap, dtype=np.int64)
            self._rowid[:n] = row_ids
            self._base = 0
        self.n = n
        # 1.2 slots a row of capacity (1.5 a row held now), not two: the table is written
        # whole when built, and a smaller one leaves more of the caches to the probes. Slots
        # hold distinct codes, so the load stays at most 5/6, and a slot is always free.
        self.table = new_table(cap * 3 // 5 + 1)
        index_insert(self.table, codes, self.link, 0, self.shift)
        self.nbytes = (3 * 8 * cap + self.table.nbytes  # ids counted as if written
                       + (codes.nbytes if codes_owned else 0))

    @property
    def capacity(self) -> int:
        """Entries the arrays hold before the next insert rebuilds them."""
        return len(self.link)

    @property
    def e_code(self) -> np.ndarray:
        """Code of each entry ``0 .. n-1`` (one array made from the pieces the index holds)."""
        if len(self._codes) > 1:
            self._codes = [np.concatenate(self._codes)]
        return self._codes[0]

    @property
    def e_time(self) -> np.ndarray:
        return self.link[:, 0]

    @property
    def e_rowid(self) -> np.ndarray:
        """Row id of each entry slot (made from the first id while the ids are consecutive)."""
        if self._rowid is None:
            return np.arange(self._base, self._base + self.capacity, dtype=np.int64)
        return self._rowid

    def __len__(self) -> int:
        return self.n

    @property
    def row_ids(self) -> np.ndarray:
        return self.e_rowid[: self.n]

    def insert(self, codes: np.ndarray, times: np.ndarray, row_ids: np.ndarray | int) -> None:
        """Append rows whose ids are all larger than every indexed id (an arrival); ``codes``
        kept by reference and ``row_ids`` as for the constructor."""
        n, m = self.n, len(codes)
        consecutive = (self._rowid is None and isinstance(row_ids, (int, np.integer))
                       and int(row_ids) == self._base + n)
        if not consecutive and self._rowid is None:
            self._rowid = self.e_rowid  # a gap: write the ids from now on
            self._base = 0
        if n + m > self.capacity:
            ids: np.ndarray | int
            if consecutive:
                ids = self._base
            else:
                new = (np.arange(int(row_ids), int(row_ids) + m, dtype=np.int64)
                       if isinstance(row_ids, (int, np.integer)) else row_ids)
                ids = np.concatenate([self.row_ids, new])
            self._rebuild(np.concatenate(self._codes + [codes]),
                          np.concatenate([self.link[:n, 0], times]), ids, True)
            return
        self._codes.append(codes)
        self.link[n : n + m, 0] = times
        if self._rowid is not None:
            self._rowid[n : n + m] = (np.arange(int(row_ids), int(row_ids) + m)
                                      if isinstance(row_ids, (int, np.integer)) else row_ids)
        index_insert(self.table, codes, self.link, n, self.shift)
        self.n = n + m

    def retire(self, threshold: int) -> None:
        """Drop every row with ``time <= threshold`` (arrival order within chains is kept)."""
        n = self.n
        times = self.link[:n, 0]
        keep = times > threshold
        if keep.all():
            return
        self._rebuild(self.e_code[keep], times[keep], self.row_ids[keep], True)

    def probe(
        self, codes: np.ndarray, times: np.ndarray, lo: int, hi: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Pairs ``(probe row, row id)`` with equal codes and ``times[i]+lo <= t <= times[i]+hi``.

        Ordered by probe row, then row id (arrival order).
        """
        pi, rid, _, _ = self.probe_times(codes, times, lo, hi)
        return pi, rid

    def probe_times(
        self, codes: np.ndarray, times: np.ndarray, lo: int, hi: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """:meth:`probe`'s pairs, per pair the indexed row's time (read from the index entry the
        probe visits, not from the payload), and whether the probe rows are exactly
        ``0 .. len(codes)-1`` (each probe matched one row: the probe side is output as it is)."""
        if self.shift < 63 and hi - lo + 1 > 1 << self.shift:
            raise InternalError(f"key index of time buckets 2**{self.shift} probed with a band "
                                f"[{lo}, {hi}] wider than a bucket")
        buf, cap, k, in_order = probe_pairs(self.table, self.link, codes, times,
                                            lo, hi, self.shift)
        pi, pe, pt = buf[:k], buf[cap : cap + k], buf[2 * cap : 2 * cap + k]
        if self._rowid is None:
            return pi, pe + self._base if self._base else pe, pt, in_order
        return pi, self._rowid[pe], pt, in_order
