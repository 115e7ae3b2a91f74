"""A SQL query planned by DataFusion, mapped onto splice's streaming operators.

DataFusion parses, binds, types and optimizes the query (its optimized logical plan pushes
filters down, splits a join's condition into equi-keys and a filter, and folds constants). This
module walks that plan bottom-up and builds a :class:`~splice.core.plan.Query` of splice's own
operators:

==========================================  ===============================================
DataFusion plan                              splice operator
==========================================  ===============================================
``Filter``                                   :class:`~splice.ops.stateless.Select`
``Projection``                               :class:`~splice.ops.stateless.Project`
``Aggregate`` over a window table            :class:`~splice.ops.window_aggregate.WindowAggregate`
``Aggregate`` otherwise                      :class:`~splice.ops.aggregate.GroupBy` (a filter
                                             right below it goes into its ``where``)
``Join`` on keys and a time band             :class:`~splice.joins.temporal.interval_join.IntervalJoin`
``Join`` of two window tables on keys and    :class:`~splice.joins.temporal.window_join.WindowJoin`
``window_start``
``Sort`` with a fetch / without              :class:`~splice.ops.order.TopK` / ``OrderBy``
==========================================  ===============================================

Anything else raises :class:`~splice.core.errors.PlanError` naming the construct and what would
make it plannable. Event time: a source's time column is the one its ``WATERMARK`` declares, or
else the one the plan's time-based operators read (:attr:`SqlPlan.time_columns`); a source read
by no time-based operator streams in its own order.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from splice.core.errors import PlanError
from splice.core.operator import OperatorSpec
from splice.core.plan import BindInputs, Node, Query
from splice.ops.aggregate import Agg, GroupBy
from splice.ops.arithmetic import as_arith
from splice.ops.expressions import result_types
from splice.ops.order import OrderBy, TopK
from splice.ops.session_window import SessionWindowAggregate
from splice.ops.stateless import Project, Select
from splice.ops.updating_aggregate import OP, UpdatingAggregate
from splice.ops.window_aggregate import WindowAggregate
from splice.sql.statements import QueryText, WindowTable, duration_in_units, interval_in_units
from splice.sql.translate import literal_value, to_arrow, unalias

__all__ = ["SourceTable", "SqlPlan", "plan_query", "datafusion_plan"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_JOIN_TYPES = {"Inner": "inner", "Left": "left", "Right": "right", "Full": "full"}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass(frozen=True)
class SourceTable:
    """What the planner knows of a source: its schema and its declared event-time column."""

    name: str
    schema: pa.Schema
    time_column: str | None = None
    #: a finite table (a file): a join of finite tables needs no bound on its state
    bounded: bool = False


@dataclass
class SqlPlan:
    """A planned query: the operators, the user's column names, and what its sources need."""

    query: Query
    columns: list[str]
    #: source name -> the event-time column the plan needs it ordered or watermarked by
    time_columns: dict[str, str]
    #: one line per operator: what it is and why it was chosen
    steps: list[str]
    schema: pa.Schema
    #: source name -> the columns the plan reads of it (a loader need read no others)
    scanned: dict[str, set[str]] = field(default_factory=dict)


@dataclass
class _Col:
    relation: str | None
    name: str  # DataFusion's name
    column: str | None  # splice's column, None for a window table's virtual columns
    expr: pc.Expression | None = None  # how to compute a virtual column, where it can be


@dataclass
class _Window:
    table: WindowTable
    size: int
    slide: int


@dataclass(frozen=True)
class _KeyedJoin:
    """A join on keys over count windows as planned so far: its node, its input relations and
    its predicates ``(input, column, input, column)`` by input position."""

    node: str
    inputs: tuple[_Rel, ...]
    predicates: tuple[tuple[int, str, int, str], ...]
    window: int
    impl: str

    def locate(self, column: str, schema: pa.Schema) -> tuple[int, str]:
        """The input and input column behind ``column`` of the join's output ``schema``."""
        p = schema.get_field_index(column)
        for i, rel in enumerate(self.inputs):
            if p < len(rel.schema):
                return i, rel.schema.names[p]
            p -= len(rel.schema)
        raise AssertionError(f"{column} is not an output column of {self.node}")


@dataclass
class _Rel:
    """One planned relation: the stream or node it is read from, and its columns."""

    node: str
    schema: pa.Schema
    cols: list[_Col]
    source: str | None = None  # the source it streams from, through stateless operators only
    #: splice column -> the source column it passes on unchanged (through selects and projections)
    origin: dict[str, str] = field(default_factory=dict)
    window: _Window | None = None  # a window table's rows, not yet windowed
    changelog: bool = False  # rows of an updating aggregate: the first column is ``op``
    keyed: _KeyedJoin | None = None  # the rows of a count-window join on keys, as it outputs them

    def time_of(self, source_column: str) -> str | None:
        """The splice column that carries ``source_column`` of the source, if one does."""
        return next((c for c, o in self.origin.items() if o == source_column), None)

    def find(self, relation: str | None, name: str) -> _Col:
        hits = [c for c in self.cols if c.name == name and (relation is None or c.relation == relation)]
        if not hits and relation is not None:
            hits = [c for c in self.cols if c.relation is None and c.name == f"{relation}.{name}"]
        if len(hits) != 1:
            label = f"{relation}.{name}" if relation else name
            raise PlanError(f"SQL: column {label} is {'ambiguous' if hits else 'unknown'} here")
        return hits[0]

    def resolve(self, relation: str | None, name: str) -> pc.Expression:
        col = self.find(relation, name)
        if col.column is not None:
            return pc.field(col.column)
        if col.expr is not None:
            return col.expr
        raise PlanError(f"SQL: {name} of a hopping window is known per window, not per row: a "
                        "query over HOP(...) must GROUP BY window_start and window_end (or join "
                        "two window tables on window_start)")


def datafusion_plan(query: QueryText, sources: Mapping[str, SourceTable]) -> Any:
    """DataFusion's optimized logical plan of ``query`` over empty tables of the sources'
    schemas (window tables get ``window_start`` and ``window_end`` of the time column's type)."""
    from datafusion import SessionContext

    ctx = SessionContext()
    for src in sources.values():
        ctx.register_record_batches(src.name, [[src.schema.empty_table().to_batches()[0]
                                                if src.schema.empty_table().num_rows else
                                                pa.RecordBatch.from_pylist([], schema=src.schema)]])
    for w in query.windows:
        base = _source(sources, w.table)
        if w.time not in base.schema.names:
            raise PlanError(f"SQL: {w.kind.upper()}({w.table}, {w.time}, ...): table {w.table!r} "
                            f"has no column {w.time!r}")
        t = base.schema.field(w.time).type
        schema = base.schema.append(pa.field("window_start", t)).append(pa.field("window_end", t))
        ctx.register_record_batches(w.alias, [[pa.RecordBatch.from_pylist([], schema=schema)]])
    try:
        frame = ctx.sql(query.sql)
        plan = frame.optimized_logical_plan()
        if "EmptyRelation" in plan.display_indent():
            # a condition folded to false: plan it as written, so the stream stays on the path
            return frame.logical_plan()
        return plan
    except Exception as exc:  # DataFusion raises plain exceptions with its message
        message = str(exc).split("\n")[0]
        raise PlanError(f"SQL: {message}") from None


def _source(sources: Mapping[str, SourceTable], name: str) -> SourceTable:
    if name not in sources:
        known = ", ".join(sorted(sources)) or "none"
        raise PlanError(f"SQL: table {name!r} is not defined (tables: {known}); "
                        "CREATE TABLE it or pass --table NAME=PATH")
    return sources[name]


def _safe(name: str, taken: set[str]) -> str:
    base = name if _NAME.fullmatch(name) else f"_c{len(taken)}"
    out = base
    while out in taken:
        out = f"{base}_{len(taken)}"
    taken.add(out)
    return out


def _window_start(time: str, t: pa.DataType, size: int, slide: int) -> pc.Expression:
    """``window_start`` of a tumbling window from the row's time (aligned at 0, floored)."""
    x = pc.field(time) if pa.types.is_integer(t) else pc.field(time).cast(pa.int64())
    if pa.types.is_date32(t):
        x = pc.field(time).cast(pa.int32()).cast(pa.int64())
    r = pc.Expression._call("modulo", [x, pc.scalar(slide)])
    r = pc.Expression._call("modulo", [pc.Expression._call("add", [r, pc.scalar(slide)]),
                                       pc.scalar(slide)])
    start = pc.Expression._call("subtract", [x, r])
    if pa.types.is_date32(t):
        return start.cast(pa.int32()).cast(t)
    return start if pa.types.is_integer(t) else start.cast(t)


def _shift_time(start: pc.Expression, t: pa.DataType, size: int) -> pc.Expression:
    """``start + size`` in the units of a time column of type ``t``."""
    if pa.types.is_integer(t):
        return pc.Expression._call("add", [start, pc.scalar(size)])
    if pa.types.is_date32(t):
        days = start.cast(pa.int32()).cast(pa.int64())
        return pc.Expression._call("add", [days, pc.scalar(size)]).cast(pa.int32()).cast(t)
    return pc.Expression._call("add", [start.cast(pa.int64()), pc.scalar(size)]).cast(t)


class _Planner:
    def __init__(self, sources: Mapping[str, SourceTable], query: QueryText, name: str,
                 settings: Mapping[str, str]) -> None:
        self.sources = sources
        self.windows = {w.alias: w for w in query.windows}
        self.hints = query.hints
        self.settings = settings
        self.name = name
        self.nodes: list[Node] = []
        self.steps: list[str] = []
        self.time_columns: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        #: the output schema of every stream and node the plan reads
        self.schemas: dict[str, pa.Schema] = {n: t.schema for n, t in sources.items()}
        self.scanned: dict[str, set[str]] = {}

    # -- helpers --
    def add(self, kind: str, spec: OperatorSpec | BindInputs, inputs: tuple[str, ...],
            schema: pa.Schema, why: str) -> str:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        node = f"{kind}_{self.counts[kind]}" if self.counts[kind] > 1 else kind
        self.nodes.append(Node(node, spec, inputs))
        self.schemas[node] = schema
        self.steps.append(f"{node}: {why} (reads {', '.join(inputs)})")
        return node

    def need_time(self, rel: _Rel, column: str, what: str) -> None:
        """``column`` of ``rel`` is the event time ``what`` reads: it must carry a source's
        time column (its WATERMARK's, or the one this query orders that source by)."""
        original = rel.origin.get(column)
        if rel.source is None or original is None:
            raise PlanError(f"SQL: {what} needs the event time of a source table; {column} is not "
                            "one here (time-based operators read a source's time column through "
                            "filters and projections only)")
        src = self.sources[rel.source]
        declared = src.time_column
        if declared is not None and declared != original:
            raise PlanError(f"SQL: {what} reads time column {original!r} of table {rel.source!r}, "
                            f"whose WATERMARK is on {declared!r}")
        t = src.schema.field(original).type
        if not (pa.types.is_integer(t) or pa.types.is_timestamp(t) or pa.types.is_date(t)):
            raise PlanError(f"SQL: {what} reads {original!r} of table {rel.source!r} as event time; "
                            f"it is {t}, not a TIMESTAMP, DATE or integer")
        have = self.time_columns.get(rel.source)
        if have is not None and have != original:
            raise PlanError(f"SQL: table {rel.source!r} is read by time {have!r} and {original!r} "
                            "in one query; one event-time column per table")
        self.time_columns[rel.source] = original

    def translate(self, rel: _Rel, expr: Any, computed: Mapping[str, Any] | None = None
                  ) -> pc.Expression:
        """``expr`` over ``rel``'s columns; a column named in ``computed`` (a projection looked
        through) stands for its expression."""
        types = {f.name: f.type for f in rel.schema}

        def resolve(relation: str | None, name: str) -> pc.Expression:
            if computed and relation is None and name in computed:
                return to_arrow(computed[name], resolve, types.get)
            return rel.resolve(relation, name)

        return to_arrow(expr, resolve, types.get)

    # -- the walk --
    def plan(self, node: Any) -> _Rel:
        v = node.to_variant()
        kind = type(v).__name__
        method = getattr(self, f"_{kind}", None)
        if method is None:
            raise PlanError(f"SQL: {kind} is not supported in a streaming query "
                            f"({node.display_indent().splitlines()[0].strip()})")
        return method(node, v)

    def _TableScan(self, node: Any, v: Any) -> _Rel:
        name = v.table_name()
        if v.filters():
            raise PlanError(f"SQL: filters pushed into the scan of {name!r} are not supported")
        if name in self.windows:
            w = self.windows[name]
            src = self.sources[w.table]
            t = src.schema.field(w.time).type
            where = f"{w.kind.upper()}({w.table}, {w.time}, ...)"
            if w.kind == "session":
                size = slide = interval_in_units(w.gap, t, where)  # the gap
                if size <= 0:
                    raise PlanError(f"SQL: {where}: the gap must be > 0, got {size}")
            else:
                size = interval_in_units(w.size, t, where)
                slide = interval_in_units(w.slide, t, where) if w.slide is not None else size
            if size <= 0 or slide <= 0 or slide > size:
                raise PlanError(f"SQL: {where}: needs 0 < slide <= size, got slide {slide}, size {size}")
            shown = [n for _, n in v.projection()] or [*src.schema.names, "window_start", "window_end"]
            cols = [_Col(name, n, n if n in src.schema.names else None) for n in shown]
            self.scanned.setdefault(w.table, set()).update(
                {n for n in shown if n in src.schema.names} | {w.time})
            if slide == size and w.kind == "tumble":  # bounds are a function of the row's time
                start = _window_start(w.time, t, size, slide)
                end = _shift_time(start, t, size)
                for c in cols:
                    c.expr = start if c.name == "window_start" else end if c.name == "window_end" else None
            return _Rel(w.table, src.schema, cols, source=w.table,
                        origin={n: n for n in src.schema.names}, window=_Window(w, size, slide))
        src = _source(self.sources, name)
        # the columns the scan hands on (DataFusion prunes the others); all of them stream
        shown = [n for _, n in v.projection()] or src.schema.names
        self.scanned.setdefault(name, set()).update(shown)
        if src.time_column is not None:
            self.scanned[name].add(src.time_column)
        return _Rel(name, src.schema, [_Col(name, n, n) for n in shown],
                    source=name, origin={n: n for n in src.schema.names})

    def _SubqueryAlias(self, node: Any, v: Any) -> _Rel:
        rel = self.plan(node.inputs()[0])
        alias = v.alias()
        rel.cols = [_Col(alias, c.name, c.column, c.expr) for c in rel.cols]
        return rel

    def _Filter(self, node: Any, v: Any) -> _Rel:
        rel = self.plan(node.inputs()[0])
        predicate = self.translate(rel, v.predicate())
        out = self.add("select", Select(predicate), (rel.node,), rel.schema,
                       f"Select WHERE {v.predicate().canonical_name()}")
        return _Rel(out, rel.schema, rel.cols, rel.source, rel.origin, rel.window, rel.changelog)

    def _Projection(self, node: Any, v: Any) -> _Rel:
        rel = self.plan(node.inputs()[0])
        taken: set[str] = set()
        out_cols: list[_Col] = []
        columns: dict[str, pc.Expression] = {}
        origin: dict[str, str] = {}
        if rel.changelog:  # the changelog's op column travels with every projection of it
            columns[OP] = pc.field(OP)
            taken.add(OP)
            out_cols.append(_Col(None, OP, OP))
        for e in v.projections():
            base = unalias(e)
            if e.variant_name() == "Alias":
                relation, name = None, e.to_variant().alias()
            elif base.variant_name() == "Column":
                relation, name = base.to_variant().relation(), base.to_variant().name()
            else:
                relation, name = None, e.schema_name()
            if base.variant_name() == "Column" and rel.window is not None:
                col = rel.find(base.to_variant().relation(), base.to_variant().name())
                if col.column is None:  # window_start/window_end pass through to the aggregate
                    out_cols.append(_Col(relation, name, None, col.expr))
                    continue
            expr = self.translate(rel, e)
            column = _safe(name, taken)
            columns[column] = expr
            out_cols.append(_Col(relation, name, column))
            plain = _field_name(expr)
            if plain is not None and plain in rel.origin:
                origin[column] = rel.origin[plain]
        if rel.window is not None and rel.window.table.time not in origin.values():
            # the window's time column travels on to the windowed operator
            source_time = rel.time_of(rel.window.table.time)
            assert source_time is not None
            column = _safe(rel.window.table.time, taken)
            columns[column] = pc.field(source_time)
            origin[column] = rel.window.table.time
        last = self.nodes[-1] if self.nodes else None
        if (rel.window is None and last is not None and last.name == rel.node
                and isinstance(last.spec, GroupBy | WindowAggregate | UpdatingAggregate
                               | SessionWindowAggregate)
                and [_field_name(e) for e in columns.values()] == rel.schema.names):
            # a projection that only names an aggregate's results: the aggregate names them
            renames = dict(zip(rel.schema.names, columns, strict=True))
            lead = len(rel.schema.names) - len(last.spec.aggregates)
            if all(renames[n] == n for n in rel.schema.names[:lead]):
                spec = dataclasses.replace(last.spec, aggregates=[
                    Agg(renames[a.name], a.func, a.input) for a in last.spec.aggregates])
                schema = spec.output_schema({0: self.schemas[last.inputs[0]]})
                self.nodes[-1] = Node(last.name, spec, last.inputs)
                self.schemas[last.name] = schema
                return _Rel(rel.node, schema, out_cols, rel.source, origin, rel.window,
                            rel.changelog)
        if (rel.keyed is not None and last is not None and last.name == rel.node
                and all(_field_name(e) in rel.schema.names for e in columns.values())):
            # a projection that only picks and names a count-window join's columns stays a view
            # of the join's output, so that a stream joined onto it joins the same multiway join
            cols = [_Col(c.relation, c.name, _field_name(columns[c.column]), c.expr)
                    if c.column is not None else c for c in out_cols]
            return _Rel(rel.node, rel.schema, cols, rel.source, rel.origin, rel.window,
                        keyed=rel.keyed)
        schema = result_types(rel.schema, list(columns.values()), list(columns), "SQL projection")
        if list(columns) == rel.schema.names and all(
                e.equals(pc.field(n)) for n, e in columns.items()):
            return _Rel(rel.node, rel.schema, out_cols, rel.source, rel.origin, rel.window)
        out = self.add("project", Project(columns), (rel.node,), schema,
                       f"Project {', '.join(columns)}")
        return _Rel(out, schema, out_cols, rel.source if origin else None, origin, rel.window,
                    rel.changelog)

    def _Aggregate(self, node: Any, v: Any) -> _Rel:
        child = node.inputs()[0]
        # a projection right below (DataFusion's common subexpressions, renames) is looked
        # through: its expressions go into the aggregate's inputs, exact arithmetic stays exact
        computed: dict[str, Any] = {}
        if type(child.to_variant()).__name__ == "Projection":
            for e in child.to_variant().projections():
                if e.variant_name() == "Alias":
                    computed[e.to_variant().alias()] = unalias(e)
            child = child.inputs()[0]
        where = None
        cv = child.to_variant()
        if type(cv).__name__ == "Filter":
            inner = self.plan(child.inputs()[0])
            if inner.window is None:
                where = self.translate(inner, cv.predicate())
                rel = inner
            else:
                rel = self.plan(child)
        else:
            rel = self.plan(child)
        keys: list[str] = []
        out_cols: list[_Col] = []
        window_cols = []
        pre: dict[str, pc.Expression] = {}
        taken = set(rel.schema.names)
        for g in v.group_by_exprs():
            base = unalias(g)
            relation = base.to_variant().relation() if base.variant_name() == "Column" else None
            name = (g.to_variant().alias() if g.variant_name() == "Alias" else
                    base.to_variant().name() if base.variant_name() == "Column" else g.schema_name())
            plain = None
            if base.variant_name() == "Column":
                plain = _field_name(self.translate(rel, base, computed)) \
                    if relation is None and base.to_variant().name() in computed else None
            if base.variant_name() == "Column" and (plain is not None or not (
                    relation is None and base.to_variant().name() in computed)):
                col = (rel.find(None, plain) if plain is not None and plain in rel.schema.names
                       else rel.find(relation, base.to_variant().name()))
                if col.column is None:
                    window_cols.append((relation, name, col.name))
                    continue
                keys.append(col.column)
                out_cols.append(_Col(relation, name, col.column))
            else:
                column = _safe(name, taken)
                pre[column] = self.translate(rel, g, computed)
                keys.append(column)
                out_cols.append(_Col(None, name, column))
        aggs: list[Agg] = []
        agg_cols: list[_Col] = []
        for a in v.aggregate_exprs():
            name = a.to_variant().alias() if a.variant_name() == "Alias" else a.schema_name()
            fn = unalias(a)
            if fn.variant_name() != "AggregateFunction":
                raise PlanError(f"SQL: {a.canonical_name()} is not an aggregate splice computes")
            if " FILTER (WHERE" in fn.canonical_name():
                raise PlanError(f"SQL: {fn.canonical_name()}: aggregate FILTER clauses are not supported")
            f = fn.to_variant()
            func = f.aggregate_type().lower()
            if f.is_distinct():
                raise PlanError(f"SQL: {fn.canonical_name()}: DISTINCT aggregates are not supported")
            if func not in ("count", "sum", "avg", "min", "max"):
                raise PlanError(f"SQL: aggregate {func}() is not supported (count, sum, avg, min, max are)")
            args = f.args()
            column = _safe(name, taken | set(keys) | {c.column for c in agg_cols if c.column})
            taken.add(column)
            arg: Any = None
            if args and not (func == "count" and unalias(args[0]).variant_name() == "Literal"
                             and literal_value(unalias(args[0])) is not None):
                base = unalias(args[0])
                expr = self.translate(rel, base, computed)
                if _field_name(expr) is not None:
                    arg = _field_name(expr)
                else:
                    try:
                        arg = as_arith(expr) if func in ("sum", "avg") else None
                    except Exception:  # not exact arithmetic: computed by a projection first
                        arg = None
                    if arg is None:
                        tmp = _safe(f"_arg_{column}", taken)
                        pre[tmp] = expr
                        arg = tmp
            aggs.append(Agg(column, func, arg))  # type: ignore[arg-type]
            agg_cols.append(_Col(None, name, column))
        if pre:
            passed = {n: pc.field(n) for n in rel.schema.names}
            inputs = {**passed, **pre}
            schema = result_types(rel.schema, list(inputs.values()), list(inputs),
                                  "SQL aggregate input")
            pnode = self.add("project", Project(inputs), (rel.node,), schema,
                             f"Project the computed keys and inputs {', '.join(pre)}")
            rel = _Rel(pnode, schema, rel.cols + [_Col(None, c, c) for c in pre], rel.source,
                       rel.origin, rel.window)
        if window_cols:
            if rel.window is None:
                raise PlanError("SQL: window_start/window_end come from TUMBLE or HOP in FROM")
            w = rel.window
            time = rel.time_of(w.table.time)
            assert time is not None
            self.need_time(rel, time, f"{w.table.kind.upper()} window aggregate")
            if w.table.kind == "session":
                spec: OperatorSpec = SessionWindowAggregate(time, w.size, keys=keys, aggregates=aggs)
                schema = spec.output_schema({0: rel.schema})
                node_name = self.add("session_window", spec, (rel.node,), schema,
                                     f"SessionWindowAggregate: sessions of {keys or 'all rows'} "
                                     f"with gaps under {w.size} on {time}, each emitted when the "
                                     "watermark passes its end")
            else:
                spec = WindowAggregate(time, w.size, w.slide if w.slide != w.size else None,
                                       keys=keys, aggregates=aggs)
                schema = spec.output_schema({0: rel.schema})
                node_name = self.add("window_aggregate", spec, (rel.node,), schema,
                                     f"WindowAggregate: {w.table.kind} windows of {w.size} (slide "
                                     f"{w.slide}) on {time}, keys {keys or 'none'}, emitted when "
                                     "the watermark passes a window's end")
            cols = [_Col(rel_, name, orig) for rel_, name, orig in window_cols]
            return _Rel(node_name, schema, cols + out_cols + agg_cols)
        if rel.window is not None:
            raise PlanError(f"SQL: a query over {rel.window.table.kind.upper()}(...) must GROUP BY "
                            "window_start and window_end (or join two window tables on window_start)")
        folded = " with the filter below it folded in" if where is not None else ""
        if not self.bounded():
            updating = UpdatingAggregate(keys, aggs, where=where)
            schema = updating.output_schema({0: rel.schema})
            node_name = self.add("updating_aggregate", updating, (rel.node,), schema,
                                 f"UpdatingAggregate keys {keys or 'none (global)'}{folded}: "
                                 "over a stream, a changelog ('+'/'-' in op) on every watermark")
            return _Rel(node_name, schema, [_Col(None, OP, OP)] + out_cols + agg_cols,
                        changelog=True)
        spec = GroupBy(keys, aggs, where=where)
        schema = spec.output_schema({0: rel.schema})
        node_name = self.add("group_by", spec, (rel.node,), schema,
                             f"GroupBy keys {keys or 'none (global)'}{folded}, answered at "
                             "the end of its input")
        return _Rel(node_name, schema, out_cols + agg_cols)

    def _Sort(self, node: Any, v: Any) -> _Rel:
        rel = self.plan(node.inputs()[0])
        if rel.changelog:
            raise PlanError("SQL: ORDER BY over an updating aggregate of a stream is not supported "
                            "(its answer changes with every watermark); order its changelog's "
                            "consumer, or aggregate in windows")
        keys = []
        for s in v.sort_exprs():
            e = unalias(s.expr())
            if e.variant_name() != "Column":
                raise PlanError(f"SQL: ORDER BY {e.canonical_name()}: sort by a column or an alias "
                                "of the select list")
            col = rel.find(e.to_variant().relation(), e.to_variant().name())
            if col.column is None:
                raise PlanError(f"SQL: ORDER BY {col.name}: not a column here")
            keys.append((col.column, "ascending" if s.ascending() else "descending"))
        fetch = v.get_fetch_val()
        spec: OperatorSpec = TopK(keys, int(fetch)) if fetch is not None else OrderBy(keys)
        what = f"TopK k={fetch}" if fetch is not None else "OrderBy"
        out = self.add("top_k" if fetch is not None else "order_by", spec, (rel.node,), rel.schema,
                       f"{what} by {', '.join(k for k, _ in keys)}, emitted at the end of its input")
        return _Rel(out, rel.schema, rel.cols)

    def _Limit(self, node: Any, v: Any) -> _Rel:
        raise PlanError("SQL: LIMIT without ORDER BY picks arbitrary rows of a stream; "
                        "add ORDER BY (planned as TopK)")

    def _Join(self, node: Any, v: Any) -> _Rel:
        left, right = (self.plan(n) for n in node.inputs())
        if left.changelog or right.changelog:
            raise PlanError("SQL: a join over an updating aggregate's changelog is not supported; "
                            "join first, or aggregate in windows")
        how = _JOIN_TYPES.get(str(v.join_type()))
        if how is None:
            raise PlanError(f"SQL: {v.join_type()} joins are not supported (inner, left, right, full are)")
        pairs = []
        for a, b in v.on():
            a, b = unalias(a), unalias(b)
            if a.variant_name() != "Column" or b.variant_name() != "Column":
                raise PlanError(f"SQL: join key {a.canonical_name()} = {b.canonical_name()}: "
                                "join on columns")
            ca = _side_col(left, right, a)
            cb = _side_col(left, right, b)
            if ca[0] == cb[0]:
                raise PlanError(f"SQL: join key {a.canonical_name()} = {b.canonical_name()} "
                                "compares one input with itself")
            (_, lcol), (_, rcol) = sorted([ca, cb], key=lambda x: x[0])
            pairs.append((lcol, rcol))
        window_pairs = [(lc, rc) for lc, rc in pairs if lc.column is None or rc.column is None]
        if left.node == right.node:
            right = self._copy(right)
        if left.window is not None or right.window is not None:
            return self._window_join(left, right, pairs, window_pairs, v, how)
        filt = v.filter()
        terms = _conjuncts(filt) if filt is not None else []
        if _two_sided_band(terms, left, right):
            if not pairs:
                return self._band_join(left, right, filt, how)
            return self._interval_join(left, right, pairs, filt, how)
        return self._equi_join(left, right, pairs, filt, how)

    def bounded(self) -> bool:
        """Whether every table the plan has read so far is finite."""
        return all(self.sources[s].bounded for s in self.scanned if s in self.sources)

    def _window_hint(self) -> int | None:
        hint = self.hints.get("WINDOW")
        if hint is None:
            return None
        try:
            window = int(hint)
        except ValueError:
            raise PlanError(f"SQL: /*+ WINDOW({hint}) */: expected a number of rows") from None
        if window < 1:
            raise PlanError(f"SQL: /*+ WINDOW({hint}) */: expected a number of rows >= 1")
        return window

    def _band_join(self, left: _Rel, right: _Rel, filt: Any, how: str) -> _Rel:
        """A join on ``lower <= r.x - l.x <= upper`` alone (``abs(l.x - r.x) <= e``, ``BETWEEN``):
        the index-based band join over count windows (PIM-Tree, §4) of ``/*+ WINDOW(n) */``."""
        window = self._window_hint()
        if window is None:
            raise PlanError("SQL: a band join (abs(l.x - r.x) <= e, or r.x BETWEEN l.x - a AND "
                            "l.x + b without equal keys) runs over count windows: give "
                            "/*+ WINDOW(n) */, the rows each input keeps")
        if how != "inner":
            raise PlanError(f"SQL: the band join computes inner joins only, got a {how} join")
        lower = upper = None
        columns: set[tuple[str, str]] = set()
        for term in _conjuncts(filt):
            got = _abs_term(term, left, right)
            if got is not None:
                (lc, rc), e = got
                columns.add((lc, rc))
                lower = -e if lower is None else max(lower, -e)
                upper = e if upper is None else min(upper, e)
                continue
            bound = _band_term(term, left, right)
            if bound is None:
                raise PlanError(f"SQL: a band join's condition holds its band only; "
                                f"{term.canonical_name()} is not part of one")
            pair, op, c = bound
            columns.add(pair)
            if op in (">", ">="):
                c = c if op == ">=" else c + 1
                lower = c if lower is None else max(lower, c)
            else:
                c = c if op == "<=" else c - 1
                upper = c if upper is None else min(upper, c)
        if lower is None or upper is None or len(columns) != 1:
            raise PlanError("SQL: a band join needs a band bounded both ways on one column per "
                            f"side, got {filt.canonical_name()}")
        (lc, rc), = columns
        from splice.joins.band.band_join import BandJoin
        from splice.joins.common.join_windows import POSITION

        spec = BindInputs(BandJoin, {"on": (lc, rc), "lower": lower, "upper": upper,
                                     "window": window, "index": "pimtree", "order": POSITION})
        schema = self._join_output(spec, left, right)
        node = self.add("band_join", spec, (left.node, right.node), schema,
                        f"BandJoin (PIM-Tree): {lower} <= {rc} - {lc} <= {upper} over count "
                        f"windows of {window} rows, inputs merged by arrival position")
        return self._joined(node, schema, left, right)

    def _equi_join(self, left: _Rel, right: _Rel, pairs: list[tuple[_Col, _Col]], filt: Any,
                   how: str) -> _Rel:
        """A join on keys alone: over all rows of finite tables, or over count windows given by
        a ``/*+ WINDOW(n) */`` hint; the other terms of its condition filter its output."""
        window = self._window_hint()
        if window is None and not self.bounded() and "state_ttl" in self.settings:
            return self._ttl_join(left, right, pairs, filt, how)
        if window is None and not self.bounded():
            raise PlanError("SQL: a join of streams needs a bound on its state: a time band "
                            "(r.ts BETWEEN l.ts - a AND l.ts + b), two window tables joined on "
                            "window_start, a count window /*+ WINDOW(n) */ or SET state_ttl")
        if not pairs:
            raise PlanError("SQL: a join needs an equality of keys (a cross join is not supported)")
        if window is None:
            return self._table_join(left, right, pairs, filt, how)
        if how != "inner":
            raise PlanError(f"SQL: a {how} join over count windows is not supported; inner joins "
                            "are")

        return self._filtered(self._keyed_join(left, right, pairs, window), filt)

    def _keyed_join(self, left: _Rel, right: _Rel, pairs: list[tuple[_Col, _Col]],
                    window: int) -> _Rel:
        """An inner join on keys over count windows: a hash join (``/*+ JOIN_IMPL(fast|hbsj)
        */``, fast by default). Joined right onto such a join (no filter between them, the same
        window), a stream joins the same multiway join: the join keeps each input's last
        ``window`` rows, not the last ``window`` pairs of the join below it."""
        from splice.joins.multiway.multiway_join import keyed_join

        impl = (self.hints.get("JOIN_IMPL") or "fast").lower()
        if impl not in ("fast", "hbsj"):
            raise PlanError(f"SQL: /*+ JOIN_IMPL({impl}) */: expected fast or hbsj")
        below = left.keyed
        if below is not None and (below.window, below.impl) == (window, impl) and \
                self.nodes[-1].name == below.node:
            self.nodes.pop()
            self.steps.pop()
            del self.schemas[below.node]
            inputs, predicates = [*below.inputs, right], list(below.predicates)
            for lc, rc in pairs:
                predicates.append((*below.locate(str(lc.column), left.schema), len(below.inputs),
                                   str(rc.column)))
        else:
            inputs = [left, right]
            predicates = [(0, str(lc.column), 1, str(rc.column)) for lc, rc in pairs]
        spec = BindInputs(keyed_join, {"predicates": tuple(predicates), "window": window,
                                       "impl": impl},
                          fields=tuple(f"in{i}" for i in range(len(inputs))))
        ids = list(range(1, len(inputs) + 1))
        schema = spec.bind(ids).output_schema(
            {i: rel.schema for i, rel in zip(ids, inputs, strict=True)})
        keys = ", ".join(f"{inputs[a].node}.{ca}={inputs[b].node}.{cb}"
                         for a, ca, b, cb in predicates)
        kind = "multiway hash join" if len(inputs) > 2 else "hash join"
        node = self.add("equi_join", spec, tuple(rel.node for rel in inputs), schema,
                        f"{kind} (inner, {impl}) on {keys}: count windows of {window} rows of "
                        "each input (WINDOW hint)")
        joined = self._joined(node, schema, left, right)
        joined.keyed = _KeyedJoin(node, tuple(inputs), tuple(predicates), window, impl)
        return joined

    def _ttl_join(self, left: _Rel, right: _Rel, pairs: list[tuple[_Col, _Col]], filt: Any,
                  how: str) -> _Rel:
        """``SET state_ttl = D``: a join on keys over streams keeps each row for ``D`` of event
        time, so it pairs rows with equal keys whose times differ by at most ``D`` (the hash join
        over a time window; with nothing late, every such pair)."""
        if how != "inner":
            raise PlanError(f"SQL: a {how} join under state_ttl is not supported; inner joins are")
        if not pairs:
            raise PlanError("SQL: a join needs an equality of keys (a cross join is not supported)")
        times = []
        for rel in (left, right):
            declared = self.sources[rel.source].time_column if rel.source else None
            column = rel.time_of(declared) if declared else None
            if column is None:
                raise PlanError("SQL: state_ttl bounds a join by event time: both inputs must be "
                                "streams with a time column, passed through unchanged")
            self.need_time(rel, column, "a join under state_ttl")
            times.append(column)
        if times[0] != times[1]:
            raise PlanError(f"SQL: state_ttl joins inputs whose time columns share a name; got "
                            f"{times[0]!r} and {times[1]!r}")
        t = left.schema.field(times[0]).type
        ttl = duration_in_units(self.settings["state_ttl"], t, "SET state_ttl")
        from splice.joins.common.join_windows import TimeWindow
        from splice.joins.hash.hash_window_join import HashWindowJoin

        spec = BindInputs(HashWindowJoin, {"on": [lc.column for lc, _ in pairs],
                                           "right_on": [rc.column for _, rc in pairs],
                                           "window": TimeWindow(ttl, times[0])})
        schema = self._join_output(spec, left, right)
        node = self.add("hash_join", spec, (left.node, right.node), schema,
                        f"HashWindowJoin (inner) on {', '.join(f'{a.column}={b.column}' for a, b in pairs)}"
                        f": state_ttl keeps each row {ttl} time units, pairs within that of each other")
        return self._filtered(self._joined(node, schema, left, right), filt)

    def _table_join(self, left: _Rel, right: _Rel, pairs: list[tuple[_Col, _Col]], filt: Any,
                    how: str) -> _Rel:
        """A join on keys of finite tables: Arrow's hash join when both have ended (every join
        type); other terms of an inner join's condition filter its pairs."""
        if filt is not None and how != "inner":
            raise PlanError(f"SQL: a {how} join of finite tables may hold key equalities only; "
                            f"{filt.canonical_name()} would change which rows pad")
        from splice.joins.hash.table_join import TableJoin

        spec = BindInputs(TableJoin, {"on": [lc.column for lc, _ in pairs],
                                      "right_on": [rc.column for _, rc in pairs], "how": how})
        schema = self._join_output(spec, left, right)
        node = self.add("table_join", spec, (left.node, right.node), schema,
                        f"TableJoin ({how}) on "
                        f"{', '.join(f'{a.column}={b.column}' for a, b in pairs)}: every input is "
                        "finite, so Arrow's hash join answers it when both have ended")
        return self._filtered(self._joined(node, schema, left, right), filt)

    def _filtered(self, rel: _Rel, filt: Any) -> _Rel:
        """``rel`` kept where ``filt`` (the join condition's terms besides its keys) holds."""
        if filt is None:
            return rel
        out = self.add("select", Select(self.translate(rel, filt)), (rel.node,), rel.schema,
                       "Select: the join condition's other terms")
        return _Rel(out, rel.schema, rel.cols)

    def _copy(self, rel: _Rel) -> _Rel:
        cols = {n: pc.field(n) for n in rel.schema.names}
        out = self.add("project", Project(cols), (rel.node,), rel.schema,
                       "Project: a second stream of the same table for a self-join")
        return _Rel(out, rel.schema, rel.cols, rel.source, rel.origin, rel.window)

    def _join_output(self, spec: BindInputs, left: _Rel, right: _Rel) -> pa.Schema:
        return spec.bind([1, 2]).output_schema({1: left.schema, 2: right.schema})

    def _interval_join(self, left: _Rel, right: _Rel, pairs: list[tuple[_Col, _Col]],
                       filt: Any, how: str) -> _Rel:
        lower: tuple[int, bool] | None = None
        upper: tuple[int, bool] | None = None
        times: set[tuple[str, str]] = set()
        rest = []
        for term in _conjuncts(filt):
            bound = _band_term(term, left, right)
            if bound is None:
                rest.append(term)
                continue
            (lt, rt), op, c = bound
            times.add((lt, rt))
            # r.t - l.t OP c
            if op in (">", ">="):
                cand = (c, op == ">=")
                if lower is None or (cand[0], not cand[1]) > (lower[0], not lower[1]):
                    lower = cand
            else:
                cand = (c, op == "<=")
                if upper is None or (cand[0], cand[1]) < (upper[0], upper[1]):
                    upper = cand
        if lower is None or upper is None or len(times) != 1:
            raise PlanError("SQL: a join of streams needs a time band on one time column per "
                            "side, bounded both ways: r.ts BETWEEN l.ts - a AND l.ts + b (or "
                            ">= and <=); got " + filt.canonical_name())
        if rest and how != "inner":
            raise PlanError(f"SQL: an outer interval join's condition may hold keys and the time "
                            f"band only; {rest[0].canonical_name()} would change which rows pad")
        (lt, rt), = times
        self.need_time(left, lt, "an interval join")
        self.need_time(right, rt, "an interval join")
        if not pairs:
            raise PlanError("SQL: an interval join needs at least one equality of keys")
        from splice.joins.temporal.interval_join import IntervalJoin

        spec = BindInputs(IntervalJoin, {
            "on": [lc.column for lc, _ in pairs], "right_on": [rc.column for _, rc in pairs],
            "time": lt, "right_time": rt, "lower": lower[0], "upper": upper[0],
            "lower_inclusive": lower[1], "upper_inclusive": upper[1], "how": how})
        schema = self._join_output(spec, left, right)
        node = self.add("interval_join", spec, (left.node, right.node), schema,
                        f"IntervalJoin ({how}): keys "
                        f"{', '.join(f'{a.column}={b.column}' for a, b in pairs)}, "
                        f"{rt} - {lt} in {'[' if lower[1] else '('}{lower[0]}, {upper[0]}"
                        f"{']' if upper[1] else ')'}: equi-keys and a time band bound the state")
        rel = self._joined(node, schema, left, right)
        if rest:
            from functools import reduce

            pred = reduce(lambda a, b: pc.Expression._call("and_kleene", [a, b]),
                          [self.translate(rel, t) for t in rest])
            out = self.add("select", Select(pred), (rel.node,), schema,
                           "Select: the join condition's other terms")
            rel = _Rel(out, schema, rel.cols)
        return rel

    def _joined(self, node: str, schema: pa.Schema, left: _Rel, right: _Rel) -> _Rel:
        names = schema.names
        cols: list[_Col] = []
        i = 0
        for side in (left, right):
            real = {f.name: None for f in side.schema}
            position = {n: i + k for k, n in enumerate(real)}
            for c in side.cols:
                if c.column is not None:
                    cols.append(_Col(c.relation, c.name, names[position[c.column]]))
                else:
                    cols.append(_Col(c.relation, c.name, None, c.expr))
            i += len(real)
        return _Rel(node, schema, cols)

    def _window_join(self, left: _Rel, right: _Rel, pairs: list[tuple[_Col, _Col]],
                     window_pairs: list[tuple[_Col, _Col]], v: Any, how: str) -> _Rel:
        lw, rw = left.window, right.window
        if "session" in {w.table.kind for w in (lw, rw) if w is not None}:
            raise PlanError("SQL: a window join of SESSION windows is not supported (TUMBLE and "
                            "HOP are)")
        if lw is None or rw is None:
            raise PlanError("SQL: a window join joins two window tables (TUMBLE or HOP on both sides)")
        if (lw.size, lw.slide, lw.table.kind) != (rw.size, rw.slide, rw.table.kind):
            raise PlanError("SQL: a window join needs the same windows on both sides, got "
                            f"{lw.table.kind}({lw.size}, {lw.slide}) and {rw.table.kind}({rw.size}, {rw.slide})")
        named = {(lc.name, rc.name) for lc, rc in window_pairs}
        if ("window_start", "window_start") not in named or any(a != b for a, b in named):
            raise PlanError("SQL: a window join must join on l.window_start = r.window_start "
                            "(and may on window_end)")
        if v.filter() is not None:
            raise PlanError(f"SQL: a window join's condition may hold key equalities only, got "
                            f"{v.filter().canonical_name()}")
        keys = [(lc, rc) for lc, rc in pairs if lc.column is not None and rc.column is not None]
        if not keys:
            raise PlanError("SQL: a window join needs at least one equality of keys besides window_start")
        ltime, rtime = left.time_of(lw.table.time), right.time_of(rw.table.time)
        assert ltime is not None and rtime is not None
        self.need_time(left, ltime, "a window join")
        self.need_time(right, rtime, "a window join")
        from splice.joins.temporal.window_join import WindowJoin

        spec = BindInputs(WindowJoin, {
            "on": [a.column for a, _ in keys], "right_on": [b.column for _, b in keys],
            "time": ltime, "right_time": rtime, "size": lw.size,
            "slide": lw.slide, "how": how})
        schema = self._join_output(spec, left, right)
        node = self.add("window_join", spec, (left.node, right.node), schema,
                        f"WindowJoin ({how}): {lw.table.kind} windows of {lw.size} (slide {lw.slide}), "
                        f"keys {', '.join(f'{a.column}={b.column}' for a, b in keys)}: a window's "
                        "rows are freed when the watermark passes its end")
        rel = self._joined(node, schema, left, right)
        names = schema.names
        lt = names[left.schema.names.index(ltime)]
        rt = names[len(left.schema.names) + right.schema.names.index(rtime)]
        t = schema.field(lt).type
        for k, c in enumerate(rel.cols):
            if c.column is None and lw.slide == lw.size:
                ts = lt if k < len(left.cols) else rt
                start = _window_start(ts, t, lw.size, lw.slide)
                c.expr = start if c.name == "window_start" else _shift_time(start, t, lw.size)
        return rel


def _field_name(expr: pc.Expression) -> str | None:
    text = str(expr)
    return text if _NAME.fullmatch(text) else None


def _conjuncts(expr: Any) -> list[Any]:
    e = unalias(expr)
    if e.variant_name() == "BinaryExpr" and e.to_variant().op() == "AND":
        v = e.to_variant()
        return _conjuncts(v.left()) + _conjuncts(v.right())
    return [e]


def _side_col(left: _Rel, right: _Rel, e: Any) -> tuple[int, _Col]:
    relation, name = e.to_variant().relation(), e.to_variant().name()
    for side, rel in ((0, left), (1, right)):
        try:
            return side, rel.find(relation, name)
        except PlanError:
            continue
    raise PlanError(f"SQL: column {e.canonical_name()} is in neither input of the join")


def _offset_column(e: Any) -> tuple[Any, int] | None:
    """``col``, ``col + c`` or ``col - c`` as (column expr, c)."""
    e = unalias(e)
    if e.variant_name() == "Column":
        return e, 0
    if e.variant_name() == "BinaryExpr":
        v = e.to_variant()
        a, b = unalias(v.left()), unalias(v.right())
        if v.op() in ("+", "-") and a.variant_name() == "Column" and b.variant_name() == "Literal":
            c = literal_value(b)
            if isinstance(c, int) and not isinstance(c, bool):
                return a, c if v.op() == "+" else -c
        if v.op() == "+" and b.variant_name() == "Column" and a.variant_name() == "Literal":
            c = literal_value(a)
            if isinstance(c, int) and not isinstance(c, bool):
                return b, c
    return None


def _two_sided_band(terms: list[Any], left: _Rel, right: _Rel) -> bool:
    """Whether ``terms`` bound ``r.x - l.x`` both ways for one pair of columns."""
    sides: dict[tuple[str, str], set[str]] = {}
    for t in terms:
        if _abs_term(t, left, right) is not None:
            return True
        bound = _band_term(t, left, right)
        if bound is not None:
            pair, op, _ = bound
            sides.setdefault(pair, set()).add("lo" if op in (">", ">=") else "hi")
    return any(len(v) == 2 for v in sides.values())


def _abs_term(term: Any, left: _Rel, right: _Rel) -> tuple[tuple[str, str], int] | None:
    """``abs(a - b) <= e`` (or ``< e``) of one left and one right integer column as
    ``((left col, right col), e)``; None otherwise."""
    if term.variant_name() != "BinaryExpr" or term.to_variant().op() not in ("<=", "<"):
        return None
    v = term.to_variant()
    f, lit = unalias(v.left()), unalias(v.right())
    if f.variant_name() != "ScalarFunction" or f.rex_call_operator() != "abs" \
            or lit.variant_name() != "Literal":
        return None
    e = literal_value(lit)
    if not isinstance(e, int) or isinstance(e, bool):
        return None
    diff = unalias(f.rex_call_operands()[0])
    if diff.variant_name() != "BinaryExpr" or diff.to_variant().op() != "-":
        return None
    a, b = unalias(diff.to_variant().left()), unalias(diff.to_variant().right())
    if a.variant_name() != "Column" or b.variant_name() != "Column":
        return None
    try:
        sa, ca = _side_col(left, right, a)
        sb, cb = _side_col(left, right, b)
    except PlanError:
        return None
    if sa == sb or ca.column is None or cb.column is None:
        return None
    e = e if v.op() == "<=" else e - 1
    return ((ca.column, cb.column) if sa == 0 else (cb.column, ca.column)), e


def _band_term(term: Any, left: _Rel, right: _Rel) -> tuple[tuple[str, str], str, int] | None:
    """A comparison ``A op B`` of one left and one right column, each plus a constant, as
    ``((left col, right col), op, c)`` meaning ``right - left op c``; None otherwise."""
    if term.variant_name() != "BinaryExpr":
        return None
    v = term.to_variant()
    op = v.op()
    if op not in _FLIP:
        return None
    a, b = _offset_column(v.left()), _offset_column(v.right())
    if a is None or b is None:
        return None
    try:
        sa, ca = _side_col(left, right, a[0])
        sb, cb = _side_col(left, right, b[0])
    except PlanError:
        return None
    if sa == sb or ca.column is None or cb.column is None:
        return None
    # (col_a + oa) op (col_b + ob)  <=>  col_a - col_b op ob - oa
    c = b[1] - a[1]
    if sa == 1:  # right - left op c
        return (cb.column, ca.column), op, c
    # left - right op c  <=>  right - left flip(op) -c
    return (ca.column, cb.column), _FLIP[op], -c


def plan_query(query: QueryText, sources: Mapping[str, SourceTable], name: str = "query",
               settings: Mapping[str, str] | None = None) -> SqlPlan:
    """Plan ``query`` over ``sources`` onto splice's operators (see the module docstring);
    ``settings`` are the ``SET`` values in force (``state_ttl``)."""
    root = datafusion_plan(query, sources)
    planner = _Planner(sources, query, name, settings or {})
    rel = planner.plan(root)
    columns: list[str] = []
    for c in rel.cols:  # a name the result already has gets _1, _2, ... (as DuckDB names them)
        label, k = c.name, 0
        while label in columns:
            k += 1
            label = f"{c.name}_{k}"
        columns.append(label)
    exprs: dict[str, pc.Expression] = {}
    for c, out in zip(rel.cols, columns, strict=True):
        exprs[out] = rel.resolve(c.relation, c.name) if c.column is None else pc.field(c.column)
    plain = list(exprs) == rel.schema.names and all(e.equals(pc.field(n)) for n, e in exprs.items())
    last = planner.nodes[-1] if planner.nodes else None
    if (not plain and last is not None and last.name == rel.node and isinstance(last.spec, Project)
            and all(_field_name(e) in last.spec.columns for e in exprs.values())):
        # the last projection names the result's columns itself
        inner = last.spec.columns
        merged = {out: inner[str(_field_name(e))] for out, e in exprs.items()}
        schema = result_types(planner.schemas[last.inputs[0]], list(merged.values()), list(merged), "SQL result")
        planner.nodes[-1] = Node(last.name, Project(merged), last.inputs)
        rel = _Rel(last.name, schema, rel.cols)
        plain = True
    if not plain or not planner.nodes:
        schema = result_types(rel.schema, list(exprs.values()), list(exprs), "SQL result")
        node = planner.add("project", Project(exprs), (rel.node,), schema, "Project the result columns")
        rel = _Rel(node, schema, rel.cols)
    for src, column in list(planner.time_columns.items()):
        if column == "*":
            del planner.time_columns[src]
    for src, column in planner.time_columns.items():
        planner.scanned.setdefault(src, set()).add(column)
    return SqlPlan(Query(name, tuple(planner.nodes)), columns, planner.time_columns,
                   planner.steps, rel.schema, planner.scanned)

