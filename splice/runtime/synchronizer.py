"""Replicated stateless paths: a round-robin reindexer and the synchronizer that restores order.

Diba parallelizes a stateless operator by reindexing its stream into sub-streams that the next
local switch spreads over several units; a synchronizer later restores the original order with
sequence tokens. Here the reindexer stamps each batch with its position (``Data.seq``) and sends
batch ``n`` to sub-stream ``n mod k``; the :class:`Synchronizer` is a reorder buffer that releases
items strictly in token order, whatever order the replicas finish in.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pyarrow as pa

from splice.core.operator import InputSchemas, OperatorLogic, OperatorSpec
from splice.core.records import Data

__all__ = ["RoundRobin", "Synchronizer"]

T = TypeVar("T")


@dataclass(frozen=True)
class RoundRobin(OperatorSpec):
    """Split one stream into ``len(outputs)`` sub-streams, batch by batch, stamping tokens."""

    outputs: tuple[int, ...]
    name: str = "round_robin"

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        return next(iter(inputs.values()))

    @property
    def stateless(self) -> bool:
        return True

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        return _RoundRobinLogic(self.outputs, 0 if state is None else int(state))


class _RoundRobinLogic(OperatorLogic):
    def __init__(self, outputs: Sequence[int], next_seq: int):
        self.outputs = tuple(outputs)
        self.next_seq = next_seq

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[Any]:
        seq = self.next_seq
        self.next_seq += 1
        return [Data(self.outputs[seq % len(self.outputs)], batch, seq)]

    def snapshot(self) -> Any:
        return self.next_seq


class Synchronizer(Generic[T]):
    """Reorder buffer: ``push(token, item)`` in any order, ``pop_ready()`` in token order.

    Tokens are consecutive integers starting at ``first``; every token must be pushed once.
    """

    def __init__(self, first: int = 0):
        self.next = first
        self._heap: list[tuple[int, int, T]] = []
        self._tie = 0

    def push(self, token: int, item: T) -> None:
        if token < self.next:
            raise ValueError(f"token {token} was already released (next is {self.next})")
        heapq.heappush(self._heap, (token, self._tie, item))
        self._tie += 1

    def pop_ready(self) -> list[T]:
        out: list[T] = []
        while self._heap and self._heap[0][0] == self.next:
            _, _, item = heapq.heappop(self._heap)
            out.append(item)
            self.next += 1
        return out

    def __len__(self) -> int:
        return len(self._heap)
