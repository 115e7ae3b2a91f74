"""Numba kernels of the group-by aggregate's folds (the group ids come from
:mod:`splice.kernels.group_keys`); the tests check each against its plain-Python reference in
``tests/reference/aggregate_kernels.py``.

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
    "decimal_low_words",
    "max_abs",
    "count_rows",
    "sum128",
    "sum_i64",
    "fold128",
    "limbs_to_int",
    "normalize128",
    "sum_f64",
    "min_i64",
    "max_i64",
    "min_f64",
    "max_f64",
]

_LOW32 = np.int64(0xFFFFFFFF)
_I64_MIN = np.iinfo(np.int64).min
_CARRY_AT = np.int64(1) << 62


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
    # a min/max pass without branches vectorizes; |INT64_MIN| does not fit: -1 says 2**63
    if vals.shape[0] == 0:
        return np.int64(0)
    lo = vals[0]
    hi = vals[0]
    for i in range(1, vals.shape[0]):
        v = vals[i]
        lo = min(lo, v)
        hi = max(hi, v)
    if lo == _I64_MIN:
        return np.int64(-1)
    return max(hi, -lo)


def max_abs(vals: np.ndarray) -> int:
    """max |v| over an int64 array (may be a strided view) as a Python int; ``2**63`` for INT64_MIN."""
    if len(vals) == 0:
        return 0
    b = int(max_abs_kernel(vals))
    return b if b >= 0 else 1 << 63


@njit(cache=True, nogil=True)
def count_rows(gids: np.ndarray, valid: np.ndarray, counts: np.ndarray) -> None:
    """``counts[g] += 1`` for every row of group g (that is valid, when ``valid`` is given)."""
    has_valid = valid.shape[0] > 0
    for i in range(gids.shape[0]):
        g = gids[i]
        if g >= 0 and (not has_valid or valid[i]):
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


@njit(cache=True, nogil=True)
def sum_i64(gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, part: np.ndarray) -> None:
    """Per-group int64 sums of one batch into ``part``; the caller proves they cannot overflow."""
    has_valid = valid.shape[0] > 0
    for i in range(gids.shape[0]):
        g = gids[i]
        if g >= 0 and (not has_valid or valid[i]):
            part[g] += vals[i]


@njit(cache=True, nogil=True)
def fold128(hi: np.ndarray, lo: np.ndarray, part: np.ndarray) -> None:
    """Add int64 per-group partial sums ``part`` into the limbs ``(hi, lo)``."""
    for g in range(part.shape[0]):
        p = part[g]
        lo[g] += p & _LOW32
        hi[g] += (p >> 32) + (lo[g] >> 32)
        lo[g] &= _LOW32
