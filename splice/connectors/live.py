"""Several live sources (Kafka topics, files, tailed directories) as one job source for the
checkpoint coordinator.

The sources are polled in turn; each poll hands over what it decoded and the source's watermark
when it moved. A round in which no source had anything yields a tick (an empty
:class:`~splice.runtime.checkpoint.SourceEvent`), so the coordinator keeps checkpointing on time
and notices a stop while the topics are quiet. The job ends when every source has ended (only
bounded reads end).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

import pyarrow as pa

from splice.runtime.checkpoint import SourceEvent

__all__ = ["PolledSources", "PolledSource"]


class PolledSource(Protocol):
    """One live source: :class:`~splice.connectors.kafka_source.KafkaSource`,
    :class:`~splice.connectors.file_source.FileSource`."""

    name: str

    def open(self, state: Mapping[str, Any] | None = None) -> None: ...

    def state(self) -> dict[str, Any]: ...

    def poll(self) -> Iterator[pa.RecordBatch | SourceEvent]: ...

    def drain(self) -> Iterator[pa.RecordBatch | SourceEvent]: ...

    def ended(self) -> bool: ...

    def close(self) -> None: ...


class PolledSources:
    """``sources`` as a job's live sources (:class:`~splice.runtime.checkpoint.LiveSources`)."""

    def __init__(self, sources: Sequence[PolledSource]) -> None:
        self.sources = list(sources)
        self._open = False

    def restore(self, state: dict[str, Any] | None) -> None:
        saved = state or {}
        for s in self.sources:
            s.open(saved.get(s.name))
        self._open = True

    def state(self) -> dict[str, Any]:
        return {s.name: s.state() for s in self.sources}

    def drain(self) -> Iterator[tuple[str, pa.RecordBatch | SourceEvent]]:
        for s in self.sources:
            for item in s.drain():
                yield s.name, item

    def close(self) -> None:
        for s in self.sources:
            s.close()
        self._open = False

    def source(self, position: int) -> Iterator[tuple[str, pa.RecordBatch | SourceEvent]]:
        """The job's source: the live sources' batches and events, from where :meth:`restore`
        put them (``position`` only counts batches)."""
        if not self._open:
            self.restore(None)
        while True:
            active = [s for s in self.sources if not s.ended()]
            if not active:
                return
            idle = True
            for s in active:
                for item in s.poll():
                    idle = False
                    yield s.name, item
            if idle:
                yield self.sources[0].name, SourceEvent()
