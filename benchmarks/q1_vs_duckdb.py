"""TPC-H Q1 and Q6 streamed through splice's operators against DuckDB on the same in-memory data.

``python -m benchmarks.q1_vs_duckdb --sf 1`` loads lineitem once (tpchgen-cli cache), then for
each variant asserts that splice's answer equals DuckDB's (same types, same row order) and
prints one JSON line with the median seconds of ``--runs`` runs of each (interleaved, so both
see the same background load; the 1-minute load average is reported too) and their ratio:

* ``q1_select_groupby_orderby`` — Select → GroupBy → OrderBy, as ``tpch_queries.q1()`` builds;
* ``q1_groupby_where_orderby`` — the selection pushed into the GroupBy (``where=``), so the
  filtered batch is never materialized;
* ``q6_select_sum`` — Select → global sum; ``q6_sum_where`` — the selection pushed into it.

splice's time covers pushing every batch of ``--batch-size`` rows (already in memory, reduced to
the columns the plan uses, as the decomposer does) through the operators and collecting the
answer at END. DuckDB's covers ``SELECT ...`` over the registered Arrow table, result as Arrow.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence

import duckdb
import pyarrow as pa

from splice.core.operator import OperatorSpec
from splice.io.tpch_data import load_table
from splice.workloads import tpch_queries as tq


def run_chain(specs: Sequence[OperatorSpec], batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    """Push ``batches`` through the chain ``specs`` (each output feeds the next), then END."""
    logics = []
    s = schema
    for spec in specs:
        logics.append(spec.build({2: s}))
        s = spec.output_schema({2: s})

    def push(i: int, outs: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
        if i == len(logics):
            return outs
        nxt: list[pa.RecordBatch] = []
        for b in outs:
            nxt.extend(logics[i].on_batch(2, b))
        return push(i + 1, nxt)

    for b in batches:
        push(0, [b])
    result: list[pa.RecordBatch] = []
    for i, logic in enumerate(logics):
        flushed = push(i + 1, logic.on_end())
        if i == len(logics) - 1:
            result = flushed
        else:
            result.extend(flushed)
    return pa.Table.from_batches(result, schema=s)


def median_times(fns: Sequence[Callable[[], object]], runs: int) -> list[float]:
    """Median seconds of each of ``fns``, run round-robin so that all see the same background
    load (the machine is shared)."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--batch-size", type=int, default=65_536)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)

    lineitem = load_table("lineitem", args.sf)
    con = duckdb.connect()
    con.register("lineitem", lineitem)
    threads = con.sql("select current_setting('threads')").fetchall()[0]

    q1_sql = tq.Q1_SQL.format(delta=90)
    q6_sql = tq.Q6_SQL.format(date="1994-01-01", discount=0.06, quantity=24)
    variants: list[tuple[str, list[OperatorSpec], str]] = [
        ("q1_select_groupby_orderby", tq.q1(), q1_sql),
        ("q1_groupby_where_orderby", tq.q1(pushdown=True), q1_sql),
        ("q6_select_sum", tq.q6(), q6_sql),
        ("q6_sum_where", tq.q6(pushdown=True), q6_sql),
    ]
    for name, specs, sql in variants:
        cols_map = specs[0].columns_used({2: lineitem.schema})
        needed: set[str] = set(cols_map[2]) if cols_map else set(lineitem.schema.names)
        # a Select passes every column on; the later operators say what they read
        s = lineitem.schema
        for spec in specs[1:]:
            m = spec.columns_used({2: s})
            needed |= set(m[2]) if m else set(s.names)
            s = spec.output_schema({2: s})
        needed &= set(lineitem.schema.names)
        table = lineitem.select([c for c in lineitem.schema.names if c in needed])
        batches = table.to_batches(max_chunksize=args.batch_size)

        def splice_run(
            specs: list[OperatorSpec] = specs, batches: list[pa.RecordBatch] = batches,
            schema: pa.Schema = table.schema,
        ) -> pa.Table:
            return run_chain(specs, batches, schema)

        def duck_run(sql: str = sql) -> pa.Table:
            return con.sql(sql).to_arrow_table()

        got, want = splice_run(), duck_run()
        if not got.equals(want):
            raise SystemExit(f"{name}: splice's answer differs from DuckDB's\n{got}\n{want}")
        splice_s, duckdb_s = median_times([splice_run, duck_run], args.runs)
        print(json.dumps({
            "bench": name,
            "sf": args.sf,
            "rows": lineitem.num_rows,
            "batch_size": args.batch_size,
            "runs": args.runs,
            "splice_s": round(splice_s, 4),
            "duckdb_s": round(duckdb_s, 4),
            "ratio": round(splice_s / duckdb_s, 3),
            "duckdb_threads": threads[0] if threads else None,
            "load_avg_1m": round(os.getloadavg()[0], 2),
        }), flush=True)


if __name__ == "__main__":
    main()
