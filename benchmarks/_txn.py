"""Shared helpers of the transactional benchmarks: warm kernels, run, assert agreement."""

from __future__ import annotations

import argparse
import json
from typing import Any

from splice.cli.txn import run_workload, warm_kernels
from splice.txn.memory import keep_freed_memory
from splice.workloads.txn_apps import TxnWorkload, make_app

__all__ = ["measure", "measure_round_robin", "emit", "prepare", "machine_parallelism",
           "workload_parser"]


def prepare(app: str, threads: int, schedulers: list[str]) -> None:
    """Allocator tuning and kernel loading, outside every timed region."""
    keep_freed_memory()
    for s in schedulers:
        warm_kernels(app, TxnWorkload(keys=64), "auto" if s == "nested" else s, threads, 0.0)


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


def measure_round_robin(app: str, w: TxnWorkload, configs: list[tuple[str, int]],
                        complexity: float = 0.0, repeat: int = 2) -> list[dict[str, Any]]:
    """Best of ``repeat`` runs per (scheduler, threads), interleaved (and rotated each round) so
    that every configuration sees the same load from other processes; asserts all agree."""
    best: dict[tuple[str, int], dict[str, Any]] = {}
    ref = None
    # untimed first run: the heap grows to this workload's size here, not in a timed run
    run_workload(make_app(app, w), w, configs[0][0], configs[0][1], complexity)
    for r in range(repeat):
        for s, t in configs[r % len(configs):] + configs[:r % len(configs)]:
            m = run_workload(make_app(app, w), w, s, t, complexity)
            key = (m["state_checksum"], m["committed"])
            ref = ref or key
            assert key == ref, f"{app}: {s} on {t} threads disagrees: {key} != {ref}"
            if (s, t) not in best or m["seconds"] < best[(s, t)]["seconds"]:
                best[(s, t)] = m
    return [best[c] for c in configs]


def workload_parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser with the options every transactional benchmark shares: events, keys,
    punctuation and the thread counts (``"1,2"``)."""
    p = argparse.ArgumentParser(description=(doc or "").splitlines()[0] if doc else None)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--punctuation", type=int, default=10_240)
    p.add_argument("--threads", default="1,2")
    return p


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def machine_parallelism(threads: int = 2, seconds: float = 0.3) -> float:
    """Speedup of ``threads`` threads of pure numba busy work over one thread, measured now.

    The ceiling any parallel engine can reach on this machine at this moment (other processes
    share the cores): a control for the engine's own speedups.
    """
    import time
    from concurrent.futures import ThreadPoolExecutor

    from splice.txn._kernels import busy_work
    from splice.txn.txn_executor import busy_iters_for

    iters = busy_iters_for(seconds * 1e6)
    busy_work(10, 1.0)
    t0 = time.perf_counter()
    busy_work(iters, 1.0)
    one = time.perf_counter() - t0
    with ThreadPoolExecutor(threads) as pool:
        t0 = time.perf_counter()
        list(pool.map(lambda _: busy_work(iters, 1.0), range(threads)))
        many = time.perf_counter() - t0
    return round(threads * one / many, 3)
