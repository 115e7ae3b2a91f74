"""Fault tolerance: checkpoint stores, the checkpoint coordinator, exactly-once sinks, dead letters."""

from splice.state.checkpoint import (
    CheckpointCoordinator,
    CheckpointStats,
    Job,
    SourceStream,
    arrival_source,
)
from splice.state.sink import TransactionalSink
from splice.state.store import Checkpoint, LocalCheckpointStore, RocksDBCheckpointStore, open_store

__all__ = [
    "Checkpoint",
    "CheckpointCoordinator",
    "CheckpointStats",
    "Job",
    "LocalCheckpointStore",
    "RocksDBCheckpointStore",
    "SourceStream",
    "TransactionalSink",
    "arrival_source",
    "open_store",
]
