"""Parallel IBWJ: a shared task queue over PIM-Tree windows, and round-robin baselines.

Semantics: exactly those of :mod:`splice.joins.band_join` — the same rows in the same order (by
arrival of the later tuple, then of its partner) for any number of threads.

**Task-queue join** (:class:`TaskQueueJoin`, for ``imtree``/``pimtree`` windows). Tuples of both
streams enter one work queue in arrival order; a *task* is ``task_size`` consecutive tuples.
Each thread loops over four steps:

1. *task acquisition* — under the queue mutex, take the next available task (its tuples become
   *active*); ``t_e``/``t_l``, the opposite window's earliest and latest position when the tuple
   was assigned, are fixed by the arrival order (count windows);
2. *result generation* — one numba call (GIL released) per task: for each tuple read the
   opposite window's **edge tuple** (the earliest position not yet indexed) once, search the
   index for partners before it (``T_S`` lock-free, each ``T_I`` partition under its spin lock)
   and scan the window linearly from the edge to ``t_l``;
3. *index update* — in the same call, insert the tuple into its window's PIM-Tree (one
   partition lock) and flag it indexed; then the thread tries the edge mutex
   (test-and-set: skip when held) and moves each edge past the indexed tuples;
4. *result propagation* — tuples are *completed*; a thread that wins the propagation mutex
   (test-and-set) emits the completed tasks at the queue head, in arrival order.

**Merges.** When a window's ``T_I`` reaches ``ceil(m * w)`` entries after a task, that thread
becomes the merging thread. *Blocking*: it stops task assignment, waits for active tasks, merges
``T_I`` into ``T_S`` and resumes. *Nonblocking* (two phases): phase 1 stops assignment until the
active tasks finish, then lets threads go on **without index updates** for that window (its edge
stays put, probes scan the growing unindexed tail) while it builds the new ``T_S`` (and the
partitions derived from it) into a second buffer; phase 2 stops assignment again, swaps the new
index in, resumes, and inserts the pending tuples of phase 1 while the others join. Entries
before the earliest position a future probe can need are dropped at each merge.

**Round-robin baselines** (:class:`RoundRobinJoin`, any index; ``nlwj`` is the partitioned
nested-loop join): window position ``p`` belongs to thread ``p % T``; every thread sees every
tuple, probes its share of the opposite window and stores the tuples it owns; the per-thread
results are merged into the join's order.

Threads are Python threads; the work runs in ``nogil`` numba kernels, so they run in parallel.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from splice.core.errors import InternalError
from splice.index._window import M_NEXT, M_THRESH, im_merge, merge_install, merge_into
from splice.index.window import IndexKind, WindowIndex
from splice.joins._band_kernels import (
    LOW_LEFT_POOL,
    OUT_FULL,
    advance_edge,
    par_insert_range,
    par_task,
    rr_run,
    try_advance_edge,
)
from splice.joins.band_join import probe_offsets

__all__ = ["TaskQueueJoin", "RoundRobinJoin", "make_parallel", "arrival_bounds"]

AVAILABLE, ACTIVE, COMPLETED = 0, 1, 2

#: Tuples per call of ``run`` handled as one queue (longer sequences are cut).
CHUNK = 65_536


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


@dataclass
class _Run:
    """Shared state of one queue (one chunk of the arrival sequence)."""

    n: int
    tasks: int
    task_size: int
    cond: threading.Condition = field(default_factory=threading.Condition)
    prop_lock: threading.Lock = field(default_factory=threading.Lock)
    next_task: int = 0
    active: int = 0
    blocked: int = 0
    head: int = 0
    status: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    results: list[Any] = field(default_factory=list)
    output: list[Any] = field(default_factory=list)
    error: BaseException | None = None


class TaskQueueJoin:
    """The parallel IBWJ of the seed over IM/PIM-Tree windows (module docstring)."""

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
        n_streams = 1 if self_join else 2
        slack = CHUNK + 1024

        def make(s: int) -> WindowIndex:
            return WindowIndex(index, windows[s], self.dtype, merge_ratio=merge_ratio,
                               insertion_depth=insertion_depth, ts_slack=slack,
                               pool_slack=2 * slack + 8 * self.threads * self.task_size)

        self.cur = [make(s) for s in range(n_streams)]
        self.spare: list[WindowIndex | None] = [None] * n_streams
        self._make = make
        self.thresh = [int(ix.meta[M_THRESH]) for ix in self.cur]
        self.locks = [np.zeros(ix.state[7].shape[0], np.int64) for ix in self.cur]
        self.rings = [np.zeros(_pow2(windows[s] + slack), self.dtype) for s in range(n_streams)]
        self.flags = [np.zeros(len(r), np.int64) for r in self.rings]
        self.edge = np.zeros(2, np.int64)
        self.elock = np.zeros(1, np.int64)  # the edge mutex (test-and-set in the kernels)
        self.limit_arr = np.zeros(2, np.int64)
        self.counts = [0, 0]
        self.ti_count = [0, 0]
        self.merging = [False, False]
        self.allow = np.ones(2, np.int64)
        self.merges = 0
        self.limits = [0, 0]

    # -- the OperatorLogic-facing API (same as BandCore) ---------------------------------------
    def start_at(self, positions: tuple[int, int]) -> None:
        """Continue numbering each stream's arrivals from ``positions`` (an empty join only)."""
        for s in range(len(self.cur)):
            self.counts[s] = int(positions[s])
            self.edge[s] = int(positions[s])

    def run(self, sides: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Join the tuples ``(sides[g], keys[g])`` in order; return ``(g, partner position)``."""
        sides = np.ascontiguousarray(sides, np.int8)
        keys = np.ascontiguousarray(keys, self.dtype)
        gs, ps = [], []
        for c0 in range(0, len(keys), CHUNK):
            g, p = self._run_chunk(sides[c0 : c0 + CHUNK], keys[c0 : c0 + CHUNK])
            gs.append(g + c0)
            ps.append(p)
        if not gs:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return np.concatenate(gs), np.concatenate(ps)

    def nbytes(self) -> int:
        total = sum(ix.used_bytes() for ix in self.cur)
        total += sum(ix.used_bytes() for ix in self.spare if ix is not None)
        return total + sum(r.nbytes for r in self.rings) + sum(f.nbytes for f in self.flags)

    # -- one queue -----------------------------------------------------------------------------
    def _run_chunk(self, sides: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(keys)
        if n == 0:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        if self.self_join:
            sides = np.zeros(n, np.int8)
        counts = (self.counts[0], self.counts[1])
        pos, t_e, t_l = arrival_bounds(sides, counts, self.windows, self.self_join)
        self._pos, self._t_e, self._t_l = pos, t_e, t_l
        self._sides, self._keys = sides, keys
        # the tuples arrive in their windows (the sliding windows hold keys by position)
        for s in range(len(self.cur)):
            mine = sides == s
            slots = pos[mine] % len(self.rings[s])
            self.rings[s][slots] = keys[mine]
            self.flags[s][slots] = 0
            self.limits[s] = self.counts[s] + int(mine.sum())
            self.limit_arr[s] = self.limits[s]
        # cumulative arrivals per stream before each task start, for merge bounds
        self._before = [np.concatenate([[0], np.cumsum(sides == s)]) for s in range(2)]
        tasks = -(-n // self.task_size)
        run = _Run(n=n, tasks=tasks, task_size=self.task_size)
        run.status = np.zeros(tasks, np.int8)
        run.results = [None] * tasks
        workers = [threading.Thread(target=self._worker, args=(run,), daemon=True)
                   for _ in range(self.threads - 1)]
        for t in workers:
            t.start()
        self._worker(run)
        for t in workers:
            t.join()
        if run.error is not None:
            raise run.error
        self._propagate(run)
        for s in range(len(self.cur)):
            self.counts[s] = self.limits[s]
            advance_edge(self.flags[s], self.edge, s, self.limits[s])
        if run.head != tasks:
            raise InternalError("parallel band join: tasks left unpropagated")
        if not run.output:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return (np.concatenate([o[0] for o in run.output]),
                np.concatenate([o[1] for o in run.output]))

    def _worker(self, run: _Run) -> None:
        path = np.zeros(1024, np.int64)
        try:
            self._loop(run, path)
        except BaseException as exc:  # surfaced by the thread that started the run
            with run.cond:
                if run.error is None:
                    run.error = exc
                run.next_task = run.tasks
                run.cond.notify_all()

    def _loop(self, run: _Run, path: np.ndarray) -> None:
        n_streams = len(self.cur)
        while True:
            # 1. task acquisition
            with run.cond:
                while run.blocked and run.error is None:
                    run.cond.wait()
                if run.next_task >= run.tasks:
                    return
                t = run.next_task
                run.next_task += 1
                run.status[t] = ACTIVE
                run.active += 1
                allow = self.allow.copy()
                st_l = self.cur[0].state
                st_r = self.cur[-1].state
                locks_l, locks_r = self.locks[0], self.locks[-1]
            g0 = t * run.task_size
            g1 = min(run.n, g0 + run.task_size)
            # 2. + 3. result generation and index update (GIL released)
            cap = max(64, 4 * (g1 - g0))
            out_g = np.empty(cap, np.int64)
            out_p = np.empty(cap, np.int64)
            ins = np.zeros(2, np.int64)
            g, m = g0, 0
            while True:
                g, m, status = par_task(
                    g, g1, self._sides, self._keys, self._pos, self._t_e, self._t_l,
                    self.offs_lo, self.offs_hi, self.self_join, st_l, st_r, locks_l, locks_r,
                    self.rings[0], self.rings[-1], self.flags[0], self.flags[-1], self.edge,
                    self.elock, self.limit_arr, allow, path, out_g, out_p, m, ins,
                )
                if status == 0:
                    break
                if status != OUT_FULL:
                    raise InternalError("parallel band join: a T_I node pool ran out")
                cap *= 2
                out_g = np.concatenate([out_g[:m], np.empty(cap - m, np.int64)])
                out_p = np.concatenate([out_p[:m], np.empty(cap - m, np.int64)])
            claim = -1
            with run.cond:
                run.results[t] = (out_g[:m], out_p[:m])
                run.status[t] = COMPLETED
                run.active -= 1
                for s in range(n_streams):
                    self.ti_count[s] += int(ins[s])
                    if claim < 0 and not self.merging[s] and self.ti_count[s] >= self.thresh[s]:
                        self.merging[s] = True
                        claim = s
                run.cond.notify_all()
            # 3b. edge tuple update, test-and-set (also tried after each insert in the kernel)
            for s in range(n_streams):
                try_advance_edge(self.flags[s], self.edge, s, self.limits[s], self.elock)
            if claim >= 0:
                self._merge(run, claim, path)
            # 4. result propagation, test-and-set
            self._propagate(run)

    def _propagate(self, run: _Run) -> None:
        if not run.prop_lock.acquire(blocking=False):
            return
        try:
            while run.head < run.tasks and run.status[run.head] == COMPLETED:
                run.output.append(run.results[run.head])
                run.results[run.head] = None
                run.head += 1
        finally:
            run.prop_lock.release()

    def _live_from(self, run: _Run, s: int) -> int:
        # earliest position of stream s that a tuple not yet assigned may probe
        g = min(run.next_task * run.task_size, run.n)
        return max(0, self.counts[s] + int(self._before[s][g]) - self.windows[s])

    def _assigned_until(self, run: _Run, s: int) -> int:
        g = min(run.next_task * run.task_size, run.n)
        return self.counts[s] + int(self._before[s][g]) - 1

    def _merge(self, run: _Run, s: int, path: np.ndarray) -> None:
        ix = self.cur[s]
        with run.cond:
            run.blocked += 1
            while run.active:
                run.cond.wait()
            lo = self._live_from(run, s)
            if not self.blocking:
                self.allow[s] = 0  # phase 1: tasks go on without index updates of window s
                run.blocked -= 1
                run.cond.notify_all()
        if self.blocking:
            if not im_merge(ix.state, lo):
                raise InternalError("parallel band join: T_S capacity exceeded at merge")
            # every assigned tuple was indexed before the merge
            while not try_advance_edge(self.flags[s], self.edge, s, self.limits[s], self.elock):
                pass
            with run.cond:
                self.ti_count[s] = 0
                self.merging[s] = False
                self.merges += 1
                run.blocked -= 1
                run.cond.notify_all()
            return
        spare = self.spare[s] or self._make(s)
        o = merge_into(ix.state, spare.state[8][0], spare.state[9][0], lo)
        if o < 0:
            raise InternalError("parallel band join: T_S capacity exceeded at merge")
        merge_install(spare.state, o)
        with run.cond:  # phase 2
            run.blocked += 1
            while run.active:
                run.cond.wait()
            self.cur[s], self.spare[s] = spare, ix
            self.allow[s] = 1
            p0 = int(self.edge[s])
            p1 = self._assigned_until(run, s)
            self.ti_count[s] = 0
            run.blocked -= 1
            run.cond.notify_all()
        done = par_insert_range(spare.state, self.locks[s], self.rings[s], self.flags[s], p0, p1,
                                path)
        if done < 0:
            raise InternalError("parallel band join: a T_I node pool ran out")
        with run.cond:
            self.ti_count[s] += done
            self.merging[s] = False
            self.merges += 1


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
        n_streams = 1 if self_join else 2
        self.parts = [
            [WindowIndex(index, math.ceil(windows[s] / t), self.dtype, merge_ratio=merge_ratio,
                         insertion_depth=min(insertion_depth, 1), chain_length=chain_length)
             for _ in range(t)]
            for s in range(n_streams)
        ]
        self.counts = [0, 0]

    def start_at(self, positions: tuple[int, int]) -> None:
        """Continue numbering each stream's arrivals from ``positions`` (an empty join only)."""
        for s, parts in enumerate(self.parts):
            self.counts[s] = int(positions[s])
            for part, ix in enumerate(parts):
                base = int(positions[s])
                ix.meta[M_NEXT] = (base - part + self.threads - 1) // self.threads if base > part else 0

    def run(self, sides: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Join the tuples ``(sides[g], keys[g])`` in order; return ``(g, partner position)``."""
        keys = np.ascontiguousarray(keys, self.dtype)
        sides = np.ascontiguousarray(sides, np.int8)
        if self.self_join:
            sides = np.zeros(len(keys), np.int8)
        pos, t_e, t_l = arrival_bounds(sides, (self.counts[0], self.counts[1]), self.windows,
                                       self.self_join)
        results: list[Any] = [None] * self.threads
        errors: list[BaseException] = []

        def work(part: int) -> None:
            try:
                results[part] = self._run_part(part, sides, keys, pos, t_e, t_l)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(1, self.threads)]
        for th in threads:
            th.start()
        work(0)
        for th in threads:
            th.join()
        if errors:
            raise errors[0]
        for s in range(len(self.parts)):
            self.counts[s] += int((sides == s).sum())
        g = np.concatenate([r[0] for r in results])
        p = np.concatenate([r[1] for r in results])
        order = np.lexsort((p, g))
        return g[order], p[order]

    def _run_part(self, part: int, sides: np.ndarray, keys: np.ndarray, pos: np.ndarray,
                  t_e: np.ndarray, t_l: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        left = self.parts[0][part]
        right = self.parts[-1][part]
        cap = 1024
        out_g = np.empty(cap, np.int64)
        out_p = np.empty(cap, np.int64)
        g, m = 0, 0
        while True:
            g, m, status = rr_run(g, sides, keys, pos, t_e, t_l, self.offs_lo, self.offs_hi,
                                  self.self_join, part, self.threads, left.state, right.state,
                                  out_g, out_p, m)
            if status == 0:
                return out_g[:m].copy(), out_p[:m].copy()
            if status == OUT_FULL:
                cap = 2 * cap
                out_g = np.concatenate([out_g[:m], np.empty(cap - m, np.int64)])
                out_p = np.concatenate([out_p[:m], np.empty(cap - m, np.int64)])
            else:
                (left if status == LOW_LEFT_POOL else right).grow_pool()

    def nbytes(self) -> int:
        return sum(ix.used_bytes() for parts in self.parts for ix in parts)


def make_parallel(spec: Any, dtype: np.dtype) -> TaskQueueJoin | RoundRobinJoin:
    """The parallel engine for a :class:`~splice.joins.band_join.BandJoin` with threads > 1."""
    lower, upper = spec.bounds
    mode = spec.parallel
    if mode == "auto":
        mode = "task_queue" if spec.index in ("imtree", "pimtree") else "round_robin"
    if mode == "task_queue":
        return TaskQueueJoin(spec.index, spec.windows, dtype, lower, upper, spec.self_join,
                             spec.merge_ratio, spec.depth, spec.threads, spec.task_size,
                             spec.merge)
    return RoundRobinJoin(spec.index, spec.windows, dtype, lower, upper, spec.self_join,
                          spec.merge_ratio, spec.depth, spec.chain_length, spec.threads)
