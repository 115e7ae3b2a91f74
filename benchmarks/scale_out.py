"""Scale-out on Ray, measured in one run: the exchange's channel, and W1-W3 on 1 and 2 workers.

Run: ``python -m benchmarks.scale_out [--rows 1000000] [--repeat 3]`` (JSON lines).

* ``channel``: one driver, one subtask actor whose keyed stage is a windowed count (W2's),
  batches of 65,536 rows of W2's stream L sent through a :class:`~splice.cluster.ray_runner.
  RayChannel`: rows/s and batches/s of the whole send (split, call, the subtask's work), and the
  latency of one batch (a call awaited alone, median);
* ``w1``-``w3``: the peers' workloads as SQL (``../shared/workloads/gen.py`` streams, Parquet),
  streaming seconds on 1 and 2 workers against one process (``run_statements`` without workers),
  the answers asserted equal; the exchange's share is the 1-worker run over the one-process run;
* with ``--tpch SF``: TPC-H Q3 as SQL (two keyed stages) the same way.

A local Ray with ``num_cpus=2`` (this host has 2 cores), started once, before the clocks.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.sql_workloads import SPLICE, data  # noqa: E402


def channel(table: pa.Table, repeat: int) -> dict:
    import ray

    from splice.cluster.exchange import Exchange, Message
    from splice.cluster.ray_runner import RayChannel, Subtask
    from splice.ops.aggregate import Agg
    from splice.ops.window_aggregate import WindowAggregate
    from splice.runtime import Query
    from splice.runtime.remote import RemoteStream

    query = Query.chain("w", "l", WindowAggregate("ts", 1000, keys=["key"],
                                                 aggregates=[Agg("c", "count")]))
    batches = table.to_batches(max_chunksize=65_536)
    rates, latencies = [], []
    for _ in range(repeat):
        actor = ray.remote(num_cpus=0)(Subtask).remote(0, [RemoteStream("l", table.schema, "ts")], query)
        ray.get(actor.ping.remote())
        ch = RayChannel(actor, lambda i, reply: None, 0)
        ex = Exchange([ch], {"l": ["key"]}, [pa.int64()])
        t0 = time.perf_counter()
        for b in batches:
            ex.send_batch("l", b)
        ex.flush()
        rates.append(time.perf_counter() - t0)
        one = []
        for b in batches[:8]:
            s = time.perf_counter()
            ray.get(actor.receive.remote([Message(ex.seq[0], "batch", "l", b)]))
            ex.seq[0] += 1
            one.append(time.perf_counter() - s)
        latencies.append(statistics.median(one))
        ray.kill(actor)
    sec = statistics.median(rates)
    return {"bench": "scale_out", "what": "channel", "rows": table.num_rows,
            "batches": len(batches), "rows_per_s": round(table.num_rows / sec),
            "batches_per_s": round(len(batches) / sec, 1),
            "batch_latency_ms": round(1000 * statistics.median(latencies), 2)}


def medians(what: str, text: str, tables: list[str], repeat: int) -> dict[str, float]:
    """Median streaming seconds of ``text`` in one process and on 1 and 2 workers, taking
    turns, every answer asserted equal to the one process's."""
    from splice.cli.sql import run_statements

    secs: dict[str, list[float]] = {"one_process": [], "workers_1": [], "workers_2": []}
    answer = None
    for _ in range(repeat):
        for label, workers in (("one_process", None), ("workers_1", 1), ("workers_2", 2)):
            run = run_statements(text, tables=tables, workers=workers)
            got = run.results["query"].to_pylist()
            if answer is not None and got != answer:
                raise SystemExit(f"{what}: {label} answered {got}, one process {answer}")
            answer = got
            secs[label].append(run.metrics["seconds"])
    return {k: statistics.median(v) for k, v in secs.items()}


def q3(sf: float, repeat: int) -> None:
    """TPC-H Q3 as SQL over the Parquet tables on 1 and 2 workers against one process."""
    from splice.io.tpch_data import generate
    from splice.workloads.tpch_q3 import Q3_SQL

    folder = generate(sf, ("customer", "orders", "lineitem"))
    tables = [f"{n}={folder / n}.parquet" for n in ("customer", "orders", "lineitem")]
    text = Q3_SQL.replace("o_orderdate\nLIMIT", "o_orderdate, l_orderkey\nLIMIT")
    med = medians("q3", text, tables, repeat)
    print(json.dumps({"bench": "scale_out", "what": "q3", "sf": sf,
                      **{f"{k}_s": round(v, 3) for k, v in med.items()},
                      "two_workers_vs_one_process": round(med["one_process"] / med["workers_2"], 2)}),
          flush=True)


def main() -> None:
    import ray

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tpch", type=float, default=None, metavar="SF",
                    help="time TPC-H Q3 at this scale factor instead (two keyed stages)")
    args = ap.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    if args.tpch is not None:
        q3(args.tpch, args.repeat)
        ray.shutdown()
        return
    d = data(args.rows, Path(tempfile.gettempdir()) / "splice-peers")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("L", "R"):
            pq.write_table(pa.csv.read_csv(d / f"{name}.csv"), Path(tmp) / f"{name}.parquet")
        print(json.dumps(channel(pq.read_table(Path(tmp) / "L.parquet"), args.repeat)), flush=True)
        ddl = "".join(
            f"CREATE TABLE {t} (key BIGINT, ts BIGINT, payload BIGINT, WATERMARK FOR ts AS "
            f"ts - 20) WITH (connector = 'file', path = '{tmp}/{t.upper()}.parquet');"
            for t in ("l", "r"))
        total = {"w1": 2 * args.rows, "w2": args.rows, "w3": 2 * args.rows}
        for w, q in SPLICE.items():
            med = medians(w, ddl + q, [], args.repeat)
            print(json.dumps({
                "bench": "scale_out", "what": w, "rows": total[w],
                **{f"{k}_s": round(v, 3) for k, v in med.items()},
                **{f"{k}_rows_per_s": round(total[w] / v) for k, v in med.items()},
                "two_workers_vs_one_process": round(med["one_process"] / med["workers_2"], 2),
                "exchange_cost": round(med["workers_1"] / med["one_process"], 2)}), flush=True)
    ray.shutdown()


if __name__ == "__main__":
    import pyarrow.csv  # noqa: F401  (pa.csv)

    main()
