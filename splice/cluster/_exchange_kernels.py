"""Numba kernel of the exchange: each row's key group and target subtask, and the rows
counting-sorted by target in one pass (rows keep their order within a target)."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["split_rows"]

_GOLDEN = np.int64(-7046029254386353131)  # 2**64 / golden ratio, as int64


@njit(cache=True, nogil=True)
def split_rows(codes: np.ndarray, valid: np.ndarray, groups: int, targets: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(order, starts, group)``: the rows ordered by target (``order[starts[t]:starts[t+1]]``
    are target ``t``'s rows, in input order) and each row's key group. A row's group is its key
    code's Fibonacci hash modulo ``groups`` (a row with a null key, ``valid`` false, is group 0);
    group ``g`` belongs to target ``g * targets // groups``, so a subtask holds whole groups."""
    n = codes.shape[0]
    has_valid = valid.shape[0] > 0
    group = np.empty(n, dtype=np.int64)
    counts = np.zeros(targets + 1, dtype=np.int64)
    for i in range(n):
        g = 0
        if not has_valid or valid[i]:
            h = codes[i] * _GOLDEN
            h ^= h >> 31
            g = (h & np.int64(0x7FFFFFFFFFFFFFFF)) % groups
        group[i] = g
        counts[g * targets // groups + 1] += 1
    for t in range(targets):
        counts[t + 1] += counts[t]
    fill = counts[:targets].copy()
    order = np.empty(n, dtype=np.int64)
    for i in range(n):
        t = group[i] * targets // groups
        order[fill[t]] = i
        fill[t] += 1
    return order, counts, group
