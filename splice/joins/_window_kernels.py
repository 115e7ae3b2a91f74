"""Numba kernel of the window join's close, with the plain twin the tests compare.

``expand_windows(k_open, times, codes, slide, lo_k, hi_k, offset)`` lists the ``(row, window)``
pairs of one retained batch whose windows lie in ``lo_k..hi_k``: row ``i`` belongs to windows
``k_open[i] .. times[i] // slide`` (its first open window to the last that covers its time). One
pass counts, one fills, instead of the eight NumPy passes (``repeat``, ``cumsum``, gathers) that
make the same pairs; a tumbling window gives one pair per row. ``ordered``: ``k_open`` is
nondecreasing (a batch in time order), so the rows stop at the first whose windows all lie past
``hi_k``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["expand_windows", "expand_windows_py"]


@njit(cache=True, nogil=True)
def expand_windows(k_open: np.ndarray, times: np.ndarray, codes: np.ndarray, slide: int,
                   lo_k: int, hi_k: int, offset: int, ordered: bool) -> tuple[np.ndarray, int]:
    """``(buf, m)``: the ``m`` pairs' rows plus ``offset`` in ``buf[:m]``, windows in
    ``buf[m:2m]`` and the rows' key codes in ``buf[2m:3m]``, ordered by row, then window (one
    array to hand back: each array returned from compiled code costs about a microsecond)."""
    n = len(times)
    m = 0
    for i in range(n):
        if ordered and k_open[i] > hi_k:
            n = i
            break
        a = max(k_open[i], lo_k)
        z = min(times[i] // slide, hi_k)
        if z >= a:
            m += z - a + 1
    buf = np.empty(3 * m, dtype=np.int64)
    j = 0
    for i in range(n):
        a = max(k_open[i], lo_k)
        z = min(times[i] // slide, hi_k)
        for k in range(a, z + 1):
            buf[j] = i + offset
            buf[m + j] = k
            buf[2 * m + j] = codes[i]
            j += 1
    return buf, m


def expand_windows_py(k_open: np.ndarray, times: np.ndarray, codes: np.ndarray, slide: int,
                      lo_k: int, hi_k: int, offset: int, ordered: bool = False
                      ) -> tuple[np.ndarray, int]:
    """Plain twin of :func:`expand_windows`, one row and window at a time."""
    rows, ks, cs = [], [], []
    for i in range(len(times)):
        for k in range(max(int(k_open[i]), lo_k), min(int(times[i]) // slide, hi_k) + 1):
            rows.append(i + offset)
            ks.append(k)
            cs.append(int(codes[i]))
    return np.array(rows + ks + cs, dtype=np.int64), len(rows)
