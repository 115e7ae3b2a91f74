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
   their :class:`~splice.state.sink.TransactionalSink` (pre-commit);
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
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from splice.core.errors import PlanError, StateError
from splice.core.time import WatermarkStrategy
from splice.runtime.engine import Engine
from splice.runtime.plan import Query
from splice.state.sink import MemorySink, OutputSink, TransactionalSink
from splice.state.store import BackendKind, CheckpointStore, open_store

__all__ = [
    "SourceStream",
    "Job",
    "CheckpointCoordinator",
    "CheckpointStats",
    "ReplayableSource",
    "arrival_source",
]

#: ``source(position)``: the job's ``(stream, batch)`` sequence from batch ``position`` on.
ReplayableSource = Callable[[int], Iterator[tuple[str, pa.RecordBatch]]]


@dataclass(frozen=True)
class SourceStream:
    """A source stream of a job: as :meth:`splice.runtime.Engine.define_stream` takes it
    (``max_out_of_orderness=D`` is short for ``watermark=WatermarkStrategy(D)``)."""

    name: str
    schema: pa.Schema
    time_column: str | None = None
    max_out_of_orderness: int | None = None
    watermark: WatermarkStrategy | None = None


@dataclass
class Job:
    """What the coordinator runs: source streams, queries, and the replayable source."""

    streams: Sequence[SourceStream]
    queries: Sequence[Query]
    source: ReplayableSource


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
    checkpoints, its outputs in memory.
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
    ) -> None:
        if interval_seconds is not None and interval_seconds <= 0:
            raise PlanError(f"checkpoint interval must be > 0 seconds, got {interval_seconds}")
        if interval_batches is not None and interval_batches < 1:
            raise PlanError(f"checkpoint interval must be >= 1 batch, got {interval_batches}")
        if state_budget is not None and state_budget < 1:
            raise PlanError(f"state budget must be >= 1 byte, got {state_budget}")
        self.job = job
        self.directory = Path(checkpoint_dir) if checkpoint_dir is not None else None
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
        if self.directory is None:
            return MemorySink(schema)
        return TransactionalSink(self.directory, name, schema)

    def _build(self, state: dict[str, Any] | None, sources: dict[str, dict[str, int]] | None) -> Engine:
        eng = Engine()
        for s in self.job.streams:
            eng.define_stream(s.name, s.schema, s.time_column, s.max_out_of_orderness,
                              watermark=s.watermark)
        for q in self.job.queries:
            saved = None if state is None else state.get(q.name)
            if state is not None and saved is None:
                raise StateError(f"checkpoint in {str(self.directory)!r} holds no state of query {q.name!r}")
            try:
                result = eng.deploy(q, saved)
            except StateError:
                raise
            except Exception as exc:
                if saved is None:
                    raise
                raise StateError(f"query {q.name!r}: cannot restore its state from the checkpoint: {exc}") from exc
            self.sinks[q.name] = self._sink(q.name, result.schema)
            self.late_sinks[q.name] = {
                label: self._sink(f"{q.name}.late.{label.replace('/', '~')}",
                                  eng.catalog.by_id(sid).schema)
                for sid, label in eng.assigner.deployed[q.name].late}
        if sources:
            eng.restore_source_state(sources)
        return eng

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
    def _stage_outputs(self, eng: Engine, epoch: int) -> None:
        for name, sink in self.sinks.items():
            result = eng.queries[name]
            sink.stage(epoch, result.batches)
            result.batches.clear()
            for label, late_sink in self.late_sinks[name].items():
                late_sink.stage(epoch, result.late.get(label, []))
                result.late.pop(label, None)
        self._reach("staged")

    def _commit(self, epoch: int) -> None:
        for sink in self.sinks.values():
            sink.commit(epoch)
        for per_input in self.late_sinks.values():
            for sink in per_input.values():
                sink.commit(epoch)

    def checkpoint(self, finished: bool = False) -> None:
        """Take checkpoint ``epoch + 1`` now: snapshot, stage outputs, store, commit (without a
        checkpoint directory: only hand the outputs to the in-memory sinks)."""
        eng = self.engine
        assert eng is not None
        t0 = time.perf_counter()
        state = eng.snapshot() if not finished and self.store is not None else {}
        self._check_failures(eng)
        epoch = self.epoch + 1
        self._stage_outputs(eng, epoch)
        meta = {"position": self.position, "epoch": epoch, "sources": eng.source_state(),
                "finished": finished, "queries": [q.name for q in self.job.queries]}
        nbytes = self.store.save(epoch, state, meta) if self.store is not None else 0
        self._reach("saved")
        self._commit(epoch)
        self.epoch = epoch
        self.stats.checkpoints += 1
        self.stats.checkpoint_seconds.append(time.perf_counter() - t0)
        self.stats.checkpoint_bytes.append(nbytes)
        self._reach("committed")

    # -- the run ------------------------------------------------------------------------------
    def run(self, collect: bool = True) -> dict[str, pa.Table]:
        """Run (or resume, or republish) the job; return each query's committed output (with
        ``collect=False`` nothing: read it with :meth:`publish` or :meth:`outputs`)."""
        t0 = time.perf_counter()
        latest = self.store.load_latest() if self.store is not None else None
        self.stats.skipped = list(self.store.skipped) if self.store is not None else []
        state: dict[str, Any] | None = None
        sources: dict[str, dict[str, int]] | None = None
        if latest is not None:
            saved_queries = latest.meta.get("queries")
            wanted = [q.name for q in self.job.queries]
            if saved_queries is not None and saved_queries != wanted:
                raise StateError(
                    f"checkpoint directory {str(self.directory)!r} belongs to queries {saved_queries}, "
                    f"not {wanted}: use another --checkpoint-dir"
                )
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
        for sink in self.sinks.values():
            sink.recover(self.epoch)
        for per_input in self.late_sinks.values():
            for sink in per_input.values():
                sink.recover(self.epoch)
        self.stats.restore_seconds = time.perf_counter() - t0
        if not self.stats.finished_before:
            try:
                self._stream(eng)
                eng.end()
                self._check_failures(eng)
                self.checkpoint(finished=True)
            finally:
                eng.close()
        else:
            eng.close()
        return self.outputs() if collect else {}

    def outputs(self) -> dict[str, pa.Table]:
        """Each query's committed output."""
        return {name: sink.committed() for name, sink in self.sinks.items()}

    def late_outputs(self, query: str) -> dict[str, pa.Table]:
        """Query ``query``'s committed late rows, per input."""
        return {label: sink.committed() for label, sink in self.late_sinks[query].items()}

    def _stream(self, eng: Engine) -> None:
        last = time.monotonic()
        since = 0
        for stream, batch in self.job.source(self.position):
            eng.push(stream, batch)
            self.position += 1
            self.stats.batches += 1
            since += 1
            self._reach("batch")
            if self.state_budget is not None:
                self._check_budget(eng)
            due = (self.interval_batches is not None and since >= self.interval_batches) or (
                self.interval_seconds is not None and time.monotonic() - last >= self.interval_seconds)
            if due:
                self.checkpoint()
                last = time.monotonic()
                since = 0

    def publish(self, query: str, out: str | Path) -> pa.Table:
        """Write query ``query``'s committed output to ``out`` atomically."""
        table = self.sinks[query].publish(out)
        self._reach("publish")
        return table


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
