"""Ray as the cluster of an engine: ``Engine(cluster=RayCluster(workers=4))``.

>>> from splice.cluster import RayCluster                        # doctest: +SKIP
>>> eng = Engine(cluster=RayCluster(workers=2))                 # doctest: +SKIP
>>> eng.define_stream("l", schema, "ts", max_out_of_orderness=20)  # doctest: +SKIP
>>> eng.deploy(Query.chain("w2", "l", WindowAggregate(...)))    # doctest: +SKIP

Every query the engine deploys then runs as a
:class:`~splice.cluster.distributed_query.DistributedQuery`: its keyed stages on ``workers``
subtasks each, the rest in the engine's process. A local Ray is started for ``workers`` (no
dashboard) unless one runs or ``address`` names a cluster.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from splice.cluster.distributed_query import DistributedQuery
from splice.cluster.ray_runner import Subtask, start_ray
from splice.core.errors import PlanError
from splice.core.plan import Query
from splice.runtime.remote import RemoteStream

__all__ = ["RayCluster"]


@dataclass
class RayCluster:
    """Where an engine's queries run: ``workers`` subtasks per keyed stage on the Ray at
    ``address`` (None: a local one).

    ``state_dir`` is a directory every worker reaches (a shared path, a mounted object store)
    where subtasks write the states of the query's own checkpoints, taken every
    ``checkpoint_batches`` pushes (``None``: only at the engine's snapshots); on one machine a
    temporary directory is used when it is not given, on a cluster the states then travel back
    with the barrier's reply. ``max_in_flight`` bounds the calls outstanding per channel;
    ``restarts`` the restarts after dead workers, per query."""

    workers: int = 2
    address: str | None = None
    state_dir: str | Path | None = None
    checkpoint_batches: int | None = 64
    max_in_flight: int = 4
    restarts: int = 3
    #: tests: ``(subtask, message)``: that subtask of the first stage exits its process when
    #: that message arrives, in the first query's first start
    die_at: tuple[int, int] | None = None
    #: the queries deployed, by name
    queries: dict[str, DistributedQuery] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise PlanError(f"workers must be >= 1, got {self.workers}")
        if self.checkpoint_batches is not None and self.checkpoint_batches < 1:
            raise PlanError(f"checkpoint_batches must be >= 1 or None, got {self.checkpoint_batches}")
        if self.max_in_flight < 1:
            raise PlanError(f"max_in_flight must be >= 1, got {self.max_in_flight}")

    def deploy(self, query: Query, streams: Sequence[RemoteStream], state: Any,
               output: Callable[[pa.RecordBatch], None],
               late: Callable[[str, pa.RecordBatch], None]) -> DistributedQuery:
        import ray

        start_ray(self.workers, self.address)
        actor_class: Any = ray.remote(num_cpus=0, max_restarts=0)(Subtask)
        # on a cluster without a shared directory the states travel in the replies
        store: str | Path | None = None
        scratch = False
        if self.state_dir is not None:
            store = Path(self.state_dir) / query.name
        elif self.address is None:
            store, scratch = tempfile.mkdtemp(prefix="splice-workers-"), True
        die_at, self.die_at = self.die_at, None
        q = DistributedQuery(query, streams, state, output, late, workers=self.workers,
                             actor_class=actor_class, max_in_flight=self.max_in_flight,
                             checkpoint_batches=self.checkpoint_batches, restarts=self.restarts,
                             store=store, remove_store=scratch, die_at=die_at)
        self.queries[query.name] = q
        return q
