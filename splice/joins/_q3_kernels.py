"""Q3's stream join as one numba loop: arrival order, selections, three-way join, aggregation.

:func:`q3_join_arrival` walks the raw arrival of customer, orders and lineitem (the three tables
as generated, before any selection), applies each stream's selection from a precomputed mask and
runs Diba's three-stage join (Fig. 13(b)) on the tuples that pass, adding revenue per order as
results appear. Doing the interleaving, the selections and the join in one pass writes no
intermediate arrival arrays and reads each raw row once.

A stage holds the last ``w`` passing tuples of its stream in a ring of raw row numbers, threaded
by per-bucket FIFO chains (the fast index of :mod:`splice.joins.hash_window_join`): the oldest
tuple heads its chain, so expiry and insert are O(1), and a probe walks one chain. Unbounded
stages (``lifo``) hold the whole filtered stream and prepend to their chains; nothing expires,
and the revenue sum does not depend on the order matches are found in.

Cursor layout (``cur``, int64, carried across calls so a run can be cut into batches)::

    0..2  raw rows consumed per table       3..5  passing tuples stored per table
    6..8  next ring position per stage      9     join results
    10    1 while every revenue fits 63 bits 11    next index into an explicit arrival
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from splice.joins._hash_kernels import _NO_NRT, fx_bucket

__all__ = ["q3_join_arrival", "new_cursor", "INTERLEAVED", "SEQUENTIAL", "REVERSED", "EXPLICIT"]

#: ``nxt`` of a stored tuple whose key is null: in its window, on no chain (never matches).
UNLINKED = -2

#: Arrival modes: interleaved in proportion to table sizes (row ``i`` of a table of ``n`` rows at
#: ``(i + 1/2) / n``, ties customer first), customer-orders-lineitem, lineitem-orders-customer,
#: or an explicit (table, raw row) sequence.
INTERLEAVED, SEQUENTIAL, REVERSED, EXPLICIT = 0, 1, 2, 3

_kernel: Any = njit(**_NO_NRT)


def new_cursor() -> np.ndarray:
    """A fresh cursor for :func:`q3_join_arrival`."""
    cur = np.zeros(12, np.int64)
    cur[10] = 1
    return cur


@_kernel
def _next_table(mode, cur, n0, n1, n2, sides, rows):  # type: ignore[no-untyped-def]
    """The table (0, 1, 2) and raw row of the next arrival, advancing the cursor; -1 at the end."""
    i0 = cur[0]
    i1 = cur[1]
    i2 = cur[2]
    best = -1
    if mode == INTERLEAVED:
        # the smallest (2 i + 1) / n; ties go to the lower table
        if i0 < n0:
            best = 0
        if i1 < n1 and (best == -1 or (2 * i1 + 1) * n0 < (2 * i0 + 1) * n1):
            best = 1
        if i2 < n2:
            if best == -1:
                best = 2
            elif best == 0 and (2 * i2 + 1) * n0 < (2 * i0 + 1) * n2:
                best = 2
            elif best == 1 and (2 * i2 + 1) * n1 < (2 * i1 + 1) * n2:
                best = 2
    elif mode == SEQUENTIAL:
        best = 0 if i0 < n0 else 1 if i1 < n1 else 2 if i2 < n2 else -1
    elif mode == REVERSED:
        best = 2 if i2 < n2 else 1 if i1 < n1 else 0 if i0 < n0 else -1
    else:
        j = cur[11]
        if j < sides.shape[0]:
            cur[11] = j + 1
            return sides[j], rows[j]
        return -1, -1
    if best == -1:
        return -1, -1
    row = cur[best]
    cur[best] = row + 1
    return best, row


@_kernel
def q3_join_arrival(  # type: ignore[no-untyped-def]
    mode, n_steps, cur, sides, rows, n_raw,
    c_ok, o_ok, l_ok, c_valid, oc_valid, oo_valid, l_valid,
    c_key, o_okey, o_ckey, l_okey, ep_words, dc_words, one,
    c_ring, c_keys, c_nxt, c_head, c_tail, shift_c,
    o_ring, o_keys, o_nxt, o_head, o_tail, shift_o,
    l_ring, l_keys, l_nxt, l_head, l_tail, shift_l,
    agg_rev, agg_hit, lifo,
):
    """Process up to ``n_steps`` raw arrivals (``mode``: see the constants; ``EXPLICIT`` reads
    ``sides``/``rows``); returns whether the arrival is exhausted.

    ``n_raw`` holds the three raw table sizes, ``*_ok`` the selections' pass masks over raw rows,
    ``*_key``/``*_okey``/``*_ckey`` the raw key columns and ``*_valid`` their validity (a tuple
    with a null key takes its window position but joins nothing). Revenue ``ep * (one - dc)`` is computed
    from the (low, high) int64 words of the decimal128 columns when a match needs it. A stage's
    window is its ring's length; ``agg_rev``/``agg_hit`` are indexed by raw orders row.
    """
    n0 = n_raw[0]
    n1 = n_raw[1]
    n2 = n_raw[2]
    cap_c = c_ring.shape[0]
    cap_o = o_ring.shape[0]
    cap_l = l_ring.shape[0]
    results = 0
    for _ in range(n_steps):
        side, r = _next_table(mode, cur, n0, n1, n2, sides, rows)
        if side == -1:
            cur[9] += results
            return True
        if side == 0:
            if not c_ok[r]:
                continue
            k = c_key[r]
            valid = c_valid[r]
            p = o_head[0, fx_bucket(k, shift_o)] if valid else -1
            while p != -1:
                if o_keys[0, p] == k:
                    o = o_ring[p]
                    ok = o_okey[o]
                    tot = 0
                    nl = 0
                    q = l_head[0, fx_bucket(ok, shift_l)] if oo_valid[o] else -1
                    while q != -1:
                        if l_keys[0, q] == ok:
                            li = l_ring[q]
                            tot += ep_words[li, 0] * (one - dc_words[li, 0])
                            nl += 1
                        q = l_nxt[0, q]
                    if nl:
                        agg_rev[o] += tot
                        agg_hit[o] = True
                        results += nl
                p = o_nxt[0, p]
            pos = cur[6]
            cur[6] = pos + 1 if pos + 1 < cap_c else 0
            if cur[3] >= cap_c and c_nxt[0, pos] != UNLINKED:
                b = fx_bucket(c_keys[0, pos], shift_c)
                c_head[0, b] = c_nxt[0, pos]
                if c_head[0, b] == -1:
                    c_tail[0, b] = -1
            cur[3] += 1
            c_ring[pos] = r
            c_keys[0, pos] = k
            b = fx_bucket(k, shift_c)
            if not valid:
                c_nxt[0, pos] = UNLINKED
            elif lifo:
                c_nxt[0, pos] = c_head[0, b]
                c_head[0, b] = pos
            else:
                c_nxt[0, pos] = -1
                t = c_tail[0, b]
                if t == -1:
                    c_head[0, b] = pos
                else:
                    c_nxt[0, t] = pos
                c_tail[0, b] = pos
        elif side == 1:
            if not o_ok[r]:
                continue
            ck = o_ckey[r]
            ok = o_okey[r]
            nc = 0
            p = c_head[0, fx_bucket(ck, shift_c)] if oc_valid[r] and oo_valid[r] else -1
            while p != -1:
                if c_keys[0, p] == ck:
                    nc += 1
                p = c_nxt[0, p]
            if nc:
                tot = 0
                nl = 0
                q = l_head[0, fx_bucket(ok, shift_l)]
                while q != -1:
                    if l_keys[0, q] == ok:
                        li = l_ring[q]
                        tot += ep_words[li, 0] * (one - dc_words[li, 0])
                        nl += 1
                    q = l_nxt[0, q]
                if nl:
                    agg_rev[r] += nc * tot
                    agg_hit[r] = True
                    results += nc * nl
            pos = cur[7]
            cur[7] = pos + 1 if pos + 1 < cap_o else 0
            if cur[4] >= cap_o:
                for a in range(2):
                    if o_nxt[a, pos] == UNLINKED:
                        continue
                    b = fx_bucket(o_keys[a, pos], shift_o)
                    o_head[a, b] = o_nxt[a, pos]
                    if o_head[a, b] == -1:
                        o_tail[a, b] = -1
            cur[4] += 1
            o_ring[pos] = r
            o_keys[0, pos] = ck
            o_keys[1, pos] = ok
            for a in range(2):
                b = fx_bucket(o_keys[a, pos], shift_o)
                if not (oc_valid[r] if a == 0 else oo_valid[r]):
                    o_nxt[a, pos] = UNLINKED
                elif lifo:
                    o_nxt[a, pos] = o_head[a, b]
                    o_head[a, b] = pos
                else:
                    o_nxt[a, pos] = -1
                    t = o_tail[a, b]
                    if t == -1:
                        o_head[a, b] = pos
                    else:
                        o_nxt[a, t] = pos
                    o_tail[a, b] = pos
        else:
            if not l_ok[r]:
                continue
            e = ep_words[r, 0]
            d = dc_words[r, 0]
            if ep_words[r, 1] != (e >> 63) or dc_words[r, 1] != (d >> 63):
                cur[10] = 0
            k = l_okey[r]
            rv = e * (one - d)
            valid = l_valid[r]
            p = o_head[1, fx_bucket(k, shift_o)] if valid else -1
            while p != -1:
                if o_keys[1, p] == k:
                    o = o_ring[p]
                    ck = o_ckey[o]
                    nc = 0
                    q = c_head[0, fx_bucket(ck, shift_c)] if oc_valid[o] else -1
                    while q != -1:
                        if c_keys[0, q] == ck:
                            nc += 1
                        q = c_nxt[0, q]
                    if nc:
                        agg_rev[o] += nc * rv
                        agg_hit[o] = True
                        results += nc
                p = o_nxt[1, p]
            pos = cur[8]
            cur[8] = pos + 1 if pos + 1 < cap_l else 0
            if cur[5] >= cap_l and l_nxt[0, pos] != UNLINKED:
                b = fx_bucket(l_keys[0, pos], shift_l)
                l_head[0, b] = l_nxt[0, pos]
                if l_head[0, b] == -1:
                    l_tail[0, b] = -1
            cur[5] += 1
            l_ring[pos] = r
            l_keys[0, pos] = k
            b = fx_bucket(k, shift_l)
            if not valid:
                l_nxt[0, pos] = UNLINKED
            elif lifo:
                l_nxt[0, pos] = l_head[0, b]
                l_head[0, b] = pos
            else:
                l_nxt[0, pos] = -1
                t = l_tail[0, b]
                if t == -1:
                    l_head[0, b] = pos
                else:
                    l_nxt[0, t] = pos
                l_tail[0, b] = pos
    cur[9] += results
    return False
