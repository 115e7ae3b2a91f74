"""Windowed aggregation's streaming speed: W2 of the peers' workloads through an Engine.

Run: ``python -m benchmarks.window_aggregate [--rows 1000000] [--keys 10000 100] [--repeat 3]``
(one JSON object per line).

Data: stream L of ``../shared/workloads/gen.py`` made in memory (seed 42, ``--keys`` keys, times in
ms with 10 ms of jitter), cut into batches of 65,536 rows. The job: an Engine, the stream declared
with ``max_out_of_orderness=20``, and ``WindowAggregate("ts", 1000, keys=["key"], aggregates=[count,
sum(payload)])``: 1 s tumbling windows, emitted as watermarks pass their ends.

Figures, medians over ``--repeat`` runs:

* ``fresh_rows_per_s``: the job in a fresh process (``python -m benchmarks.window_aggregate
  --child``), rows over the time from the first push to the end of the stream, as a user's first
  job sees it (it includes loading the compiled kernels);
* ``warm_rows_per_s``: the same job run again in one process;
* ``duckdb_rows_per_s``: DuckDB's batch answer to the same query over the same Arrow table, in the
  same process (``GROUP BY key, ts // 1000``), the same-run baseline.

Every run's answer (groups, checksum of counts and sums) is asserted equal to DuckDB's.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT.parent / "shared" / "workloads" / "gen.py"
BATCH = 65_536


def stream(rows: int, keys: int) -> pa.Table:
    """Stream L of the peers' generator (seed 42, 10 ms jitter) with ``keys`` keys."""
    spec = importlib.util.spec_from_file_location("peers_gen", GEN)
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    key, ts, payload = gen.make_stream(np.random.default_rng(42), rows, keys, 10)
    return pa.table({"key": key, "ts": ts, "payload": payload})


def checksum(groups: int, counts: np.ndarray, sums: np.ndarray, windows: np.ndarray) -> list[int]:
    return [groups, int(((sums * (windows + 1)) + counts * counts).sum())]


def run_job(table: pa.Table) -> tuple[float, list[int]]:
    """Streaming seconds (first push to end) and the answer's checksum."""
    from splice.core.time import WatermarkStrategy
    from splice.ops.aggregate import Agg
    from splice.ops.window_aggregate import WindowAggregate
    from splice.runtime import Engine, Query

    out: list[pa.RecordBatch] = []
    eng = Engine(result_buffer_rows=None)
    eng.define_stream("l", table.schema, "ts", watermark=WatermarkStrategy(20))
    spec = WindowAggregate("ts", 1000, keys=["key"],
                           aggregates=[Agg("c", "count"), Agg("s", "sum", "payload")])
    eng.deploy(Query.chain("w2", "l", spec), on_output=out.append)
    batches = table.to_batches(max_chunksize=BATCH)
    t0 = time.perf_counter()
    for b in batches:
        eng.push("l", b)
    eng.end()
    seconds = time.perf_counter() - t0
    eng.close()
    res = pa.Table.from_batches(out)
    windows = res.column("window_start").to_numpy() // 1000
    return seconds, checksum(res.num_rows, res.column("c").to_numpy(), res.column("s").to_numpy(),
                             windows)


def duckdb_job(table: pa.Table) -> tuple[float, list[int]]:
    import duckdb

    con = duckdb.connect()
    con.register("l", table)
    q = "SELECT ts // 1000 AS w, count(*) AS c, sum(payload)::BIGINT AS s FROM l GROUP BY key, ts // 1000"
    t0 = time.perf_counter()
    res = con.sql(q).to_arrow_table()
    seconds = time.perf_counter() - t0
    return seconds, checksum(res.num_rows, res.column("c").to_numpy(), res.column("s").to_numpy(),
                             res.column("w").to_numpy())


def child(rows: int, keys: int) -> None:
    seconds, answer = run_job(stream(rows, keys))
    print(json.dumps({"seconds": seconds, "answer": answer}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, nargs="*", default=[10_000, 100])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.rows, args.keys[0])
        return
    for keys in args.keys:
        table = stream(args.rows, keys)
        fresh, warm, duck = [], [], []
        for _ in range(args.repeat):
            got = subprocess.run([sys.executable, "-m", "benchmarks.window_aggregate", "--child",
                                  "--rows", str(args.rows), "--keys", str(keys)],
                                 check=True, capture_output=True, text=True, cwd=ROOT)
            first = json.loads(got.stdout)
            dsec, expected = duckdb_job(table)
            wsec, answer = run_job(table)
            if first["answer"] != expected or answer != expected:
                raise SystemExit(f"keys={keys}: splice {first['answer']}/{answer} != duckdb {expected}")
            fresh.append(first["seconds"])
            warm.append(wsec)
            duck.append(dsec)
        f, w, d = (statistics.median(v) for v in (fresh, warm, duck))
        print(json.dumps({
            "bench": "window_aggregate", "rows": args.rows, "keys": keys, "groups": expected[0],
            "fresh_s": round(f, 3), "fresh_rows_per_s": round(args.rows / f),
            "warm_s": round(w, 3), "warm_rows_per_s": round(args.rows / w),
            "duckdb_s": round(d, 3), "duckdb_rows_per_s": round(args.rows / d),
            "warm_vs_duckdb": round(w / d, 2)}), flush=True)


if __name__ == "__main__":
    main()
