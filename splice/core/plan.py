"""Logical plans: a small, serializable DAG of operator specs over named streams.

A :class:`Query` is a list of :class:`Node` s in topological order. Each node names its input
streams: source streams defined on the engine, or earlier nodes of the same query (by node
name). The last node's output is the query's result stream. ``Query.chain`` builds the common
case of one source and a pipeline of operators.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from splice.core.errors import PlanError
from splice.core.operator import OperatorSpec

__all__ = ["Node", "Query", "BindInputs"]


@dataclass(frozen=True)
class BindInputs:
    """A spec whose input stream ids are known only at deployment.

    Multi-input operators (joins) name their inputs by stream id, and the streams that a plan's
    own nodes produce get their ids when the plan is deployed. ``BindInputs(HashWindowJoin,
    {"on": "k", "window": CountWindow(64)})`` builds ``HashWindowJoin(left=<id of the node's
    first input>, right=<id of its second>, on=..., window=...)`` then; ``fields`` names the
    parameters that receive the ids, in input order. Picklable when ``factory`` is a class.
    """

    factory: Callable[..., OperatorSpec]
    params: Mapping[str, Any] = field(default_factory=dict)
    fields: tuple[str, ...] = ("left", "right")

    def bind(self, input_ids: Sequence[int]) -> OperatorSpec:
        if len(input_ids) != len(self.fields):
            raise PlanError(
                f"{getattr(self.factory, '__name__', self.factory)} takes {len(self.fields)} inputs "
                f"({', '.join(self.fields)}), the node gives {len(input_ids)}"
            )
        return self.factory(**dict(self.params), **dict(zip(self.fields, input_ids, strict=True)))

    @property
    def name(self) -> str:
        return str(self.params.get("name", getattr(self.factory, "__name__", "operator"))).lower()

    @property
    def stateless(self) -> bool:
        return False


@dataclass(frozen=True)
class Node:
    """One operator of a plan: ``spec`` reading ``inputs`` (stream or node names).

    ``replicas > 1`` runs a stateless operator on that many units, the input split round-robin
    by batch and order restored where the replicas' outputs meet (the synchronizer).
    """

    name: str
    spec: OperatorSpec | BindInputs
    inputs: tuple[str, ...]
    replicas: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        if not self.inputs:
            raise PlanError(f"node {self.name!r} has no inputs")
        if self.replicas < 1:
            raise PlanError(f"node {self.name!r}: replicas must be >= 1, got {self.replicas}")
        if self.replicas > 1 and not self.spec.stateless:
            raise PlanError(
                f"node {self.name!r}: only stateless operators can be replicated, "
                f"{self.spec.name!r} keeps state"
            )


@dataclass(frozen=True)
class Query:
    """A named continuous query.

    ``compose`` maps a source stream to columns the composer re-attaches to each result row
    (by row id) — columns that never travel through the processing units.
    """

    name: str
    nodes: tuple[Node, ...]
    compose: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))
        if not self.name or "." in self.name:
            raise PlanError(f"query name {self.name!r} must be non-empty and contain no '.'")
        if not self.nodes:
            raise PlanError(f"query {self.name!r} has no operators")
        seen: set[str] = set()
        for n in self.nodes:
            if n.name in seen:
                raise PlanError(f"query {self.name!r}: node name {n.name!r} is used twice")
            seen.add(n.name)

    @classmethod
    def chain(
        cls,
        name: str,
        source: str | Sequence[str],
        *specs: OperatorSpec | BindInputs,
        compose: Mapping[str, Sequence[str]] | None = None,
        replicas: int = 1,
    ) -> Query:
        """``source -> specs[0] -> specs[1] -> ...``; ``replicas`` applies to stateless nodes."""
        if not specs:
            raise PlanError(f"query {name!r} has no operators")
        nodes = []
        inputs = (source,) if isinstance(source, str) else tuple(source)
        for i, spec in enumerate(specs):
            node = Node(f"{i}_{spec.name}", spec, inputs, replicas if spec.stateless else 1)
            nodes.append(node)
            inputs = (node.name,)
        return cls(name, tuple(nodes), dict(compose or {}))

    def stream_name(self, node: str) -> str:
        """The name of the stream node ``node`` produces."""
        return f"{self.name}.{node}"

    @property
    def output_node(self) -> Node:
        return self.nodes[-1]
