"""``splice demo``: several continuous queries over one lineitem stream, one added online.

TPC-H lineitem (generated on the fly by tpchgen-cli at scale factor ``--sf``) arrives in
ship-date order, as a live feed of shipments would. At the start the engine runs TPC-H Q1, Q6
and a streaming alert (large discounted lines); half way through, a windowed revenue-per-ship-
mode aggregate is deployed while data flows; at three quarters the alert is undeployed. Each
query answers for exactly the part of the stream it was deployed for.
"""

from __future__ import annotations

import argparse
import json
import time
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

from splice.io.rows import json_rows, print_table
from splice.io.tpch_data import load_table
from splice.ops import Select
from splice.runtime import Engine, Query
from splice.workloads import tpch_queries

__all__ = ["run_demo"]


def _alert() -> Select:
    dec = pa.decimal128(15, 2)
    return Select(
        (pc.field("l_discount") >= pa.scalar(Decimal("0.10"), dec))
        & (pc.field("l_quantity") >= pa.scalar(Decimal("49"), dec)),
        name="large_discount_alert",
    )


def run_demo(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=args.json)
    console.print(f"[bold]splice demo[/bold]: TPC-H lineitem at SF {args.sf:g}, in ship-date order")
    t0 = time.perf_counter()
    lineitem = load_table("lineitem", args.sf)
    lineitem = lineitem.sort_by("l_shipdate")
    batches = lineitem.to_batches(max_chunksize=args.batch_size)
    load_seconds = time.perf_counter() - t0

    eng = Engine(bricks=3, units_per_brick=4)
    eng.define_stream("lineitem", lineitem.schema, time_column="l_shipdate", max_out_of_orderness=0)
    eng.deploy(Query.chain("q1", "lineitem", *tpch_queries.q1()))
    eng.deploy(Query.chain("q6", "lineitem", *tpch_queries.q6()))
    eng.deploy(Query.chain("alert", "lineitem", _alert(), compose={"lineitem": ["l_orderkey", "l_shipdate"]}))
    half, three_quarters = len(batches) // 2, (3 * len(batches)) // 4
    events: list[str] = []
    pause = 0.0
    started = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:,}/{task.total:,} rows"),
                  TimeElapsedColumn(), console=console, transient=args.json) as progress:
        task = progress.add_task("streaming lineitem", total=lineitem.num_rows)
        for i, batch in enumerate(batches):
            if i == half:
                s = time.perf_counter()
                eng.deploy(Query.chain("shipmode", "lineitem", *tpch_queries.shipmode_revenue(days=365)))
                pause += time.perf_counter() - s
                events.append(f"deployed 'shipmode' online before batch {i} of {len(batches)}")
            if i == three_quarters:
                s = time.perf_counter()
                eng.undeploy("alert")
                pause += time.perf_counter() - s
                events.append(f"undeployed 'alert' before batch {i} of {len(batches)}")
            eng.push("lineitem", batch)
            progress.advance(task, batch.num_rows)
        eng.end()
    seconds = time.perf_counter() - started

    summary = {}
    for name in ("q1", "q6", "alert", "shipmode"):
        result = eng.results(name)
        rows_seen, busy = eng.stats(name)
        summary[name] = {"rows_seen": rows_seen, "rows_out": result.num_rows,
                         "busy_seconds": round(busy, 4),
                         "rows_per_s": round(rows_seen / busy, 1) if busy > 0 else None}
        if args.json:
            for line in json_rows(result):
                print(json.dumps({"query": name, "row": json.loads(line)}))
        else:
            print_table(result, title=f"{name}: {rows_seen:,} rows seen, {result.num_rows} result rows", limit=12)
    eng.close()
    metrics = {
        "input_rows": lineitem.num_rows,
        "output_rows": sum(v["rows_out"] for v in summary.values()),
        "seconds": round(seconds, 6),
        "load_seconds": round(load_seconds, 6),
        "rows_per_s": round(lineitem.num_rows / seconds, 1),
        "reconfigure_seconds": round(pause, 6),
        "queries": summary,
    }
    if args.json:
        print(json.dumps({"metrics": metrics}))
    else:
        for e in events:
            console.print(f"- {e}")
        for name, v in summary.items():
            rate = f"{v['rows_per_s'] / 1e6:.1f} M rows/s" if v["rows_per_s"] else "-"
            console.print(f"- {name}: {v['rows_seen']:,} rows in {v['busy_seconds']:.3f} s of its units ({rate})")
        console.print(f"[bold]{lineitem.num_rows:,} rows through 4 queries in {seconds:.3f} s "
                      f"({lineitem.num_rows / seconds / 1e6:.2f} M rows/s); reconfiguration took "
                      f"{pause * 1e3:.2f} ms[/bold]")
    return 0
