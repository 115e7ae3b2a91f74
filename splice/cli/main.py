"""The ``splice`` command's parser and dispatch: demo, TPC-H as streams, joins over files, SQL,
transactional workloads.

Each subcommand's work lives in its own module of this package; this one parses arguments and
turns clear errors into one line and exit code 2.
``--json`` prints one JSON object per result row (``tpch``) and a last line
``{"metrics": {...}}`` with ``input_rows``, ``output_rows``, ``seconds`` (streaming time, data
already in memory), ``load_seconds`` and ``rows_per_s``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from splice.cli import join as join_command
from splice.core.errors import PlanError, SpliceError

__all__ = ["main", "build_parser"]

#: the kinds of ``splice join`` (:mod:`splice.cli.join`)
JOIN_KINDS = ("band", "hash", "interval", "window")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


def _add_checkpoint_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint-dir", default=None,
                        help="checkpoint here and resume from here after a crash (exactly-once output)")
    parser.add_argument("--checkpoint-interval", type=_positive_float, default=1.0,
                        help="seconds between checkpoints (default 1)")
    parser.add_argument("--checkpoint-backend", default="local", choices=["local", "rocksdb"],
                        help="checkpoint store: Arrow IPC files (default) or RocksDB (incremental)")
    parser.add_argument("--state-budget", type=_positive_int, default=None,
                        help="bytes of operator state allowed; more fails with a clear error")
    parser.add_argument("--restart", action="store_true",
                        help="discard what --checkpoint-dir holds of an earlier job, then run")


def _add_serve_options(parser: argparse.ArgumentParser, flag: bool) -> None:
    """``--serve`` (when ``flag``), ``--host`` and ``--port`` of the web page."""
    if flag:
        parser.add_argument("--serve", action="store_true",
                            help="serve a web page of the running engine (see --host, --port)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address the web page listens on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8080, help="port of the web page (default 8080)")


def _add_sql_arguments(sql: argparse.ArgumentParser) -> None:
    """The options of ``splice sql`` (:mod:`splice.cli.sql`)."""
    sql.add_argument("query", nargs="?", default=None,
                     help="SQL statements separated by ';' (or give --file)")
    sql.add_argument("--file", "-f", default=None, help="read the statements from this file")
    sql.add_argument("--table", action="append", default=[], metavar="NAME=PATH",
                     help="declare a file table (Parquet, CSV or JSON lines by suffix); repeatable")
    sql.add_argument("--out", default=None,
                     help="write the SELECT's result here (.parquet, .csv or .jsonl)")
    sql.add_argument("--json", action="store_true",
                     help="print the result rows as JSON lines, then a metrics line")
    sql.add_argument("--batch-size", type=int, default=65_536, help="rows per batch (default 65,536)")
    sql.add_argument("--bad-input", choices=["fail", "dead-letter"], default="fail",
                     help="a row that cannot be read: stop with an error (default) or set it aside")
    sql.add_argument("--dead-letter", default=None, help="file for the rows set aside")
    sql.add_argument("--workers", type=_positive_int, default=None,
                     help="run each query's keyed stages on this many Ray workers each")
    sql.add_argument("--ray-address", default=None,
                     help="with --workers: the Ray cluster to run on (default: start one here)")
    sql.add_argument("--memory-budget", type=int, default=None,
                     help="bytes a table may take while it is ordered by time; larger tables are "
                          "sorted in runs on disk (default: a quarter of the machine's memory)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="splice", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="several TPC-H queries on one lineitem stream, one added online")
    demo.add_argument("--sf", type=float, default=0.1, help="TPC-H scale factor (default 0.1)")
    demo.add_argument("--batch-size", type=_positive_int, default=16_384, help="rows per batch (default 16,384)")
    demo.add_argument("--json", action="store_true", help="print machine-readable results")
    _add_serve_options(demo, flag=True)
    demo.add_argument("--pace", type=float, default=0.02,
                      help="with --serve: seconds between batches of the looping feed")

    tpch = sub.add_parser("tpch", help="TPC-H queries as streams")
    tpch.add_argument("query", choices=["q1", "q3", "q6"], help="which TPC-H query")
    tpch.add_argument("--sf", type=float, default=1.0, help="scale factor (default 1)")
    tpch.add_argument("--batch-size", type=_positive_int, default=65_536, help="rows per batch")
    tpch.add_argument("--window", default="unbounded",
                      help="q3: 'unbounded' (exact SQL answer) or N, a count window per stream")
    tpch.add_argument("--order", default="interleaved",
                      help="q3: arrival order of customer/orders/lineitem: interleaved|sequential")
    tpch.add_argument("--executor", default="pipelined", choices=["serial", "pipelined"],
                      help="q1/q6: one thread, or a thread per brick (default; same answer)")
    tpch.add_argument("--threads", type=_positive_int, default=None,
                      help="q3 --window unbounded: join threads (default: one per core)")
    tpch.add_argument("--data-dir", default=None,
                      help="cache directory for generated TPC-H data (default ~/.cache/splice/tpch)")
    tpch.add_argument("--json", action="store_true", help="one JSON object per row, then metrics")
    tpch.add_argument("--state-backend", default="memory", choices=["memory", "rocksdb"],
                      help="q1: where the group-by's per-group state lives (rocksdb: larger than memory)")
    tpch.add_argument("--bad-input", default=None, choices=["fail", "dead-letter"],
                      help="check the tables read from --data-dir at the edge: fail, or route bad rows to --dead-letter")
    tpch.add_argument("--dead-letter", default=None,
                      help="JSON-lines file receiving bad rows with their reason (with --bad-input dead-letter)")
    tpch.add_argument("--dedupe-on", default=None,
                      help="id column(s), comma separated: a repeated id is bad input (reason 'duplicate')")
    tpch.add_argument("--max-row-bytes", type=_positive_int, default=None,
                      help="a row over this many bytes is bad input")
    _add_checkpoint_options(tpch)

    join = sub.add_parser("join", help="run one join over Parquet/CSV inputs")
    join.add_argument("--kind", required=True, choices=JOIN_KINDS, help="join algorithm")
    join.add_argument("--left", required=True, help="left input (.parquet or .csv)")
    join.add_argument("--right", required=True, help="right input (.parquet or .csv)")
    join.add_argument("--on", required=True, help="join key column(s), comma separated")
    join.add_argument("--out", required=True, help="output file (.parquet or .csv)")
    join.add_argument("--arrival", default=None, help="global arrival position column on both inputs")
    join.add_argument("--time", default=None, help="event-time column on both inputs")
    join.add_argument("--window", default=None, help="hash/band: count window w (rows per stream)")
    join.add_argument("--window-time", type=int, default=None, help="hash/band: time window length")
    join.add_argument("--impl", default="fast", choices=["fast", "hbsj"], help="hash: implementation")
    join.add_argument("--parallel", type=_positive_int, default=1, help="hash: join PUs (SplitJoin)")
    join.add_argument("--eps", type=float, default=None, help="band: |l.x - r.x| <= eps")
    join.add_argument("--index", default="pimtree",
                      choices=["bptree", "bchain", "ibchain", "imtree", "pimtree", "nlwj"],
                      help="band: index structure")
    join.add_argument("--threads", type=int, default=1, help="band: join threads")
    join.add_argument("--task-size", type=int, default=4, help="band: tuples per task")
    join.add_argument("--parallel-mode", default="auto",
                      choices=["auto", "key_range", "task_queue", "round_robin"],
                      help="band: the parallel join with --threads > 1")
    join.add_argument("--merge-ratio", type=float, default=None,
                      help="band: IM/PIM-Tree merge ratio (default by window: 1/8 up to 2^13 "
                           "tuples, 1/16 up to 2^19, 1/32 above; the task queue: 1)")
    join.add_argument("--insertion-depth", type=int, default=None,
                      help="band: PIM-Tree insertion depth (default: 2, or the deepest level of "
                           "T_S when shallower or for the task queue; never deeper than a full "
                           "window's T_S)")
    join.add_argument("--lower", type=int, default=None, help="interval: inclusive lower bound")
    join.add_argument("--upper", type=int, default=None, help="interval: inclusive upper bound")
    join.add_argument("--size", type=int, default=None, help="window: window size")
    join.add_argument("--slide", type=int, default=None, help="window: slide (default = size)")
    join.add_argument("--how", default="inner", choices=["inner", "left", "right", "full"])
    join.add_argument("--batch-size", type=_positive_int, default=65_536, help="rows per batch")
    join.add_argument("--json", action="store_true", help="print a metrics line")
    join.add_argument("--bad-input", default="fail", choices=["fail", "dead-letter"],
                      help="rows that do not parse, or have no --time value: fail with a clear "
                           "error (default), or route them to --dead-letter")
    join.add_argument("--dead-letter", default=None,
                      help="JSON-lines file receiving bad rows with their reason (with --bad-input dead-letter)")
    join.add_argument("--dedupe-on", default=None,
                      help="id column(s), comma separated: a repeated id within an input is bad input ('duplicate')")
    join_command.add_arguments(join)
    _add_checkpoint_options(join)

    txn = sub.add_parser("txn", help="transactional workloads on shared state")
    txn.add_argument("app", choices=["sl", "gs", "tp", "sej"],
                     help="Streaming Ledger, GrepSum, Toll Processing, stock exchange hash window join")
    txn.add_argument("--events", type=_positive_int, default=100_000)
    txn.add_argument("--keys", type=_positive_int, default=10_000)
    txn.add_argument("--skew", type=float, default=0.0, help="Zipf exponent, 0 = uniform")
    txn.add_argument("--abort-ratio", type=float, default=0.0, help="fraction made to abort, 0..1")
    txn.add_argument("--punctuation", type=_positive_int, default=10_240, help="events per batch")
    txn.add_argument("--threads", type=_positive_int, default=1)
    txn.add_argument("--complexity", type=float, default=0.0, help="UDF busy work per op, us")
    txn.add_argument("--scheduler", default="auto",
                     help="auto | <explore>,<granularity>,<abort> | serial | sstore | tstream")
    txn.add_argument("--seed", type=int, default=0)
    txn.add_argument("--json", action="store_true")
    txn.add_argument("--input", default=None,
                     help="sl/tp/sej: events from a .parquet/.csv file with the app's columns")
    txn.add_argument("--bad-input", default=None, choices=["fail", "dead-letter"],
                     help="with --input: fail on bad rows (default) or route them to --dead-letter")
    txn.add_argument("--dead-letter", default=None,
                     help="JSON-lines file receiving bad input rows with their reason")
    txn.add_argument("--engine", action="store_true",
                     help="run the events through the engine's data path (Arrow batches into a "
                          "transactional operator that builds each punctuation interval with the "
                          "app's own builder) instead of driving the transaction engine directly; "
                          "same commits, aborts and state checksum")
    txn.add_argument("--batch-size", type=_positive_int, default=None,
                     help="with --engine: rows per batch pushed to the engine (default 65,536)")
    _add_checkpoint_options(txn)

    sql = sub.add_parser("sql", help="SQL over file tables: windows, interval and window joins, "
                                     "aggregates, EXPLAIN")
    _add_sql_arguments(sql)

    from splice.cli import run_job

    run = sub.add_parser("run", help="run a SQL job (Kafka or file sources and sinks) "
                                     "continuously, checkpointed, until it ends or is stopped")
    run_job.add_arguments(run)
    _add_serve_options(run, flag=True)
    serve = sub.add_parser("serve", help="an engine with a web page: the demo's feed, or a job")
    serve.add_argument("jobs", nargs="*", help="a SQL job file (none: the demo's lineitem feed)")
    run_job.add_arguments(serve, positional=False)
    _add_serve_options(serve, flag=False)
    serve.add_argument("--sf", type=float, default=0.1, help="the demo feed's TPC-H scale factor")
    serve.add_argument("--pace", type=float, default=0.02,
                       help="seconds between the demo feed's batches (default 0.02)")
    return parser


def _print_metrics(metrics: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"metrics": metrics}))
    else:
        print(" ".join(f"{k}={v}" for k, v in metrics.items()))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "txn" and args.checkpoint_dir is not None and args.input is not None:
            raise PlanError("txn --checkpoint-dir runs the generated workload, not --input")
        if args.command == "join":
            return join_command.run_join(args)
        if args.command == "serve" or (args.command == "demo" and args.serve):
            from splice.cli.serve import run_serve, serve_demo

            if args.command == "demo":
                return serve_demo(args.sf, args.batch_size, args.host, args.port, args.pace)
            return run_serve(args)
        if args.command == "run":
            from splice.cli.run_job import run_job

            return run_job(args)
        if args.command == "sql":
            from splice.cli.sql import run_sql

            return run_sql(args)
        if args.command == "txn" and args.engine:
            from splice.cli.txn import run_txn_engine

            return run_txn_engine(args)
        if args.command in ("tpch", "txn") and args.checkpoint_dir is not None:
            from splice.cli import checkpointed as commands

            if args.command == "txn":
                return commands.run_txn_checkpointed(args)
            return commands.run_tpch_checkpointed(args)
        if args.command == "tpch":
            from splice.cli.tpch import run_tpch

            return run_tpch(args)
        if args.command == "txn":
            from splice.cli.txn import run_txn

            return run_txn(args)
        from splice.cli.demo import run_demo

        return run_demo(args)
    except SpliceError as exc:
        print(f"splice: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
