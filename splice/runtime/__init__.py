"""The re-configurable data path (switches, bricks, units, the query assigner, the engine) and
the jobs that run on it: the checkpoint coordinator, its stores and its exactly-once sinks."""

from splice.core.plan import BindInputs, Node, Query
from splice.runtime.checkpoint import CheckpointCoordinator, Job, SourceStream
from splice.runtime.engine import Engine, QueryResult
from splice.runtime.synchronizer import Synchronizer
from splice.runtime.topology import Topology

__all__ = ["BindInputs", "CheckpointCoordinator", "Engine", "Job", "Node", "Query", "QueryResult",
           "SourceStream", "Synchronizer", "Topology"]
