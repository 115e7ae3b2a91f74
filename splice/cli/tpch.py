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
from splice.io.tpch_data import load_table
from splice.runtime import Engine, Query
from splice.workloads import tpch_queries

__all__ = ["run_tpch", "stream_lineitem_query", "load_tpch_inputs", "check_state_backend"]


def _columns(text: str | None) -> tuple[str, ...]:
    return tuple(c.strip() for c in (text or "").split(",") if c.strip())


def check_state_backend(args: argparse.Namespace) -> str:
    """The ``--state-backend`` option, refused where nothing would use it (and ``--threads``
    likewise: it applies to unbounded Q3 without checkpoints only)."""
    if getattr(args, "threads", None) is not None and (
            args.query != "q3" or args.window != "unbounded" or getattr(args, "checkpoint_dir", None)):
        raise PlanError("--threads applies to q3 --window unbounded without --checkpoint-dir")
    backend: str = getattr(args, "state_backend", "memory")
    if backend != "memory" and args.query != "q1" and not _columns(getattr(args, "dedupe_on", None)):
        raise PlanError(f"--state-backend {backend} applies to q1's group-by and to --dedupe-on; "
                        f"{args.query}'s state stays in memory")
    return backend


def load_tpch_inputs(names: tuple[str, ...], args: argparse.Namespace) -> tuple[dict[str, pa.Table], dict[str, Any]]:
    """The command's input tables; with ``--bad-input``, ``--dedupe-on`` or ``--max-row-bytes``
    checked at the edge as they are read (:func:`splice.io.tpch_data.load_tables_checked`)."""
    from splice.io.tpch_data import load_tables_checked

    policy = getattr(args, "bad_input", None)
    dedupe = _columns(getattr(args, "dedupe_on", None))
    max_row = getattr(args, "max_row_bytes", None)
    if policy is None and not dedupe and max_row is None:
        if getattr(args, "dead_letter", None):
            raise PlanError("--dead-letter needs --bad-input dead-letter")
        return {n: load_table(n, args.sf, args.data_dir) for n in names}, {}
    mode = "dead_letter" if policy == "dead-letter" else "fail"
    return load_tables_checked(names, args.sf, args.data_dir, mode, getattr(args, "dead_letter", None), dedupe,
                               max_row, getattr(args, "state_backend", "memory"), args.batch_size)


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
    backend = check_state_backend(args)
    names = ("customer", "orders", "lineitem") if args.query == "q3" else ("lineitem",)
    tables, bad = load_tpch_inputs(names, args)
    if args.query == "q3":
        from splice.workloads.tpch_q3 import run_q3

        if args.window != "unbounded":
            try:
                window: int | None = int(args.window)
            except ValueError:
                raise PlanError(f"--window must be 'unbounded' or an integer, got {args.window!r}") from None
        else:
            window = None
        load_seconds = time.perf_counter() - t0
        answer, extra = run_q3(tables, window, args.order, args.batch_size, threads=getattr(args, "threads", None))
        seconds = float(extra.pop("seconds"))
        input_rows = sum(t.num_rows for t in tables.values())
    else:
        if args.window != "unbounded":
            raise PlanError(f"--window applies to q3 only, not {args.query}")
        lineitem = tables["lineitem"]
        load_seconds = time.perf_counter() - t0
        # the plan SQL builds for Q1: the date filter folded into the group-by, so the 98 % of
        # rows it keeps are never copied into a filtered batch
        specs = (tpch_queries.q1(pushdown=True, state_backend=backend) if args.query == "q1"
                 else tpch_queries.q6())
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
        **bad,
    }
    if backend != "memory":
        metrics["state_backend"] = backend
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
