"""Parallel IBWJ: key ranges or a shared task queue over PIM-Tree windows, round-robin baselines.

Semantics: exactly those of :mod:`splice.joins.band.band_join` — the same rows in the same order (by
arrival of the later tuple, then of its partner) for any number of threads.

**Key-range join** (:class:`KeyRangeJoin`, for ``imtree``/``pimtree`` windows; the default).
Thread ``k`` owns the keys in ``[b_k, b_k+1)`` and keeps its own IM/PIM-Tree of each window,
holding the tuples with keys in that range under their stream positions. Each thread first lists
one slice of a chunk's tuples under the ranges they concern
(:func:`~splice.joins.band._band_kernels.range_split`); then each joins its range's tuples from every
slice in arrival order (:func:`~splice.joins.band._band_kernels.range_run`, one GIL-free numba call):
a tuple whose band reaches into the range probes the range's trees over its window's positions,
and a tuple whose key lies in the range enters them. (A thread walking every tuple of the chunk
itself would pay for each tuple of every other range: on many threads, more than its share of
the join.) No thread writes what another reads, so no cache line moves between the cores per
tuple (a line passing between two cores costs about as much as a serial tuple's whole step;
docs/lab/band-joins.md has the figures). The ranges' matches are
disjoint; they are interleaved by tuple (each thread one slice of the tuples) into the serial
order. The bounds start as the quantiles of the first keys joined; when one range took more
than ``REBALANCE_SKEW`` times its share of the arrivals, the bounds are re-derived from the
latest keys and the windows' live entries move to their new ranges (:meth:`KeyRangeJoin.rebalance`:
one pass, each range's ``T_S`` rebuilt), as the PIM-Tree re-derives its partitions at a merge.
Time windows (:class:`~splice.joins.band.band_time.TimeBandCore`) run on the same ranges: eviction
sets how many positions each window spans (:meth:`KeyRangeJoin.set_span`), and growth rebuilds
every range's trees with more room (:meth:`KeyRangeJoin.reindex`).

**Task-queue join** (:class:`TaskQueueJoin`, for ``imtree``/``pimtree`` windows; the PIM-Tree paper's
parallel IBWJ, its threads sharing one index). Tuples of both
streams enter one work queue in arrival order; a *task* is ``task_size`` consecutive tuples.
Each thread runs the whole task loop inside one GIL-free numba call
(:func:`splice.joins.band._band_kernels.par_worker`) and returns to Python only to grow its result
buffers or at the end of the queue:

1. *task acquisition* — under the queue mutex (a spin lock in a shared control array), take the
   next available task (its tuples become *active*); ``t_e``/``t_l``, the opposite window's
   earliest and latest position when the tuple was assigned, are fixed by the arrival order
   (count windows);
2. *result generation* — for each tuple read the opposite window's **edge tuple** (the earliest
   position not yet indexed) once, scan the positions from the edge to ``t_l`` that are not yet
   indexed (a bitmap with one bit per window slot, read a word at a time, its zero bits visited
   by trailing-zero count, so a task held up by a preempted thread does not make every later
   probe compare keys all the way), then search the index (``T_S`` lock-free, each ``T_I``
   partition under its spin lock, one cache line per lock) over ``[t_e, t_l]``, dropping the
   hits the scan matched already;
3. *index update* — insert the tuple into its window's PIM-Tree (one partition lock); its
   indexed bit is set with the others of its bitmap word and task (one atomic or per word and
   task: the words are shared with the task the other thread runs); after the task, the thread
   tries the edge mutex (test-and-set: skip when held) and moves each edge past the indexed
   tuples;
4. *result propagation* — the task is *completed*; a thread that wins the propagation mutex
   (test-and-set) moves the queue head past the completed tasks and stamps the time. The rows
   stay in the thread's buffer; the queue records where each task's rows are, and the caller
   gathers them in queue order (one vectorized pass per call).

``task_latency`` holds each task's seconds from assignment to propagation, ``waits`` the
contended lock acquisitions and the yields spent waiting.

**Merges.** When a window's ``T_I`` reaches ``ceil(m * w)`` entries after a task, that thread
becomes the merging thread. *Blocking*: it stops task assignment, waits for active tasks, merges
``T_I`` into ``T_S`` and resumes. *Nonblocking* (two phases): phase 1 stops assignment until the
active tasks finish, then lets threads go on **without index updates** for that window (its edge
stays put, probes scan the growing unindexed tail) while it builds the new ``T_S`` (and the
partitions derived from it) into the window's second buffer; phase 2 stops assignment again,
swaps the new index in, resumes, and inserts the pending tuples of phase 1 while the others join.
Entries before the earliest position a future probe can need are dropped at each merge.

**Round-robin baselines** (:class:`RoundRobinJoin`, any index; ``nlwj`` is the partitioned
nested-loop join): window position ``p`` belongs to thread ``p % T``; every thread sees every
tuple, probes its share of the opposite window and stores the tuples it owns; the per-thread
results are merged into the join's order.

Threads are Python threads; the work runs in ``nogil`` numba kernels, so they run in parallel.
The key-range and task-queue joins keep their threads from call to call
(:class:`~splice.kernels.team.ThreadTeam`); the key-range join runs a call of fewer than
``SMALL_CALL`` tuples range after range on the calling thread, where waking the others would
cost more than they save.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import numpy as np

import splice.kernels.pools as pooled
from splice.core.errors import InternalError
from splice.index._window import (
    M_NEXT,
    M_THRESH,
    M_TSROW,
    M_W,
    PREFETCH_MIN_WINDOW,
    merge_install,
    merge_into,
    new_descents,
)
from splice.index.window_index import IndexKind, WindowIndex
from splice.joins.band._band_kernels import (
    C_ERROR,
    C_HEAD,
    C_LEN,
    C_MERGES,
    LOCK_STRIDE,
    LOW_LEFT_POOL,
    OUT_FULL,
    R_LEN,
    R_SPIN_PART,
    R_TASK,
    R_WAIT_MERGE,
    TS_FULL,
    BandArrivals,
    BandProbe,
    KeyRange,
    Matches,
    PlacedBandArrivals,
    RangeChunk,
    Run,
    SharedWindow,
    TaskLog,
    TaskQueue,
    advance_edge,
    chunk_setup,
    clear_bits,
    cycles,
    gather_tasks,
    merge_two,
    par_worker,
    range_gather,
    range_run,
    range_split,
    rr_run,
)
from splice.joins.band.band_join import probe_offsets
from splice.kernels.jit import kernel_input
from splice.kernels.team import ThreadTeam

__all__ = ["TaskQueueJoin", "RoundRobinJoin", "KeyRangeJoin", "make_parallel", "arrival_bounds"]

#: Tuples per call of ``run`` handled as one queue (longer sequences are cut).
CHUNK = 65_536
#: Chunks of the key-range join with this many tuples and more are listed per range
#: (``range_split``) and their ranges' matches interleaved on every thread, a slice of the tuples
#: each; shorter ones in one slice.
MERGE_SLICE = 16_384
#: The key-range join re-derives its ranges when one range took more than this many times its
#: share of the arrivals (counted over at least half the windows' worth of them, and 1,024),
#: from the latest keys: half the windows' worth, 1,024 to ``RECENT_KEYS``.
REBALANCE_SKEW = 1.25
RECENT_KEYS = 65_536
#: Calls of the key-range join with fewer tuples run the ranges one after another on the calling
#: thread: handing them to the other threads costs more than it saves.
SMALL_CALL = 1024


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def arrival_bounds(
    sides: np.ndarray, counts: tuple[int, int], windows: tuple[int, int], self_join: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per tuple: its position in its stream, and ``t_e``/``t_l`` of the window it probes."""
    is0 = sides == 0
    c0 = np.cumsum(is0) - is0 + counts[0]  # side-0 arrivals before g
    c1 = np.cumsum(~is0) - (~is0) + counts[1]
    if self_join:
        pos = c0.astype(np.int64)
        return pos, np.maximum(0, pos - windows[0]), pos - 1
    pos = np.where(is0, c0, c1).astype(np.int64)
    opp = np.where(is0, c1, c0).astype(np.int64)  # opposite arrivals before g
    wo = np.where(is0, windows[1], windows[0])
    return pos, np.maximum(0, opp - wo), opp - 1


class TaskQueueJoin:
    """The parallel IBWJ of the PIM-Tree paper over IM/PIM-Tree windows (module docstring)."""

    def __init__(
        self,
        index: IndexKind,
        windows: tuple[int, int],
        dtype: np.dtype,
        lower: float,
        upper: float,
        self_join: bool,
        merge_ratio: float,
        insertion_depth: int,
        threads: int,
        task_size: int,
        merge: str = "nonblocking",
    ) -> None:
        if index not in ("imtree", "pimtree"):
            raise InternalError(f"the task-queue join runs on IM/PIM-Tree windows, not {index!r}")
        self.self_join = self_join
        self.dtype = np.dtype(dtype)
        self.windows = windows
        self.threads = int(threads)
        self.task_size = int(task_size)
        self.blocking = merge == "blocking"
        self.offs_lo, self.offs_hi = probe_offsets(lower, upper, self.dtype, self_join)
        self.band = BandProbe(self.offs_lo, self.offs_hi, self_join)
        n_streams = 1 if self_join else 2
        slack = CHUNK + 1024

        def make(s: int) -> WindowIndex:
            return WindowIndex(index, windows[s], self.dtype, merge_ratio=merge_ratio,
                               insertion_depth=insertion_depth, ts_slack=slack,
                               pool_slack=2 * slack + 8 * self.threads * self.task_size)

        # two buffers per window: the current index and the one a nonblocking merge builds
        self.ixs = [[make(s), make(s)] if not self.blocking else [make(s)] * 2
                    for s in range(n_streams)]
        self.cur_buf = np.zeros(2, np.int64)  # which of the two is current, per window
        self.thresh = np.array([int(self.ixs[s][0].meta[M_THRESH]) for s in (0, -1)], np.int64)
        self.locks = [np.zeros(b[0].state.tmeta.shape[0] * LOCK_STRIDE, np.int64) for b in self.ixs]
        self.rings = [np.zeros(_pow2(windows[s] + slack), self.dtype) for s in range(n_streams)]
        # one bit per ring slot: position indexed (the rings' lengths are powers of 2 >= 64)
        self.bits = [np.zeros(len(r) // 64, np.int64) for r in self.rings]
        self.edge = np.zeros(2, np.int64)
        self.elock = np.zeros(1, np.int64)  # the edge mutex (test-and-set in the kernels)
        self.counts = [0, 0]
        self.ti = np.zeros(2, np.int64)  # entries in each window's T_I
        self.merging = np.zeros(2, np.int64)
        self.allow = np.ones(2, np.int64)
        self.merges = 0
        self.limits = [0, 0]
        #: per chunk of ``run``: each task's seconds from assignment to propagation
        self.task_latency: list[np.ndarray] = []
        #: contended partition-lock and queue-lock acquisitions, yields waiting for a merge,
        #: yields spinning on a held lock, window entries scanned linearly past the edge tuple
        self.waits = np.zeros(5, np.int64)
        self._stats_lock = threading.Lock()
        # a chunk's scratch and each thread's result buffers, kept from chunk to chunk (fresh
        # memory costs a page fault a page on first touch)
        tasks = -(-CHUNK // self.task_size)
        self._scratch = (np.empty(CHUNK, np.int64), np.empty(CHUNK, np.int64),
                         np.empty(CHUNK, np.int64), np.empty((2, CHUNK + 1), np.int64),
                         *(np.zeros(tasks, np.int64) for _ in range(6)))
        self._bufs = [(np.empty(0, np.int64), np.empty(0, np.int64))] * self.threads
        self._all = (np.empty(0, np.int64), np.empty(0, np.int64))
        self._team = ThreadTeam(self.threads, "splice-band")

    # -- the OperatorLogic-facing API (same as BandCore) ---------------------------------------
    def start_at(self, positions: tuple[int, int]) -> None:
        """Continue numbering each stream's arrivals from ``positions`` (an empty join only)."""
        for s in range(len(self.ixs)):
            self.counts[s] = int(positions[s])
            self.edge[s] = int(positions[s])

    def run(self, sides: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Join the tuples ``(sides[g], keys[g])`` in order; return ``(g, partner position)``."""
        sides = np.ascontiguousarray(sides, np.int8)
        keys = kernel_input(keys, self.dtype)
        # each chunk's rows go straight into the run's result, grown by doubling
        out_g = pooled.empty(2 * len(keys) + 1024)
        out_p = pooled.empty(len(out_g))
        m = 0
        for c0 in range(0, len(keys), CHUNK):
            all_g, all_p, src, cnt = self._run_chunk(sides[c0 : c0 + CHUNK], keys[c0 : c0 + CHUNK])
            total = int(cnt.sum())
            if m + total > len(out_g):
                size = pooled.room_for_rest(len(out_g), m + total,
                                            min(c0 + CHUNK, len(keys)), len(keys))
                out_g = pooled.grown(out_g, m, size)
                out_p = pooled.grown(out_p, m, size)
            m = gather_tasks(Matches(all_g, all_p), src, cnt, c0, Matches(out_g, out_p), m)
        return out_g[:m], out_p[:m]

    def nbytes(self) -> int:
        distinct = {id(ix): ix for b in self.ixs for ix in b}
        total = sum(ix.used_bytes() for ix in distinct.values())
        return total + sum(r.nbytes for r in self.rings) + sum(b.nbytes for b in self.bits)

    # -- one queue -----------------------------------------------------------------------------
    def _run_chunk(self, sides: np.ndarray, keys: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Join one chunk; return the threads' rows laid end to end and, per task in queue
        order, where its rows start there and how many there are (see ``gather_tasks``)."""
        n = len(keys)
        if self.self_join:
            sides = np.zeros(n, np.int8)
        counts = (self.counts[0], self.counts[1])
        # positions, probe bounds and arrival counts, and the tuples into their windows' rings
        # (the sliding windows hold keys by position): one compiled pass, as the serial part
        # of a chunk holds every other core idle
        pos, t_e, t_l, before, status, task_thr, task_off, task_cnt, t_acq, t_prop = self._scratch
        tuples = PlacedBandArrivals(sides, keys, pos, t_e, t_l)
        chunk_setup(tuples, counts[0], counts[1], self.windows[0], self.windows[-1],
                    self.self_join, self.rings[0], self.rings[-1], before)
        for s in range(len(self.ixs)):
            self.limits[s] = self.counts[s] + int(before[s, n])
            clear_bits(self.bits[s], self.counts[s], self.limits[s])
        limits = np.array(self.limits, np.int64)
        tasks = -(-n // self.task_size)
        ctl = np.zeros(C_LEN, np.int64)
        status = status[:tasks]
        status[:] = 0
        task_thr, task_off, task_cnt = task_thr[:tasks], task_off[:tasks], task_cnt[:tasks]
        t_acq, t_prop = t_acq[:tasks], t_prop[:tasks]
        windows = [SharedWindow(b[0].state, b[1].state, self.locks[s], self.rings[s],
                                self.bits[s], s) for s, b in enumerate(self.ixs)]
        queue = TaskQueue(
            self.task_size, self.blocking, ctl, status, self.cur_buf, self.allow, self.merging,
            self.ti, self.thresh, np.array(self.windows, np.int64), np.array(counts, np.int64),
            before, self.edge, self.elock, limits,
        )
        log = TaskLog(task_thr, task_off, task_cnt, t_acq, t_prop)
        shared = (tuples, self.band, windows[0], windows[-1], queue, log)
        outs: list[tuple[np.ndarray, np.ndarray, int]] = [
            (np.empty(0, np.int64), np.empty(0, np.int64), 0)
        ] * self.threads
        outs_needed = -(-4 * n // self.threads) + 64
        errors: list[BaseException] = []

        def work(tid: int) -> None:
            try:
                outs[tid] = self._work(tid, shared, outs_needed)
            except BaseException as exc:  # surfaced by the thread that started the run
                ctl[C_ERROR] = 1
                errors.append(exc)

        c0, w0 = cycles(), time.perf_counter()
        self._team.run(work)
        c1, w1 = cycles(), time.perf_counter()
        if errors:
            raise errors[0]
        self.merges += int(ctl[C_MERGES])
        for s in range(len(self.ixs)):
            self.counts[s] = self.limits[s]
        for s in range(len(self.ixs)):
            advance_edge(self.bits[s], self.edge, s, self.limits[s])
        if int(ctl[C_HEAD]) != tasks:
            raise InternalError("parallel band join: tasks left unpropagated")
        if c1 > c0 and w1 > w0:
            hz = (c1 - c0) / (w1 - w0)
            self.task_latency.append((t_prop - t_acq) / hz)
        # where each task's rows lie in the threads' buffers, laid end to end
        base = np.cumsum([0] + [o[2] for o in outs])
        total = int(base[-1])
        if len(self._all[0]) < total:
            self._all = (pooled.empty(2 * total), pooled.empty(2 * total))
        all_g = np.concatenate([o[0][: o[2]] for o in outs], out=self._all[0][:total])
        all_p = np.concatenate([o[1][: o[2]] for o in outs], out=self._all[1][:total])
        return all_g, all_p, base[task_thr] + task_off, task_cnt

    def _work(self, tid: int, shared: tuple[Any, ...], cap: int) -> tuple[np.ndarray, np.ndarray, int]:
        # the thread's resume record and counters, written per tuple: padded by a cache line on
        # each side so no other thread's data shares its lines
        res = np.zeros(R_LEN + 2 * LOCK_STRIDE, np.int64)[LOCK_STRIDE : LOCK_STRIDE + R_LEN]
        res[R_TASK] = -1
        path = np.zeros(1024, np.int64)
        out_g, out_p = self._bufs[tid]
        if len(out_g) < cap:
            out_g, out_p = pooled.empty(cap), pooled.empty(cap)
        cap = len(out_g)
        m = 0
        while True:
            m, status = par_worker(tid, *shared, res, path, Matches(out_g, out_p), m)
            if status == 0:
                with self._stats_lock:
                    self.waits += res[R_SPIN_PART : R_WAIT_MERGE + 3]
                self._bufs[tid] = (out_g, out_p)
                return out_g, out_p, m
            if status == OUT_FULL:
                cap *= 2
                out_g = pooled.grown(out_g, m, cap)
                out_p = pooled.grown(out_p, m, cap)
            elif status == TS_FULL:
                raise InternalError("parallel band join: T_S capacity exceeded at merge")
            else:
                raise InternalError("parallel band join: a T_I node pool ran out")


class RoundRobinJoin:
    """Round-robin partitioned join over ``threads`` partitions of each window (baseline)."""

    def __init__(
        self,
        index: IndexKind,
        windows: tuple[int, int],
        dtype: np.dtype,
        lower: float,
        upper: float,
        self_join: bool,
        merge_ratio: float,
        insertion_depth: int,
        chain_length: int,
        threads: int,
    ) -> None:
        self.self_join = self_join
        self.dtype = np.dtype(dtype)
        self.windows = windows
        self.threads = t = int(threads)
        self.offs_lo, self.offs_hi = probe_offsets(lower, upper, self.dtype, self_join)
        self.band = BandProbe(self.offs_lo, self.offs_hi, self_join)
        n_streams = 1 if self_join else 2
        self.parts = [
            [WindowIndex(index, math.ceil(windows[s] / t), self.dtype, merge_ratio=merge_ratio,
                         insertion_depth=min(insertion_depth, 1), chain_length=chain_length)
             for _ in range(t)]
            for s in range(n_streams)
        ]
        self.counts = [0, 0]
        self._team = ThreadTeam(t, "splice-band")

    def start_at(self, positions: tuple[int, int]) -> None:
        """Continue numbering each stream's arrivals from ``positions`` (an empty join only)."""
        for s, parts in enumerate(self.parts):
            self.counts[s] = int(positions[s])
            for part, ix in enumerate(parts):
                base = int(positions[s])
                ix.meta[M_NEXT] = (base - part + self.threads - 1) // self.threads if base > part else 0

    def run(self, sides: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Join the tuples ``(sides[g], keys[g])`` in order; return ``(g, partner position)``."""
        keys = kernel_input(keys, self.dtype)
        sides = np.ascontiguousarray(sides, np.int8)
        if self.self_join:
            sides = np.zeros(len(keys), np.int8)
        pos, t_e, t_l = arrival_bounds(sides, (self.counts[0], self.counts[1]), self.windows,
                                       self.self_join)
        results = self._team.run(self._run_part, PlacedBandArrivals(sides, keys, pos, t_e, t_l))
        for s in range(len(self.parts)):
            self.counts[s] += int((sides == s).sum())
        g = np.concatenate([r[0] for r in results])
        p = np.concatenate([r[1] for r in results])
        order = np.lexsort((p, g))
        return g[order], p[order]

    def _run_part(self, part: int, tuples: PlacedBandArrivals) -> tuple[np.ndarray, np.ndarray]:
        left = self.parts[0][part]
        right = self.parts[-1][part]
        cap = 1024
        out_g = np.empty(cap, np.int64)
        out_p = np.empty(cap, np.int64)
        g, m = 0, 0
        while True:
            g, m, status = rr_run(g, tuples, self.band, part, self.threads, left.state,
                                  right.state, Matches(out_g, out_p), m)
            if status == 0:
                return out_g[:m].copy(), out_p[:m].copy()
            if status == OUT_FULL:
                cap = 2 * cap
                out_g = pooled.grown(out_g, m, cap)
                out_p = pooled.grown(out_p, m, cap)
            else:
                (left if status == LOW_LEFT_POOL else right).grow_pool()

    def nbytes(self) -> int:
        return sum(ix.used_bytes() for parts in self.parts for ix in parts)


def _merge_runs(runs: list[Run], out: Matches, d: int, base: int) -> None:
    """Merge ``runs`` (each ordered by ``(g, p)``) into ``out`` from ``d`` on, adding ``base``
    to each ``g``: two by two with :func:`~splice.joins.band._band_kernels.merge_two`, in
    log2(len(runs)) passes."""
    while len(runs) > 2:
        rows = sum(r.end - r.start for r in runs)
        tmp = Matches(pooled.empty(rows), pooled.empty(rows))
        merged: list[Run] = []
        o = 0
        for i in range(0, len(runs) - 1, 2):
            end = merge_two(runs[i], runs[i + 1], tmp, o, 0)
            merged.append(Run(tmp.g, tmp.p, o, end))
            o = end
        if len(runs) % 2:
            merged.append(runs[-1])
        runs = merged
    if len(runs) == 1:
        runs.append(Run(out.g, out.p, 0, 0))  # an empty second run
    merge_two(runs[0], runs[1], out, d, base)


class KeyRangeJoin:
    """Parallel IBWJ over key ranges of IM/PIM-Tree windows (module docstring).

    Each range's trees are sized for a whole window, which one range may come to hold: the
    preallocated capacity is ``threads`` times the serial join's (untouched pages cost no
    memory); the bytes in use are about the serial join's.
    """

    def __init__(
        self,
        index: IndexKind,
        windows: tuple[int, int],
        dtype: np.dtype,
        lower: float,
        upper: float,
        self_join: bool,
        merge_ratio: float,
        insertion_depth: int,
        threads: int,
    ) -> None:
        if index not in ("imtree", "pimtree"):
            raise InternalError(f"the key-range join runs on IM/PIM-Tree windows, not {index!r}")
        self.self_join = self_join
        self.dtype = np.dtype(dtype)
        self.windows = windows
        self.threads = t = int(threads)
        self.offs_lo, self.offs_hi = probe_offsets(lower, upper, self.dtype, self_join)
        self.band = BandProbe(self.offs_lo, self.offs_hi, self_join)
        n_streams = 1 if self_join else 2
        self.index = index
        self.merge_ratio = merge_ratio
        self.insertion_depth = insertion_depth
        self.parts = [[self._new_index(windows[s]) for s in range(n_streams)] for _ in range(t)]
        self.prefetch = self._prefetch_pays()
        #: calls of fewer tuples run the ranges on the calling thread (:data:`SMALL_CALL`)
        self.small_call = SMALL_CALL
        #: chunks of this many tuples and more are listed and interleaved by slices on every
        #: thread, shorter ones in one slice (:data:`MERGE_SLICE`)
        self.slice_min = MERGE_SLICE
        #: the lower end of every range but the first (derived from the first keys joined,
        #: re-derived by :meth:`rebalance`)
        self.bounds: np.ndarray | None = None
        #: times the ranges were re-derived
        self.rebalances = 0
        # the latest keys joined, a ring: _recent_end counts every key written
        self._recent = np.empty(RECENT_KEYS, self.dtype)
        self._recent_end = 0
        self._took = [0] * t  # tuples each range took since the ranges were set
        self.counts = [0, 0]
        self._bufs = [(np.empty(1024, np.int64), np.empty(1024, np.int64)) for _ in range(t)]
        self._descents = [new_descents() for _ in range(t)]
        # the chunk's tuples listed per range by slice (range_split), and each range's list
        # gathered from the slices (range_gather, range_run)
        self._split_g = np.empty((0, t, 0), np.int32)
        self._counts = np.zeros((0, t + 8), np.int64)
        self._todo = [np.empty(0, np.int32) for _ in range(t)]
        self._team = ThreadTeam(t, "splice-band")

    def _new_index(self, capacity: int) -> WindowIndex:
        # a range holds about 1/t of each window: merging at 1/t of the serial threshold keeps
        # its T_I as small as the serial join's
        return WindowIndex(self.index, capacity, self.dtype,
                           merge_ratio=self.merge_ratio / self.threads,
                           insertion_depth=self.insertion_depth)

    def start_at(self, positions: tuple[int, int]) -> None:
        """Continue numbering each stream's arrivals from ``positions`` (an empty join only)."""
        for s in range(len(self.parts[0])):
            self.counts[s] = int(positions[s])
            for part in self.parts:
                part[s].meta[M_NEXT] = int(positions[s])

    # -- time windows (:class:`~splice.joins.band.band_time.TimeBandCore`) ---------------------------

    def next_position(self, s: int) -> int:
        """Position of stream ``s``'s next arrival."""
        return int(self.counts[s])

    def capacity(self, s: int) -> int:
        """Entries of stream ``s`` each range's trees are sized for."""
        return int(self.parts[0][s].window)

    def set_span(self, s: int, span: int) -> None:
        """Probe (and keep at merges) the last ``span`` positions of stream ``s``: a time
        window's retained tuples, at most :meth:`capacity`."""
        w = list(self.windows)
        w[s] = int(span)
        if self.self_join:
            w[1 - s] = int(span)
        self.windows = (w[0], w[1])
        for part in self.parts:
            part[s].meta[M_W] = int(span)

    def reindex(self, s: int, first: int, keys: np.ndarray, capacity: int) -> None:
        """Index stream ``s``'s tuples at positions ``first, first + 1, ...`` (``keys``) afresh,
        every range's trees sized for ``capacity`` entries; each thread sorts its range's keys
        into a new ``T_S``."""
        keys = np.ascontiguousarray(keys, self.dtype)
        if self.bounds is None and len(keys):
            self.bounds = self._derive_bounds(keys)
        t = self.threads
        nxt = int(first) + len(keys)

        def build(k: int) -> None:
            ix = self._new_index(capacity)
            ix.meta[M_NEXT] = nxt
            mask = np.ones(len(keys), np.bool_)
            if self.bounds is not None:
                if k > 0:
                    mask &= keys >= self.bounds[k - 1]
                if k < t - 1:
                    mask &= keys < self.bounds[k]
            pos = np.flatnonzero(mask) + int(first)
            mine = keys[mask]
            order = np.argsort(mine, kind="stable")  # (key, position) order
            st = ix.state
            row = ix.meta[M_TSROW]
            st.ibt_keys[row, : len(mine)] = mine[order]
            st.ibt_offs[row, : len(mine)] = pos[order] - int(first)  # offsets from the row's base
            merge_install(st, len(mine), int(first))
            self.parts[k][s] = ix

        self._in_threads(build)
        self.counts[s] = nxt
        self.prefetch = self._prefetch_pays()

    def _prefetch_pays(self) -> bool:
        # a range's T_S holds about its share of the window: prefetching pays when that share
        # is a quarter of a serial join's prefetching window (docs/lab/band-joins.md)
        return any(ix.window >= self.threads * (PREFETCH_MIN_WINDOW // 4) for ix in self.parts[0])

    def _derive_bounds(self, keys: np.ndarray) -> np.ndarray:
        # equal shares of the keys seen: the quantiles at 1/t, 2/t, ...
        qs = np.quantile(keys, np.arange(1, self.threads) / self.threads, method="lower")
        return np.ascontiguousarray(qs, self.dtype)

    def run(self, sides: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Join the tuples ``(sides[g], keys[g])`` in order; return ``(g, partner position)``.
        Long sequences run in chunks of ``CHUNK`` tuples, the ranges checked after each."""
        sides = np.ascontiguousarray(sides, np.int8)
        keys = kernel_input(keys, self.dtype)
        n = len(keys)
        out = (pooled.empty(2 * n + 1024), pooled.empty(2 * n + 1024))
        m = 0
        for c0 in range(0, n, CHUNK):
            out, m = self._run_chunk(sides[c0 : c0 + CHUNK], keys[c0 : c0 + CHUNK], c0, out, m,
                                     n)
        return out[0][:m], out[1][:m]

    def _run_chunk(self, sides: np.ndarray, keys: np.ndarray, c0: int,
                   out: tuple[np.ndarray, np.ndarray], m: int, total: int
                   ) -> tuple[tuple[np.ndarray, np.ndarray], int]:
        # join one chunk (tuples c0 ... of the call's total) and write its rows into out from m
        # on (grown as needed)
        n = len(keys)
        if self.self_join:
            sides = np.zeros(n, np.int8)
        if self.bounds is None:
            self.bounds = self._derive_bounds(keys)
        t = self.threads
        here = n < self.small_call
        # the chunk in slices (one per thread, or one for a short chunk): each thread lists one
        # slice's tuples under the ranges they concern, joins its range's tuples from every
        # slice, then interleaves one slice's rows of all ranges; cut[k, j]: where slice j's
        # rows start in range k's
        slices = t if n >= self.slice_min else 1
        edges = (np.arange(slices + 1, dtype=np.int64) * n) // slices
        lefts = self._split(sides, keys, edges, here)
        cut = np.zeros((t, slices + 1), np.int64)
        arrivals = np.array(self.counts, np.int64)
        took = [np.zeros(1, np.int64) for _ in range(t)]
        chunk = RangeChunk(sides, keys, arrivals, (self.windows[0], self.windows[-1]))
        self._in_threads(lambda k: self._run_range(k, chunk, took[k], edges, cut[k]), here=here)
        self.counts = [self.counts[0] + lefts, self.counts[1] + n - lefts]
        self._note_arrivals([int(c[0]) for c in took])
        # where each slice's rows start in out
        starts = m + np.concatenate([[0], np.cumsum((cut[:, 1:] - cut[:, :-1]).sum(axis=0))])
        end = int(starts[-1])
        if end > len(out[0]):
            size = pooled.room_for_rest(len(out[0]), end, c0 + n, total)
            out = (pooled.grown(out[0], m, size), pooled.grown(out[1], m, size))
        rows = Matches(out[0], out[1])

        def merge(j: int) -> None:
            if j < slices:
                runs = [Run(b[0], b[1], int(cut[k, j]), int(cut[k, j + 1]))
                        for k, b in enumerate(self._bufs)]
                _merge_runs(runs, rows, int(starts[j]), c0)

        if slices > 1:
            self._in_threads(merge)
        else:
            merge(0)
        return out, end

    def _note_arrivals(self, took: list[int]) -> None:
        # re-derive the ranges when one took far more than its share of the windows' entries
        # (one window for a self-join)
        span = self.windows[0] if self.self_join else sum(self.windows)
        self._took = [a + b for a, b in zip(self._took, took, strict=True)]
        since = sum(self._took)
        enough = max(span // 2, 1024)
        if (self.threads > 1 and since >= enough
                and max(self._took) > REBALANCE_SKEW * since / self.threads):
            self.rebalance()
        elif since >= 4 * enough:  # judge the recent arrivals, not all since the start
            self._took = [0] * self.threads

    def _recent_keys(self) -> np.ndarray:
        """The latest keys joined: half the windows' worth, 1,024 to ``RECENT_KEYS``."""
        span = self.windows[0] if self.self_join else sum(self.windows)
        cap = len(self._recent)
        n = min(RECENT_KEYS, max(1024, span // 2), self._recent_end)
        end = self._recent_end % cap
        if n <= end:
            return self._recent[end - n : end]
        return np.concatenate([self._recent[cap - (n - end) :], self._recent[:end]])

    def rebalance(self) -> None:
        """Re-derive the key ranges from the latest arrivals' keys (equal shares) and move each
        window's live entries to the ranges that now hold their keys (every range's ``T_S`` is
        rebuilt and its ``T_I`` emptied; each thread collects its old range's entries, then
        builds its new range).

        One pass over the windows' live entries: with at least half the windows' worth of
        arrivals between two rebalances, its cost per arrival is bounded by about twice its
        cost per entry."""
        self._took = [0] * self.threads
        recent = self._recent_keys()
        bounds = self._derive_bounds(recent) if len(recent) else None
        if bounds is None or (self.bounds is not None and np.array_equal(bounds, self.bounds)):
            return  # e.g. one key value takes most arrivals: no split of it is fairer
        self.bounds = bounds
        self.rebalances += 1
        for s in range(len(self.parts[0])):
            self._move_entries(s, bounds)

    def _move_entries(self, s: int, bounds: np.ndarray) -> None:
        # window s's live entries from the old ranges to the ranges of ``bounds``
        t = self.threads
        lo = self.counts[s] - self.windows[s]
        sizes = [0] * t
        ixs = [self.parts[k][s] for k in range(t)]
        spare = [1 - int(ix.meta[M_TSROW]) for ix in ixs]  # the rows T_S does not use

        def collect(k: int) -> None:
            # range k's live entries, in (key, position) order, into its spare row (positions
            # as offsets from lo in every range: the rows' pieces move between ranges as they are)
            st = ixs[k].state
            sizes[k] = merge_into(st, st.ibt_keys[spare[k]], st.ibt_offs[spare[k]], lo)
            if sizes[k] < 0:
                raise InternalError("key-range join: a merge buffer is too small")

        self._in_threads(collect)
        # the ranges are disjoint and in key order: laid end to end, the entries are sorted;
        # cut[j, k]: where the entries of new range k start in old range j's spare row
        cut = np.array([[0, *np.searchsorted(ixs[j].state.ibt_keys[spare[j], : sizes[j]], bounds,
                                             side="left").tolist(), sizes[j]]
                        for j in range(t)], np.int64)

        def install(k: int) -> None:
            # into T_S's own row (its entries are in the spare row now; others read only those)
            st = ixs[k].state
            row = 1 - spare[k]
            o = 0
            for j in range(t):
                a, b = int(cut[j, k]), int(cut[j, k + 1])
                if o + b - a >= st.ibt_keys.shape[1]:  # its last slot is merge scratch
                    raise InternalError("key-range join: T_S capacity exceeded at a rebalance")
                src = ixs[j].state
                st.ibt_keys[row, o : o + b - a] = src.ibt_keys[spare[j], a:b]
                st.ibt_offs[row, o : o + b - a] = src.ibt_offs[spare[j], a:b]
                o += b - a
            merge_install(st, o, lo)

        self._in_threads(install)

    def _in_threads(self, fn: Any, here: bool = False) -> None:
        # fn(k) on thread k for every k (``here``: every k on this thread, one after another);
        # the first error is raised here
        errors: list[BaseException] = []

        def call(k: int) -> None:
            try:
                fn(k)
            except BaseException as exc:  # surfaced by the thread that started the run
                errors.append(exc)

        if here:
            for k in range(self.threads):
                call(k)
        else:
            self._team.run(call)
        if errors:
            raise errors[0]

    def _split(self, sides: np.ndarray, keys: np.ndarray, edges: np.ndarray, here: bool) -> int:
        # range_split of the chunk's slices ``edges[j] .. edges[j + 1] - 1`` (slice j on thread
        # j; ``here``: all on this thread); returns the chunk's left arrivals. Every range has
        # room for the whole slice (a band may span all ranges); pages never written cost no
        # memory. The chunk's latest keys go to the ring of recent keys, over the oldest
        n, t = len(keys), self.threads
        cap = len(self._recent)
        keep = max(0, n - cap)  # the first key kept
        end = self._recent_end
        splits = len(edges) - 1
        room = -(-n // splits)
        if self._split_g.shape[0] < splits or self._split_g.shape[2] < room:
            self._split_g = np.empty((splits, t, room), np.int32)
        # each slice's counts apart from the others' by a cache line: range_split counts per
        # tuple, and one line written in turns by two cores cost more than the whole pass
        self._counts = np.zeros((splits, t + 8), np.int64)
        bounds = (self.bounds if self.bounds is not None else np.empty(0, self.dtype))
        seq = BandArrivals(sides, keys)

        lefts = [0] * splits

        def split(j: int) -> None:
            if j < splits:
                g0, g1 = int(edges[j]), int(edges[j + 1])
                lefts[j] = range_split(g0, g1, seq, self.band, bounds, self._counts[j],
                                       self._split_g[j])
                # the slice's kept keys into the ring, wrapping around its end
                a = max(g0, keep)
                while a < g1:
                    at = (end + a - keep) % cap
                    b = min(g1, a + cap - at)
                    self._recent[at : at + b - a] = keys[a:b]
                    a = b

        self._in_threads(split, here=here or splits == 1)
        self._recent_end += n - keep
        return sum(lefts)

    def _run_range(self, k: int, chunk: RangeChunk, took: np.ndarray, edges: np.ndarray,
                   cut: np.ndarray) -> None:
        assert self.bounds is not None
        left = self.parts[k][0]
        right = self.parts[k][-1]
        first, last = k == 0, k == self.threads - 1
        lo = self.bounds[k - 1] if not first else self.dtype.type(0)
        hi = self.bounds[k] if not last else self.dtype.type(0)
        out_g, out_p = self._bufs[k]
        if len(self._todo[k]) < len(chunk.keys):
            self._todo[k] = np.empty(len(chunk.keys), np.int32)
        todo = self._todo[k]
        cnt = range_gather(k, self._split_g, self._counts, todo)
        i, m = 0, 0
        while True:
            # the trees again after a pool grew
            rng = KeyRange(lo, hi, first, last, left.state, right.state, self._descents[k], took)
            i, m, status = range_run(i, todo[:cnt], chunk, self.band, rng, Matches(out_g, out_p),
                                     m, self.prefetch)
            if status == 0:
                break
            if status == OUT_FULL:
                cap = 2 * len(out_g)
                out_g = pooled.grown(out_g, m, cap)
                out_p = pooled.grown(out_p, m, cap)
            else:
                (left if status == LOW_LEFT_POOL else right).grow_pool()
        self._bufs[k] = (out_g, out_p)
        cut[:] = np.searchsorted(out_g[:m], edges)

    def nbytes(self) -> int:
        return sum(ix.used_bytes() for part in self.parts for ix in part)


def make_parallel(spec: Any, dtype: np.dtype) -> TaskQueueJoin | RoundRobinJoin | KeyRangeJoin:
    """The parallel engine for a :class:`~splice.joins.band.band_join.BandJoin` with threads > 1."""
    lower, upper = spec.bounds
    mode = spec.parallel_mode
    if mode == "key_range":
        return KeyRangeJoin(spec.index, spec.windows, dtype, lower, upper, spec.self_join,
                            spec.ratio, spec.depth, spec.threads)
    if mode == "task_queue":
        return TaskQueueJoin(spec.index, spec.windows, dtype, lower, upper, spec.self_join,
                             spec.ratio, spec.depth, spec.threads, spec.task_size,
                             spec.merge)
    return RoundRobinJoin(spec.index, spec.windows, dtype, lower, upper, spec.self_join,
                          spec.ratio, spec.depth, spec.chain_length, spec.threads)
