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
from pathlib import Path
from types import FrameType

from splice.core.dead_letters import BadInputPolicy
from splice.core.errors import PlanError

__all__ = ["add_arguments", "run_job"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
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


def run_job(args: argparse.Namespace) -> int:
    from splice.cli.sql import run_statements

    if args.checkpoint_interval <= 0:
        raise PlanError(f"--checkpoint-interval must be > 0, got {args.checkpoint_interval}")
    text = Path(args.job).read_text()
    policy: BadInputPolicy = "dead_letter" if args.bad_input == "dead-letter" else "fail"
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        print(f"splice: {signal.Signals(signum).name}: stopping after a last checkpoint",
              file=sys.stderr)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        run = run_statements(text, batch_size=args.batch_size, bad_input=policy,
                             checkpoint_dir=args.checkpoint_dir,
                             checkpoint_interval=args.checkpoint_interval, stop=stop,
                             restart=args.restart)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    metrics = dict(run.metrics)
    metrics["stopped"] = stop.is_set()
    if args.json:
        print(json.dumps({"metrics": metrics}))
    else:
        print(" ".join(f"{k}={v}" for k, v in metrics.items()), file=sys.stderr)
    return 0
