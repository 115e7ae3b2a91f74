"""Plain-Python references of the time-bounded joins' numba kernels: the interval join's
(:mod:`splice.joins.temporal._interval_kernels`) and the window join's
(:mod:`splice.joins.temporal._window_kernels`). Nested loops, Python integers and plain NumPy.
"""

from __future__ import annotations

import numpy as np

from splice.core.time import MIN_TIME

# -- interval join ----------------------------------------------------------------------------


def band_pairs_py(
    p_codes: np.ndarray,
    p_times: np.ndarray,
    b_codes: np.ndarray,
    b_times: np.ndarray,
    lo: int,
    hi: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Reference of ``band_pairs`` (nested loops, no sortedness needed)."""
    pi: list[int] = []
    pj: list[int] = []
    for i in range(len(p_codes)):
        for j in range(len(b_codes)):
            if p_codes[i] == b_codes[j] and p_times[i] + lo <= b_times[j] <= p_times[i] + hi:
                pi.append(i)
                pj.append(j)
    return np.array(pi, dtype=np.int64), np.array(pj, dtype=np.int64)


def index_probe_py(
    e_code: np.ndarray, e_time: np.ndarray, n: int, p_codes: np.ndarray, p_times: np.ndarray,
    lo: int, hi: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Reference of ``index_insert`` + ``index_probe`` over entries ``0..n-1``."""
    return band_pairs_py(p_codes, p_times, e_code[:n], e_time[:n], lo, hi)


def time_range_py(t: np.ndarray) -> tuple[int, int, bool]:
    """Reference of ``time_range``."""
    return int(t.min()), int(t.max()), bool((t[1:] >= t[:-1]).all())


def locate_py(
    row_ids: np.ndarray, starts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Reference of ``locate`` (NumPy's ``unique`` and ``searchsorted``)."""
    batch = np.searchsorted(starts, row_ids, side="right") - 1
    if (batch == batch[0]).all():
        return (row_ids - starts[batch[0]], np.zeros(0, np.int64),
                np.array([batch[0]], np.int64), np.array([0, len(row_ids)], np.int64))
    uniq, inv = np.unique(row_ids, return_inverse=True)
    if len(uniq) == len(row_ids) and (inv == np.arange(len(inv))).all():
        inv = np.zeros(0, np.int64)
    ub = np.searchsorted(starts, uniq, side="right") - 1
    cut = np.flatnonzero(np.diff(ub)) + 1
    cuts = np.concatenate([[0], cut, [len(uniq)]]).astype(np.int64)
    return (uniq - starts[ub]).astype(np.int64), inv.astype(np.int64), ub[cuts[:-1]], cuts


def gather_bits_py(bits: np.ndarray, bit_offset: int, rows: np.ndarray) -> np.ndarray:
    """Reference of ``gather_bits``."""
    flags = np.unpackbits(bits, bitorder="little")[bit_offset + np.asarray(rows, np.int64)]
    return np.packbits(flags, bitorder="little")


def gather_var_py(
    offsets: np.ndarray, data: np.ndarray, bits: np.ndarray, bit_offset: int, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reference of ``gather_var`` (as split by ``var_parts``)."""
    parts = [bytes(data[offsets[r] : offsets[r + 1]]) for r in np.asarray(rows).tolist()]
    off = np.concatenate([[0], np.cumsum([len(p) for p in parts], dtype=np.int64)])
    if offsets.dtype.itemsize == 4 and off[-1] > 2**31 - 1:
        return np.zeros(0, offsets.dtype), np.zeros(0, np.uint8), np.zeros(0, np.uint8)
    valid = gather_bits_py(bits, bit_offset, rows) if len(bits) else np.zeros(0, np.uint8)
    return (off.astype(offsets.dtype), np.frombuffer(b"".join(parts), np.uint8).copy(), valid)


# -- window join ------------------------------------------------------------------------------


def arrival_windows_py(t: np.ndarray, size: int, slide: int, closed: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Reference of ``arrival_windows``, row by row in Python integers."""
    late, k_open = [], []
    for ti in (int(v) for v in t):
        late.append(closed != MIN_TIME and ti // slide <= closed)
        k_first = (ti - size) // slide + 1
        k_open.append(k_first if closed == MIN_TIME else max(k_first, closed + 1))
    return np.array(late, dtype=bool), np.array(k_open, dtype=np.int64)


def expand_windows_py(k_open: np.ndarray, times: np.ndarray, codes: np.ndarray, slide: int,
                      lo_k: int, hi_k: int, offset: int, window_major: bool = False
                      ) -> tuple[np.ndarray, int]:
    """Reference of ``expand_windows``: rows, windows and codes, one after the other."""
    pairs = []
    for i in range(len(times)):
        for k in range(max(int(k_open[i]), lo_k), min(int(times[i]) // slide, hi_k) + 1):
            pairs.append((k, i) if window_major else (i, k))
    pairs.sort()
    rows = [p[1] if window_major else p[0] for p in pairs]
    ks = [p[0] if window_major else p[1] for p in pairs]
    cs = [int(codes[i]) for i in rows]
    return np.array([r + offset for r in rows] + ks + cs, dtype=np.int64), len(rows)


def window_pairs_py(l_win: np.ndarray, l_codes: np.ndarray, r_win: np.ndarray,
                    r_codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reference of ``window_pairs``: every pair, sorted by window, left, right."""
    pairs = [(int(l_win[i]), i, j) for i in range(len(l_win)) for j in range(len(r_win))
             if l_win[i] == r_win[j] and l_codes[i] == r_codes[j]]
    pairs.sort()
    return (np.array([p[1] for p in pairs], dtype=np.int64),
            np.array([p[2] for p in pairs], dtype=np.int64))
