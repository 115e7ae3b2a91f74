"""Cutting a query into stages at its key-partitioned operator.

The first operator that keys its state (a join on keys, an interval or window join, a windowed
or unwindowed aggregation by keys) and the stateless operators before it form the keyed stage,
run as P subtasks, each on the rows of its key groups; the operators after it form the final
stage, run once, on every subtask's output. The key of each source stream is the keyed
operator's key columns on that input, which must reach it unchanged (by name).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

import pyarrow as pa

from splice.core.errors import PlanError, SchemaError
from splice.core.plan import BindInputs, Node, Query

__all__ = ["StagePlan", "cut", "pre_aggregate"]


@dataclass(frozen=True)
class KeyedStage:
    """One keyed stage: its operators, the key columns of each stream it reads (a source, or the
    stage before it, by its output's name), and the operator whose rows leave it."""

    query: Query
    keys: dict[str, list[str]]
    output: str


@dataclass(frozen=True)
class StagePlan:
    """The keyed stages in order (each reads sources and the stage before it), and the final
    stage (``None`` when the last keyed stage ends the query), which reads the last keyed
    stage's output as the stream named by its ``output``."""

    stages: tuple[KeyedStage, ...]
    final: Query | None

    @property
    def keyed(self) -> Query:
        return self.stages[0].query

    @property
    def keys(self) -> dict[str, list[str]]:
        return self.stages[0].keys

    @property
    def keyed_output(self) -> str:
        return self.stages[-1].output


_AGGREGATIONS = ("GroupBy", "WindowAggregate", "UpdatingAggregate", "SessionWindowAggregate")


def _keys_of(node: Node) -> list[list[str]] | None:
    """The key columns of each input of ``node``, or None when it keys nothing."""
    spec = node.spec
    if isinstance(spec, BindInputs):
        on = spec.params.get("on")
        if on is None:
            return None
        on = [on] if isinstance(on, str) else list(on)
        right = spec.params.get("right_on")
        right = on if right is None else ([right] if isinstance(right, str) else list(right))
        return [on, right][: len(node.inputs)]
    keys = getattr(spec, "keys", None)
    if keys and type(spec).__name__ in _AGGREGATIONS:
        return [list(keys)]
    return None


def _stateless(node: Node) -> bool:
    return bool(getattr(node.spec, "stateless", False))


def cut(query: Query, sources: Mapping[str, pa.Schema]) -> StagePlan:
    """The stages of ``query`` over source streams ``sources`` (module docstring)."""
    nodes = list(query.nodes)
    stages: list[KeyedStage] = []
    external = set(sources)  # streams a stage may read: sources, the previous stage's output
    start = 0
    while True:
        k = next((i for i in range(start, len(nodes)) if _keys_of(nodes[i]) is not None), None)
        if k is None:
            break
        members = nodes[start: k + 1]
        names = {n.name for n in members}
        keyed = nodes[k]
        by_stream: dict[str, list[str]] = {}
        for inp, cols in zip(keyed.inputs, _keys_of(keyed) or [], strict=True):
            stream = inp
            while stream in names:  # stateless operators between a stream and the key
                before = next(n for n in members if n.name == stream)
                if len(before.inputs) != 1 or not _stateless(before):
                    raise PlanError(f"scale-out: {keyed.name} reads {inp}, which is not a chain "
                                    "of stateless operators from one stream")
                stream = before.inputs[0]
            if stream not in external:
                raise PlanError(f"scale-out: {keyed.name} reads {stream!r}, which is neither a "
                                "source nor the stage before it")
            if stream in sources:
                missing = [c for c in cols if c not in sources[stream].names]
                if missing:
                    raise PlanError(f"scale-out: {keyed.name}'s key {missing} is not a column of "
                                    f"stream {stream!r}: the key must reach it unchanged")
            if by_stream.setdefault(stream, cols) != cols:
                raise PlanError(f"scale-out: stream {stream!r} is keyed two ways")
        # operators after it that need no other partitioning stay in the stage: stateless ones,
        # and aggregations whose keys hold one input's whole key
        end = k + 1
        while end < len(nodes):
            nxt = nodes[end]
            if len(nxt.inputs) != 1 or nxt.inputs[0] != nodes[end - 1].name:
                break
            keys = _keys_of(nxt)
            if not (_stateless(nxt) or (keys is not None and any(
                    set(cols) <= set(keys[0]) for cols in by_stream.values()))):
                break
            end += 1
        members = nodes[start:end]
        stages.append(KeyedStage(Query(query.name, tuple(members), query.compose), by_stream,
                                 members[-1].name))
        external = set(sources) | {members[-1].name}
        start = end
    if not stages:
        raise PlanError(f"scale-out: query {query.name!r} has no operator keyed by columns to "
                        "partition by (a join on keys, an aggregation by keys)")
    rest = nodes[start:]
    if any(inp not in {n.name for n in rest} | {stages[-1].output} for n in rest for inp in n.inputs):
        raise PlanError(f"scale-out: the operators after {stages[-1].output} read more than its "
                        "output")
    return StagePlan(tuple(stages), Query(query.name, tuple(rest)) if rest else None)


#: how a partial aggregate's column merges: count and sum add up, min and max are kept
_MERGE: dict[str, Literal["sum", "min", "max"]] = {"count": "sum", "sum": "sum", "min": "min",
                                                     "max": "max"}


def pre_aggregate(plan: StagePlan, output: pa.Schema) -> StagePlan:
    """``plan`` with a global aggregate of its final stage split in two phases, when that is
    exact: each subtask of the last keyed stage folds its rows into one partial row, and the
    final stage merges the partials (counts and sums added, minima and maxima kept), so that one
    row per subtask crosses instead of every row the stage produces (the local-global
    aggregation of Flink's table planner). ``output`` is the last keyed stage's output schema.

    The split is made only for a blocking global :class:`~splice.ops.aggregate.GroupBy` of
    count, sum, min and max whose merged result types equal the one-phase result's, over no
    floating-point sum (whose rounding depends on the order of addition)."""
    from splice.ops.aggregate import Agg, GroupBy

    if plan.final is None:
        return plan
    head = plan.final.nodes[0]
    spec = head.spec
    if (type(spec) is not GroupBy or spec.keys or spec.state_backend != "memory"
            or any(a.func not in _MERGE for a in spec.aggregates)):
        return plan
    partial = GroupBy((), spec.aggregates, spec.where, name=spec.name)
    try:
        partial_schema = partial.output_schema({0: output})
        merge = GroupBy((), tuple(Agg(a.name, _MERGE[a.func], a.name) for a in spec.aggregates),
                        name=spec.name)
        exact = merge.output_schema({0: partial_schema}) == spec.output_schema({0: output})
    except (PlanError, SchemaError):
        return plan
    if not exact or any(pa.types.is_floating(partial_schema.field(a.name).type)
                        for a in spec.aggregates if a.func == "sum"):
        return plan
    last = plan.stages[-1]
    name = f"{head.name}__partial"
    stage_query = last.query
    stage = KeyedStage(replace(stage_query, nodes=(*stage_query.nodes,
                                                  Node(name, partial, (last.output,)))),
                       last.keys, name)
    final = replace(plan.final, nodes=(Node(head.name, merge, (name,)), *plan.final.nodes[1:]))
    return StagePlan((*plan.stages[:-1], stage), final)
