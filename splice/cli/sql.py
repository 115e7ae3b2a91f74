"""``splice sql``: SQL statements over files, run as one job on the engine.

``CREATE TABLE`` (or ``--table NAME=PATH``) declares the file tables; each ``SELECT`` and
``INSERT INTO`` is planned onto splice's operators (:mod:`splice.sql.planner`) and all of them
run as queries of one job on one data path, under the checkpoint coordinator as ``splice join``
runs (with ``--checkpoint-dir``, exactly-once and resumable). ``EXPLAIN`` prints a query's
operators, where they sit on the path, and why each was chosen.

Event time, per table:

* with ``WATERMARK FOR ts AS ts - D`` the rows stream in file order and the watermark trails the
  newest time by ``D + 1``: a row further behind is late, counted per input (``late_rows``),
  never dropped silently;
* without one, a table that a time-based operator reads (a window, an interval or window join) is
  ordered by that time column before it streams (stable; sorted runs on disk above
  ``--memory-budget``), so nothing is late and the answer is the SQL answer;
* a table no time-based operator reads streams in file order.

Tables take turns by the time of their next batch, so they advance together.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import sqlglot
from sqlglot import exp

from splice.cli.join import JoinInput, _in_memory
from splice.core.errors import PlanError
from splice.core.plan import Query
from splice.core.time import WatermarkStrategy
from splice.io.bad_input import BadInputPolicy, DeadLetterSink, check_policy
from splice.io.rows import json_rows, print_table
from splice.kernels.machine import machine_bytes
from splice.runtime.checkpoint import CheckpointCoordinator, Job, ReplayableSource, SourceStream
from splice.runtime.engine import Engine
from splice.runtime.fingerprint import job_fingerprint
from splice.runtime.sinks import publish_table
from splice.sql.planner import SourceTable, SqlPlan, plan_query
from splice.sql.statements import (
    CreateTable,
    Explain,
    InsertInto,
    QueryText,
    SelectQuery,
    SetOption,
    TableDef,
    parse_statements,
)

__all__ = ["run_sql", "run_statements", "SqlRun", "explain"]

_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "json",
            ".ndjson": "json", ".json": "json"}


# -- tables -----------------------------------------------------------------------------------

def _shorthand(spec: str) -> TableDef:
    name, sep, path = spec.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise PlanError(f"--table {spec!r}: expected NAME=PATH")
    return TableDef(name.strip(), None, {"connector": "file", "path": path.strip()})


def _location(table: TableDef) -> str:
    """Where a table's rows come from, for the job's fingerprint."""
    if table.connector == "kafka":
        return f"kafka:{table.options.get('topic')}"
    if "source.monitor-interval" in table.options:
        return f"directory:{table.options.get('path')}"
    return str(_path_of(table))


def _kafka_option(table: TableDef, *names: str, default: str | None = None) -> str:
    for n in names:
        if n in table.options:
            return table.options[n]
    if default is None:
        raise PlanError(f"table {table.name!r}: a Kafka table needs {names[0]} = '...'")
    return default


def _kafka_properties(table: TableDef) -> dict[str, str]:
    """``'properties.X' = ...`` options: librdkafka settings ``X`` (as Flink passes them)."""
    return {k[len("properties."):]: v for k, v in table.options.items()
            if k.startswith("properties.") and k != "properties.bootstrap.servers"}


def _kafka_common(table: TableDef, formats: tuple[str, ...] = ("json",)) -> tuple[str, str]:
    fmt = table.options.get("format", "json")
    if fmt not in formats:
        raise PlanError(f"table {table.name!r}: Kafka format {fmt!r} is not supported here "
                        f"({', '.join(formats)} are)")
    return (_kafka_option(table, "topic"),
            _kafka_option(table, "bootstrap.servers", "properties.bootstrap.servers"))


def _is_live(table: TableDef) -> bool:
    return table.connector == "kafka" or "source.monitor-interval" in table.options


def _live_source(table: _Table, time_column: str | None, batch_size: int,
                 policy: BadInputPolicy) -> Any:
    """The table as a source of a live job: a Kafka topic, or a file or directory read in
    order (tailed with ``source.monitor-interval``)."""
    from splice.connectors.file_source import FileSource
    from splice.connectors.kafka_source import KafkaSource

    d = table.definition
    delay = d.watermark_delay(table.schema.field(time_column).type) if (
        time_column is not None and d.watermark is not None) else 0
    if d.connector != "kafka":
        path = d.options.get("path")
        if not path:
            raise PlanError(f"table {d.name!r}: the file connector needs path = '...'")
        interval = d.options.get("source.monitor-interval")
        return FileSource(d.name, path, table.schema, time_column, delay,
                          None if interval is None else _seconds(interval, d.name),
                          policy, batch_size)
    topic, servers = _kafka_common(d, ("json", "avro", "avro-confluent"))
    idle = d.options.get("scan.watermark.idle-timeout", d.options.get("idle_timeout"))
    mode = d.options.get("scan.bounded.mode", "unbounded")
    if mode not in ("unbounded", "latest-offset"):
        raise PlanError(f"table {d.name!r}: scan.bounded.mode {mode!r} is not supported "
                        "(unbounded, latest-offset)")
    return KafkaSource(d.name, topic, servers, table.schema, time_column, delay,
                       idle_timeout=None if idle is None else _seconds(idle, d.name),
                       bounded=mode == "latest-offset", bad_input=policy,
                       batch_size=batch_size, properties=_kafka_properties(d),
                       format=d.options.get("format", "json"))


def _seconds(text: str, table: str) -> float:
    """A duration such as ``'5s'`` or ``'500 ms'`` (a bare number: milliseconds) in seconds."""
    from splice.sql.statements import duration_in_units

    where = f"table {table!r}: a duration option"
    return duration_in_units(text, pa.timestamp("ms"), where) / 1000


def _kafka_sink(table: TableDef) -> Any:
    from splice.connectors.kafka_sink import KafkaSink

    topic, servers = _kafka_common(table)
    tid = table.options.get("transactional.id")
    props = _kafka_properties(table)
    return lambda directory, name, schema: KafkaSink(directory, name, schema, topic, servers,
                                                     tid, props)


def _parts_sink(table: TableDef) -> Any:
    """A file table written by a live job: the directory ``path`` gets a part per epoch."""
    from splice.runtime.sinks import FilePartsSink

    path = table.options.get("path")
    if not path:
        raise PlanError(f"table {table.name!r}: the file connector needs path = '...'")
    fmt = table.options.get("format", "parquet").replace("jsonl", "json")
    return lambda directory, name, schema: FilePartsSink(directory, name, schema, path, fmt)


def _path_of(table: TableDef) -> Path:
    if table.connector != "file":
        raise PlanError(f"table {table.name!r}: connector {table.connector!r} is not supported "
                        "(file is)")
    path = table.options.get("path")
    if not path:
        raise PlanError(f"table {table.name!r}: the file connector needs path = '...'")
    fmt = table.options.get("format")
    by_suffix = _FORMATS.get(Path(path).suffix.lower())
    if fmt is not None and by_suffix is not None and fmt.replace("jsonl", "json") != by_suffix:
        raise PlanError(f"table {table.name!r}: format {fmt!r} but the path {path!r} is {by_suffix}")
    return Path(path)


@dataclass
class _Table:
    """A table as the job reads it: its definition, schema, and rows once loaded."""

    definition: TableDef
    schema: pa.Schema
    data: pa.Table | None = None  # read whole to learn its schema (no column list given)

    @property
    def name(self) -> str:
        return self.definition.name


def _open_table(table: TableDef, policy: BadInputPolicy, sink: DeadLetterSink | None) -> _Table:
    from splice.io.files import read_input

    if _is_live(table):
        if table.schema is None:
            raise PlanError(f"table {table.name!r}: a Kafka table or a tailed directory needs "
                            "its column list")
        return _Table(table, table.schema)
    path = _path_of(table)
    if table.schema is not None:
        return _Table(table, table.schema)
    if _FORMATS.get(path.suffix.lower()) == "parquet":
        if not path.exists():
            raise PlanError(f"table {table.name!r}: no such file {str(path)!r}")
        return _Table(table, pq.read_schema(path))
    data = read_input(path, table.name, time_column=table.time_column, policy=policy, sink=sink)  # type: ignore[arg-type]
    return _Table(table, data.schema, data)


def _referenced(query: QueryText) -> set[str]:
    tree = sqlglot.parse_one(query.sql, read="postgres")
    names = {t.name for t in tree.find_all(exp.Table)}
    ctes = {c.alias for c in tree.find_all(exp.CTE)}
    bases = {w.table for w in query.windows}
    aliases = {w.alias for w in query.windows}
    return (names - ctes - aliases) | bases


# -- the job ----------------------------------------------------------------------------------

@dataclass
class _Planned:
    name: str
    plan: SqlPlan
    target: TableDef | None  # INSERT INTO's sink table; None for a SELECT


def _default_budget() -> int:
    """Bytes a table may take while it is ordered: a quarter of the machine's memory."""
    have = machine_bytes()
    return (have // 4) if have else 4 << 30


def _input(table: _Table, time_column: str | None, batch_size: int, memory_budget: int,
           policy: BadInputPolicy, sink: DeadLetterSink | None) -> JoinInput:
    """The rows of ``table`` as the job streams them: ordered by ``time_column`` when it has no
    watermark, in file order otherwise."""
    from splice.io.files import read_input
    from splice.io.time_order import order_by_time, sort_by_time

    ordered = time_column is not None and table.definition.watermark is None
    if table.data is not None:
        data = sort_by_time(table.data, time_column, table.name) if ordered else table.data  # type: ignore[arg-type]
        return _in_memory(table.name, data, batch_size)
    path = _path_of(table.definition)
    if ordered:
        assert time_column is not None
        got = order_by_time(path, table.name, time_column, memory_budget=memory_budget,
                            schema=table.schema, policy=policy, sink=sink, batch_size=batch_size)
        return JoinInput(table.name, got.schema, got.num_rows,
                         functools.partial(got.batches, batch_size), got.close)
    data = read_input(path, table.name, schema=table.schema, time_column=time_column,
                      policy=policy, sink=sink)
    return _in_memory(table.name, data, batch_size)


def _turns(inputs: list[JoinInput], times: list[str | None]) -> ReplayableSource:
    """The job's source: tables without event time first, then the timed tables' batches in
    turns by the time of each one's next batch (:func:`splice.core.ordered_merge.batch_turns`)."""
    from splice.core.ordered_merge import batch_turns

    def source(position: int) -> Iterator[tuple[str, pa.RecordBatch]]:
        untimed = [i for i, t in enumerate(times) if t is None]
        timed = [i for i, t in enumerate(times) if t is not None]
        i = 0
        for s in untimed:
            for batch in inputs[s].batches():
                if i >= position:
                    yield inputs[s].name, batch
                i += 1
        for side, batch in batch_turns([inputs[s].batches() for s in timed],
                                       [str(times[s]) for s in timed],
                                       [inputs[s].name for s in timed]):
            if i >= position:
                yield inputs[timed[side]].name, batch
            i += 1

    return source


def _plan_all(statements: list[Any], tables: dict[str, _Table], definitions: dict[str, TableDef]
              ) -> tuple[list[_Planned], list[_Planned]]:
    planned: list[_Planned] = []
    explains: list[_Planned] = []
    selects = 0
    settings: dict[str, str] = {}
    for st in statements:
        if isinstance(st, SetOption):  # in force for the statements after it
            settings[st.key] = st.value
        if isinstance(st, SelectQuery | InsertInto | Explain):
            sources = {n: SourceTable(n, t.schema, t.definition.time_column,
                                      bounded=t.definition.connector != "kafka")
                       for n, t in tables.items() if n in _referenced(st.query)}
            missing = _referenced(st.query) - set(tables)
            if missing:
                raise PlanError(f"SQL: table {sorted(missing)[0]!r} is not defined (tables: "
                                f"{', '.join(sorted(tables)) or 'none'}); CREATE TABLE it or pass "
                                "--table NAME=PATH")
            if isinstance(st, InsertInto):
                if st.target not in definitions:
                    raise PlanError(f"SQL: INSERT INTO {st.target}: table {st.target!r} is not defined")
                name = st.target
                target: TableDef | None = definitions[st.target]
            elif isinstance(st, Explain):
                name, target = "explain", None
            else:
                selects += 1
                name = "query" if selects == 1 else f"query_{selects}"
                target = None
            plan = plan_query(st.query, sources, name, dict(settings))
            (explains if isinstance(st, Explain) else planned).append(_Planned(name, plan, target))
    return planned, explains


def explain(planned: _Planned, streams: list[SourceStream]) -> list[str]:
    """``EXPLAIN``: the operators, their place on the data path (brick, unit) and why."""
    eng = Engine()
    try:
        for s in streams:
            eng.define_stream(s.name, s.schema, s.time_column, watermark=s.watermark)
        eng.deploy(planned.plan.query)
        dep = eng.assigner.deployed[planned.name]
        units = dep.units
        nodes = planned.plan.query.nodes
        lines = [f"query {planned.name}: {len(nodes)} operator(s) on {len(eng.topology.bricks)} "
                 f"brick(s) of {len(eng.topology.bricks[0].units)} unit(s)"]
        for step, place in zip(planned.plan.steps, units, strict=False):
            lines.append(f"  brick {place[0]} unit {place[1]}  {step}")
        times = planned.plan.time_columns
        for s in streams:
            if s.name in times:
                how = ("watermark trails by " + str(s.watermark.max_out_of_orderness + 1)
                       if s.watermark is not None and s.watermark.max_out_of_orderness else
                       "ordered by time before it streams")
                lines.append(f"  source {s.name}: event time {times[s.name]}, {how}")
        return lines
    finally:
        eng.close()


@dataclass
class SqlRun:
    """What :func:`run_statements` did: each query's result by name (a SELECT's is ``query``,
    ``query_2``, ...; an INSERT's is its target table's name), the EXPLAIN lines, the figures."""

    results: dict[str, pa.Table]
    explained: list[str]
    metrics: dict[str, Any]
    dead_letters: pa.Table | None = None
    #: query -> input -> the rows that arrived behind that input's watermark
    late: dict[str, dict[str, pa.Table]] = field(default_factory=dict)


def run_statements(text: str, *, tables: Sequence[str] = (), batch_size: int = 65_536,
                   bad_input: BadInputPolicy = "fail", memory_budget: int | None = None,
                   write_sinks: bool = True, checkpoint_dir: str | Path | None = None,
                   checkpoint_interval: float = 1.0, stop: threading.Event | None = None,
                   restart: bool = False,
                   observe: Callable[[CheckpointCoordinator], None] | None = None,
                   workers: int | None = None, ray_address: str | None = None) -> SqlRun:
    """Run the SQL statements of ``text`` (module docstring) as one job; ``tables`` are
    ``NAME=PATH`` shorthands of file tables. INSERT INTO results are written to their tables'
    files when ``write_sinks`` (a Kafka table's, always); SELECT results are returned.

    With ``checkpoint_dir`` the job checkpoints every ``checkpoint_interval`` seconds and
    resumes from there; a job that reads Kafka runs until its sources end or ``stop`` is set.
    With ``workers`` each query's keyed stages run on that many Ray subtasks each
    (:mod:`splice.cluster`), on a local Ray or the cluster at ``ray_address``; the rest of the
    job (sources, checkpoints, sinks) is the same."""
    if batch_size < 1:
        raise PlanError(f"--batch-size must be >= 1, got {batch_size}")
    check_policy(bad_input)
    sink = DeadLetterSink() if bad_input == "dead_letter" else None
    statements = parse_statements(text)
    t0 = time.perf_counter()
    definitions: dict[str, TableDef] = {}
    for spec in tables:
        d = _shorthand(spec)
        definitions[d.name] = d
    for st in statements:
        if isinstance(st, CreateTable):
            if st.table.name in definitions:
                raise PlanError(f"table {st.table.name!r} is defined twice")
            definitions[st.table.name] = st.table
    used: set[str] = set()
    for st in statements:
        if isinstance(st, SelectQuery | InsertInto | Explain):
            used |= _referenced(st.query)
    for n in sorted(used - set(definitions)):
        raise PlanError(f"SQL: table {n!r} is not defined (tables: "
                        f"{', '.join(sorted(definitions)) or 'none'}); CREATE TABLE it or pass "
                        "--table NAME=PATH")
    opened = {n: _open_table(d, bad_input, sink) for n, d in definitions.items() if n in used}
    planned, explains = _plan_all(statements, opened, definitions)
    # read only the columns the queries read: narrow each table, then plan over what is read
    reads: dict[str, set[str]] = {}
    for p in planned + explains:
        for src, cols in p.plan.scanned.items():
            reads.setdefault(src, set()).update(cols)
    narrowed = False
    for n, t in opened.items():
        keep = [f.name for f in t.schema if f.name in reads.get(n, set())
                or f.name == t.definition.time_column]
        if keep and len(keep) < len(t.schema):
            t.schema = pa.schema([t.schema.field(c) for c in keep])
            t.data = t.data.select(keep) if t.data is not None else None
            narrowed = True
    if narrowed:
        planned, explains = _plan_all(statements, opened, definitions)
    times: dict[str, str] = {}
    for p in planned + explains:
        for src, column in p.plan.time_columns.items():
            if times.setdefault(src, column) != column:
                raise PlanError(f"SQL: table {src!r} is read by time {times[src]!r} in one query "
                                f"and {column!r} in another; one event-time column per table")
    for n, t in opened.items():
        declared = t.definition.time_column
        if declared is not None:
            times.setdefault(n, declared)
    streams = []
    for n, t in opened.items():
        event_time = times.get(n)
        strategy = None
        if event_time is not None:
            delay = (t.definition.watermark_delay(t.schema.field(event_time).type)
                     if t.definition.watermark is not None else 0)
            strategy = WatermarkStrategy(delay)
        streams.append(SourceStream(n, t.schema, event_time, watermark=strategy, bad_input=bad_input))
    explained = [line for p in explains for line in explain(p, streams)]
    if not planned:
        return SqlRun({}, explained, {})
    budget = memory_budget if memory_budget is not None else _default_budget()
    read = [n for n, t in opened.items() if any(n in _referenced_plan(p) for p in planned)]
    # a job that reads Kafka or tails a directory runs live: every source reports its position
    live_job = any(_is_live(opened[n].definition) for n in read)
    inputs = [] if live_job else [_input(opened[n], times.get(n), batch_size, budget, bad_input,
                                         sink) for n in read]
    load_seconds = time.perf_counter() - t0
    scratch = None
    try:
        queries: list[Query] = [p.plan.query for p in planned]
        growing = {n for n in read if _is_live(opened[n].definition)}
        files = {n: _location(opened[n].definition) for n in read if n not in growing}
        # topics and tailed directories grow: they are known by name
        names = {n: _location(opened[n].definition) for n in sorted(growing)}
        options: dict[str, Any] = {"batch_size": batch_size, "growing": names}
        if workers is not None:  # a checkpoint of subtasks resumes on as many subtasks
            options["workers"] = workers
        fingerprint = job_fingerprint(queries, files, options)
        used_streams = [s for s in streams if s.name in read]
        # a live job's file sink writes a part per checkpoint epoch, as the epoch commits
        kafka_sinks = {p.name: _kafka_sink(p.target) if p.target.connector == "kafka"
                       else _parts_sink(p.target) for p in planned
                       if p.target is not None and (live_job or p.target.connector == "kafka")}
        cluster = None
        if workers is not None:
            from splice.cluster import RayCluster

            cluster = RayCluster(workers, ray_address)
        if live_job:
            from splice.connectors.live import PolledSources

            live = PolledSources([_live_source(opened[n], times.get(n), batch_size, bad_input)
                                  for n in read])
            # a live source reports its own watermarks (a Kafka source's, per partition)
            used_streams = [SourceStream(s.name, s.schema, s.time_column, bad_input=bad_input)
                            for s in used_streams]
            job = Job(used_streams, queries, live.source, fingerprint=fingerprint, live=live,
                      sinks=kafka_sinks, cluster=cluster)
        else:
            job = Job(used_streams, queries, _turns(inputs, [times.get(i.name) for i in inputs]),
                      fingerprint=fingerprint, sinks=kafka_sinks, cluster=cluster)
        if checkpoint_dir is None and kafka_sinks:
            scratch = tempfile.TemporaryDirectory(prefix="splice-job-")
        directory = checkpoint_dir if checkpoint_dir is not None else (
            scratch.name if scratch is not None else None)
        coord = CheckpointCoordinator(job, directory, restart=restart,
                                      interval_seconds=checkpoint_interval if directory else None)
        if observe is not None:  # the web page watches the job's engine
            observe(coord)
        t1 = time.perf_counter()
        outputs = coord.run(collect=True, stop=stop)
        # the query's deployment (building operators, restoring a checkpoint) is not streaming
        deploy_seconds = coord.stats.restore_seconds
        seconds = time.perf_counter() - t1 - deploy_seconds
        assert coord.engine is not None
        figures = coord.engine.metrics()["queries"]
        late = {p.name: coord.late_outputs(p.name) for p in planned}
        committed_letters = coord.dead_letters()
        written = {name: getattr(s, "rows_written", None) for name, s in coord.sinks.items()}
    finally:
        for inp in inputs:
            inp.close()
        if scratch is not None:
            scratch.cleanup()
    results = {p.name: outputs[p.name] for p in planned}
    if write_sinks:
        for p in planned:
            if p.target is not None and p.name not in kafka_sinks:
                publish_table(results[p.name], _path_of(p.target))
    rows = sum(i.num_rows for i in inputs) if inputs else sum(
        coord.engine.rows_in.values())
    metrics: dict[str, Any] = {
        "input_rows": rows,
        "output_rows": {n: _rows_out(t, written[n]) for n, t in results.items()}
        if len(results) > 1 else _rows_out(*next((t, written[n]) for n, t in results.items())),
        "seconds": round(seconds, 6),
        "load_seconds": round(load_seconds, 6),
        "deploy_seconds": round(deploy_seconds, 6),
        "rows_per_s": round(rows / seconds, 1) if seconds > 0 else None,
        "late_rows": {n: dict(m.get("late_rows", {})) for n, m in figures.items()},
    }
    if checkpoint_dir is not None:
        metrics["resumed_from"] = coord.stats.resumed_from
    if workers is not None:
        metrics["workers"] = workers
        on_cluster = [m["operators"]["cluster"] for m in figures.values()]
        metrics["exchanged_rows"] = sum(c["exchanged_rows"] for c in on_cluster)
        metrics["worker_restarts"] = sum(c["restarts"] for c in on_cluster)
    letters = None
    if sink is not None:
        letters = pa.concat_tables([sink.table(), committed_letters])
        metrics["dead_letter_rows"] = letters.num_rows
    return SqlRun(results, explained, metrics, letters, late)


def _rows_out(table: pa.Table, written: int | None) -> int:
    """Result rows of a query: those it kept, or those its sink wrote to Kafka."""
    return table.num_rows if written is None else written


def run_sql(args: argparse.Namespace) -> int:
    """``splice sql``: run the statements; print a SELECT's rows (or write ``--out``), the plans
    of EXPLAIN, and a metrics line."""
    if args.file is not None and args.query is not None:
        raise PlanError("give the SQL as an argument or with --file, not both")
    if args.file is not None:
        text = Path(args.file).read_text()
    elif args.query is not None:
        text = args.query
    else:
        text = sys.stdin.read()
    if args.dead_letter is not None and args.bad_input != "dead-letter":
        raise PlanError("--dead-letter needs --bad-input dead-letter")
    policy: BadInputPolicy = "dead_letter" if args.bad_input == "dead-letter" else "fail"
    run = run_statements(text, tables=args.table, batch_size=args.batch_size, bad_input=policy,
                         memory_budget=args.memory_budget, workers=args.workers,
                         ray_address=args.ray_address)
    for line in run.explained:
        print(line)
    selects = [n for n in run.results if n == "query" or n.startswith("query_")]
    if args.out is not None and len(selects) != 1:
        raise PlanError(f"--out writes one SELECT's result; the statements hold {len(selects)}")
    for n in selects:
        out = run.results[n]
        if args.out is not None:
            publish_table(out, args.out)
        elif args.json:
            for line in json_rows(out):
                print(line)
        else:
            print_table(out, title=n)
    if run.dead_letters is not None:
        DeadLetterSink(args.dead_letter, run.dead_letters.to_batches()).publish()
    if run.metrics:
        if args.json:
            print(json.dumps({"metrics": run.metrics}))
        else:
            print(" ".join(f"{k}={v}" for k, v in run.metrics.items()), file=sys.stderr)
    return 0


def _referenced_plan(p: _Planned) -> set[str]:
    return {n for node in p.plan.query.nodes for n in node.inputs}

