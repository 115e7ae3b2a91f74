"""The query assigner: maps a plan onto free processing units and emits the routing program.

Placement is greedy in path order: each node goes to the earliest brick after every brick that
produces one of its inputs (source streams are produced before brick 0) that has a free unit.
The routing program for a stream consumed in brick ``b`` sets the unit's bit in brick ``b``'s
local switch and ``ONWARD`` in every global switch from where the stream is produced up to
``b``; a query's result stream (and the late stream of each unit's each input) is tapped at the
global switch right after the brick that produces it. Routes shared by several queries are reference-counted,
so undeploying one query never cuts another's stream.

Deploying emits ``Install`` records, then switch instructions; undeploying emits the switch
instructions first, then ``Uninstall``. Both travel the path in order with the data, so a query
deployed at position p sees exactly the records after p. An undeployed query's units and route
counts are free at once (a later ``Install`` reaches a unit after its ``Uninstall``); its streams
are the engine's to drop, once the units report the ``Uninstall`` passed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from splice.core.errors import PlanError, SchemaError
from splice.core.operator import OperatorSpec
from splice.core.plan import BindInputs, Node, Query
from splice.core.records import Install, Instruction, Record, Uninstall
from splice.core.row_checks import RowCheck
from splice.core.stream import Stream, StreamCatalog
from splice.core.time import WatermarkStrategy
from splice.runtime.decomposer import ROW_ID
from splice.runtime.naming import name_streams
from splice.runtime.switch import ONWARD, TAP
from splice.runtime.synchronizer import RoundRobin
from splice.runtime.topology import Topology
from splice.runtime.unit import WATERMARKS, UnitProgram

__all__ = ["QueryAssigner", "Deployment"]



@dataclass
class Deployment:
    """Where a deployed query lives and which streams it made."""

    query: Query
    units: list[tuple[int, int]] = field(default_factory=list)  # (brick, unit index)
    streams: list[Stream] = field(default_factory=list)
    output: Stream | None = None
    #: (late stream id, the input it carries late rows of: a source stream or a node's name)
    late: list[tuple[int, str]] = field(default_factory=list)
    source_columns: dict[int, set[str] | None] = field(default_factory=dict)
    lswitch_bits: list[tuple[int, int, int]] = field(default_factory=list)  # (brick, stream, bit)
    onward: list[tuple[int, int]] = field(default_factory=list)  # (gswitch, stream)
    taps: list[tuple[int, int]] = field(default_factory=list)
    stateless: bool = True
    #: per source stream id: what the query's operators need of its rows (checked at the edge)
    checks: dict[int, list[RowCheck]] = field(default_factory=dict)


def _bound(node: Node, input_ids: list[int]) -> OperatorSpec:
    """The node's spec, with input stream ids filled in when it names its inputs by id."""
    if isinstance(node.spec, BindInputs):
        return node.spec.bind(input_ids)
    return node.spec


def _unsuffixed(names: set[str]) -> set[str]:
    """``names`` plus each with its ``_right`` suffixes removed (joins rename taken names so)."""
    out = set(names)
    for n in names:
        while n.endswith("_right"):
            n = n[: -len("_right")]
            out.add(n)
    return out


def _view_schema(schema: pa.Schema, columns: list[str] | None) -> pa.Schema:
    if columns is None:
        return schema
    return pa.schema([
        pa.field(ROW_ID, pa.int64(), False) if c == ROW_ID else schema.field(c) for c in columns
    ])


class QueryAssigner:
    """Places queries on ``topology``; grows it by a brick when a plan does not fit and ``grow``."""

    def __init__(self, topology: Topology, catalog: StreamCatalog, grow: bool = False):
        self.topology = topology
        self.catalog = catalog
        self.grow = grow
        self.deployed: dict[str, Deployment] = {}
        self._busy: set[tuple[int, int]] = set()
        self._lmask: Counter[tuple[int, int, int]] = Counter()
        self._gmask: Counter[tuple[int, int, int]] = Counter()  # (gswitch, stream, port)

    # -- placement -------------------------------------------------------------------------
    def _free_unit(self, after: int, query: str) -> tuple[int, int]:
        b = after + 1
        while True:
            while b < len(self.topology.bricks):
                for u in range(self.topology.units_per_brick):
                    if (b, u) not in self._busy:
                        self._busy.add((b, u))
                        return b, u
                b += 1
            if not self.grow:
                free = sum(
                    1 for bb in range(len(self.topology.bricks))
                    for uu in range(self.topology.units_per_brick) if (bb, uu) not in self._busy
                )
                raise PlanError(
                    f"query {query!r} does not fit the topology: no free unit after brick {after} "
                    f"({len(self.topology.bricks)} bricks x {self.topology.units_per_brick} units, "
                    f"{free} free); undeploy a query or enable growing the topology"
                )
            self.topology.grow()

    # -- routing ---------------------------------------------------------------------------
    def _route_local(self, dep: Deployment, brick: int, stream: int, unit: int) -> None:
        dep.lswitch_bits.append((brick, stream, unit))
        self._lmask[(brick, stream, unit)] += 1

    def _route_onward(self, dep: Deployment, produced_before: int, consumed_in: int, stream: int) -> None:
        # global switch g sits before brick g: a stream produced by brick p enters at g = p + 1
        for g in range(produced_before + 1, consumed_in + 1):
            dep.onward.append((g, stream))
            self._gmask[(g, stream, ONWARD)] += 1

    def _tap(self, dep: Deployment, produced_in: int, stream: int) -> None:
        dep.taps.append((produced_in + 1, stream))
        self._gmask[(produced_in + 1, stream, TAP)] += 1

    def _lswitch_program(self, brick: int, stream: int) -> Instruction:
        mask = 0
        for u in range(self.topology.units_per_brick):
            if self._lmask[(brick, stream, u)] > 0:
                mask |= 1 << u
        return Instruction(self.topology.bricks[brick].switch.block_id, stream, mask)

    def _gswitch_program(self, g: int, stream: int) -> Instruction:
        mask = (ONWARD if self._gmask[(g, stream, ONWARD)] > 0 else 0) | (
            TAP if self._gmask[(g, stream, TAP)] > 0 else 0
        )
        return Instruction(self.topology.gswitches[g].switch.block_id, stream, mask)

    def _program(self, dep: Deployment) -> list[Record]:
        out: list[Record] = []
        for brick, stream in dict.fromkeys((b, s) for b, s, _ in dep.lswitch_bits):
            out.append(self._lswitch_program(brick, stream))
        for g, stream in dict.fromkeys(dep.onward + dep.taps):
            out.append(self._gswitch_program(g, stream))
        return out

    # -- deploy / undeploy -----------------------------------------------------------------
    def deploy(
        self,
        query: Query,
        view: Callable[[Query, Stream, set[str] | None], list[str] | None],
        state: Mapping[str, Any] | None = None,
    ) -> tuple[Deployment, list[Record]]:
        """Place ``query``; return its deployment and the records that program the path.

        ``view(query, source, used)`` tells which columns of a source stream the query's unit
        sees (the decomposer's cut for that query); ``None`` means all of them. ``state`` maps
        unit keys (node name; ``node.split`` and ``node#i`` for replicas) to operator state taken
        by a snapshot: each operator is built from it.
        """
        state = state or {}
        if query.name in self.deployed:
            raise PlanError(f"query {query.name!r} is already deployed")
        dep = Deployment(query)
        dep.source_columns = self._needed_columns(query)
        produced: dict[str, tuple[Stream, int]] = {}  # node -> (stream, last producing brick)
        first_brick: dict[str, int] = {}  # replicas produce one stream from several bricks
        installs: list[Record] = []
        try:
            for node in query.nodes:
                inputs = [self._resolve(query, node.name, n, produced) for n in node.inputs]
                # a consumer of replicated output is routed from the first replica's brick on
                routes = [(s, first_brick.get(n, p)) for n, (s, p) in zip(node.inputs, inputs, strict=True)]
                spec = _bound(node, [st.id for st, _ in inputs])
                views, narrowed, out_schema = self._typecheck(query, node, spec, inputs, dep, view)
                sources = {st.id for st, p in inputs if p == -1}
                for sid, checks in spec.input_checks(narrowed).items():
                    if sid in sources:
                        dep.checks.setdefault(sid, []).extend(checks)
                if not spec.stateless:
                    dep.stateless = False
                # a derived stream keeps its one input's strategy (its idle timeout where it
                # meets other inputs downstream)
                strategy = inputs[0][0].watermark if len(inputs) == 1 else None
                out_stream = self._define(dep, query.stream_name(node.name), out_schema, strategy)
                after = max(p for _, p in inputs)
                if node.replicas > 1:
                    if len(inputs) != 1:
                        raise PlanError(f"query {query.name!r}: node {node.name!r} is replicated "
                                        "but has several inputs")
                    src, src_brick = inputs[0]
                    subs = [self._define(dep, f"{out_stream.name}#{i}", narrowed[src.id])
                            for i in range(node.replicas)]
                    key = f"{node.name}.split"
                    splitter = RoundRobin(tuple(s.id for s in subs)).build(
                        {src.id: narrowed[src.id]}, state.get(key))
                    rb = self._place(dep, query, key, splitter, [(src, src_brick)], out_stream,
                                     {src.id: views[src.id]}, after, installs, state,
                                     (node.inputs[0],), stateless=True)
                    bricks = []
                    for i, sub in enumerate(subs):
                        key = f"{node.name}#{i}"
                        logic = spec.build({sub.id: narrowed[src.id]}, state.get(key))
                        bricks.append(self._place(dep, query, key, logic, [(sub, rb)], out_stream,
                                                  {sub.id: None}, rb, installs, state,
                                                  (node.inputs[0],), stateless=True))
                    produced[node.name] = (out_stream, max(bricks))
                    first_brick[node.name] = min(bricks)
                    continue
                try:
                    logic = spec.build(narrowed, state.get(node.name))
                except SchemaError as exc:
                    raise SchemaError(f"query {query.name!r}, node {node.name!r}: "
                                      f"{self._named(exc)}") from exc
                b = self._place(dep, query, node.name, logic, routes, out_stream, views, after,
                                installs, state, node.inputs, stateless=spec.stateless)
                produced[node.name] = (out_stream, b)
            out_stream, out_brick = produced[query.output_node.name]
            dep.output = out_stream
            # carry every producer's output to the last producer, tap it once after that brick
            self._route_onward(dep, first_brick.get(query.output_node.name, out_brick), out_brick,
                               out_stream.id)
            self._tap(dep, out_brick, out_stream.id)
        except BaseException:
            self._release(dep)
            for st in dep.streams:
                self.catalog.drop(st.name)
            raise
        self.deployed[query.name] = dep
        return dep, installs + self._program(dep)

    def _resolve(
        self, query: Query, node: str, name: str, produced: dict[str, tuple[Stream, int]]
    ) -> tuple[Stream, int]:
        if name in produced:
            return produced[name]
        if name in self.catalog:
            return self.catalog[name], -1
        known = ", ".join(s.name for s in self.catalog if "." not in s.name) or "none"
        raise PlanError(
            f"query {query.name!r}: node {node!r} reads unknown stream {name!r} (defined: {known})"
        )

    def _needed_columns(self, query: Query) -> dict[int, set[str] | None]:
        """Columns of each source stream the plan needs.

        A source column travels when some node reads a column of that name, or when it would
        reach the result passed through (a selection keeps every column) and is not one the
        composer re-attaches. Dropping any other column changes no operator's input it reads
        and no result column. Computed over the full source schemas by name, a safe
        over-approximation.
        """
        schemas: dict[str, tuple[int, pa.Schema]] = {}  # node outputs, under provisional ids
        needed: dict[int, set[str]] = {}
        sources: list[Stream] = []
        for i, node in enumerate(query.nodes):
            inputs: list[tuple[int, pa.Schema]] = []
            for name in node.inputs:
                if name in schemas:
                    inputs.append(schemas[name])
                elif name in self.catalog:
                    src = self.catalog[name]
                    if src.id not in needed:
                        needed[src.id] = set()
                        sources.append(src)
                    inputs.append((src.id, src.schema))
                else:
                    self._resolve(query, node.name, name, {})  # raises naming the stream
            full = dict(inputs)
            try:
                spec = _bound(node, [sid for sid, _ in inputs])
                used = spec.columns_used(full)
                schemas[node.name] = (-1 - i, spec.output_schema(full))
            except SchemaError as exc:
                raise SchemaError(f"query {query.name!r}, node {node.name!r}: "
                                  f"{self._named(exc)}") from exc
            # a node reading all of its inputs reads every column name they hold
            read = set().union(*used.values()) if used else set()
            if used is None:
                read = set().union(*(set(sch.names) for _, sch in inputs))
            names = _unsuffixed(read)
            for src in sources:
                needed[src.id] = needed[src.id] | (names & set(src.schema.names))
        # columns passed through to the result travel too, except those the composer adds
        result = _unsuffixed(set(schemas[query.output_node.name][1].names))
        for src in sources:
            composed = set(query.compose.get(src.name, ()))
            needed[src.id] |= (result & set(src.schema.names)) - composed
        return {k: v for k, v in needed.items()}

    def _typecheck(self, query, node, spec, inputs, dep, view):
        try:
            views: dict[int, list[str] | None] = {
                s.id: None if p != -1 else view(query, s, dep.source_columns[s.id]) for s, p in inputs
            }
            narrowed = {s.id: _view_schema(s.schema, views[s.id]) for s, _ in inputs}
            return views, narrowed, spec.output_schema(narrowed)
        except SchemaError as exc:
            raise SchemaError(f"query {query.name!r}, node {node.name!r}: "
                              f"{self._named(exc)}") from exc

    def _named(self, exc: Exception) -> str:
        """The message with stream ids written as the streams' names."""
        return name_streams(str(exc), {s.id: s.name for s in self.catalog})

    def _define(self, dep: Deployment, name: str, schema: pa.Schema,
                watermark: WatermarkStrategy | None = None) -> Stream:
        stream = self.catalog.define(name, schema, watermark=watermark)
        dep.streams.append(stream)
        return stream

    def _place(self, dep, query, key, logic, inputs, out_stream, views, after, installs,
               state=None, labels=(), stateless=False) -> int:
        """Put ``logic`` on a free unit after brick ``after``; route its inputs; return the brick.

        Each input gets a late stream of its own schema, tapped after the brick, labelled by the
        name the plan gives the input (``labels``), or by the node's key where another unit of
        the query already uses that label."""
        b, u = self._free_unit(after, query.name)
        dep.units.append((b, u))
        late: dict[int, int] = {}
        taken = {label for _, label in dep.late}
        for i, (s, _) in enumerate(inputs):
            label = labels[i] if i < len(labels) else s.name
            if label in taken:
                label = f"{key}/{label}"
            lst = self._define(dep, f"{out_stream.name}.late@{b}.{u}.{i}", _view_schema(s.schema, views.get(s.id)))
            late[s.id] = lst.id
            dep.late.append((lst.id, label))
            self._tap(dep, b, lst.id)
        block = self.topology.bricks[b].units[u].block_id
        idle = {s.id: (s.watermark.idle_timeout if s.watermark is not None else None) for s, _ in inputs}
        row_ids = any(ROW_ID in (views.get(s.id) or ()) or ROW_ID in s.schema.names for s, _ in inputs)
        program = UnitProgram(query.name, logic, tuple(s.id for s, _ in inputs), out_stream.id, late,
                              dict(views), key, idle, stateless=stateless, row_ids=row_ids)
        program.restore_progress((state or {}).get(key + WATERMARKS))
        installs.append(Install(block, program))
        for s, p in inputs:
            self._route_local(dep, b, s.id, u)
            self._route_onward(dep, p, b, s.id)
        return b

    def _release(self, dep: Deployment) -> None:
        for key in dep.lswitch_bits:
            self._lmask[key] -= 1
        for g, s in dep.onward:
            self._gmask[(g, s, ONWARD)] -= 1
        for g, s in dep.taps:
            self._gmask[(g, s, TAP)] -= 1
        for bu in dep.units:
            self._busy.discard(bu)

    def undeploy(self, name: str) -> tuple[Deployment, list[Record]]:
        """Free ``name``'s units; return the records that unroute and clear them."""
        try:
            dep = self.deployed.pop(name)
        except KeyError:
            known = ", ".join(sorted(self.deployed)) or "none"
            raise PlanError(f"cannot undeploy unknown query {name!r} (deployed: {known})") from None
        self._release(dep)
        program = self._program(dep)
        clears: list[Record] = [
            Uninstall(self.topology.bricks[b].units[u].block_id) for b, u in dep.units
        ]
        return dep, program + clears
