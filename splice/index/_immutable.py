"""numba kernels of the immutable B+-Tree: sorted leaves plus implicit inner levels.

The entries ``(ks[i], base + ps[i])``, ``i < n``, are sorted (``ps`` holds positions as offsets
from a ``base`` the caller keeps: 4-byte offsets in the windows' trees, see
:mod:`splice.index._window`); leaf ``b`` is the block
``[b*LEAF_SIZE, (b+1)*LEAF_SIZE)``. Inner levels live in one flat array in breadth-first order:
level 0 has one entry per leaf (its first key), level ``l+1`` one entry per node of level ``l``
(a node is ``FANOUT`` consecutive entries). The children of entry ``c`` of node ``j`` are node
``j*FANOUT + c`` one level down: no child references are stored. ``loff[l]`` and ``lcnt[l]`` give
each level's offset and entry count; the top level has one node (the root, depth 0). A level's
last node is filled up with the key type's largest value, so a descent reads every node as a
full one.
"""

from __future__ import annotations

import numpy as np
from numba import types, uint64

from splice.kernels.jit import kernel
from splice.kernels.numba_internals import overload

__all__ = [
    "LEAF_SIZE",
    "FANOUT",
    "MAX_LEVELS",
    "inner_capacity",
    "ibt_build",
    "ibt_lower_bound",
    "ibt_leaf",
    "ibt_leaf_bound",
    "ibt_leaf_route",
    "ibt_scan",
    "ibt_search",
    "ibt_levels",
    "ibt_route",
]

#: Entries per leaf block of the immutable B+-Tree.
LEAF_SIZE = 32
#: Inner-node fan-out ``f_ib`` of the immutable B+-Tree.
FANOUT = 32
#: Upper bound on inner levels (FANOUT**MAX_LEVELS leaves is far beyond memory).
MAX_LEVELS = 16


def inner_capacity(n: int) -> int:
    """Length of the inner-level array an immutable tree of ``n`` entries needs."""
    total = 0
    cnt = max(1, -(-n // LEAF_SIZE))
    while True:
        nodes = -(-cnt // FANOUT)
        total += nodes * FANOUT
        if nodes == 1:
            return total + FANOUT
        cnt = nodes


def ibt_levels(n: int) -> int:
    """Inner levels of an immutable tree of ``n`` entries (0 when empty)."""
    if n <= 0:
        return 0
    levels = 1
    cnt = -(-n // LEAF_SIZE)
    while cnt > FANOUT:
        cnt = -(-cnt // FANOUT)
        levels += 1
    return levels


def _key_top(inner):  # type: ignore[no-untyped-def]
    """The largest value of ``inner``'s key type: no search bound lies above it."""
    if inner.dtype.kind == "f":
        return np.inf
    return np.iinfo(inner.dtype).max


@overload(_key_top, inline="always")
def _key_top_ol(inner):  # type: ignore[no-untyped-def]
    if isinstance(inner.dtype, types.Integer):
        top = np.iinfo(np.dtype(str(inner.dtype))).max
        return lambda inner: top
    return lambda inner: np.inf


@kernel()
def ibt_build(ks, n, inner, loff, lcnt):
    """Build the inner levels over the sorted ``ks[:n]``; return the number of inner levels.
    Each level's last node is filled up with the key type's largest value, so that every node
    is searched as a full one (:func:`_child`)."""
    if n == 0:
        return 0
    top = _key_top(inner)
    nb = (n + LEAF_SIZE - 1) // LEAF_SIZE
    for b in range(nb):
        inner[b] = ks[b * LEAF_SIZE]
    off = 0
    cnt = nb
    lvl = 0
    while True:
        loff[lvl] = off
        lcnt[lvl] = cnt
        nodes = (cnt + FANOUT - 1) // FANOUT
        for j in range(off + cnt, off + nodes * FANOUT):
            inner[j] = top
        if nodes == 1:
            return lvl + 1
        noff = off + nodes * FANOUT
        for j in range(nodes):
            inner[noff + j] = inner[off + j * FANOUT]
        off = noff
        cnt = nodes
        lvl += 1


#: Keys per cache line (8-byte keys): the step of an inner node's or a leaf's search.
_LINE = 8


@kernel(inline="always")
def _count_below(a, base, size, lo):
    # how many of the sorted a[base : base + size] (size a multiple of _LINE) are below lo.
    # First the line: how many of the lines' first entries (8, 16, 24, ...) are below lo; then
    # the entries below lo in that line. Two short steps, each a few independent loads and
    # compares, instead of a count over all the entries: a descent waits on every level's
    # answer before it loads the next level, and this answer comes sooner
    # (docs/lab/band-joins.md, "An immutable node searched line by line")
    b = uint64(base)
    line = 0
    for s in range(_LINE, size, _LINE):
        line += a[b + uint64(s)] < lo
    o = b + uint64(line * _LINE)
    c = line * _LINE
    for j in range(_LINE):
        c += a[o + uint64(j)] < lo
    return c


@kernel(inline="always")
def _child(inner, base, lo):
    # the child of the node at inner[base] whose subtree holds lo: its entries j >= 1 below lo
    # (the padded last node, ibt_build, makes every node a full one)
    return max(_count_below(inner, base, FANOUT, lo) - 1, 0)


@kernel(inline="always")
def ibt_leaf_bound(ks, n, b, lo):
    """Index of the first entry with key >= ``lo`` given that it lies in leaf ``b`` or at the start
    of leaf ``b + 1`` (the line, then the entries in it, as :func:`_child`)."""
    i = b * LEAF_SIZE
    if i + LEAF_SIZE <= n:
        return i + _count_below(ks, i, LEAF_SIZE, lo)
    u = uint64(i)
    c = 0
    for j in range(n - i):
        c += ks[u + uint64(j)] < lo
    return i + c


@kernel(inline="always")
def ibt_leaf(inner, loff, nlev, lo):
    """The leaf whose block holds the first entry with key >= ``lo`` (or ends just before it)."""
    node = 0
    for lvl in range(nlev - 1, -1, -1):
        start = node * FANOUT
        node = start + _child(inner, loff[lvl] + start, lo)
    return node


@kernel(inline="always")
def ibt_leaf_route(inner, loff, nlev, lo, level):
    """:func:`ibt_leaf` and, from the same descent, the node of inner level ``level`` (below
    the root) whose subtree holds ``lo``: what :func:`ibt_route` finds at that level."""
    node = 0
    at = 0
    for lvl in range(nlev - 1, -1, -1):
        start = node * FANOUT
        node = start + _child(inner, loff[lvl] + start, lo)
        if lvl == level + 1:
            at = node
    return node, at


@kernel()
def ibt_lower_bound(ks, n, inner, loff, nlev, lo):
    """Index of the first entry with key >= ``lo`` (``n`` when none)."""
    if n == 0:
        return 0
    return ibt_leaf_bound(ks, n, ibt_leaf(inner, loff, nlev, lo), lo)


@kernel()
def ibt_search(ks, ps, base, n, inner, loff, nlev, lo, hi, plo, phi, out, n_out):
    """Append the positions in ``[plo, phi]`` of entries with key in ``[lo, hi]``; return the new
    count, or ``-1`` when ``out`` is full."""
    return ibt_scan(ks, ps, base, n, ibt_lower_bound(ks, n, inner, loff, nlev, lo), hi, plo,
                    phi, out, n_out)


@kernel(inline="always")
def ibt_scan(ks, ps, base, n, i, hi, plo, phi, out, n_out):
    """:func:`ibt_search` from entry ``i``, the first with key >= ``lo``."""
    cap = out.shape[0]
    while i < n:
        if ks[i] > hi:
            break
        pp = base + np.int64(ps[i])
        if pp >= plo and pp <= phi:
            if n_out >= cap:
                return -1
            out[n_out] = pp
            n_out += 1
        i += 1
    return n_out


@kernel()
def ibt_route(inner, loff, nlev, depth, k):
    """Node index at ``depth`` (root = 0) whose subtree holds key ``k`` on a descent."""
    node = 0
    for d in range(depth):
        lvl = nlev - 1 - d
        start = node * FANOUT
        node = start + _child(inner, loff[lvl] + start, k)
    return node

