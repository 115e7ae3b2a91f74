"""``splice serve``, ``splice demo --serve`` and ``splice run JOB.sql --serve``: an engine with
its web page (:mod:`splice.web`).

``splice serve`` without a job, and ``splice demo --serve``, stream the demo's TPC-H lineitem
feed (Q1, Q6, the discount alert, the ship-mode windows) over and over, each pass a span of
ship dates later, one batch every ``--pace`` seconds, until Ctrl-C or SIGTERM; queries deployed
from the page read the ``lineitem`` stream. With JOB.sql the page shows that job's engine
while it runs (as ``splice run``).
"""

from __future__ import annotations

import argparse
import signal
import threading
from types import FrameType
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from splice.runtime.checkpoint import CheckpointCoordinator
    from splice.web.server import WebServer

__all__ = ["JobPage", "run_serve", "serve_demo"]


def _stop_on_signals(stop: threading.Event) -> dict:
    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}


def _shift_days(batch: pa.RecordBatch, column: str, days: int) -> pa.RecordBatch:
    if not days:
        return batch
    i = batch.schema.get_field_index(column)
    shifted = pc.add(batch.column(i).cast(pa.int32()), days).cast(pa.int32()).cast(pa.date32())
    return batch.set_column(i, column, shifted)


def serve_demo(sf: float, batch_size: int, host: str, port: int, pace: float,
               stop: threading.Event | None = None, ready: threading.Event | None = None,
               holder: dict | None = None) -> int:
    """The demo's feed, looped, with the web page (module docstring)."""
    from splice.cli.demo import _alert
    from splice.io.tpch_data import load_table
    from splice.runtime import Engine, Query
    from splice.web.server import start_server
    from splice.web.service import EngineService
    from splice.workloads import tpch_queries

    stop = stop or threading.Event()
    lineitem = load_table("lineitem", sf).sort_by("l_shipdate")
    dates = lineitem.column("l_shipdate").cast(pa.int32())
    span = int(pc.max(dates).as_py()) - int(pc.min(dates).as_py()) + 1
    batches = lineitem.to_batches(max_chunksize=batch_size)
    eng = Engine(bricks=3, units_per_brick=4)
    eng.define_stream("lineitem", lineitem.schema, time_column="l_shipdate", max_out_of_orderness=0)
    eng.deploy(Query.chain("q1", "lineitem", *tpch_queries.q1()))
    eng.deploy(Query.chain("q6", "lineitem", *tpch_queries.q6()))
    eng.deploy(Query.chain("alert", "lineitem", _alert()), on_output=lambda b: None)
    eng.deploy(Query.chain("shipmode", "lineitem", *tpch_queries.shipmode_revenue(days=365)),
               on_output=lambda b: None)
    web = start_server(EngineService(eng), host, port)
    if holder is not None:
        holder["web"] = web
    if ready is not None:
        ready.set()
    previous = _stop_on_signals(stop)
    try:
        loop = 0
        while not stop.is_set():
            for batch in batches:
                if stop.wait(pace):
                    break
                eng.push("lineitem", _shift_days(batch, "l_shipdate", loop * span))
                for name in list(eng.queries):
                    for _ in eng.queries[name].batches():  # what the page shows is counted
                        pass
            loop += 1
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        web.stop()
        eng.close()
    return 0


def run_serve(args: argparse.Namespace) -> int:
    """``splice serve [JOB.sql ...]``."""
    if not args.jobs:
        return serve_demo(args.sf, args.batch_size, args.host, args.port, args.pace)
    if len(args.jobs) > 1:
        from splice.core.errors import PlanError

        raise PlanError("splice serve runs one job file at a time")
    from splice.cli.run_job import run_job

    args.job = args.jobs[0]
    args.serve = True
    return run_job(args)


class JobPage:
    """The web page of a SQL job's engine: pass :meth:`observe` to
    :func:`splice.cli.sql.run_statements`; the page starts when the job's coordinator exists."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.servers: list[WebServer] = []

    def observe(self, coord: CheckpointCoordinator) -> None:
        from splice.web.server import start_server
        from splice.web.service import EngineService

        self.servers.append(start_server(EngineService(lambda: coord.engine,
                                                       checkpoints=lambda: coord.stats),
                                         self.host, self.port))

    def stop(self) -> None:
        for s in self.servers:
            s.stop()
