"""The checkpointed forms of ``splice tpch`` and ``splice txn`` (``--checkpoint-dir D``).

``tpch q1|q6`` build a :class:`~splice.runtime.checkpoint.Job` (streams, an engine plan, a
replayable source in the command's arrival order) and run it under a
:class:`~splice.runtime.checkpoint.CheckpointCoordinator`. Running the same command again after a
crash resumes from ``D``; the printed answer is the committed output, equal to what an
uninterrupted checkpointed run gives. (``splice join`` runs as such a job with or without
checkpoints: :mod:`splice.cli.join`.)

- ``tpch q1|q6``: the query's operator chain over the ``lineitem`` stream, batches of
  ``--batch-size`` rows in generation order.
- ``tpch q3``: the fused Q3 join of the plain command
  (:class:`~splice.joins.multiway.multiway_join.Q3FastJoin`), stepped in chunks with its state checkpointed
  after each (on the engine, :func:`~splice.workloads.tpch_plans.q3_query` would take the
  interleaved order as runs of a few rows, one batch each: thousands of rows a second).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import pyarrow as pa

from splice.core.errors import PlanError
from splice.core.plan import Query
from splice.runtime.checkpoint import (
    CheckpointCoordinator,
    Job,
    SourceStream,
    arrival_source,
    discard_job,
)
from splice.runtime.fingerprint import job_fingerprint, refuse_another_job

__all__ = ["run_checkpointed", "run_tpch_checkpointed", "run_txn_checkpointed", "tpch_job",
           "coordinator_for"]


def coordinator_for(job: Job, args: argparse.Namespace) -> CheckpointCoordinator:
    """The coordinator the command-line options describe."""
    return CheckpointCoordinator(
        job,
        args.checkpoint_dir,
        interval_seconds=args.checkpoint_interval,
        backend=getattr(args, "checkpoint_backend", "local"),
        state_budget=getattr(args, "state_budget", None),
        restart=getattr(args, "restart", False),
    )


def _tpch_fingerprint(args: argparse.Namespace, names: tuple[str, ...], plan: list[Any]
                      ) -> dict[str, Any]:
    """What identifies a ``splice tpch`` job: the plan, the options that shape its stream, and
    the table files it reads."""
    from splice.io.tpch_data import tpch_dir

    d = tpch_dir(args.sf, args.data_dir)
    options = {k: getattr(args, k, None) for k in ("query", "sf", "window", "order", "batch_size",
                                                    "state_backend", "bad_input", "dedupe_on",
                                                    "max_row_bytes")}
    return job_fingerprint(plan, {n: d / f"{n}.parquet" for n in names}, options)


def _open_checkpoints(args: argparse.Namespace) -> Any:
    """The command's checkpoint store, emptied first with ``--restart``."""
    from pathlib import Path

    from splice.runtime.checkpoint_store import open_store

    if getattr(args, "restart", False):
        discard_job(Path(args.checkpoint_dir))
    return open_store(args.checkpoint_dir, args.checkpoint_backend)


def tpch_job(tables: dict[str, pa.Table], query: str, window: int | None, order: str,
             batch_size: int, state_backend: str = "memory", state_dir: str | None = None) -> Job:
    """The job of ``splice tpch <query>`` over loaded ``tables``; ``state_backend`` and
    ``state_dir`` place q1's group-by state (RocksDB state lives in ``state_dir``)."""
    if query == "q3":
        from splice.workloads.tpch_plans import q3_query
        from splice.workloads.tpch_q3 import q3_arrival

        names = ("customer", "orders", "lineitem")
        sides, rows = q3_arrival(tuple(tables[n].num_rows for n in names), order)  # type: ignore[arg-type]
        return Job([SourceStream(n, tables[n].schema) for n in names], [q3_query("q3", window)],
                   arrival_source([(n, tables[n]) for n in names], sides, rows, batch_size))
    from splice.io.sources import table_source
    from splice.workloads import tpch_queries

    lineitem = tables["lineitem"]
    specs = (tpch_queries.q1(pushdown=True, state_backend=state_backend, state_dir=state_dir)
             if query == "q1" else tpch_queries.q6())
    return Job([SourceStream("lineitem", lineitem.schema)], [Query.chain(query, "lineitem", *specs)],
               lambda pos: table_source("lineitem", lineitem, batch_size, skip=pos))


def run_checkpointed(job: Job, args: argparse.Namespace
                     ) -> tuple[CheckpointCoordinator, dict[str, pa.Table], dict[str, Any]]:
    """Run ``job`` under the options' coordinator; (coordinator, committed outputs, metrics)."""
    coord = coordinator_for(job, args)
    t0 = time.perf_counter()
    out = coord.run()
    seconds = time.perf_counter() - t0
    s = coord.stats
    metrics: dict[str, Any] = {
        "seconds": round(seconds, 6),
        "checkpoints": s.checkpoints,
        "resumed_from": s.resumed_from,
        "restore_seconds": round(s.restore_seconds, 6),
        "checkpoint_bytes_max": max(s.checkpoint_bytes, default=0),
    }
    if s.skipped:
        metrics["skipped_checkpoints"] = s.skipped
    return coord, out, metrics


def _emit(metrics: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"metrics": metrics}))
    else:
        print(" ".join(f"{k}={v}" for k, v in metrics.items()))


def _print_answer(args: argparse.Namespace, answer: pa.Table, metrics: dict[str, Any]) -> int:
    """``splice tpch``'s output: the answer's rows then the metrics, as JSON lines or a table."""
    from splice.io.rows import json_rows, print_table

    if args.json:
        for line in json_rows(answer):
            print(line)
        _emit(metrics, True)
    else:
        print_table(answer, title=f"TPC-H {args.query.upper()} at SF {args.sf:g}")
        _emit(metrics, False)
    return 0


def _run_q3_checkpointed(args: argparse.Namespace, tables: dict[str, pa.Table], window: int | None,
                         load_seconds: float, bad: dict[str, Any]) -> int:
    """``tpch q3 --checkpoint-dir``: the fused Q3 join (:class:`~splice.joins.multiway.multiway_join.Q3FastJoin`)
    stepped in chunks of about ``--checkpoint-interval`` seconds, its state (cursor = the sources'
    position, stage arrays, revenue of the orders with results) checkpointed after each chunk.
    The join is the whole plan, so a checkpoint between chunks is aligned by construction. The
    answer is printed once, at the end: a rerun after a crash prints what an uninterrupted run does.
    """
    from splice.core.errors import SchemaError, StateError
    from splice.workloads.tpch_q3 import q3_answer, q3_fast_run

    identity = _tpch_fingerprint(args, ("customer", "orders", "lineitem"),
                                 [f"fused Q3 join, window {window}, order {args.order}"])
    q, join = q3_fast_run(tables, window, args.order)
    store = _open_checkpoints(args)
    t0 = time.perf_counter()
    cp = store.load_latest()
    epoch = 0
    if cp is not None:
        refuse_another_job(args.checkpoint_dir, cp.meta.get("workload"), identity)
        join.restore(cp.state)
        epoch = cp.checkpoint_id
    restore_seconds = time.perf_counter() - t0
    checkpoints = 0
    chunk = args.batch_size
    started = time.perf_counter()
    done = False
    while not done:
        c0 = time.perf_counter()
        before = join.consumed
        done = join.step(chunk)
        took = time.perf_counter() - c0
        epoch += 1
        store.save(epoch, join.snapshot(), {"workload": identity, "position": join.consumed})
        checkpoints += 1
        _fault("q3_saved", checkpoints)
        if args.state_budget is not None and join.state_bytes() > args.state_budget:
            raise StateError(f"tpch q3: the join holds {join.state_bytes():,} bytes of state, over "
                             f"--state-budget {args.state_budget:,}")
        # next chunk: as many arrivals as fit in the checkpoint interval at this pace
        chunk = max(args.batch_size, int(args.checkpoint_interval * (join.consumed - before) / max(took, 1e-9)))
    if not join.fits:
        raise SchemaError("Q3: l_extendedprice or l_discount beyond 63 bits")
    seconds = time.perf_counter() - started
    answer = q3_answer(q, join.agg_rev, join.agg_hit)
    input_rows = sum(t.num_rows for t in tables.values())
    metrics = {"query": "q3", "sf": args.sf, "input_rows": input_rows, "output_rows": answer.num_rows,
               "seconds": round(seconds, 6), "load_seconds": round(load_seconds, 6),
               "rows_per_s": round(input_rows / seconds, 1) if seconds > 0 else None,
               "window": "unbounded" if window is None else window, "order": args.order,
               "groups": int(join.agg_hit.sum()), "null_keys": q["null_keys"],
               "join_results": join.results, "checkpoints": checkpoints,
               "resumed_from": cp.checkpoint_id if cp is not None else None,
               "restore_seconds": round(restore_seconds, 6), **bad}
    return _print_answer(args, answer, metrics)


def run_tpch_checkpointed(args: argparse.Namespace) -> int:
    """``splice tpch ... --checkpoint-dir D``: the query as an engine plan with checkpoints."""
    from pathlib import Path

    from splice.cli.tpch import check_state_backend, load_tpch_inputs

    backend = check_state_backend(args)
    window: int | None = None
    if args.window != "unbounded":
        if args.query != "q3":
            raise PlanError(f"--window applies to q3 only, not {args.query}")
        try:
            window = int(args.window)
        except ValueError:
            raise PlanError(f"--window must be 'unbounded' or an integer, got {args.window!r}") from None
    t0 = time.perf_counter()
    names = ("customer", "orders", "lineitem") if args.query == "q3" else ("lineitem",)
    tables, bad = load_tpch_inputs(names, args)
    load_seconds = time.perf_counter() - t0
    if args.query == "q3":
        return _run_q3_checkpointed(args, tables, window, load_seconds, bad)
    state_dir = str(Path(args.checkpoint_dir) / "keyed-state" / args.query)
    job = tpch_job(tables, args.query, window, args.order, args.batch_size, backend, state_dir)
    job.fingerprint = _tpch_fingerprint(args, names, list(job.queries))
    _, out, metrics = run_checkpointed(job, args)
    answer = out[args.query]
    if args.query == "q3":  # the column order of the fused command's answer
        answer = answer.select(["l_orderkey", "revenue", "o_orderdate", "o_shippriority"])
    input_rows = sum(t.num_rows for t in tables.values())
    seconds = metrics.pop("seconds")
    metrics = {"query": args.query, "sf": args.sf, "input_rows": input_rows, "output_rows": answer.num_rows,
               "seconds": seconds, "load_seconds": round(load_seconds, 6),
               "rows_per_s": round(input_rows / seconds, 1) if seconds > 0 else None, **metrics, **bad}
    if backend != "memory":
        metrics["state_backend"] = backend
    return _print_answer(args, answer, metrics)


def _fault(point: str, count: int) -> None:
    """Test hook: SIGKILL at the ``count``-th ``point`` when ``SPLICE_FAULT=point:count``."""
    import os
    import signal

    if os.environ.get("SPLICE_FAULT") == f"{point}:{count}":
        os.kill(os.getpid(), signal.SIGKILL)


def _txn_snapshot(eng: Any) -> dict[str, Any]:
    """The transaction engine's shared state (as the transactional operator snapshots it)."""
    return {**eng.store.snapshot(), "last_punctuation": eng.last_punctuation}


def _txn_restore(eng: Any, state: dict[str, Any]) -> None:
    from splice.core.errors import StateError

    eng.store.restore(state)
    try:
        eng.last_punctuation = state["last_punctuation"]
    except KeyError as exc:
        raise StateError(f"txn: the checkpoint lacks {exc}") from exc


def run_txn_checkpointed(args: argparse.Namespace) -> int:
    """``splice txn ... --checkpoint-dir D``: the workload with its state tables checkpointed.

    Punctuation intervals run in chunks of about ``--checkpoint-interval`` seconds; after each
    chunk the state tables, the next interval's position and the running commit/abort counts
    are checkpointed. A rerun resumes after the last checkpointed interval; the printed
    ``committed``, ``aborted`` and ``state_checksum`` equal an uninterrupted run's.
    """
    from splice.core.errors import StateError
    from splice.txn.txn_engine import TxnEngine
    from splice.workloads.txn_apps import TxnWorkload, batches, make_app, run_app

    if args.scheduler == "nested":
        raise PlanError("txn --checkpoint-dir: the nested scheduler is not supported with checkpoints")
    w = TxnWorkload(events=args.events, keys=args.keys, skew=args.skew, abort_ratio=args.abort_ratio,
                    punctuation=args.punctuation, seed=args.seed)
    app = make_app(args.app, w)
    ranges = list(batches(app, args.punctuation))
    store = _open_checkpoints(args)
    eng = TxnEngine(app.tables, threads=args.threads, scheduler=args.scheduler, complexity_us=args.complexity)
    identity = job_fingerprint([f"txn {args.app}"], None, {
        "app": args.app, "events": args.events, "keys": args.keys, "skew": args.skew,
        "abort_ratio": args.abort_ratio, "punctuation": args.punctuation, "seed": args.seed})
    position = committed = aborted = epoch = 0
    cp = store.load_latest()
    t0 = time.perf_counter()
    if cp is not None:
        refuse_another_job(args.checkpoint_dir, cp.meta.get("workload"), identity)
        _txn_restore(eng, cp.state)
        position, committed, aborted = (int(cp.meta[k]) for k in ("position", "committed", "aborted"))
        epoch = cp.checkpoint_id
    restore_seconds = time.perf_counter() - t0
    resumed_from = cp.checkpoint_id if cp is not None else None
    checkpoints = 0
    chunk = 1
    started = time.perf_counter()
    try:
        while position < len(ranges):
            part = ranges[position:position + chunk]
            c0 = time.perf_counter()
            out = run_app(app, eng, args.punctuation, ranges=part)
            took = time.perf_counter() - c0
            committed += out["committed"]
            aborted += out["aborted"]
            position += len(part)
            epoch += 1
            store.save(epoch, _txn_snapshot(eng), {"position": position, "committed": committed,
                                                   "aborted": aborted, "workload": identity})
            checkpoints += 1
            _fault("txn_saved", checkpoints)
            if args.state_budget is not None and eng.store.nbytes() > args.state_budget:
                raise StateError(f"txn {args.app}: state tables hold {eng.store.nbytes():,} bytes, over "
                                 f"--state-budget {args.state_budget:,}")
            # next chunk: as many intervals as fit in the checkpoint interval at this pace
            chunk = max(1, int(args.checkpoint_interval * len(part) / max(took, 1e-9)))
    finally:
        eng.close()
    seconds = time.perf_counter() - started
    n = app.num_events
    metrics = {"app": app.name, "input_rows": n, "output_rows": n, "seconds": round(seconds, 6),
               "rows_per_s": round(n / seconds, 1) if seconds > 0 else None,
               "events_per_s": round(n / seconds, 1) if seconds > 0 else None,
               "committed": committed, "aborted": aborted, "state_checksum": eng.store.checksum(),
               "checkpoints": checkpoints, "resumed_from": resumed_from,
               "restore_seconds": round(restore_seconds, 6)}
    _emit(metrics, args.json)
    return 0
