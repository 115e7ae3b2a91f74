"""Worker threads kept for the life of a parallel join, waiting for the next round awake.

Starting a Python thread costs 100-200 µs, as much as joining a few hundred tuples; a join fed
batch by batch would pay it per batch and per thread. :class:`Workers` starts its threads once
and hands each of them one function per round.

A parallel join runs several rounds per batch (list, join, interleave), the threads meeting in
between. A thread that blocks between two rounds puts its core to sleep, and on a virtual
machine the host must schedule a sleeping core again to wake it: 20-40 us a wake-up in calls
that follow one another, up to several milliseconds after other work ran on the host. So when
the caller says another round of the batch follows (``linger``), a thread that has finished its
call spins for up to :data:`SPIN_US` on a counter the next round will change (a GIL-free kernel:
the thread that runs Python meanwhile is not slowed), and blocks only after that; after a
batch's last round it blocks at once, so that no core spins between batches. The caller waits
for the workers' calls the same way. A spinning thread yields its core now and then (to threads
of other joins), and nothing spins when a pool's threads outnumber the cores the process may
use. (A thread that stops spinning may still wait for the GIL, held by the caller's Python
between two kernels: that wait sleeps too.)

The threads hold no reference to the join: a round's function is dropped as soon as it has run,
and when the :class:`Workers` object is collected (with its join) a finalizer tells the threads
to exit. A forked child has none of its parent's threads: its first round starts its own.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import weakref
from collections.abc import Callable

import numpy as np

from splice._atomics import (
    atomic_add,
    atomic_load_acquire,
    atomic_store_release,
    cycle_counter,
    sched_yield,
)
from splice.index._jit import kernel

__all__ = ["SPIN_US", "Workers"]

#: Microseconds a thread spins on the round counter before it blocks.
SPIN_US = 2000

_STOP = None
# cells of a pool's counters, a cache line apart: rounds posted, calls finished
_POSTED, _FINISHED = 0, 8
# a bound on the spin in loads, should the cycle counter not advance
_MAX_LOADS = 1 << 24


@kernel()
def _wait_while(cells: np.ndarray, i: int, value: int, ticks: int) -> int:
    # spin while cells[i] == value, at most ``ticks`` cycle-counter ticks; the value last read
    t0 = cycle_counter()
    v = atomic_load_acquire(cells, i)
    loads = 0
    while v == value and loads < _MAX_LOADS:
        loads += 1
        if (loads & 63) == 0:
            if cycle_counter() - t0 > ticks:
                break
            sched_yield()  # another thread waiting for this core gets it
        v = atomic_load_acquire(cells, i)
    return v


@kernel()
def _wait_below(cells: np.ndarray, i: int, target: int, ticks: int) -> int:
    # spin while cells[i] < target, at most ``ticks`` cycle-counter ticks; the value last read
    t0 = cycle_counter()
    v = atomic_load_acquire(cells, i)
    loads = 0
    while v < target and loads < _MAX_LOADS:
        loads += 1
        if (loads & 63) == 0:
            if cycle_counter() - t0 > ticks:
                break
            sched_yield()  # another thread waiting for this core gets it
        v = atomic_load_acquire(cells, i)
    return v


@kernel()
def _store(cells: np.ndarray, i: int, value: int) -> None:
    atomic_store_release(cells, i, value)


@kernel()
def _add(cells: np.ndarray, i: int, value: int) -> None:
    atomic_add(cells, i, value)


@kernel()
def _ticks() -> int:
    return cycle_counter()


_TICKS_PER_US: list[float] = []


def _ticks_per_us() -> float:
    # the cycle counter's rate, measured once over a few milliseconds
    if not _TICKS_PER_US:
        _ticks()
        t0, c0 = time.perf_counter(), _ticks()
        time.sleep(0.005)
        t1, c1 = time.perf_counter(), _ticks()
        _TICKS_PER_US.append(max((c1 - c0) / ((t1 - t0) * 1e6), 1.0))
    return _TICKS_PER_US[0]


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _loop(jobs: queue.SimpleQueue, done: queue.SimpleQueue, cells: np.ndarray,
          ticks: int) -> None:
    seen, linger = 0, False
    while True:
        if linger:
            _wait_while(cells, _POSTED, seen, ticks)
        item = jobs.get()
        if item is _STOP:
            return
        seen, job, linger = item
        try:
            job()
        finally:
            del job, item  # the job's closure refers to the join: do not keep it
            linger = linger and ticks > 0
            if ticks:
                _add(cells, _FINISHED, 1)
            done.put(True)


def _stop(queues: list[queue.SimpleQueue]) -> None:
    for q in queues:
        q.put(_STOP)


class Workers:
    """``count`` daemon threads that each run one function per :meth:`run`.

    ``spin_us``: how long a thread waits awake for the next round of the same batch, and the
    caller for the workers' calls (default :data:`SPIN_US`; 0 when the threads outnumber the
    usable cores).
    """

    def __init__(self, count: int, name: str = "splice-worker", spin_us: int | None = None):
        self._count = count
        self._name = name
        if spin_us is None:
            spin_us = SPIN_US if count + 1 <= _cores() else 0
        self.spin_us = int(spin_us)
        self._start()

    def _start(self) -> None:
        self._pid = os.getpid()
        self._ticks = int(self.spin_us * _ticks_per_us()) if self.spin_us > 0 else 0
        self._cells = np.zeros(16, np.int64)
        self._rounds = 0
        self._jobs: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(self._count)]
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        for i, jobs in enumerate(self._jobs):
            threading.Thread(target=_loop, args=(jobs, self._done, self._cells, self._ticks),
                             name=f"{self._name}-{i + 1}", daemon=True).start()
        weakref.finalize(self, _stop, self._jobs)

    def run(self, fn: Callable[[int], None], here: int = 0, linger: bool = False) -> None:
        """Call ``fn(here)`` on this thread and ``fn(here + 1 + i)`` on worker ``i``; return when
        every call has returned. ``fn`` must not raise (it reports its errors itself).
        ``linger``: another round follows soon, the workers wait for it awake."""
        if os.getpid() != self._pid:  # a forked child: the threads stayed with the parent
            self._start()
        self._rounds += 1
        r = self._rounds
        for i, jobs in enumerate(self._jobs):
            tid = here + 1 + i
            jobs.put((r, lambda tid=tid: fn(tid), linger))
        if self._ticks:
            _store(self._cells, _POSTED, r)  # after the puts: a woken thread finds its job
        try:
            fn(here)
        finally:
            if self._ticks:
                _wait_below(self._cells, _FINISHED, r * self._count, self._ticks)
            for _ in self._jobs:
                self._done.get()
