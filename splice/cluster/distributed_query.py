"""One query across Ray workers, driven by the engine that deployed it.

The plan is cut into keyed stages (:mod:`splice.cluster.stages`); each keyed stage runs as P
:class:`~splice.cluster.ray_runner.Subtask` actors, and what follows the last one (a global
aggregate, an ORDER BY ... LIMIT) runs once, in an engine here. :meth:`DistributedQuery.push`
splits each batch by key group (:class:`~splice.cluster.exchange.Exchange`) and sends the parts
down the channels of the stage that reads the stream; a stage's output comes back with the
replies and goes through the next stage's exchange, or into the final stage.

Watermarks. The engine's watermark of a source goes to every subtask of the stage that reads it.
Each reply carries the subtask's output watermark; the watermark of a stage's output is the
least over its subtasks, and it goes to every subtask of the next stage (or into the final
stage) as it rises, behind the rows that came before it: the minimum over input channels that
Flink's operators take (*Lightweight Asynchronous Snapshots for Distributed Dataflows*, Carbone
et al., section 2 for the channels; the watermark rule is the Dataflow Model's).

Checkpoints. :meth:`DistributedQuery.checkpoint` sends a barrier down every channel of the first
stage, then, once that stage's replies are forwarded, down the next; each subtask snapshots its
state as the barrier reaches it (a subtask has one input channel, so there is nothing to align)
and writes it to ``store`` (a directory every worker reaches), or returns it with the reply. The
final stage snapshots here. Then the rows produced before the barrier are delivered: rows are
delivered only at checkpoints, at the end and when the query stops. Every ``checkpoint_batches``
pushes the query takes a checkpoint of its own, so the input to replay stays short.

Failure. The input since the last checkpoint is kept (the batches and watermarks pushed). When a
worker dies (Ray reports the actor dead), every subtask starts again from the last checkpoint,
the final stage too, and that input is replayed; what the dead run produced since the checkpoint
was never delivered, so nothing is delivered twice. Up to ``restarts`` times.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from splice.cluster.exchange import Exchange
from splice.cluster.ray_runner import RayChannel, SubtaskReply
from splice.cluster.stages import StagePlan, cut, pre_aggregate
from splice.core.errors import PlanError, StateError
from splice.core.plan import Query
from splice.runtime.engine import Engine
from splice.runtime.remote import RemoteStream

__all__ = ["DistributedQuery", "stage_streams"]


def stage_streams(plan: StagePlan, streams: Sequence[RemoteStream]) -> list[list[RemoteStream]]:
    """The streams each keyed stage defines (the sources it reads, and the stage before it by
    its output's name and schema, probed on an engine here); last, the final stage's input."""
    by_name = {s.name: s for s in streams}
    out: list[list[RemoteStream]] = []
    previous: RemoteStream | None = None
    for stage in plan.stages:
        defs = [by_name[n] for n in stage.keys if n in by_name]
        if previous is not None:
            defs.append(previous)
        probe = Engine()
        for d in defs:
            probe.define_stream(d.name, d.schema, d.time_column)
        previous = RemoteStream(stage.output, probe.deploy(stage.query).schema)
        probe.close()
        out.append(defs)
    assert previous is not None
    out.append([previous])
    return out


@dataclass
class _Saved:
    """A checkpoint of the query: its number, each stage's subtask states (or their paths), the
    final stage's state, and each subtask's output watermark."""

    number: int
    subtasks: list[list[dict[str, Any] | None]]
    marks: list[list[int | None]]
    final: dict[str, Any] | None = None

    @classmethod
    def empty(cls, stages: int, workers: int) -> _Saved:
        return cls(0, [[None] * workers for _ in range(stages)], [[None] * workers for _ in range(stages)])

    @classmethod
    def restore(cls, state: dict[str, Any], stages: int, workers: int, name: str) -> _Saved:
        try:
            saved = cls(int(state["number"]), [list(s) for s in state["subtasks"]],
                        [list(m) for m in state["marks"]], state["final"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"query {name!r}: the checkpoint holds no distributed state ({exc})") from exc
        shape = [len(s) for s in saved.subtasks]
        if shape != [workers] * stages:
            raise StateError(f"query {name!r}: the checkpoint holds {shape} subtasks per stage, "
                             f"this run has {workers} workers for {stages} stage(s): resume on "
                             "as many workers as it was taken on")
        return saved

    def state(self) -> dict[str, Any]:
        return {"number": self.number, "subtasks": self.subtasks, "marks": self.marks,
                "final": self.final}


@dataclass
class _Run:
    """One start of the subtasks: actors, channels, exchanges, the final stage, watermarks."""

    actors: list[list[Any]]
    channels: list[list[RayChannel]]
    exchanges: list[Exchange]
    final: Engine
    marks: list[list[int | None]]
    forwarded: list[int | None]
    barrier: list[list[dict[str, Any] | None]] = field(default_factory=list)


class DistributedQuery:
    """``query`` on ``workers`` subtasks per keyed stage (module docstring); result rows go to
    ``output``, late rows to ``late(input, batch)``; subtasks write their states under ``store``
(removed at the end when ``remove_store``), or return them in their replies without one."""

    def __init__(self, query: Query, streams: Sequence[RemoteStream], state: dict[str, Any] | None,
                 output: Callable[[pa.RecordBatch], None],
                 late: Callable[[str, pa.RecordBatch], None], *, workers: int, actor_class: Any,
                 max_in_flight: int = 4, checkpoint_batches: int | None = 64, restarts: int = 3,
                 store: str | Path | None = None, remove_store: bool = False,
                 die_at: tuple[int, int] | None = None) -> None:
        self.name = query.name
        plan = cut(query, {s.name: s.schema for s in streams})
        self.defs = stage_streams(plan, streams)
        self.plan = pre_aggregate(plan, self.defs[-1][0].schema)
        if self.plan is not plan:
            self.defs = stage_streams(self.plan, streams)
        self.reader: dict[str, int] = {}
        for k, stage in enumerate(self.plan.stages):
            for name in stage.keys:
                if self.reader.setdefault(name, k) != k:
                    raise PlanError(f"scale-out: query {query.name!r} reads stream {name!r} in "
                                    "two keyed stages")
        self.workers = workers
        self.actor_class = actor_class
        self.max_in_flight = max_in_flight
        self.checkpoint_batches = checkpoint_batches
        self.restarts = restarts
        self.output = output
        self.late = late
        stages = len(self.plan.stages)
        self.saved = (_Saved.empty(stages, workers) if state is None
                      else _Saved.restore(state, stages, workers, query.name))
        #: where subtasks write their states (None: they travel in the replies)
        self.store: str | None = str(store) if store is not None else None
        self.remove_store = remove_store
        #: the input since the last checkpoint: ("batch" | "watermark", stream, payload)
        self.log: list[tuple[str, str, Any]] = []
        #: rows produced since the last checkpoint: (None, result) or (input, late rows)
        self.held: list[tuple[str | None, pa.RecordBatch]] = []
        self.attempts = 0
        self.since = 0
        self.calls = 0
        self.wait_seconds = 0.0
        self.rows_sent = [[0] * workers for _ in range(stages)]
        self.run: _Run | None = None
        self.run = self._start(die_at)

    # -- a start of the subtasks ----------------------------------------------------------------
    def _start(self, die_at: tuple[int, int] | None) -> _Run:
        import ray

        plan, saved = self.plan, self.saved
        actors = [[self.actor_class.remote(
            i, self.defs[k], plan.stages[k].query, saved.subtasks[k][i],
            die_at[1] if die_at is not None and k == 0 and die_at[0] == i else None, k, self.store)
            for i in range(self.workers)] for k in range(len(plan.stages))]
        run = _Run(actors, [], [], Engine(), [list(m) for m in saved.marks],
                   [None] * len(plan.stages))
        self.run = run
        for k, marks in enumerate(run.marks):
            run.forwarded[k] = None if any(m is None for m in marks) else min(marks)  # type: ignore[type-var]
        last = self.defs[-1][0]
        if plan.final is not None:
            run.final.define_stream(last.name, last.schema)
            state = None if saved.final is None else saved.final[plan.final.name]
            run.final.deploy(plan.final, state, on_output=lambda b: self.held.append((None, b)),
                             on_late=lambda label, b: self.held.append((label, b)))
        run.channels = [[RayChannel(a, self._on_reply(k), i, self.max_in_flight)
                         for i, a in enumerate(per)] for k, per in enumerate(actors)]
        for k, stage in enumerate(plan.stages):
            schemas = {d.name: d.schema for d in self.defs[k]}
            first = next(iter(stage.keys))
            types = [schemas[first].field(c).type for c in stage.keys[first]]
            run.exchanges.append(Exchange(run.channels[k], stage.keys, types))
        ray.get([a.ping.remote() for per in actors for a in per])
        return run

    def _on_reply(self, k: int) -> Callable[[int, SubtaskReply], None]:
        def on_reply(index: int, reply: SubtaskReply) -> None:
            run = self.run
            assert run is not None
            batches, late, watermark, snapshot = reply
            if snapshot is not None:
                run.barrier[k][index] = snapshot
            for b in batches:
                self._forward(run, k, b)
            self.held.extend(late)
            if watermark is not None:
                marks = run.marks[k]
                if marks[index] is None or watermark > marks[index]:  # type: ignore[operator]
                    marks[index] = watermark
                    if all(m is not None for m in marks):
                        low = min(marks)  # type: ignore[type-var]
                        if run.forwarded[k] is None or low > run.forwarded[k]:  # type: ignore[operator]
                            run.forwarded[k] = low
                            self._forward_watermark(run, k, low)  # type: ignore[arg-type]
        return on_reply

    def _forward(self, run: _Run, k: int, batch: pa.RecordBatch) -> None:
        if k + 1 < len(self.plan.stages):
            run.exchanges[k + 1].send_batch(self.plan.stages[k].output, batch)
        elif self.plan.final is not None:
            run.final.push(self.defs[-1][0].name, batch)
        else:
            self.held.append((None, batch))

    def _forward_watermark(self, run: _Run, k: int, time: int) -> None:
        if k + 1 < len(self.plan.stages):
            run.exchanges[k + 1].broadcast("watermark", self.plan.stages[k].output, time)
        elif self.plan.final is not None:
            run.final.watermark(self.defs[-1][0].name, time)

    def _kill(self) -> None:
        import ray

        run = self.run
        if run is None:
            return
        self.calls, self.wait_seconds, self.rows_sent = self._figures(run)
        for stage_actors in run.actors:
            for actor in stage_actors:
                ray.kill(actor)
        run.final.close()
        self.run = None

    # -- failure --------------------------------------------------------------------------------
    def _safely(self, step: Callable[[_Run], Any], retry: bool) -> Any:
        """Run ``step``; when a worker dies, restart from the last checkpoint and replay the
        input since (which holds what ``step`` did, unless ``retry``: then run it again)."""
        import ray

        while True:
            assert self.run is not None
            try:
                return step(self.run)
            except ray.exceptions.RayActorError as exc:
                self._restart(exc)
                if not retry:
                    return None

    def _restart(self, exc: BaseException) -> None:
        import ray

        while True:
            self.attempts += 1
            if self.attempts > self.restarts:
                raise StateError(f"scale-out: query {self.name!r}: a worker died {self.attempts} "
                                 f"times; the last: {exc}") from exc
            self._kill()
            self.held = []
            try:
                run = self._start(None)
                for kind, stream, payload in self.log:
                    self._apply(run, kind, stream, payload)
                return
            except ray.exceptions.RayActorError as again:
                exc = again

    def _apply(self, run: _Run, kind: str, stream: str, payload: Any) -> None:
        exchange = run.exchanges[self.reader[stream]]
        if kind == "batch":
            exchange.send_batch(stream, payload)
        else:
            exchange.broadcast("watermark", stream, payload)

    # -- the engine's calls ---------------------------------------------------------------------
    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        if stream not in self.reader:
            return
        self.log.append(("batch", stream, batch))
        self._safely(lambda run: self._apply(run, "batch", stream, batch), retry=False)
        self.since += 1
        if self.checkpoint_batches is not None and self.since >= self.checkpoint_batches:
            self._checkpoint(inline=self.store is None)

    def watermark(self, stream: str, time: int) -> None:
        if stream not in self.reader:
            return
        self.log.append(("watermark", stream, int(time)))
        self._safely(lambda run: self._apply(run, "watermark", stream, int(time)), retry=False)

    def checkpoint(self) -> dict[str, Any]:
        """A checkpoint whose subtask states travel in it (the engine's snapshot holds them)."""
        return self._checkpoint(inline=True)

    def _checkpoint(self, inline: bool) -> dict[str, Any]:
        number = self.saved.number + 1

        def barrier(run: _Run) -> None:
            run.barrier = [[None] * self.workers for _ in self.plan.stages]
            for exchange in run.exchanges:  # a stage's replies reach the next before it is told
                exchange.broadcast("barrier", "", (number, inline))
                exchange.flush()
            missing = [(k, i) for k, per in enumerate(run.barrier) for i, s in enumerate(per)
                       if s is None]
            if missing:
                raise StateError(f"scale-out: query {self.name!r}: subtasks {missing} did not "
                                 f"snapshot at barrier {number}")

        self._safely(barrier, retry=True)
        run = self.run
        assert run is not None
        final = run.final.snapshot() if self.plan.final is not None else None
        self.saved = _Saved(number, [list(per) for per in run.barrier],
                            [list(m) for m in run.marks], final)
        if self.store is not None:  # the checkpoints before this one are no longer needed
            keep = None if inline else f"checkpoint-{number:06d}"
            for older in Path(self.store).glob("checkpoint-*"):
                if older.name != keep:
                    shutil.rmtree(older, ignore_errors=True)
        self.log.clear()
        self.since = 0
        self._release()
        return self.saved.state()

    def _release(self) -> None:
        held, self.held = self.held, []
        for label, batch in held:
            if label is None:
                self.output(batch)
            else:
                self.late(label, batch)

    def end(self) -> None:
        def finish(run: _Run) -> None:
            for exchange in run.exchanges:
                exchange.broadcast("end")
                exchange.flush()

        self._safely(finish, retry=True)
        assert self.run is not None
        if self.plan.final is not None:
            self.run.final.end()
        self._release()
        self._close()

    def stop(self) -> None:
        def drain(run: _Run) -> None:
            for exchange in run.exchanges:
                exchange.flush()

        if self.run is not None:
            self._safely(drain, retry=True)
            self._release()
        self._close()

    def _close(self) -> None:
        self._kill()
        if self.remove_store and self.store is not None:
            shutil.rmtree(self.store, ignore_errors=True)

    def _figures(self, run: _Run | None) -> tuple[int, float, list[list[int]]]:
        """Calls, seconds waited and rows sent per subtask: the starts before and ``run``'s."""
        calls, wait = self.calls, self.wait_seconds
        sent = [list(per) for per in self.rows_sent]
        if run is not None:
            calls += sum(c.calls for per in run.channels for c in per)
            wait += sum(c.wait_seconds for per in run.channels for c in per)
            for k, exchange in enumerate(run.exchanges):
                for i, rows in enumerate(exchange.rows_sent):
                    sent[k][i] += rows
        return calls, wait, sent

    def metrics(self) -> dict[str, Any]:
        calls, wait, sent = self._figures(self.run)
        return {"workers": self.workers, "stages": len(self.plan.stages),
                "rows_per_subtask": sent[0], "exchanged_rows": sum(map(sum, sent)),
                "calls": calls, "wait_seconds": round(wait, 6), "restarts": self.attempts,
                "checkpoints": self.saved.number}
