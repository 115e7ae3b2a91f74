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
subtask produces comes back with the call's reply and feeds the final stage.

``run_on_ray`` starts a local Ray (``ray.init(num_cpus=...)``, no dashboard) unless one is
running or ``address`` names a cluster.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from splice.cluster.exchange import Exchange, Message
from splice.cluster.stages import StagePlan, cut
from splice.core.errors import PlanError, StateError
from splice.core.plan import Query
from splice.core.time import MIN_TIME, BoundedOutOfOrderness, time_values
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

    def __init__(self, index: int, streams: list[StreamDef], query: Query) -> None:
        self.index = index
        self.name = query.name
        self.engine = Engine()
        for s in streams:
            self.engine.define_stream(s.name, s.schema, s.time_column)
        self.engine.deploy(query)
        self.next_seq = 0
        self.rows_in = 0

    def receive(self, messages: list[Message]) -> tuple[list[pa.RecordBatch], int]:
        for m in messages:
            if m.seq != self.next_seq:
                raise StateError(f"subtask {self.index}: message {m.seq} arrived, expected "
                                 f"{self.next_seq}: the channel lost its order")
            self.next_seq += 1
            if m.kind == "batch":
                self.engine.push(m.stream, m.payload)
                self.rows_in += m.payload.num_rows
            elif m.kind == "watermark":
                self.engine.watermark(m.stream, int(m.payload))
            elif m.kind == "end":
                self.engine.end()
        late = sum(self.engine.queries[self.name].late_rows.values())
        return list(self.engine.take(self.name)), late

    def ping(self) -> int:
        return self.index


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
        if message.kind == "batch" and len(self.pending) >= self.coalesce:
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


def _start_ray(workers: int, address: str | None) -> None:
    import ray

    if ray.is_initialized():
        return
    if address is not None:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(num_cpus=max(workers, 1), include_dashboard=False, log_to_driver=False,
                 configure_logging=False)


def run_on_ray(query: Query, streams: list[StreamDef],
               source: Iterable[tuple[str, pa.RecordBatch]], workers: int,
               address: str | None = None, max_in_flight: int = 4) -> ClusterRun:
    """Run ``query`` over ``source`` with its keyed stage on ``workers`` subtasks."""
    import ray

    if workers < 1:
        raise PlanError(f"--workers must be >= 1, got {workers}")
    schemas = {s.name: s.schema for s in streams}
    plan = cut(query, schemas)
    probe = Engine()
    for s in streams:
        probe.define_stream(s.name, s.schema, s.time_column)
    keyed_schema = probe.deploy(plan.keyed).schema
    probe.close()
    key_types: list[pa.DataType] = []
    for stream, cols in plan.keys.items():
        types = [schemas[stream].field(c).type for c in cols]
        key_types = key_types or types
    _start_ray(workers, address)
    actor_class: Any = ray.remote(num_cpus=0)(Subtask)
    actors = [actor_class.remote(i, streams, plan.keyed) for i in range(workers)]
    ray.get([a.ping.remote() for a in actors])  # started before the clock

    final = Engine()
    final.define_stream(plan.keyed_output, keyed_schema)
    if plan.final is not None:
        final.deploy(plan.final)
    out_name = query.name if plan.final is not None else None
    collected: list[pa.RecordBatch] = []
    late = [0] * workers

    def on_reply(index: int, reply: tuple[list[pa.RecordBatch], int]) -> None:
        batches, late_rows = reply
        late[index] = late_rows
        for b in batches:
            if out_name is not None:
                final.push(plan.keyed_output, b)
            else:
                collected.append(b)

    channels = [RayChannel(a, on_reply, i, max_in_flight) for i, a in enumerate(actors)]
    exchange = Exchange(channels, plan.keys, key_types)
    marks = {s.name: BoundedOutOfOrderness(int(s.max_out_of_orderness or 0))
             for s in streams if s.time_column is not None}
    times = {s.name: s.time_column for s in streams}
    reported = {name: int(MIN_TIME) for name in marks}
    t0 = time.perf_counter()
    for stream, batch in source:
        if stream not in plan.keys:
            continue  # the query does not read it
        exchange.send_batch(stream, batch)
        gen = marks.get(stream)
        if gen is not None and batch.num_rows:
            gen.observe(time_values(batch, str(times[stream]), stream))
            if gen.current() > reported[stream]:
                reported[stream] = gen.current()
                exchange.broadcast("watermark", stream, gen.current())
    exchange.broadcast("end")
    exchange.flush()
    final.end()
    seconds = time.perf_counter() - t0
    if out_name is not None:
        result = final.results(out_name)
    else:
        result = pa.Table.from_batches(collected, schema=keyed_schema)
    final.close()
    for a in actors:
        ray.kill(a)
    return ClusterRun(result, sum(late), exchange.rows_sent, sum(c.calls for c in channels),
                      sum(c.wait_seconds for c in channels), seconds, plan)
