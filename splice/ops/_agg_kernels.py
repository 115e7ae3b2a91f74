"""Numba kernels of the group-by aggregate, each with a plain-Python twin (``py_*``) for tests.

Conventions: ``gids`` holds one group id per row, ``-1`` for a row that takes part in no group
(filtered out, or outside every window); ``valid`` is a boolean array, or an empty one meaning
"every row is valid". Exact integer sums use two ``int64`` limbs per group, ``value = hi * 2**32
+ lo``: a row adds its low 32 bits to ``lo`` and its arithmetic high part to ``hi``; ``normalize128``
carries ``lo`` into ``hi`` after each batch, so sums are exact up to ``2**94`` without Python ints.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = [
    "assign_groups",
    "py_assign_groups",
    "decimal_low_words",
    "py_decimal_low_words",
    "count_rows",
    "py_count_rows",
    "sum128",
    "py_sum128",
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
def assign_groups(
    keys: np.ndarray, skip: np.ndarray, slots: np.ndarray, gkeys: np.ndarray, n_groups: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Map each row of ``keys`` (n, w) to a group id, creating groups in first-seen order.

    ``slots`` is an open-addressing table (power-of-two size, -1 = empty) of group ids;
    ``gkeys`` (capacity, w) holds each group's key words. Rows with ``skip[i]`` true (when
    ``skip`` is non-empty) get -1. Returns ``(gids, slots, gkeys, n_groups)``; the arrays may be
    new, larger ones.
    """
    n = keys.shape[0]
    w = keys.shape[1]
    gids = np.empty(n, dtype=np.int64)
    mask = slots.shape[0] - 1
    has_skip = skip.shape[0] > 0
    for i in range(n):
        if has_skip and skip[i]:
            gids[i] = -1
            continue
        j = _hash_row(keys, i) & mask
        while True:
            g = slots[j]
            if g < 0:
                if n_groups == gkeys.shape[0]:
                    bigger = np.empty((max(2 * n_groups, 16), w), dtype=np.int64)
                    bigger[:n_groups] = gkeys[:n_groups]
                    gkeys = bigger
                for c in range(w):
                    gkeys[n_groups, c] = keys[i, c]
                slots[j] = n_groups
                gids[i] = n_groups
                n_groups += 1
                if 2 * n_groups > slots.shape[0]:
                    slots = _rehash(slots, gkeys, n_groups)
                    mask = slots.shape[0] - 1
                break
            same = True
            for c in range(w):
                if gkeys[g, c] != keys[i, c]:
                    same = False
                    break
            if same:
                gids[i] = g
                break
            j = (j + 1) & mask
    return gids, slots, gkeys, n_groups


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
        if words[i, 1] != (lo >> 63) or lo == np.iinfo(np.int64).min:
            fits = False
            out[i] = 0
            continue
        out[i] = lo
        a = lo if lo >= 0 else -lo
        if a > bound:
            bound = a
    return out, int(bound), fits


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
def sum128(
    gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, hi: np.ndarray, lo: np.ndarray,
    counts: np.ndarray,
) -> None:
    """Exact per-group sums of int64 ``vals`` into limbs ``(hi, lo)``; counts the summed rows."""
    has_valid = valid.shape[0] > 0
    for i in range(gids.shape[0]):
        g = gids[i]
        if g < 0 or (has_valid and not valid[i]):
            continue
        v = vals[i]
        lo[g] += v & _LOW32
        hi[g] += v >> 32
        counts[g] += 1
    normalize128(hi, lo)


@njit(cache=True, nogil=True)
def normalize128(hi: np.ndarray, lo: np.ndarray) -> None:
    """Carry each ``lo`` limb into ``hi`` so that ``0 <= lo < 2**32``."""
    for g in range(hi.shape[0]):
        hi[g] += lo[g] >> 32
        lo[g] &= _LOW32


def py_sum128(
    gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, sums: dict[int, int],
    counts: np.ndarray,
) -> None:
    """Twin of :func:`sum128` with Python ints (``sums`` maps group -> exact sum)."""
    for i, g in enumerate(gids):
        if g < 0 or (len(valid) and not valid[i]):
            continue
        sums[int(g)] = sums.get(int(g), 0) + int(vals[i])
        counts[g] += 1


def py_normalize128(hi: np.ndarray, lo: np.ndarray) -> None:
    for g in range(len(hi)):
        hi[g] += lo[g] >> 32
        lo[g] &= 0xFFFFFFFF


@njit(cache=True, nogil=True)
def sum_f64(
    gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, sums: np.ndarray, counts: np.ndarray
) -> None:
    """Per-group float64 sums (in row order) and counts of summed rows."""
    has_valid = valid.shape[0] > 0
    for i in range(gids.shape[0]):
        g = gids[i]
        if g < 0 or (has_valid and not valid[i]):
            continue
        sums[g] += vals[i]
        counts[g] += 1


def py_sum_f64(
    gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, sums: np.ndarray, counts: np.ndarray
) -> None:
    for i, g in enumerate(gids):
        if g >= 0 and (len(valid) == 0 or valid[i]):
            sums[g] += vals[i]
            counts[g] += 1


@njit(cache=True, nogil=True)
def min_i64(
    gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, best: np.ndarray, counts: np.ndarray
) -> None:
    """Per-group minimum of the valid rows into ``best``; ``counts`` says which groups have one."""
    has_valid = valid.shape[0] > 0
    for i in range(gids.shape[0]):
        g = gids[i]
        if g < 0 or (has_valid and not valid[i]):
            continue
        v = vals[i]
        if counts[g] == 0 or v < best[g]:
            best[g] = v
        counts[g] += 1


@njit(cache=True, nogil=True)
def max_i64(
    gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, best: np.ndarray, counts: np.ndarray
) -> None:
    """Per-group maximum of the valid rows into ``best``; ``counts`` says which groups have one."""
    has_valid = valid.shape[0] > 0
    for i in range(gids.shape[0]):
        g = gids[i]
        if g < 0 or (has_valid and not valid[i]):
            continue
        v = vals[i]
        if counts[g] == 0 or v > best[g]:
            best[g] = v
        counts[g] += 1


#: The float kernels are the same code; numba compiles one specialization per dtype.
min_f64 = min_i64
max_f64 = max_i64


def _py_extreme(is_min: bool):  # type: ignore[no-untyped-def]
    def kernel(
        gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, best: np.ndarray,
        counts: np.ndarray,
    ) -> None:
        for i, g in enumerate(gids):
            if g < 0 or (len(valid) and not valid[i]):
                continue
            v = vals[i]
            if counts[g] == 0 or (v < best[g] if is_min else v > best[g]):
                best[g] = v
            counts[g] += 1

    return kernel


py_min_i64 = _py_extreme(True)
py_max_i64 = _py_extreme(False)
py_min_f64 = py_min_i64
py_max_f64 = py_max_i64
