"""numba kernels of the sliding-window indexes: insert, search, merge, prefetch.

One state layout serves every structure, so one compiled join loop serves them all (the kind is a
branch per tuple, not a separate compilation). A state is an :class:`IndexState`, a named tuple
of arrays:

======================  ============================================================================
``keys`` ... ``tmeta``  the B+-Tree node pool (see :mod:`splice.index._bptree`): ``keys``, ``poss``,
                        ``child``, ``cnt``, ``nxt``, ``prv``, ``pmeta``, ``tmeta`` — tree 0
                        (B+-Tree, IM-Tree ``T_I``), tree ``q`` (PIM-Tree partition ``q``), tree
                        ``s`` (link in chain slot ``s``)
``ibt_keys`` ...        immutable B+-Trees, one per slot (see :mod:`splice.index._immutable`):
``ibt_meta``            ``ibt_keys[s]``, ``ibt_offs[s]`` (positions), ``ibt_inner[s]`` (inner
                        levels), ``ibt_loff[s]`` (level offsets), ``ibt_lcnt[s]`` (level counts),
                        ``ibt_meta[s] = [n, levels]`` — slot 0 is ``T_S`` of the IM/PIM-Tree; chains
                        use one per link. An IM/PIM-Tree has two rows of keys and positions:
                        ``T_S``'s are row ``meta[M_TSROW]`` (:func:`ts_keys`), and a merge writes
                        the other one, then switches (no copy back). Rows have one slot more than
                        the entries they hold: :func:`merge_into`'s scratch slot. ``ibt_offs`` holds
                        positions as ``uint32`` offsets from a base (12 bytes an entry instead of
                        16: less memory, and less of it to read at every search and to move at every
                        merge): ``meta[M_SBASE + r]`` for row ``r`` of an IM/PIM-Tree
                        (:func:`ts_base`), the link's first position ``link_first[s]`` for chain
                        slot ``s``. A row holds the entries of one window, so the offsets span less
                        than ``w`` plus the parallel joins' slack (``WindowIndex`` keeps that below
                        ``2**32``)
``ring``                the window's keys by ``pos % len(ring)`` (the sliding window itself), kept
                        by the nested loops and the B+-Tree, which read keys back by position (one
                        slot elsewhere)
``meta``                the scalars below (``M_*``)
``path``                scratch for tree descents
``link_first``          first position of the link in each chain slot
``filter_bits``,        IM/PIM: the ``T_I`` filter (see :mod:`splice.index._ti_filter`):
``filter_geo``          ``filter_bits``, its words, and ``filter_geo``, each partition's first key
                        and bucket scale
======================  ============================================================================

Positions are the stream's arrival numbers 0, 1, 2, ...; the window after ``NEXT`` arrivals is
``[NEXT - W, NEXT - 1]``. Expired entries of lazily cleaned structures (chains, IM/PIM-Tree) are
filtered out of searches by position and dropped at link disposal or merge.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import uint64

from splice.index._bptree import (
    bpt_delete,
    bpt_first_leaf,
    bpt_free_tree,
    bpt_insert,
    bpt_reset,
    bpt_search,
    nodes_free,
)
from splice.index._immutable import (
    FANOUT,
    LEAF_SIZE,
    ibt_build,
    ibt_leaf,
    ibt_leaf_bound,
    ibt_leaf_route,
    ibt_route,
    ibt_scan,
)
from splice.index._ti_filter import filter_add, filter_install, filter_may_hold
from splice.kernels.jit import kernel
from splice.kernels.prefetch import prefetch

__all__ = [
    "IndexState",
    "NLWJ",
    "BPTREE",
    "BCHAIN",
    "IBCHAIN",
    "IMTREE",
    "PIMTREE",
    "M_KIND",
    "M_W",
    "M_NEXT",
    "M_THRESH",
    "M_DEPTH",
    "M_NPART",
    "M_CLEN",
    "M_LCAP",
    "M_CHEAD",
    "M_CCNT",
    "M_MERGES",
    "M_CHANGES",
    "M_TISIZE",
    "M_PLEVEL",
    "M_POOLMIN",
    "M_TSROW",
    "M_FSHIFT",
    "M_SBASE",
    "META_LEN",
    "POOL_FIELDS",
    "pim_boundary",
    "pim_route",
    "idx_search",
    "idx_insert",
    "idx_insert_many",
    "idx_search_many",
    "im_merge",
    "merge_into",
    "merge_install",
    "search_prefetch",
    "INSERT_PREFETCH_MIN_WINDOW",
    "insert_prefetch",
    "route_from",
    "search_from",
    "DESCENTS",
    "new_descents",
    "clear_descents",
    "ts_leaf",
    "ts_keys",
    "ts_base",
    "im_search_at",
    "PREFETCH_AHEAD",
    "PREFETCH_MIN_WINDOW",
    "CHAIN_PREFETCH_MIN_WINDOW",
    "sort_small",
]

NLWJ, BPTREE, BCHAIN, IBCHAIN, IMTREE, PIMTREE = 0, 1, 2, 3, 4, 5

M_KIND = 0  # structure kind
M_W = 1  # window size w
M_NEXT = 2  # next position (arrivals so far)
M_THRESH = 3  # IM/PIM: merge when T_I holds this many entries (ceil(m * w))
M_DEPTH = 4  # PIM: insertion depth D_I
M_NPART = 5  # PIM: partitions of T_I now
M_CLEN = 6  # chain length
M_LCAP = 7  # chain: entries per link
M_CHEAD = 8  # chain: slot of the oldest link
M_CCNT = 9  # chain: links alive
M_MERGES = 10  # IM/PIM: merges so far
M_TISIZE = 11  # IM/PIM: entries in T_I
M_PLEVEL = 12  # PIM: T_S level whose nodes define the partitions
M_POOLMIN = 13  # free nodes required before an insert
M_CHANGES = 14  # chain: links opened or disposed of so far (the archived links change with it)
M_TSROW = 15  # IM/PIM: the row of ibt_keys/ibt_offs holding T_S (the last merge's output)
M_FSHIFT = 16  # IM/PIM: log2 of the T_I filter's bits per partition
M_SBASE = 17  # IM/PIM: row r of ibt_offs holds offsets from meta[M_SBASE + r]
META_LEN = 19


class IndexState(NamedTuple):
    """The arrays of one window index, shared by every structure (the module docstring's table).

    The kernels take it whole and read its fields by name; numba passes a named tuple as it
    passes a plain one, field by field, and caches kernels that take it (the class lives at
    module level)."""

    # the B+-Tree node pool (splice.index._bptree)
    keys: np.ndarray
    poss: np.ndarray
    child: np.ndarray
    cnt: np.ndarray
    nxt: np.ndarray
    prv: np.ndarray
    pmeta: np.ndarray
    tmeta: np.ndarray
    # the immutable B+-Trees, a row per slot (splice.index._immutable)
    ibt_keys: np.ndarray
    ibt_offs: np.ndarray
    ibt_inner: np.ndarray
    ibt_loff: np.ndarray
    ibt_lcnt: np.ndarray
    ibt_meta: np.ndarray
    # the window's keys by position, the scalars, descent scratch, the chain's links
    ring: np.ndarray
    meta: np.ndarray
    path: np.ndarray
    link_first: np.ndarray
    # the T_I filter (splice.index._ti_filter)
    filter_bits: np.ndarray
    filter_geo: np.ndarray


#: The fields of :class:`IndexState` that make up the B+-Tree node pool, in
#: :func:`~splice.index._bptree.new_pool`'s order.
POOL_FIELDS = IndexState._fields[:8]


@kernel()
def sort_small(a, lo, hi):
    """Sort ``a[lo:hi]`` in place (shell sort; insertion sort when short)."""
    m = hi - lo
    if m < 2:
        return
    gap = 1
    while gap < m // 3:
        gap = 3 * gap + 1  # Knuth's gaps: a shell sort, insertion sort when short
    while gap >= 1:
        for i in range(lo + gap, hi):
            v = a[i]
            j = i - gap
            while j >= lo and a[j] > v:
                a[j + gap] = a[j]
                j -= gap
            a[j + gap] = v
        gap //= 3


@kernel(inline="always")
def pim_boundary(st, q):
    meta = st.meta
    return st.ibt_inner[0, st.ibt_loff[0, meta[M_PLEVEL]] + q * FANOUT]


@kernel(inline="always")
def pim_route(st, k):
    meta = st.meta
    if meta[M_NPART] <= 1:
        return 0
    ibt_meta = st.ibt_meta
    nlev = ibt_meta[0, 1]
    return ibt_route(st.ibt_inner[0], st.ibt_loff[0], nlev, nlev - 1 - meta[M_PLEVEL], k)


@kernel(inline="always")
def ts_keys(st):
    """IM/PIM-Tree: the keys and positions of ``T_S`` (the row of ``ibt_keys``/``ibt_offs`` the
    last merge wrote)."""
    r = st.meta[M_TSROW]
    return st.ibt_keys[r], st.ibt_offs[r]


@kernel(inline="always")
def ts_base(st):
    """IM/PIM-Tree: the position that ``T_S``'s stored offsets count from."""
    meta = st.meta
    return meta[M_SBASE + meta[M_TSROW]]


@kernel(inline="always")
def idx_search(st, lo, hi, plo, phi, out, n_out):
    """Append positions in ``[plo, phi]`` whose key is in ``[lo, hi]``; ``-1`` when ``out`` is full.

    Order: window order for NLWJ, key order per component otherwise (callers sort by position).
    """
    # ibt_meta as the (unread) descents: a 2-d int64 array like them, so one compilation serves
    return search_from(st, lo, hi, plo, phi, out, n_out, st.ibt_meta, -1)


@kernel(inline="always")
def chain_search(st, lo, hi, plo, phi, out, n_out, descents, j):
    """:func:`idx_search` of a B- or IB-chain. With ``j >= 0`` an IB-chain's archived link ``c``
    (from the oldest) is searched from leaf ``descents[D_CHAIN + c, j]``, the descent
    :func:`search_prefetch` made, instead of descending again."""
    meta = st.meta
    link_first = st.link_first
    sk = st.ibt_keys
    ibt_meta = st.ibt_meta
    kind = meta[M_KIND]
    slots = link_first.shape[0]
    cnt = meta[M_CCNT]
    head = meta[M_CHEAD]
    for c in range(cnt):
        s = (head + c) % slots
        first = link_first[s]
        last = link_first[(s + 1) % slots] - 1 if c + 1 < cnt else meta[M_NEXT] - 1
        if last < plo or first > phi:
            continue
        if kind == BCHAIN or c + 1 == cnt:
            n_out = bpt_search(st.keys, st.poss, st.child, st.cnt, st.nxt, st.tmeta, s, lo, hi,
                               plo, phi, out, n_out)
        else:
            n = ibt_meta[s, 0]
            if j >= 0:
                leaf = descents[D_CHAIN + c, j]
            else:
                leaf = ibt_leaf(st.ibt_inner[s], st.ibt_loff[s], ibt_meta[s, 1], lo)
            n_out = ibt_scan(sk[s], st.ibt_offs[s], first, n, ibt_leaf_bound(sk[s], n, leaf, lo),
                             hi, plo, phi, out, n_out)
        if n_out < 0:
            return -1
    return n_out


@kernel(inline="always")
def ts_leaf(st, lo):
    """IM/PIM-Tree: the ``T_S`` leaf holding the first key >= ``lo`` and the ``T_I`` partition
    holding ``lo`` (0 with one), the descent a search of ``[lo, ...]`` starts with. Both stay
    valid until the next merge (``meta[M_MERGES]`` counts them)."""
    ibt_meta = st.ibt_meta
    meta = st.meta
    if meta[M_NPART] <= 1:
        return ibt_leaf(st.ibt_inner[0], st.ibt_loff[0], ibt_meta[0, 1], lo), 0
    # the descent of T_S to lo's leaf passes the node that is lo's partition: no second route
    return ibt_leaf_route(st.ibt_inner[0], st.ibt_loff[0], ibt_meta[0, 1], lo, meta[M_PLEVEL])


@kernel(inline="always")
def im_search_at(st, lo, hi, plo, phi, out, n_out, leaf, q):
    """:func:`idx_search` of an IM/PIM-Tree whose descent :func:`ts_leaf` gave ``(leaf, q)``:
    ``T_S`` from that leaf, then ``T_I`` (one tree, or the partitions covering ``[lo, hi]``)."""
    meta = st.meta
    ns = st.ibt_meta[0, 0]
    s_k, s_p = ts_keys(st)
    n_out = ibt_scan(s_k, s_p, ts_base(st), ns, ibt_leaf_bound(s_k, ns, leaf, lo), hi, plo, phi,
                     out, n_out)
    if n_out < 0:
        return -1
    parts = meta[M_NPART]
    shift = meta[M_FSHIFT]
    while True:
        if filter_may_hold(st.filter_bits, st.filter_geo, shift, q, lo, hi):
            n_out = bpt_search(st.keys, st.poss, st.child, st.cnt, st.nxt, st.tmeta, q, lo, hi,
                               plo, phi, out, n_out)
            if n_out < 0:
                return -1
        q += 1
        if q >= parts or pim_boundary(st, q) >= hi:
            return n_out


#: Windows of this many tuples and more (about 1.5 MiB of keys and positions in ``T_S`` or the
#: archived links, more than a core's L2 on the hosts measured) are searched with their
#: immutable leaves prefetched a few tuples ahead; smaller ones mostly hit the caches, where
#: prefetching costs more than it saves. The threshold trades those two; it was measured with
#: ``benchmarks.band_prefetch``
#: (docs/lab/band-joins.md, "Searches start from the prefetch's descent").
PREFETCH_MIN_WINDOW = 1 << 17
#: An IB-chain searches every link, each archived one an immutable tree, so its leaves miss the
#: caches in smaller windows than an IM/PIM-Tree's ``T_S``: they are prefetched from windows of
#: this many tuples on, the smallest size at which prefetching took less CPU per tuple than not
#: over chain lengths 2-8 (``benchmarks.band_chains``;
#: docs/lab/band-joins.md, "IB-chains prefetch from 2^16").
CHAIN_PREFETCH_MIN_WINDOW = 1 << 16
#: IM/PIM-Tree windows of this many tuples and more also have the ``T_I`` node a tuple's
#: insert changes loaded ahead (:func:`insert_prefetch`, prefetch level 2 of the join loops);
#: below, with ``T_S`` half as large, the node is mostly still cached and the early route costs
#: more than the load saves (same-process A/B of the serial join: docs/lab/band-joins.md,
#: "Each insert's `T_I` node loaded ahead").
INSERT_PREFETCH_MIN_WINDOW = 1 << 19
#: How many arrivals ahead the joins start loading a tuple's leaves.
PREFETCH_AHEAD = 8
#: Slots of the ring (``descents[:, slot]``, see :func:`search_prefetch`) that carries the
#: descent made to prefetch a tuple's leaves to that tuple's search, so that the search does not
#: descend again; a power of two above ``PREFETCH_AHEAD`` (the slot written at a tuple is never
#: its own).
DESCENTS = 16
#: Rows of the descents ring: the route of a tuple's insert into its own window and the merges of
#: that window it is valid for (see :func:`insert_prefetch`), then an IB-chain's archived links.
D_ROUTE, D_RVER, D_CHAIN = 3, 4, 5


def new_descents(chain_length=0):
    """The scratch ring of :data:`DESCENTS` descents a prefetching join loop takes; room for the
    archived links of chains of up to ``chain_length`` links."""
    return np.empty((D_CHAIN + max(0, chain_length - 1), DESCENTS), np.int64)


@kernel(inline="always")
def clear_descents(descents):
    """Mark every slot unused (a version of -1 never matches)."""
    for j in range(DESCENTS):
        descents[2, j] = -1
        descents[D_RVER, j] = -1


@kernel(inline="always")
def _prefetch_block(sk, sp, n, leaf):
    # the keys and positions of leaf ``leaf`` of an immutable tree of n entries sk, sp (a cache
    # line holds 8 keys, 16 position offsets)
    if n == 0:
        return
    i = leaf * LEAF_SIZE
    for j in range(0, LEAF_SIZE, 8):
        prefetch(sk, i + j)
    for j in range(0, LEAF_SIZE, 16):
        prefetch(sp, i + j)


@kernel(inline="always")
def search_prefetch(st, lo, descents, a):
    """Start loading the immutable leaves that a search of ``[lo, ...]`` in ``st`` will read:
    ``T_S`` of the IM- and PIM-Tree, every archived link of the IB-chain (nothing for the other
    kinds). The inner levels descended to find a leaf are small and stay cached; the search
    itself, a few tuples later, then finds its leaf loaded instead of waiting for memory.

    The descent goes to slot ``a`` of ``descents`` (:func:`new_descents`), for
    :func:`search_from`: row 2 holds the version of the immutable part it is valid for (merges
    of the IM/PIM-Tree, link changes of the IB-chain; -1: none), rows 0-1 the :func:`ts_leaf`
    of an IM/PIM-Tree, rows 3... the leaf of each archived link of an IB-chain."""
    meta = st.meta
    kind = meta[M_KIND]
    if kind == IMTREE or kind == PIMTREE:
        leaf, q = ts_leaf(st, lo)
        s_k, s_p = ts_keys(st)
        _prefetch_block(s_k, s_p, st.ibt_meta[0, 0], leaf)
        descents[0, a] = leaf
        descents[1, a] = q
        descents[2, a] = meta[M_MERGES]
        return
    descents[2, a] = -1
    if kind == IBCHAIN:
        slots = st.link_first.shape[0]
        ibt_meta = st.ibt_meta
        archived = meta[M_CCNT] - 1
        keep = D_CHAIN + archived <= descents.shape[0]
        for c in range(archived):
            s = (meta[M_CHEAD] + c) % slots
            leaf = ibt_leaf(st.ibt_inner[s], st.ibt_loff[s], ibt_meta[s, 1], lo)
            _prefetch_block(st.ibt_keys[s], st.ibt_offs[s], ibt_meta[s, 0], leaf)
            if keep:
                descents[D_CHAIN + c, a] = leaf
        if keep:
            descents[2, a] = meta[M_CHANGES]


@kernel(inline="always")
def insert_prefetch(st, k, descents, a):
    """Start loading the ``T_I`` node that the insert of key ``k`` into the IM/PIM-Tree ``st``
    will change, the root of ``k``'s partition (at the default insertion depth a leaf: a
    partition holds a node or two between merges), and keep the partition in slot ``a`` of
    ``descents`` for that insert (:func:`route_from`). Nothing for the other kinds. The joins
    call it from windows of :data:`INSERT_PREFETCH_MIN_WINDOW` tuples on."""
    meta = st.meta
    kind = meta[M_KIND]
    if kind != IMTREE and kind != PIMTREE:
        descents[D_RVER, a] = -1
        return
    q = pim_route(st, k)
    descents[D_ROUTE, a] = q
    descents[D_RVER, a] = meta[M_MERGES]
    root = st.tmeta[q, 0]
    if root >= 0:
        keys = st.keys[root]
        poss = st.poss[root]
        for j in range(0, keys.shape[0], 8):
            prefetch(keys, j)
        for j in range(0, poss.shape[0], 8):
            prefetch(poss, j)


@kernel(inline="always")
def route_from(st, descents, j):
    """The partition :func:`insert_prefetch` kept in slot ``j`` of ``descents`` for the insert
    into ``st``, while ``st`` has not merged since; ``-1``: none (the insert routes)."""
    if j >= 0 and descents[D_RVER, j] == st.meta[M_MERGES]:
        return descents[D_ROUTE, j]
    return -1


@kernel(inline="always")
def search_from(st, lo, hi, plo, phi, out, n_out, descents, j):
    """:func:`idx_search`, starting from the descent in slot ``j`` of ``descents`` (made by
    :func:`search_prefetch` for this search) while the immutable part it descended is
    unchanged; ``j < 0``: no stored descent. The one search body every join loop inlines (a
    second one per call site doubled the kernels' compile time)."""
    meta = st.meta
    kind = meta[M_KIND]
    if kind == NLWJ:
        ring = st.ring
        r = ring.shape[0]
        cap = out.shape[0]
        slot = plo % r
        for pos in range(plo, phi + 1):
            v = ring[slot]
            slot += 1
            if slot == r:
                slot = 0
            if v >= lo and v <= hi:
                if n_out >= cap:
                    return -1
                out[n_out] = pos
                n_out += 1
        return n_out
    if kind == BPTREE:
        return bpt_search(st.keys, st.poss, st.child, st.cnt, st.nxt, st.tmeta, 0, lo, hi, plo,
                          phi, out, n_out)
    if kind == BCHAIN or kind == IBCHAIN:
        stored = j >= 0 and kind == IBCHAIN and descents[2, j] == meta[M_CHANGES]
        return chain_search(st, lo, hi, plo, phi, out, n_out, descents, j if stored else -1)
    if j >= 0 and descents[2, j] == meta[M_MERGES]:
        leaf = descents[0, j]
        q = descents[1, j]
    else:
        leaf, q = ts_leaf(st, lo)
    return im_search_at(st, lo, hi, plo, phi, out, n_out, leaf, q)


@kernel()
def merge_into(st, out_k, out_p, lo):
    """Write the entries of ``st``'s ``T_S`` and ``T_I`` at positions >= ``lo`` into
    ``out_k``/``out_p`` in ``(key, pos)`` order, positions as offsets from ``lo`` (the base of
    the row written: :func:`merge_install`); return their count, or ``-1`` when they do not
    fit. Outputs of ``n`` slots take ``n - 1`` entries: the last is scratch (arrays made for
    merging have one slot more than the entries they hold).

    One pass: the ``T_I`` entries in order (the leaf chains of the partitions, in partition order,
    which is key order), and before each the run of ``T_S`` entries below it, copied without a
    branch per entry: an expired entry is written and then overwritten by the next one, and an
    entry past the capacity goes to the scratch slot, only counted. Unsigned indices spare numba's
    negative-index fix-ups. (Dropping the capacity branch and the fix-ups is what made merges
    cheap: docs/lab/band-joins.md, "Merges at half the cost; `T_S` in two rows".)
    """
    keys, poss, cnt, nxt = st.keys, st.poss, st.cnt, st.nxt
    parts = max(st.meta[M_NPART], 1)
    ns = uint64(st.ibt_meta[0, 0])
    s_k, s_p = ts_keys(st)
    base = ts_base(st)
    if out_k.shape[0] == 0:
        return -1
    cap = uint64(out_k.shape[0] - 1)
    one = uint64(1)
    i = uint64(0)
    o = uint64(0)
    for q in range(parts):
        n = bpt_first_leaf(st.child, st.tmeta, q)
        while n >= 0:
            for j in range(cnt[n]):
                tk = keys[n, j]
                tp = poss[n, j]
                # the T_S entries before (tk, tp)
                while i < ns:
                    kk = s_k[i]
                    kp = base + np.int64(s_p[i])
                    if kk >= tk:
                        if kk > tk or kp >= tp:
                            break
                    at = min(o, cap)
                    out_k[at] = kk
                    out_p[at] = kp - lo
                    o += uint64(kp >= lo)
                    i += one
                at = min(o, cap)
                out_k[at] = tk
                out_p[at] = tp - lo
                o += uint64(tp >= lo)
            n = nxt[n]
    while i < ns:
        kp = base + np.int64(s_p[i])
        at = min(o, cap)
        out_k[at] = s_k[i]
        out_p[at] = kp - lo
        o += uint64(kp >= lo)
        i += one
    return -1 if o > cap else np.int64(o)


@kernel()
def merge_install(st, o, base):
    """``T_S`` of ``st`` (:func:`ts_keys`) now holds ``o`` sorted entries, positions as offsets
    from ``base``: build its inner levels, empty ``T_I`` and re-derive the PIM-Tree partitions
    from the new ``T_S``."""
    meta = st.meta
    meta[M_SBASE + meta[M_TSROW]] = base
    st.ibt_meta[0, 0] = o
    nlev = ibt_build(ts_keys(st)[0], o, st.ibt_inner[0], st.ibt_loff[0], st.ibt_lcnt[0])
    st.ibt_meta[0, 1] = nlev
    bpt_reset(st.pmeta, st.tmeta)
    parts = 1
    if meta[M_KIND] == PIMTREE and nlev > 0:
        d = min(meta[M_DEPTH], nlev - 1)
        lvl = nlev - 1 - d
        parts = (st.ibt_lcnt[0, lvl] + FANOUT - 1) // FANOUT
        meta[M_PLEVEL] = lvl
    meta[M_NPART] = parts
    s_k = ts_keys(st)[0]
    meta[M_FSHIFT] = filter_install(st.filter_bits, st.filter_geo, parts, st.ibt_inner[0],
                                    st.ibt_loff[0, meta[M_PLEVEL]], s_k[0], s_k[max(o - 1, 0)])
    meta[M_TISIZE] = 0
    meta[M_MERGES] += 1


@kernel()
def im_merge(st, lo):
    """Merge ``T_I`` into ``T_S``, dropping entries before position ``lo``; re-derive partitions.
    The merge writes the row of ``ibt_keys``/``ibt_offs`` that ``T_S`` does not use, which then
    becomes ``T_S``'s. Returns ``False`` when ``T_S`` is too small (callers size it so that this
    cannot happen)."""
    meta = st.meta
    row = 1 - meta[M_TSROW]
    o = merge_into(st, st.ibt_keys[row], st.ibt_offs[row], lo)
    if o < 0:
        return False
    meta[M_TSROW] = row
    merge_install(st, o, lo)
    return True


@kernel()
def _chain_archive(st, s):
    # IB-chain: convert the B+-Tree of slot s into the slot's immutable B+-Tree
    keys, poss, cnt, nxt = st.keys, st.poss, st.cnt, st.nxt
    sk, sp = st.ibt_keys, st.ibt_offs
    n = bpt_first_leaf(st.child, st.tmeta, s)
    o = 0
    first = st.link_first[s]
    while n >= 0:
        for j in range(cnt[n]):
            sk[s, o] = keys[n, j]
            sp[s, o] = poss[n, j] - first
            o += 1
        n = nxt[n]
    st.ibt_meta[s, 0] = o
    st.ibt_meta[s, 1] = ibt_build(sk[s], o, st.ibt_inner[s], st.ibt_loff[s], st.ibt_lcnt[s])
    bpt_free_tree(st.child, cnt, nxt, st.pmeta, st.tmeta, s, st.path)


@kernel(inline="always")
def idx_insert(st, k, route=-1):
    """Append key ``k`` to the window (position ``NEXT``), expiring the oldest entry when full.
    ``route``: the IM/PIM-Tree partition of ``k`` when known (:func:`route_from`), else -1."""
    meta = st.meta
    ring = st.ring
    path = st.path
    tmeta = st.tmeta
    kind = meta[M_KIND]
    w = meta[M_W]
    p = meta[M_NEXT]
    r = ring.shape[0]
    if kind == BPTREE and p >= w:
        bpt_delete(st.keys, st.poss, st.child, st.cnt, st.nxt, st.prv, st.pmeta, tmeta, 0,
                   ring[(p - w) % r], p - w, path)
    # only the nested loops and the B+-Tree read a key back by its position; the store stays
    # ahead of the branches (at the end of one, numba's inlining dropped it)
    if kind == NLWJ or kind == BPTREE:
        ring[p % r] = k
    meta[M_NEXT] = p + 1
    if kind == NLWJ:
        return
    if kind == BPTREE:
        bpt_insert(st.keys, st.poss, st.child, st.cnt, st.nxt, st.prv, st.pmeta, tmeta, 0, k, p,
                   path)
        return
    if kind == BCHAIN or kind == IBCHAIN:
        link_first = st.link_first
        slots = link_first.shape[0]
        cnt = meta[M_CCNT]
        act = (meta[M_CHEAD] + cnt - 1) % slots
        if cnt == 0 or tmeta[act, 2] >= meta[M_LCAP]:
            if cnt > 0 and kind == IBCHAIN:
                _chain_archive(st, act)
            act = (meta[M_CHEAD] + cnt) % slots
            link_first[act] = p
            cnt += 1
            meta[M_CCNT] = cnt
            meta[M_CHANGES] += 1
        bpt_insert(st.keys, st.poss, st.child, st.cnt, st.nxt, st.prv, st.pmeta, tmeta, act, k, p,
                   path)
        lo = p + 1 - w
        while meta[M_CCNT] > 1:
            h = meta[M_CHEAD]
            if link_first[(h + 1) % slots] > lo:
                break
            if kind == BCHAIN:
                bpt_free_tree(st.child, st.cnt, st.nxt, st.pmeta, tmeta, h, path)
            st.ibt_meta[h, 0] = 0
            st.ibt_meta[h, 1] = 0
            meta[M_CHEAD] = (h + 1) % slots
            meta[M_CCNT] -= 1
            meta[M_CHANGES] += 1
        return
    q = route if route >= 0 else pim_route(st, k)
    bpt_insert(st.keys, st.poss, st.child, st.cnt, st.nxt, st.prv, st.pmeta, tmeta, q, k, p, path)
    filter_add(st.filter_bits, st.filter_geo, meta[M_FSHIFT], q, k)
    meta[M_TISIZE] += 1
    if meta[M_TISIZE] >= meta[M_THRESH]:
        if not im_merge(st, p + 1 - w):
            raise ValueError("IM/PIM-Tree: T_S capacity exceeded at merge")


@kernel()
def idx_insert_many(st, keys, start):
    """Insert ``keys[start:]``; return how many were inserted before the pool ran low."""
    pm = st.pmeta
    meta = st.meta
    for i in range(start, keys.shape[0]):
        if nodes_free(pm) < meta[M_POOLMIN]:
            return i
        idx_insert(st, keys[i])
    return keys.shape[0]


@kernel()
def idx_search_many(st, los, his, plo, phi, out_i, out_p, start, n_out):
    """Search each ``[los[i], his[i]]``; matches as (query index, position), positions ascending
    per query. Returns ``(next query, count, full)`` — ``full`` when ``out`` ran out of room."""
    kind = st.meta[M_KIND]
    for i in range(start, los.shape[0]):
        m0 = n_out
        r = idx_search(st, los[i], his[i], plo, phi, out_p, n_out)
        if r < 0:
            return i, m0, True
        n_out = r
        if kind != NLWJ:
            sort_small(out_p, m0, n_out)
        for j in range(m0, n_out):
            out_i[j] = i
    return los.shape[0], n_out, False

