"""``splice join --kind hash``: a windowed equi-join of two files, in their arrival order.

Arrival order is :func:`splice.io.arrival.arrival_positions`: by ``--arrival`` (a global
position both inputs carry), else by ``--time`` (ties left first), else row ``i`` of the left
input just before row ``i`` of the right. Windows:

* ``--window N``: count windows of the last N tuples of each input; the whole arrival sequence,
  both inputs interleaved, goes through one kernel call per ``--batch-size`` tuples
  (:func:`~splice.joins.hash_window_join.join_sequence`), with ``--impl fast|hbsj`` and
  ``--parallel P`` SplitJoin PUs.
* ``--time TS --window-time D``: pairs whose ``TS`` differ by at most D. When the inputs arrive
  by time, each input's watermark follows its largest time (minus one, so equal times are on
  time) and nothing is late; with ``--arrival`` there are no watermarks. Either way one kernel
  call over the whole sequence (:func:`~splice.joins.hash_window_join.time_join_sequence`)
  gives the :class:`~splice.joins.hash_window_join.HashWindowJoin` operator's result; with
  ``--parallel P`` the operator runs, batch by batch, over SplitJoin PUs.

Output: the left input's columns, then the right input's (``_right`` on taken names), ordered by
the arrival of the later tuple, then of the matched tuple.
"""

from __future__ import annotations

import argparse

import numpy as np
import pyarrow as pa

from splice.core.errors import PlanError, SchemaError
from splice.core.time import time_values
from splice.io.arrival import LEFT, arrival_positions, interleave
from splice.joins.hash_window_join import (
    HashWindowJoin,
    check_key_types,
    join_output_schema,
    join_sequence,
    key_values,
    time_join_sequence,
)
from splice.joins.window import CountWindow, TimeWindow, parse_count_window

__all__ = ["run", "hash_join_tables"]


def _key_column(on: str) -> str:
    cols = [c.strip() for c in on.split(",") if c.strip()]
    if len(cols) != 1:
        raise PlanError(f"--on: the hash join takes exactly one key column, got {on!r}")
    return cols[0]


def hash_join_tables(
    left: pa.Table,
    right: pa.Table,
    on: str,
    window: int,
    arrival: str | None = None,
    time: str | None = None,
    impl: str = "fast",
    parallel: int = 1,
    batch_size: int = 65_536,
    table_size: int | None = None,
) -> tuple[pa.Table, dict]:
    """Count-window hash join of two tables in arrival order; (result, statistics)."""
    for t, side in ((left, "left"), (right, "right")):
        if on not in t.schema.names:
            raise SchemaError(f"stream {side!r}: join key column {on!r} is missing "
                              f"(columns: {', '.join(t.schema.names)})")
    check_key_types(left.schema.field(on).type, right.schema.field(on).type, on, on)
    if window < 1:
        raise PlanError(f"--window must be >= 1, got {window}")
    sides, rows, keys, valid = _arrival_keys(left, right, on, arrival, time)
    _, lseq, rseq, stats = join_sequence(sides, keys, valid, window, impl, parallel,  # type: ignore[arg-type]
                                         table_size, batch_size)
    return _gather(left, right, sides, rows, lseq, rseq), stats


def _arrival_keys(left: pa.Table, right: pa.Table, on: str, arrival: str | None, time: str | None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(side, row, key, key valid) of every input row in arrival order."""
    sides, rows = arrival_positions(left, right, arrival, time)
    lk, lv = key_values(left.column(on))
    rk, rv = key_values(right.column(on))
    is_left = sides == LEFT
    keys = np.empty(len(sides), np.int64)
    valid = np.empty(len(sides), np.bool_)
    keys[is_left], valid[is_left] = lk[rows[is_left]], lv[rows[is_left]]
    keys[~is_left], valid[~is_left] = rk[rows[~is_left]], rv[rows[~is_left]]
    return sides, rows, keys, valid


def _gather(left: pa.Table, right: pa.Table, sides: np.ndarray, rows: np.ndarray,
            lseq: np.ndarray, rseq: np.ndarray) -> pa.Table:
    """Output rows from per-side sequence numbers (left's columns, then right's)."""
    is_left = sides == LEFT
    lrows, rrows = rows[is_left], rows[~is_left]
    schema, _ = join_output_schema(left.schema, right.schema)
    lt = left.take(pa.array(lrows[lseq]))
    rt = right.take(pa.array(rrows[rseq]))
    return pa.Table.from_arrays(list(lt.columns) + list(rt.columns), schema=schema)


def _time_join(left: pa.Table, right: pa.Table, on: str, args: argparse.Namespace) -> pa.Table:
    if args.parallel == 1:
        # Nothing is late on this path (arrival by time: watermarks trail the largest time; by
        # --arrival: no watermarks), so one kernel call over the whole sequence gives the
        # operator's result.
        for t, name in ((left, "left"), (right, "right")):
            if on not in t.schema.names:
                raise SchemaError(f"stream {name!r}: join key column {on!r} is missing")
        check_key_types(left.schema.field(on).type, right.schema.field(on).type, on, on)
        sides, rows, keys, valid = _arrival_keys(left, right, on, args.arrival, args.time)
        lt, rt = time_values(left, args.time, "left"), time_values(right, args.time, "right")
        is_left = sides == LEFT
        times = np.empty(len(sides), np.int64)
        times[is_left], times[~is_left] = lt[rows[is_left]], rt[rows[~is_left]]
        _, lseq, rseq = time_join_sequence(sides, keys, valid, times, int(args.window_time),
                                           args.arrival is None)
        return _gather(left, right, sides, rows, lseq, rseq)
    spec = HashWindowJoin(0, 1, on, TimeWindow(int(args.window_time), args.time), impl=args.impl,
                          parallel=args.parallel)
    inputs = {0: left.schema, 1: right.schema}
    schema = spec.output_schema(inputs)
    logic = spec.build(inputs)
    by_time = args.arrival is None
    out: list[pa.RecordBatch] = []
    for side, batch in interleave(left, right, args.arrival, args.time, args.batch_size):
        out.extend(logic.on_batch(side, batch))
        if by_time and batch.num_rows:
            out.extend(logic.on_watermark(side, int(time_values(batch, args.time).max()) - 1))
    out.extend(logic.on_end())
    return pa.Table.from_batches(out, schema=schema)


def run(left: pa.Table, right: pa.Table, args: argparse.Namespace) -> pa.Table:
    """The ``splice join --kind hash`` entry point (see module docstring)."""
    on = _key_column(args.on)
    how = getattr(args, "how", "inner")
    if how != "inner":
        raise PlanError(f"--kind hash computes inner joins only, got --how {how}")
    if args.window_time is not None:
        if args.time is None:
            raise PlanError("--window-time needs --time COL (the event-time column of both inputs)")
        if args.window is not None:
            raise PlanError("give either --window N (count) or --window-time D (time), not both")
        if args.window_time < 0:
            raise PlanError(f"--window-time must be >= 0, got {args.window_time}")
        return _time_join(left, right, on, args)
    w = parse_count_window(args.window)
    if w is None:
        raise PlanError("the hash join needs --window N (count window) or --time COL --window-time D")
    CountWindow(w)
    result, _ = hash_join_tables(left, right, on, w, args.arrival, args.time, args.impl,
                                 args.parallel, args.batch_size)
    return result


def _warm_up() -> None:
    """Load (or compile) the kernels before ``run`` is timed: the command imports this module
    before it starts its clock, and compiling is not streaming."""
    one = np.zeros(2, np.int64)
    sides = np.array([0, 1], np.int8)
    ok = np.ones(2, np.bool_)
    for impl in ("fast", "hbsj"):
        join_sequence(sides, one, ok, 1, impl)  # type: ignore[arg-type]
    time_join_sequence(sides, one, ok, one, 0, True)


_warm_up()
