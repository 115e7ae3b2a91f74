"""Numba kernels of the window join (an arriving batch, and the close); the tests compare each with
its plain-Python reference in ``tests/reference/temporal_kernels.py``.

``expand_windows(k_open, times, codes, slide, lo_k, hi_k, offset)`` lists the ``(row, window)``
pairs of one retained batch whose windows lie in ``lo_k..hi_k``: row ``i`` belongs to windows
``k_open[i] .. times[i] // slide`` (its first open window to the last that covers its time). A
counting pass and a filling pass replace the eight NumPy passes (``repeat``, ``cumsum``,
gathers) that make the same pairs. A time-ordered batch is listed window by window (what the
match needs), divides a time only where its rows cross a window edge, and stops at the first row
whose windows all lie past ``hi_k``.

``arrival_windows(t, ...)`` is the bookkeeping of an arriving batch in one pass: whether each
row is late (all its windows closed) and its first open window.

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

from splice.core.time import MIN_TIME
from splice.joins.temporal._interval_kernels import _slot

__all__ = [
    "arrival_windows",
    "expand_windows",
    "window_pairs",
]

_MIN = MIN_TIME


@njit(cache=True, nogil=True)
def arrival_windows(t: np.ndarray, size: int, slide: int, closed: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``(late, k_open)`` of the rows ``t`` arriving on one side while every window ``k <=
    closed`` has closed (``MIN_TIME``: none): ``late[i]`` when every window of row ``i`` has
    closed, ``k_open[i]`` its first window still open (meaningless for a late row)."""
    n = len(t)
    late = np.empty(n, dtype=np.bool_)
    k_open = np.empty(n, dtype=np.int64)
    for i in range(n):
        ti = t[i]
        late[i] = closed != _MIN and ti // slide <= closed
        k_first = (ti - size) // slide + 1
        k_open[i] = k_first if closed == _MIN else max(k_first, closed + 1)
    return late, k_open


@njit(cache=True, nogil=True)
def _last_windows(k_open: np.ndarray, times: np.ndarray, slide: int, hi_k: int) -> np.ndarray:
    # times // slide of a time-ordered batch's rows up to the first whose windows all lie past
    # hi_k, dividing only where the rows cross a window edge
    n = len(times)
    for i in range(n):
        if k_open[i] > hi_k:
            n = i
            break
    last = np.empty(n, dtype=np.int64)
    edge = _MIN
    k = 0
    for i in range(n):
        t = times[i]
        if t >= edge:
            k = t // slide
            edge = (k + 1) * slide
        last[i] = k
    return last


@njit(cache=True, nogil=True)
def _window_runs(k_open: np.ndarray, last: np.ndarray, lo_k: int, hi_k: int,
                 buf: np.ndarray, cap: int, codes: np.ndarray, offset: int) -> int:
    # the pairs of rows 0..len(last)-1 (k_open and last nondecreasing), window by window: the
    # rows of window k are a run a..b-1 between two pointers that only move forward; written
    # into buf (rows, windows, codes at 0, cap, 2 * cap) when it has room; returns the count
    n = len(last)
    if n == 0:
        return 0
    k = max(k_open[0], lo_k)
    z = min(last[n - 1], hi_k)
    m = 0
    a = b = 0  # rows a..b-1 hold window k: last >= k, k_open <= k
    while k <= z:
        while a < n and last[a] < k:
            a += 1
        while b < n and k_open[b] <= k:
            b += 1
        if a == b:  # no row holds k: on to the next row's first window
            k = k_open[b]
            continue
        if m + b - a <= cap:
            for i in range(a, b):
                buf[m + i - a] = i + offset
                buf[cap + m + i - a] = k
                buf[2 * cap + m + i - a] = codes[i]
        m += b - a
        k += 1
    return m


@njit(cache=True, nogil=True)
def expand_windows(k_open: np.ndarray, times: np.ndarray, codes: np.ndarray, slide: int,
                   lo_k: int, hi_k: int, offset: int, ordered: bool
                   ) -> tuple[np.ndarray, int, int]:
    """``(buf, cap, m)``: the ``m`` pairs' rows plus ``offset`` in ``buf[:m]``, windows in
    ``buf[cap:cap + m]`` and the rows' key codes in ``buf[2 * cap:2 * cap + m]``. One array to
    hand back: each array returned from compiled code costs about a microsecond. Counted first,
    then filled: a buffer sized by a bound would be fresh memory, paid for page by page.

    Ordered by row, then window; with ``ordered`` (``times`` and ``k_open`` nondecreasing) by
    window, then row, so that the pairs need no sort to be matched window by window.
    """
    if ordered:
        last = _last_windows(k_open, times, slide, hi_k)
        m = _window_runs(k_open, last, lo_k, hi_k, np.empty(0, np.int64), 0, codes, offset)
        buf = np.empty(3 * m, dtype=np.int64)
        _window_runs(k_open, last, lo_k, hi_k, buf, m, codes, offset)
        return buf, m, m
    n = len(times)
    last = np.empty(n, dtype=np.int64)  # each time divided once, for both passes
    m = 0
    for i in range(n):
        last[i] = times[i] // slide
        a = max(k_open[i], lo_k)
        z = min(last[i], hi_k)
        if z >= a:
            m += z - a + 1
    buf = np.empty(3 * m, dtype=np.int64)
    j = 0
    for i in range(n):
        a = max(k_open[i], lo_k)
        z = min(last[i], hi_k)
        for k in range(a, z + 1):
            buf[j] = i + offset
            buf[m + j] = k
            buf[2 * m + j] = codes[i]
            j += 1
    return buf, m, m


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
