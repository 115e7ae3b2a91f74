"""numba kernels of the band join over a whole arrival sequence (both streams interleaved).

The window-index state and the per-tuple probe/insert live in :mod:`splice.index._window`; here
the loop walks a mixed sequence, picking each tuple's own and opposite window by its side.
"""

from __future__ import annotations

from numba import njit

from splice.index._bptree import nodes_free
from splice.index._window import (
    M_KIND,
    M_NEXT,
    M_POOLMIN,
    M_W,
    NLWJ,
    idx_insert,
    idx_search,
    sort_small,
)

__all__ = ["join_seq_run", "LOW_LEFT_POOL", "LOW_RIGHT_POOL", "OUT_FULL"]

LOW_LEFT_POOL, LOW_RIGHT_POOL, OUT_FULL = 1, 3, 2


@njit(cache=True, nogil=True)
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
