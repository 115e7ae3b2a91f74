"""Fault-tolerance benchmarks: kill -9 trials, checkpoint overhead on Q3, checkpoint/restore cost.

Prints one JSON object per line. Three experiments (``--only`` picks one):

- ``crash``: one job with four queries — a window join, an interval join, a windowed aggregation
  and Streaming Ledger (transfers on a :class:`~splice.txn.txn_operator.TransactionalOperator`) — runs
  in a subprocess under the checkpoint coordinator (checkpoint every ``--crash-interval`` s). The
  same-run baseline is an uninterrupted run. Each trial SIGKILLs the job at a random moment, runs
  it again to the end, and compares every published output file with the baseline byte for byte.
- ``q3``: ``q3_query(window=1024)`` on the engine over TPC-H at ``--sf``; throughput without
  checkpoints (baseline, same run) and with a checkpoint every second; overhead in percent.
- ``state``: checkpoint size, checkpoint time and restore time against state size (a group-by
  with N groups, a count-window hash join holding N rows per side), local store and RocksDB.
- ``backend``: the same GroupBy with its per-group state in memory and in RocksDB
  (``state_backend``): throughput (same run, alternating, answers asserted equal) and peak
  in-memory state; then checkpoints when a fraction of the groups changes per interval: the
  memory backend writes every group each time, the RocksDB backend a handle and the SST files
  new since its previous snapshot; restore time, restored answer asserted equal.

    python benchmarks/checkpoint.py                 # all three
    python benchmarks/checkpoint.py --only crash --trials 20
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from splice.joins.common.join_windows import CountWindow  # noqa: E402
from splice.joins.hash.hash_window_join import HashWindowJoin  # noqa: E402
from splice.joins.temporal.interval_join import IntervalJoin  # noqa: E402
from splice.joins.temporal.window_join import WindowJoin  # noqa: E402
from splice.ops.aggregate import Agg, GroupBy  # noqa: E402
from splice.ops.window_aggregate import WindowAggregate  # noqa: E402
from splice.runtime import BindInputs, Engine, Node, Query  # noqa: E402
from splice.runtime.checkpoint import CheckpointCoordinator, Job, SourceStream, arrival_source  # noqa: E402
from splice.runtime.checkpoint_store import open_store  # noqa: E402
from splice.txn import StateTable  # noqa: E402
from splice.txn.api import Access, add  # noqa: E402
from splice.txn.txn_operator import TransactionalOperator  # noqa: E402

ACCOUNTS = 1_000


def transfer(e: dict[str, Any]) -> list[Access]:
    """Streaming Ledger's transfer: debit ``src`` if it holds ``amount``, credit ``dst``."""
    return [add("acct", e["src"], -e["amount"], require_ge=e["amount"]), add("acct", e["dst"], e["amount"])]


def crash_job(rows: int, batch: int) -> Job:
    """The crash-trial pipeline: window join, interval join, windowed aggregation, Streaming Ledger."""
    rng = np.random.default_rng(11)
    ts = np.sort(rng.integers(0, rows * 4, rows))
    schema = pa.schema([("k", pa.int64()), ("ts", pa.int64()), ("v", pa.float64())])
    left = pa.table({"k": rng.integers(0, 500, rows), "ts": ts, "v": rng.random(rows)}, schema=schema)
    right = pa.table({"k": rng.integers(0, 500, rows), "ts": np.sort(rng.integers(0, rows * 4, rows)),
                      "v": rng.random(rows)}, schema=schema)
    events = rows // 2
    txn = pa.table({"src": rng.integers(0, ACCOUNTS, events), "dst": rng.integers(0, ACCOUNTS, events),
                    "amount": rng.integers(1, 60, events).astype(np.float64)})
    # arrival: left and right alternate in blocks of ``batch`` rows; a ledger batch after each pair
    parts: list[tuple[str, pa.RecordBatch]] = []
    tb = txn.to_batches(max_chunksize=batch // 2)
    for i, (lb, rb) in enumerate(zip(left.to_batches(max_chunksize=batch), right.to_batches(max_chunksize=batch),
                                     strict=True)):
        parts += [("left", lb), ("right", rb)]
        if i < len(tb):
            parts.append(("txn", tb[i]))

    def source(pos: int) -> Iterator[tuple[str, pa.RecordBatch]]:
        yield from parts[pos:]

    queries = [
        Query("window_join", (Node("j", BindInputs(WindowJoin, {"on": "k", "time": "ts", "size": 200}),
                                   ("left", "right")),)),
        Query("interval_join", (Node("j", BindInputs(IntervalJoin, {"on": "k", "time": "ts", "lower": -20,
                                                                    "upper": 20, "how": "left"}),
                                     ("left", "right")),)),
        Query.chain("aggregation", "left", WindowAggregate("ts", 1_000, keys=["k"],
                                                           aggregates=[Agg("s", "sum", "v"), Agg("n", "count")])),
        Query.chain("ledger", "txn", TransactionalOperator((StateTable("acct", ACCOUNTS, initial=100.0),),
                                                           transfer, punctuation=512)),
    ]
    return Job([SourceStream("left", schema, "ts", 0), SourceStream("right", schema, "ts", 0),
                SourceStream("txn", txn.schema)], queries, source)


def worker(args: argparse.Namespace) -> None:
    job = crash_job(args.rows, args.batch)
    coord = CheckpointCoordinator(job, args.dir, interval_seconds=args.crash_interval)
    print("ready", flush=True)  # imports and data done: the parent's kill clock starts here
    coord.run()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for q in job.queries:
        coord.publish(q.name, out / f"{q.name}.parquet")
    s = coord.stats
    print(json.dumps({"resumed_from": s.resumed_from, "checkpoints": s.checkpoints,
                      "batches": s.batches, "restore_seconds": s.restore_seconds}))


def _worker_cmd(args: argparse.Namespace, d: Path, out: Path) -> list[str]:
    return [sys.executable, __file__, "--worker", "--dir", str(d), "--out", str(out), "--rows", str(args.rows),
            "--batch", str(args.batch), "--crash-interval", str(args.crash_interval)]


def _outputs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.parquet"))}


def crash(args: argparse.Namespace, tmp: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SPLICE_FAULT"}
    t0 = time.perf_counter()
    p = subprocess.Popen(_worker_cmd(args, tmp / "base", tmp / "base_out"), env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    p.stdout.readline()
    t_ready = time.perf_counter()
    last = p.stdout.read()
    assert p.wait() == 0, p.stderr.read() if p.stderr else ""
    run_seconds = time.perf_counter() - t_ready
    want = _outputs(tmp / "base_out")
    print(json.dumps({"experiment": "crash", "baseline": "uninterrupted run", "seconds": round(time.perf_counter() - t0, 3),
                      "run_seconds": round(run_seconds, 3), "outputs": sorted(want),
                      "stats": json.loads(last.strip().splitlines()[-1])}), flush=True)
    rng = random.Random(args.seed)
    equal = killed_trials = trial = 0
    while killed_trials < args.trials and trial < 2 * args.trials:
        d, out = tmp / f"t{trial}", tmp / f"t{trial}_out"
        kill_at = rng.uniform(0.0, run_seconds)
        p = subprocess.Popen(_worker_cmd(args, d, out), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        assert p.stdout is not None
        p.stdout.readline()  # ready
        try:
            p.wait(timeout=kill_at)
            killed = False
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
            killed = True
        kept = sorted(int(c.name[4:]) for c in (d / "checkpoints").glob("chk-*") if not c.name.endswith(".tmp")) \
            if (d / "checkpoints").exists() else []
        r = subprocess.run(_worker_cmd(args, d, out), env=env, capture_output=True, text=True)
        ok = r.returncode == 0 and _outputs(out) == want
        stats = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {"error": r.stderr[-500:]}
        print(json.dumps({"experiment": "crash", "trial": trial, "kill_after_ready_s": round(kill_at, 3),
                          "killed": killed, "checkpoints_at_kill": kept, "resumed_from": stats.get("resumed_from"),
                          "batches_after_resume": stats.get("batches"), "output_equal": ok}), flush=True)
        killed_trials += killed
        equal += ok and killed
        trial += 1
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
    print(json.dumps({"experiment": "crash", "summary": True, "killed_trials": killed_trials,
                      "byte_equal": equal, "all_equal": equal == killed_trials}), flush=True)


def _q3_source(sf: float, batch: int) -> tuple[dict[str, pa.Table], Any]:
    from splice.io.tpch_data import load_table

    names = ("customer", "orders", "lineitem")
    tables = {n: load_table(n, sf, None) for n in names}
    # interleaved arrival at batch granularity: blocks ordered by the fraction of their table
    keys, sides, starts = [], [], []
    for s, n in enumerate(names):
        size = tables[n].num_rows
        for b in range(0, size, batch):
            keys.append(b / size)
            sides.append(s)
            starts.append(b)
    order = np.lexsort((np.array(sides), np.array(keys)))
    side_rows: list[np.ndarray] = []
    row_list: list[np.ndarray] = []
    for i in order:
        size = tables[names[sides[i]]].num_rows
        r = np.arange(starts[i], min(starts[i] + batch, size), dtype=np.int64)
        side_rows.append(np.full(len(r), sides[i], np.int8))
        row_list.append(r)
    return tables, arrival_source([(n, tables[n]) for n in names], np.concatenate(side_rows),
                                  np.concatenate(row_list), batch)


def q3(args: argparse.Namespace, tmp: Path) -> None:
    from splice.workloads.tpch_plans import q3_query

    tables, source = _q3_source(args.sf, args.q3_batch)
    names = ("customer", "orders", "lineitem")
    rows = sum(t.num_rows for t in tables.values())

    def plain() -> tuple[float, pa.Table]:
        eng = Engine()
        for n in names:
            eng.define_stream(n, tables[n].schema)
        eng.deploy(q3_query("q3", 1024))
        t0 = time.perf_counter()
        for s, b in source(0):
            eng.push(s, b)
        eng.end()
        seconds = time.perf_counter() - t0
        out = eng.results("q3")
        eng.close()
        return seconds, out

    per_checkpoint: list[tuple[float, int]] = []

    def checkpointed(i: int) -> tuple[float, pa.Table, int]:
        job = Job([SourceStream(n, tables[n].schema) for n in names], [q3_query("q3", 1024)], source)
        coord = CheckpointCoordinator(job, tmp / f"q3_{i}", interval_seconds=1.0)
        t0 = time.perf_counter()
        out = coord.run()["q3"]
        per_checkpoint.extend(zip(coord.stats.checkpoint_seconds, coord.stats.checkpoint_bytes, strict=True))
        return time.perf_counter() - t0, out, coord.stats.checkpoints

    plain()  # warm kernels
    base, ckpt, counts = [], [], []
    for i in range(args.repeat):
        s, want = plain()
        base.append(s)
        c, got, n = checkpointed(i)
        assert got.equals(want.combine_chunks()) or got.to_pylist() == want.to_pylist(), "checkpointed Q3 differs"
        ckpt.append(c)
        counts.append(n)
    b, c = statistics.median(base), statistics.median(ckpt)
    print(json.dumps({"experiment": "q3", "sf": args.sf, "window": 1024, "batch": args.q3_batch, "input_rows": rows,
                      "baseline": "same plan, no checkpoints", "baseline_seconds": [round(x, 3) for x in base],
                      "checkpoint_seconds": [round(x, 3) for x in ckpt], "checkpoints": counts,
                      "baseline_rows_per_s": round(rows / b), "checkpoint_rows_per_s": round(rows / c),
                      "overhead_pct": round(100 * (c - b) / b, 1),
                      "checkpoint_ms": [round(1000 * t, 1) for t, _ in per_checkpoint],
                      "checkpoint_bytes": [n for _, n in per_checkpoint]}), flush=True)


def state(args: argparse.Namespace, tmp: Path) -> None:
    rng = np.random.default_rng(5)
    for kind in ("group_by", "hash_join"):
        for n in args.state_sizes:
            schema = pa.schema([("k", pa.int64()), ("v", pa.float64())])
            eng = Engine()
            if kind == "group_by":
                eng.define_stream("s", schema)
                q = Query.chain("q", "s", GroupBy(["k"], [Agg("s", "sum", "v"), Agg("n", "count")]))
                feeds = [("s", pa.table({"k": rng.permutation(n), "v": rng.random(n)}))]
            else:
                eng.define_stream("l", schema)
                eng.define_stream("r", schema)
                q = Query("q", (Node("j", BindInputs(HashWindowJoin, {"on": "k", "window": CountWindow(n)}),
                                     ("l", "r")),))
                feeds = [(s, pa.table({"k": rng.integers(0, n * 100, n), "v": rng.random(n)})) for s in ("l", "r")]
            eng.deploy(q)
            for s, t in feeds:
                for b in t.to_batches(max_chunksize=65_536):
                    eng.push(s, b)
            state_bytes = sum(eng.state_bytes()["q"].values())
            for backend in ("local", "rocksdb"):
                store = open_store(tmp / f"state_{kind}_{n}_{backend}", backend, keep=2)  # type: ignore[arg-type]
                t0 = time.perf_counter()
                snap = eng.snapshot()
                t1 = time.perf_counter()
                written = store.save(1, snap, {})
                t2 = time.perf_counter()
                second = store.save(2, eng.snapshot(), {})  # unchanged state: incremental in RocksDB
                t3 = time.perf_counter()
                cp = open_store(tmp / f"state_{kind}_{n}_{backend}", backend, keep=2).load_latest() \
                    if backend == "local" else store.load_latest()
                assert cp is not None
                eng2 = Engine()
                for s, _t in feeds:
                    eng2.define_stream(s, schema)
                eng2.deploy(q, cp.state["q"])
                t4 = time.perf_counter()
                print(json.dumps({"experiment": "state", "operator": kind, "rows": n, "backend": backend,
                                  "state_bytes": state_bytes, "checkpoint_bytes": written,
                                  "second_checkpoint_bytes": second, "snapshot_s": round(t1 - t0, 4),
                                  "save_s": round(t2 - t1, 4), "second_save_s": round(t3 - t2, 4),
                                  "restore_s": round(t4 - t3, 4)}), flush=True)
                eng2.close()
                if backend == "rocksdb":
                    store.close()  # type: ignore[attr-defined]
            eng.close()


def _groupby_logic(backend: str, state_dir: Path | None, schema: pa.Schema, state: Any = None) -> Any:
    spec = GroupBy(["k"], [Agg("n", "count"), Agg("s", "sum", "v"), Agg("a", "avg", "f"), Agg("m", "max", "v")],
                   state_backend=backend, state_dir=None if state_dir is None else str(state_dir))
    return spec.build({2: schema}, state)


def backend(args: argparse.Namespace, tmp: Path) -> None:
    """GroupBy throughput on the memory and RocksDB backends (same run, alternating), then the
    checkpoint cost of each when a fraction of the groups changes between checkpoints."""
    rng = np.random.default_rng(9)
    rows, groups = args.backend_rows, args.backend_groups
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("f", pa.float64())])
    t = pa.table({"k": rng.integers(0, groups, rows), "v": rng.integers(0, 1000, rows), "f": rng.random(rows)},
                 schema=schema)
    batches = t.to_batches(max_chunksize=65_536)
    answers: dict[str, pa.Table] = {}
    for r in range(args.repeat):
        for kind in ("memory", "rocksdb"):
            logic = _groupby_logic(kind, tmp / f"tp_{kind}_{r}" if kind == "rocksdb" else None, schema)
            peak = 0
            t0 = time.perf_counter()
            for b in batches:
                logic.on_batch(2, b)
                peak = max(peak, logic.state_bytes())
            out = pa.Table.from_batches(logic.on_end())
            secs = time.perf_counter() - t0
            answers.setdefault(kind, out)
            assert out.equals(answers["memory"]), "backends disagree"
            print(json.dumps({"experiment": "backend_throughput", "backend": kind, "repeat": r, "rows": rows,
                              "groups": out.num_rows, "seconds": round(secs, 3), "rows_per_s": round(rows / secs),
                              "peak_state_bytes_in_memory": peak}), flush=True)
    # checkpoints: the full state loaded, then intervals each updating ``fraction`` of the groups
    base = pa.table({"k": np.arange(groups), "v": rng.integers(0, 1000, groups), "f": rng.random(groups)},
                    schema=schema)
    for fraction in args.changed_fractions:
        for kind in ("memory", "rocksdb"):
            d = tmp / f"ck_{kind}_{fraction}"
            logic = _groupby_logic(kind, d / "keyed" if kind == "rocksdb" else None, schema)
            for b in base.to_batches(max_chunksize=65_536):
                logic.on_batch(2, b)
            store = open_store(d, "local", keep=3)
            for i in range(1, args.intervals + 2):
                if i > 1:  # an interval's updates: ``fraction`` of the groups, once each
                    keys = rng.choice(groups, int(groups * fraction), replace=False)
                    upd = pa.table({"k": keys, "v": rng.integers(0, 1000, len(keys)),
                                    "f": rng.random(len(keys))}, schema=schema)
                    for b in upd.to_batches(max_chunksize=65_536):
                        logic.on_batch(2, b)
                t0 = time.perf_counter()
                snap = logic.snapshot()
                written = store.save(i, {"q": {"g": snap}}, {})
                secs = time.perf_counter() - t0
                sst_new = snap["groups"]["store"]["new_bytes"] if kind == "rocksdb" else 0
                print(json.dumps({"experiment": "backend_checkpoint", "backend": kind, "groups": groups,
                                  "changed_fraction": fraction if i > 1 else 1.0, "checkpoint": i,
                                  "kind": "first" if i == 1 else "after interval",
                                  "bytes_written": written + sst_new, "store_bytes": written,
                                  "new_sst_bytes": sst_new, "seconds": round(secs, 4)}), flush=True)
            t0 = time.perf_counter()
            cp = store.load_latest()
            assert cp is not None
            restored = _groupby_logic(kind, d / "keyed2" if kind == "rocksdb" else None, schema, cp.state["q"]["g"])
            restore_s = time.perf_counter() - t0
            got = pa.Table.from_batches(restored.on_end())
            assert got.equals(pa.Table.from_batches(logic.on_end())), "restored state differs"
            print(json.dumps({"experiment": "backend_restore", "backend": kind, "groups": groups,
                              "changed_fraction": fraction, "restore_s": round(restore_s, 4)}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["crash", "q3", "state", "backend"], default=None)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--rows", type=int, default=60_000, help="crash job: rows per join input")
    ap.add_argument("--batch", type=int, default=1_000, help="crash job: rows per batch")
    ap.add_argument("--crash-interval", type=float, default=0.25, help="crash job: seconds between checkpoints")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sf", type=float, default=0.1)
    ap.add_argument("--q3-batch", type=int, default=8_192)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--state-sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--backend-rows", type=int, default=2_000_000, help="backend: GroupBy input rows")
    ap.add_argument("--backend-groups", type=int, default=500_000, help="backend: distinct group keys")
    ap.add_argument("--changed-fractions", type=float, nargs="+", default=[0.01, 0.1],
                    help="backend: fraction of the groups updated between checkpoints")
    ap.add_argument("--intervals", type=int, default=3, help="backend: checkpoints after the first")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dir", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    with tempfile.TemporaryDirectory(prefix="splice_ckpt_bench_") as d:
        tmp = Path(d)
        if args.only in (None, "state"):
            state(args, tmp)
        if args.only in (None, "backend"):
            backend(args, tmp)
        if args.only in (None, "q3"):
            q3(args, tmp)
        if args.only in (None, "crash"):
            crash(args, tmp)


if __name__ == "__main__":
    main()
