"""Shared helpers of the transactional benchmarks: warm kernels, run, assert agreement."""

from __future__ import annotations

import json
from typing import Any

from splice.txn.command import _warm, run_workload
from splice.txn.memory import keep_freed_memory
from splice.workloads.txn_apps import TxnWorkload, make_app

__all__ = ["measure", "emit", "prepare"]


def prepare(app: str, threads: int, schedulers: list[str]) -> None:
    """Allocator tuning and kernel loading, outside every timed region."""
    keep_freed_memory()
    for s in schedulers:
        _warm(app, TxnWorkload(keys=64), "auto" if s == "nested" else s, threads, 0.0)


def measure(app: str, w: TxnWorkload, scheduler: str, threads: int, complexity: float = 0.0,
            repeat: int = 1) -> dict[str, Any]:
    """Best of ``repeat`` runs (fresh state each run) of ``app`` under ``scheduler``."""
    best: dict[str, Any] | None = None
    for _ in range(repeat):
        m = run_workload(make_app(app, w), w, scheduler, threads, complexity)
        if best is None or m["seconds"] < best["seconds"]:
            best = m
    assert best is not None
    return best


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)
