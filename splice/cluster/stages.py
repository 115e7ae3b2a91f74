"""Cutting a query into stages at its key-partitioned operator.

The first operator that keys its state (a join on keys, an interval or window join, a windowed
or unwindowed aggregation by keys) and the stateless operators before it form the keyed stage,
run as P subtasks, each on the rows of its key groups; the operators after it form the final
stage, run once, on every subtask's output. The key of each source stream is the keyed
operator's key columns on that input, which must reach it unchanged (by name).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from splice.core.errors import PlanError
from splice.core.plan import BindInputs, Node, Query

__all__ = ["StagePlan", "cut"]


@dataclass(frozen=True)
class StagePlan:
    """The keyed stage (its query, and each source stream's key columns), and the final stage
    (``None`` when the keyed operator is the query's last), which reads the keyed stage's
    output as the stream named :attr:`keyed_output`."""

    keyed: Query
    keys: dict[str, list[str]]
    keyed_output: str
    final: Query | None


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
    if keys:
        return [list(keys)]
    return None


def cut(query: Query, sources: Mapping[str, pa.Schema]) -> StagePlan:
    """The stages of ``query`` over source streams ``sources`` (module docstring)."""
    nodes = list(query.nodes)
    for i, node in enumerate(nodes):
        keys = _keys_of(node)
        if keys is None:
            continue
        by_stream: dict[str, list[str]] = {}
        for inp, cols in zip(node.inputs, keys, strict=True):
            stream = inp
            while stream not in sources:  # stateless operators between source and key
                before = next((n for n in nodes[:i] if n.name == stream), None)
                if before is None or len(before.inputs) != 1:
                    raise PlanError(f"scale-out: {node.name} reads {inp}, which is not a chain "
                                    "of operators from one source stream")
                stream = before.inputs[0]
            missing = [c for c in cols if c not in sources[stream].names]
            if missing:
                raise PlanError(f"scale-out: {node.name}'s key {missing} is not a column of "
                                f"stream {stream!r}: the key must reach it unchanged")
            if by_stream.setdefault(stream, cols) != cols:
                raise PlanError(f"scale-out: stream {stream!r} is keyed two ways")
        keyed = Query(query.name, tuple(nodes[: i + 1]), query.compose)
        rest = nodes[i + 1:]
        final = Query(query.name, tuple(rest)) if rest else None
        return StagePlan(keyed, by_stream, node.name, final)
    raise PlanError(f"scale-out: query {query.name!r} has no operator keyed by columns to "
                    "partition by (a join on keys, an aggregation by keys)")
