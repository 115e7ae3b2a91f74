"""Transactions over streams: shared state, the TPG, adaptive schedulers and baselines."""

from splice.txn.engine import BASELINES, BatchResult, TxnEngine
from splice.txn.ops import (
    ABT,
    ADD,
    BLK,
    COND_GE,
    COND_LE,
    COND_NONE,
    EXE,
    MAX,
    RDY,
    READ,
    REASONS,
    SUM_ADD,
    SUM_WRITE,
    WINDOW_READ,
    WRITE,
    OpBatch,
    OpBatchBuilder,
)
from splice.txn.scheduler import ALL_STRATEGIES, Strategy, choose_strategy
from splice.txn.state import StateStore, StateTable

__all__ = [
    "ABT",
    "ADD",
    "ALL_STRATEGIES",
    "BASELINES",
    "BLK",
    "BatchResult",
    "COND_GE",
    "COND_LE",
    "COND_NONE",
    "EXE",
    "MAX",
    "OpBatch",
    "OpBatchBuilder",
    "RDY",
    "READ",
    "REASONS",
    "SUM_ADD",
    "SUM_WRITE",
    "StateStore",
    "StateTable",
    "Strategy",
    "TxnEngine",
    "WINDOW_READ",
    "WRITE",
    "choose_strategy",
]
