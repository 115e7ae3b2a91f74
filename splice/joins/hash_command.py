"""``splice join --kind hash``: a windowed equi-join of two files, in their arrival order.

Arrival order is :func:`splice.io.arrival.arrival_positions`: by ``--arrival`` (a global
position both inputs carry), else by ``--time`` (ties left first), else row ``i`` of the left
input just before row ``i`` of the right. ``--on a,b`` joins on several columns; keys of any
hashable type become int64 codes once per input (:mod:`splice.joins.hash_keys`), and hashed
codes are checked for real key equality on the matched pairs. Windows:

* ``--window N``: count windows of the last N tuples of each input; the whole arrival sequence,
  both inputs interleaved, goes through one kernel call per ``--batch-size`` tuples
  (:func:`~splice.joins.hash_window_join.join_sequence`), with ``--impl fast|hbsj`` and
  ``--parallel P`` SplitJoin PUs.
* ``--time TS --window-time D``: pairs whose ``TS`` differ by at most D. When the inputs arrive
  by time, each input's watermark follows its largest time (minus one, so equal times are on
  time) and nothing is late; with ``--arrival`` there are no watermarks. With one PU, one
  kernel call over the whole sequence
  (:func:`~splice.joins.hash_window_join.time_join_sequence`, ``--impl fast`` or ``hbsj``)
  gives the :class:`~splice.joins.hash_window_join.HashWindowJoin` operator's result and
  retires tuples by watermark as it goes (a ring per input whose slots are reused once
  retired, so the join's state stays bounded by the tuples of one window); with
  ``--parallel P`` the operator runs batch by batch and evicts by the same watermarks.

Output: the left input's columns, then the right input's (``_right`` on taken names), ordered by
the arrival of the later tuple, then of the matched tuple.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from splice.core.errors import PlanError, SchemaError
from splice.core.time import time_values
from splice.io.arrival import LEFT, arrival_positions, interleave
from splice.joins.hash_keys import HashKeys, common_key_types
from splice.joins.hash_window_join import (
    HashWindowJoin,
    join_output_schema,
    join_sequence,
    key_columns,
    time_join_sequence,
)
from splice.joins.window import CountWindow, TimeWindow, parse_count_window

__all__ = ["run", "command_metrics", "hash_join_tables", "hash_time_join_tables"]


def _key_column(on: str) -> list[str]:
    """The key columns of ``--on a[,b...]``."""
    cols = [c.strip() for c in on.split(",") if c.strip()]
    if not cols:
        raise PlanError(f"--on names no key column: {on!r}")
    return cols


class _Keys:
    """Both inputs' key columns, their common types and codes (once per input)."""

    def __init__(self, left: pa.Table, right: pa.Table, on: str | Sequence[str]) -> None:
        self.on = list(key_columns(on))
        for t, side in ((left, "left"), (right, "right")):
            for c in self.on:
                if c not in t.schema.names:
                    raise SchemaError(f"stream {side!r}: join key column {c!r} is missing "
                                      f"(columns: {', '.join(t.schema.names)})")
        types = common_key_types(left.schema, right.schema, self.on, self.on, "'left'", "'right'",
                                 "hash join")
        self.hk = HashKeys(types)
        self.left, self.right = left, right

    def codes(self, table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
        return self.hk.encode([table.column(c) for c in self.on], name, self.on)

    def check(self, lrows: np.ndarray, rrows: np.ndarray) -> np.ndarray | None:
        """Hashed codes only: which candidate pairs (left row, right row) have equal keys."""
        if self.hk.exact or not len(lrows):
            return None
        lk = [self.left.column(c).take(pa.array(lrows)) for c in self.on]
        rk = [self.right.column(c).take(pa.array(rrows)) for c in self.on]
        return self.hk.equal(lk, rk, "'left'", "'right'", self.on, self.on)


def hash_join_tables(
    left: pa.Table,
    right: pa.Table,
    on: str | Sequence[str],
    window: int,
    arrival: str | None = None,
    time: str | None = None,
    impl: str = "fast",
    parallel: int = 1,
    batch_size: int = 65_536,
    table_size: int | None = None,
) -> tuple[pa.Table, dict]:
    """Count-window hash join of two tables in arrival order; (result, statistics)."""
    keys = _Keys(left, right, on)
    if window < 1:
        raise PlanError(f"--window must be >= 1, got {window}")
    sides, rows, codes, valid = _arrival_keys(keys, arrival, time)
    _, lseq, rseq, stats = join_sequence(sides, codes, valid, window, impl, parallel,  # type: ignore[arg-type]
                                         table_size, batch_size)
    return _gather(keys, sides, rows, lseq, rseq), stats


def hash_time_join_tables(
    left: pa.Table,
    right: pa.Table,
    on: str | Sequence[str],
    time: str,
    length: int,
    arrival: str | None = None,
    impl: str = "fast",
    parallel: int = 1,
    batch_size: int = 65_536,
) -> tuple[pa.Table, dict[str, Any]]:
    """Time-window hash join of two tables in arrival order; (result, statistics).

    Statistics: ``retained_max``, the most tuples the join held at once (both inputs; with
    one PU the rings' slots, an upper bound), ``retained_end`` (the same at the end of the
    input), ``null_keys``, and with ``impl="hbsj"`` each input's HB-SJ statistics under
    ``left``/``right``.
    """
    if length < 0:
        raise PlanError(f"--window-time must be >= 0, got {length}")
    keys = _Keys(left, right, on)
    if parallel == 1:
        # Nothing is late on this path (arrival by time: watermarks trail the largest time; by
        # --arrival: no watermarks), so one kernel call over the whole sequence gives the
        # operator's result, retiring tuples by watermark as it goes.
        sides, rows, codes, valid = _arrival_keys(keys, arrival, time)
        lt, rt = time_values(left, time, "left"), time_values(right, time, "right")
        is_left = sides == LEFT
        times = np.empty(len(sides), np.int64)
        times[is_left], times[~is_left] = lt[rows[is_left]], rt[rows[~is_left]]
        _, lseq, rseq, st = time_join_sequence(sides, codes, valid, times, int(length), arrival is None,
                                               capacity=256, impl=impl)  # type: ignore[arg-type]
        stats = {"retained_max": 2 * st["capacity"], "retained_end": 2 * st["capacity"],
                 "null_keys": st["null_keys"]}
        if impl == "hbsj":
            stats["left"], stats["right"] = st["left"], st["right"]
        return _gather(keys, sides, rows, lseq, rseq), stats
    spec = HashWindowJoin(0, 1, keys.on, TimeWindow(int(length), time), impl=impl,  # type: ignore[arg-type]
                          parallel=parallel)
    inputs = {0: left.schema, 1: right.schema}
    schema = spec.output_schema(inputs)
    logic = spec.build(inputs)
    by_time = arrival is None
    out: list[pa.RecordBatch] = []
    retained_max = 0
    for side, batch in interleave(left, right, arrival, time, batch_size):
        out.extend(logic.on_batch(side, batch))
        if by_time and batch.num_rows:
            out.extend(logic.on_watermark(side, int(time_values(batch, time).max()) - 1))
        retained_max = max(retained_max, logic.retained_rows())  # type: ignore[attr-defined]
    end = logic.retained_rows()  # type: ignore[attr-defined]
    out.extend(logic.on_end())
    st = logic.stats()  # type: ignore[attr-defined]
    stats = {"retained_max": retained_max, "retained_end": end,
             "null_keys": st["left"]["null_keys"] + st["right"]["null_keys"]}
    if impl == "hbsj":
        stats["left"], stats["right"] = st["left"]["index"], st["right"]["index"]
    return pa.Table.from_batches(out, schema=schema), stats


def _arrival_keys(keys: _Keys, arrival: str | None, time: str | None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(side, row, key code, key valid) of every input row in arrival order."""
    sides, rows = arrival_positions(keys.left, keys.right, arrival, time)
    lk, lv = keys.codes(keys.left, "'left'")
    rk, rv = keys.codes(keys.right, "'right'")
    is_left = sides == LEFT
    codes = np.empty(len(sides), np.int64)
    valid = np.empty(len(sides), np.bool_)
    codes[is_left], valid[is_left] = lk[rows[is_left]], lv[rows[is_left]]
    codes[~is_left], valid[~is_left] = rk[rows[~is_left]], rv[rows[~is_left]]
    return sides, rows, codes, valid


def _gather(keys: _Keys, sides: np.ndarray, rows: np.ndarray, lseq: np.ndarray, rseq: np.ndarray) -> pa.Table:
    """Output rows from per-side sequence numbers (left's columns, then right's), dropping
    candidate pairs whose hashed codes agree but whose keys do not."""
    is_left = sides == LEFT
    lrows, rrows = rows[is_left][lseq], rows[~is_left][rseq]
    eq = keys.check(lrows, rrows)
    if eq is not None and not eq.all():
        lrows, rrows = lrows[eq], rrows[eq]
    schema, _ = join_output_schema(keys.left.schema, keys.right.schema)
    lt = keys.left.take(pa.array(lrows))
    rt = keys.right.take(pa.array(rrows))
    return pa.Table.from_arrays(list(lt.columns) + list(rt.columns), schema=schema)


_HBSJ_FIGURES = ("table_inserts", "overflow_inserts", "overflow_peak", "overflow_comparisons", "probes")


def command_metrics(stats: dict[str, Any], impl: str) -> dict[str, Any]:
    """What the command adds to its metrics line: ``null_keys`` (tuples whose key has a null:
    they never match), ``retained_max`` for time windows, and with ``--impl hbsj`` each input's
    HB-SJ figures (Diba Fig. 17: inserts per table, overflow inserts, overflow peak, comparisons
    in the overflow buffer, probes), the SplitJoin PUs summed."""
    out: dict[str, Any] = {"null_keys": int(stats["null_keys"])}
    if "retained_max" in stats:
        out["retained_max"] = int(stats["retained_max"])
    if impl == "hbsj" and "left" in stats:
        out["hbsj"] = {side: {k: stats[side][k] for k in _HBSJ_FIGURES} for side in ("left", "right")}
    return out


def run(left: pa.Table, right: pa.Table, args: argparse.Namespace) -> tuple[pa.Table, dict[str, Any]]:
    """The ``splice join --kind hash`` entry point (see module docstring): the result and what
    the command adds to its metrics line (:func:`command_metrics`)."""
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
        result, stats = hash_time_join_tables(left, right, on, args.time, int(args.window_time), args.arrival,
                                              args.impl, args.parallel, args.batch_size)
        return result, command_metrics(stats, args.impl)
    w = parse_count_window(args.window)
    if w is None:
        raise PlanError("the hash join needs --window N (count window) or --time COL --window-time D")
    CountWindow(w)
    result, stats = hash_join_tables(left, right, on, w, args.arrival, args.time, args.impl,
                                     args.parallel, args.batch_size)
    return result, command_metrics(stats, args.impl)


def _warm_up() -> None:
    """Load (or compile) the kernels before ``run`` is timed: the command imports this module
    before it starts its clock, and compiling is not streaming."""
    one = np.zeros(2, np.int64)
    sides = np.array([0, 1], np.int8)
    ok = np.ones(2, np.bool_)
    for impl in ("fast", "hbsj"):
        join_sequence(sides, one, ok, 1, impl)  # type: ignore[arg-type]
    for impl in ("fast", "hbsj"):
        time_join_sequence(sides, one, ok, one, 0, True, capacity=1, impl=impl)  # type: ignore[arg-type]


_warm_up()
