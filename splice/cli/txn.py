"""``splice txn sl|gs|tp|sej``: run a transactional application and report throughput and latency.

Events come from the application's generator, or with ``--input FILE`` from a Parquet/CSV file
with the application's columns (``sl``, ``tp``, ``sej``; see
:data:`~splice.workloads.txn_apps.EVENT_COLUMNS`), checked at the edge under ``--bad-input
fail|dead-letter`` (default ``fail``): bad rows fail with an error naming the stream, the column
and the problem, or go with their reason to ``--dead-letter`` and are counted
(``dead_letter_rows``, ``dead_letter_reasons``).

Prints throughput (events/s), latency percentiles (an event's latency is the time from the
start of its batch's construction to the end of its post-processing: events wait for their
punctuation, so all events of a batch share it), the time breakdown of MorphStream (useful, sync,
lock, construct, explore, abort), the strategies the scheduler picked and the memory per batch.
``--json`` ends with ``{"metrics": {...}}``: ``input_rows``, ``output_rows``, ``seconds``,
``load_seconds``, ``rows_per_s``, ``events_per_s``, ``committed``, ``aborted``,
``state_checksum`` (equal for every correct scheduler on the same input) and more.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from typing import Any

import numpy as np

from splice.core.errors import PlanError
from splice.txn.memory import keep_freed_memory
from splice.txn.txn_engine import TIME_KEYS, TxnEngine
from splice.workloads.txn_apps import TxnApp, TxnWorkload, events_from_file, make_app, run_app

__all__ = ["run_txn", "run_workload", "latency_percentiles", "warm_kernels"]


def latency_percentiles(lat: list[tuple[float, int]]) -> dict[str, float]:
    """p50/p95/p99 in ms over events (each batch's latency weighted by its events)."""
    if not lat:
        return {"p50_ms": 0.0, "p95_ms": 0.0, "p99_ms": 0.0}
    secs = np.array([x for x, _ in lat])
    counts = np.array([n for _, n in lat])
    o = np.argsort(secs)
    cum = np.cumsum(counts[o]) / counts.sum()
    out = {}
    for q in (50, 95, 99):
        out[f"p{q}_ms"] = round(float(secs[o][np.searchsorted(cum, q / 100.0)]) * 1e3, 3)
    return out


def warm_kernels(app_name: str, w: TxnWorkload, scheduler: str, threads: int, complexity: float) -> None:
    """Load every compiled kernel before timing (counted as load time)."""
    small = TxnWorkload(events=256, keys=w.keys, punctuation=128, abort_ratio=0.2, seed=w.seed)
    app = make_app(app_name, small)
    eng = TxnEngine(app.tables, threads=threads, scheduler=scheduler, complexity_us=complexity)
    try:
        run_app(app, eng, 128)
    finally:
        eng.close()


def run_workload(app: TxnApp, w: TxnWorkload, scheduler: str, threads: int,
                 complexity: float) -> dict[str, Any]:
    """Run ``app`` once on a fresh engine; metrics as a dict."""
    nested = app.nested if scheduler == "nested" else None
    eng = TxnEngine(app.tables, threads=threads, scheduler="auto" if nested else scheduler,
                    complexity_us=complexity, nested=nested)
    try:
        out = run_app(app, eng, w.punctuation)
    finally:
        eng.close()
    n = app.num_events
    seconds = out["seconds"]
    metrics: dict[str, Any] = {
        "app": app.name,
        "scheduler": scheduler,
        "threads": threads,
        "input_rows": n,
        "output_rows": n,
        "seconds": round(seconds, 6),
        "rows_per_s": round(n / seconds, 1) if seconds > 0 else None,
        "events_per_s": round(n / seconds, 1) if seconds > 0 else None,
        "committed": out["committed"],
        "aborted": out["aborted"],
        "state_checksum": eng.store.checksum(),
        **latency_percentiles(out["latency"]),
        "breakdown_s": {k: round(eng.times[k], 6) for k in TIME_KEYS},
        "build_s": round(out["build_seconds"], 6),
        "strategies": dict(eng.strategies),
        "executor_threads": dict(eng.thread_use),
        "memory_per_batch_bytes": eng.peak_batch_bytes,
        "state_bytes": eng.store.nbytes(),
    }
    return metrics


def _app_with_events(args: argparse.Namespace, w: TxnWorkload) -> tuple[TxnApp, dict[str, Any]]:
    """The application with generated events, or with ``--input``'s checked events."""
    policy = getattr(args, "bad_input", None)
    dead_letter = getattr(args, "dead_letter", None)
    path = getattr(args, "input", None)
    if path is None:
        if policy is not None or dead_letter is not None:
            raise PlanError("--bad-input and --dead-letter apply to --input")
        return make_app(args.app, w), {}
    from splice.io.bad_input import DeadLetterSink

    if dead_letter is not None and policy != "dead-letter":
        raise PlanError("--dead-letter needs --bad-input dead-letter")
    mode = "dead_letter" if policy == "dead-letter" else "fail"
    sink = DeadLetterSink(dead_letter) if mode == "dead_letter" else None
    events = events_from_file(args.app, path, args.keys, mode, sink)
    app = make_app(args.app, replace(w, events=0))
    app.events = events
    extra: dict[str, Any] = {}
    if sink is not None:
        sink.publish()
        extra = {"dead_letter_rows": sink.total, "dead_letter_reasons": dict(sink.counts)}
    return app, extra


def run_txn(args: argparse.Namespace) -> int:
    """Entry point of ``splice txn``; returns the exit code."""
    if not 0.0 <= args.abort_ratio <= 1.0:
        raise PlanError(f"--abort-ratio must be in 0..1, got {args.abort_ratio}")
    if args.complexity < 0:
        raise PlanError(f"--complexity must be >= 0, got {args.complexity}")
    w = TxnWorkload(events=args.events, keys=args.keys, skew=args.skew,
                    abort_ratio=args.abort_ratio, punctuation=args.punctuation, seed=args.seed)
    keep_freed_memory()
    t0 = time.perf_counter()
    app, bad = _app_with_events(args, w)
    warm_kernels(args.app, w, "auto" if args.scheduler == "nested" else args.scheduler, args.threads,
          args.complexity)
    load_seconds = time.perf_counter() - t0
    m = run_workload(app, w, args.scheduler, args.threads, args.complexity)
    m["load_seconds"] = round(load_seconds, 6)
    m.update(bad)
    if args.json:
        print(json.dumps({"metrics": m}))
        return 0
    print(f"{args.app}: {m['input_rows']} events, {args.threads} thread(s), scheduler {args.scheduler}")
    print(f"throughput  {m['events_per_s']:,.0f} events/s in {m['seconds']:.3f} s "
          f"(committed {m['committed']}, aborted {m['aborted']})")
    print(f"latency     p50 {m['p50_ms']} ms  p95 {m['p95_ms']} ms  p99 {m['p99_ms']} ms")
    total = sum(m["breakdown_s"].values()) or 1.0
    print("breakdown   " + "  ".join(f"{k} {v:.3f}s ({100 * v / total:.0f}%)"
                                      for k, v in m["breakdown_s"].items()))
    print(f"strategies  {m['strategies']}")
    if m["executor_threads"]:
        print(f"threads     {m['executor_threads']} (auto: executor threads per batch)")
    print(f"memory      {m['memory_per_batch_bytes']:,} bytes per batch, state {m['state_bytes']:,} bytes")
    print(f"checksum    {m['state_checksum']}")
    return 0
