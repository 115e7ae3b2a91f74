"""numba kernels of the classic B+-Tree: a pool of nodes shared by several trees.

Entries are ``(key, pos)`` pairs ordered lexicographically, so every entry is unique (a window
position is) and delete finds exactly one entry. The pool is a set of preallocated arrays:

* ``keys[n, j]``, ``poss[n, j]`` — the entries of leaf ``n``; in an inner node, slot ``j >= 1``
  holds the separator of child ``j`` (the smallest entry of that child when it was split off),
* ``child[n, j]`` — the children of inner node ``n`` (``cnt[n]`` of them),
* ``cnt[n]`` — entries of a leaf, children of an inner node,
* ``nxt[n]``, ``prv[n]`` — the leaf chain of one tree (``-1`` ends it); ``nxt`` also links the free
  list,
* ``pmeta`` — ``[free list head, bump pointer, capacity, free count]``,
* ``tmeta[t]`` — ``[root, height, size]`` of tree ``t`` (``root == -1``: empty; height 1: the root
  is a leaf).

Rows are ``NODE_WIDTH + 1`` wide: a node overflows by one entry and is split at once. Deletion
removes empty nodes (and collapses a root with one child) but does not merge underfull neighbours;
under a sliding window the inserts refill them. Callers make sure at least :func:`nodes_needed`
nodes are free before an insert; the kernels never allocate.
"""

from __future__ import annotations

import numpy as np
from numba import uint64

from splice.kernels.atomics import atomic_add
from splice.kernels.jit import kernel

__all__ = [
    "NODE_WIDTH",
    "new_pool",
    "pool_bytes",
    "nodes_free",
    "bpt_insert",
    "bpt_delete",
    "bpt_search",
    "bpt_reset",
    "bpt_free_tree",
    "bpt_first_leaf",
    "bpt_insert_many",
    "bpt_delete_many",
]

#: Entries per leaf and children per inner node of the classic B+-Tree.
NODE_WIDTH = 32
_ROW = NODE_WIDTH + 1

P_FREE, P_BUMP, P_CAP, P_NFREE = 0, 1, 2, 3
T_ROOT, T_HEIGHT, T_SIZE = 0, 1, 2


def _node_arrays(capacity: int, dtype: np.dtype) -> list[tuple[tuple[int, ...], np.dtype]]:
    # shape and type of keys, poss, child, cnt, nxt, prv for ``capacity`` nodes
    row = (capacity, _ROW)
    i32 = np.dtype(np.int32)
    return [(row, np.dtype(dtype)), (row, np.dtype(np.int64)), (row, i32), ((capacity,), i32),
            ((capacity,), i32), ((capacity,), i32)]


def pool_bytes(capacity: int, dtype: np.dtype) -> int:
    """Bytes of the node arrays :func:`new_pool` allocates for ``capacity`` nodes of ``dtype``
    keys (before it allocates them)."""
    return sum(int(np.prod(shape)) * t.itemsize
               for shape, t in _node_arrays(max(int(capacity), 8), dtype))


def new_pool(capacity: int, trees: int, dtype: np.dtype) -> tuple:
    """Arrays of an empty pool of ``capacity`` nodes hosting ``trees`` trees of ``dtype`` keys."""
    capacity = max(int(capacity), 8)
    keys, poss, child, cnt, nxt, prv = (np.zeros(shape, t)
                                        for shape, t in _node_arrays(capacity, dtype))
    nxt[:] = -1
    prv[:] = -1
    pmeta = np.array([-1, 0, capacity, 0], np.int64)
    tmeta = np.zeros((max(int(trees), 1), 3), np.int64)
    tmeta[:, T_ROOT] = -1
    return keys, poss, child, cnt, nxt, prv, pmeta, tmeta


@kernel(inline="always")
def nodes_free(pmeta: np.ndarray) -> int:
    """Nodes that can still be allocated."""
    return pmeta[P_CAP] - pmeta[P_BUMP] + pmeta[P_NFREE]


@kernel(inline="always")
def _alloc(pmeta, nxt, prv, cnt, atomic):
    f = pmeta[P_FREE]
    if atomic:
        # several threads insert into disjoint trees of one pool: bump atomically (no frees)
        n = atomic_add(pmeta, P_BUMP, 1)
    elif f >= 0:
        pmeta[P_FREE] = nxt[f]
        pmeta[P_NFREE] -= 1
        n = f
    else:
        n = pmeta[P_BUMP]
        pmeta[P_BUMP] = n + 1
    nxt[n] = -1
    prv[n] = -1
    cnt[n] = 0
    return n


@kernel(inline="always")
def _free(pmeta, nxt, n):
    nxt[n] = pmeta[P_FREE]
    pmeta[P_FREE] = n
    pmeta[P_NFREE] += 1


@kernel(inline="always")
def _count_lt(keys, n, j0, m, k):
    # slots j in [j0, m) of node n with keys[n, j] < k: a count, not a binary search (no branch
    # to mispredict; the row's cache lines load in parallel, not one after another)
    c = 0
    row = uint64(n)
    for j in range(uint64(j0), uint64(m)):
        c += keys[row, j] < k
    return c


@kernel(inline="always")
def _count_less(keys, poss, n, j0, m, k, p):
    # slots j in [j0, m) of node n whose entry is < (k, p) (entries <= (k, p): pass p + 1, the
    # positions being integers); poss is read only on equal keys
    c = 0
    e = 0
    row = uint64(n)
    for j in range(uint64(j0), uint64(m)):
        kk = keys[row, j]
        c += kk < k
        e += kk == k
    if e != 0:
        for j in range(uint64(j0), uint64(m)):
            c += (keys[row, j] == k) & (poss[row, j] < p)
    return c


@kernel(inline="always")
def _route(keys, poss, cnt, n, k, p):
    # child slot of inner node n for entry (k, p): last slot whose separator <= (k, p)
    return _count_less(keys, poss, n, 1, cnt[n], k, p + 1)


@kernel()
def bpt_insert(keys, poss, child, cnt, nxt, prv, pmeta, tmeta, t, k, p, path, atomic=False):
    """Insert entry ``(k, p)`` into tree ``t``; ``path`` is scratch of >= 128 int64.

    ``atomic``: other threads insert into other trees of the pool at the same time (the caller
    holds tree ``t``'s lock); nodes then come from an atomic bump pointer.
    """
    root = tmeta[t, T_ROOT]
    if root < 0:
        n = _alloc(pmeta, nxt, prv, cnt, atomic)
        keys[n, 0] = k
        poss[n, 0] = p
        cnt[n] = 1
        tmeta[t, T_ROOT] = n
        tmeta[t, T_HEIGHT] = 1
        tmeta[t, T_SIZE] = 1
        return
    height = tmeta[t, T_HEIGHT]
    n = root
    for lvl in range(height - 1):
        c = _route(keys, poss, cnt, n, k, p)
        path[2 * lvl] = n
        path[2 * lvl + 1] = c
        n = child[n, c]
    # leaf: first slot whose entry > (k, p)
    m = cnt[n]
    lo = _count_less(keys, poss, n, 0, m, k, p + 1)
    for j in range(m, lo, -1):
        keys[n, j] = keys[n, j - 1]
        poss[n, j] = poss[n, j - 1]
    keys[n, lo] = k
    poss[n, lo] = p
    cnt[n] = m + 1
    tmeta[t, T_SIZE] += 1
    if m + 1 <= NODE_WIDTH:
        return
    # split the leaf: the right half moves to a new node
    r = _alloc(pmeta, nxt, prv, cnt, atomic)
    total = m + 1
    half = total >> 1
    for j in range(half, total):
        keys[r, j - half] = keys[n, j]
        poss[r, j - half] = poss[n, j]
    cnt[r] = total - half
    cnt[n] = half
    nx = nxt[n]
    nxt[r] = nx
    prv[r] = n
    if nx >= 0:
        prv[nx] = r
    nxt[n] = r
    sk = keys[r, 0]
    sp = poss[r, 0]
    for lvl in range(height - 2, -1, -1):
        q = path[2 * lvl]
        c = path[2 * lvl + 1]
        m = cnt[q]
        for j in range(m, c + 1, -1):
            child[q, j] = child[q, j - 1]
            keys[q, j] = keys[q, j - 1]
            poss[q, j] = poss[q, j - 1]
        child[q, c + 1] = r
        keys[q, c + 1] = sk
        poss[q, c + 1] = sp
        cnt[q] = m + 1
        if m + 1 <= NODE_WIDTH:
            return
        total = m + 1
        half = total >> 1
        r2 = _alloc(pmeta, nxt, prv, cnt, atomic)
        for j in range(half, total):
            child[r2, j - half] = child[q, j]
            keys[r2, j - half] = keys[q, j]
            poss[r2, j - half] = poss[q, j]
        cnt[r2] = total - half
        cnt[q] = half
        sk = keys[q, half]
        sp = poss[q, half]
        r = r2
    nr = _alloc(pmeta, nxt, prv, cnt, atomic)
    child[nr, 0] = root
    child[nr, 1] = r
    keys[nr, 1] = sk
    poss[nr, 1] = sp
    cnt[nr] = 2
    tmeta[t, T_ROOT] = nr
    tmeta[t, T_HEIGHT] = height + 1


@kernel()
def bpt_delete(keys, poss, child, cnt, nxt, prv, pmeta, tmeta, t, k, p, path):
    """Delete entry ``(k, p)`` from tree ``t``; return 1 when it was there, else 0."""
    root = tmeta[t, T_ROOT]
    if root < 0:
        return 0
    height = tmeta[t, T_HEIGHT]
    n = root
    for lvl in range(height - 1):
        c = _route(keys, poss, cnt, n, k, p)
        path[2 * lvl] = n
        path[2 * lvl + 1] = c
        n = child[n, c]
    m = cnt[n]
    lo = _count_less(keys, poss, n, 0, m, k, p)
    if lo >= m or keys[n, lo] != k or poss[n, lo] != p:
        return 0
    for j in range(lo, m - 1):
        keys[n, j] = keys[n, j + 1]
        poss[n, j] = poss[n, j + 1]
    cnt[n] = m - 1
    tmeta[t, T_SIZE] -= 1
    if m - 1 > 0:
        return 1
    if height == 1:
        _free(pmeta, nxt, n)
        tmeta[t, T_ROOT] = -1
        tmeta[t, T_HEIGHT] = 0
        return 1
    # unlink the empty leaf from the chain and remove it from its parent, upwards while empty
    pv = prv[n]
    nx = nxt[n]
    if pv >= 0:
        nxt[pv] = nx
    if nx >= 0:
        prv[nx] = pv
    _free(pmeta, nxt, n)
    for lvl in range(height - 2, -1, -1):
        q = path[2 * lvl]
        c = path[2 * lvl + 1]
        m = cnt[q]
        for j in range(c, m - 1):
            child[q, j] = child[q, j + 1]
            keys[q, j] = keys[q, j + 1]
            poss[q, j] = poss[q, j + 1]
        cnt[q] = m - 1
        if m - 1 > 0:
            break
        _free(pmeta, nxt, q)
        if lvl == 0:
            tmeta[t, T_ROOT] = -1
            tmeta[t, T_HEIGHT] = 0
            return 1
    root = tmeta[t, T_ROOT]
    while tmeta[t, T_HEIGHT] > 1 and cnt[root] == 1:
        old = root
        root = child[root, 0]
        _free(pmeta, nxt, old)
        tmeta[t, T_HEIGHT] -= 1
    tmeta[t, T_ROOT] = root
    return 1


@kernel()
def bpt_search(keys, poss, child, cnt, nxt, tmeta, t, lo, hi, plo, phi, out, n_out):
    """Append to ``out`` the positions in ``[plo, phi]`` of tree ``t`` entries with key in
    ``[lo, hi]``, in key order; return the new count, or ``-1`` when ``out`` is full."""
    n = tmeta[t, T_ROOT]
    if n < 0:
        return n_out
    cap = out.shape[0]
    for _ in range(tmeta[t, T_HEIGHT] - 1):
        n = child[n, _count_lt(keys, n, 1, cnt[n], lo)]
    j = _count_lt(keys, n, 0, cnt[n], lo)
    while n >= 0:
        m = cnt[n]
        while j < m:
            kk = keys[n, j]
            if kk > hi:
                return n_out
            pp = poss[n, j]
            if pp >= plo and pp <= phi:
                if n_out >= cap:
                    return -1
                out[n_out] = pp
                n_out += 1
            j += 1
        n = nxt[n]
        j = 0
    return n_out


@kernel()
def bpt_first_leaf(child, tmeta, t):
    """The leftmost leaf of tree ``t`` (``-1`` when empty): the start of its sorted leaf chain."""
    n = tmeta[t, T_ROOT]
    if n < 0:
        return -1
    for _ in range(tmeta[t, T_HEIGHT] - 1):
        n = child[n, 0]
    return n


@kernel()
def bpt_free_tree(child, cnt, nxt, pmeta, tmeta, t, path):
    """Return every node of tree ``t`` to the pool's free list; the tree becomes empty.

    ``path`` is scratch of >= 1024 int64 (a depth-first stack in its upper part).
    """
    root = tmeta[t, T_ROOT]
    if root >= 0:
        base = 128
        half = (path.shape[0] - base) // 2
        path[base] = root
        path[base + half] = tmeta[t, T_HEIGHT]
        top = 1
        while top > 0:
            top -= 1
            n = path[base + top]
            h = path[base + half + top]
            if h > 1:
                for j in range(cnt[n]):
                    path[base + top] = child[n, j]
                    path[base + half + top] = h - 1
                    top += 1
            _free(pmeta, nxt, n)
    tmeta[t, T_ROOT] = -1
    tmeta[t, T_HEIGHT] = 0
    tmeta[t, T_SIZE] = 0


@kernel()
def bpt_reset(pmeta, tmeta):
    """Empty every tree of the pool and the pool itself (O(trees))."""
    pmeta[P_FREE] = -1
    pmeta[P_BUMP] = 0
    pmeta[P_NFREE] = 0
    for t in range(tmeta.shape[0]):
        tmeta[t, T_ROOT] = -1
        tmeta[t, T_HEIGHT] = 0
        tmeta[t, T_SIZE] = 0


@kernel()
def bpt_insert_many(keys, poss, child, cnt, nxt, prv, pmeta, tmeta, t, ks, ps, start, path):
    """Insert ``(ks[i], ps[i])`` from ``start``; return where it stopped for lack of nodes."""
    for i in range(start, ks.shape[0]):
        if nodes_free(pmeta) < 2 * tmeta[t, T_HEIGHT] + 4:
            return i
        bpt_insert(keys, poss, child, cnt, nxt, prv, pmeta, tmeta, t, ks[i], ps[i], path)
    return ks.shape[0]


@kernel()
def bpt_delete_many(keys, poss, child, cnt, nxt, prv, pmeta, tmeta, t, ks, ps, path):
    """Delete each ``(ks[i], ps[i])``; return how many were found."""
    found = 0
    for i in range(ks.shape[0]):
        found += bpt_delete(keys, poss, child, cnt, nxt, prv, pmeta, tmeta, t, ks[i], ps[i], path)
    return found
