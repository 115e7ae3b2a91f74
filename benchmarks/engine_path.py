"""The engine core's figures: Q1 through the data path vs DuckDB, shared path, online reconfiguration.

Run: ``python -m benchmarks.engine_path --sf 1`` (prints one JSON object per line).

* ``q1_engine``: TPC-H Q1 over lineitem streamed from in-memory Arrow batches of 65,536 rows
  through the engine (serial and pipelined executors), against DuckDB running the same SQL on the
  same in-memory Arrow table in the same run; the answers are asserted equal first.
* ``shared_path``: Q1 and Q6 deployed together over one stream vs the two run one after the other.
* ``reconfigure``: per-batch push latency while a query is deployed and another undeployed
  mid-stream: the deploy/undeploy calls and the batch right after them vs the median batch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import duckdb
import pyarrow as pa

from splice.cli.tpch import stream_lineitem_query
from splice.io.tpch_data import load_table
from splice.runtime import Engine, Query
from splice.workloads import tpch_queries


def _median_time(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        s = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - s)
    return statistics.median(times), out


def _duckdb_q(con, sql: str) -> pa.Table:
    return con.sql(sql).to_arrow_table()


def _same(a: pa.Table, b: pa.Table) -> bool:
    return a.to_pylist() == b.cast(a.schema).to_pylist()


def _run_many(lineitem: pa.Table, plans: dict[str, list], batch_size: int, executor: str) -> float:
    batches = lineitem.to_batches(max_chunksize=batch_size)
    eng = Engine(executor=executor,  # type: ignore[arg-type]
                 switch_interval=0.001 if executor == "pipelined" else None)
    eng.define_stream("lineitem", lineitem.schema)
    for name, specs in plans.items():
        eng.deploy(Query.chain(name, "lineitem", *specs))
    s = time.perf_counter()
    for b in batches:
        eng.push("lineitem", b)
    eng.end()
    took = time.perf_counter() - s
    eng.close()
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--batch-size", type=int, default=65_536)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    lineitem = load_table("lineitem", args.sf)
    con = duckdb.connect()
    con.register("lineitem", lineitem)
    q1_sql = tpch_queries.Q1_SQL.format(delta=90)
    duck_s, duck = _median_time(lambda: _duckdb_q(con, q1_sql), args.repeat)
    plans = {"select_groupby_orderby": tpch_queries.q1, "groupby_where_orderby":
             lambda: tpch_queries.q1(pushdown=True)}
    for plan, make in plans.items():
        for executor in ("serial", "pipelined"):
            answer, _ = stream_lineitem_query(lineitem, "q1", make(), args.batch_size, executor)
            assert _same(answer, duck), f"Q1 ({plan}, {executor}) differs from DuckDB"
            # streaming time alone (engine built, batches in memory), as the function reports it
            runs = [stream_lineitem_query(lineitem, "q1", make(), args.batch_size, executor)[1]
                    for _ in range(args.repeat)]
            stream_s = statistics.median(runs)
            print(json.dumps({
                "bench": "q1_engine", "sf": args.sf, "plan": plan, "executor": executor,
                "rows": lineitem.num_rows, "splice_s": round(stream_s, 4),
                "duckdb_s": round(duck_s, 4), "ratio_vs_duckdb": round(stream_s / duck_s, 3),
                "rows_per_s": round(lineitem.num_rows / stream_s, 1), "diba_fpga_s": 0.224,
            }), flush=True)

    q6 = tpch_queries.q6()
    for executor in ("serial", "pipelined"):
        together = statistics.median(
            _run_many(lineitem, {"q1": tpch_queries.q1(), "q6": q6}, args.batch_size, executor)
            for _ in range(args.repeat))
        one = statistics.median(_run_many(lineitem, {"q1": tpch_queries.q1()}, args.batch_size, executor)
                                for _ in range(args.repeat))
        other = statistics.median(_run_many(lineitem, {"q6": q6}, args.batch_size, executor)
                                  for _ in range(args.repeat))
        print(json.dumps({
            "bench": "shared_path", "sf": args.sf, "executor": executor,
            "together_s": round(together, 4), "q1_s": round(one, 4), "q6_s": round(other, 4),
            "ratio_together_vs_sequential": round(together / (one + other), 3),
        }))

    batches = lineitem.to_batches(max_chunksize=args.batch_size)
    eng = Engine()
    eng.define_stream("lineitem", lineitem.schema)
    eng.deploy(Query.chain("q1", "lineitem", *tpch_queries.q1()))
    lat = []
    deploy_call = undeploy_call = 0.0
    mark_deploy, mark_undeploy = len(batches) // 3, (2 * len(batches)) // 3
    for i, b in enumerate(batches):
        s = time.perf_counter()
        if i == mark_deploy:
            eng.deploy(Query.chain("q6", "lineitem", *q6))
            deploy_call = time.perf_counter() - s
        if i == mark_undeploy:
            eng.undeploy("q6")
            undeploy_call = time.perf_counter() - s
        eng.push("lineitem", b)
        lat.append(time.perf_counter() - s)
    eng.end()
    med = statistics.median(lat)
    print(json.dumps({
        "bench": "reconfigure", "sf": args.sf, "batches": len(batches),
        "median_batch_ms": round(med * 1e3, 3),
        "deploy_call_ms": round(deploy_call * 1e3, 3),
        "undeploy_call_ms": round(undeploy_call * 1e3, 3),
        "batch_with_deploy_ms": round(lat[mark_deploy] * 1e3, 3),
        "batch_with_undeploy_ms": round(lat[mark_undeploy] * 1e3, 3),
        "added_latency_ms": round((lat[mark_deploy] - med) * 1e3, 3),
        "paused_longer_than_one_batch": bool(deploy_call > med or undeploy_call > med),
    }))


if __name__ == "__main__":
    main()
