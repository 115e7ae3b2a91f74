"""Numba kernels of the time-bounded joins; the tests compare each with its plain-Python reference
in ``tests/reference/temporal_kernels.py``.

* ``band_pairs(p_codes, p_times, b_codes, b_times, lo, hi)`` — every pair ``(i, j)`` with
  ``p_codes[i] == b_codes[j]`` and ``p_times[i] + lo <= b_times[j] <= p_times[i] + hi``, where
  ``b_codes`` is sorted ascending. Pairs come ordered by ``i``, then by ``j``.
* ``hash_band_pairs`` — the same pairs for any ``b_codes``: a chained hash table over ``B`` built
  per call (the full probe), then probed.
* ``index_insert`` / ``index_probe`` — the key index: a chained hash table over key codes and
  time buckets as wide as the band, whose chains list entries in insertion (arrival) order,
  probed with the time band.
* ``time_range(t)`` — ``(min, max, nondecreasing)`` of an arriving batch's times in one pass.
* ``locate(row_ids, starts)`` — where the opposite rows of a probe's pairs lie among the retained
  batches: positions within one batch, or the unique row ids sorted by batch/row with each pair's
  position among them.
* ``gather_bits`` / ``gather_var`` — the payload gather of matched rows from cached buffers: a
  validity bitmap, and variable-length values (strings, binaries) with their offsets.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from splice.kernels.hashing import GOLDEN

__all__ = [
    "band_pairs",
    "hash_band_pairs",
    "index_insert",
    "index_probe",
    "band_shift",
    "new_table",
    "time_range",
    "is_arange",
    "locate",
    "gather_bits",
    "gather_var",
    "var_parts",
    "probe_pairs",
]


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


# -- chained hash index over key codes and time buckets -----------------------------------------
#
# Entry ``e`` is ``link[e] = (time, next entry)``, side by side so a chain step touches one cache
# line; its code is read only when it is linked in. A chain holds the entries of one key *and one time bucket*
# ``time >> shift``, where ``2**shift`` is at least the band's width (``hi - lo + 1``): a probe's
# band then covers at most two buckets, and its chains hold only rows near its time, however long
# the key's history. A table of ``slots`` rows ``(bucket key, first and last entry)`` (16 bytes;
# a power of two, linear probing) maps ``mix(code, bucket)`` to its chain. Two pairs that mix to
# the same value share a chain, but for a fixed bucket ``mix`` is a bijection of the code, so an
# entry whose time lies in the bucket the chain was looked up with has the probe's code: a chain
# step checks the entry's bucket, read on the line it reads anyway, not its code. Chains link
# entries in insertion order, which is row-id (arrival) order.


@njit(cache=True, nogil=True)
def _slot(code: np.int64, mask: int) -> np.int64:
    h = np.uint64(code) * GOLDEN
    return np.int64(h >> np.uint64(20)) & mask


@njit(cache=True, nogil=True)
def _bucket_key(code: np.int64, bucket: np.int64) -> np.int64:
    return np.int64(np.uint64(code) + np.uint64(bucket) * np.uint64(0xC2B2AE3D27D4EB4F))


def band_shift(lo: int, hi: int) -> int:
    """The smallest ``shift`` with ``2**shift >= hi - lo + 1`` (time buckets of the key index)."""
    width = max(1, int(hi) - int(lo) + 1)
    return min(63, (width - 1).bit_length())  # 63: two buckets, negative and not


_LOW = 0xFFFFFFFF


@njit(cache=True, nogil=True)
def _head(table: np.ndarray, key: np.int64, mask: int) -> np.int64:
    """First entry of the chain of ``key``, or -1."""
    s = _slot(key, mask)
    while table[s, 1] != 0 and table[s, 0] != key:
        s = (s + 1) & mask
    return (table[s, 1] & _LOW) - 1


@njit(cache=True, nogil=True)
def index_insert(
    table: np.ndarray, codes: np.ndarray, link: np.ndarray, first: int, shift: int,
) -> None:
    """Link entries ``first .. first + len(codes) - 1`` (entry ``first + i`` of code
    ``codes[i]``, times in ``link[:, 0]``) into the chains of their (code, time bucket).

    ``table`` is ``(slots, 2)``: ``(bucket key, (first + 1) | (last + 1) << 32)``, 16 bytes a
    slot, ``0`` in the second word for a free slot (entries below ``2**31``).
    """
    mask = table.shape[0] - 1
    for i in range(len(codes)):
        e = first + i
        c = _bucket_key(codes[i], link[e, 0] >> shift)
        s = _slot(c, mask)
        while table[s, 1] != 0 and table[s, 0] != c:
            s = (s + 1) & mask
        link[e, 1] = -1
        p = table[s, 1]
        if p == 0:
            table[s, 0] = c
            table[s, 1] = (e + 1) | ((e + 1) << 32)
        else:
            link[(p >> 32) - 1, 1] = e
            table[s, 1] = (p & _LOW) | ((e + 1) << 32)


@njit(cache=True, nogil=True)
def _probe_fill(
    table: np.ndarray, link: np.ndarray, p_codes: np.ndarray, p_times: np.ndarray, lo: int,
    hi: int, shift: int, pi: np.ndarray, pe: np.ndarray, pt: np.ndarray,
) -> int:
    """Write the pairs of :func:`index_probe` into ``pi``/``pe`` (and each entry's time into
    ``pt``) while they have room; return how many pairs there are (more than ``len(pi)`` means
    the caller must call again, larger).

    Two passes: the chain heads of every probe first (independent table reads the processor
    overlaps, where one probe at a time would wait for each), then the chain walks. A chain
    entry whose time falls in the bucket the chain was looked up with has the probe's code:
    ``_bucket_key`` is a bijection of the code for a fixed bucket, so no code is read.
    """
    mask = table.shape[0] - 1
    cap = len(pi)
    n = len(p_codes)
    heads = np.empty((n, 2), dtype=np.int64)
    for i in range(n):
        c = p_codes[i]
        b0 = (p_times[i] + lo) >> shift
        b1 = (p_times[i] + hi) >> shift
        heads[i, 0] = _head(table, _bucket_key(c, b0), mask)
        heads[i, 1] = _head(table, _bucket_key(c, b1), mask) if b1 != b0 else np.int64(-1)
    k = 0
    for i in range(n):
        t0 = p_times[i] + lo
        t1 = p_times[i] + hi
        b0 = t0 >> shift
        b1 = t1 >> shift
        e0 = heads[i, 0]
        e1 = heads[i, 1]
        # the two chains, merged by entry (arrival) order
        while e0 != -1 or e1 != -1:
            if e1 == -1 or (e0 != -1 and e0 < e1):
                e = e0
                b = b0
                e0 = link[e0, 1]
            else:
                e = e1
                b = b1
                e1 = link[e1, 1]
            t = link[e, 0]
            if t >= t0 and t <= t1 and (t >> shift) == b:
                if k < cap:
                    pi[k] = i
                    pe[k] = e
                    pt[k] = t
                k += 1
    return k


@njit(cache=True, nogil=True)
def index_probe(
    table: np.ndarray, link: np.ndarray, p_codes: np.ndarray, p_times: np.ndarray, lo: int,
    hi: int, shift: int, buf: np.ndarray,
) -> tuple[int, bool]:
    """Pairs ``(i, entry)``: equal codes and ``p_times[i]+lo <= time <= p_times[i]+hi``, for a
    table built with ``2**shift >= hi - lo + 1``, and each pair's entry time (read on the line
    the probe reads anyway, so the caller need not gather it from the payload).

    Writes into the caller's ``buf`` of ``3 * cap`` slots: the pairs' probe rows in
    ``buf[:cap]``, their entries in ``buf[cap:2 * cap]`` and the entries' times in
    ``buf[2 * cap:]``, and returns ``(k, in_order)``: the number of pairs (more than ``cap``:
    call again with a buffer for ``k``) and whether the probe rows are exactly ``0 .. n-1`` (every
    probe row matched once, in order); :func:`probe_pairs` calls it.

    Ordered by ``i``, then by entry (insertion) order. (Growing the buffers inside the loop kept
    the compiler from holding them in registers and made the probe three times slower.)
    """
    cap = len(buf) // 3
    k = _probe_fill(table, link, p_codes, p_times, lo, hi, shift, buf[:cap],
                    buf[cap : 2 * cap], buf[2 * cap :])
    in_order = k == len(p_codes) and k <= cap
    if in_order:
        for j in range(k):
            if buf[j] != j:
                in_order = False
                break
    return k, in_order


@njit(cache=True, nogil=True)
def probe_pairs(table: np.ndarray, link: np.ndarray, p_codes: np.ndarray, p_times: np.ndarray,
                lo: int, hi: int, shift: int) -> tuple[np.ndarray, int, int, bool]:
    """:func:`index_probe` into buffers of ``max(16, len(p_codes))`` pairs (a second call into
    buffers of the exact size only when more pairs exist): ``(buf, cap, k, in_order)``, the
    ``k`` pairs' probe rows in ``buf[:k]``, entries in ``buf[cap:cap + k]``, entry times in
    ``buf[2 * cap:2 * cap + k]`` (one array to hand back instead of three: each array returned
    from a compiled function costs about a microsecond to box)."""
    cap = max(16, len(p_codes))
    buf = np.empty(3 * cap, dtype=np.int64)
    k, in_order = index_probe(table, link, p_codes, p_times, lo, hi, shift, buf)
    if k > cap:
        cap = k
        buf = np.empty(3 * cap, dtype=np.int64)
        k, in_order = index_probe(table, link, p_codes, p_times, lo, hi, shift, buf)
    return buf, cap, k, in_order


@njit(cache=True, nogil=True)
def new_table(entries: int) -> np.ndarray:
    """An empty ``(slots, 2)`` table for up to ``entries`` entries (load factor <= 1/2)."""
    slots = 64
    while slots < 2 * entries:
        slots *= 2
    return np.zeros((slots, 2), dtype=np.int64)


@njit(cache=True, nogil=True)
def hash_band_pairs(
    p_codes: np.ndarray, p_times: np.ndarray, b_codes: np.ndarray, b_times: np.ndarray,
    lo: int, hi: int,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`band_pairs` without the sortedness requirement: hash ``B`` once, then probe.

    Pairs ordered by ``i``, then ``j`` (a hash join's build side kept in input order).
    """
    m = len(b_codes)
    width = max(1, hi - lo + 1)
    shift = 0
    while shift < 63 and (1 << shift) < width:
        shift += 1
    table = new_table(m)
    link = np.empty((m, 2), dtype=np.int64)
    link[:, 0] = b_times
    index_insert(table, b_codes, link, 0, shift)
    buf, cap, k, _ = probe_pairs(table, link, p_codes, p_times, lo, hi, shift)
    return buf[:k], buf[cap : cap + k]


# -- the push's bookkeeping and payload gather -------------------------------------------------


@njit(cache=True, nogil=True)
def time_range(t: np.ndarray) -> tuple[int, int, bool]:
    """``(min, max, nondecreasing)`` of a non-empty ``t``, in one pass."""
    lo = t[0]
    hi = t[0]
    ordered = True
    for i in range(1, len(t)):
        v = t[i]
        if v < hi:
            ordered = False
            if v < lo:
                lo = v
        else:
            hi = v
    return lo, hi, ordered


@njit(cache=True, nogil=True)
def is_arange(pi: np.ndarray, n: int) -> bool:
    """Whether ``pi`` is exactly ``0, 1, ..., n-1``."""
    if len(pi) != n:
        return False
    for i in range(n):
        if pi[i] != i:
            return False
    return True


@njit(cache=True, nogil=True)
def locate(
    row_ids: np.ndarray, starts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Where the rows ``row_ids`` (non-empty) lie among batches starting at ``starts`` (sorted).

    Returns ``(rows, inv, groups, cuts)``: run ``g`` of ``rows``, ``rows[cuts[g]:cuts[g+1]]``,
    holds positions within batch ``groups[g]``. When every id lies in one batch, ``rows`` is
    ``row_ids`` minus that batch's start, in the given order. Otherwise ``rows`` lists the unique
    ids sorted by batch and row, and ``inv[k]`` is the position of ``row_ids[k]`` among them;
    ``inv`` is empty when it would be ``0..len-1`` (ids already unique and sorted).
    """
    m = len(row_ids)
    lo = row_ids[0]
    hi = row_ids[0]
    for k in range(1, m):
        r = row_ids[k]
        if r < lo:
            lo = r
        elif r > hi:
            hi = r
    b0 = np.searchsorted(starts, lo, side="right") - 1
    b1 = np.searchsorted(starts, hi, side="right") - 1
    if b0 == b1:
        groups = np.empty(1, dtype=np.int64)
        groups[0] = b0
        cuts = np.empty(2, dtype=np.int64)
        cuts[0] = 0
        cuts[1] = m
        return row_ids - starts[b0], np.empty(0, dtype=np.int64), groups, cuts
    ordered = True
    for k in range(1, m):
        if row_ids[k] <= row_ids[k - 1]:
            ordered = False
            break
    uniq = np.empty(m, dtype=np.int64)
    inv = np.empty(0 if ordered else m, dtype=np.int64)
    if ordered:
        uniq[:] = row_ids
        nu = m
    else:
        order = np.argsort(row_ids, kind="mergesort")
        nu = 0
        for k in range(m):
            r = row_ids[order[k]]
            if nu == 0 or r != uniq[nu - 1]:
                uniq[nu] = r
                nu += 1
            inv[order[k]] = nu - 1
    groups = np.empty(nu, dtype=np.int64)
    cuts = np.empty(nu + 1, dtype=np.int64)
    g = 0
    b = b0
    for x in range(nu):
        r = uniq[x]
        while b + 1 < len(starts) and starts[b + 1] <= r:
            b += 1
        if g == 0 or groups[g - 1] != b:
            groups[g] = b
            cuts[g] = x
            g += 1
        uniq[x] = r - starts[b]
    cuts[g] = nu
    return uniq[:nu], inv, groups[:g], cuts[: g + 1]


@njit(cache=True, nogil=True)
def gather_bits(bits: np.ndarray, bit_offset: int, rows: np.ndarray) -> np.ndarray:
    """Bitmap (LSB first) of bits ``bit_offset + rows[k]`` of ``bits``, in the order of ``rows``."""
    m = len(rows)
    out = np.zeros((m + 7) // 8, dtype=np.uint8)
    for k in range(m):
        p = rows[k] + bit_offset
        if (bits[p >> 3] >> (p & 7)) & 1:
            out[k >> 3] |= np.uint8(1 << (k & 7))
    return out


@njit(cache=True, nogil=True)
def _copy_var(offsets: np.ndarray, data: np.ndarray, rows: np.ndarray, out_off: np.ndarray,
              out: np.ndarray) -> None:
    d = np.int64(0)
    out_off[0] = 0
    m = len(rows)
    for k in range(m):
        r = rows[k]
        a = np.int64(offsets[r])
        n = np.int64(offsets[r + 1]) - a
        # a loop over two views vectorizes; slice assignment and a loop over absolute
        # positions do not (ten times slower on 264-byte strings)
        src = data[a : a + n]
        dst = out[d : d + n]
        for x in range(n):
            dst[x] = src[x]
        d += n
        out_off[k + 1] = d


@njit(cache=True, nogil=True)
def gather_var(
    offsets: np.ndarray, data: np.ndarray, bits: np.ndarray, bit_offset: int, rows: np.ndarray
) -> tuple[np.ndarray, int, int]:
    """Values ``data[offsets[r]:offsets[r+1]]`` for ``r`` in ``rows``, as one buffer
    ``(buf, offsets_at, data_at)``: the validity bitmap as :func:`gather_bits` makes it from
    ``bits`` in ``buf[:(len(rows) + 7) // 8]`` (meaningless when ``bits`` is empty: no nulls),
    the new offsets (from 0, of ``offsets``' type) from byte ``offsets_at``, the values from
    byte ``data_at`` to the end; each part starts 8-byte aligned. One array to hand back instead
    of three (each array returned from a compiled function costs about a microsecond to box);
    :func:`var_parts` splits it. ``offsets_at`` is ``-1`` when the values would not fit the type
    (32-bit offsets past 2**31 - 1 bytes)."""
    m = len(rows)
    total = np.int64(0)
    for k in range(m):
        r = rows[k]
        total += np.int64(offsets[r + 1]) - np.int64(offsets[r])
    isz = offsets.itemsize
    if isz == 4 and total > 2147483647:
        return np.empty(0, dtype=np.uint8), -1, -1
    off_at = ((m + 7) // 8 + 7) // 8 * 8
    data_at = off_at + ((m + 1) * isz + 7) // 8 * 8
    buf = np.empty(data_at + total, dtype=np.uint8)
    out = buf[data_at:]
    if isz == 4:
        _copy_var(offsets, data, rows, buf[off_at:data_at].view(np.int32), out)
    else:
        _copy_var(offsets, data, rows, buf[off_at:data_at].view(np.int64), out)
    if len(bits):
        valid = buf[: (m + 7) // 8]
        valid[:] = 0
        for k in range(m):
            p = rows[k] + bit_offset
            if (bits[p >> 3] >> (p & 7)) & 1:
                valid[k >> 3] |= np.uint8(1 << (k & 7))
    return buf, off_at, data_at


def var_parts(gathered: tuple[np.ndarray, int, int], rows: int, offset_type: type,
              nulls: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(offsets, data, validity bitmap)`` of :func:`gather_var`'s result for ``rows`` rows
    (the bitmap empty without ``nulls``); empty offsets where it did not fit."""
    buf, off_at, data_at = gathered
    if off_at < 0:
        return np.zeros(0, offset_type), np.zeros(0, np.uint8), np.zeros(0, np.uint8)
    size = np.dtype(offset_type).itemsize
    offsets: np.ndarray = buf[off_at : off_at + (rows + 1) * size].view(offset_type)
    valid = buf[: (rows + 7) // 8] if nulls else np.zeros(0, np.uint8)
    return offsets, buf[data_at:], valid
