"""Numba kernel of the window join's close, with the plain twin the tests compare.

``expand_windows(k_open, times, codes, slide, lo_k, hi_k, offset)`` lists the ``(row, window)``
pairs of one retained batch whose windows lie in ``lo_k..hi_k``: row ``i`` belongs to windows
``k_open[i] .. times[i] // slide`` (its first open window to the last that covers its time). One
pass instead of the eight NumPy passes (``repeat``, ``cumsum``, gathers) that make the same
pairs; a tumbling window gives one pair per row, and a time-ordered batch divides a time only
where it crosses a window edge. ``ordered``: ``k_open`` is
nondecreasing (a batch in time order), so the rows stop at the first whose windows all lie past
``hi_k``.

``window_pairs(l_win, l_codes, r_win, r_codes)`` matches those pairs on ``(window, key code)``
for windows listed in nondecreasing order on both sides: a merge over the windows, and per
window shared by both sides a hash table over the right rows of that window alone (a few
thousand rows: it stays in the first-level cache, where one table over every closing window's
rows would miss it). Pairs come ordered by window, left pair, right pair: the emission order,
with no sort.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from splice.joins._interval_kernels import _slot

__all__ = ["expand_windows", "expand_windows_py", "window_pairs", "window_pairs_py"]


@njit(cache=True, nogil=True)
def expand_windows(k_open: np.ndarray, times: np.ndarray, codes: np.ndarray, slide: int,
                   per_row: int, lo_k: int, hi_k: int, offset: int, ordered: bool
                   ) -> tuple[np.ndarray, int, int]:
    """``(buf, cap, m)``: the ``m`` pairs' rows plus ``offset`` in ``buf[:m]``, windows in
    ``buf[cap:cap + m]`` and the rows' key codes in ``buf[2 * cap:2 * cap + m]``, ordered by row,
    then window. ``per_row`` bounds a row's windows (``ceil(size / slide)``). One array to hand
    back: each array returned from compiled code costs about a microsecond."""
    n = len(times)
    cap = max(1, n * per_row)
    buf = np.empty(3 * cap, dtype=np.int64)
    m = 0
    last = 0  # times[i] // slide, divided only when a row crosses a window edge
    edge = np.iinfo(np.int64).min
    for i in range(n):
        if ordered:
            if k_open[i] > hi_k:
                break
            t = times[i]
            if t >= edge or t < edge - slide:
                last = t // slide
                edge = (last + 1) * slide
        else:
            last = times[i] // slide
        a = max(k_open[i], lo_k)
        z = min(last, hi_k)
        for k in range(a, z + 1):
            buf[m] = i + offset
            buf[cap + m] = k
            buf[2 * cap + m] = codes[i]
            m += 1
    return buf, cap, m


def expand_windows_py(k_open: np.ndarray, times: np.ndarray, codes: np.ndarray, slide: int,
                      lo_k: int, hi_k: int, offset: int) -> tuple[np.ndarray, int]:
    """Plain twin of :func:`expand_windows`: rows, windows and codes, one after the other."""
    rows, ks, cs = [], [], []
    for i in range(len(times)):
        for k in range(max(int(k_open[i]), lo_k), min(int(times[i]) // slide, hi_k) + 1):
            rows.append(i + offset)
            ks.append(k)
            cs.append(int(codes[i]))
    return np.array(rows + ks + cs, dtype=np.int64), len(rows)


@njit(cache=True, nogil=True)
def _run_end(a: np.ndarray, i: int) -> int:
    v = a[i]
    n = len(a)
    while i < n and a[i] == v:
        i += 1
    return i


@njit(cache=True, nogil=True)
def _window_fill(l_win: np.ndarray, l_codes: np.ndarray, r_win: np.ndarray, r_codes: np.ndarray,
                 pi: np.ndarray, pj: np.ndarray) -> int:
    """Write the pairs of :func:`window_pairs` while ``pi``/``pj`` have room; return how many
    there are."""
    nl, nr = len(l_win), len(r_win)
    longest = 0
    j = 0
    while j < nr:
        j1 = _run_end(r_win, j)
        longest = max(longest, j1 - j)
        j = j1
    size = 16
    while size < 2 * longest:
        size *= 2
    mask = size - 1
    code = np.empty(size, dtype=np.int64)
    head = np.full(size, -1, dtype=np.int64)
    tail = np.empty(size, dtype=np.int64)
    used = np.empty(size, dtype=np.int64)
    nxt = np.empty(nr, dtype=np.int64)
    cap = len(pi)
    k = 0
    i = j = 0
    while i < nl and j < nr:
        if l_win[i] < r_win[j]:
            i = _run_end(l_win, i)
            continue
        if r_win[j] < l_win[i]:
            j = _run_end(r_win, j)
            continue
        i1 = _run_end(l_win, i)
        j1 = _run_end(r_win, j)
        n_used = 0
        for r in range(j, j1):  # chains in right order
            c = r_codes[r]
            s = _slot(c, mask)
            while head[s] != -1 and code[s] != c:
                s = (s + 1) & mask
            nxt[r] = -1
            if head[s] == -1:
                code[s] = c
                head[s] = r
                used[n_used] = s
                n_used += 1
            else:
                nxt[tail[s]] = r
            tail[s] = r
        for q in range(i, i1):
            c = l_codes[q]
            s = _slot(c, mask)
            while head[s] != -1 and code[s] != c:
                s = (s + 1) & mask
            r = head[s]
            while r != -1:
                if k < cap:
                    pi[k] = q
                    pj[k] = r
                k += 1
                r = nxt[r]
        for u in range(n_used):
            head[used[u]] = -1
        i, j = i1, j1
    return k


@njit(cache=True, nogil=True)
def window_pairs(l_win: np.ndarray, l_codes: np.ndarray, r_win: np.ndarray, r_codes: np.ndarray
                 ) -> tuple[np.ndarray, int, int]:
    """``(buf, cap, k)``: the ``k`` pairs ``(i, j)`` with ``l_win[i] == r_win[j]`` and
    ``l_codes[i] == r_codes[j]``, left indexes in ``buf[:k]``, right in ``buf[cap:cap + k]``;
    ``l_win`` and ``r_win`` nondecreasing."""
    cap = max(16, len(l_win) + len(r_win))
    buf = np.empty(2 * cap, dtype=np.int64)
    k = _window_fill(l_win, l_codes, r_win, r_codes, buf[:cap], buf[cap:])
    if k > cap:
        cap = k
        buf = np.empty(2 * cap, dtype=np.int64)
        k = _window_fill(l_win, l_codes, r_win, r_codes, buf[:cap], buf[cap:])
    return buf, cap, k


def window_pairs_py(l_win: np.ndarray, l_codes: np.ndarray, r_win: np.ndarray,
                    r_codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Plain twin of :func:`window_pairs`: every pair, sorted by window, left, right."""
    pairs = [(int(l_win[i]), i, j) for i in range(len(l_win)) for j in range(len(r_win))
             if l_win[i] == r_win[j] and l_codes[i] == r_codes[j]]
    pairs.sort()
    return (np.array([p[1] for p in pairs], dtype=np.int64),
            np.array([p[2] for p in pairs], dtype=np.int64))
