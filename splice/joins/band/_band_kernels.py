"""numba kernels of the band join over a whole arrival sequence (both streams interleaved).

The window-index state and the per-tuple probe/insert live in :mod:`splice.index._window`; here
the loop walks a mixed sequence, picking each tuple's own and opposite window by its side.

Arrays that travel together enter the kernels as named tuples (:class:`BandArrivals`,
:class:`BandProbe`, :class:`Matches`, ...), built by the callers once per call (a
:class:`TaskWindow` once per task, inside :func:`par_worker`); numba passes a named tuple field by
field, as it would pass the arrays one by one, so the loops compile as they did with the arrays
passed apart.
"""

from __future__ import annotations

from typing import Any, NamedTuple

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
    IndexState,
    clear_descents,
    idx_insert,
    idx_search,
    im_merge,
    insert_prefetch,
    merge_install,
    merge_into,
    pim_boundary,
    pim_route,
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
    "join_run",
    "BandArrivals",
    "PlacedBandArrivals",
    "BandProbe",
    "Matches",
    "Run",
    "Retained",
    "KeyRange",
    "RangeChunk",
    "SharedWindow",
    "TaskWindow",
    "TaskQueue",
    "TaskLog",
    "task_window",
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


class BandArrivals(NamedTuple):
    """A sequence of both streams' tuples in arrival order: tuple ``g`` has side ``sides[g]``
    (0 left, 1 right) and key ``keys[g]``."""

    sides: np.ndarray
    keys: np.ndarray


class PlacedBandArrivals(NamedTuple):
    """A sequence of arrivals (as :class:`BandArrivals`) with, per tuple ``g``, its position
    ``pos[g]`` in its stream and the positions ``[t_e[g], t_l[g]]`` of the window it probes
    (:func:`chunk_setup`, :func:`~splice.joins.band.parallel_band.arrival_bounds`)."""

    sides: np.ndarray
    keys: np.ndarray
    pos: np.ndarray
    t_e: np.ndarray
    t_l: np.ndarray


class BandProbe(NamedTuple):
    """The band as a probe applies it: a key ``x`` of side ``s`` has its partners' keys in
    ``[x + offs_lo[s], x + offs_hi[s]]`` (:func:`~splice.joins.band.band_join.probe_offsets`);
    ``self_join``: one stream joined with itself (its tuples probe their own window)."""

    offs_lo: np.ndarray
    offs_hi: np.ndarray
    self_join: bool


class Matches(NamedTuple):
    """Result buffers: row ``i`` pairs tuple ``g[i]`` with the partner at position ``p[i]``."""

    g: np.ndarray
    p: np.ndarray


class Run(NamedTuple):
    """Rows ``start .. end - 1`` of the matches ``(g, p)``, ordered by ``(g, p)``
    (:func:`merge_two`)."""

    g: np.ndarray
    p: np.ndarray
    start: int
    end: int


class Retained(NamedTuple):
    """A stream's retained tuples in a time-window join (:func:`time_window_filter`): positions
    from ``live`` on can still match; ``times[q - first]`` is the event time of position ``q``."""

    live: int
    first: int
    times: np.ndarray


class KeyRange(NamedTuple):
    """One range of the key-range join, ``[lo, hi)`` (``first``: no lower end, ``last``: no
    upper end), and what its thread keeps: the trees of each stream's tuples with keys in the
    range (a self-join's one window twice), the ring of its prefetches' descents
    (:func:`~splice.index._window.new_descents`) and ``took[0]``, the tuples it took."""

    lo: Any  # keys of the join's key type
    hi: Any
    first: bool
    last: bool
    left: IndexState
    right: IndexState
    descents: np.ndarray
    took: np.ndarray


class RangeChunk(NamedTuple):
    """What the ranges' threads share of one chunk of the key-range join: its arrivals (as
    :class:`BandArrivals`), each stream's arrivals before it (``arrived``) and the window sizes
    ``windows[s]`` of the streams' partners."""

    sides: np.ndarray
    keys: np.ndarray
    arrived: np.ndarray
    windows: tuple[int, int]


class SharedWindow(NamedTuple):
    """A window of the task-queue join as its threads share it: its two index buffers (the
    current one, ``state0`` or ``state1`` by the queue's ``cur``, and the one a nonblocking merge
    builds; one buffer twice for blocking merges), a spin lock per ``T_I`` partition
    (``LOCK_STRIDE`` cells apart), the keys by position (``ring``, a power of two long), the
    indexed bitmap (a bit per ring slot) and its ``side`` (0 left, 1 right; a self-join's one
    window is 0), its cell of the queue's per-stream arrays and of a thread's resume record."""

    state0: IndexState
    state1: IndexState
    locks: np.ndarray
    ring: np.ndarray
    bits: np.ndarray
    side: int


class TaskWindow(NamedTuple):
    """A window as one task of the task-queue join sees it: the index buffer that was current
    when the task was taken, and the rest of its :class:`SharedWindow`."""

    state: IndexState
    locks: np.ndarray
    ring: np.ndarray
    bits: np.ndarray
    side: int


class TaskQueue(NamedTuple):
    """The task-queue join's shared control for one chunk (see :func:`par_worker`).

    ``ctl``: the control cells ``C_*`` (queue and propagation mutexes, next task, active tasks,
    blocked assignment, queue head, error, merges); ``status[t]``: task ``t`` available, active
    or completed. Per window ``s``: ``cur[s]`` (its current index buffer), ``allow[s]`` (0 during
    phase 1 of its nonblocking merge), ``merging[s]``, ``ti[s]`` (entries in its ``T_I``),
    ``thresh[s]`` (the ``T_I`` size that starts a merge), ``windows[s]`` (its size). Per stream:
    ``counts[s]`` (arrivals before the chunk), ``before[s, g]`` (its arrivals among the chunk's
    first ``g`` tuples), ``edge[s]`` (the edge tuple, moved under the edge mutex ``elock``),
    ``limits[s]`` (its positions after the chunk)."""

    task_size: int
    blocking: bool
    ctl: np.ndarray
    status: np.ndarray
    cur: np.ndarray
    allow: np.ndarray
    merging: np.ndarray
    ti: np.ndarray
    thresh: np.ndarray
    windows: np.ndarray
    counts: np.ndarray
    before: np.ndarray
    edge: np.ndarray
    elock: np.ndarray
    limits: np.ndarray


class TaskLog(NamedTuple):
    """Per task of the task-queue join: the thread that ran it, where its rows start in that
    thread's buffers and how many there are, and the cycle counter at its assignment and at its
    propagation."""

    thread: np.ndarray
    start: np.ndarray
    rows: np.ndarray
    acquired: np.ndarray
    propagated: np.ndarray


@kernel(inline="always")
def _seq_step(g, s, x, own, other, band, mirrored, out, n_out, descents, j):
    # one tuple of the serial join: probe ``other``, then enter ``own``; returns (count, status).
    # j >= 0: slot j of descents holds the descent made for this search while prefetching
    meta = own.meta
    if nodes_free(own.pmeta) < meta[M_POOLMIN]:
        return n_out, 1
    ometa = other.meta
    phi = ometa[M_NEXT] - 1
    plo = max(0, ometa[M_NEXT] - ometa[M_W])
    if phi >= plo:
        out_p = out.p
        m0 = n_out
        klo, khi = band_bounds(x, band.offs_lo[s], band.offs_hi[s], mirrored)
        r = search_from(other, klo, khi, plo, phi, out_p, n_out, descents, j)
        if r < 0:
            return m0, OUT_FULL
        n_out = r
        if r - m0 > 1 and ometa[M_KIND] != NLWJ:
            sort_small(out_p, m0, n_out)
        out_g = out.g
        for i in range(m0, n_out):
            out_g[i] = g
    idx_insert(own, x, route_from(own, descents, j))
    return n_out, 0


@kernel(inline="always")
def _seq_tuple(g, seq, band, st_l, st_r, out, n_out, descents, j):
    # the step of tuple g, written once per side with the states fixed; returns (count, status)
    s = seq.sides[g]
    x = seq.keys[g]
    if s == 0 or band.self_join:
        n_out, status = _seq_step(g, s, x, st_l, st_r, band, False, out, n_out, descents, j)
        return n_out, LOW_LEFT_POOL if status == 1 else status
    n_out, status = _seq_step(g, s, x, st_r, st_l, band, True, out, n_out, descents, j)
    return n_out, LOW_RIGHT_POOL if status == 1 else status


@kernel(inline="always")
def _seq_prefetch(a, seq, band, st_l, st_r, descents, inserts):
    # start loading the leaves that tuple a will search (as _seq_tuple picks its states), the
    # descent to its slot of descents; ``inserts``: also the T_I node its insert changes
    s = seq.sides[a]
    j = a & (DESCENTS - 1)
    x = seq.keys[a]
    if s == 0 or band.self_join:
        search_prefetch(st_r, band_low(x, band.offs_lo[s], band.offs_hi[s], False), descents, j)
        if inserts:
            insert_prefetch(st_l, x, descents, j)
    else:
        search_prefetch(st_l, band_low(x, band.offs_lo[s], band.offs_hi[s], True), descents, j)
        if inserts:
            insert_prefetch(st_r, x, descents, j)


@kernel()
def join_seq_run(seq, start, band, st_l, st_r, out, n_out, prefetch, descents):
    """IBWJ over the :class:`BandArrivals` ``seq`` from tuple ``g = start`` on, in arrival order.

    A tuple of side ``s`` probes the opposite window (its own, before it, for a self-join: then
    ``st_l`` and ``st_r`` are the same state) for keys in the band of :class:`BandProbe`
    ``band``, then enters its own window. Matches go to the :class:`Matches` ``out`` from row
    ``n_out`` on, as ``(g, partner position)`` with partners ascending. Returns ``(next g,
    count, status)``: status 1/3 — the left/right pool needs room, 2 — ``out`` is full; 0 —
    done. ``prefetch``: at tuple ``g``, start loading the leaves that tuple
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
    n = seq.keys.shape[0]
    if prefetch:
        clear_descents(descents)
    for g in range(start, n):
        if prefetch:
            a = g + PREFETCH_AHEAD
            if a < n:
                _seq_prefetch(a, seq, band, st_l, st_r, descents, prefetch >= 2)
        n_out, status = _seq_tuple(g, seq, band, st_l, st_r, out, n_out, descents,
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
def _par_search(win, lo, hi, plo, phi, out, n_out, res):
    # T_S is immutable while tasks run: no lock. T_I partitions: one lock each, held per tree.
    # Inlined into par_task: called once per tuple with two dozen array arguments, the call
    # alone cost the 1-thread parallel join a sizable share of the serial join's rate
    # (docs/lab/band-joins.md, "The paper's task-queue join").
    st = win.state
    locks = win.locks
    ibt_meta = st.ibt_meta
    s_k, s_p = ts_keys(st)
    n_out = ibt_search(s_k, s_p, ts_base(st), ibt_meta[0, 0], st.ibt_inner[0], st.ibt_loff[0],
                       ibt_meta[0, 1], lo, hi, plo, phi, out, n_out)
    if n_out < 0:
        return -1
    parts = st.meta[M_NPART]
    q = 0 if parts <= 1 else pim_route(st, lo)
    first = q
    while q < parts:
        if q > first and pim_boundary(st, q) >= hi:
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
def _par_insert(win, k, p, path, res):
    # the T_I filter's words of partition q are its own (a word at least): written under its lock
    st = win.state
    q = pim_route(st, k)
    _lock(win.locks, q * LOCK_STRIDE, res, R_SPIN_PART)
    bpt_insert(st.keys, st.poss, st.child, st.cnt, st.nxt, st.prv, st.pmeta, st.tmeta, q, k, p,
               path, True)
    filter_add(st.filter_bits, st.filter_geo, st.meta[M_FSHIFT], q, k)
    spin_unlock(win.locks, q * LOCK_STRIDE)


@kernel(inline="always")
def task_window(shared, cur):
    """The :class:`TaskWindow` of :class:`SharedWindow` ``shared`` with index buffer ``cur``."""
    return TaskWindow(shared.state0 if cur == 0 else shared.state1, shared.locks, shared.ring,
                      shared.bits, shared.side)


@kernel()
def par_task(g0, g1, tuples, band, win_l, win_r, edge, res, path, out, n_out):
    """Result generation and index update for the tuples ``g0 .. g1-1`` of one task.

    ``tuples``: the chunk's :class:`PlacedBandArrivals`; ``win_l``/``win_r``: the windows as the
    task sees them (:class:`TaskWindow`; a self-join's one window as ``win_l``). A tuple of
    side ``s`` probes the opposite window ``o`` between ``t_e`` and ``t_l``. First it
    scans the positions from the edge tuple ``edge[o]`` (read once, a possibly stale but safe
    value) to ``t_l`` that are not flagged indexed in ``o``'s bitmap (one read per word of 64
    positions, whose zero bits are visited by trailing-zero count, so a stalled edge — a
    preempted thread's unfinished task — costs a word per 64 positions, and indexed positions
    cost nothing, not a step each); then it searches the
    index over the whole range ``[t_e, t_l]`` and drops the hits the scan already matched (an
    entry is flagged only after its insert, so nothing is missed). Then, when
    ``res[R_ALLOW + s]`` (no merge phase 1 on its window), it enters its own index
    (``res[R_INS + s]`` counts them; lock waits and scanned entries are counted in ``res``
    too); its indexed flag is set with the task's others of the same bitmap word, when the task
    moves to another word and at every return (the task's own scans count those pending flags
    as set). Matches go to the :class:`Matches` ``out`` from row ``n_out`` on. The caller moves
    the edge tuples once per task (:func:`try_advance_edge`).
    Returns ``(next g, count, status)``; status 2: ``out`` is full (grow it and resume at
    ``next g``), 1: a node pool ran low (the join cannot continue).
    """
    # indexed flags are set once per bitmap word and task, not per tuple: the words are shared
    # with the task another thread runs next to this one (an atomic or per tuple would move
    # their cache line between the cores every time); until then a probe finds these positions
    # by the scan and drops the index's duplicates. pending0/1: (word, mask) of each window's
    # flags not set yet
    pending0 = (-1, 0)
    pending1 = (-1, 0)
    if band.self_join:  # one window: every tuple probes and enters it (its flags are side 0's)
        win_r = win_l
    for g in range(g0, g1):
        # the step is written out once per side with the windows fixed (see join_seq_run)
        if tuples.sides[g] == 0:
            n_next, status, pending0 = _par_step(
                g, tuples, band, win_l, win_r, pending0,
                pending0 if band.self_join else pending1, edge, res, path, out, n_out)
        else:
            n_next, status, pending1 = _par_step(g, tuples, band, win_r, win_l, pending1,
                                                 pending0, edge, res, path, out, n_out)
        if status != 0:
            _flush(win_l.bits, pending0)
            _flush(win_r.bits, pending1)
            return g, n_next, status
        n_out = n_next
    _flush(win_l.bits, pending0)
    _flush(win_r.bits, pending1)
    return g1, n_out, 0


@kernel(inline="always")
def _par_step(g, tuples, band, own, other, pending_s, pending_o, edge, res, path, out, n_out):
    # one tuple of a task (see par_task): probe the window ``other``, then enter ``own`` (the
    # tuple's side is own's); pending_s / pending_o: the task's pending indexed flags
    # (word, mask) of its own / the other window. Returns (count, status, pending_s); on status
    # OUT_FULL the count is the one before this tuple, to resume at it.
    s = own.side
    x = tuples.keys[g]
    te = tuples.t_e[g]
    tl = tuples.t_l[g]
    fw_s, fm_s = pending_s
    fw_o, fm_o = pending_o
    out_p = out.p
    # a right arrival's band is mirrored (a self-join's tuples are all side 0)
    klo, khi = band_bounds(x, band.offs_lo[s], band.offs_hi[s], s == 1)
    if tl >= te:
        # 1) the window's positions from the edge to t_l that are not indexed yet, by a
        #    scan of the indexed bitmap (64 positions a word; whole indexed words skipped)
        oring = other.ring
        obits = other.bits
        e = atomic_load(edge, other.side)
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
                        return m0, OUT_FULL, (fw_s, fm_s)
                    out_p[r] = q
                    r += 1
            p += span
        m1 = r
        # 2) the index over the whole range: every position flagged before the scan is in
        #    it (flag stored after the insert); drop what the scan matched already
        r = _par_search(other, klo, khi, te, tl, out_p, r, res)
        if r < 0:
            return m0, OUT_FULL, (fw_s, fm_s)
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
        out_g = out.g
        for j in range(m0, n_out):
            out_g[j] = g
    if res[R_ALLOW + s]:
        st = own.state
        if nodes_free(st.pmeta) < st.meta[M_POOLMIN]:
            return n_out, 1, (fw_s, fm_s)
        pg = tuples.pos[g]
        _par_insert(own, x, pg, path, res)
        res[R_INS + s] += 1
        slot = pg & (own.bits.shape[0] * 64 - 1)
        if slot >> 6 != fw_s:
            _flush(own.bits, (fw_s, fm_s))
            fw_s = slot >> 6
            fm_s = 0
        fm_s |= 1 << (slot & 63)
    return n_out, 0, (fw_s, fm_s)


@kernel(inline="always")
def _flush(bits, pending):
    # set the pending indexed flags ``(w, m)``: flags ``m`` of word ``w`` (after their inserts)
    w, m = pending
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
def par_insert_range(win, p0, p1, path, res):
    """Merge phase 2: insert positions ``p0 .. p1`` of the :class:`TaskWindow` ``win`` not yet
    indexed (the pending updates) into its index."""
    st = win.state
    ring = win.ring
    bits = win.bits
    r = ring.shape[0]
    n = 0
    for p in range(p0, p1 + 1):
        if not _indexed(bits, p):
            if nodes_free(st.pmeta) < st.meta[M_POOLMIN]:
                return -1
            _par_insert(win, ring[p % r], p, path, res)
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
def chunk_setup(chunk, c0, c1, w0, w1, self_join, ring_l, ring_r, before):
    """One pass over a chunk of the parallel join before its threads start: per tuple ``g`` of
    the :class:`PlacedBandArrivals` ``chunk``, its position ``pos[g]`` in its stream (counting on
    from ``c0``/``c1``), the positions ``[t_e[g], t_l[g]]`` of the opposite window it probes
    (windows of ``w0``/``w1``; a self-join probes its own stream's earlier tuples), its key in
    its stream's ring (lengths powers of 2, at least the window and the chunk long), and
    ``before[s, g]``, the arrivals of stream ``s`` among the chunk's first ``g`` tuples.

    Without a branch on the side (random sides mispredict half the time): each tuple's key goes
    into the slot of the next position of *both* streams; the other stream's slot is not in any
    window yet, and its own tuple overwrites it before any probe can reach it.
    """
    sides, keys, pos, t_e, t_l = chunk.sides, chunk.keys, chunk.pos, chunk.t_e, chunk.t_l
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
def gather_tasks(rows, src, cnt, g_base, out, d):
    """Copy each task's rows (``cnt[t]`` from ``src[t]`` of the threads' concatenated buffers
    ``rows``) into ``out`` from ``d`` on (both :class:`Matches`), in task (queue) order, adding
    ``g_base`` to the tuple numbers (the chunk's first tuple in the run); return the end."""
    all_g, all_p = rows.g, rows.p
    out_g, out_p = out.g, out.p
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
def _assigned(queue, n, s):
    # arrivals of stream s up to the last tuple assigned so far (counts[s] before the chunk)
    g = min(queue.ctl[C_NEXT] * queue.task_size, n)
    return queue.counts[s] + queue.before[s, g]


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
def par_worker(tid, tuples, band, shared_l, shared_r, queue, log, res, path, out, n_out):
    """One thread of the parallel IBWJ: the whole task loop of the PIM-Tree paper's join in one GIL-free call.

    Every thread of a run calls this with its own ``tid``, resume record ``res``, scratch
    ``path`` and result buffers ``out`` (:class:`Matches`); everything else is shared: the
    chunk's :class:`PlacedBandArrivals` ``tuples``, the :class:`BandProbe` ``band``, the windows
    (:class:`SharedWindow`; a self-join's one window twice), the queue's control
    (:class:`TaskQueue`) and the :class:`TaskLog`. Per task:

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

    Results stay in the thread's buffers; the log says where each task's rows are, so the
    caller emits them in queue order. Returns ``(n_out, status)``: 0 — no tasks left;
    ``OUT_FULL`` — grow the buffers and call again (``res`` resumes the task); 1 — a node pool
    ran low; ``TS_FULL`` — ``T_S`` too small at a merge.
    """
    ctl = queue.ctl
    status = queue.status
    cur = queue.cur
    allow = queue.allow
    merging = queue.merging
    ti = queue.ti
    edge = queue.edge
    elock = queue.elock
    limits = queue.limits
    task_size = queue.task_size
    n = tuples.keys.shape[0]
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
            log.acquired[t] = cycle_counter()
            res[R_TASK] = t
            res[R_G] = t * task_size
            res[R_INS] = 0
            res[R_INS + 1] = 0
            log.thread[t] = tid
            log.start[t] = n_out
        g1 = min(n, (t + 1) * task_size)
        # 2. + 3. result generation and index update
        g, n_out, st = par_task(res[R_G], g1, tuples, band, task_window(shared_l, res[R_CUR]),
                                task_window(shared_r, res[R_CUR + 1]), edge, res, path, out,
                                n_out)
        res[R_G] = g
        if st != 0:
            if st != OUT_FULL:
                atomic_store(ctl, C_ERROR, 1)
            return n_out, st
        log.rows[t] = n_out - log.start[t]
        res[R_TASK] = -1
        # 4. completion; the thread that fills a T_I becomes the merging thread
        claim = -1
        _lock(ctl, C_QLOCK, res, R_SPIN_QUEUE)
        atomic_store(status, t, COMPLETED)
        ctl[C_ACTIVE] -= 1
        for s in range(2):
            ti[s] += res[R_INS + s]
            if claim < 0 and merging[s] == 0 and ti[s] >= queue.thresh[s]:
                merging[s] = 1
                claim = s
        spin_unlock(ctl, C_QLOCK)
        try_advance_edge(shared_l.bits, edge, 0, limits[0], elock)
        if not band.self_join:
            try_advance_edge(shared_r.bits, edge, 1, limits[1], elock)
        if claim >= 0:
            s = claim
            shared = shared_l if s == 0 else shared_r
            now = task_window(shared, cur[s])
            spare = task_window(shared, 1 - cur[s])
            _block(ctl, 1, res)
            _wait_idle(ctl, res)
            lo = max(0, _assigned(queue, n, s) - queue.windows[s])
            if queue.blocking:
                ok = im_merge(now.state, lo)
                # every assigned tuple was indexed before the merge
                while not try_advance_edge(shared.bits, edge, s, limits[s], elock):
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
                s_k, s_p = ts_keys(spare.state)
                o = merge_into(now.state, s_k, s_p, lo)
                if o < 0:
                    atomic_store(ctl, C_ERROR, 1)
                    return n_out, TS_FULL
                merge_install(spare.state, o, lo)
                # phase 2: swap the new index in, then insert the pending tuples
                _block(ctl, 1, res)
                _wait_idle(ctl, res)
                spin_lock(ctl, C_QLOCK)
                cur[s] = 1 - cur[s]
                allow[s] = 1
                p0 = atomic_load(edge, s)
                p1 = _assigned(queue, n, s) - 1
                ti[s] = 0
                ctl[C_BLOCKED] -= 1
                spin_unlock(ctl, C_QLOCK)
                done = par_insert_range(spare, p0, p1, path, res)
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
            _propagate(ctl, status, log.propagated, tasks)
            atomic_store(ctl, C_PLOCK, 0)
    # leaving: propagate what is complete (the last thread out propagates the rest)
    spin_lock(ctl, C_PLOCK)
    _propagate(ctl, status, log.propagated, tasks)
    spin_unlock(ctl, C_PLOCK)
    return n_out, 0


# --------------------------------------------------------------------------------------------
# round-robin partitioned join (baseline): thread t owns the window positions p % T == t
# --------------------------------------------------------------------------------------------


@kernel()
def rr_run(start, tuples, band, part, parts, st_l, st_r, out, n_out):
    """One thread of the round-robin join over the :class:`PlacedBandArrivals` ``tuples``: every
    tuple probes partition ``part`` of the opposite window (global positions ``[t_e, t_l]``),
    and enters partition ``part`` of its own window when ``pos % parts == part``. Matches carry
    global positions. Returns ``(next g, count, status)`` as :func:`join_seq_run`."""
    sides, keys, pos, t_e, t_l = tuples.sides, tuples.keys, tuples.pos, tuples.t_e, tuples.t_l
    offs_lo, offs_hi, self_join = band.offs_lo, band.offs_hi, band.self_join
    out_g, out_p = out.g, out.p
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
def _in_range(x, rng):
    # whether key x lies in the key range rng
    return (rng.first | (x >= rng.lo)) & (rng.last | (x < rng.hi))


@kernel(inline="always")
def _range_probe(x, lo_off, hi_off, mirrored, rng):
    # the probe bounds of key x, and whether they reach into the key range rng
    klo, khi = band_bounds(x, lo_off, hi_off, mirrored)
    hit = (klo <= khi) & (rng.last | (klo < rng.hi)) & (rng.first | (khi >= rng.lo))
    return klo, khi, hit


@kernel(inline="always")
def _range_step(g, s, x, p, te, tl, own, other, band, rng, out, n_out, j):
    # one tuple for the key range rng: probe this range's part of the opposite window
    # (positions [te, tl]) when the band reaches into the range, then enter this range's part of
    # the own window when the key lies in it (at its stream position p); returns (count,
    # status). j: the prefetch's descent in rng.descents, as for _seq_step. Side 1 is a right
    # arrival, whose band is mirrored (range_run passes a self-join's tuples as side 0)
    mine = _in_range(x, rng)
    if mine and nodes_free(own.pmeta) < own.meta[M_POOLMIN]:
        return n_out, 1
    klo, khi, hit = _range_probe(x, band.offs_lo[s], band.offs_hi[s], s == 1, rng)
    if hit and tl >= te:
        out_p = out.p
        m0 = n_out
        r = search_from(other, klo, khi, te, tl, out_p, n_out, rng.descents, j)
        if r < 0:
            return m0, OUT_FULL
        n_out = r
        if r - m0 > 1:
            sort_small(out_p, m0, n_out)
        out_g = out.g
        for i in range(m0, n_out):
            out_g[i] = g
    if mine:
        own.meta[M_NEXT] = p
        idx_insert(own, x)
    return n_out, 0


@kernel(inline="always")
def _range_prefetch(a, chunk, band, rng, j):
    # start loading the leaves that tuple a will search in the key range rng (as range_run),
    # the descent to slot j of rng.descents
    s = chunk.sides[a]
    mirrored = not (s == 0 or band.self_join)
    klo, khi, hit = _range_probe(chunk.keys[a], band.offs_lo[s], band.offs_hi[s], mirrored, rng)
    if not hit:
        rng.descents[2, j] = -1
    elif mirrored:
        search_prefetch(rng.left, klo, rng.descents, j)
    else:
        search_prefetch(rng.right, klo, rng.descents, j)


@kernel()
def range_split(g0, g1, seq, band, bounds, counts, out_g):
    """List tuples ``g0 .. g1-1`` of the :class:`BandArrivals` ``seq`` under every key range they
    concern (their key lies in it, or their band may reach into it:
    :func:`~splice.index._band_bounds.band_cover`), for :func:`range_run`; one slice of a
    chunk, each thread one slice. Returns the slice's left arrivals (side 0).

    ``bounds``: the lower ends of the ranges after the first (ascending). Range ``r``'s tuples
    go to ``out_g[r, :counts[r]]`` in arrival order (each row needs room for ``g1 - g0``). One
    pass per tuple for all ranges, instead of each range's thread passing over every tuple of
    the chunk; 4 bytes a listed tuple, as the lists move from the thread that wrote them to the
    one that joins them. (It counts the left arrivals too: after the join they come from
    memory again.)"""
    sides, keys, offs_lo, offs_hi = seq.sides, seq.keys, band.offs_lo, band.offs_hi
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
def range_run(i0, todo_g, chunk, band, rng, out, n_out, prefetch):
    """One thread of the key-range join: the IBWJ of :func:`join_seq_run` restricted to the keys
    of the :class:`KeyRange` ``rng``, over the tuples :func:`range_split` listed for it
    (``todo_g[i0:]``, arrival indexes into the :class:`RangeChunk` ``chunk``).

    ``rng.left``/``rng.right`` index the tuples of each stream whose keys lie in the range,
    under their stream positions (the window's arrival count is set to a tuple's position before
    it enters, so merges drop by position as in the serial join). Every tuple whose band reaches
    into the range probes them over its window of the opposite stream (``chunk.windows``); a
    listed tuple whose band turns out not to reach in is passed over. ``rng.took[0]`` counts
    the tuples the range took. Matches go to the :class:`Matches` ``out`` from row ``n_out``
    on, as ``(g, partner position)``, partners ascending per ``g``; the ranges' matches of one
    ``g`` are disjoint. Returns ``(next listed tuple, count, status)``, statuses as
    :func:`join_seq_run`. A self-join's range holds its one state as both ``left`` and
    ``right``, as :func:`join_seq_run`. The prefetch runs ``PREFETCH_AHEAD`` listed tuples ahead
    (slot ``i % DESCENTS`` of ``rng.descents`` holds listed tuple ``i``'s descent).
    """
    sides, keys = chunk.sides, chunk.keys
    st_l, st_r = rng.left, rng.right
    self_join = band.self_join
    cnt = todo_g.shape[0]
    took = rng.took
    c2 = took[0]
    w0 = chunk.windows[0]
    w_partner = w0 if self_join else chunk.windows[1]
    before = chunk.arrived[0] + chunk.arrived[1]
    # the left arrivals before each listed tuple, counted from the sides between them
    at = 0
    left = chunk.arrived[0]
    if prefetch:
        clear_descents(rng.descents)
    for i in range(i0, cnt):
        j = i & (DESCENTS - 1) if prefetch else -1
        if prefetch and i + PREFETCH_AHEAD < cnt:
            _range_prefetch(todo_g[i + PREFETCH_AHEAD], chunk, band, rng,
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
                                        band, rng, out, n_out, j)
        else:
            n_out, status = _range_step(g, 1, x, c1, max(0, c0 - w0), c0 - 1, st_r, st_l, band,
                                        rng, out, n_out, j)
            if status == 1:
                status = LOW_RIGHT_POOL
        if status != 0:
            took[0] = c2
            return i, n_out, status
        c2 += _in_range(x, rng)
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
def _merge_rows(x, y, out, d, base):
    # merge_two's rows, one after another
    ga, pa, a, ea = x.g, x.p, x.start, x.end
    gb, pb, b, eb = y.g, y.p, y.start, y.end
    out_g, out_p = out.g, out.p
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
def merge_two(x, y, out, d, base):
    """Merge the runs ``x`` and ``y`` (:class:`Run`, rows ordered by ``(g, partner)``) into the
    :class:`Matches` ``out`` from row ``d`` on in that order, adding ``base`` to each ``g``;
    return the end.

    Without a branch on which side a row comes from: rows of two key ranges interleave at
    random, so such a branch mispredicts about every other row, and a misprediction costs more
    than the copy. Each row's pick waits on the pick before it; so the rows are cut in two at a
    ``g`` and the halves merged in one loop, two picks at a time that do not wait on each other
    (docs/lab/band-joins.md, "Merging the key ranges' rows").
    """
    ga, pa, a, ea = x.g, x.p, x.start, x.end
    gb, pb, b, eb = y.g, y.p, y.start, y.end
    if ea - a + eb - b < 64:
        return _merge_rows(x, y, out, d, base)
    # the cut: the g in the middle of the longer run; every row of a g goes to one half
    cg = ga[(a + ea) // 2] if ea - a >= eb - b else gb[(b + eb) // 2]
    am = a + np.searchsorted(ga[a:ea], cg)
    bm = b + np.searchsorted(gb[b:eb], cg)
    a2 = am
    b2 = bm
    d2 = d + (am - a) + (bm - b)
    out_g, out_p = out.g, out.p
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
    _merge_rows(Run(ga, pa, a, am), Run(gb, pb, b, bm), out, d, base)
    return _merge_rows(Run(ga, pa, a2, ea), Run(gb, pb, b2, eb), out, d2, base)


@kernel()
def time_window_filter(pairs, sides, times, self_join, left, right, length):
    """Keep the pairs ``(g[j], p[j])`` of the :class:`Matches` ``pairs`` of a time-window join
    whose partner position is live and whose times differ by at most ``length`` (``times[g]``
    against the partner's time; ``left``/``right``: the partner's stream, :class:`Retained`);
    compact them in place, in order, and return how many there are."""
    g, p = pairs.g, pairs.p
    live_l, first_l, times_l = left.live, left.first, left.times
    live_r, first_r, times_r = right.live, right.first, right.times
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


@kernel()
def join_run(keys, start, lo_off, hi_off, other, own, self_join, mirrored, out_i, out_p,
             n_out, prefetch, descents):
    """IBWJ over ``keys[start:]``, tuples of the stream that ``own`` indexes, in arrival order.

    Each tuple ``x`` (position ``p``) probes ``other`` for partners with key in
    ``[x + lo_off, x + hi_off]`` (``mirrored``: the right stream's tuples, see
    :func:`~splice.index._band_bounds.band_bounds`) inside the other window (for a self-join: its
    own window before ``p``), then enters ``own``, expiring the oldest when full. Matches are
    ``(tuple index, partner position)``, partners ascending. Returns ``(next tuple, count,
    status)``; status 1: the pool needs room, 2: ``out`` is full — grow and call again.
    ``prefetch``: 1 — start loading the leaves of tuple ``i + PREFETCH_AHEAD``'s search at
    tuple ``i`` (see :func:`search_prefetch`), and keep the descent for that search in
    ``descents`` (:func:`new_descents`); 2 — also the ``T_I`` node its insert will change, and
    keep the route (:func:`insert_prefetch`); 0 — neither.
    """
    n = keys.shape[0]
    ometa = other.meta
    meta = own.meta
    pm = own.pmeta
    kind = ometa[M_KIND]
    if prefetch:
        clear_descents(descents)
    for i in range(start, n):
        if nodes_free(pm) < meta[M_POOLMIN]:
            return i, n_out, 1
        j = i & (DESCENTS - 1)
        if prefetch and i + PREFETCH_AHEAD < n:
            a = (i + PREFETCH_AHEAD) & (DESCENTS - 1)
            search_prefetch(other, band_low(keys[i + PREFETCH_AHEAD], lo_off, hi_off, mirrored),
                            descents, a)
            if prefetch >= 2:
                insert_prefetch(own, keys[i + PREFETCH_AHEAD], descents, a)
        x = keys[i]
        if self_join:
            phi = meta[M_NEXT] - 1
            plo = max(0, meta[M_NEXT] - meta[M_W])
        else:
            phi = ometa[M_NEXT] - 1
            plo = max(0, ometa[M_NEXT] - ometa[M_W])
        if phi >= plo:
            m0 = n_out
            klo, khi = band_bounds(x, lo_off, hi_off, mirrored)
            r = search_from(other, klo, khi, plo, phi, out_p, n_out, descents,
                            j if prefetch else -1)
            if r < 0:
                return i, m0, 2
            n_out = r
            if kind != NLWJ:
                sort_small(out_p, m0, n_out)
            for t in range(m0, n_out):
                out_i[t] = i
        idx_insert(own, x, route_from(own, descents, j if prefetch else -1))
    return n, n_out, 0
