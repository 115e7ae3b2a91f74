"""The exchange between stages: rows go to subtasks by key group over ordered channels.

A key is mapped to one of :data:`KEY_GROUPS` key groups (a hash of its code), and each subtask
owns a contiguous range of groups, so that rescaling moves whole groups, as Flink's key groups
do. :class:`Exchange` splits each batch per target with one numba pass (a hash and a counting
sort, :func:`~splice.cluster._exchange_kernels.split_rows`) and sends each part on the channel of
its target. A :class:`Channel` carries batches, watermarks, barriers and the end, in order, each
with its sequence number; the Ray channel (:mod:`splice.cluster.ray_runner`) is one kind, an
in-process list another (tests), and a socket or Arrow Flight channel can replace them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from splice.cluster._exchange_kernels import split_rows
from splice.joins.common.key_codec import KeyCodec

__all__ = ["KEY_GROUPS", "Channel", "ListChannel", "Exchange", "Message", "take_rows"]

#: key groups per job: the unit of placement (and of rescaling) of keyed state
KEY_GROUPS = 128


@dataclass(frozen=True)
class Message:
    """What a channel carries: ``kind`` ``batch``, ``watermark``, ``barrier`` or ``end``."""

    seq: int
    kind: str
    stream: str = ""
    payload: Any = None


class Channel(Protocol):
    """An ordered channel to one subtask."""

    def send(self, message: Message) -> None: ...

    def flush(self) -> None: ...


@dataclass
class ListChannel:
    """A channel that keeps what it is sent (tests; the subtask runs in this process)."""

    messages: list[Message] = field(default_factory=list)

    def send(self, message: Message) -> None:
        self.messages.append(message)

    def flush(self) -> None:
        pass


#: the types Arrow's take does not gather, and the plain types that carry their values
_VIEWS = {pa.string_view(): pa.large_string(), pa.binary_view(): pa.large_binary()}


def take_rows(batch: pa.RecordBatch, rows: np.ndarray) -> pa.RecordBatch:
    """``batch``'s rows at ``rows``; view columns (string_view, binary_view), which Arrow's
    take does not gather, go through their plain large types and back."""
    idx = pa.array(rows)
    try:
        return batch.take(idx)
    except pa.ArrowNotImplementedError:
        cols = [c.take(idx) if c.type not in _VIEWS else c.cast(_VIEWS[c.type]).take(idx).cast(c.type)
                for c in batch.columns]
        return pa.RecordBatch.from_arrays(cols, schema=batch.schema)


class Exchange:
    """Routes each stream's batches by ``keys[stream]`` (its key columns) to ``channels``;
    watermarks, barriers and the end go to every channel. ``types`` are the keys' common types
    (equal keys of different streams must land on the same subtask)."""

    def __init__(self, channels: Sequence[Channel], keys: dict[str, list[str]],
                 types: Sequence[pa.DataType], groups: int = KEY_GROUPS) -> None:
        self.channels = list(channels)
        self.keys = keys
        self.codec = KeyCodec(list(types))
        self.groups = groups
        self.seq = [0] * len(self.channels)
        self.rows_sent = [0] * len(self.channels)

    def _send(self, target: int, kind: str, stream: str, payload: Any) -> None:
        self.channels[target].send(Message(self.seq[target], kind, stream, payload))
        self.seq[target] += 1

    def split(self, stream: str, batch: pa.RecordBatch) -> list[tuple[int, pa.RecordBatch, np.ndarray]]:
        """``(target, rows, their key groups)`` of each non-empty part of ``batch``."""
        cols = [batch.column(c) for c in self.keys[stream]]
        codes, valid = self.codec.encode(cols, stream, self.keys[stream])
        empty = np.zeros(0, dtype=np.bool_)
        order, starts, group = split_rows(np.ascontiguousarray(codes, dtype=np.int64),
                                          empty if valid is None else valid, self.groups,
                                          len(self.channels))
        parts = []
        for t in range(len(self.channels)):
            rows = order[starts[t]:starts[t + 1]]
            if len(rows) == batch.num_rows:
                parts.append((t, batch, group))
            elif len(rows):
                parts.append((t, take_rows(batch, rows), group[rows]))
        return parts

    def send_batch(self, stream: str, batch: pa.RecordBatch) -> None:
        for t, part, _ in self.split(stream, batch):
            self._send(t, "batch", stream, part)
            self.rows_sent[t] += part.num_rows

    def broadcast(self, kind: str, stream: str = "", payload: Any = None) -> None:
        for t in range(len(self.channels)):
            self._send(t, kind, stream, payload)

    def flush(self) -> None:
        for c in self.channels:
            c.flush()
