"""Numba kernels of the group-by aggregate, each with a plain-Python twin (``py_*``) for tests.

Conventions: ``gids`` holds one group id per row, ``-1`` for a row that takes part in no group
(filtered out, or outside every window); ``valid`` is a boolean array, or an empty one meaning
"every row is valid". Exact integer sums use two ``int64`` limbs per group, ``value = hi * 2**32
+ lo`` with ``0 <= lo < 2**32``, so sums are exact up to ``2**94`` without Python ints. A batch
whose values are small enough (``bound * rows < 2**63``) is summed per group in plain int64
(``sum_i64``) and folded into the limbs once per group (``fold128``); otherwise each row adds
its low 32 bits to ``lo`` and its arithmetic high part to ``hi`` (``sum128``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = [
    "assign_groups",
    "py_assign_groups",
    "lookup_rows",
    "py_lookup_rows",
    "decimal_low_words",
    "max_abs",
    "py_max_abs",
    "py_decimal_low_words",
    "count_rows",
    "py_count_rows",
    "sum128",
    "py_sum128",
    "sum_i64",
    "py_sum_i64",
    "fold128",
    "limbs_to_int",
    "pack_strings",
    "py_pack_strings",
    "unpack_strings",
    "normalize128",
    "py_normalize128",
    "sum_f64",
    "py_sum_f64",
    "min_i64",
    "max_i64",
    "py_min_i64",
    "py_max_i64",
    "min_f64",
    "max_f64",
    "py_min_f64",
    "py_max_f64",
]

_LOW32 = np.int64(0xFFFFFFFF)
_I64_MIN = np.iinfo(np.int64).min
_CARRY_AT = np.int64(1) << 62
_MUL = np.int64(-7046029254386353131)  # 0x9E3779B97F4A7C15 as int64 (Fibonacci hashing)


@njit(cache=True, nogil=True)
def _hash_row(keys: np.ndarray, i: int) -> np.int64:
    h = np.int64(0x2545F4914F6CDD1D)
    for c in range(keys.shape[1]):
        h = (h ^ keys[i, c]) * _MUL
        h ^= h >> 29
    return h


@njit(cache=True, nogil=True)
def _rehash(slots: np.ndarray, gkeys: np.ndarray, n_groups: int) -> np.ndarray:
    cap = slots.shape[0] * 2
    mask = cap - 1
    out = np.full(cap, -1, dtype=np.int64)
    for g in range(n_groups):
        j = _hash_row(gkeys, g) & mask
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


_LUT_MAX = 1 << 16
_SAFE = np.int64(1) << 61


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
        j = _hash_row(keys, i) & mask
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


_NO_LUT = np.full(0, -1, dtype=np.int64)


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
            slots = _rehash(slots, gkeys, n_groups)


_LONG = np.int64(-1)


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


def py_pack_strings(values: list[bytes | None]) -> list[int]:
    """Twin of :func:`pack_strings` over Python byte strings."""
    out = []
    for v in values:
        if v is None:
            out.append(0)
        elif len(v) > 7:
            out.append(-1)
        else:
            out.append((len(v) << 56) | int.from_bytes(v, "little"))
    return out


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


def py_assign_groups(
    keys: np.ndarray, skip: np.ndarray, table: dict[tuple[int, ...], int]
) -> np.ndarray:
    """Twin of :func:`assign_groups` with a dict as the table (updated in place)."""
    gids = np.empty(keys.shape[0], dtype=np.int64)
    for i in range(keys.shape[0]):
        if len(skip) and skip[i]:
            gids[i] = -1
            continue
        k = tuple(int(x) for x in keys[i])
        gids[i] = table.setdefault(k, len(table))
    return gids


@njit(cache=True, nogil=True)
def decimal_low_words(words: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, int, bool]:
    """From decimal128 words (n, 2): the low words (nulls as 0), max |value|, and whether all fit int64.

    ``valid`` is empty when every row is valid.
    """
    n = words.shape[0]
    has_valid = valid.shape[0] > 0
    out = np.empty(n, dtype=np.int64)
    bound = np.int64(0)
    fits = True
    for i in range(n):
        if has_valid and not valid[i]:
            out[i] = 0
            continue
        lo = words[i, 0]
        if words[i, 1] != (lo >> 63) or lo == _I64_MIN:
            fits = False
            out[i] = 0
            continue
        out[i] = lo
        a = lo if lo >= 0 else -lo
        if a > bound:
            bound = a
    return out, int(bound), fits


@njit(cache=True, nogil=True)
def max_abs_kernel(vals: np.ndarray) -> np.int64:
    bound = np.int64(0)
    for i in range(vals.shape[0]):
        v = vals[i]
        if v == _I64_MIN:
            return np.int64(-1)  # |INT64_MIN| does not fit: the caller reads -1 as 2**63
        a = v if v >= 0 else -v
        if a > bound:
            bound = a
    return bound


def max_abs(vals: np.ndarray) -> int:
    """max |v| over an int64 array (may be a strided view) as a Python int; ``2**63`` for INT64_MIN."""
    if len(vals) == 0:
        return 0
    b = int(max_abs_kernel(vals))
    return b if b >= 0 else 1 << 63


def py_max_abs(vals: np.ndarray) -> int:
    """Twin of :func:`max_abs`."""
    return max((abs(int(v)) for v in vals), default=0)


def py_decimal_low_words(words: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, int, bool]:
    out = np.zeros(words.shape[0], dtype=np.int64)
    bound, fits = 0, True
    for i in range(words.shape[0]):
        if len(valid) and not valid[i]:
            continue
        v = (int(words[i, 1]) << 64) | (int(words[i, 0]) & ((1 << 64) - 1))
        if not -(2**63) < v < 2**63:
            fits = False
            continue
        out[i] = v
        bound = max(bound, abs(v))
    return out, bound, fits


@njit(cache=True, nogil=True)
def count_rows(gids: np.ndarray, valid: np.ndarray, counts: np.ndarray) -> None:
    """``counts[g] += 1`` for every row of group g (that is valid, when ``valid`` is given)."""
    has_valid = valid.shape[0] > 0
    for i in range(gids.shape[0]):
        g = gids[i]
        if g >= 0 and (not has_valid or valid[i]):
            counts[g] += 1


def py_count_rows(gids: np.ndarray, valid: np.ndarray, counts: np.ndarray) -> None:
    for i, g in enumerate(gids):
        if g >= 0 and (len(valid) == 0 or valid[i]):
            counts[g] += 1


@njit(cache=True, nogil=True)
def sum128(gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> None:
    """Exact per-group sums of int64 ``vals`` straight into the limbs ``(hi, lo)``.

    For batches whose partial sums might overflow int64 (see :func:`sum_i64`), or with many more
    groups than rows. ``lo`` is carried into ``hi`` only when it grows past 2**62, so the limbs
    are not normalized afterwards: call :func:`normalize128` before reading them as words.
    """
    has_valid = valid.shape[0] > 0
    for i in range(gids.shape[0]):
        g = gids[i]
        if g < 0 or (has_valid and not valid[i]):
            continue
        v = vals[i]
        low = lo[g] + (v & _LOW32)
        if low >= _CARRY_AT:  # carry lazily, long before lo could overflow
            hi[g] += low >> 32
            low &= _LOW32
        lo[g] = low
        hi[g] += v >> 32


@njit(cache=True, nogil=True)
def normalize128(hi: np.ndarray, lo: np.ndarray) -> None:
    """Carry each ``lo`` limb into ``hi`` so that ``0 <= lo < 2**32``."""
    for g in range(hi.shape[0]):
        hi[g] += lo[g] >> 32
        lo[g] &= _LOW32


def py_sum128(gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, sums: dict[int, int]) -> None:
    """Twin of :func:`sum128` / :func:`sum_i64` + :func:`fold128` with exact Python ints."""
    for i, g in enumerate(gids):
        if g < 0 or (len(valid) and not valid[i]):
            continue
        sums[int(g)] = sums.get(int(g), 0) + int(vals[i])


def limbs_to_int(hi: np.ndarray, lo: np.ndarray) -> list[int]:
    """The exact values ``hi * 2**32 + lo`` as Python ints (for tests and slow paths)."""
    return [(int(h) << 32) + int(low) for h, low in zip(hi, lo, strict=True)]


@njit(cache=True, nogil=True)
def sum_f64(gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, sums: np.ndarray) -> None:
    """Per-group float64 sums, added in row order."""
    has_valid = valid.shape[0] > 0
    for i in range(gids.shape[0]):
        g = gids[i]
        if g >= 0 and (not has_valid or valid[i]):
            sums[g] += vals[i]


def py_sum_f64(gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, sums: np.ndarray) -> None:
    for i, g in enumerate(gids):
        if g >= 0 and (len(valid) == 0 or valid[i]):
            sums[g] += vals[i]


@njit(cache=True, nogil=True)
def min_i64(gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, best: np.ndarray) -> None:
    """Per-group minimum of the valid rows into ``best`` (initialised to the type's maximum)."""
    has_valid = valid.shape[0] > 0
    for i in range(gids.shape[0]):
        g = gids[i]
        if g >= 0 and (not has_valid or valid[i]) and vals[i] < best[g]:
            best[g] = vals[i]


@njit(cache=True, nogil=True)
def max_i64(gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, best: np.ndarray) -> None:
    """Per-group maximum of the valid rows into ``best`` (initialised to the type's minimum)."""
    has_valid = valid.shape[0] > 0
    for i in range(gids.shape[0]):
        g = gids[i]
        if g >= 0 and (not has_valid or valid[i]) and vals[i] > best[g]:
            best[g] = vals[i]


#: The float kernels are the same code; numba compiles one specialization per dtype.
min_f64 = min_i64
max_f64 = max_i64


def py_min_i64(gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, best: np.ndarray) -> None:
    for i, g in enumerate(gids):
        if g >= 0 and (len(valid) == 0 or valid[i]) and vals[i] < best[g]:
            best[g] = vals[i]


def py_max_i64(gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, best: np.ndarray) -> None:
    for i, g in enumerate(gids):
        if g >= 0 and (len(valid) == 0 or valid[i]) and vals[i] > best[g]:
            best[g] = vals[i]


py_min_f64 = py_min_i64
py_max_f64 = py_max_i64


@njit(cache=True, nogil=True)
def sum_i64(gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, part: np.ndarray) -> None:
    """Per-group int64 sums of one batch into ``part``; the caller proves they cannot overflow."""
    has_valid = valid.shape[0] > 0
    for i in range(gids.shape[0]):
        g = gids[i]
        if g >= 0 and (not has_valid or valid[i]):
            part[g] += vals[i]


def py_sum_i64(gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, part: np.ndarray) -> None:
    for i, g in enumerate(gids):
        if g >= 0 and (len(valid) == 0 or valid[i]):
            part[g] += vals[i]


@njit(cache=True, nogil=True)
def fold128(hi: np.ndarray, lo: np.ndarray, part: np.ndarray) -> None:
    """Add int64 per-group partial sums ``part`` into the limbs ``(hi, lo)``."""
    for g in range(part.shape[0]):
        p = part[g]
        lo[g] += p & _LOW32
        hi[g] += (p >> 32) + (lo[g] >> 32)
        lo[g] &= _LOW32


def py_normalize128(hi: np.ndarray, lo: np.ndarray) -> None:
    for g in range(len(hi)):
        hi[g] += lo[g] >> 32
        lo[g] &= 0xFFFFFFFF


@njit(cache=True, nogil=True)
def lookup_rows(keys: np.ndarray, slots: np.ndarray, gkeys: np.ndarray) -> np.ndarray:
    """Group id of each row of ``keys`` in the table ``(slots, gkeys)``, ``-1`` where absent.

    The read-only probe of :func:`assign_groups`: no group is created.
    """
    n = keys.shape[0]
    out = np.full(n, -1, dtype=np.int64)
    mask = slots.shape[0] - 1
    for i in range(n):
        j = _hash_row(keys, i) & mask
        g = slots[j]
        while g >= 0 and not _same_key(gkeys, g, keys, i):
            j = (j + 1) & mask
            g = slots[j]
        out[i] = g
    return out


def py_lookup_rows(keys: np.ndarray, table: dict[tuple[int, ...], int]) -> np.ndarray:
    """Twin of :func:`lookup_rows` over a dict table."""
    return np.array([table.get(tuple(int(x) for x in row), -1) for row in keys], dtype=np.int64)
