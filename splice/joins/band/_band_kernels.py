"""numba kernels of the band join over a whole arrival sequence (both streams interleaved).

The window-index state and the per-tuple probe/insert live in :mod:`splice.index._window`; here
the loop walks a mixed sequence, picking each tuple's own and opposite window by its side.
"""

from __future__ import annotations

import numpy as np

from splice.index._band_bounds import band_bounds, band_cover, band_low
from splice.index._bptree import bpt_insert, bpt_search, nodes_free
from splice.index._immutable import ibt_search
from splice.index._ti_filter import filter_add
from splice.index._window import (
    DESCENTS,
    M_FSHIFT,
    M_KIND,
    M_NEXT,
    M_NPART,
    M_POOLMIN,
    M_W,
    NLWJ,
    PREFETCH_AHEAD,
    _pim_boundary,
    _pim_route,
    clear_descents,
    idx_insert,
    idx_search,
    im_merge,
    insert_prefetch,
    merge_install,
    merge_into,
    route_from,
    search_from,
    search_prefetch,
    sort_small,
    ts_base,
    ts_keys,
)
from splice.kernels.atomics import (
    atomic_cas,
    atomic_cas_acquire,
    atomic_or,
    cycle_counter,
    sched_yield,
    spin_lock,
    spin_unlock,
)
from splice.kernels.atomics import atomic_load_acquire as atomic_load
from splice.kernels.atomics import atomic_store_release as store_release
from splice.kernels.atomics import atomic_xchg as atomic_store
from splice.kernels.jit import kernel
from splice.kernels.numba_internals import trailing_zeros

__all__ = [
    "join_seq_run",
    "par_task",
    "par_worker",
    "cycles",
    "par_insert_range",
    "clear_bits",
    "chunk_setup",
    "gather_tasks",
    "advance_edge",
    "try_advance_edge",
    "rr_run",
    "range_run",
    "range_split",
    "range_gather",
    "merge_two",
    "LOCK_STRIDE",
    "LOW_LEFT_POOL",
    "LOW_RIGHT_POOL",
    "OUT_FULL",
    "TS_FULL",
    "C_LEN",
    "C_ERROR",
    "C_HEAD",
    "C_MERGES",
    "R_LEN",
    "R_TASK",
    "R_SPIN_PART",
    "R_WAIT_MERGE",
]

LOW_LEFT_POOL, LOW_RIGHT_POOL, OUT_FULL = 1, 3, 2
#: :func:`par_worker` status: ``T_S`` too small at a merge (callers size it so it cannot happen)
TS_FULL = 4

# cells of the parallel join's control array ``ctl`` (see :func:`par_worker`)
# (the queue cells, the propagation cells and the rest on separate cache lines)
C_QLOCK, C_NEXT, C_ACTIVE, C_BLOCKED = 0, 1, 2, 3
C_PLOCK, C_HEAD = 8, 9
C_ERROR, C_MERGES = 16, 17
C_LEN = 24
#: int64 cells between two partition locks (one cache line each: no false sharing)
LOCK_STRIDE = 8
# task status in the work queue
AVAILABLE, ACTIVE, COMPLETED = 0, 1, 2
# cells of a thread's resume record ``res``
R_TASK, R_G, R_ALLOW, R_CUR, R_INS = 0, 1, 2, 4, 6
R_SPIN_PART, R_SPIN_QUEUE, R_WAIT_MERGE, R_YIELDS, R_SCANNED = 8, 9, 10, 11, 12
R_LEN = 16


@kernel(inline="always")
def _seq_step(g, s, x, own, other, offs_lo, offs_hi, mirrored, out_g, out_p, n_out, descents,
              j):
    # one tuple of the serial join: probe ``other``, then enter ``own``; returns (count, status).
    # j >= 0: slot j of descents holds the descent made for this search while prefetching
    meta = own.meta
    if nodes_free(own.pmeta) < meta[M_POOLMIN]:
        return n_out, 1
    ometa = other.meta
    phi = ometa[M_NEXT] - 1
    plo = max(0, ometa[M_NEXT] - ometa[M_W])
    if phi >= plo:
        m0 = n_out
        klo, khi = band_bounds(x, offs_lo[s], offs_hi[s], mirrored)
        r = search_from(other, klo, khi, plo, phi, out_p, n_out, descents, j)
        if r < 0:
            return m0, OUT_FULL
        n_out = r
        if r - m0 > 1 and ometa[M_KIND] != NLWJ:
            sort_small(out_p, m0, n_out)
        for i in range(m0, n_out):
            out_g[i] = g
    idx_insert(own, x, route_from(own, descents, j))
    return n_out, 0


@kernel(inline="always")
def _seq_tuple(g, sides, keys, offs_lo, offs_hi, st_l, st_r, self_join, out_g, out_p, n_out,
               descents, j):
    # the step of tuple g, written once per side with the states fixed; returns (count, status)
    s = sides[g]
    x = keys[g]
    if s == 0 or self_join:
        n_out, status = _seq_step(g, s, x, st_l, st_r, offs_lo, offs_hi, False, out_g, out_p,
                                  n_out, descents, j)
        return n_out, LOW_LEFT_POOL if status == 1 else status
    n_out, status = _seq_step(g, s, x, st_r, st_l, offs_lo, offs_hi, True, out_g, out_p, n_out,
                              descents, j)
    return n_out, LOW_RIGHT_POOL if status == 1 else status


@kernel(inline="always")
def _seq_prefetch(a, sides, keys, offs_lo, offs_hi, st_l, st_r, self_join, descents, inserts):
    # start loading the leaves that tuple a will search (as _seq_tuple picks its states), the
    # descent to its slot of descents; ``inserts``: also the T_I node its insert changes
    s = sides[a]
    j = a & (DESCENTS - 1)
    x = keys[a]
    if s == 0 or self_join:
        search_prefetch(st_r, band_low(x, offs_lo[s], offs_hi[s], False), descents, j)
        if inserts:
            insert_prefetch(st_l, x, descents, j)
    else:
        search_prefetch(st_l, band_low(x, offs_lo[s], offs_hi[s], True), descents, j)
        if inserts:
            insert_prefetch(st_r, x, descents, j)


@kernel()
def join_seq_run(sides, keys, start, offs_lo, offs_hi, st_l, st_r, self_join, out_g, out_p, n_out,
                 prefetch, descents):
    """IBWJ over ``(sides[g], keys[g])`` from ``g = start``, in arrival order.

    A tuple of side ``s`` probes the opposite window (its own, before it, for a self-join: then
    ``st_l`` and ``st_r`` are the same state) for keys in ``[x + offs_lo[s], x + offs_hi[s]]``,
    then enters its own window. Matches are ``(g, partner position)`` with partners ascending.
    Returns ``(next g, count, status)``: status 1/3 — the left/right pool needs room, 2 — ``out``
    is full; 0 — done. ``prefetch``: at tuple ``g``, start loading the leaves that tuple
    ``g + PREFETCH_AHEAD`` will search (:func:`~splice.index._window.search_prefetch`) and keep
    the descent that found them in ``descents`` (:func:`~splice.index._window.new_descents`)
    for that search; at 2, also the ``T_I`` node its insert will change, and its route
    (:func:`~splice.index._window.insert_prefetch`); 0: neither.

    The step is written out once per side with the states fixed: choosing between the two
    states per tuple made every array of both live across the loop (hundreds of values kept and
    spilled per tuple, more than the probe of a small window costs). Prefetching or not, the
    loop is the same: a loop of each kind doubled the inlined searches and the compile time for
    no measurable gain (docs/lab/band-joins.md, "Compile time halved").
    """
    n = keys.shape[0]
    if prefetch:
        clear_descents(descents)
    for g in range(start, n):
        if prefetch:
            a = g + PREFETCH_AHEAD
            if a < n:
                _seq_prefetch(a, sides, keys, offs_lo, offs_hi, st_l, st_r, self_join, descents,
                              prefetch >= 2)
        n_out, status = _seq_tuple(g, sides, keys, offs_lo, offs_hi, st_l, st_r, self_join,
                                   out_g, out_p, n_out, descents,
                                   g & (DESCENTS - 1) if prefetch else -1)
        if status != 0:
            return g, n_out, status
    return n, n_out, 0


# --------------------------------------------------------------------------------------------
# parallel IBWJ over a shared task queue (PIM-Tree / IM-Tree windows), see parallel_band.py
# --------------------------------------------------------------------------------------------


@kernel(inline="always")
def _lock(locks, i, res, cell):
    # spin lock ``locks[i]`` counting failed attempts in ``res[cell]``; yield after a short spin
    if atomic_cas_acquire(locks, i, 0, 1) == 0:
        return
    res[cell] += 1
    spins = 0
    while atomic_cas_acquire(locks, i, 0, 1) != 0:
        spins += 1
        if spins >= 64:
            res[R_YIELDS] += 1
            sched_yield()
            spins = 0


@kernel(inline="always")
def _par_search(st, locks, lo, hi, plo, phi, out, n_out, res):
    # T_S is immutable while tasks run: no lock. T_I partitions: one lock each, held per tree.
    # Inlined into par_task: called once per tuple with two dozen array arguments, the call
    # alone cost the 1-thread parallel join a sizable share of the serial join's rate
    # (docs/lab/band-joins.md, "The paper's task-queue join").
    ibt_meta = st.ibt_meta
    s_k, s_p = ts_keys(st)
    n_out = ibt_search(s_k, s_p, ts_base(st), ibt_meta[0, 0], st.ibt_inner[0], st.ibt_loff[0],
                       ibt_meta[0, 1], lo, hi, plo, phi, out, n_out)
    if n_out < 0:
        return -1
    parts = st.meta[M_NPART]
    q = 0 if parts <= 1 else _pim_route(st, lo)
    first = q
    while q < parts:
        if q > first and _pim_boundary(st, q) >= hi:
            break
        _lock(locks, q * LOCK_STRIDE, res, R_SPIN_PART)
        n_out = bpt_search(st.keys, st.poss, st.child, st.cnt, st.nxt, st.tmeta, q, lo, hi, plo,
                           phi, out, n_out)
        spin_unlock(locks, q * LOCK_STRIDE)
        if n_out < 0:
            return -1
        q += 1
    return n_out


@kernel(inline="always")
def _par_insert(st, locks, k, p, path, res):
    # the T_I filter's words of partition q are its own (a word at least): written under its lock
    q = _pim_route(st, k)
    _lock(locks, q * LOCK_STRIDE, res, R_SPIN_PART)
    bpt_insert(st.keys, st.poss, st.child, st.cnt, st.nxt, st.prv, st.pmeta, st.tmeta, q, k, p, path,
               True)
    filter_add(st.filter_bits, st.filter_geo, st.meta[M_FSHIFT], q, k)
    spin_unlock(locks, q * LOCK_STRIDE)


@kernel()
def par_task(g0, g1, sides, keys, pos, t_e, t_l, offs_lo, offs_hi, self_join, st_l, st_r,
             locks_l, locks_r, ring_l, ring_r, bits_l, bits_r, edge, elock, limits, res, path,
             out_g, out_p, n_out):
    """Result generation and index update for the tuples ``g0 .. g1-1`` of one task.

    A tuple of side ``s`` probes the opposite window ``o`` between ``t_e`` and ``t_l``. First it
    scans the positions from the edge tuple (read once, a possibly stale but safe value) to
    ``t_l`` that are not flagged indexed in the bitmap ``bits_o`` (one read per word of 64
    positions, whose zero bits are visited by trailing-zero count, so a stalled edge — a
    preempted thread's unfinished task — costs a word per 64 positions, and indexed positions
    cost nothing, not a step each); then it searches the
    index over the whole range ``[t_e, t_l]`` and drops the hits the scan already matched (an
    entry is flagged only after its insert, so nothing is missed). Then, when
    ``res[R_ALLOW + s]`` (no merge phase 1 on its window), it enters its own index
    (``res[R_INS + s]`` counts them; lock waits and scanned entries are counted in ``res``
    too); its indexed flag is set with the task's others of the same bitmap word, when the task
    moves to another word and at every return (the task's own scans count those pending flags
    as set). The caller moves the edge tuples once per task (:func:`try_advance_edge`).
    Returns ``(next g, count, status)``; status 2: ``out`` is full (grow it and resume at
    ``next g``), 1: a node pool ran low (the join cannot continue).
    """
    # indexed flags are set once per bitmap word and task, not per tuple: the words are shared
    # with the task another thread runs next to this one (an atomic or per tuple would move
    # their cache line between the cores every time); until then a probe finds these positions
    # by the scan and drops the index's duplicates
    fw0 = -1
    fm0 = 0
    fw1 = -1
    fm1 = 0
    if self_join:  # one window: every tuple probes and enters it (its flags are side 0's)
        st_r, locks_r, ring_r, bits_r = st_l, locks_l, ring_l, bits_l
    for g in range(g0, g1):
        s = sides[g]
        # the step is written out once per side with the windows fixed (see join_seq_run)
        if s == 0:
            n_next, status, fw0, fm0 = _par_step(
                g, s, 1 - s if not self_join else s, keys[g], pos[g], t_e[g], t_l[g],
                offs_lo, offs_hi, st_l, st_r, locks_l, locks_r, ring_r, bits_l, bits_r,
                fw0, fm0, fw0 if self_join else fw1, fm0 if self_join else fm1, edge, res,
                path, out_g, out_p, n_out)
        else:
            n_next, status, fw1, fm1 = _par_step(
                g, s, 0, keys[g], pos[g], t_e[g], t_l[g], offs_lo, offs_hi, st_r, st_l,
                locks_r, locks_l, ring_l, bits_r, bits_l, fw1, fm1, fw0, fm0, edge, res, path,
                out_g, out_p, n_out)
        if status != 0:
            _flush(bits_l, fw0, fm0)
            _flush(bits_r, fw1, fm1)
            return g, n_next, status
        n_out = n_next
    _flush(bits_l, fw0, fm0)
    _flush(bits_r, fw1, fm1)
    return g1, n_out, 0


@kernel(inline="always")
def _par_step(g, s, o, x, pg, te, tl, offs_lo, offs_hi, own, other, own_locks, other_locks,
              oring, own_bits, obits, fw_s, fm_s, fw_o, fm_o, edge, res, path, out_g, out_p,
              n_out):
    # one tuple of a task (see par_task): probe window ``o`` (``other``), then enter its own;
    # (fw_s, fm_s) / (fw_o, fm_o): the task's pending indexed flags of its own / the other
    # window. Returns (count, status, fw_s, fm_s); on status OUT_FULL the count is the one
    # before this tuple, to resume at it.
    klo, khi = band_bounds(x, offs_lo[s], offs_hi[s], s == 1)  # a self-join's sides are 0
    if tl >= te:
        # 1) the window's positions from the edge to t_l that are not indexed yet, by a
        #    scan of the indexed bitmap (64 positions a word; whole indexed words skipped)
        e = atomic_load(edge, o)
        m0 = n_out
        r = n_out
        cap = out_p.shape[0]
        mask = oring.shape[0] - 1
        p = max(e, te)
        start = p
        while p <= tl:
            # the word of ``p``: its not-indexed bits from ``p`` to ``min(tl, word end)``,
            # visited by trailing-zero count (no step per indexed position)
            slot = p & mask
            b = slot & 63
            span = min(64 - b, tl - p + 1)
            wd = atomic_load(obits, slot >> 6)
            # this task's own inserts whose flags are not set yet are indexed too
            if slot >> 6 == fw_o:
                wd |= fm_o
            z = ~wd >> b
            if span < 64:
                z &= (1 << span) - 1
            while z != 0:
                q = p + trailing_zeros(z)
                z &= z - 1
                res[R_SCANNED] += 1
                v = oring[q & mask]
                if v >= klo and v <= khi:
                    if r >= cap:
                        return m0, OUT_FULL, fw_s, fm_s
                    out_p[r] = q
                    r += 1
            p += span
        m1 = r
        # 2) the index over the whole range: every position flagged before the scan is in
        #    it (flag stored after the insert); drop what the scan matched already
        r = _par_search(other, other_locks, klo, khi, te, tl, out_p, r, res)
        if r < 0:
            return m0, OUT_FULL, fw_s, fm_s
        k = m1
        for j in range(m1, r):
            pj = out_p[j]
            dup = False
            if pj >= start:
                for i in range(m0, m1):
                    if out_p[i] == pj:
                        dup = True
                        break
            if not dup:
                out_p[k] = pj
                k += 1
        n_out = k
        if n_out - m0 > 1:
            sort_small(out_p, m0, n_out)
        for j in range(m0, n_out):
            out_g[j] = g
    if res[R_ALLOW + s]:
        if nodes_free(own.pmeta) < own.meta[M_POOLMIN]:
            return n_out, 1, fw_s, fm_s
        _par_insert(own, own_locks, x, pg, path, res)
        res[R_INS + s] += 1
        slot = pg & (own_bits.shape[0] * 64 - 1)
        if slot >> 6 != fw_s:
            _flush(own_bits, fw_s, fm_s)
            fw_s = slot >> 6
            fm_s = 0
        fm_s |= 1 << (slot & 63)
    return n_out, 0, fw_s, fm_s


@kernel(inline="always")
def _flush(bits, w, m):
    # set the indexed flags ``m`` of word ``w`` (after their inserts)
    if m != 0:
        atomic_or(bits, w, m)


@kernel(inline="always")
def _flag(bits, p):
    # mark position p indexed (after its insert: a probe that sees the bit finds the entry)
    slot = p & (bits.shape[0] * 64 - 1)
    atomic_or(bits, slot >> 6, 1 << (slot & 63))


@kernel(inline="always")
def _indexed(bits, p):
    slot = p & (bits.shape[0] * 64 - 1)
    return (atomic_load(bits, slot >> 6) >> (slot & 63)) & 1 == 1


@kernel()
def clear_bits(bits, p0, p1):
    """Mark positions ``p0 .. p1 - 1`` not indexed (before any thread runs on them)."""
    for p in range(p0, p1):
        slot = p & (bits.shape[0] * 64 - 1)
        bits[slot >> 6] &= ~(1 << (slot & 63))


@kernel()
def par_insert_range(st, locks, ring, bits, p0, p1, path, res):
    """Merge phase 2: insert positions ``p0 .. p1`` not yet indexed (the pending updates)."""
    r = ring.shape[0]
    n = 0
    for p in range(p0, p1 + 1):
        if not _indexed(bits, p):
            if nodes_free(st.pmeta) < st.meta[M_POOLMIN]:
                return -1
            _par_insert(st, locks, ring[p % r], p, path, res)
            _flag(bits, p)
            n += 1
    return n


@kernel()
def try_advance_edge(bits, edge, s, limit, elock):
    """Test-and-set the edge mutex; when won, move stream ``s``'s edge and release it.
    Returns whether the edge was updated."""
    if atomic_cas(elock, 0, 0, 1) != 0:
        return False
    advance_edge(bits, edge, s, limit)
    atomic_store(elock, 0, 0)
    return True


@kernel()
def advance_edge(bits, edge, s, limit):
    """Move stream ``s``'s edge tuple past the indexed positions (below ``limit``); the indexed
    bitmap ``bits`` holds one bit per window slot, whole indexed words are skipped."""
    e = edge[s]
    mask = bits.shape[0] * 64 - 1
    while e < limit:
        slot = e & mask
        wd = atomic_load(bits, slot >> 6)
        b = slot & 63
        if wd == -1:
            e = min(limit, e + 64 - b)
            continue
        if (wd >> b) & 1 == 0:
            break
        e += 1
    store_release(edge, s, e)
    return e


@kernel()
def chunk_setup(sides, keys, c0, c1, w0, w1, self_join, ring_l, ring_r, pos, t_e, t_l, before):
    """One pass over a chunk of the parallel join before its threads start: per tuple ``g`` its
    position ``pos[g]`` in its stream (counting on from ``c0``/``c1``), the positions
    ``[t_e[g], t_l[g]]`` of the opposite window it probes (windows of ``w0``/``w1``; a self-join
    probes its own stream's earlier tuples), its key in its stream's ring (lengths powers of 2,
    at least the window and the chunk long), and ``before[s, g]``, the arrivals of stream ``s``
    among the chunk's first ``g`` tuples.

    Without a branch on the side (random sides mispredict half the time): each tuple's key goes
    into the slot of the next position of *both* streams; the other stream's slot is not in any
    window yet, and its own tuple overwrites it before any probe can reach it.
    """
    a0 = 0
    a1 = 0
    m0 = ring_l.shape[0] - 1
    m1 = ring_r.shape[0] - 1
    before[0, 0] = 0
    before[1, 0] = 0
    n = keys.shape[0]
    if self_join:
        for g in range(n):
            p = c0 + g
            ring_l[p & m0] = keys[g]
            pos[g] = p
            t_l[g] = p - 1
            t_e[g] = max(0, p - w0)
            before[0, g + 1] = g + 1
            before[1, g + 1] = 0
        return
    for g in range(n):
        s1 = np.int64(sides[g])
        own0 = c0 + a0
        own1 = c1 + a1
        ring_l[own0 & m0] = keys[g]
        ring_r[own1 & m1] = keys[g]
        pos[g] = own0 + (own1 - own0) * s1
        opp = own1 + (own0 - own1) * s1
        t_l[g] = opp - 1
        t_e[g] = max(0, opp - (w1 + (w0 - w1) * s1))
        a0 += 1 - s1
        a1 += s1
        before[0, g + 1] = a0
        before[1, g + 1] = a1


@kernel()
def gather_tasks(all_g, all_p, src, cnt, g_base, out_g, out_p, d):
    """Copy each task's rows (``cnt[t]`` from ``src[t]`` of the threads' concatenated buffers)
    into ``out_g``/``out_p`` from ``d`` on, in task (queue) order, adding ``g_base`` to the
    tuple numbers (the chunk's first tuple in the run); return the end."""
    for t in range(src.shape[0]):
        a = src[t]
        for j in range(cnt[t]):
            out_g[d] = all_g[a + j] + g_base
            out_p[d] = all_p[a + j]
            d += 1
    return d


@kernel()
def cycles():
    """The CPU's cycle counter (to turn the worker's task timestamps into seconds)."""
    return cycle_counter()


@kernel(inline="always")
def _wait_idle(ctl, res):
    # the caller has raised C_BLOCKED: wait until no task is active (or an error stops the run)
    while atomic_load(ctl, C_ACTIVE) > 0 and atomic_load(ctl, C_ERROR) == 0:
        res[R_WAIT_MERGE] += 1
        sched_yield()


@kernel(inline="always")
def _block(ctl, d, res):
    _lock(ctl, C_QLOCK, res, R_SPIN_QUEUE)
    ctl[C_BLOCKED] += d
    spin_unlock(ctl, C_QLOCK)


@kernel(inline="always")
def _assigned(ctl, task_size, n, counts, before, s):
    # arrivals of stream s up to the last tuple assigned so far (counts[s] before the chunk)
    g = min(ctl[C_NEXT] * task_size, n)
    return counts[s] + before[s, g]


@kernel(inline="always")
def _propagate(ctl, status, t_prop, tasks):
    # the caller holds the propagation mutex: move the head past the completed tasks. The clock
    # is read after their statuses, so no task is stamped before it was assigned.
    h0 = ctl[C_HEAD]
    h = h0
    while h < tasks and atomic_load(status, h) == COMPLETED:
        h += 1
    now = cycle_counter()
    t_prop[h0:h] = now
    atomic_store(ctl, C_HEAD, h)


@kernel()
def par_worker(tid, sides, keys, pos, t_e, t_l, offs_lo, offs_hi, self_join, task_size,
               l0, l1, r0, r1, locks_l, locks_r, ring_l, ring_r, bits_l, bits_r, edge, elock,
               limits, ctl, cur, allow, merging, ti, thresh, before, counts, windows, blocking,
               status, task_thr, task_off, task_cnt, t_acq, t_prop, res, path, out_g, out_p, n_out):
    """One thread of the parallel IBWJ: the whole task loop of the PIM-Tree paper's join in one GIL-free call.

    Every thread of a run calls this with its own ``tid``, resume record ``res``, scratch
    ``path`` and result buffers ``out_g``/``out_p``; everything else is shared. Per task:

    1. *acquisition* — under the queue mutex ``ctl[C_QLOCK]``, unless a merge blocks
       assignment (``ctl[C_BLOCKED]``), take task ``ctl[C_NEXT]`` (fetch-and-increment), mark it
       active and snapshot which index buffer is current (``cur``) and whether index updates are
       allowed (``allow``; 0 during phase 1 of a nonblocking merge of that window);
    2. *result generation* and 3. *index update* — :func:`par_task` (edge tuple read once per
       tuple, a scan of the not yet indexed positions from it to ``t_l``, an index search over
       ``[t_e, t_l]``; insert, indexed bit), then the edge tuples move by test-and-set;
    4. under the queue mutex the task becomes *completed* and the window's ``T_I`` count grows;
       the thread that sees a count reach ``thresh`` becomes the merging thread (blocking, or the
       two phases of the nonblocking merge: build the new ``T_S`` into the spare buffer while the
       others join without index updates, then swap and insert the pending tuples);
    5. *propagation* — whoever wins the propagation mutex (test-and-set) moves the queue head
       past completed tasks and stamps their propagation time.

    Results stay in the thread's buffers; ``task_thr/task_off/task_cnt`` say where each task's
    rows are, so the caller emits them in queue order. Returns ``(n_out, status)``: 0 — no tasks
    left; ``OUT_FULL`` — grow the buffers and call again (``res`` resumes the task);
    1 — a node pool ran low; ``TS_FULL`` — ``T_S`` too small at a merge.
    """
    n = keys.shape[0]
    tasks = status.shape[0]
    while True:
        if atomic_load(ctl, C_ERROR) != 0:
            return n_out, 0
        t = res[R_TASK]
        if t < 0:
            # 1. task acquisition
            _lock(ctl, C_QLOCK, res, R_SPIN_QUEUE)
            if ctl[C_BLOCKED] > 0:
                spin_unlock(ctl, C_QLOCK)
                res[R_WAIT_MERGE] += 1
                sched_yield()
                continue
            t = ctl[C_NEXT]
            if t >= tasks:
                spin_unlock(ctl, C_QLOCK)
                break
            ctl[C_NEXT] = t + 1
            ctl[C_ACTIVE] += 1
            atomic_store(status, t, ACTIVE)
            res[R_ALLOW] = allow[0]
            res[R_ALLOW + 1] = allow[1]
            res[R_CUR] = cur[0]
            res[R_CUR + 1] = cur[1]
            spin_unlock(ctl, C_QLOCK)
            t_acq[t] = cycle_counter()
            res[R_TASK] = t
            res[R_G] = t * task_size
            res[R_INS] = 0
            res[R_INS + 1] = 0
            task_thr[t] = tid
            task_off[t] = n_out
        st_l = l0 if res[R_CUR] == 0 else l1
        st_r = r0 if res[R_CUR + 1] == 0 else r1
        g1 = min(n, (t + 1) * task_size)
        # 2. + 3. result generation and index update
        g, n_out, st = par_task(res[R_G], g1, sides, keys, pos, t_e, t_l, offs_lo, offs_hi,
                                self_join, st_l, st_r, locks_l, locks_r, ring_l, ring_r, bits_l,
                                bits_r, edge, elock, limits, res, path, out_g, out_p, n_out)
        res[R_G] = g
        if st != 0:
            if st != OUT_FULL:
                atomic_store(ctl, C_ERROR, 1)
            return n_out, st
        task_cnt[t] = n_out - task_off[t]
        res[R_TASK] = -1
        # 4. completion; the thread that fills a T_I becomes the merging thread
        claim = -1
        _lock(ctl, C_QLOCK, res, R_SPIN_QUEUE)
        atomic_store(status, t, COMPLETED)
        ctl[C_ACTIVE] -= 1
        for s in range(2):
            ti[s] += res[R_INS + s]
            if claim < 0 and merging[s] == 0 and ti[s] >= thresh[s]:
                merging[s] = 1
                claim = s
        spin_unlock(ctl, C_QLOCK)
        try_advance_edge(bits_l, edge, 0, limits[0], elock)
        if not self_join:
            try_advance_edge(bits_r, edge, 1, limits[1], elock)
        if claim >= 0:
            s = claim
            bits = bits_l if s == 0 else bits_r
            ring = ring_l if s == 0 else ring_r
            locks = locks_l if s == 0 else locks_r
            if s == 0:
                now_st = l0 if cur[0] == 0 else l1
                spare = l1 if cur[0] == 0 else l0
            else:
                now_st = r0 if cur[1] == 0 else r1
                spare = r1 if cur[1] == 0 else r0
            _block(ctl, 1, res)
            _wait_idle(ctl, res)
            lo = max(0, _assigned(ctl, task_size, n, counts, before, s) - windows[s])
            if blocking:
                ok = im_merge(now_st, lo)
                # every assigned tuple was indexed before the merge
                while not try_advance_edge(bits, edge, s, limits[s], elock):
                    sched_yield()
                spin_lock(ctl, C_QLOCK)
                ti[s] = 0
                merging[s] = 0
                ctl[C_MERGES] += 1
                ctl[C_BLOCKED] -= 1
                spin_unlock(ctl, C_QLOCK)
                if not ok:
                    atomic_store(ctl, C_ERROR, 1)
                    return n_out, TS_FULL
            else:
                # phase 1: the others go on without index updates of window s
                spin_lock(ctl, C_QLOCK)
                allow[s] = 0
                ctl[C_BLOCKED] -= 1
                spin_unlock(ctl, C_QLOCK)
                s_k, s_p = ts_keys(spare)
                o = merge_into(now_st, s_k, s_p, lo)
                if o < 0:
                    atomic_store(ctl, C_ERROR, 1)
                    return n_out, TS_FULL
                merge_install(spare, o, lo)
                # phase 2: swap the new index in, then insert the pending tuples
                _block(ctl, 1, res)
                _wait_idle(ctl, res)
                spin_lock(ctl, C_QLOCK)
                cur[s] = 1 - cur[s]
                allow[s] = 1
                p0 = atomic_load(edge, s)
                p1 = _assigned(ctl, task_size, n, counts, before, s) - 1
                ti[s] = 0
                ctl[C_BLOCKED] -= 1
                spin_unlock(ctl, C_QLOCK)
                done = par_insert_range(spare, locks, ring, bits, p0, p1, path, res)
                spin_lock(ctl, C_QLOCK)
                if done >= 0:
                    ti[s] += done
                merging[s] = 0
                ctl[C_MERGES] += 1
                spin_unlock(ctl, C_QLOCK)
                if done < 0:
                    atomic_store(ctl, C_ERROR, 1)
                    return n_out, 1
        # 5. result propagation, test-and-set
        if atomic_cas(ctl, C_PLOCK, 0, 1) == 0:
            _propagate(ctl, status, t_prop, tasks)
            atomic_store(ctl, C_PLOCK, 0)
    # leaving: propagate what is complete (the last thread out propagates the rest)
    spin_lock(ctl, C_PLOCK)
    _propagate(ctl, status, t_prop, tasks)
    spin_unlock(ctl, C_PLOCK)
    return n_out, 0


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
        if mine and nodes_free(own.pmeta) < own.meta[M_POOLMIN]:
            return g, n_out, LOW_LEFT_POOL if s == 0 else LOW_RIGHT_POOL
        x = keys[g]
        te = t_e[g]
        tl = t_l[g]
        llo = (te - part + parts - 1) // parts if te > part else 0
        lhi = (tl - part) // parts if tl >= part else -1
        if lhi >= llo:
            m0 = n_out
            klo, khi = band_bounds(x, offs_lo[s], offs_hi[s], s == 1 and not self_join)
            r = idx_search(other, klo, khi, llo, lhi, out_p, n_out)
            if r < 0:
                return g, m0, OUT_FULL
            n_out = r
            for j in range(m0, n_out):
                out_p[j] = out_p[j] * parts + part
                out_g[j] = g
        if mine:
            idx_insert(own, x)
    return n, n_out, 0


# --------------------------------------------------------------------------------------------
# parallel IBWJ over key ranges (IM/PIM-Tree windows), see parallel_band.py
# --------------------------------------------------------------------------------------------


@kernel(inline="always")
def _in_range(x, kmin, kmax, first, last):
    # whether key x lies in the key range [kmin, kmax)
    return (first | (x >= kmin)) & (last | (x < kmax))


@kernel(inline="always")
def _range_probe(x, lo_off, hi_off, mirrored, kmin, kmax, first, last):
    # the probe bounds of key x, and whether they reach into the key range [kmin, kmax)
    klo, khi = band_bounds(x, lo_off, hi_off, mirrored)
    hit = (klo <= khi) & (last | (klo < kmax)) & (first | (khi >= kmin))
    return klo, khi, hit


@kernel(inline="always")
def _range_step(g, s, x, p, te, tl, own, other, offs_lo, offs_hi, mirrored, kmin, kmax, first,
                last, out_g, out_p, n_out, descents, j):
    # one tuple for one key range: probe this range's part of the opposite window (positions
    # [te, tl]) when the band reaches into the range, then enter this range's part of the own
    # window when the key lies in it (at its stream position p); returns (count, status).
    # (descents, j): the prefetch's descent, as for _seq_step
    mine = _in_range(x, kmin, kmax, first, last)
    if mine and nodes_free(own.pmeta) < own.meta[M_POOLMIN]:
        return n_out, 1
    klo, khi, hit = _range_probe(x, offs_lo[s], offs_hi[s], mirrored, kmin, kmax, first, last)
    if hit and tl >= te:
        m0 = n_out
        r = search_from(other, klo, khi, te, tl, out_p, n_out, descents, j)
        if r < 0:
            return m0, OUT_FULL
        n_out = r
        if r - m0 > 1:
            sort_small(out_p, m0, n_out)
        for i in range(m0, n_out):
            out_g[i] = g
    if mine:
        own.meta[M_NEXT] = p
        idx_insert(own, x)
    return n_out, 0


@kernel(inline="always")
def _range_prefetch(a, sides, keys, offs_lo, offs_hi, st_l, st_r, self_join, kmin, kmax, first,
                    last, descents, j):
    # start loading the leaves that tuple a will search in this range (as range_run), the
    # descent to slot j of descents
    s = sides[a]
    mirrored = not (s == 0 or self_join)
    klo, khi, hit = _range_probe(keys[a], offs_lo[s], offs_hi[s], mirrored, kmin, kmax, first,
                                 last)
    if not hit:
        descents[2, j] = -1
    elif mirrored:
        search_prefetch(st_l, klo, descents, j)
    else:
        search_prefetch(st_r, klo, descents, j)


@kernel()
def range_split(g0, g1, sides, keys, offs_lo, offs_hi, bounds, counts, out_g):
    """List tuples ``g0 .. g1-1`` under every key range they concern (their key lies in it, or
    their band may reach into it: :func:`~splice.index._band_bounds.band_cover`), for
    :func:`range_run`; one slice of a chunk, each thread one slice. Returns the slice's left
    arrivals (side 0).

    ``bounds``: the lower ends of the ranges after the first (ascending). Range ``r``'s tuples
    go to ``out_g[r, :counts[r]]`` in arrival order (each row needs room for ``g1 - g0``). One
    pass per tuple for all ranges, instead of each range's thread passing over every tuple of
    the chunk; 4 bytes a listed tuple, as the lists move from the thread that wrote them to the
    one that joins them. (It counts the left arrivals too: after the join they come from
    memory again.)"""
    t = bounds.shape[0] + 1
    for r in range(t):
        counts[r] = 0
    lefts = 0
    for g in range(g0, g1):
        s = sides[g]
        x = keys[g]
        lefts += s == 0
        a, b = band_cover(x, offs_lo[s], offs_hi[s])
        # the ranges holding a, x and b: how many lower ends are <= each (a NaN: none)
        ra = 0
        rk = 0
        rb = 0
        for i in range(bounds.shape[0]):
            e = bounds[i]
            ra += e <= a
            rk += e <= x
            rb += e <= b
        lo = min(rk, ra)
        hi = max(rk, rb)
        if b != b:  # a NaN upper end (an infinite key): every range above may be reached
            hi = t - 1
        d = counts[lo]  # nearly every tuple concerns one range: written outside the loop
        out_g[lo, d] = g
        counts[lo] = d + 1
        for r in range(lo + 1, hi + 1):
            d = counts[r]
            out_g[r, d] = g
            counts[r] = d + 1
    return lefts


@kernel()
def range_gather(k, split_g, counts, todo_g):
    """Range ``k``'s tuples from every slice's :func:`range_split` (``split_g[j, k,
    :counts[j, k]]`` for slice ``j``), in arrival order, into ``todo_g``; returns how many."""
    c = 0
    for j in range(counts.shape[0]):
        for i in range(counts[j, k]):
            todo_g[c] = split_g[j, k, i]
            c += 1
    return c


@kernel()
def range_run(i0, cnt, todo_g, arrivals, sides, keys, w0, w1, offs_lo, offs_hi, self_join, kmin,
              kmax, first, last, st_l, st_r, out_g, out_p, n_out, prefetch, descents, took):
    """One thread of the key-range join: the IBWJ of :func:`join_seq_run` restricted to the keys
    in ``[kmin, kmax)`` (``first``: no lower end, ``last``: no upper end), over the tuples
    :func:`range_split` listed for this range (``todo_g[i0:cnt]``, arrival indexes into
    ``sides``/``keys``; ``arrivals``: each stream's arrivals before tuple 0).

    ``st_l``/``st_r`` index the tuples of each stream whose keys lie in the range, under their
    stream positions (the window's arrival count is set to a tuple's position before it enters,
    so merges drop by position as in the serial join). Every tuple whose band reaches into the
    range probes them over its window of the opposite stream (``w0``/``w1`` tuples); a listed
    tuple whose band turns out not to reach in is passed over. ``took[0]`` counts the tuples the
    range took. Matches are ``(g, partner position)``, partners ascending per ``g``; the
    ranges' matches of one ``g`` are disjoint. Returns ``(next listed tuple, count, status)``,
    statuses as :func:`join_seq_run`. A self-join passes its one state as both ``st_l`` and
    ``st_r``, as :func:`join_seq_run`. The prefetch runs ``PREFETCH_AHEAD`` listed tuples ahead
    (slot ``i % DESCENTS`` of ``descents`` holds listed tuple ``i``'s descent).
    """
    c2 = took[0]
    w_partner = w0 if self_join else w1
    before = arrivals[0] + arrivals[1]
    # the left arrivals before each listed tuple, counted from the sides between them
    at = 0
    left = arrivals[0]
    if prefetch:
        clear_descents(descents)
    for i in range(i0, cnt):
        j = i & (DESCENTS - 1) if prefetch else -1
        if prefetch and i + PREFETCH_AHEAD < cnt:
            _range_prefetch(todo_g[i + PREFETCH_AHEAD], sides, keys, offs_lo, offs_hi, st_l,
                            st_r, self_join, kmin, kmax, first, last, descents,
                            (i + PREFETCH_AHEAD) & (DESCENTS - 1))
        g = todo_g[i]
        for h in range(at, g):
            left += sides[h] == 0
        at = g
        s = sides[g]
        x = keys[g]
        c0 = left
        c1 = before + g - c0
        if s == 0 or self_join:
            # the partners of a self-join are the stream's own earlier tuples
            oc = c0 if self_join else c1
            n_out, status = _range_step(g, 0, x, c0, max(0, oc - w_partner), oc - 1, st_l, st_r,
                                        offs_lo, offs_hi, False, kmin, kmax, first, last, out_g,
                                        out_p, n_out, descents, j)
        else:
            n_out, status = _range_step(g, 1, x, c1, max(0, c0 - w0), c0 - 1, st_r, st_l,
                                        offs_lo, offs_hi, True, kmin, kmax, first, last, out_g,
                                        out_p, n_out, descents, j)
            if status == 1:
                status = LOW_RIGHT_POOL
        if status != 0:
            took[0] = c2
            return i, n_out, status
        c2 += _in_range(x, kmin, kmax, first, last)
    took[0] = c2
    return cnt, n_out, 0


@kernel(inline="always")
def _pick(ga, pa, a, gb, pb, b):
    # the lesser of rows a and b by (g, partner): its g and partner, and whether it is row a
    x = ga[a]
    y = gb[b]
    u = pa[a]
    v = pb[b]
    take_a = (x < y) | ((x == y) & (u < v))
    return (x if take_a else y), (u if take_a else v), take_a


@kernel(inline="always")
def _merge_rows(ga, pa, a, ea, gb, pb, b, eb, out_g, out_p, d, base):
    # merge_two's rows, one after another
    while a < ea and b < eb:
        g, p, take_a = _pick(ga, pa, a, gb, pb, b)
        out_g[d] = g + base
        out_p[d] = p
        a += take_a
        b += 1 - take_a
        d += 1
    while a < ea:
        out_g[d] = ga[a] + base
        out_p[d] = pa[a]
        a += 1
        d += 1
    while b < eb:
        out_g[d] = gb[b] + base
        out_p[d] = pb[b]
        b += 1
        d += 1
    return d


@kernel()
def merge_two(ga, pa, a, ea, gb, pb, b, eb, out_g, out_p, d, base):
    """Merge rows ``a .. ea-1`` of ``(ga, pa)`` and ``b .. eb-1`` of ``(gb, pb)``, each ordered
    by ``(g, partner)``, into ``out_g``/``out_p`` from ``d`` on in that order, adding ``base`` to
    each ``g``; return the end.

    Without a branch on which side a row comes from: rows of two key ranges interleave at
    random, so such a branch mispredicts about every other row, and a misprediction costs more
    than the copy. Each row's pick waits on the pick before it; so the rows are cut in two at a
    ``g`` and the halves merged in one loop, two picks at a time that do not wait on each other
    (docs/lab/band-joins.md, "Merging the key ranges' rows").
    """
    if ea - a + eb - b < 64:
        return _merge_rows(ga, pa, a, ea, gb, pb, b, eb, out_g, out_p, d, base)
    # the cut: the g in the middle of the longer run; every row of a g goes to one half
    cg = ga[(a + ea) // 2] if ea - a >= eb - b else gb[(b + eb) // 2]
    am = a + np.searchsorted(ga[a:ea], cg)
    bm = b + np.searchsorted(gb[b:eb], cg)
    a2 = am
    b2 = bm
    d2 = d + (am - a) + (bm - b)
    while a < am and b < bm and a2 < ea and b2 < eb:
        g, p, take_a = _pick(ga, pa, a, gb, pb, b)
        g2, p2, take_a2 = _pick(ga, pa, a2, gb, pb, b2)
        out_g[d] = g + base
        out_p[d] = p
        out_g[d2] = g2 + base
        out_p[d2] = p2
        a += take_a
        b += 1 - take_a
        d += 1
        a2 += take_a2
        b2 += 1 - take_a2
        d2 += 1
    _merge_rows(ga, pa, a, am, gb, pb, b, bm, out_g, out_p, d, base)
    return _merge_rows(ga, pa, a2, ea, gb, pb, b2, eb, out_g, out_p, d2, base)


@kernel()
def time_window_filter(g, p, sides, times, self_join, live_l, live_r, first_l, first_r, times_l,
                       times_r, length):
    """Keep the pairs ``(g[j], p[j])`` of a time-window join whose partner position is live
    (at least ``live_l``/``live_r``, by the partner's stream) and whose times differ by at most
    ``length`` (the partner's time at ``position - first_l`` in ``times_l``, or ``- first_r`` in
    ``times_r``); compact them in place, in order, and return how many there are."""
    k = 0
    for j in range(g.shape[0]):
        gi = g[j]
        po = p[j]
        if self_join or sides[gi] == 1:
            if po < live_l:
                continue
            tp = times_l[po - first_l]
        else:
            if po < live_r:
                continue
            tp = times_r[po - first_r]
        d = times[gi] - tp
        if -length <= d <= length:
            g[k] = gi
            p[k] = po
            k += 1
    return k
