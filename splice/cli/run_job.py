"""``splice run JOB.sql``: a job of SQL statements (sources, sinks, ``INSERT INTO``) run
continuously, checkpointed, until its sources end or it is stopped.

Ctrl-C (SIGINT) or SIGTERM stops the job: it takes a last checkpoint and exits 0; running the
same command again resumes from that checkpoint. A job killed outright (SIGKILL, a crash)
resumes from its last completed checkpoint, and its sinks still hold every result exactly once
(:mod:`splice.connectors.kafka_sink`, :mod:`splice.runtime.sinks`). Without
``--checkpoint-dir`` the job's Kafka sinks stage their epochs in a temporary directory, and a
stopped job starts from the beginning next time.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from splice.core.dead_letters import BadInputPolicy
from splice.core.errors import PlanError

if TYPE_CHECKING:
    from splice.cli.sql import SqlRun

__all__ = ["add_arguments", "run_job", "run_sql_job"]


def add_arguments(parser: argparse.ArgumentParser, positional: bool = True) -> None:
    if positional:
        parser.add_argument("job", help="a file of SQL statements separated by ';'")
    parser.add_argument("--checkpoint-dir", default=None,
                        help="checkpoint here and resume from here (exactly-once sinks)")
    parser.add_argument("--checkpoint-interval", type=float, default=1.0,
                        help="seconds between checkpoints (default 1)")
    parser.add_argument("--restart", action="store_true",
                        help="discard what --checkpoint-dir holds of an earlier job, then run")
    parser.add_argument("--batch-size", type=int, default=65_536,
                        help="records per batch (default 65,536)")
    parser.add_argument("--bad-input", choices=["fail", "dead-letter"], default="fail",
                        help="a record that cannot be read: stop with an error naming it "
                             "(default) or set it aside with its reason")
    parser.add_argument("--json", action="store_true", help="print the metrics line as JSON")
    parser.add_argument("--workers", type=int, default=None,
                        help="run each query's keyed stages on this many Ray workers each")
    parser.add_argument("--ray-address", default=None,
                        help="with --workers: the Ray cluster to run on (default: start one here)")


def run_sql_job(text: str, *, checkpoint_dir: str | Path | None = None,
                checkpoint_interval: float = 1.0, batch_size: int = 65_536,
                bad_input: BadInputPolicy = "fail", restart: bool = False,
                stop: threading.Event | None = None,
                observe: Callable[[Any], None] | None = None,
                workers: int | None = None, ray_address: str | None = None) -> SqlRun:
    """Run the SQL job ``text`` until its sources end, ``stop`` is set, or (called from the
    main thread) SIGINT or SIGTERM arrives; then it takes a last checkpoint and returns.
    ``splice.run_job`` is this function."""
    from splice.cli.sql import run_statements

    if checkpoint_interval <= 0:
        raise PlanError(f"checkpoint interval must be > 0 seconds, got {checkpoint_interval}")
    stop = stop if stop is not None else threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        def on_signal(signum: int, frame: FrameType | None) -> None:
            print(f"splice: {signal.Signals(signum).name}: stopping after a last checkpoint",
                  file=sys.stderr)
            stop.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        run = run_statements(text, batch_size=batch_size, bad_input=bad_input,
                             checkpoint_dir=checkpoint_dir,
                             checkpoint_interval=checkpoint_interval, stop=stop, restart=restart,
                             observe=observe, workers=workers, ray_address=ray_address)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    run.metrics["stopped"] = stop.is_set()
    return run


def run_job(args: argparse.Namespace) -> int:
    """``splice run``: the job of ``args.job``; prints the metrics line."""
    policy: BadInputPolicy = "dead_letter" if args.bad_input == "dead-letter" else "fail"
    page = None
    if getattr(args, "serve", False) and getattr(args, "workers", None):
        raise PlanError("--serve shows the engine of one process; with --workers there is no "
                        "page yet")
    if getattr(args, "serve", False):
        from splice.cli.serve import JobPage

        page = JobPage(args.host, args.port)
    try:
        run = run_sql_job(Path(args.job).read_text(), checkpoint_dir=args.checkpoint_dir,
                          checkpoint_interval=args.checkpoint_interval,
                          batch_size=args.batch_size, bad_input=policy, restart=args.restart,
                          observe=None if page is None else page.observe,
                          workers=getattr(args, "workers", None),
                          ray_address=getattr(args, "ray_address", None))
    finally:
        if page is not None:
            page.stop()
    if args.json:
        print(json.dumps({"metrics": run.metrics}))
    else:
        print(" ".join(f"{k}={v}" for k, v in run.metrics.items()), file=sys.stderr)
    return 0
