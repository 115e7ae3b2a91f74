"""User functions for the UDF tests (module level, so numba caches their kernels)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def ledger_udf(value: float, p: np.ndarray) -> tuple[float, bool]:
    """``p[0]`` selects: 0 debit ``p[1]`` plus fee ``p[2]``, abort below zero; 1 ``value * p[1] +
    p[2]``; 2 a NaN result (always aborts); 3 keep the value, abort unless it is ``<= p[1]``;
    4 raise when the value is above ``p[1]`` (the transaction aborts, "user function raised")."""
    op = int(p[0])
    if op == 0:
        new = value - p[1] - p[2]
        return new, new >= 0.0
    if op == 1:
        return value * p[1] + p[2], True
    if op == 2:
        return np.nan, True
    if op == 4:
        if value > p[1]:
            raise ValueError("value above the limit")
        return value + 1.0, True
    return value, value <= p[1]


@njit(cache=True, nogil=True)
def returns_one_value(value: float, p: np.ndarray) -> float:
    return value
