"""Transactions on the engine's data path against the direct path, same run.

``python -m benchmarks.txn_engine_path [--events N] [--threads 1,2] [--repeat 3] [--process-events N]``

For Streaming Ledger, GrepSum and Toll Processing, each round runs the application's events
through the direct path (:func:`~splice.cli.txn.run_workload`: the builders and
``TxnEngine.execute_many``) and through the engine (:func:`~splice.workloads.txn_jobs.run_app_on_engine`:
Arrow batches of ``--batch-size`` rows into a ``TransactionalOperator`` calling the same
builders), alternating which goes first; both must give the same commit count and state
checksum before a figure is kept. One JSON line per (app, threads): the medians of events/s of
each path over ``--repeat`` rounds and their ratio (engine / direct), with each round's ratio.
Then the command as a user runs it, ``splice txn sl --events N`` against
``splice txn sl --events N --engine``, each in ``--repeat`` fresh processes, alternating: the
median wall time of each whole process (interpreter start, imports, event generation, kernel
loading, the run) and of the ``events_per_s`` it prints.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._txn import emit, prepare, workload_parser
from splice.cli.txn import ENGINE_BATCH_ROWS, run_workload
from splice.workloads.txn_apps import TxnWorkload, make_app
from splice.workloads.txn_jobs import events_table, run_app_on_engine

APPS = ("sl", "gs", "tp")


def _engine_run(app_name: str, w: TxnWorkload, threads: int, batch_size: int) -> dict[str, Any]:
    app = make_app(app_name, w)
    table = events_table(app)  # the direct path's events are made before its clock starts too
    out = run_app_on_engine(app, w.punctuation, threads, batch_size=batch_size, events=table,
                            keep_output=False)
    out["events_per_s"] = app.num_events / out["seconds"]
    return out


def _direct_run(app_name: str, w: TxnWorkload, threads: int) -> dict[str, Any]:
    return run_workload(make_app(app_name, w), w, "auto", threads, 0.0)


def compare(app_name: str, w: TxnWorkload, threads: int, batch_size: int, repeat: int
            ) -> dict[str, Any]:
    """Medians of ``repeat`` interleaved rounds of both paths; answers asserted equal."""
    # untimed: the heap grows to this workload's size here, not in a timed run
    _direct_run(app_name, w, threads)
    _engine_run(app_name, w, threads, batch_size)
    direct: list[float] = []
    engine: list[float] = []
    for r in range(repeat):
        order = ("direct", "engine") if r % 2 == 0 else ("engine", "direct")
        got: dict[str, dict[str, Any]] = {}
        for path in order:
            got[path] = (_direct_run(app_name, w, threads) if path == "direct"
                         else _engine_run(app_name, w, threads, batch_size))
        d, e = got["direct"], got["engine"]
        assert (e["committed"], e["aborted"], e["state_checksum"]) == (
            d["committed"], d["aborted"], d["state_checksum"]), f"{app_name}: the paths disagree"
        direct.append(d["events_per_s"])
        engine.append(e["events_per_s"])
    d_med, e_med = statistics.median(direct), statistics.median(engine)
    return {"bench": "txn_engine_path", "app": app_name, "threads": threads,
            "events": w.events, "punctuation": w.punctuation, "batch_size": batch_size,
            "direct_events_per_s": round(d_med), "engine_events_per_s": round(e_med),
            "ratio": round(e_med / d_med, 3),
            "round_ratios": [round(b / a, 3) for a, b in zip(direct, engine, strict=True)],
            "goal": "engine >= 0.8x direct", "met": e_med / d_med >= 0.8}


def _command() -> list[str]:
    script = Path(sys.executable).with_name("splice")
    return [str(script)] if script.exists() else [sys.executable, "-m", "splice.cli"]


def whole_process(events: int, repeat: int) -> dict[str, Any]:
    """``splice txn sl --events N`` with and without ``--engine``, fresh processes."""
    base = _command() + ["txn", "sl", "--events", str(events), "--json"]
    runs: dict[str, list[tuple[float, dict[str, Any]]]] = {"direct": [], "engine": []}
    for r in range(repeat):
        for path in (("direct", "engine") if r % 2 == 0 else ("engine", "direct")):
            argv = base + (["--engine"] if path == "engine" else [])
            t0 = time.perf_counter()
            done = subprocess.run(argv, capture_output=True, text=True, check=True)
            wall = time.perf_counter() - t0
            runs[path].append((wall, json.loads(done.stdout.splitlines()[-1])["metrics"]))
    sums = {(m["committed"], m["state_checksum"]) for v in runs.values() for _, m in v}
    assert len(sums) == 1, f"splice txn sl: the paths disagree: {sums}"
    out: dict[str, Any] = {"bench": "txn_engine_path", "process": "splice txn sl",
                           "events": events}
    for path, v in runs.items():
        out[f"{path}_wall_s"] = round(statistics.median(w for w, _ in v), 3)
        out[f"{path}_events_per_s"] = round(statistics.median(m["events_per_s"] for _, m in v))
    out["wall_ratio"] = round(out["engine_wall_s"] / out["direct_wall_s"], 3)
    out["commands"] = [" ".join(["splice"] + base[len(_command()):]),
                       " ".join(["splice"] + base[len(_command()):] + ["--engine"])]
    return out


def main() -> None:
    p = workload_parser(__doc__)
    p.add_argument("--batch-size", type=int, default=ENGINE_BATCH_ROWS,
                   help="rows per batch pushed to the engine (default: splice txn --engine's)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--apps", default=",".join(APPS))
    p.add_argument("--process-events", type=int, default=1_000_000,
                   help="events of the whole-process comparison (0: skip it)")
    a = p.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    apps = a.apps.split(",")
    for app_name in apps:
        for t in threads:
            prepare(app_name, t, ["auto"])
            small = TxnWorkload(events=2_000, keys=a.keys, punctuation=256, abort_ratio=0.2)
            _engine_run(app_name, small, t, 1_000)
    w = TxnWorkload(events=a.events, keys=a.keys, punctuation=a.punctuation, seed=0)
    for app_name in apps:
        for t in threads:
            emit(compare(app_name, w, t, a.batch_size, a.repeat))
    if a.process_events:
        emit(whole_process(a.process_events, a.repeat))


if __name__ == "__main__":
    main()
