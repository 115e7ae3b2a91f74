"""numba kernels of the band join over a whole arrival sequence (both streams interleaved).

The window-index state and the per-tuple probe/insert live in :mod:`splice.index._window`; here
the loop walks a mixed sequence, picking each tuple's own and opposite window by its side.
"""

from __future__ import annotations

from splice._atomics import atomic_cas, spin_lock, spin_unlock
from splice._atomics import atomic_load_seq_cst as atomic_load
from splice._atomics import atomic_xchg as atomic_store
from splice.index._bptree import bpt_insert, bpt_search, nodes_free
from splice.index._immutable import ibt_search
from splice.index._jit import kernel
from splice.index._window import (
    M_KIND,
    M_NEXT,
    M_NPART,
    M_POOLMIN,
    M_W,
    NLWJ,
    _pim_boundary,
    _pim_route,
    idx_insert,
    idx_search,
    sort_small,
)

__all__ = [
    "join_seq_run",
    "par_task",
    "par_insert_range",
    "advance_edge",
    "try_advance_edge",
    "rr_run",
    "LOW_LEFT_POOL",
    "LOW_RIGHT_POOL",
    "OUT_FULL",
]

LOW_LEFT_POOL, LOW_RIGHT_POOL, OUT_FULL = 1, 3, 2


@kernel()
def join_seq_run(sides, keys, start, offs_lo, offs_hi, st_l, st_r, self_join, out_g, out_p, n_out):
    """IBWJ over ``(sides[g], keys[g])`` from ``g = start``, in arrival order.

    A tuple of side ``s`` probes the opposite window (its own, before it, for a self-join) for
    keys in ``[x + offs_lo[s], x + offs_hi[s]]``, then enters its own window. Matches are
    ``(g, partner position)`` with partners ascending. Returns ``(next g, count, status)``:
    status 1/3 — the left/right pool needs room, 2 — ``out`` is full; 0 — done.
    """
    n = keys.shape[0]
    for g in range(start, n):
        s = sides[g]
        if s == 0 or self_join:
            own = st_l
            other = st_l if self_join else st_r
        else:
            own = st_r
            other = st_l
        meta = own[15]
        if nodes_free(own[6]) < meta[M_POOLMIN]:
            return g, n_out, LOW_LEFT_POOL if (s == 0 or self_join) else LOW_RIGHT_POOL
        x = keys[g]
        if self_join:
            phi = meta[M_NEXT] - 1
            plo = max(0, meta[M_NEXT] - meta[M_W])
        else:
            ometa = other[15]
            phi = ometa[M_NEXT] - 1
            plo = max(0, ometa[M_NEXT] - ometa[M_W])
        if phi >= plo:
            m0 = n_out
            r = idx_search(other, x + offs_lo[s], x + offs_hi[s], plo, phi, out_p, n_out)
            if r < 0:
                return g, m0, OUT_FULL
            n_out = r
            if other[15][M_KIND] != NLWJ:
                sort_small(out_p, m0, n_out)
            for j in range(m0, n_out):
                out_g[j] = g
        idx_insert(own, x)
    return n, n_out, 0


# --------------------------------------------------------------------------------------------
# parallel IBWJ over a shared task queue (PIM-Tree / IM-Tree windows), see parallel_band.py
# --------------------------------------------------------------------------------------------


@kernel()
def _par_search(st, locks, lo, hi, plo, phi, out, n_out):
    # T_S is immutable while tasks run: no lock. T_I partitions: one lock each, held per tree.
    sk, sp, si, sl, sc, sm = st[8], st[9], st[10], st[11], st[12], st[13]
    pk, pp, pc, pn, nx, tm, meta = st[0], st[1], st[2], st[3], st[4], st[7], st[15]
    n_out = ibt_search(sk[0], sp[0], sm[0, 0], si[0], sl[0], sc[0], sm[0, 1], lo, hi, plo, phi,
                       out, n_out)
    if n_out < 0:
        return -1
    parts = meta[M_NPART]
    q = 0 if parts <= 1 else _pim_route(st, lo)
    first = q
    while q < parts:
        if q > first and _pim_boundary(st, q) >= hi:
            break
        spin_lock(locks, q)
        n_out = bpt_search(pk, pp, pc, pn, nx, tm, q, lo, hi, plo, phi, out, n_out)
        spin_unlock(locks, q)
        if n_out < 0:
            return -1
        q += 1
    return n_out


@kernel()
def _par_insert(st, locks, k, p, path):
    q = _pim_route(st, k)
    spin_lock(locks, q)
    bpt_insert(st[0], st[1], st[2], st[3], st[4], st[5], st[6], st[7], q, k, p, path, True)
    spin_unlock(locks, q)


@kernel()
def par_task(g0, g1, sides, keys, pos, t_e, t_l, offs_lo, offs_hi, self_join, st_l, st_r,
             locks_l, locks_r, ring_l, ring_r, flags_l, flags_r, edge, elock, limits, allow, path,
             out_g, out_p, n_out, ins):
    """Result generation and index update for the tuples ``g0 .. g1-1`` of one task.

    A tuple of side ``s`` probes the opposite window ``o`` between ``t_e`` and ``t_l``: the index
    for positions before the edge tuple (read once, a possibly stale but safe value), a linear
    scan of the window from the edge to ``t_l``. Then, when ``allow[s]`` (no merge phase 1 on
    its window), it enters its own index and is flagged indexed (``ins[s]`` counts them), and
    the thread tries the edge mutex ``elock`` (test-and-set) to move the edge past it.
    Returns ``(next g, count, status)``; status 2: ``out`` is full (grow it and resume at
    ``next g``), 1: a node pool ran low (the join cannot continue).
    """
    for g in range(g0, g1):
        s = sides[g]
        o = s if self_join else 1 - s
        other = st_l if o == 0 else st_r
        olocks = locks_l if o == 0 else locks_r
        oring = ring_l if o == 0 else ring_r
        x = keys[g]
        klo = x + offs_lo[s]
        khi = x + offs_hi[s]
        te = t_e[g]
        tl = t_l[g]
        if tl >= te:
            e = atomic_load(edge, o)
            m0 = n_out
            r = n_out
            if e > te:
                r = _par_search(other, olocks, klo, khi, te, min(tl, e - 1), out_p, n_out)
            if r < 0:
                return g, m0, OUT_FULL
            sort_small(out_p, m0, r)
            rr = oring.shape[0]
            start = max(e, te)
            slot = start % rr
            cap = out_p.shape[0]
            for p in range(start, tl + 1):
                v = oring[slot]
                slot += 1
                if slot == rr:
                    slot = 0
                if v >= klo and v <= khi:
                    if r >= cap:
                        return g, m0, OUT_FULL
                    out_p[r] = p
                    r += 1
            n_out = r
            for j in range(m0, n_out):
                out_g[j] = g
        if allow[s]:
            own = st_l if s == 0 else st_r
            if nodes_free(own[6]) < own[15][M_POOLMIN]:
                return g, n_out, 1
            olk = locks_l if s == 0 else locks_r
            _par_insert(own, olk, x, pos[g], path)
            fl = flags_l if s == 0 else flags_r
            atomic_store(fl, pos[g] % fl.shape[0], 1)
            ins[s] += 1
            try_advance_edge(fl, edge, s, limits[s], elock)
    return g1, n_out, 0


@kernel()
def par_insert_range(st, locks, ring, flags, p0, p1, path):
    """Merge phase 2: insert positions ``p0 .. p1`` not yet indexed (the pending updates)."""
    r = ring.shape[0]
    n = 0
    for p in range(p0, p1 + 1):
        if atomic_load(flags, p % r) == 0:
            if nodes_free(st[6]) < st[15][M_POOLMIN]:
                return -1
            _par_insert(st, locks, ring[p % r], p, path)
            atomic_store(flags, p % r, 1)
            n += 1
    return n


@kernel()
def try_advance_edge(flags, edge, s, limit, elock):
    """Test-and-set the edge mutex; when won, move stream ``s``'s edge and release it.
    Returns whether the edge was updated."""
    if atomic_cas(elock, 0, 0, 1) != 0:
        return False
    advance_edge(flags, edge, s, limit)
    atomic_store(elock, 0, 0)
    return True


@kernel()
def advance_edge(flags, edge, s, limit):
    """Move stream ``s``'s edge tuple past the indexed positions (below ``limit``)."""
    e = edge[s]
    r = flags.shape[0]
    while e < limit and atomic_load(flags, e % r) == 1:
        e += 1
    atomic_store(edge, s, e)
    return e


# --------------------------------------------------------------------------------------------
# round-robin partitioned join (baseline): thread t owns the window positions p % T == t
# --------------------------------------------------------------------------------------------


@kernel()
def rr_run(start, sides, keys, pos, t_e, t_l, offs_lo, offs_hi, self_join, part, parts,
           st_l, st_r, out_g, out_p, n_out):
    """One thread of the round-robin join: every tuple probes partition ``part`` of the
    opposite window (global positions ``[t_e, t_l]``), and enters partition ``part`` of its own
    window when ``pos % parts == part``. Matches carry global positions. Returns
    ``(next g, count, status)`` as :func:`join_seq_run`."""
    n = keys.shape[0]
    for g in range(start, n):
        s = sides[g]
        o = s if self_join else 1 - s
        other = st_l if o == 0 else st_r
        own = st_l if s == 0 else st_r
        mine = pos[g] % parts == part
        if mine and nodes_free(own[6]) < own[15][M_POOLMIN]:
            return g, n_out, LOW_LEFT_POOL if s == 0 else LOW_RIGHT_POOL
        x = keys[g]
        te = t_e[g]
        tl = t_l[g]
        llo = (te - part + parts - 1) // parts if te > part else 0
        lhi = (tl - part) // parts if tl >= part else -1
        if lhi >= llo:
            m0 = n_out
            r = idx_search(other, x + offs_lo[s], x + offs_hi[s], llo, lhi, out_p, n_out)
            if r < 0:
                return g, m0, OUT_FULL
            n_out = r
            for j in range(m0, n_out):
                out_p[j] = out_p[j] * parts + part
                out_g[j] = g
        if mine:
            idx_insert(own, x)
    return n, n_out, 0
