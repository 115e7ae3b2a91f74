"""Worker threads kept for the life of a parallel join.

Starting a Python thread costs 100-200 µs, as much as joining a few hundred tuples; a join fed
batch by batch would pay it per batch and per thread. :class:`Workers` starts its threads once
and hands each of them one function per round.

The threads hold no reference to the join: a round's function is dropped as soon as it has run,
and when the :class:`Workers` object is collected (with its join) a finalizer tells the threads
to exit. A forked child has none of its parent's threads: its first round starts its own.
"""

from __future__ import annotations

import os
import queue
import threading
import weakref
from collections.abc import Callable

__all__ = ["Workers"]

_STOP = None


def _loop(jobs: queue.SimpleQueue, done: queue.SimpleQueue) -> None:
    while True:
        job = jobs.get()
        if job is _STOP:
            return
        try:
            job()
        finally:
            del job  # the job's closure refers to the join: do not keep it until the next round
            done.put(True)


def _stop(queues: list[queue.SimpleQueue]) -> None:
    for q in queues:
        q.put(_STOP)


class Workers:
    """``count`` daemon threads that each run one function per :meth:`run`."""

    def __init__(self, count: int, name: str = "splice-worker"):
        self._count = count
        self._name = name
        self._start()

    def _start(self) -> None:
        self._pid = os.getpid()
        self._jobs: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(self._count)]
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        for i, jobs in enumerate(self._jobs):
            threading.Thread(target=_loop, args=(jobs, self._done),
                             name=f"{self._name}-{i + 1}", daemon=True).start()
        weakref.finalize(self, _stop, self._jobs)

    def run(self, fn: Callable[[int], None], here: int = 0) -> None:
        """Call ``fn(here)`` on this thread and ``fn(here + 1 + i)`` on worker ``i``; return when
        every call has returned. ``fn`` must not raise (it reports its errors itself)."""
        if os.getpid() != self._pid:  # a forked child: the threads stayed with the parent
            self._start()
        for i, jobs in enumerate(self._jobs):
            tid = here + 1 + i
            jobs.put(lambda tid=tid: fn(tid))
        try:
            fn(here)
        finally:
            for _ in self._jobs:
                self._done.get()
