"""Queries that run elsewhere: what an :class:`~splice.runtime.engine.Engine` needs of a cluster.

``Engine(cluster=c)`` deploys every query through ``c.deploy(...)``. The engine keeps what is the
same wherever a query runs: the stream definitions, the checks of bad input at the edge and the
dead letters, watermark generation, result buffers, sinks and callbacks. It hands each admitted
batch and each watermark to the :class:`RemoteQuery`, which hands back result rows and late rows
through the two callbacks it was deployed with. :class:`splice.cluster.RayCluster` implements
this on Ray actors; the runtime names only the interface, so that it depends on no cluster
library.

A remote query delivers its rows at checkpoints (:meth:`RemoteQuery.checkpoint`, which the
engine's :meth:`~splice.runtime.engine.Engine.snapshot` calls), when it ends and when it stops,
never before: a worker that dies between two checkpoints is restarted from the first and the
input since replayed, so no row is delivered twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from splice.core.plan import Query

__all__ = ["RemoteStream", "RemoteQuery", "Cluster"]


@dataclass(frozen=True)
class RemoteStream:
    """A source stream as a remote query reads it: its name, the columns the query reads, and
    its event-time column (watermarks come from the engine)."""

    name: str
    schema: pa.Schema
    time_column: str | None = None


class RemoteQuery(Protocol):
    """One query deployed on a cluster."""

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        """Rows of ``stream`` (admitted, narrowed to the stream's remote schema)."""

    def watermark(self, stream: str, time: int) -> None:
        """Event time of ``stream`` reached ``time``."""

    def checkpoint(self) -> Any:
        """Snapshot the query's state where the input stands now, deliver the rows produced
        before it, and return the state (what ``Cluster.deploy`` restores from)."""

    def end(self) -> None:
        """No more input: blocking operators flush; every row is delivered."""

    def stop(self) -> None:
        """Take no more input: deliver the rows already produced and free the workers."""

    def metrics(self) -> dict[str, Any]:
        """Figures of the query's exchange (rows sent per subtask, calls, restarts)."""


class Cluster(Protocol):
    """Where an engine's queries run."""

    def deploy(self, query: Query, streams: Sequence[RemoteStream], state: Any,
               output: Callable[[pa.RecordBatch], None],
               late: Callable[[str, pa.RecordBatch], None]) -> RemoteQuery:
        """Start ``query`` reading ``streams`` (restored from ``state`` when it is not None);
        its result rows go to ``output``, its late rows to ``late(input, batch)``."""
