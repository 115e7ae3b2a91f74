"""The re-configurable data path: switches, bricks, units, the query assigner, the engine."""

from splice.runtime.engine import Engine, QueryResult
from splice.runtime.plan import BindInputs, Node, Query
from splice.runtime.synchronizer import Synchronizer
from splice.runtime.topology import Topology

__all__ = ["BindInputs", "Engine", "Node", "Query", "QueryResult", "Synchronizer", "Topology"]
