"""Running a query across Ray workers: the keyed stage as P subtask actors, the final stage in
the driver.

Each subtask is a Ray actor running an :class:`~splice.runtime.engine.Engine` with the keyed
stage (:mod:`splice.cluster.stages`). The driver reads the sources, splits every batch by key
group (:class:`~splice.cluster.exchange.Exchange`) and sends each part to its subtask over a
:class:`RayChannel`: actor calls, which Ray runs in the order one caller sends them, each message
numbered so the subtask checks the order; at most ``max_in_flight`` calls per channel are
outstanding (backpressure), and Arrow batches travel through Ray's object store (zero-copy
reads on one node). Watermarks are the sources' (the largest time read minus the bound), sent to
every subtask, as Flink's sources broadcast theirs; the end goes to every subtask. What each
subtask produces comes back with the call's reply and feeds the final stage. Checkpoint barriers
and the recovery from a dead worker are described at :func:`run_on_ray`.

``run_on_ray`` starts a local Ray (``ray.init(num_cpus=...)``, no dashboard) unless one is
running or ``address`` names a cluster.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from splice.cluster.exchange import Exchange, Message
from splice.cluster.stages import StagePlan, cut
from splice.core.errors import PlanError, StateError
from splice.core.plan import Query
from splice.core.time import MIN_TIME, BoundedOutOfOrderness, time_values
from splice.runtime.checkpoint import ReplayableSource
from splice.runtime.engine import Engine

__all__ = ["Subtask", "RayChannel", "ClusterRun", "run_on_ray", "StreamDef"]


@dataclass(frozen=True)
class StreamDef:
    """A source stream as the subtasks define it: name, schema, event-time column, bound."""

    name: str
    schema: pa.Schema
    time_column: str | None = None
    max_out_of_orderness: int | None = None


class Subtask:
    """One subtask of the keyed stage: an Engine whose source streams get explicit watermarks.

    :meth:`receive` takes messages in sequence order and returns the stage's new output batches
    and late rows."""

    def __init__(self, index: int, streams: list[StreamDef], query: Query,
                 state: dict[str, Any] | None = None, die_at: int | None = None,
                 stage: int = 0, store: str | None = None) -> None:
        self.index = index
        self.stage = stage
        self.store = store
        self.name = query.name
        self.engine = Engine()
        for s in streams:
            self.engine.define_stream(s.name, s.schema, s.time_column)
        if state is not None and "path" in state:
            state = _read_state(Path(state["path"]))
        self.engine.deploy(query, None if state is None else state["query"])
        self.late = 0 if state is None else int(state["late"])
        self.next_seq = 0
        self.rows_in = 0
        #: tests: the process exits when this many messages have arrived (a worker that dies)
        self.die_at = die_at

    def receive(self, messages: list[Message]) -> tuple[list[pa.RecordBatch], int,
                                                         dict[str, Any] | None]:
        """Apply ``messages``; return the new output batches, the late rows so far, and the
        state snapshot taken at a barrier among them (at most one barrier per call)."""
        snapshot = None
        out: list[pa.RecordBatch] = []
        for m in messages:
            if m.seq != self.next_seq:
                raise StateError(f"subtask {self.index}: message {m.seq} arrived, expected "
                                 f"{self.next_seq}: the channel lost its order")
            self.next_seq += 1
            if self.die_at is not None and self.next_seq >= self.die_at:
                os._exit(1)
            if m.kind == "batch":
                self.engine.push(m.stream, m.payload)
                self.rows_in += m.payload.num_rows
            elif m.kind == "watermark":
                self.engine.watermark(m.stream, int(m.payload))
            elif m.kind == "barrier":
                # what came before the barrier goes out with it, the state after it is saved
                out.extend(self.engine.take(self.name))
                late = sum(self.engine.queries[self.name].late_rows.values())
                snapshot = {"query": self.engine.snapshot()[self.name], "late": late}
                if self.store is not None:  # the state goes to the shared directory, its path back
                    path = (Path(self.store) / f"checkpoint-{int(m.payload):06d}"
                            / f"stage{self.stage}-subtask{self.index}")
                    _write_state(path, snapshot)
                    snapshot = {"path": str(path)}
            elif m.kind == "end":
                self.engine.end()
        out.extend(self.engine.take(self.name))
        return out, sum(self.engine.queries[self.name].late_rows.values()), snapshot

    def ping(self) -> int:
        return self.index


def _write_state(path: Path, state: Any) -> None:
    """``state`` as the snapshot codec's files in directory ``path``, renamed into place whole."""
    from splice.state.codec import encode_state

    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for name, data in encode_state(state).items():
        (tmp / name).write_bytes(data)
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)


def _read_state(path: Path) -> Any:
    from splice.state.codec import decode_state

    if not path.is_dir():
        raise StateError(f"scale-out: the checkpoint state {str(path)!r} is not there: the "
                         "checkpoint directory must be one every worker reaches")
    return decode_state({p.name: p.read_bytes() for p in path.iterdir()})


class RayChannel:
    """The channel to one subtask actor (module docstring); replies go to ``on_reply``."""

    def __init__(self, actor: Any, on_reply: Callable[[int, Any], None], index: int,
                 max_in_flight: int = 4, coalesce: int = 1) -> None:
        self.actor = actor
        self.on_reply = on_reply
        self.index = index
        self.max_in_flight = max_in_flight
        self.coalesce = coalesce
        self.pending: list[Message] = []
        self.in_flight: list[Any] = []
        self.calls = 0
        self.wait_seconds = 0.0

    def send(self, message: Message) -> None:
        self.pending.append(message)
        if message.kind == "barrier" or (message.kind == "batch"
                                          and len(self.pending) >= self.coalesce):
            self._call()

    def _call(self) -> None:
        import ray

        if not self.pending:
            return
        self.in_flight.append(self.actor.receive.remote(self.pending))
        self.pending = []
        self.calls += 1
        while len(self.in_flight) > self.max_in_flight:
            t0 = time.perf_counter()
            done, self.in_flight = ray.wait(self.in_flight, num_returns=1)
            self.wait_seconds += time.perf_counter() - t0
            for ref in done:
                self.on_reply(self.index, ray.get(ref))

    def flush(self) -> None:
        import ray

        self._call()
        for ref in self.in_flight:
            self.on_reply(self.index, ray.get(ref))
        self.in_flight = []


@dataclass
class ClusterRun:
    """What a run on workers produced: the result, late rows, and the exchange's figures."""

    result: pa.Table
    late_rows: int
    rows_per_subtask: list[int]
    calls: int
    wait_seconds: float
    seconds: float
    stage_plan: StagePlan = field(repr=False)
    restarts: int = 0


def _start_ray(workers: int, address: str | None) -> None:
    import ray

    if ray.is_initialized():
        return
    if address is not None:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(num_cpus=max(workers, 1), include_dashboard=False, log_to_driver=False,
                 configure_logging=False)


@dataclass
class _Checkpoint:
    """The job at a barrier: the source position, each stage's subtask states, the final
    stage's state, the watermark generators, and the query's results so far."""

    position: int = 0
    number: int = 0
    subtasks: list[list[dict[str, Any] | None]] = field(default_factory=list)
    final: dict[str, Any] | None = None
    max_times: dict[str, int] = field(default_factory=dict)
    reported: dict[str, int] = field(default_factory=dict)
    collected: list[pa.RecordBatch] = field(default_factory=list)


def _stage_streams(plan: StagePlan, streams: list[StreamDef]) -> list[list[StreamDef]]:
    """The streams each keyed stage defines: the sources it reads, the stage before it (by its
    output's name and schema, probed on an engine here)."""
    by_name = {s.name: s for s in streams}
    out: list[list[StreamDef]] = []
    previous: StreamDef | None = None
    for stage in plan.stages:
        defs = [by_name[n] for n in stage.keys if n in by_name]
        if previous is not None:
            defs.append(previous)
        probe = Engine()
        for d in defs:
            probe.define_stream(d.name, d.schema, d.time_column)
        previous = StreamDef(stage.output, probe.deploy(stage.query).schema)
        probe.close()
        out.append(defs)
    out.append([previous] if previous is not None else [])
    return out


def run_on_ray(query: Query, streams: list[StreamDef], source: ReplayableSource, workers: int,
               address: str | None = None, max_in_flight: int = 4,
               checkpoint_batches: int | None = 64, restarts: int = 3,
               die_at: tuple[int, int] | None = None,
               state_dir: str | Path | None = None) -> ClusterRun:
    """Run ``query`` over the replayable ``source`` with each keyed stage on ``workers``
    subtasks (a plan keyed by two different keys, as TPC-H Q3's joins are, has two stages; the
    driver forwards one stage's output through the next exchange).

    Every ``checkpoint_batches`` source batches a barrier goes down every channel of the first
    stage, then, once the first stage's replies are forwarded, of the next: each subtask
    snapshots its state when the barrier reaches it (one input channel per subtask, so nothing
    to align), and with every snapshot in, the driver keeps the checkpoint (the source position,
    the states, the final stage's state and the results so far). When a worker dies, every
    subtask is started again from the last checkpoint and the source replays from its position,
    up to ``restarts`` times. With ``state_dir`` (a directory every worker reaches: a shared
    path, a mounted object store) each subtask writes its state there, in the snapshot codec's
    files, and only the path travels back; without it the states travel in the replies.
    ``die_at=(subtask, message)`` makes that subtask of the first stage exit its process when
    that message arrives (tests)."""
    import ray

    if workers < 1:
        raise PlanError(f"--workers must be >= 1, got {workers}")
    plan = cut(query, {s.name: s.schema for s in streams})
    defs = _stage_streams(plan, streams)
    _start_ray(workers, address)
    actor_class: Any = ray.remote(num_cpus=0, max_restarts=0)(Subtask)
    saved = _Checkpoint(subtasks=[[None] * workers for _ in plan.stages])
    attempts = 0
    t0 = time.perf_counter()
    while True:
        try:
            run = _attempt(plan, defs, source, workers, actor_class, max_in_flight,
                           checkpoint_batches, saved, die_at if attempts == 0 else None,
                           None if state_dir is None else str(state_dir))
            run.seconds = time.perf_counter() - t0
            run.restarts = attempts
            return run
        except ray.exceptions.RayActorError as exc:
            attempts += 1
            if attempts > restarts:
                raise StateError(f"scale-out: a worker died {attempts} times; the last: {exc}") from exc


def _attempt(plan: StagePlan, defs: list[list[StreamDef]], source: ReplayableSource,
             workers: int, actor_class: Any, max_in_flight: int,
             checkpoint_batches: int | None, saved: _Checkpoint,
             die_at: tuple[int, int] | None, store: str | None) -> ClusterRun:
    """One run from the checkpoint ``saved`` (updated at every barrier)."""
    import ray

    n_stages = len(plan.stages)
    actors = [[actor_class.remote(i, defs[k], plan.stages[k].query, saved.subtasks[k][i],
                                  die_at[1] if die_at is not None and k == 0 and die_at[0] == i
                                  else None, k, store)
               for i in range(workers)] for k in range(n_stages)]
    try:
        ray.get([a.ping.remote() for per_stage in actors for a in per_stage])
        last = defs[-1][0]
        final = Engine()
        final.define_stream(last.name, last.schema)
        if plan.final is not None:
            final.deploy(plan.final, None if saved.final is None else saved.final[plan.final.name])
        collected = list(saved.collected)
        late = [[0] * workers for _ in range(n_stages)]
        barrier: list[list[dict[str, Any] | None]] = [[None] * workers for _ in range(n_stages)]
        exchanges: list[Exchange] = []

        def replies(k: int) -> Callable[[int, Any], None]:
            def on_reply(index: int, reply: tuple[list[pa.RecordBatch], int, Any]) -> None:
                batches, late_rows, snapshot = reply
                late[k][index] = late_rows
                if snapshot is not None:
                    barrier[k][index] = snapshot
                for b in batches:
                    if k + 1 < n_stages:
                        exchanges[k + 1].send_batch(plan.stages[k].output, b)
                    elif plan.final is not None:
                        final.push(last.name, b)
                    else:
                        collected.append(b)
            return on_reply

        channels = [[RayChannel(a, replies(k), i, max_in_flight) for i, a in enumerate(per_stage)]
                    for k, per_stage in enumerate(actors)]
        for k, stage in enumerate(plan.stages):
            schemas = {d.name: d.schema for d in defs[k]}
            first = next(iter(stage.keys))
            types = [schemas[first].field(c).type for c in stage.keys[first]]
            exchanges.append(Exchange(channels[k], stage.keys, types))
        reader = {name: k for k, stage in enumerate(plan.stages) for name in stage.keys}
        sources = {d.name: d for stage_defs in defs[:-1] for d in stage_defs}
        marks = {name: BoundedOutOfOrderness(int(d.max_out_of_orderness or 0))
                 for name, d in sources.items() if d.time_column is not None}
        for name, t in saved.max_times.items():
            marks[name].max_time = t
        reported = {name: saved.reported.get(name, int(MIN_TIME)) for name in marks}

        def everywhere(kind: str, payload: Any = None) -> None:
            for k in range(n_stages):  # a stage's replies reach the next before it is told
                exchanges[k].broadcast(kind, "", payload)
                exchanges[k].flush()

        position = saved.position
        since = 0
        for stream, batch in source(position):
            position += 1
            since += 1
            if not isinstance(batch, pa.RecordBatch) or stream not in reader:
                continue  # a stream the query does not read is passed over
            exchange = exchanges[reader[stream]]
            exchange.send_batch(stream, batch)
            gen = marks.get(stream)
            if gen is not None and batch.num_rows:
                gen.observe(time_values(batch, str(sources[stream].time_column), stream))
                if gen.current() > reported[stream]:
                    reported[stream] = gen.current()
                    exchange.broadcast("watermark", stream, gen.current())
            if checkpoint_batches is not None and since >= checkpoint_batches:
                since = 0
                for per in barrier:
                    per[:] = [None] * workers
                saved.number += 1
                everywhere("barrier", saved.number)
                assert all(b is not None for per in barrier for b in per)
                if store is not None:  # the checkpoints before this one are no longer needed
                    for older in Path(store).glob("checkpoint-*"):
                        if older.name != f"checkpoint-{saved.number:06d}":
                            shutil.rmtree(older, ignore_errors=True)
                saved.subtasks = [list(per) for per in barrier]
                if plan.final is not None:
                    collected.extend(final.take(plan.final.name))
                    saved.final = final.snapshot()
                saved.position = position
                saved.max_times = {n: int(g.max_time) for n, g in marks.items()}
                saved.reported = dict(reported)
                saved.collected = list(collected)
        everywhere("end")
        final.end()
        schema = last.schema
        if plan.final is not None:
            collected.extend(final.take(plan.final.name))
            schema = final.queries[plan.final.name].schema
        result = pa.Table.from_batches(collected, schema=schema)
        final.close()
        return ClusterRun(result, sum(map(sum, late)), exchanges[0].rows_sent,
                          sum(c.calls for per in channels for c in per),
                          sum(c.wait_seconds for per in channels for c in per), 0.0, plan)
    finally:
        for per_stage in actors:
            for a in per_stage:
                ray.kill(a)
