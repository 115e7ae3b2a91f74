"""Executors: how records move along the path's stages.

* :class:`SerialExecutor` pushes each record through every stage before taking the next: the
  reference behaviour, and the fastest on one core.
* :class:`PipelinedExecutor` runs each brick (with the global switch after it) on its own thread,
  joined by bounded queues, so bricks work on different records at once (pipeline parallelism).
  Inside a brick, the units a record reaches run concurrently on a thread pool, and a
  :class:`~splice.runtime.synchronizer.Synchronizer` releases results in record order, so the
  path keeps exactly the serial executor's order. Arrow kernels and splice's numba kernels
  release the GIL, so the threads really run in parallel.

Fences. :meth:`Executor.fence` sends a marker down the path behind every record submitted so
far: each brick, once it has finished every record before the marker and before it starts any
record after it, hands itself to ``probe``; when the marker has left the last brick, ``done``
runs. The engine uses fences to learn, without draining the path, how far every composing
query's units have got and which rows they still keep (the decomposer's low-water row ids).
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from splice.core.errors import InternalError, PlanError
from splice.core.records import End, Install, Instruction, Record, Uninstall
from splice.runtime.brick import Brick, collect
from splice.runtime.synchronizer import Synchronizer
from splice.runtime.topology import GlobalStage, Topology

__all__ = ["SerialExecutor", "PipelinedExecutor", "Executor"]


class Executor:
    """Moves records along ``topology``'s path."""

    def __init__(self, topology: Topology):
        self.topology = topology

    def submit(self, rec: Record) -> None:
        raise NotImplementedError

    def submit_all(self, records: Sequence[Record]) -> None:
        """Submit ``records`` in order, as one step (a reconfiguration's program)."""
        for rec in records:
            self.submit(rec)

    def fence(self, probe: Callable[[Brick], None], done: Callable[[], None]) -> None:
        """Behind every record submitted so far: ``probe`` each brick between two records (the
        one before the fence finished, the one after not begun), then ``done`` (module
        docstring). Both may run on an executor thread."""
        for brick in self.topology.bricks:
            probe(brick)
        done()

    def drain(self) -> None:
        """Return once every submitted record has left the path."""

    def close(self) -> None:
        """Stop worker threads (after :meth:`drain`)."""


def _run_stages(stages: Sequence[GlobalStage | Brick], records: list[Record]) -> list[Record]:
    for stage in stages:
        nxt: list[Record] = []
        for r in records:
            nxt.extend(stage.process(r))
        records = nxt
        if not records:
            break
    return records


class SerialExecutor(Executor):
    """Each record through every stage, in the caller's thread."""

    def submit(self, rec: Record) -> None:
        _run_stages(self.topology.stages(), [rec])


_STOP = object()


class _Fence:
    """The marker :meth:`PipelinedExecutor.fence` sends down the brick threads' queues."""

    __slots__ = ("probe", "done")

    def __init__(self, probe: Callable[[Brick], None], done: Callable[[], None]):
        self.probe = probe
        self.done = done


class PipelinedExecutor(Executor):
    """One thread per brick (+ the global switch after it); units of a brick on a thread pool.

    ``in_flight`` bounds how many records a brick works on at once; their results pass through a
    synchronizer so they leave the brick in arrival order.

    ``switch_interval`` (seconds; ``None``, the default, leaves it alone) sets the interpreter's
    GIL switch interval, a setting of the whole process, from now until :meth:`close` restores
    the one it found. Ask for it explicitly: the executor's threads hand the GIL back and forth
    between short Python steps and long GIL-free kernels, and with Python's default interval a
    thread coming back from a kernel can wait a whole interval for the GIL, so plans whose units
    work at the same time can run faster with a shorter one, at the price of more switching for
    every thread of the process (figures: docs/architecture.md, "Components"; docs/lab/engine.md,
    "The GIL switch interval").
    """

    def __init__(self, topology: Topology, in_flight: int = 4, queue_size: int = 8,
                 switch_interval: float | None = None):
        super().__init__(topology)
        if switch_interval is not None and not switch_interval > 0:
            raise PlanError(f"switch_interval must be > 0 seconds, got {switch_interval}")
        self._saved_interval: float | None = None
        self._set_interval: float | None = None
        if switch_interval is not None:
            self._saved_interval = sys.getswitchinterval()
            sys.setswitchinterval(switch_interval)
            self._set_interval = sys.getswitchinterval()
        self.in_flight = max(1, in_flight)
        self.queue_size = queue_size
        # one worker per unit: a unit sees its records one at a time and in order
        self._unit_pools: dict[int, ThreadPoolExecutor] = {}
        self._threads: list[threading.Thread] = []
        self._queues: list[queue.Queue] = []
        self._error: BaseException | None = None
        self._bricks_started = 0
        self._start()

    def _start(self) -> None:
        n = len(self.topology.bricks)
        self._queues = [queue.Queue(self.queue_size) for _ in range(n)]
        self._threads = [
            threading.Thread(target=self._brick_loop, args=(i,), daemon=True, name=f"splice-brick-{i}")
            for i in range(n)
        ]
        for t in self._threads:
            t.start()
        self._bricks_started = n

    def _brick_loop(self, i: int) -> None:
        brick = self.topology.bricks[i]
        gswitch = self.topology.gswitches[i + 1]
        inbox = self._queues[i]
        outbox = self._queues[i + 1] if i + 1 < len(self._queues) else None
        sync: Synchronizer[tuple[Record, list[list[Record]]]] = Synchronizer()
        window: list[tuple[int, Record, list[Future]]] = []
        token = 0

        def emit(limit: int) -> None:
            # wait until at most `limit` records are in flight; release finished ones in order
            while len(window) > limit:
                wait([f for _, _, fs in window for f in fs], return_when=FIRST_COMPLETED)
                for entry in [e for e in window if all(f.done() for f in e[2])]:
                    window.remove(entry)
                    tok, rec, fs = entry
                    sync.push(tok, (rec, [f.result() for f in fs]))
                for rec, outs in sync.pop_ready():
                    merged = collect(None, outs) + [rec] if isinstance(rec, End) else collect(rec, outs)
                    passed: list[Record] = []
                    for r in merged:
                        passed.extend(gswitch.process(r))
                    if outbox is not None and passed:
                        outbox.put(passed)

        try:
            while True:
                item = inbox.get()
                if item is _STOP:
                    emit(0)
                    if outbox is not None:
                        outbox.put(_STOP)
                    return
                for rec in item:
                    if isinstance(rec, _Fence):
                        emit(0)  # every record before the fence has left this brick
                        rec.probe(brick)
                        if outbox is not None:
                            outbox.put([rec])
                        else:
                            rec.done()
                        continue
                    if isinstance(rec, Instruction | Install | Uninstall) and brick.owns(rec.block_id):
                        emit(0)  # a program change applies exactly between two records
                        brick.apply(rec)
                        continue
                    targets = brick.targets(rec)
                    if len(targets) <= 1:
                        # one unit or none: run it here, after what is in flight (no handoff)
                        emit(0)
                        outs = [brick.units[t].process(rec) for t in targets]
                        done: Future = Future()
                        done.set_result(collect(None, outs))
                        futures = [done]
                    else:
                        futures = [self._unit_pool(brick.units[t].block_id).submit(brick.units[t].process, rec)
                                   for t in targets]
                    window.append((token, rec, futures))
                    token += 1
                    emit(0 if isinstance(rec, End) else self.in_flight)
                if inbox.empty():
                    emit(0)
        except BaseException as exc:  # surface worker failures to the caller
            self._error = exc
            if outbox is not None:
                outbox.put(_STOP)
            while inbox.get() is not _STOP:  # keep upstream from blocking on a full queue
                pass

    def _unit_pool(self, block_id: int) -> ThreadPoolExecutor:
        pool = self._unit_pools.get(block_id)
        if pool is None:
            pool = self._unit_pools[block_id] = ThreadPoolExecutor(1, thread_name_prefix=f"splice-unit-{block_id}")
        return pool

    def _check(self) -> None:
        if self._error is not None:
            raise InternalError(f"a brick thread failed: {self._error!r}") from self._error

    def submit(self, rec: Record) -> None:
        self._check()
        if len(self.topology.bricks) != self._bricks_started:  # the topology grew
            self.drain()
        first = self.topology.gswitches[0].process(rec)
        if first:
            self._queues[0].put(first)

    def submit_all(self, records: Sequence[Record]) -> None:
        # one queue slot for the whole program: a reconfiguration waits for one slot at most
        self._check()
        if len(self.topology.bricks) != self._bricks_started:
            self.drain()
        first = [r for rec in records for r in self.topology.gswitches[0].process(rec)]
        if first:
            self._queues[0].put(first)

    def fence(self, probe: Callable[[Brick], None], done: Callable[[], None]) -> None:
        self._check()
        if len(self.topology.bricks) != self._bricks_started:  # the topology grew
            self.drain()
        self._queues[0].put([_Fence(probe, done)])

    def _stop(self) -> None:
        self._queues[0].put(_STOP)  # flows down behind every record already submitted
        for t in self._threads:
            t.join()

    def drain(self) -> None:
        self._stop()
        self._check()
        self._start()

    def close(self) -> None:
        self._stop()
        for pool in self._unit_pools.values():
            pool.shutdown()
        if self._saved_interval is not None:
            # give back the interval found, unless someone changed it since
            if sys.getswitchinterval() == self._set_interval:
                sys.setswitchinterval(self._saved_interval)
            self._saved_interval = None
        self._check()
