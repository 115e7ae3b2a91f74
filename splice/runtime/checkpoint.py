"""The checkpoint coordinator: runs a job on an :class:`~splice.runtime.Engine` from replayable
sources, checkpoints it periodically, and resumes it after a crash with exactly-once output.

Without a checkpoint directory the coordinator runs the same job the same way, its results (and
late rows) kept in memory: a job has one execution path whether checkpointing is on or off.

A **job** (:class:`Job`) is the source streams, the queries, and a replayable source: a function
``source(position)`` returning the ``(stream, batch)`` sequence from batch ``position`` on (the
same sequence every time: files, in-memory tables, generators with seeds). The coordinator pushes
that sequence through the engine; every ``interval_seconds`` (or ``interval_batches``) it takes
checkpoint ``e``:

1. ``engine.snapshot()`` sends a barrier along the data path; each operator's state is taken as
   the barrier passes, so the snapshot holds exactly the effect of batches ``< position``;
2. each query's results since checkpoint ``e - 1``, and its late rows per input, are staged in
   their :class:`~splice.runtime.sinks.TransactionalSink` (pre-commit);
3. state + ``{position, epoch, source watermarks}`` are saved in the checkpoint store (atomic);
4. the staged results of epoch ``e`` are committed.

:meth:`CheckpointCoordinator.run` first looks for the newest intact checkpoint in the directory:
with one it builds a fresh engine, redeploys every query with its saved state (operators rebuild
their derived structures, indexes, in ``spec.build(inputs, state)``), restores the source
watermark generators, recovers the sinks to that epoch and replays the source from the recorded
position. At END the last epoch is staged and committed under a final checkpoint marked
``finished``; running a finished job again only republishes its committed output.

Memory: with ``state_budget`` bytes, the sum of the operators' ``state_bytes()`` is checked after
every batch; crossing it raises :class:`~splice.core.errors.StateError` naming the query and its
largest operator, before the process runs out of memory. An operator whose state lives in a
keyed state backend on disk (``GroupBy(state_backend="rocksdb")``) reports only what it holds in
memory, so it runs under a budget that the in-memory form would exceed.

Fault injection for tests: ``SPLICE_FAULT=<point>:<n>`` kills the process with SIGKILL at the
``n``-th time it reaches ``point``: ``batch`` (after a push), ``staged`` (after the pre-commit),
``saved`` (after the checkpoint is stored, before the commit), ``committed``, ``publish``.

>>> import tempfile, pyarrow as pa, pyarrow.compute as pc
>>> from splice.io.sources import table_source
>>> from splice.ops import Select
>>> from splice.runtime import Query
>>> t = pa.table({"x": list(range(10))})
>>> job = Job(streams=[SourceStream("s", t.schema)], queries=[Query.chain("big", "s", Select(pc.field("x") > 6))],
...           source=lambda pos: table_source("s", t, batch_size=3, skip=pos))
>>> out = CheckpointCoordinator(job, tempfile.mkdtemp(), interval_batches=2).run()
>>> out["big"].to_pydict()
{'x': [7, 8, 9]}
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from splice.core.dead_letters import DEAD_LETTER_SCHEMA, BadInputPolicy
from splice.core.errors import PlanError, StateError
from splice.core.plan import Query
from splice.core.time import WatermarkStrategy
from splice.runtime.checkpoint_store import BackendKind, CheckpointStore, open_store
from splice.runtime.engine import Engine
from splice.runtime.fingerprint import refuse_another_job
from splice.runtime.remote import Cluster
from splice.runtime.sinks import MemorySink, OutputSink, TransactionalSink

__all__ = [
    "discard_job",
    "SourceStream",
    "Job",
    "CheckpointCoordinator",
    "CheckpointStats",
    "ReplayableSource",
    "LiveSources",
    "SourceEvent",
    "arrival_source",
]

@dataclass(frozen=True)
class SourceEvent:
    """What a live source reports besides batches: its stream's new watermark, and records it
    set aside as bad (``(reason, record text)`` pairs, to the dead letters). An event with
    neither is a tick: the source had nothing, and the coordinator may checkpoint or stop."""

    watermark: int | None = None
    dead_letters: tuple[tuple[str, str], ...] = ()


#: ``source(position)``: the job's ``(stream, batch)`` sequence from batch ``position`` on (a
#: live source also yields ``(stream, SourceEvent)``).
ReplayableSource = Callable[[int], Iterator[tuple[str, "pa.RecordBatch | SourceEvent"]]]


class LiveSources(Protocol):
    """Sources whose position is not a batch count (a Kafka topic's offsets): the coordinator
    saves :meth:`state` in each checkpoint and hands it back to :meth:`restore` on resume,
    before it reads :attr:`Job.source`; :meth:`drain` returns what the sources fetched but have
    not yet handed over, so that a checkpoint's position covers exactly the records pushed."""

    def restore(self, state: dict[str, Any] | None) -> None: ...

    def state(self) -> dict[str, Any]: ...

    def drain(self) -> Iterator[tuple[str, pa.RecordBatch | SourceEvent]]: ...

    def close(self) -> None: ...


#: ``factory(checkpoint directory, query name, schema)``: the sink of a query's results
SinkFactory = Callable[[Path, str, pa.Schema], OutputSink]


@dataclass(frozen=True)
class SourceStream:
    """A source stream of a job: as :meth:`splice.runtime.Engine.define_stream` takes it
    (``max_out_of_orderness=D`` is short for ``watermark=WatermarkStrategy(D)``)."""

    name: str
    schema: pa.Schema
    time_column: str | None = None
    max_out_of_orderness: int | None = None
    watermark: WatermarkStrategy | None = None
    bad_input: BadInputPolicy = "fail"


@dataclass
class Job:
    """What the coordinator runs: source streams, queries, and the replayable source.

    ``fingerprint`` (:mod:`splice.runtime.fingerprint`) identifies the job: its plan, the options
    that shape its stream and its inputs. A checkpoint is resumed only by a job with the same
    fingerprint (without one, the query names must match)."""

    streams: Sequence[SourceStream]
    queries: Sequence[Query]
    source: ReplayableSource
    fingerprint: dict[str, Any] | None = None
    #: the sources' own positions, when they are not batch counts
    live: LiveSources | None = None
    #: per query, where its results go instead of the checkpoint directory's part files
    sinks: dict[str, SinkFactory] = field(default_factory=dict)
    #: where the queries run (``Engine(cluster=...)``); None: in this process
    cluster: Cluster | None = None


@dataclass
class CheckpointStats:
    """What a run did: checkpoints taken, their sizes and times, where it resumed from."""

    resumed_from: int | None = None
    resumed_position: int = 0
    restore_seconds: float = 0.0
    checkpoints: int = 0
    checkpoint_seconds: list[float] = field(default_factory=list)
    checkpoint_bytes: list[int] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    batches: int = 0
    finished_before: bool = False
    stopped: bool = False
    failures: int = 0
    last_failure: str | None = None


def _fault_point() -> tuple[str, int] | None:
    spec = os.environ.get("SPLICE_FAULT")
    if not spec:
        return None
    point, _, count = spec.partition(":")
    return point, int(count or 1)


class CheckpointCoordinator:
    """Runs ``job`` with checkpoints in ``checkpoint_dir`` (see the module docstring).

    Exactly one of ``interval_seconds`` / ``interval_batches`` sets the checkpoint cadence
    (neither: only the final checkpoint). ``backend`` is ``"local"`` (Arrow IPC files) or
    ``"rocksdb"``; ``keep`` checkpoints are kept. ``checkpoint_dir=None`` runs the job without
    checkpoints, its outputs in memory. ``restart`` discards what the directory holds of an
    earlier job (checkpoints, staged and published parts, keyed state) before it runs.
    """

    def __init__(
        self,
        job: Job,
        checkpoint_dir: str | Path | None,
        interval_seconds: float | None = None,
        interval_batches: int | None = None,
        backend: BackendKind = "local",
        keep: int = 3,
        state_budget: int | None = None,
        restart: bool = False,
    ) -> None:
        if interval_seconds is not None and interval_seconds <= 0:
            raise PlanError(f"checkpoint interval must be > 0 seconds, got {interval_seconds}")
        if interval_batches is not None and interval_batches < 1:
            raise PlanError(f"checkpoint interval must be >= 1 batch, got {interval_batches}")
        if state_budget is not None and state_budget < 1:
            raise PlanError(f"state budget must be >= 1 byte, got {state_budget}")
        self.job = job
        self.directory = Path(checkpoint_dir) if checkpoint_dir is not None else None
        if restart and self.directory is not None:
            discard_job(self.directory)
        self.interval_seconds = interval_seconds if self.directory is not None else None
        self.interval_batches = interval_batches if self.directory is not None else None
        self.state_budget = state_budget
        self.store: CheckpointStore | None = (
            open_store(self.directory, backend, keep) if self.directory is not None else None)
        self.stats = CheckpointStats()
        self.engine: Engine | None = None
        self.sinks: dict[str, OutputSink] = {}
        #: per query, per input: the sink of its late rows
        self.late_sinks: dict[str, dict[str, OutputSink]] = {}
        #: rows the engine refused at the edge (the sources' dead-letter policy)
        self.dead_letter_sink: OutputSink | None = None
        #: per query, what it produced since the last checkpoint: results, late rows per input
        self._epoch_output: dict[str, list[pa.RecordBatch]] = {}
        self._epoch_late: dict[str, dict[str, list[pa.RecordBatch]]] = {}
        #: (epoch, position, final) of parts published by an earlier run after the checkpoint
        #: it resumed from: the replay checkpoints exactly there
        self.replay: list[tuple[int, int, bool]] = []
        self.epoch = 0
        self.position = 0
        self._fault = _fault_point()
        self._fault_seen = 0

    # -- fault injection ----------------------------------------------------------------------
    def _reach(self, point: str) -> None:
        if self._fault is not None and self._fault[0] == point:
            self._fault_seen += 1
            if self._fault_seen == self._fault[1]:
                os.kill(os.getpid(), signal.SIGKILL)

    # -- setup --------------------------------------------------------------------------------
    def _sink(self, name: str, schema: pa.Schema) -> OutputSink:
        factory = self.job.sinks.get(name)
        if factory is not None:
            if self.directory is None:
                raise PlanError(f"query {name!r} writes to an external sink, which commits "
                                "with checkpoints: give a checkpoint directory")
            return factory(self.directory, name, schema)
        if self.directory is None:
            return MemorySink(schema)
        return TransactionalSink(self.directory, name, schema)

    def _build(self, state: dict[str, Any] | None, sources: dict[str, dict[str, int]] | None) -> Engine:
        eng = Engine(cluster=self.job.cluster)
        for s in self.job.streams:
            eng.define_stream(s.name, s.schema, s.time_column, s.max_out_of_orderness,
                              watermark=s.watermark, bad_input=s.bad_input)
        for q in self.job.queries:
            self._epoch_output[q.name] = []
            self._epoch_late[q.name] = {}
            saved = None if state is None else state.get(q.name)
            if state is not None and saved is None:
                raise StateError(f"checkpoint in {str(self.directory)!r} holds no state of query {q.name!r}")
            try:
                result = eng.deploy(q, saved, on_output=self._epoch_output[q.name].append,
                                    on_late=self._late_of(q.name))
            except StateError:
                raise
            except Exception as exc:
                if saved is None:
                    raise
                raise StateError(f"query {q.name!r}: cannot restore its state from the checkpoint: {exc}") from exc
            self.sinks[q.name] = self._sink(q.name, result.schema)
            self.late_sinks[q.name] = {
                label: self._sink(f"{q.name}.late.{label.replace('/', '~')}", schema)
                for label, schema in eng.late_inputs(q.name).items()}
        self.dead_letter_sink = self._sink("dead-letters", DEAD_LETTER_SCHEMA)
        if sources:
            eng.restore_source_state(sources)
        return eng

    def _late_of(self, query: str) -> Callable[[str, pa.RecordBatch], None]:
        def late(label: str, batch: pa.RecordBatch) -> None:
            self._epoch_late[query].setdefault(label, []).append(batch)

        return late

    def _check_budget(self, eng: Engine) -> None:
        assert self.state_budget is not None
        per_query = eng.state_bytes()
        total = sum(sum(v.values()) for v in per_query.values())
        if total > self.state_budget:
            query, ops = max(per_query.items(), key=lambda kv: sum(kv[1].values()))
            op, nbytes = max(ops.items(), key=lambda kv: kv[1]) if ops else ("?", 0)
            raise StateError(
                f"state budget exceeded: {total:,} bytes of operator state > budget {self.state_budget:,} "
                f"(query {query!r} holds {sum(ops.values()):,}, its operator {op!r} {nbytes:,}); "
                "raise the budget, shorten windows, or keep group-by state on disk (GroupBy state_backend='rocksdb', "
                "splice tpch --state-backend rocksdb)"
            )

    def _check_failures(self, eng: Engine) -> None:
        for name, q in eng.queries.items():
            if q.error is not None:
                raise StateError(f"query {name!r} failed: {q.error}") from q.error

    # -- checkpoints --------------------------------------------------------------------------
    def _all_sinks(self) -> list[OutputSink]:
        sinks = list(self.sinks.values())
        for per_input in self.late_sinks.values():
            sinks.extend(per_input.values())
        if self.dead_letter_sink is not None:
            sinks.append(self.dead_letter_sink)
        return sinks

    def _stage_outputs(self, eng: Engine, epoch: int, final: bool) -> None:
        at = (self.position, final)
        for name, sink in self.sinks.items():
            sink.stage(epoch, self._epoch_output[name], *at)
            self._epoch_output[name].clear()
            late = self._epoch_late[name]
            for label, late_sink in self.late_sinks[name].items():
                late_sink.stage(epoch, late.pop(label, []), *at)
        if self.dead_letter_sink is not None:
            self.dead_letter_sink.stage(epoch, eng.dead_letters.batches, *at)
            eng.dead_letters.batches.clear()
        self._reach("staged")

    def _commit(self, epoch: int) -> None:
        for sink in self._all_sinks():
            sink.commit(epoch)

    def checkpoint(self, finished: bool = False) -> None:
        """Take checkpoint ``epoch + 1`` now: snapshot, stage outputs, store, commit (without a
        checkpoint directory: only hand the outputs to the in-memory sinks). A checkpoint that
        fails is counted (``stats.failures``, ``stats.last_failure``) and stops the job."""
        try:
            self._checkpoint(finished)
        except Exception as exc:
            self.stats.failures += 1
            self.stats.last_failure = f"{type(exc).__name__}: {exc}"
            raise

    def _checkpoint(self, finished: bool) -> None:
        eng = self.engine
        assert eng is not None
        t0 = time.perf_counter()
        if self.job.live is not None and not finished:
            for stream, item in self.job.live.drain():
                self._apply(eng, stream, item)
        state = eng.snapshot() if not finished and self.store is not None else {}
        self._check_failures(eng)
        epoch = self.epoch + 1
        self._stage_outputs(eng, epoch, finished)
        meta = {"position": self.position, "epoch": epoch, "sources": eng.source_state(),
                "live": self.job.live.state() if self.job.live is not None else None,
                "finished": finished, "queries": [q.name for q in self.job.queries],
                "fingerprint": self.job.fingerprint}
        nbytes = self.store.save(epoch, state, meta) if self.store is not None else 0
        self._reach("saved")
        self._commit(epoch)
        self.epoch = epoch
        self.stats.checkpoints += 1
        self.stats.checkpoint_seconds.append(time.perf_counter() - t0)
        self.stats.checkpoint_bytes.append(nbytes)
        self._reach("committed")

    # -- the run ------------------------------------------------------------------------------
    def run(self, collect: bool = True, stop: threading.Event | None = None) -> dict[str, pa.Table]:
        """Run (or resume, or republish) the job; return each query's committed output (with
        ``collect=False`` nothing: read it with :meth:`publish` or :meth:`outputs`).

        The job runs until its sources end, or until ``stop`` is set: then it takes a last
        checkpoint (not marked finished: the next run resumes there) and returns."""
        t0 = time.perf_counter()
        latest = self.store.load_latest() if self.store is not None else None
        self.stats.skipped = list(self.store.skipped) if self.store is not None else []
        state: dict[str, Any] | None = None
        sources: dict[str, dict[str, int]] | None = None
        if latest is not None:
            self._check_same_job(latest.meta)
            self.stats.resumed_from = latest.checkpoint_id
            self.epoch = latest.checkpoint_id
            self.position = int(latest.meta["position"])
            self.stats.resumed_position = self.position
            sources = latest.meta.get("sources")
            if latest.meta.get("finished"):
                self.stats.finished_before = True
                state = None
            else:
                state = latest.state
        eng = self._build(state, sources)
        self.engine = eng
        for sink in self._all_sinks():
            sink.recover(self.epoch)
        if self.job.live is not None and not self.stats.finished_before:
            self.job.live.restore(latest.meta.get("live") if latest is not None else None)
        self.replay = self._published_after(self.epoch)
        self.stats.restore_seconds = time.perf_counter() - t0
        if not self.stats.finished_before:
            try:
                if self._stream(eng, stop):
                    self.stats.stopped = True
                    self.checkpoint()
                else:
                    eng.end()
                    self._check_failures(eng)
                    self.checkpoint(finished=True)
            finally:
                eng.close()
                self._close()
        else:
            eng.close()
            self._close()
        return self.outputs() if collect else {}

    def _close(self) -> None:
        if self.job.live is not None:
            self.job.live.close()
        for sink in self._all_sinks():
            close = getattr(sink, "close", None)
            if close is not None:
                close()

    def _check_same_job(self, meta: dict[str, Any]) -> None:
        """Refuse a checkpoint that another job wrote (see :class:`Job`)."""
        where = f"checkpoint directory {str(self.directory)!r}"
        saved = meta.get("fingerprint")
        if self.job.fingerprint is not None and saved is not None:
            refuse_another_job(str(self.directory), saved, self.job.fingerprint)
            return
        saved_queries = meta.get("queries")
        wanted = [q.name for q in self.job.queries]
        if saved_queries is not None and saved_queries != wanted:
            raise StateError(f"{where} belongs to queries {saved_queries}, not {wanted}: use "
                             "another --checkpoint-dir, or --restart to discard it")

    def _published_after(self, epoch: int) -> list[tuple[int, int, bool]]:
        """The epochs an earlier run published after ``epoch`` (every sink publishes the same
        epochs at the same positions), in order."""
        seen: dict[int, tuple[int, bool]] = {}
        for sink in self._all_sinks():
            for e, pos, final in sink.published(epoch):
                if seen.setdefault(e, (pos, final)) != (pos, final):
                    raise StateError(f"checkpoint directory {str(self.directory)!r}: the parts "
                                     f"published for epoch {e} disagree on where it ended")
        epochs = sorted(seen)
        if epochs and epochs != list(range(epoch + 1, epoch + 1 + len(epochs))):
            raise StateError(f"checkpoint directory {str(self.directory)!r}: published epochs "
                             f"{epochs} do not follow checkpoint {epoch}")
        return [(e, *seen[e]) for e in epochs]

    def dead_letters(self) -> pa.Table:
        """The committed rows the engine refused at the edge, with their stream and reason."""
        assert self.dead_letter_sink is not None
        return self.dead_letter_sink.committed()

    def outputs(self) -> dict[str, pa.Table]:
        """Each query's committed output."""
        return {name: sink.committed() for name, sink in self.sinks.items()}

    def late_outputs(self, query: str) -> dict[str, pa.Table]:
        """Query ``query``'s committed late rows, per input."""
        return {label: sink.committed() for label, sink in self.late_sinks[query].items()}

    def _apply(self, eng: Engine, stream: str, item: pa.RecordBatch | SourceEvent) -> None:
        """Push a batch, or apply a live source's watermark and set-aside records."""
        if isinstance(item, SourceEvent):
            if item.watermark is not None:
                eng.watermark(stream, item.watermark)
            by_reason: dict[str, list[str]] = {}
            for reason, record in item.dead_letters:
                by_reason.setdefault(reason, []).append(record)
            for reason, records in by_reason.items():
                eng.dead_letters.add(stream, reason, records)
            return
        eng.push(stream, item)
        self.position += 1
        self.stats.batches += 1

    def _stream(self, eng: Engine, stop: threading.Event | None = None) -> bool:
        """Push the source through ``eng``, checkpointing as due; True when ``stop`` ended it."""
        last = time.monotonic()
        since = 0
        # epochs an earlier run published end where they ended then (the last at END), and no
        # other checkpoint comes between them
        pending = list(self.replay)
        for stream, batch in self.job.source(self.position):
            if stop is not None and stop.is_set():
                return True
            self._apply(eng, stream, batch)
            if not isinstance(batch, SourceEvent):
                since += 1
                self._reach("batch")
            if self.state_budget is not None:
                self._check_budget(eng)
            if pending:
                _, at, final = pending[0]
                due = not final and self.position == at
                if due:
                    pending.pop(0)
            else:
                due = (self.interval_batches is not None and since >= self.interval_batches) or (
                    self.interval_seconds is not None
                    and time.monotonic() - last >= self.interval_seconds)
            if due:
                self.checkpoint()
                last = time.monotonic()
                since = 0
        if pending and not pending[0][2]:
            raise StateError(f"checkpoint directory {str(self.directory)!r}: epochs were "
                             f"published up to position {pending[-1][1]}, but the source ended at "
                             f"{self.position}: the input changed since")
        return False

    def publish(self, query: str, out: str | Path) -> pa.Table:
        """Write query ``query``'s committed output to ``out`` atomically."""
        table = self.sinks[query].publish(out)
        self._reach("publish")
        return table


def discard_job(directory: Path) -> None:
    """Remove what a job keeps in ``directory``: checkpoints, sinks (staged and published
    parts) and keyed state; other files there are left alone."""
    for name in ("checkpoints", "checkpoints.rocksdb", "sink", "keyed-state"):
        path = directory / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def arrival_source(
    tables: Sequence[tuple[str, pa.Table]],
    sides: np.ndarray,
    rows: np.ndarray,
    batch_size: int,
) -> ReplayableSource:
    """A replayable source over ``tables`` in the arrival order ``(sides[i], rows[i])``.

    Consecutive rows of one table travel as one batch of at most ``batch_size`` rows; position
    ``p`` is the ``p``-th such batch, so ``source(p)`` replays from there.
    """
    if batch_size < 1:
        raise PlanError(f"batch size must be >= 1, got {batch_size}")
    sides = np.asarray(sides)
    rows = np.asarray(rows, dtype=np.int64)
    cuts: list[tuple[int, int]] = []
    if len(sides):
        change = np.flatnonzero(np.diff(sides)) + 1
        starts = np.concatenate([[0], change])
        ends = np.concatenate([change, [len(sides)]])
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            cuts.extend((c, min(c + batch_size, e)) for c in range(s, e, batch_size))

    def source(position: int) -> Iterator[tuple[str, pa.RecordBatch]]:
        for s, e in cuts[position:]:
            name, table = tables[int(sides[s])]
            idx = rows[s:e]
            if idx[-1] - idx[0] == e - s - 1 and bool(np.all(np.diff(idx) == 1)):
                sub = table.slice(int(idx[0]), e - s)
            else:
                sub = table.take(pa.array(idx))
            yield name, sub.combine_chunks().to_batches()[0]

    return source
