"""The engine facade: define streams, deploy and undeploy queries, push data, read results.

>>> import pyarrow as pa, pyarrow.compute as pc
>>> from splice.ops import Select
>>> from splice.runtime import Engine, Query
>>> eng = Engine()
>>> _ = eng.define_stream("s", pa.schema([("k", pa.int64()), ("v", pa.float64())]))
>>> _ = eng.deploy(Query.chain("big", "s", Select(pc.field("v") > 1.0)))
>>> eng.push("s", pa.record_batch({"k": [1, 2, 3], "v": [0.5, 2.0, 3.0]}))
>>> eng.end()
>>> eng.results("big").to_pydict()
{'k': [2, 3], 'v': [2.0, 3.0]}

Only the columns a query reads or returns travel the path. ``compose={"s": ["k"]}`` keeps ``k``
off the path and lets the composer re-attach it to each result row by row id instead.

Bad input. Each source stream has a bad-input policy. A pushed batch is checked before it is
accepted: a null in the stream's time column, and whatever the deployed queries' operators need
of its rows (:mod:`splice.core.row_checks`). Under ``"fail"`` (the default) a batch with a bad
row is refused whole with an error naming the stream, the row, the column and the reason, and
nothing of it enters the path; under ``"dead_letter"`` the bad rows go to :attr:`dead_letters`
with their reason, counted, and the rest is pushed. A query whose operator fails anyway fails
alone: the error is raised once from the next :meth:`push`, :meth:`watermark` or :meth:`end`
(naming the query), the other queries go on, and :meth:`results` raises it again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from splice.core.dead_letters import BadInputPolicy, DeadLetterSink, check_policy, rows_json
from splice.core.errors import PlanError, SchemaError, StateError
from splice.core.records import Barrier, Data, End, Record, Watermark
from splice.core.row_checks import RowCheck, not_null
from splice.core.stream import Stream, StreamCatalog
from splice.core.time import BoundedOutOfOrderness, WatermarkStrategy, time_values
from splice.runtime.assigner import Deployment, QueryAssigner
from splice.runtime.decomposer import ROW_ID, Decomposer
from splice.runtime.executor import Executor, PipelinedExecutor, SerialExecutor
from splice.runtime.naming import name_streams
from splice.runtime.plan import Query
from splice.runtime.topology import Topology
from splice.runtime.unit import UnitEvents, UnitStats

__all__ = ["Engine", "QueryResult", "ExecutorKind"]

ExecutorKind = Literal["serial", "pipelined"]


@dataclass
class QueryResult:
    """What a query has produced: result batches, late rows per input, and its failure if it
    failed."""

    name: str
    schema: pa.Schema
    batches: list[pa.RecordBatch] = field(default_factory=list)
    #: late rows by the input they came on (a source stream, or a node of the query)
    late: dict[str, list[pa.RecordBatch]] = field(default_factory=dict)
    error: BaseException | None = None
    deployed_at: int = 0
    undeployed_at: int | None = None
    ended: bool = False
    rows_seen: int = 0
    busy_seconds: float = 0.0
    first_block: int = -1

    @property
    def rows(self) -> int:
        return sum(b.num_rows for b in self.batches)

    @property
    def late_rows(self) -> dict[str, int]:
        """Late rows so far, per input."""
        return {k: sum(b.num_rows for b in v) for k, v in self.late.items()}


class Engine:
    """A splice engine on one machine.

    ``bricks`` x ``units_per_brick`` processing units; ``grow`` adds bricks when a plan does not
    fit; ``executor`` is ``"serial"`` (all stages in the caller's thread) or ``"pipelined"`` (a
    thread per brick, units of a brick in parallel; same results in the same order).
    """

    def __init__(
        self,
        bricks: int = 4,
        units_per_brick: int = 4,
        grow: bool = True,
        executor: ExecutorKind = "serial",
        in_flight: int = 4,
        dead_letters: DeadLetterSink | None = None,
    ):
        self.catalog = StreamCatalog()
        #: where rows refused at the edge go, with their reason (streams with ``"dead_letter"``)
        self.dead_letters = dead_letters if dead_letters is not None else DeadLetterSink()
        self._policy: dict[int, BadInputPolicy] = {}
        self._unreported: list[str] = []  # failed queries not yet raised to the caller
        self._lock = threading.RLock()
        self._sinks: dict[int, tuple[QueryResult, str | None]] = {}  # (query, late input or None)
        self.queries: dict[str, QueryResult] = {}
        events = UnitEvents(error=self._on_error, retired=self._on_retired, snapshot=self._on_snapshot)
        self._snapshots: dict[int, dict[str, dict[str, Any]]] = {}
        self._next_checkpoint = 1
        self.topology = Topology(bricks, units_per_brick, tap=self._tap, events=events)
        self.assigner = QueryAssigner(self.topology, self.catalog, grow=grow)
        self.decomposer = Decomposer()
        self.executor: Executor = (
            PipelinedExecutor(self.topology, in_flight=in_flight)
            if executor == "pipelined" else SerialExecutor(self.topology)
        )
        self.position = 0  # records submitted so far: where deploys and undeploys take effect
        self.rows_in: dict[str, int] = {}
        self._sources: set[int] = set()
        self._watermarks: dict[int, BoundedOutOfOrderness] = {}
        self._ended = False

    # -- streams -----------------------------------------------------------------------------
    def define_stream(
        self,
        name: str,
        schema: pa.Schema,
        time_column: str | None = None,
        max_out_of_orderness: int | None = None,
        *,
        watermark: WatermarkStrategy | None = None,
        bad_input: BadInputPolicy = "fail",
    ) -> Stream:
        """Define source stream ``name`` with ``schema`` and an optional event-time column.

        ``bad_input`` is what happens to a pushed row that cannot be processed (see the module
        docstring): ``"fail"`` or ``"dead_letter"``.

        ``watermark`` (a :class:`~splice.core.time.WatermarkStrategy`; ``max_out_of_orderness=D``
        is short for ``WatermarkStrategy(D)``) makes the engine put a watermark on the path after
        each batch that advances it: max time seen - D - 1, so a row at most ``D`` behind the
        newest is on time, and a row further behind is late for the operators it reaches
        (counted, and in :meth:`late`). Without one, call :meth:`watermark` yourself.
        """
        if "." in name or "#" in name or "/" in name:
            raise PlanError(f"stream name {name!r} must not contain '.', '#' or '/'")
        if max_out_of_orderness is not None:
            if watermark is not None:
                raise PlanError(f"stream {name!r}: give max_out_of_orderness or watermark, not both")
            if max_out_of_orderness < 0:
                raise PlanError(f"stream {name!r}: max_out_of_orderness must be >= 0")
            watermark = WatermarkStrategy(int(max_out_of_orderness))
        if watermark is not None and time_column is None:
            raise PlanError(f"stream {name!r}: watermarks need a time column")
        check_policy(bad_input)
        with self._lock:
            stream = self.catalog.define(name, schema, time_column, watermark)
            self._policy[stream.id] = bad_input
            if watermark is not None:
                self._watermarks[stream.id] = BoundedOutOfOrderness(watermark.max_out_of_orderness)
            self._sources.add(stream.id)
            self.decomposer.configure(stream, [], [])
            self.rows_in[name] = 0
            return stream

    def _source(self, name: str) -> Stream:
        stream = self.catalog[name]
        if stream.id not in self._sources:
            raise PlanError(f"stream {name!r} is a query's output, not a source stream")
        return stream

    # -- queries -----------------------------------------------------------------------------
    def _view(self, query: Query, stream: Stream, used: set[str] | None) -> list[str]:
        cols = [n for n in stream.schema.names if used is None or n in used]
        if stream.name in query.compose:
            cols.append(ROW_ID)
        return cols

    def _reconfigure(self) -> None:
        for sid in self._sources:
            stream = self.catalog.by_id(sid)
            used: list[set[str] | None] = []
            composing: list[bool] = []
            for dep in self.assigner.deployed.values():
                if sid in dep.source_columns:
                    used.append(dep.source_columns[sid])
                    if stream.name in dep.query.compose:
                        composing.append(not dep.stateless)
            self.decomposer.configure(stream, used, composing)

    def _check_compose(self, query: Query) -> None:
        if len(query.compose) > 1:
            raise PlanError(f"query {query.name!r}: compose from one source stream at most")
        for name, cols in query.compose.items():
            stream = self._source(name)
            missing = [c for c in cols if c not in stream.schema.names]
            if missing:
                raise SchemaError(
                    f"query {query.name!r}: cannot compose column(s) {', '.join(map(repr, missing))}: "
                    f"not in stream {name!r}"
                )
            if ROW_ID in cols or len(set(cols)) != len(cols):
                raise PlanError(f"query {query.name!r}: compose columns must be distinct stream columns")

    def deploy(self, query: Query, state: dict[str, Any] | None = None) -> QueryResult:
        """Deploy ``query`` now: it sees exactly the records pushed after this call.

        ``state`` (one query's entry of :meth:`snapshot`) restores its operators' state.
        """
        with self._lock:
            self._check_compose(query)
            dep, program = self.assigner.deploy(query, self._view, state)
            assert dep.output is not None
            clash = [c for cols in query.compose.values() for c in cols if c in dep.output.schema.names]
            if clash or (query.compose and ROW_ID not in dep.output.schema.names):
                self.assigner.undeploy(query.name)
                for s in dep.streams:
                    self.catalog.drop(s.name)
                raise PlanError(
                    f"query {query.name!r}: composed column(s) {', '.join(map(repr, clash))} are "
                    "already in its result" if clash else
                    f"query {query.name!r} composes columns but its result has no row ids "
                    "(aggregates and projections without __row_id lose them)"
                )
            schema = dep.output.schema
            if query.compose:
                (sname, cols), = query.compose.items()
                src = self.catalog[sname]
                schema = pa.schema([f for f in schema if f.name != ROW_ID] + [src.schema.field(c) for c in cols])
            first = dep.units[0]
            result = QueryResult(query.name, schema, deployed_at=self.position,
                                 first_block=self.topology.bricks[first[0]].units[first[1]].block_id)
            self.queries[query.name] = result
            self._sinks[dep.output.id] = (result, None)
            for late, label in dep.late:
                self._sinks[late] = (result, label)
            self._reconfigure()
            for rec in program:
                self.executor.submit(rec)
            return result

    def stats(self, name: str) -> tuple[int, float]:
        """(rows its first unit consumed, seconds its units were busy) for query ``name``."""
        with self._lock:
            q = self.queries[name]
            dep = self.assigner.deployed.get(name)
            if dep is None:
                return q.rows_seen, q.busy_seconds
            units = [self.topology.bricks[b].units[u] for b, u in dep.units]
            return (q.rows_seen + units[0].stats.rows_in,
                    q.busy_seconds + sum(u.stats.busy_seconds for u in units))

    def _on_retired(self, query: str, block: int, stats: UnitStats) -> None:
        # units report when uninstalled; the first unit of a plan counts the query's input rows
        q = self.queries.get(query)
        if q is None:
            return
        q.busy_seconds += stats.busy_seconds
        if block == q.first_block:
            q.rows_seen += stats.rows_in

    def undeploy(self, name: str) -> QueryResult:
        """Remove query ``name`` now; what it produced so far stays readable."""
        with self._lock:
            dep, program = self.assigner.undeploy(name)
            for rec in program:
                self.executor.submit(rec)
            self._reconfigure()
            self._drop_streams(dep)
            result = self.queries[name]
            result.undeployed_at = self.position
            return result

    def _drop_streams(self, dep: Deployment) -> None:
        for s in dep.streams:
            self.catalog.drop(s.name)

    # -- data --------------------------------------------------------------------------------
    def push(self, stream: str, batch: pa.RecordBatch | pa.Table) -> None:
        """Push one batch of source stream ``stream``; a mismatching schema is refused whole."""
        with self._lock:
            if self._ended:
                raise PlanError(f"stream {stream!r}: the engine has ended, no more input")
            src = self._source(stream)
            if isinstance(batch, pa.Table):
                for b in batch.combine_chunks().to_batches():
                    self.push(stream, b)
                return
            batch = src.check_batch(batch)
            batch = self._admit(src, batch)
            self.rows_in[stream] += batch.num_rows
            gen = self._watermarks.get(src.id)
            before = gen.current() if gen is not None else None
            if gen is not None and src.time_column is not None:
                gen.observe(time_values(batch, src.time_column, src.name))
            self._submit(Data(src.id, self.decomposer.split(src, batch)))
            if gen is not None and gen.current() != before:
                self._submit(Watermark(src.id, gen.current()))
            if not self.decomposer.retain.get(src.id, False) and self.decomposer.tables.get(src.id) \
                    and len(self.decomposer.tables[src.id].batches) > 64:
                self.executor.drain()
                self.decomposer.passed(src.id)
            self._raise_failures()

    def _admit(self, src: Stream, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` without its bad rows, under the stream's policy (module docstring)."""
        checks: list[RowCheck] = []
        if src.time_column is not None:
            checks.append(not_null(src.time_column, "event time"))
        for dep in self.assigner.deployed.values():
            checks.extend(dep.checks.get(src.id, ()))
        if not checks or not batch.num_rows:
            return batch
        bad: np.ndarray | None = None
        reasons: list[tuple[str, np.ndarray]] = []
        for check in checks:
            mask = check.bad(batch)
            if mask is None:
                continue
            new = mask if bad is None else mask & ~bad
            if not new.any():
                continue
            if self._policy[src.id] == "fail":
                row = int(np.flatnonzero(new)[0])
                raise SchemaError(
                    f"stream {src.name!r}, row {self.rows_in[src.name] + row + 1:,}: "
                    f"{check.reason} (the batch was refused; define the stream with "
                    "bad_input='dead_letter' to route such rows to the dead letters instead)")
            reasons.append((check.reason, new))
            bad = new if bad is None else bad | new
        if bad is None:
            return batch
        for reason, mask in reasons:
            self.dead_letters.add(src.name, reason, rows_json(batch, mask))
        return batch.filter(pa.array(~bad))

    def _raise_failures(self) -> None:
        """Raise, once, the failure of a query that failed since the last call."""
        if self._unreported:
            name = self._unreported.pop(0)
            err = self.queries[name].error
            raise StateError(f"query {name!r} failed: {self._named(err)} (the other queries go "
                             "on)") from err

    def _named(self, exc: BaseException | None) -> str:
        return name_streams(str(exc), {s.id: s.name for s in self.catalog})

    def _submit(self, rec: Record) -> None:
        self.position += 1
        self.executor.submit(rec)
        if isinstance(self.executor, SerialExecutor) and isinstance(rec, Data):
            self.decomposer.passed(rec.stream_id)

    def watermark(self, stream: str, time_value: int) -> None:
        """Event time of ``stream`` reached ``time_value`` (no later row has time <= it)."""
        with self._lock:
            self._submit(Watermark(self._source(stream).id, int(time_value)))
            self._raise_failures()

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """State of every deployed query's operators at this position: ``{query: {key: state}}``.

        A checkpoint barrier travels the path in order with the data; each unit snapshots its
        operator as the barrier passes, so the snapshot is consistent with the records before it.
        """
        with self._lock:
            cid = self._next_checkpoint
            self._next_checkpoint += 1
            self._snapshots[cid] = {name: {} for name in self.assigner.deployed}
            self._submit(Barrier(cid))
            self.executor.drain()
            return self._snapshots.pop(cid)

    def _on_snapshot(self, checkpoint_id: int, query: str, key: str, state: Any) -> None:
        taken = self._snapshots.get(checkpoint_id)
        if taken is not None and query in taken:
            taken[query][key] = state

    def source_state(self) -> dict[str, dict[str, int]]:
        """Per source stream: rows pushed and the watermark generator's largest time seen.

        Checkpoints store it next to :meth:`snapshot` so a restored engine emits the same
        watermarks as the one that crashed.
        """
        with self._lock:
            out: dict[str, dict[str, int]] = {}
            for sid in self._sources:
                stream = self.catalog.by_id(sid)
                entry = {"rows_in": self.rows_in.get(stream.name, 0)}
                gen = self._watermarks.get(sid)
                if gen is not None:
                    entry["max_time"] = int(gen.max_time)
                out[stream.name] = entry
            return out

    def restore_source_state(self, state: dict[str, dict[str, int]]) -> None:
        """Inverse of :meth:`source_state`, on an engine whose streams are defined again."""
        with self._lock:
            for name, entry in state.items():
                sid = self._source(name).id
                self.rows_in[name] = int(entry.get("rows_in", 0))
                gen = self._watermarks.get(sid)
                if gen is not None and "max_time" in entry:
                    gen.max_time = int(entry["max_time"])

    def state_bytes(self) -> dict[str, dict[str, int]]:
        """Bytes of state per deployed query and operator key (each operator's ``state_bytes()``)."""
        with self._lock:
            out: dict[str, dict[str, int]] = {}
            for name, dep in self.assigner.deployed.items():
                per: dict[str, int] = {}
                for b, u in dep.units:
                    program = self.topology.bricks[b].units[u].loaded
                    if program is not None:
                        per[program.key] = per.get(program.key, 0) + int(program.logic.state_bytes())
                out[name] = per
            return out

    def end(self) -> None:
        """No more input: blocking operators flush and every query answers."""
        with self._lock:
            if self._ended:
                return
            self._submit(End())
            self.executor.drain()
            self._ended = True
            self._raise_failures()

    def close(self) -> None:
        self.executor.close()

    def run(self, source: Iterable[tuple[str, pa.RecordBatch]], end: bool = True) -> float:
        """Push every ``(stream, batch)`` of ``source``; return the seconds it took."""
        started = time.perf_counter()
        for stream, batch in source:
            self.push(stream, batch)
        if end:
            self.end()
        else:
            self.executor.drain()
        return time.perf_counter() - started

    # -- results -----------------------------------------------------------------------------
    def _tap(self, rec: Record) -> None:
        if isinstance(rec, End):
            for q in self.queries.values():
                q.ended = True
            return
        if not isinstance(rec, Data):
            return
        sink = self._sinks.get(rec.stream_id)
        if sink is None:
            return
        result, late_input = sink
        if late_input is not None:
            result.late.setdefault(late_input, []).append(rec.batch)
            return
        batch = rec.batch
        dep = self.assigner.deployed.get(result.name)
        if dep is not None and dep.query.compose:
            (sname, cols), = dep.query.compose.items()
            batch = self.decomposer.compose(self.catalog[sname], batch, list(cols), result.name)
        result.batches.append(batch)

    def _on_error(self, query: str, block: int, exc: BaseException) -> None:
        result = self.queries.get(query)
        if result is not None and result.error is None:
            result.error = exc
            self._unreported.append(query)

    def _result(self, name: str) -> QueryResult:
        """Query ``name``'s result with every record submitted so far through the path."""
        with self._lock:
            if isinstance(self.executor, PipelinedExecutor) and not self._ended:
                self.executor.drain()
        try:
            return self.queries[name]
        except KeyError:
            raise PlanError(f"unknown query {name!r}") from None

    def results(self, name: str, partial: bool = False) -> pa.Table:
        """Query ``name``'s results so far; raises its failure unless ``partial``."""
        result = self._result(name)
        if result.error is not None and not partial:
            raise StateError(f"query {name!r} failed: {self._named(result.error)}") from result.error
        return pa.Table.from_batches(result.batches, schema=result.schema)

    def _operator_metrics(self, name: str) -> dict[str, dict[str, Any]]:
        dep = self.assigner.deployed.get(name)
        if dep is None:
            return {}
        out: dict[str, dict[str, Any]] = {}
        for b, u in dep.units:
            program = self.topology.bricks[b].units[u].loaded
            if program is not None:
                m = program.logic.metrics()
                if m:
                    out[program.key] = m
        return out

    def late(self, name: str) -> dict[str, pa.Table]:
        """Rows query ``name`` refused as late (its late side output), per input: the source
        stream's name, or the name of the query's node they came from."""
        result = self._result(name)
        return {k: pa.Table.from_batches(v) for k, v in result.late.items() if v}

    def metrics(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "rows_in": dict(self.rows_in),
            "queries": {n: {"rows_out": q.rows, "late_rows": q.late_rows,
                            "failed": q.error is not None, "operators": self._operator_metrics(n)}
                        for n, q in self.queries.items()},
            "dead_letter_rows": self.dead_letters.total,
            "dead_letter_reasons": dict(self.dead_letters.counts),
            "parse_table_bytes": self.decomposer.nbytes,
            "topology": self.topology.describe(),
        }
