"""Numba kernels of the time-bounded joins, each with a plain-Python twin the tests compare.

* ``hash_bytes(offsets, data)`` — a 64-bit hash (FNV-1a, then a murmur finalizer) of each
  variable-length value ``data[offsets[i]:offsets[i+1]]``: the equi-key code of string and
  binary keys (codes narrow the candidates; real key equality is checked afterwards).
* ``band_pairs(p_codes, p_times, b_codes, b_times, lo, hi)`` — every pair ``(i, j)`` with
  ``p_codes[i] == b_codes[j]`` and ``p_times[i] + lo <= b_times[j] <= p_times[i] + hi``, where
  ``b_codes`` is sorted ascending. Pairs come ordered by ``i``, then by ``j``.
* ``hash_band_pairs`` — the same pairs for any ``b_codes``: a chained hash table over ``B`` built
  per call (the full probe), then probed.
* ``index_insert`` / ``index_probe`` — the key index: a chained hash table over key codes whose
  chains list entries in insertion (arrival) order, probed with the time band.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = [
    "hash_bytes",
    "hash_bytes_py",
    "band_pairs",
    "band_pairs_py",
    "hash_band_pairs",
    "index_insert",
    "index_probe",
    "index_probe_py",
    "new_table",
]

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@njit(cache=True, nogil=True)
def _fmix64(h: np.uint64) -> np.uint64:
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


@njit(cache=True, nogil=True)
def hash_bytes(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """``out[i] = fmix64(fnv1a(data[offsets[i]:offsets[i+1]]))`` as ``uint64``."""
    n = len(offsets) - 1
    out = np.empty(n, dtype=np.uint64)
    for i in range(n):
        h = np.uint64(0xCBF29CE484222325)
        for k in range(offsets[i], offsets[i + 1]):
            h ^= np.uint64(data[k])
            h *= np.uint64(0x100000001B3)
        out[i] = _fmix64(h)
    return out


def _fmix64_py(h: int) -> int:
    m = (1 << 64) - 1
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & m
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & m
    h ^= h >> 33
    return h


def hash_bytes_py(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Plain-Python twin of :func:`hash_bytes`."""
    m = (1 << 64) - 1
    out = []
    for i in range(len(offsets) - 1):
        h = int(_FNV_OFFSET)
        for b in data[offsets[i] : offsets[i + 1]].tolist():
            h ^= int(b)
            h = (h * int(_FNV_PRIME)) & m
        out.append(_fmix64_py(h))
    return np.array(out, dtype=np.uint64)


@njit(cache=True, nogil=True)
def band_pairs(
    p_codes: np.ndarray,
    p_times: np.ndarray,
    b_codes: np.ndarray,
    b_times: np.ndarray,
    lo: int,
    hi: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs ``(i, j)``: equal codes and ``p_times[i]+lo <= b_times[j] <= p_times[i]+hi``.

    ``b_codes`` must be sorted ascending; pairs are ordered by ``i`` then ``j``. Two passes:
    count, then fill, so the output is allocated once.
    """
    n = len(p_codes)
    starts = np.searchsorted(b_codes, p_codes, side="left")
    ends = np.searchsorted(b_codes, p_codes, side="right")
    count = 0
    for i in range(n):
        t0 = p_times[i] + lo
        t1 = p_times[i] + hi
        for j in range(starts[i], ends[i]):
            t = b_times[j]
            if t >= t0 and t <= t1:
                count += 1
    pi = np.empty(count, dtype=np.int64)
    pj = np.empty(count, dtype=np.int64)
    c = 0
    for i in range(n):
        t0 = p_times[i] + lo
        t1 = p_times[i] + hi
        for j in range(starts[i], ends[i]):
            t = b_times[j]
            if t >= t0 and t <= t1:
                pi[c] = i
                pj[c] = j
                c += 1
    return pi, pj


def band_pairs_py(
    p_codes: np.ndarray,
    p_times: np.ndarray,
    b_codes: np.ndarray,
    b_times: np.ndarray,
    lo: int,
    hi: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Plain-Python twin of :func:`band_pairs` (nested loops, no sortedness needed)."""
    pi: list[int] = []
    pj: list[int] = []
    for i in range(len(p_codes)):
        for j in range(len(b_codes)):
            if p_codes[i] == b_codes[j] and p_times[i] + lo <= b_times[j] <= p_times[i] + hi:
                pi.append(i)
                pj.append(j)
    return np.array(pi, dtype=np.int64), np.array(pj, dtype=np.int64)


# -- chained hash index over key codes -----------------------------------------------------------
#
# Entries ``0..n-1`` hold a code, and ``link[e] = (time, next entry)`` side by side so a chain
# step touches one cache line; a table of ``slots`` rows ``(code, first entry, last entry)`` (a
# power of two, linear probing) maps a code to its chain. Chains link entries in insertion order,
# which is row-id (arrival) order.


@njit(cache=True, nogil=True)
def _slot(code: np.int64, mask: int) -> np.int64:
    h = np.uint64(code) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64(h >> np.uint64(20)) & mask


@njit(cache=True, nogil=True)
def index_insert(
    table: np.ndarray, e_code: np.ndarray, link: np.ndarray, start: int, stop: int,
) -> None:
    """Link entries ``start..stop-1`` (codes in ``e_code``, times in ``link[:, 0]``) into chains.

    ``table`` is ``(slots, 3)`` of ``(code, first, last)`` with ``first = -1`` for a free slot.
    """
    mask = table.shape[0] - 1
    for e in range(start, stop):
        c = e_code[e]
        s = _slot(c, mask)
        while table[s, 1] != -1 and table[s, 0] != c:
            s = (s + 1) & mask
        link[e, 1] = -1
        if table[s, 1] == -1:
            table[s, 0] = c
            table[s, 1] = e
        else:
            link[table[s, 2], 1] = e
        table[s, 2] = e


@njit(cache=True, nogil=True)
def index_probe(
    table: np.ndarray, link: np.ndarray, p_codes: np.ndarray, p_times: np.ndarray,
    lo: int, hi: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs ``(i, entry)``: equal codes and ``p_times[i]+lo <= time <= p_times[i]+hi``.

    Ordered by ``i``, then by entry (insertion) order. One pass over the chains; the output
    buffers double when full.
    """
    mask = table.shape[0] - 1
    n = len(p_codes)
    cap = max(16, n)
    pi = np.empty(cap, dtype=np.int64)
    pe = np.empty(cap, dtype=np.int64)
    k = 0
    for i in range(n):
        c = p_codes[i]
        s = _slot(c, mask)
        while table[s, 1] != -1 and table[s, 0] != c:
            s = (s + 1) & mask
        e = table[s, 1]
        t0 = p_times[i] + lo
        t1 = p_times[i] + hi
        while e != -1:
            t = link[e, 0]
            if t >= t0 and t <= t1:
                if k == cap:
                    cap *= 2
                    npi = np.empty(cap, dtype=np.int64)
                    npe = np.empty(cap, dtype=np.int64)
                    npi[:k] = pi[:k]
                    npe[:k] = pe[:k]
                    pi, pe = npi, npe
                pi[k] = i
                pe[k] = e
                k += 1
            e = link[e, 1]
    return pi[:k].copy(), pe[:k].copy()


@njit(cache=True, nogil=True)
def new_table(entries: int) -> np.ndarray:
    """An empty ``(slots, 3)`` table for up to ``entries`` entries (load factor <= 1/2)."""
    slots = 64
    while slots < 2 * entries:
        slots *= 2
    table = np.empty((slots, 3), dtype=np.int64)
    table[:, 1] = -1
    return table


def index_probe_py(
    e_code: np.ndarray, e_time: np.ndarray, n: int, p_codes: np.ndarray, p_times: np.ndarray,
    lo: int, hi: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Plain-Python twin of :func:`index_insert` + :func:`index_probe` over entries ``0..n-1``."""
    return band_pairs_py(p_codes, p_times, e_code[:n], e_time[:n], lo, hi)


@njit(cache=True, nogil=True)
def hash_band_pairs(
    p_codes: np.ndarray, p_times: np.ndarray, b_codes: np.ndarray, b_times: np.ndarray,
    lo: int, hi: int,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`band_pairs` without the sortedness requirement: hash ``B`` once, then probe.

    Pairs ordered by ``i``, then ``j`` (a hash join's build side kept in input order).
    """
    m = len(b_codes)
    table = new_table(m)
    link = np.empty((m, 2), dtype=np.int64)
    link[:, 0] = b_times
    index_insert(table, b_codes, link, 0, m)
    return index_probe(table, link, p_codes, p_times, lo, hi)
