"""``splice tpch q1|q3|q6``: TPC-H queries streamed through the engine.

The data is generated once with tpchgen-cli into a cache directory and loaded into memory
(``load_seconds``); ``seconds`` times only the streaming: every batch pushed through the data
path, END, and the answer collected.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import pyarrow as pa

from splice.core.errors import PlanError
from splice.io.rows import json_rows, print_table
from splice.io.tpch import load_table
from splice.runtime import Engine, Query
from splice.workloads import tpch_queries

__all__ = ["run_tpch", "stream_lineitem_query"]


def stream_lineitem_query(
    lineitem: pa.Table, name: str, specs: list, batch_size: int, executor: str = "serial"
) -> tuple[pa.Table, float]:
    """Deploy ``specs`` over a lineitem stream, push ``lineitem`` in batches; (answer, seconds)."""
    batches = lineitem.to_batches(max_chunksize=batch_size)
    eng = Engine(executor=executor)  # type: ignore[arg-type]
    eng.define_stream("lineitem", lineitem.schema)
    eng.deploy(Query.chain(name, "lineitem", *specs))
    started = time.perf_counter()
    for b in batches:
        eng.push("lineitem", b)
    eng.end()
    seconds = time.perf_counter() - started
    answer = eng.results(name)
    eng.close()
    return answer, seconds


def run_tpch(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    metrics: dict[str, Any]
    if args.query == "q3":
        from splice.workloads.tpch_q3 import run_q3

        if args.window != "unbounded":
            try:
                window: int | None = int(args.window)
            except ValueError:
                raise PlanError(f"--window must be 'unbounded' or an integer, got {args.window!r}") from None
        else:
            window = None
        tables = {n: load_table(n, args.sf, args.data_dir) for n in ("customer", "orders", "lineitem")}
        load_seconds = time.perf_counter() - t0
        answer, extra = run_q3(tables, window, args.order, args.batch_size)
        seconds = float(extra.pop("seconds"))
        input_rows = sum(t.num_rows for t in tables.values())
    else:
        if args.window != "unbounded":
            raise PlanError(f"--window applies to q3 only, not {args.query}")
        lineitem = load_table("lineitem", args.sf, args.data_dir)
        load_seconds = time.perf_counter() - t0
        specs = tpch_queries.q1() if args.query == "q1" else tpch_queries.q6()
        answer, seconds = stream_lineitem_query(lineitem, args.query, specs, args.batch_size,
                                                getattr(args, "executor", "pipelined"))
        input_rows = lineitem.num_rows
        extra = {}
    metrics = {
        "query": args.query,
        "sf": args.sf,
        "input_rows": input_rows,
        "output_rows": answer.num_rows,
        "seconds": round(seconds, 6),
        "load_seconds": round(load_seconds, 6),
        "rows_per_s": round(input_rows / seconds, 1) if seconds > 0 else None,
        **extra,
    }
    if args.json:
        import json

        for line in json_rows(answer):
            print(line)
        print(json.dumps({"metrics": metrics}))
    else:
        print_table(answer, title=f"TPC-H {args.query.upper()} at SF {args.sf:g}")
        print(f"{input_rows:,} rows in {seconds:.3f} s ({input_rows / seconds / 1e6:.2f} M rows/s); "
              f"data loaded in {load_seconds:.2f} s")
    return 0
