"""Group keys: a hash table from rows of int64 key words to dense group ids, in numba.

A row's key is ``k`` int64 words (integers and dates as themselves, short strings packed by
:func:`pack_strings`, longer ones interned by the caller). :func:`assign_groups` gives each row
the id of its group, creating groups for keys not seen before (open addressing, linear probing,
Fibonacci hashing, the table doubled at half load); :func:`lookup_rows` only reads. The
group-by's aggregates, the keyed state backends and the dedupe at the edge all key their state
this way. The tests compare each kernel with its plain-Python reference in
``tests/reference/group_keys.py``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from splice.kernels.hashing import hash_words

__all__ = ["assign_groups", "assign_groups_from", "key_box", "lookup_rows", "pack_strings", "rehash",
           "unpack_strings"]

#: keys whose box (the product of each word's range) is this small are numbered through a dense
#: lookup table instead of the hash table
_LUT_MAX = 1 << 16
_SAFE = np.int64(1) << 61
_NO_LUT = np.full(0, -1, dtype=np.int64)
#: the word of a string longer than 7 bytes (the caller interns those)
_LONG = np.int64(-1)


@njit(cache=True, nogil=True)
def rehash(slots: np.ndarray, gkeys: np.ndarray, n_groups: int) -> np.ndarray:
    cap = slots.shape[0] * 2
    mask = cap - 1
    out = np.full(cap, -1, dtype=np.int64)
    for g in range(n_groups):
        j = hash_words(gkeys, g) & mask
        while out[j] >= 0:
            j = (j + 1) & mask
        out[j] = g
    return out


@njit(cache=True, nogil=True)
def _same_key(gkeys: np.ndarray, g: int, keys: np.ndarray, i: int) -> bool:
    for c in range(keys.shape[1]):
        if gkeys[g, c] != keys[i, c]:
            return False
    return True


@njit(cache=True, nogil=True)
def key_box(keys: np.ndarray, skip: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Per-column min and max of the rows not skipped, and the size of that box of keys
    (``_LUT_MAX + 1`` when it is larger than a lookup table may be)."""
    n = keys.shape[0]
    w = keys.shape[1]
    has_skip = skip.shape[0] > 0
    lo = np.full(w, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(w, np.iinfo(np.int64).min, dtype=np.int64)
    for i in range(n):
        if has_skip and skip[i]:
            continue
        for c in range(w):
            v = keys[i, c]
            if v < lo[c]:
                lo[c] = v
            if v > hi[c]:
                hi[c] = v
    domain = 1
    for c in range(w):
        if lo[c] > hi[c]:
            return lo, hi, 1  # every row skipped
        if lo[c] < -_SAFE or hi[c] > _SAFE or hi[c] - lo[c] >= _LUT_MAX:
            return lo, hi, _LUT_MAX + 1
        domain *= hi[c] - lo[c] + 1
        if domain > _LUT_MAX:
            return lo, hi, _LUT_MAX + 1
    return lo, hi, domain


@njit(cache=True, nogil=True)
def assign_groups_from(
    keys: np.ndarray, skip: np.ndarray, slots: np.ndarray, gkeys: np.ndarray, n_groups: int,
    gids: np.ndarray, start: int, lut: np.ndarray, lo: np.ndarray, hi: np.ndarray,
) -> tuple[int, int]:
    """Resumable core of :func:`assign_groups`: fills ``gids[start:]`` until a new group would
    not fit ``gkeys`` or would load ``slots`` over one half; returns ``(row reached, n_groups)``.

    The arrays are never reassigned here (numba refcounts reassigned arrays on every access);
    the caller grows them and resumes. An empty ``lut`` disables the lookup table.
    """
    n = keys.shape[0]
    w = keys.shape[1]
    has_skip = skip.shape[0] > 0
    use_lut = lut.shape[0] > 0
    mask = slots.shape[0] - 1
    for i in range(start, n):
        if has_skip and skip[i]:
            gids[i] = -1
            continue
        d = 0
        if use_lut:
            for c in range(w):
                d = d * (hi[c] - lo[c] + 1) + (keys[i, c] - lo[c])
            g = lut[d]
            if g >= 0:
                gids[i] = g
                continue
        j = hash_words(keys, i) & mask
        g = slots[j]
        while g >= 0 and not _same_key(gkeys, g, keys, i):
            j = (j + 1) & mask
            g = slots[j]
        if g < 0:
            if n_groups == gkeys.shape[0] or 2 * (n_groups + 1) > slots.shape[0]:
                return i, n_groups
            for c in range(w):
                gkeys[n_groups, c] = keys[i, c]
            slots[j] = n_groups
            g = n_groups
            n_groups += 1
        if use_lut:
            lut[d] = g
        gids[i] = g
    return n, n_groups


def assign_groups(
    keys: np.ndarray, skip: np.ndarray, slots: np.ndarray, gkeys: np.ndarray, n_groups: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Map each row of ``keys`` (n, w) to a group id, creating groups in first-seen order.

    ``slots`` is an open-addressing table (power-of-two size, -1 = empty) of group ids;
    ``gkeys`` (capacity, w) holds each group's key words. Rows with ``skip[i]`` true (when
    ``skip`` is non-empty) get -1. Returns ``(gids, slots, gkeys, n_groups)``; the arrays may be
    new, larger ones.

    When the batch's key words span a small box (the product of the column ranges is at most
    2**16), rows are first mapped through a lookup table indexed by their position in that box,
    so the hash table is probed once per distinct key of the batch instead of once per row.
    """
    n = keys.shape[0]
    gids = np.empty(n, dtype=np.int64)
    lo, hi, domain = key_box(keys, skip)
    lut = np.full(domain, -1, dtype=np.int64) if domain <= _LUT_MAX and n >= 64 else _NO_LUT
    i = 0
    while True:
        i, n_groups = assign_groups_from(keys, skip, slots, gkeys, n_groups, gids, i, lut, lo, hi)
        if i >= n:
            return gids, slots, gkeys, n_groups
        if n_groups == gkeys.shape[0]:
            bigger = np.empty((max(2 * n_groups, 16), keys.shape[1]), dtype=np.int64)
            bigger[:n_groups] = gkeys[:n_groups]
            gkeys = bigger
        if 2 * (n_groups + 1) > slots.shape[0]:
            slots = rehash(slots, gkeys, n_groups)


@njit(cache=True, nogil=True)
def pack_strings(
    offsets: np.ndarray, data: np.ndarray, valid: np.ndarray, out: np.ndarray, col: int
) -> int:
    """Code strings of at most 7 bytes as ``len << 56 | bytes`` into ``out[:, col]``.

    The code is a bijection on such strings, the same in every batch, so no dictionary is needed.
    Longer strings get -1 and are counted (the caller interns them); nulls get 0.
    """
    n = offsets.shape[0] - 1
    has_valid = valid.shape[0] > 0
    n_long = 0
    for i in range(n):
        if has_valid and not valid[i]:
            out[i, col] = 0
            continue
        s = offsets[i]
        length = offsets[i + 1] - s
        if length > 7:
            out[i, col] = _LONG
            n_long += 1
            continue
        v = np.int64(length) << 56
        for k in range(length):
            v |= np.int64(data[s + k]) << (8 * k)
        out[i, col] = v
    return n_long


@njit(cache=True, nogil=True)
def unpack_strings(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`pack_strings` for codes >= 0: (int64 offsets, bytes); others are empty."""
    n = codes.shape[0]
    offsets = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        c = codes[i]
        offsets[i + 1] = offsets[i] + ((c >> 56) if c >= 0 else 0)
    data = np.empty(offsets[n], dtype=np.uint8)
    for i in range(n):
        c = codes[i]
        if c < 0:
            continue
        for k in range(offsets[i + 1] - offsets[i]):
            data[offsets[i] + k] = (c >> (8 * k)) & 0xFF
    return offsets, data


@njit(cache=True, nogil=True)
def lookup_rows(keys: np.ndarray, slots: np.ndarray, gkeys: np.ndarray) -> np.ndarray:
    """Group id of each row of ``keys`` in the table ``(slots, gkeys)``, ``-1`` where absent.

    The read-only probe of :func:`assign_groups`: no group is created.
    """
    n = keys.shape[0]
    out = np.full(n, -1, dtype=np.int64)
    mask = slots.shape[0] - 1
    for i in range(n):
        j = hash_words(keys, i) & mask
        g = slots[j]
        while g >= 0 and not _same_key(gkeys, g, keys, i):
            j = (j + 1) & mask
            g = slots[j]
        out[i] = g
    return out
