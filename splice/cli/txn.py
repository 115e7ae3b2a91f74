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

``--engine`` runs the same events through the engine's data path instead
(:func:`run_txn_engine`): Arrow batches of ``--batch-size`` rows into a transactional operator
that calls the application's own builder per punctuation interval; same ``committed``,
``aborted`` and ``state_checksum``.
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

__all__ = ["run_txn", "run_txn_engine", "run_workload", "latency_percentiles", "warm_kernels",
           "ENGINE_BATCH_ROWS"]


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


def _workload(args: argparse.Namespace) -> TxnWorkload:
    """The generator's parameters the options give, checked."""
    if not 0.0 <= args.abort_ratio <= 1.0:
        raise PlanError(f"--abort-ratio must be in 0..1, got {args.abort_ratio}")
    if args.complexity < 0:
        raise PlanError(f"--complexity must be >= 0, got {args.complexity}")
    if getattr(args, "batch_size", None) is not None and not getattr(args, "engine", False):
        raise PlanError("--batch-size applies to --engine (the direct path runs one punctuation "
                        "interval at a time)")
    return TxnWorkload(events=args.events, keys=args.keys, skew=args.skew,
                       abort_ratio=args.abort_ratio, punctuation=args.punctuation, seed=args.seed)


def run_txn(args: argparse.Namespace) -> int:
    """Entry point of ``splice txn``; returns the exit code."""
    w = _workload(args)
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


#: rows per batch pushed to the engine by ``splice txn --engine`` (``--batch-size``)
ENGINE_BATCH_ROWS = 65_536


def run_txn_engine(args: argparse.Namespace) -> int:
    """``splice txn <app> --engine``: the same events through the engine's data path.

    The events become an Arrow table (:func:`~splice.workloads.txn_jobs.events_table`) pushed in
    batches of ``--batch-size`` rows into one query, a
    :class:`~splice.txn.txn_operator.TransactionalOperator` running the application's own
    builder on each punctuation interval; each result batch (the events with ``committed``,
    ``abort_reason``, ``results``) is dropped as it comes. With ``--checkpoint-dir`` the query
    runs as a job under the checkpoint coordinator: its state checkpointed every
    ``--checkpoint-interval`` seconds, its results committed to the directory with each epoch,
    a rerun resuming from the newest checkpoint. Metrics as the direct path's (``seconds`` is
    the streaming time), with ``path: "engine"`` and ``batch_size``; ``committed``, ``aborted``
    and ``state_checksum`` equal the direct path's on the same events.
    """
    from splice.workloads.txn_jobs import events_table, run_app_on_engine

    w = _workload(args)
    batch_size = args.batch_size or ENGINE_BATCH_ROWS
    keep_freed_memory()
    t0 = time.perf_counter()
    app, bad = _app_with_events(args, w)
    table = events_table(app)
    nested = app.nested if args.scheduler == "nested" else None
    scheduler = "auto" if nested else args.scheduler
    warm_kernels(args.app, w, scheduler, args.threads, args.complexity)
    small = TxnWorkload(events=256, keys=w.keys, punctuation=128, abort_ratio=0.2, seed=w.seed)
    run_app_on_engine(make_app(args.app, small), 128, args.threads, scheduler, nested,
                      keep_output=False)
    load_seconds = time.perf_counter() - t0
    extra: dict[str, Any] = {}
    if args.checkpoint_dir is None:
        out = run_app_on_engine(app, w.punctuation, args.threads, scheduler, nested, batch_size,
                                events=table, keep_output=False)
        seconds, figures = out["seconds"], out
    else:
        seconds, figures, extra = _run_engine_job(args, app, table, scheduler, nested, batch_size)
    n = app.num_events
    m: dict[str, Any] = {
        "app": app.name, "path": "engine", "scheduler": args.scheduler, "threads": args.threads,
        "batch_size": batch_size, "input_rows": n, "output_rows": n,
        "seconds": round(seconds, 6),
        "rows_per_s": round(n / seconds, 1) if seconds > 0 else None,
        "events_per_s": round(n / seconds, 1) if seconds > 0 else None,
        "committed": figures.get("committed"), "aborted": figures.get("aborted"),
        "state_checksum": figures.get("state_checksum"), "load_seconds": round(load_seconds, 6),
        **extra, **bad,
    }
    if args.json:
        print(json.dumps({"metrics": m}))
        return 0
    print(f"{args.app}: {n} events, {args.threads} thread(s), scheduler {args.scheduler}, "
          f"on the engine in batches of {batch_size:,} rows")
    print(f"throughput  {m['events_per_s']:,.0f} events/s in {m['seconds']:.3f} s "
          f"(committed {m['committed']}, aborted {m['aborted']})")
    print(f"checksum    {m['state_checksum']}")
    return 0


def _run_engine_job(args: argparse.Namespace, app: TxnApp, table: Any, scheduler: str,
                    nested: dict[int, str] | None, batch_size: int
                    ) -> tuple[float, dict[str, Any], dict[str, Any]]:
    """``--engine --checkpoint-dir``: the query as a checkpointed job; (streaming seconds, the
    operator's figures, the checkpoint metrics)."""
    import pyarrow.compute as pc

    from splice.cli.checkpointed import coordinator_for
    from splice.runtime.fingerprint import job_fingerprint
    from splice.workloads.txn_jobs import app_job, operator_figures

    job = app_job(app, args.punctuation, args.threads, scheduler, nested, batch_size,
                  events=table)
    job.fingerprint = job_fingerprint([f"txn {args.app} on the engine"], None, {
        "app": args.app, "events": args.events, "keys": args.keys, "skew": args.skew,
        "abort_ratio": args.abort_ratio, "punctuation": args.punctuation, "seed": args.seed,
        "batch_size": batch_size})
    coord = coordinator_for(job, args)
    t0 = time.perf_counter()
    coord.run(collect=False)
    seconds = time.perf_counter() - t0 - coord.stats.restore_seconds
    assert coord.engine is not None
    figures = operator_figures(coord.engine)
    if coord.stats.finished_before:  # nothing ran now: count the committed output
        out = coord.outputs()["txn"]
        done = int(pc.sum(out.column("committed")).as_py() or 0)
        figures = {"committed": done, "aborted": out.num_rows - done, "state_checksum": None}
    s = coord.stats
    extra = {"checkpoints": s.checkpoints, "resumed_from": s.resumed_from,
             "restore_seconds": round(s.restore_seconds, 6),
             "checkpoint_bytes_max": max(s.checkpoint_bytes, default=0)}
    return seconds, figures, extra
