"""Q3's stream join as one numba loop: arrival order, selections, three-way join, aggregation.

:func:`q3_join_arrival` walks the raw arrival of customer, orders and lineitem (the three tables
as generated, before any selection), applies each stream's selection from a precomputed mask and
runs Diba's three-stage join (Fig. 13(b)) on the tuples that pass, adding revenue per order as
results appear. Doing the interleaving, the selections and the join in one pass writes no
intermediate arrival arrays and reads each raw row once.

A stage holds the last ``w`` passing tuples of its stream in a ring of raw row numbers, threaded
by per-bucket FIFO chains (the fast index of :mod:`splice.joins.hash.hash_window_join`): the oldest
tuple heads its chain, so expiry and insert are O(1), and a probe walks one chain. Unbounded
stages (``lifo``) hold the whole filtered stream and prepend to their chains; nothing expires,
and the revenue sum does not depend on the order matches are found in.

Cursor layout (``cur``, int64, carried across calls so a run can be cut into batches)::

    0..2  raw rows consumed per table       3..5  passing tuples stored per table
    6..8  next ring position per stage      9     join results
    10    1 while every revenue fits 63 bits 11    next index into an explicit arrival

The kernel takes its inputs grouped in named tuples (:class:`Q3Arrival`, per-stage
:class:`~splice.joins.hash._hash_kernels.Q3Stages` of masks and of :class:`StageChains`,
:class:`~splice.joins.hash._hash_kernels.Q3KeyColumns`, :class:`RevenueWords`,
:class:`~splice.joins.hash._hash_kernels.OrderRevenue`), built once per join.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numba import njit

from splice.joins.hash._hash_kernels import _NO_NRT, chain_append, first_by_position, fx_bucket

__all__ = ["q3_join_arrival", "new_cursor", "partition_of", "partition_arrival", "Q3Arrival", "StageChains",
           "RevenueWords", "INTERLEAVED", "SEQUENTIAL", "REVERSED", "EXPLICIT"]

#: ``nxt`` of a stored tuple whose key is null: in its window, on no chain (never matches).
UNLINKED = -2

#: Arrival modes: interleaved in proportion to table sizes (row ``i`` of a table of ``n`` rows at
#: ``(i + 1/2) / n``, ties customer first), customer-orders-lineitem, lineitem-orders-customer,
#: or an explicit (table, raw row) sequence.
INTERLEAVED, SEQUENTIAL, REVERSED, EXPLICIT = 0, 1, 2, 3

_kernel: Any = njit(**_NO_NRT)


class Q3Arrival(NamedTuple):
    """Which raw rows arrive in which order: ``mode`` (an arrival mode above) over tables of
    ``n_raw`` rows (int64, customer, orders, lineitem); ``EXPLICIT`` reads the (table, raw row)
    pairs ``sides`` (int8) and ``rows`` (int64), the other modes ignore them."""

    mode: int
    n_raw: np.ndarray
    sides: np.ndarray
    rows: np.ndarray


class StageChains(NamedTuple):
    """One stage of :func:`q3_join_arrival`: a ring of ``w`` window positions holding raw row
    numbers, threaded per indexed attribute by bucket chains (int32 positions: unbounded stages
    hold whole streams, and half-size positions halve the memory a probe touches)."""

    #: (w,) int32: the raw row at each position, -1 when empty
    ring: np.ndarray
    #: (n_attrs, w) int64: its key code per attribute
    keys: np.ndarray
    #: (n_attrs, w) int32: the next position on its chain, -1 at the end, ``UNLINKED`` when null
    nxt: np.ndarray
    #: (n_attrs, buckets) int32: each chain's first position, -1 when empty
    head: np.ndarray
    #: (n_attrs, buckets) int32: each chain's last position (a single unused column when ``lifo``)
    tail: np.ndarray
    #: 64 - log2(buckets) (:func:`~splice.joins.hash._hash_kernels.fx_bucket`)
    shift: int


class RevenueWords(NamedTuple):
    """Per raw lineitem row the (low, high) int64 words of the decimal128 l_extendedprice and
    l_discount, and the unscaled 1 of their scale: revenue is ``ep * (one - dc)``."""

    extended_price: np.ndarray
    discount: np.ndarray
    one: int


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
        best = first_by_position(i0 < n0, i1 < n1, i2 < n2, i0, i1, i2, n0, n1, n2)
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


#: Helpers inlined into the kernel at compile time (a call that passes many arrays costs
#: reference counting each time; an inlined one costs nothing).
_inline: Any = njit(inline="always", **_NO_NRT)


@_inline
def _advance(cur, stage, cap):  # type: ignore[no-untyped-def]
    """The ring position of a stage's next tuple, and whether it evicts the oldest."""
    pos = cur[6 + stage]
    cur[6 + stage] = pos + 1 if pos + 1 < cap else 0
    full = cur[3 + stage] >= cap
    cur[3 + stage] += 1
    return pos, full


@_inline
def _unlink(a, pos, stage):  # type: ignore[no-untyped-def]
    """Take the tuple at ``pos`` (the oldest: the head of its chain) off attribute ``a``'s chain
    of ``stage`` (:class:`StageChains`)."""
    keys = stage.keys
    nxt = stage.nxt
    head = stage.head
    tail = stage.tail
    shift = stage.shift
    if nxt[a, pos] == UNLINKED:
        return
    b = fx_bucket(keys[a, pos], shift)
    head[a, b] = nxt[a, pos]
    if head[a, b] == -1:
        tail[a, b] = -1


@_inline
def _link(a, pos, k, valid, stage, lifo):  # type: ignore[no-untyped-def]
    """Store key ``k`` at ``pos`` on attribute ``a`` of ``stage`` (:class:`StageChains`):
    appended to its chain (prepended when ``lifo``), on no chain when the key is null."""
    keys = stage.keys
    nxt = stage.nxt
    head = stage.head
    tail = stage.tail
    shift = stage.shift
    keys[a, pos] = k
    if not valid:
        nxt[a, pos] = UNLINKED
        return
    b = fx_bucket(k, shift)
    if lifo:
        nxt[a, pos] = head[a, b]
        head[a, b] = pos
        return
    chain_append(a, b, pos, nxt, head, tail)


@_inline
def _revenue(k, valid, lineitem, words):  # type: ignore[no-untyped-def]
    """(revenue sum, count) of the lineitems in their window (``lineitem``,
    :class:`StageChains`) with ``l_orderkey == k``."""
    l_ring = lineitem.ring
    l_keys = lineitem.keys
    l_nxt = lineitem.nxt
    l_head = lineitem.head
    shift_l = lineitem.shift
    ep_words = words.extended_price
    dc_words = words.discount
    one = words.one
    tot = 0
    n = 0
    q = l_head[0, fx_bucket(k, shift_l)] if valid else -1
    while q != -1:
        if l_keys[0, q] == k:
            li = l_ring[q]
            tot += ep_words[li, 0] * (one - dc_words[li, 0])
            n += 1
        q = l_nxt[0, q]
    return tot, n


@_inline
def _customers(k, valid, customer):  # type: ignore[no-untyped-def]
    """How many customers in their window (``customer``, :class:`StageChains`) have
    ``c_custkey == k``."""
    c_keys = customer.keys
    c_nxt = customer.nxt
    c_head = customer.head
    shift_c = customer.shift
    n = 0
    q = c_head[0, fx_bucket(k, shift_c)] if valid else -1
    while q != -1:
        if c_keys[0, q] == k:
            n += 1
        q = c_nxt[0, q]
    return n


@_kernel
def partition_of(key, n_parts):  # type: ignore[no-untyped-def]
    """The partition (0 .. n_parts - 1) of an order key: 16 bits of its Fibonacci hash scaled to
    ``n_parts`` (a multiply and a shift, no division)."""
    return (fx_bucket(key, 48) * n_parts) >> 16


@njit(cache=True, nogil=True)
def partition_arrival(mode, n_raw, c_ok, o_ok, l_ok, o_okey, l_okey, part, n_parts):  # type: ignore[no-untyped-def]
    """The arrival (table, raw row) of every customer that passes its selection and of the
    passing orders and lineitems of partition ``part``, in the order of ``mode`` (not
    ``EXPLICIT``). Filtering keeps the relative order of the full arrival: it is a total order by
    (position, table)."""
    n0 = n_raw[0]
    n1 = n_raw[1]
    n2 = n_raw[2]
    rows0 = np.empty(n0, np.int64)
    rows1 = np.empty(n1, np.int64)
    rows2 = np.empty(n2, np.int64)
    m0 = 0
    for i in range(n0):
        if c_ok[i]:
            rows0[m0] = i
            m0 += 1
    m1 = 0
    for i in range(n1):
        if o_ok[i] and partition_of(o_okey[i], n_parts) == part:
            rows1[m1] = i
            m1 += 1
    m2 = 0
    for i in range(n2):
        if l_ok[i] and partition_of(l_okey[i], n_parts) == part:
            rows2[m2] = i
            m2 += 1
    m = m0 + m1 + m2
    sides = np.empty(m, np.int8)
    rows = np.empty(m, np.int64)
    j0 = j1 = j2 = 0
    for j in range(m):
        best = -1
        if mode == INTERLEAVED:  # by position of the raw rows
            best = first_by_position(j0 < m0, j1 < m1, j2 < m2, rows0[min(j0, m0 - 1)] if m0 else 0,
                                     rows1[min(j1, m1 - 1)] if m1 else 0, rows2[min(j2, m2 - 1)] if m2 else 0,
                                     n0, n1, n2)
        elif mode == SEQUENTIAL:
            best = 0 if j0 < m0 else 1 if j1 < m1 else 2
        else:
            best = 2 if j2 < m2 else 1 if j1 < m1 else 0
        sides[j] = best
        if best == 0:
            rows[j] = rows0[j0]
            j0 += 1
        elif best == 1:
            rows[j] = rows1[j1]
            j1 += 1
        else:
            rows[j] = rows2[j2]
            j2 += 1
    return sides, rows


@_kernel
def q3_join_arrival(n_steps, cur, arrival, passes, keys, words, stages, agg, lifo):  # type: ignore[no-untyped-def]
    """Process up to ``n_steps`` raw arrivals of ``arrival`` (:class:`Q3Arrival`); returns
    whether the arrival is exhausted.

    ``passes`` holds the selections' pass masks over raw rows per table
    (:class:`~splice.joins.hash._hash_kernels.Q3Stages`), ``keys`` the raw key columns and
    their validity (:class:`~splice.joins.hash._hash_kernels.Q3KeyColumns`; a tuple with a null
    key takes its window position but joins nothing). Revenue ``ep * (one - dc)`` is computed
    from ``words`` (:class:`RevenueWords`) when a match needs it. ``stages`` holds the three
    stages' :class:`StageChains`; a stage's window is its ring's length, and ``lifo`` says the
    stages are unbounded. ``agg`` (:class:`~splice.joins.hash._hash_kernels.OrderRevenue`) is
    indexed by raw orders row.
    """
    mode = arrival.mode
    n_raw = arrival.n_raw
    sides = arrival.sides
    rows = arrival.rows
    c_ok = passes.customer
    o_ok = passes.orders
    l_ok = passes.lineitem
    c_key = keys.c_custkey
    o_okey = keys.o_orderkey
    o_ckey = keys.o_custkey
    l_okey = keys.l_orderkey
    c_valid = keys.c_custkey_valid
    oo_valid = keys.o_orderkey_valid
    oc_valid = keys.o_custkey_valid
    l_valid = keys.l_orderkey_valid
    ep_words = words.extended_price
    dc_words = words.discount
    one = words.one
    cust = stages.customer
    ords = stages.orders
    line = stages.lineitem
    c_ring = cust.ring
    o_ring = ords.ring
    o_keys = ords.keys
    o_nxt = ords.nxt
    o_head = ords.head
    shift_o = ords.shift
    l_ring = line.ring
    agg_rev = agg.revenue
    agg_hit = agg.hit
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
                    tot, nl = _revenue(o_okey[o], oo_valid[o], line, words)
                    if nl:
                        agg_rev[o] += tot
                        agg_hit[o] = True
                        results += nl
                p = o_nxt[0, p]
            pos, full = _advance(cur, 0, cap_c)
            if full:
                _unlink(0, pos, cust)
            c_ring[pos] = r
            _link(0, pos, k, valid, cust, lifo)
        elif side == 1:
            if not o_ok[r]:
                continue
            ck = o_ckey[r]
            ok = o_okey[r]
            nc = _customers(ck, oc_valid[r] and oo_valid[r], cust)
            if nc:
                tot, nl = _revenue(ok, True, line, words)
                if nl:
                    agg_rev[r] += nc * tot
                    agg_hit[r] = True
                    results += nc * nl
            pos, full = _advance(cur, 1, cap_o)
            if full:
                _unlink(0, pos, ords)
                _unlink(1, pos, ords)
            o_ring[pos] = r
            _link(0, pos, ck, oc_valid[r], ords, lifo)
            _link(1, pos, ok, oo_valid[r], ords, lifo)
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
                    nc = _customers(o_ckey[o], oc_valid[o], cust)
                    if nc:
                        agg_rev[o] += nc * rv
                        agg_hit[o] = True
                        results += nc
                p = o_nxt[1, p]
            pos, full = _advance(cur, 2, cap_l)
            if full:
                _unlink(0, pos, line)
            l_ring[pos] = r
            _link(0, pos, k, valid, line, lifo)
    cur[9] += results
    return False
