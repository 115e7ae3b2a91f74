"""The hash window join over two whole tables, driven through its operator as the engine drives it.

:func:`hash_join_tables` (count windows) and :func:`hash_time_join_tables` (time windows) run
:class:`~splice.joins.hash.hash_window_join.HashWindowJoin` the way the data path carries a join's
inputs: each input ordered by its arrival column (a stable sort, skipped when it is in order
already), cut into whole batches of ``batch_size`` rows, the two inputs' batches taking turns by
the order value their next batch starts with, one ``on_batch`` per batch, then ``on_end``. The
operator merges the two inputs into their arrival order itself (its ``order``): by ``arrival`` (a
global position both inputs carry) when given, else by ``time`` (ties left first), else row ``i``
of the left input just before row ``i`` of the right
(:data:`~splice.joins.common.join_windows.POSITION`) — the order
:func:`splice.io.arrival.arrival_positions` gives.

Time windows: ordered by ``time``, each input's watermark trails its largest time by one inside
the join (nothing is late) and the rings stay about one window; ordered by ``arrival`` there are
no watermarks and every tuple is retained.

Output: the left input's columns, then the right input's (``_right`` on taken names), ordered by
the arrival of the later tuple, then of the matched tuple. :func:`run` is the ``splice join
--kind hash`` entry point over these functions.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from splice.core.errors import PlanError, SchemaError
from splice.joins.common.join_windows import (
    POSITION,
    CountWindow,
    TimeWindow,
    drive_tables,
    parse_count_window,
)
from splice.joins.hash.hash_window_join import HashWindowJoin, key_columns

__all__ = ["run", "command_metrics", "hash_join_tables", "hash_time_join_tables"]


def _key_column(on: str) -> list[str]:
    """The key columns of ``--on a[,b...]``."""
    cols = [c.strip() for c in on.split(",") if c.strip()]
    if not cols:
        raise PlanError(f"--on names no key column: {on!r}")
    return cols


def _check_keys(left: pa.Table, right: pa.Table, on: str | Sequence[str]) -> list[str]:
    cols = list(key_columns(on))
    for t, side in ((left, "left"), (right, "right")):
        for c in cols:
            if c not in t.schema.names:
                raise SchemaError(f"stream {side!r}: join key column {c!r} is missing "
                                  f"(columns: {', '.join(t.schema.names)})")
    return cols


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
    """Count-window hash join of two tables in arrival order; (result, statistics: each input's
    index statistics under ``left``/``right``, and ``null_keys``)."""
    cols = _check_keys(left, right, on)
    if window < 1:
        raise PlanError(f"--window must be >= 1, got {window}")
    spec = HashWindowJoin(0, 1, cols, CountWindow(window), impl=impl, table_size=table_size,  # type: ignore[arg-type]
                          parallel=parallel, order=arrival or time or POSITION)
    result, logic = drive_tables(spec, left, right, batch_size)
    st = logic.stats()
    return result, {"left": st["left"]["index"], "right": st["right"]["index"],
                    "null_keys": st["left"]["null_keys"] + st["right"]["null_keys"]}


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

    Statistics: ``retained_max``, the most ring slots the join's state held at once (both
    inputs, every PU: an upper bound on the tuples it retained; rows waiting for their place in
    the arrival order, at most about a batch per input, are not counted), ``retained_end`` (the
    same at the end of the input), ``null_keys``, and with ``impl="hbsj"`` each input's HB-SJ
    statistics under ``left``/``right``.
    """
    if length < 0:
        raise PlanError(f"--window-time must be >= 0, got {length}")
    cols = _check_keys(left, right, on)
    spec = HashWindowJoin(0, 1, cols, TimeWindow(int(length), time), impl=impl,  # type: ignore[arg-type]
                          parallel=parallel, order=arrival or time)
    most = [0]

    def watch(logic: Any) -> None:
        most[0] = max(most[0], logic.core.slots())

    result, logic = drive_tables(spec, left, right, batch_size, watch)
    end = logic.core.slots()
    st = logic.stats()
    stats: dict[str, Any] = {"retained_max": max(most[0], end), "retained_end": end,
                             "null_keys": st["left"]["null_keys"] + st["right"]["null_keys"]}
    if impl == "hbsj":
        stats["left"], stats["right"] = st["left"]["index"], st["right"]["index"]
    return result, stats


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
    """The ``splice join --kind hash`` entry point: the result and what the command adds to its
    metrics line (:func:`command_metrics`)."""
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
