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

Outputs. A query deployed with ``on_output=f`` hands each result batch (composed) to ``f`` and
``on_late=g`` each late batch to ``g(input, batch)``, in path order, from the thread that taps
the path (the caller's with the serial executor, a brick thread with the pipelined one); the
engine keeps none of them. A callback must not call the engine; one that raises fails its
query (raised from the next call, naming the query and the callback). Without a sink the engine
buffers the query's results and late rows for :meth:`results` and :meth:`late`, at most
``result_buffer_rows`` rows per query (results and late rows together): the batch that would
go beyond fails the query with an error that says to give it a sink; no row is dropped
silently. ``None`` lifts the bound.

>>> seen = []
>>> eng = Engine()
>>> _ = eng.define_stream("s", pa.schema([("v", pa.float64())]))
>>> _ = eng.deploy(Query.chain("big", "s", Select(pc.field("v") > 1.0)), on_output=seen.append)
>>> eng.push("s", pa.record_batch({"v": [0.5, 2.0, 3.0]}))
>>> [b.num_rows for b in seen]
[2]

Undeploying. :meth:`undeploy` takes effect at its position: the query sees no later record. Its
records already on the path still reach its sinks and buffers (composed); what it holds on the
path (its streams, sinks and parse-table rows) is freed once the ``Uninstall`` has passed each of
its units (they report it), without draining the path. An undeployed query's buffered results
stay readable until :meth:`forget`; one deployed with ``on_output`` (and no buffered late rows)
is forgotten as soon as it has left the path.

On a cluster. ``Engine(cluster=c)`` (such as :class:`splice.cluster.RayCluster`) runs every
query on ``c``'s workers (:mod:`splice.runtime.remote`): the engine checks each batch at the
edge, generates the watermarks and buffers or hands over the results as above, and a query's
rows arrive at each :meth:`snapshot`, at :meth:`end` and at :meth:`undeploy` (so that a worker
restarted from its last checkpoint never delivers a row twice).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, SupportsIndex

import numpy as np
import pyarrow as pa

from splice.core.dead_letters import BadInputPolicy, DeadLetterSink, check_policy, rows_json
from splice.core.errors import PlanError, SchemaError, StateError
from splice.core.plan import Query
from splice.core.records import Barrier, Data, End, Record, Watermark
from splice.core.row_checks import RowCheck, not_null
from splice.core.stream import Stream, StreamCatalog
from splice.core.time import BoundedOutOfOrderness, WatermarkStrategy, time_values
from splice.runtime.assigner import Deployment, QueryAssigner
from splice.runtime.brick import Brick
from splice.runtime.decomposer import ROW_ID, Decomposer
from splice.runtime.executor import Executor, PipelinedExecutor, SerialExecutor
from splice.runtime.naming import name_streams
from splice.runtime.remote import Cluster, RemoteQuery, RemoteStream
from splice.runtime.topology import Topology
from splice.runtime.unit import KEEPS_NONE, UnitEvents, UnitStats

__all__ = ["Engine", "QueryResult", "ResultBatches", "ExecutorKind", "RESULT_BUFFER_ROWS"]

ExecutorKind = Literal["serial", "pipelined"]

#: Rows of results and late rows the engine buffers per query without a sink (the default bound).
RESULT_BUFFER_ROWS = 5_000_000

#: With the pipelined executor, a fence follows every this many batches of a composed stream.
_FENCE_EVERY = 8


class ResultBatches(list[pa.RecordBatch]):
    """A list of batches that keeps its row count (``rows``) whatever is added or removed, and
    counts the changes other than appending (``edits``) so that readers can cache."""

    def __init__(self, batches: Iterable[pa.RecordBatch] = ()):
        super().__init__(batches)
        self.rows = sum(b.num_rows for b in self)
        self.edits = 0
        #: the query these are the results of (its failure is raised by a call)
        self.owner: QueryResult | None = None

    def __call__(self) -> Iterator[pa.RecordBatch]:
        """The batches produced since the last call, in order, each handed over once and then
        no longer kept: ``for batch in handle.batches(): ...``. Raises the query's failure."""
        owner = self.owner
        if owner is not None and owner.error is not None:
            raise StateError(f"query {owner.name!r} failed: {owner.error}") from owner.error
        n = len(self)
        out = self[:n]
        del self[:n]  # batches appended meanwhile stay for the next call
        return iter(out)

    def _recount(self) -> None:
        self.rows = sum(b.num_rows for b in self)
        self.edits += 1

    def append(self, batch: pa.RecordBatch) -> None:
        super().append(batch)
        self.rows += batch.num_rows

    def extend(self, batches: Iterable[pa.RecordBatch]) -> None:
        batches = list(batches)
        super().extend(batches)
        self.rows += sum(b.num_rows for b in batches)

    def __iadd__(self, batches: Iterable[pa.RecordBatch]) -> ResultBatches:  # type: ignore[override,misc]
        self.extend(batches)
        return self

    def clear(self) -> None:
        super().clear()
        self.rows = 0
        self.edits += 1

    def insert(self, index: SupportsIndex, batch: pa.RecordBatch) -> None:
        super().insert(index, batch)
        self._recount()

    def pop(self, index: SupportsIndex = -1) -> pa.RecordBatch:
        batch = super().pop(index)
        self._recount()
        return batch

    def remove(self, batch: pa.RecordBatch) -> None:
        super().remove(batch)
        self._recount()

    def __setitem__(self, index: Any, value: Any) -> None:
        super().__setitem__(index, value)
        self._recount()

    def __delitem__(self, index: Any) -> None:
        super().__delitem__(index)
        self._recount()


def _as_arrow(data: Any, schema: pa.Schema, stream: str) -> pa.RecordBatch | pa.Table:
    """What :meth:`Engine.push` was given, as Arrow."""
    if isinstance(data, pa.RecordBatch | pa.Table):
        return data
    if isinstance(data, Mapping):
        columns = dict(data)
        if list(columns) == schema.names:
            try:
                return pa.Table.from_pydict(columns, schema=schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
                raise SchemaError(f"stream {stream!r}: the pushed columns do not convert to "
                                  f"the stream's schema: {exc}") from exc
        return pa.table(columns)  # the schema check names what differs
    if hasattr(data, "__arrow_c_stream__"):
        return pa.table(data)
    if hasattr(data, "__arrow_c_array__"):
        return pa.record_batch(data)
    raise TypeError(f"stream {stream!r}: push takes a pyarrow Table or RecordBatch, an object "
                    "with the Arrow PyCapsule interface (__arrow_c_stream__ or "
                    "__arrow_c_array__: pandas, polars, ...), or a dict of columns; got "
                    f"{type(data).__name__}")


def _held(batches: list[pa.RecordBatch]) -> int:
    return batches.rows if isinstance(batches, ResultBatches) else sum(b.num_rows for b in batches)


@dataclass
class QueryResult:
    """What a query has produced: result batches, late rows per input, and its failure if it
    failed.

    ``batches`` and ``late`` hold what the engine buffers for a query without a sink (a reader
    may take batches out of them: the checkpoint coordinator does); ``rows_out`` and
    ``late_rows`` count everything the query produced, sinks and taken batches included.
    """

    name: str
    schema: pa.Schema
    batches: ResultBatches = field(default_factory=ResultBatches)
    #: late rows by the input they came on (a source stream, or a node of the query)
    late: dict[str, list[pa.RecordBatch]] = field(default_factory=dict)
    error: BaseException | None = None
    deployed_at: int = 0
    undeployed_at: int | None = None
    ended: bool = False
    rows_seen: int = 0
    busy_seconds: float = 0.0
    first_block: int = -1
    #: result rows produced so far (handed to a sink, buffered, or taken from ``batches``)
    rows_out: int = 0
    #: late rows produced so far, per input
    late_counts: dict[str, int] = field(default_factory=dict)
    #: the last watermark on the query's output (what its operators promise downstream)
    watermark: int | None = None
    _cache: tuple[int, int, pa.Table, int] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.batches, ResultBatches):
            self.batches.owner = self

    @property
    def rows(self) -> int:
        """Result rows buffered now."""
        return _held(self.batches)

    @property
    def buffered_rows(self) -> int:
        """Result and late rows buffered now (what ``result_buffer_rows`` bounds)."""
        return _held(self.batches) + sum(_held(v) for v in self.late.values())

    @property
    def late_rows(self) -> dict[str, int]:
        """Late rows so far, per input."""
        return dict(self.late_counts)

    def table(self) -> pa.Table:
        """The buffered results as one table, appended to the last call's table when only
        batches were added since (no rebuild from every batch on every call), its chunks
        combined as it doubles."""
        buf = self.batches
        edits = buf.edits if isinstance(buf, ResultBatches) else -1
        cache = self._cache
        if cache is not None and edits >= 0 and cache[1] == edits and len(buf) >= cache[0]:
            n, _, table, combined = cache
            if len(buf) > n:
                table = pa.concat_tables([table, pa.Table.from_batches(buf[n:], schema=self.schema)])
        else:
            table, combined = pa.Table.from_batches(buf, schema=self.schema), 0
        chunks = table.column(0).num_chunks if table.num_columns else 0
        if chunks > 64 and table.num_rows >= 2 * combined:
            # fewer, larger chunks; the rows double between two combines, so each row is
            # copied O(1) times however often the results are read
            table = table.combine_chunks()
            combined = table.num_rows
        self._cache = (len(buf), edits, table, combined)
        return table


@dataclass(eq=False)
class _Deployed:
    """A deployment as the engine follows it, from deploy until it has left the path."""

    result: QueryResult
    dep: Deployment
    #: the source stream it composes from and the columns, or None
    compose: tuple[Stream, list[str]] | None
    on_output: Callable[[pa.RecordBatch], None] | None
    on_late: Callable[[str, pa.RecordBatch], None] | None
    #: block ids of its units still to retire (None while deployed)
    retiring: set[int] | None = None
    forget: bool = False
    #: the engine failed it (a sink raised, its buffer is full): its output is taken no more
    cut_off: bool = False
    finished: bool = False


@dataclass(eq=False)
class _Remote:
    """A query deployed on a cluster as the engine follows it: what it reads, the checks its
    input gets at the edge, its late inputs, and where its rows go."""

    result: QueryResult
    query: RemoteQuery
    #: source stream id -> the columns the query reads (in the stream's order)
    reads: dict[int, list[str]]
    checks: dict[int, list[RowCheck]]
    late_schemas: dict[str, pa.Schema]
    on_output: Callable[[pa.RecordBatch], None] | None
    on_late: Callable[[str, pa.RecordBatch], None] | None
    cut_off: bool = False
    stopped: bool = False


def _callable_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


class Engine:
    """A splice engine on one machine.

    ``bricks`` x ``units_per_brick`` processing units; ``grow`` adds bricks when a plan does not
    fit; ``executor`` is ``"serial"`` (all stages in the caller's thread) or ``"pipelined"`` (a
    thread per brick, units of a brick in parallel; same results in the same order).

    ``switch_interval`` (pipelined only; seconds) sets the interpreter's GIL switch interval, a
    setting of the whole process, until :meth:`close`; by default the engine leaves it alone
    (see :class:`~splice.runtime.executor.PipelinedExecutor`). ``result_buffer_rows`` bounds the
    rows buffered per query without a sink (module docstring); ``None`` lifts the bound.
    ``cluster`` runs the queries on a cluster's workers (module docstring).
    """

    def __init__(
        self,
        bricks: int = 4,
        units_per_brick: int = 4,
        grow: bool = True,
        executor: ExecutorKind = "serial",
        in_flight: int = 4,
        dead_letters: DeadLetterSink | None = None,
        *,
        switch_interval: float | None = None,
        result_buffer_rows: int | None = RESULT_BUFFER_ROWS,
        cluster: Cluster | None = None,
    ):
        if executor not in ("serial", "pipelined"):
            raise PlanError(f"executor must be 'serial' or 'pipelined', got {executor!r}")
        if switch_interval is not None and executor != "pipelined":
            raise PlanError("switch_interval applies to the pipelined executor only")
        if result_buffer_rows is not None and result_buffer_rows < 0:
            raise PlanError(f"result_buffer_rows must be >= 0 or None, got {result_buffer_rows}")
        self.result_buffer_rows = result_buffer_rows
        self.catalog = StreamCatalog()
        #: where rows refused at the edge go, with their reason (streams with ``"dead_letter"``)
        self.dead_letters = dead_letters if dead_letters is not None else DeadLetterSink()
        self._policy: dict[int, BadInputPolicy] = {}
        # failed queries not yet raised to the caller, with their errors
        self._unreported: list[tuple[str, BaseException]] = []
        self._lock = threading.RLock()
        # result or late stream id -> (its deployment, the late input or None)
        self._sinks: dict[int, tuple[_Deployed, str | None]] = {}
        #: every query's results, deployed or not yet forgotten
        self.queries: dict[str, QueryResult] = {}
        # deployments until they have left the path (undeployed ones until their units retired)
        self._deployments: dict[str, _Deployed] = {}
        self._retired: deque[_Deployed] = deque()  # left the path, to be freed by the caller
        self._retire_lock = threading.Lock()
        self._since_fence = 0
        events = UnitEvents(error=self._on_error, retired=self._on_retired, snapshot=self._on_snapshot)
        self._snapshots: dict[int, dict[str, dict[str, Any]]] = {}
        self._next_checkpoint = 1
        self.topology = Topology(bricks, units_per_brick, tap=self._tap, events=events)
        self.assigner = QueryAssigner(self.topology, self.catalog, grow=grow)
        self.decomposer = Decomposer()
        self.executor: Executor = (
            PipelinedExecutor(self.topology, in_flight=in_flight, switch_interval=switch_interval)
            if executor == "pipelined" else SerialExecutor(self.topology)
        )
        self.position = 0  # records submitted so far: where deploys and undeploys take effect
        self.rows_in: dict[str, int] = {}
        self._sources: set[int] = set()
        self._watermarks: dict[int, BoundedOutOfOrderness] = {}
        self._ended = False
        self.cluster = cluster
        #: queries running on the cluster, by name
        self._remote: dict[str, _Remote] = {}

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
            self.decomposer.configure(stream, [], {})
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
        """What travels from now on, for the queries deployed now (parse-table rows stay with
        undeployed queries until they have left the path)."""
        for sid in self._sources:
            stream = self.catalog.by_id(sid)
            used: list[set[str] | None] = []
            composing: dict[str, list[str]] = {}
            for dep in self.assigner.deployed.values():
                if sid in dep.source_columns:
                    used.append(dep.source_columns[sid])
                    if stream.name in dep.query.compose:
                        composing[dep.query.name] = list(dep.query.compose[stream.name])
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

    def deploy(
        self,
        query: Query,
        state: dict[str, Any] | None = None,
        *,
        on_output: Callable[[pa.RecordBatch], None] | None = None,
        on_late: Callable[[str, pa.RecordBatch], None] | None = None,
    ) -> QueryResult:
        """Deploy ``query`` now: it sees exactly the records pushed after this call.

        ``state`` (one query's entry of :meth:`snapshot`) restores its operators' state.
        ``on_output(batch)`` receives each result batch (composed), ``on_late(input, batch)``
        each batch of late rows with the name of the input it came on, in path order, from the
        thread that taps the path; the engine then keeps none of them (module docstring).
        """
        for label, fn in (("on_output", on_output), ("on_late", on_late)):
            if fn is not None and not callable(fn):
                raise PlanError(f"query {query.name!r}: {label} must be callable, got {fn!r}")
        if self.cluster is not None:
            return self._deploy_remote(query, state, on_output, on_late)
        with self._lock:
            self._reap()
            if query.name in self._deployments and query.name not in self.assigner.deployed:
                # its earlier deployment is still on the path: let it leave first
                self.executor.drain()
                self._reap()
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
            compose: tuple[Stream, list[str]] | None = None
            if query.compose:
                (sname, cols), = query.compose.items()
                src = self.catalog[sname]
                compose = (src, list(cols))
                schema = pa.schema([f for f in schema if f.name != ROW_ID] + [src.schema.field(c) for c in cols])
            first = dep.units[0]
            result = QueryResult(query.name, schema, deployed_at=self.position,
                                 first_block=self.topology.bricks[first[0]].units[first[1]].block_id)
            deployed = _Deployed(result, dep, compose, on_output, on_late)
            self.queries[query.name] = result
            self._deployments[query.name] = deployed
            self._sinks[dep.output.id] = (deployed, None)
            for late, label in dep.late:
                self._sinks[late] = (deployed, label)
            self._reconfigure()
            self.executor.submit_all(program)
            return result

    def _deploy_remote(self, query: Query, state: dict[str, Any] | None,
                       on_output: Callable[[pa.RecordBatch], None] | None,
                       on_late: Callable[[str, pa.RecordBatch], None] | None) -> QueryResult:
        """Deploy ``query`` on the cluster. It is planned here once and taken off again, so that
        it is checked as any query is and the engine learns its output schema, the checks its
        input needs at the edge and its late inputs; then the cluster runs it."""
        assert self.cluster is not None
        with self._lock:
            if query.name in self._remote or query.name in self.assigner.deployed:
                raise PlanError(f"query {query.name!r} is already deployed")
            if query.compose:
                raise PlanError(f"query {query.name!r}: composing columns is not available on a "
                                "cluster (each row travels with the columns the query reads)")
            dep, _ = self.assigner.deploy(query, self._view, None)
            self.assigner.undeploy(query.name)
            assert dep.output is not None
            schema = dep.output.schema
            late_schemas = {label: self.catalog.by_id(sid).schema for sid, label in dep.late}
            for s in dep.streams:
                self.catalog.drop(s.name)
            reads: dict[int, list[str]] = {}
            streams = []
            for sid, used in dep.source_columns.items():
                src = self.catalog.by_id(sid)
                cols = [n for n in src.schema.names
                        if used is None or n in used or n == src.time_column]
                reads[sid] = cols
                streams.append(RemoteStream(src.name, pa.schema([src.schema.field(c) for c in cols]),
                                            src.time_column))
            result = QueryResult(query.name, schema, deployed_at=self.position)
            remote = _Remote(result, None, reads, dep.checks, late_schemas,  # type: ignore[arg-type]
                             on_output, on_late)
            remote.query = self.cluster.deploy(query, streams, state,
                                               lambda b: self._remote_output(remote, b),
                                               lambda label, b: self._remote_late(remote, label, b))
            self.queries[query.name] = result
            self._remote[query.name] = remote
            return result

    def _remote_output(self, remote: _Remote, batch: pa.RecordBatch) -> None:
        if remote.cut_off or not batch.num_rows:
            return
        remote.result.rows_out += batch.num_rows
        if remote.on_output is not None:
            self._deliver(remote, "on_output", remote.on_output, batch)
        elif self._room(remote, batch.num_rows):
            remote.result.batches.append(batch)

    def _remote_late(self, remote: _Remote, label: str, batch: pa.RecordBatch) -> None:
        if remote.cut_off or not batch.num_rows:
            return
        result = remote.result
        if label not in remote.late_schemas:
            self._cut_off(remote, StateError(f"its workers reported late rows of {label!r}, which "
                                             "is not one of its inputs"))
            return
        result.late_counts[label] = result.late_counts.get(label, 0) + batch.num_rows
        if remote.on_late is not None:
            self._deliver(remote, "on_late", remote.on_late, label, batch)
        elif self._room(remote, batch.num_rows):
            result.late.setdefault(label, ResultBatches()).append(batch)

    def _on_remote(self, remote: _Remote, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)``, a call on a remote query; its failure fails the query alone."""
        if remote.cut_off or remote.stopped:
            return None
        try:
            return call(*args)
        except Exception as exc:
            self._cut_off(remote, exc)
            return None

    def late_inputs(self, name: str) -> dict[str, pa.Schema]:
        """The inputs of deployed query ``name`` that can have late rows, with their schemas."""
        with self._lock:
            remote = self._remote.get(name)
            if remote is not None:
                return dict(remote.late_schemas)
            try:
                dep = self.assigner.deployed[name]
            except KeyError:
                raise PlanError(f"query {name!r} is not deployed") from None
            return {label: self.catalog.by_id(sid).schema for sid, label in dep.late}

    def sql(
        self,
        text: str,
        name: str | None = None,
        *,
        on_output: Callable[[pa.RecordBatch], None] | None = None,
        on_late: Callable[[str, pa.RecordBatch], None] | None = None,
    ) -> QueryResult:
        """Deploy the SQL query ``text`` now, as :meth:`deploy` deploys a plan: it sees exactly
        the records pushed after this call.

        ``text`` is one ``SELECT`` over this engine's source streams (after any ``SET
        state_ttl = '10s'`` statements), planned onto splice's
        operators by :func:`splice.sql.planner.plan_query` (windows, interval and window joins,
        aggregates, filters and projections; see docs/sql.md). A time-based operator reads a
        stream's declared time column. ``name`` defaults to ``sql_1``, ``sql_2``, ...
        Returns the query's handle: read its rows with :meth:`results` or :meth:`take`.
        """
        from splice.sql.planner import SourceTable, plan_query
        from splice.sql.statements import SelectQuery, SetOption, parse_statements

        statements = parse_statements(text)
        settings = {st.key: st.value for st in statements[:-1] if isinstance(st, SetOption)}
        if (not statements or not isinstance(statements[-1], SelectQuery)
                or not all(isinstance(st, SetOption) for st in statements[:-1])):
            raise PlanError("Engine.sql takes one SELECT, after any SET statements; define "
                            "streams with define_stream")
        with self._lock:
            sources = {}
            for sid in self._sources:
                stream = self.catalog.by_id(sid)
                sources[stream.name] = SourceTable(stream.name, stream.schema, stream.time_column)
            if name is None:
                k = 1
                while f"sql_{k}" in self.queries:
                    k += 1
                name = f"sql_{k}"
        plan = plan_query(statements[-1].query, sources, name, settings)
        for source, column in plan.time_columns.items():
            declared = sources[source].time_column
            if declared is None:
                raise PlanError(f"SQL: the query reads {column!r} of stream {source!r} as event "
                                f"time; define the stream with time_column={column!r} and a "
                                "watermark")
        return self.deploy(plan.query, on_output=on_output, on_late=on_late)

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
        # a unit's Uninstall passed it (on the thread that runs the unit): count its figures
        # (the first unit of a plan counts the query's input rows); once the last unit of an
        # undeployed query has retired, nothing of it is left on the path
        deployed = self._deployments.get(query)
        if deployed is None:
            return
        q = deployed.result
        q.busy_seconds += stats.busy_seconds
        if block == q.first_block:
            q.rows_seen += stats.rows_in
        with self._retire_lock:
            if deployed.retiring is not None and block in deployed.retiring:
                deployed.retiring.discard(block)
                if not deployed.retiring:
                    self._retired.append(deployed)

    def undeploy(self, name: str) -> QueryResult:
        """Remove query ``name`` now: it sees no record pushed after this call.

        Its records already on the path still reach its sinks (or buffers); its streams and
        parse-table rows are freed once they have left the path. Buffered results stay
        readable until :meth:`forget`.
        """
        with self._lock:
            remote = self._remote.pop(name, None)
            if remote is not None:
                self._on_remote(remote, remote.query.stop)
                remote.stopped = True
                remote.result.undeployed_at = self.position
                return remote.result
            self._reap()
            dep, program = self.assigner.undeploy(name)
            deployed = self._deployments[name]
            result = deployed.result
            result.undeployed_at = self.position
            with self._retire_lock:
                deployed.retiring = {self.topology.bricks[b].units[u].block_id for b, u in dep.units}
                if not deployed.retiring:
                    self._retired.append(deployed)
            self.executor.submit_all(program)
            self._reconfigure()
            self._reap()
            return result

    def forget(self, name: str) -> None:
        """Free what the engine keeps of undeployed query ``name``: its buffered results and
        late rows, its figures. A query still on the path is freed once it has left it."""
        with self._lock:
            self._reap()
            if name in self.assigner.deployed:
                raise PlanError(f"query {name!r} is deployed: undeploy it before forgetting it")
            if name not in self.queries:
                raise PlanError(f"unknown query {name!r}")
            deployed = self._deployments.get(name)
            if deployed is not None:
                deployed.forget = True
            del self.queries[name]

    def _reap(self) -> None:
        """Free the undeployed queries that have left the path (the caller's thread)."""
        while self._retired:
            self._free(self._retired.popleft())

    def _free(self, deployed: _Deployed) -> None:
        if deployed.finished:
            return
        deployed.finished = True
        result = deployed.result
        for s in deployed.dep.streams:
            self._sinks.pop(s.id, None)
            if s.name in self.catalog and self.catalog[s.name].id == s.id:
                self.catalog.drop(s.name)
        if deployed.compose is not None:
            self.decomposer.release(deployed.compose[0], result.name)
        if self._deployments.get(result.name) is deployed:
            del self._deployments[result.name]
        # a query that hands its output to a sink keeps nothing worth reading
        sunk = deployed.on_output is not None and not any(result.late.values())
        if (deployed.forget or sunk) and self.queries.get(result.name) is result:
            del self.queries[result.name]

    # -- data --------------------------------------------------------------------------------
    def push(self, stream: str, batch: Any) -> None:
        """Push rows of source stream ``stream``: a pyarrow ``RecordBatch`` or ``Table``, any
        object with the Arrow PyCapsule interface (``__arrow_c_stream__`` or
        ``__arrow_c_array__``: pandas >= 2.2 and polars data frames, other Arrow libraries), or
        a dict of columns (name -> list or array). A mismatching schema is refused whole."""
        with self._lock:
            if self._ended:
                raise PlanError(f"stream {stream!r}: the engine has ended, no more input")
            src = self._source(stream)
            batch = _as_arrow(batch, src.schema, stream)
            if isinstance(batch, pa.Table):
                for b in batch.combine_chunks().to_batches():
                    self.push(stream, b)
                return
            self._reap()
            batch = src.check_batch(batch)
            batch = self._admit(src, batch)
            self.rows_in[stream] += batch.num_rows
            gen = self._watermarks.get(src.id)
            before = gen.current() if gen is not None else None
            if gen is not None and src.time_column is not None:
                gen.observe(time_values(batch, src.time_column, src.name))
            if self._remote:
                self._push_remote(src, batch, gen.current() if gen is not None
                                  and gen.current() != before else None)
            if self.cluster is not None:
                self._raise_failures()
                return
            numbered = self.decomposer.numbered.get(src.id, False)
            self._submit(Data(src.id, self.decomposer.split(src, batch)))
            if gen is not None and gen.current() != before:
                self._submit(Watermark(src.id, gen.current()))
            if numbered:
                self._since_fence += 1
                if isinstance(self.executor, SerialExecutor) or self._since_fence >= _FENCE_EVERY:
                    self._fence()
            self._raise_failures()

    def _push_remote(self, src: Stream, batch: pa.RecordBatch, watermark: int | None) -> None:
        for remote in list(self._remote.values()):
            cols = remote.reads.get(src.id)
            if cols is None:
                continue
            part = batch if len(cols) == batch.num_columns else batch.select(cols)
            self._on_remote(remote, remote.query.push, src.name, part)
            if watermark is not None:
                self._on_remote(remote, remote.query.watermark, src.name, watermark)

    def _fence(self) -> None:
        """Learn how far each composing query's units have got and which rows they keep: a
        fence follows the records submitted so far; as it passes, each unit of such a query
        says the least row id it keeps (:meth:`~splice.runtime.unit.ProcessingUnit.retained_floor`);
        once it has left the path, no result of the query tapped later has a row id below the
        least of those and of the next row id at the fence, and the decomposer frees the parse
        table below it. A unit that cannot tell holds its query's rows where they are."""
        self._since_fence = 0
        queries = {name: d.compose[0] for name, d in self._deployments.items()
                   if d.compose is not None and not d.finished}
        if not queries:
            return
        next_row = {s.id: self.decomposer.next_row.get(s.id, 0) for s in queries.values()}
        floors: dict[str, int] = {}
        blind: set[str] = set()

        def probe(brick: Brick) -> None:
            for unit in brick.units:
                query = unit.query
                if query in queries:
                    floor = unit.retained_floor()
                    if floor is None:
                        blind.add(query)
                    else:
                        floors[query] = min(floors.get(query, KEEPS_NONE), floor)

        def done() -> None:
            for query, stream in queries.items():
                if query not in blind:
                    low = min(next_row[stream.id], floors.get(query, KEEPS_NONE))
                    self.decomposer.hold(stream, query, low)

        self.executor.fence(probe, done)

    def _admit(self, src: Stream, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` without its bad rows, under the stream's policy (module docstring)."""
        checks: list[RowCheck] = []
        if src.time_column is not None:
            checks.append(not_null(src.time_column, "event time"))
        for dep in self.assigner.deployed.values():
            checks.extend(dep.checks.get(src.id, ()))
        for remote in self._remote.values():
            checks.extend(remote.checks.get(src.id, ()))
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
            name, err = self._unreported.pop(0)
            raise StateError(f"query {name!r} failed: {self._named(err)} (the other queries go "
                             "on)") from err

    def _named(self, exc: BaseException | None) -> str:
        return name_streams(str(exc), {s.id: s.name for s in self.catalog})

    def _submit(self, rec: Record) -> None:
        self.position += 1
        self.executor.submit(rec)

    def watermark(self, stream: str, time_value: int) -> None:
        """Event time of ``stream`` reached ``time_value`` (no later row has time <= it)."""
        with self._lock:
            self._reap()
            src = self._source(stream)
            for remote in list(self._remote.values()):
                if src.id in remote.reads:
                    self._on_remote(remote, remote.query.watermark, stream, int(time_value))
            if self.cluster is None:
                self._submit(Watermark(src.id, int(time_value)))
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
            taken = self._snapshots.pop(cid)
            for name, remote in self._remote.items():
                state = self._on_remote(remote, remote.query.checkpoint)
                if state is not None:
                    taken[name] = state
            return taken

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
            for remote in self._remote.values():
                self._on_remote(remote, remote.query.end)
                remote.result.ended = True
            self._submit(End())
            self.executor.drain()
            self._ended = True
            self._reap()
            self.decomposer.clear()  # every result has been tapped: nothing left to compose
            self._raise_failures()

    def close(self) -> None:
        """Stop the executor's threads (and a cluster's queries); results already produced
        stay readable."""
        for remote in self._remote.values():
            if not remote.stopped:
                self._on_remote(remote, remote.query.stop)
                remote.stopped = True
        self.executor.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        """Leaving a ``with Engine() as eng:`` block closes the engine (call :meth:`end` inside
        the block to flush blocking operators first)."""
        self.close()

    def run(self, source: Iterable[tuple[str, pa.RecordBatch]], end: bool = True) -> float:
        """Push every ``(stream, batch)`` of ``source``; return the seconds it took."""
        started = time.perf_counter()
        for stream, batch in source:
            self.push(stream, batch)
        if end:
            self.end()
        else:
            self.executor.drain()
            with self._lock:
                self._reap()
        return time.perf_counter() - started

    # -- results -----------------------------------------------------------------------------
    def _tap(self, rec: Record) -> None:
        # runs on the thread that taps the path: the caller's (serial) or a brick thread
        if isinstance(rec, End):
            for q in list(self.queries.values()):
                q.ended = True
            return
        if isinstance(rec, Watermark):
            sink = self._sinks.get(rec.stream_id)
            if sink is not None and sink[1] is None:
                result = sink[0].result
                if result.watermark is None or rec.time > result.watermark:
                    result.watermark = rec.time
            return
        if not isinstance(rec, Data):
            return
        sink = self._sinks.get(rec.stream_id)
        if sink is None:
            return
        deployed, late_input = sink
        if deployed.cut_off:
            return
        result = deployed.result
        batch = rec.batch
        if late_input is not None:
            result.late_counts[late_input] = result.late_counts.get(late_input, 0) + batch.num_rows
            if deployed.on_late is not None:
                self._deliver(deployed, "on_late", deployed.on_late, late_input, batch)
            elif self._room(deployed, batch.num_rows):
                buf = result.late.get(late_input)
                if buf is None:
                    buf = result.late[late_input] = ResultBatches()
                buf.append(batch)
            return
        if deployed.compose is not None:
            stream, cols = deployed.compose
            batch = self.decomposer.compose(stream, batch, cols, result.name)
        result.rows_out += batch.num_rows
        if deployed.on_output is not None:
            self._deliver(deployed, "on_output", deployed.on_output, batch)
        elif self._room(deployed, batch.num_rows):
            result.batches.append(batch)

    def _deliver(self, deployed: _Deployed | _Remote, label: str, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:
            err = StateError(f"its {label} callback {_callable_name(fn)} raised "
                             f"{type(exc).__name__}: {exc}")
            err.__cause__ = exc
            self._cut_off(deployed, err)

    def _room(self, deployed: _Deployed | _Remote, rows: int) -> bool:
        """Whether ``rows`` more rows fit the query's buffer; fail the query when not."""
        bound = self.result_buffer_rows
        if bound is None:
            return True
        held = deployed.result.buffered_rows
        if held + rows <= bound:
            return True
        self._cut_off(deployed, StateError(
            f"it would buffer more than {bound:,} rows of results and late rows (holds {held:,}, "
            f"{rows:,} more came), the engine's bound (Engine(result_buffer_rows=...)): deploy it "
            "with on_output= (and on_late=) to hand its rows to a sink as they come"))
        return False

    def _cut_off(self, deployed: _Deployed | _Remote, err: BaseException) -> None:
        # the engine fails the query: the error is raised once from the caller's next call
        deployed.cut_off = True
        result = deployed.result
        if result.error is None:
            result.error = err
            self._unreported.append((result.name, err))

    def _on_error(self, query: str, block: int, exc: BaseException) -> None:
        deployed = self._deployments.get(query)
        result = deployed.result if deployed is not None else self.queries.get(query)
        if result is not None and result.error is None:
            result.error = exc
            self._unreported.append((query, exc))

    def _result(self, name: str) -> QueryResult:
        """Query ``name``'s result with every record submitted so far through the path."""
        with self._lock:
            if isinstance(self.executor, PipelinedExecutor) and not self._ended:
                self.executor.drain()
            self._reap()
            try:
                return self.queries[name]
            except KeyError:
                raise PlanError(f"unknown query {name!r}") from None

    def results(self, name: str, partial: bool = False) -> pa.Table:
        """Query ``name``'s buffered results so far; raises its failure unless ``partial``."""
        result = self._result(name)
        if result.error is not None and not partial:
            raise StateError(f"query {name!r} failed: {self._named(result.error)}") from result.error
        return result.table()

    def take(self, name: str) -> Iterator[pa.RecordBatch]:
        """Query ``name``'s result batches produced since the last ``take``, in order, each
        handed over once and then no longer kept (the iterator form of a sink: push, then
        ``for batch in engine.take(q): ...``; the buffer's bound then never fills). Raises the
        query's failure first."""
        result = self._result(name)
        if result.error is not None:
            raise StateError(f"query {name!r} failed: {self._named(result.error)}") from result.error
        with self._lock:
            batches = list(result.batches)
            result.batches.clear()
        yield from batches

    def _operator_metrics(self, name: str) -> dict[str, dict[str, Any]]:
        remote = self._remote.get(name)
        if remote is not None:
            return {"cluster": remote.query.metrics()}
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
        """Rows query ``name`` refused as late (its late side output) buffered so far, per
        input: the source stream's name, or the name of the query's node they came from (none
        for a query deployed with ``on_late``)."""
        result = self._result(name)
        return {k: pa.Table.from_batches(v) for k, v in result.late.items() if v}

    def metrics(self) -> dict[str, Any]:
        with self._lock:
            self._reap()
        return {
            "position": self.position,
            "rows_in": dict(self.rows_in),
            "queries": {n: {"rows_out": q.rows_out, "late_rows": q.late_rows,
                            "buffered_rows": q.buffered_rows, "failed": q.error is not None,
                            "operators": self._operator_metrics(n)}
                        for n, q in list(self.queries.items())},
            "dead_letter_rows": self.dead_letters.total,
            "dead_letter_reasons": dict(self.dead_letters.counts),
            "parse_table_bytes": self.decomposer.nbytes,
            "topology": self.topology.describe(),
        }
