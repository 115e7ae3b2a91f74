"""``splice join --kind interval``: the interval join of two files, streamed through the operator.

``run(left, right, args)`` joins ``left`` and ``right`` on ``--on`` (comma-separated keys) where
``right.ts ∈ [left.ts + lower, left.ts + upper]`` (inclusive), ``--how`` inner/left/right/full,
and returns the output table (left's columns, then right's, taken right names suffixed
``_right``).

Arrival. With ``--arrival COL`` the rows arrive in that global order, in runs of one side of at
most ``--batch-size`` rows. Without it they arrive by ``--time``, ties left first; the
time-ordered sequence is then cut into blocks of ``--batch-size`` rows and each block travels as
its left rows, then its right rows. Either way the bounded-out-of-orderness delay is set to the
input's own disorder in arrival order (0 for time order), so no row is late and the output is the
exact interval join, whatever the batch boundaries.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

from splice.core.errors import PlanError
from splice.core.operator import OperatorLogic, OperatorSpec
from splice.core.time import time_values
from splice.io.arrival import arrival_positions, interleave
from splice.joins.interval_join import IntervalJoin

__all__ = ["run", "stream_join", "disorder"]

LEFT_ID, RIGHT_ID = 2, 3


def keys_of(args: argparse.Namespace) -> list[str]:
    keys = [k.strip() for k in str(args.on).split(",") if k.strip()]
    if not keys:
        raise PlanError("join: --on names no key column")
    return keys


def disorder(left: pa.Table, right: pa.Table, time: str, arrival: str | None) -> int:
    """Largest ``max(earlier times) - time`` of a row of either side in arrival order (>= 0)."""
    worst = 0
    if arrival is None:
        return 0
    sides, rows = arrival_positions(left, right, arrival, None)
    for side, table, label in ((0, left, "left"), (1, right, "right")):
        t = time_values(table, time, label)[rows[sides == side]]
        if len(t) > 1:
            prev = np.maximum.accumulate(t)[:-1]
            worst = max(worst, int((prev - t[1:]).max()))
    return worst


def _blocks(left: pa.Table, right: pa.Table, time: str, batch_size: int
            ) -> Iterator[tuple[int, pa.RecordBatch]]:
    sides, rows = arrival_positions(left, right, None, time)
    tables = (left, right)
    for start in range(0, len(sides), batch_size):
        s, r = sides[start : start + batch_size], rows[start : start + batch_size]
        for side, sid in ((0, LEFT_ID), (1, RIGHT_ID)):
            idx = r[s == side]
            if not len(idx):
                continue
            t = tables[side]
            if idx[-1] - idx[0] == len(idx) - 1:
                sub = t.slice(int(idx[0]), len(idx))
            else:
                sub = t.take(pa.array(idx))
            for b in sub.combine_chunks().to_batches():
                if b.num_rows:
                    yield sid, b


def stream_join(left: pa.Table, right: pa.Table, args: argparse.Namespace,
                make_spec: Callable[[int], OperatorSpec]) -> pa.Table:
    """Stream both tables through ``make_spec(delay)`` in the CLI's arrival order; return output."""
    if args.time is None:
        raise PlanError(f"join --kind {args.kind}: --time is required (the event-time column)")
    delay = disorder(left, right, args.time, args.arrival)
    spec = make_spec(delay)
    inputs = {LEFT_ID: left.schema, RIGHT_ID: right.schema}
    schema = spec.output_schema(inputs)
    logic: OperatorLogic = spec.build(inputs)
    out: list[pa.RecordBatch] = []
    if args.arrival is not None:
        feed: Iterator[tuple[int, pa.RecordBatch]] = (
            (LEFT_ID if side == 0 else RIGHT_ID, b)
            for side, b in interleave(left, right, args.arrival, args.time, args.batch_size))
    else:
        feed = _blocks(left, right, args.time, args.batch_size)
    for sid, batch in feed:
        out.extend(logic.on_batch(sid, batch))
    out.extend(logic.on_end())
    return pa.Table.from_batches(out, schema=schema)


def run(left: pa.Table, right: pa.Table, args: argparse.Namespace) -> pa.Table:
    """The interval join of ``left`` and ``right`` as the command line describes it."""
    if args.lower is None or args.upper is None:
        raise PlanError("join --kind interval: --lower and --upper are required (inclusive bounds)")
    keys = keys_of(args)
    return stream_join(left, right, args, lambda delay: IntervalJoin(
        left=LEFT_ID, right=RIGHT_ID, on=keys, time=args.time, lower=args.lower,
        upper=args.upper, how=args.how, out_of_orderness=delay))
