"""The transactional applications as engine jobs: their events an Arrow stream, their builders
inside a :class:`~splice.txn.txn_operator.TransactionalOperator`.

The direct path (:func:`~splice.workloads.txn_apps.run_app`) hands an application's builder a
slice of its NumPy event columns and runs the batch on a :class:`~splice.txn.TxnEngine`. Here
the same events travel the data path of an :class:`~splice.runtime.Engine` as record batches
(:func:`events_table`; a 2-D event column such as GrepSum's ``keys`` becomes a fixed-size list
column), and the operator calls the same builder on each punctuation interval
(:func:`app_operator`), so the two paths give the same commits, abort reasons, results and final
state. :func:`run_app_on_engine` pushes the events through an engine; :func:`app_job` is the
same as a job for the checkpoint coordinator.

>>> from splice.workloads.txn_apps import TxnWorkload, make_app
>>> app = make_app("sl", TxnWorkload(events=1_000, keys=50, seed=3))
>>> out = run_app_on_engine(app, punctuation=256)
>>> out["committed"] + out["aborted"], out["output"].num_rows
(1000, 1000)
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from splice.core.plan import Query
from splice.io.sources import table_source
from splice.runtime.checkpoint import Job, SourceStream
from splice.runtime.engine import Engine
from splice.txn.txn_operator import TransactionalOperator
from splice.workloads.txn_apps import TxnApp

__all__ = ["EVENTS", "events_table", "app_operator", "app_job", "run_app_on_engine",
           "operator_figures"]

#: The source stream of an application's events.
EVENTS = "events"


def events_table(app: TxnApp) -> pa.Table:
    """``app``'s events as a table: one column per event column, a 2-D column as a fixed-size
    list column of its width (zero-copy where Arrow allows)."""
    cols: dict[str, pa.Array] = {}
    for name, values in app.events.items():
        v = np.ascontiguousarray(values)
        if v.ndim == 2:
            cols[name] = pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), v.shape[1])
        else:
            cols[name] = pa.array(v)
    return pa.table(cols)


def app_operator(app: TxnApp, punctuation: int, threads: int = 1, scheduler: str = "auto",
                 nested: Mapping[int, str] | None = None) -> TransactionalOperator:
    """The operator that runs ``app``'s builder on each punctuation interval of its events."""
    return TransactionalOperator(tuple(app.tables), builder=app.build, punctuation=punctuation,
                                 threads=threads, scheduler=scheduler,
                                 name=f"transactions_{app.name}", nested=dict(nested or {}),
                                 time_column="ts")


def app_job(app: TxnApp, punctuation: int, threads: int = 1, scheduler: str = "auto",
            nested: Mapping[int, str] | None = None, batch_size: int | None = None,
            query: str = "txn", events: pa.Table | None = None) -> Job:
    """A job of one query (``query``: the operator over the stream :data:`EVENTS`) whose
    replayable source pushes ``app``'s events in batches of ``batch_size`` rows (default: one
    punctuation interval each)."""
    table = events if events is not None else events_table(app)
    size = batch_size or punctuation
    op = app_operator(app, punctuation, threads, scheduler, nested)
    return Job([SourceStream(EVENTS, table.schema)], [Query.chain(query, EVENTS, op)],
               lambda pos: table_source(EVENTS, table, size, skip=pos))


def operator_figures(engine: Engine, query: str = "txn") -> dict[str, Any]:
    """The transactional operator's figures in ``engine`` (``committed``, ``aborted`` and, once
    the input has ended, ``state_checksum``; see
    :meth:`~splice.txn.txn_operator.TransactionalOperator`'s logic); empty when ``query`` has
    none."""
    figures = engine.metrics()["queries"].get(query, {}).get("operators", {})
    return next((m for m in figures.values() if "committed" in m), {})


def run_app_on_engine(app: TxnApp, punctuation: int, threads: int = 1, scheduler: str = "auto",
                      nested: Mapping[int, str] | None = None, batch_size: int | None = None,
                      events: pa.Table | None = None, keep_output: bool = True) -> dict[str, Any]:
    """Push ``app``'s events (``events``, default :func:`events_table`) through an
    :class:`~splice.runtime.Engine` running :func:`app_operator` in batches of ``batch_size``
    rows (default: one punctuation interval), then end the stream.

    Returns ``seconds`` (pushing and ending; building the engine and the operator excluded),
    ``committed``, ``aborted``, ``state_checksum`` (the operator's figures) and ``output``, the
    query's rows (``None`` with ``keep_output=False``: each result batch is dropped as it comes,
    as a sink that writes elsewhere would)."""
    table = events if events is not None else events_table(app)
    kept: list[pa.RecordBatch] = []
    eng = Engine()
    try:
        eng.define_stream(EVENTS, table.schema)
        result = eng.deploy(Query.chain("txn", EVENTS, app_operator(app, punctuation, threads,
                                                                     scheduler, nested)),
                            on_output=kept.append if keep_output else _drop)
        t0 = time.perf_counter()
        for stream, batch in table_source(EVENTS, table, batch_size or punctuation):
            eng.push(stream, batch)
        eng.end()
        seconds = time.perf_counter() - t0
        figures = operator_figures(eng)
    finally:
        eng.close()
    output = pa.Table.from_batches(kept, schema=result.schema) if keep_output else None
    return {"seconds": seconds, "committed": figures.get("committed"),
            "aborted": figures.get("aborted"), "state_checksum": figures.get("state_checksum"),
            "output": output}


def _drop(batch: pa.RecordBatch) -> None:
    return None
