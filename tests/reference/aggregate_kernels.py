"""Plain-Python references of the group-by aggregate's numba kernels (:mod:`splice.ops._agg_kernels`).

Same arguments and conventions as the kernels: ``gids`` one group id per row (``-1``: no group),
``valid`` a boolean array or an empty one meaning "every row is valid". Loops over rows, exact
Python integers where the kernels use two ``int64`` limbs.
"""

from __future__ import annotations

import numpy as np


def py_max_abs(vals: np.ndarray) -> int:
    """Reference of ``max_abs``."""
    return max((abs(int(v)) for v in vals), default=0)


def py_decimal_low_words(words: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, int, bool]:
    """Reference of ``decimal_low_words``."""
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


def py_count_rows(gids: np.ndarray, valid: np.ndarray, counts: np.ndarray) -> None:
    """Reference of ``count_rows``."""
    for i, g in enumerate(gids):
        if g >= 0 and (len(valid) == 0 or valid[i]):
            counts[g] += 1


def py_sum128(gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, sums: dict[int, int]) -> None:
    """Reference of ``sum128`` (and of ``sum_i64`` + ``fold128``), in exact Python ints."""
    for i, g in enumerate(gids):
        if g < 0 or (len(valid) and not valid[i]):
            continue
        sums[int(g)] = sums.get(int(g), 0) + int(vals[i])


def py_normalize128(hi: np.ndarray, lo: np.ndarray) -> None:
    """Reference of ``normalize128``."""
    for g in range(len(hi)):
        hi[g] += lo[g] >> 32
        lo[g] &= 0xFFFFFFFF


def py_sum_f64(gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, sums: np.ndarray) -> None:
    """Reference of ``sum_f64``."""
    for i, g in enumerate(gids):
        if g >= 0 and (len(valid) == 0 or valid[i]):
            sums[g] += vals[i]


def py_min_i64(gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, best: np.ndarray) -> None:
    """Reference of ``min_i64`` (and of ``min_f64``, the same kernel)."""
    for i, g in enumerate(gids):
        if g >= 0 and (len(valid) == 0 or valid[i]) and vals[i] < best[g]:
            best[g] = vals[i]


def py_max_i64(gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, best: np.ndarray) -> None:
    """Reference of ``max_i64`` (and of ``max_f64``, the same kernel)."""
    for i, g in enumerate(gids):
        if g >= 0 and (len(valid) == 0 or valid[i]) and vals[i] > best[g]:
            best[g] = vals[i]


def py_sum_i64(gids: np.ndarray, vals: np.ndarray, valid: np.ndarray, part: np.ndarray) -> None:
    """Reference of ``sum_i64``."""
    for i, g in enumerate(gids):
        if g >= 0 and (len(valid) == 0 or valid[i]):
            part[g] += vals[i]
