"""A team of threads that runs one function together: the one way splice runs kernels in parallel.

A parallel join, a partitioned query or a transaction batch splits its work by thread id and
runs the same function on every thread (the GIL-free kernels run truly in parallel). Starting a
Python thread costs about as much as joining a few hundred tuples, and work fed batch by batch
would pay that per batch and per thread, so a :class:`ThreadTeam` starts its helper threads once
and hands each of them one call per :meth:`ThreadTeam.run`; the caller is thread 0.

The helper threads hold no reference to the work: a round's function is dropped as soon as it has
run, and when the team is collected (or closed) the threads exit. A forked child has none of its
parent's threads: its first round starts its own. (The runtime's pipelined executor is another
kind of parallelism, one thread per stage of a pipeline, and keeps its own threads.)
"""

from __future__ import annotations

import os
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["ThreadTeam"]

_STOP = None


def _loop(jobs: queue.SimpleQueue) -> None:
    while True:
        job = jobs.get()
        if job is _STOP:
            return
        fn, tid, args, results, errors, done = job
        del job
        try:
            results[tid] = fn(tid, *args)
        except BaseException as exc:  # reported to the caller of run()
            errors[tid] = exc
        finally:
            del fn, args  # the closure may refer to a join: do not keep it until the next round
            done.put(tid)


def _stop(queues: list[queue.SimpleQueue]) -> None:
    for q in queues:
        q.put(_STOP)


class _Helpers:
    """The helper threads of a team and of the smaller teams that share them."""

    def __init__(self, count: int, name: str):
        self.count = count
        self.name = name
        self.queues: list[queue.SimpleQueue] = []
        self.closed = False
        self._start()

    def _start(self) -> None:
        self.pid = os.getpid()
        self.queues = [queue.SimpleQueue() for _ in range(self.count)]
        for i, jobs in enumerate(self.queues):
            threading.Thread(target=_loop, args=(jobs,), name=f"{self.name}-{i + 1}",
                             daemon=True).start()
        self._finalizer = weakref.finalize(self, _stop, self.queues)

    def ready(self) -> list[queue.SimpleQueue]:
        if self.closed:
            raise RuntimeError(f"thread team {self.name!r} is closed")
        if os.getpid() != self.pid:  # a forked child: the threads stayed with the parent
            self._start()
        return self.queues

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._finalizer()


class ThreadTeam:
    """``threads`` threads (the caller and ``threads - 1`` helpers) that each run one call of a
    function per :meth:`run`."""

    def __init__(self, threads: int, name: str = "splice-team", *, _helpers: _Helpers | None = None):
        self.threads = max(1, int(threads))
        self._owns = _helpers is None
        self._helpers = _helpers if _helpers is not None else _Helpers(self.threads - 1, name)

    def using(self, threads: int) -> ThreadTeam:
        """A team of this team's first ``threads`` threads (sharing its helpers; closing it closes
        nothing)."""
        if threads >= self.threads:
            return self
        return ThreadTeam(threads, _helpers=self._helpers)

    def run(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """Call ``fn(t, *args)`` on every thread ``t`` (0, the caller, first) at once; return the
        results by thread id once every call has returned. If calls raised, re-raise the
        exception of the lowest thread id that raised, after all have finished."""
        n = self.threads
        results: list[Any] = [None] * n
        if n == 1:
            results[0] = fn(0, *args)
            return results
        errors: list[BaseException | None] = [None] * n
        done: queue.SimpleQueue = queue.SimpleQueue()
        queues = self._helpers.ready()
        for t in range(1, n):
            queues[t - 1].put((fn, t, args, results, errors, done))
        try:
            results[0] = fn(0, *args)
        except BaseException as exc:
            errors[0] = exc
        for _ in range(n - 1):
            done.get()
        failed = next((e for e in errors if e is not None), None)
        if failed is not None:
            raise failed
        return results

    def close(self) -> None:
        """Stop the helper threads (a team from :meth:`using` leaves them to their owner)."""
        if self._owns:
            self._helpers.close()

    def __enter__(self) -> ThreadTeam:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
