"""``splice join --kind band``: an index-based band join of two files, in their arrival order.

``splice join --kind band --left L --right R --on X --eps E --window N [--arrival COL]
[--index bptree|bchain|ibchain|imtree|pimtree|nlwj] [--threads T] [--task-size K]
[--parallel-mode auto|key_range|task_queue|round_robin] [--merge-ratio m] [--insertion-depth D] --out OUT.parquet [--json]``

pairs ``(l, r)`` with ``|l.X - r.X| <= E`` (or ``--lower A --upper B``: ``A <= r.X - l.X <= B``)
over count windows of the last N tuples of each input (``--window N,M``: N left, M right), or,
with ``--time TS --window-time D`` instead of ``--window``, over time windows: pairs whose
``TS`` differ by at most D (:mod:`splice.joins.band.band_time`; ``--threads T > 1`` joins by key
ranges, on ``imtree``/``pimtree``). Arriving by time,
nothing is late and each input's watermark trails its largest time by one, retiring the other
input's tuples as the join goes; with ``--arrival`` there are no watermarks.
Arrival order is :func:`splice.io.arrival.arrival_positions`: by ``--arrival``, else by ``--time``
(ties left first), else row i of the left input just before row i of the right. The inputs go
through the :class:`~splice.joins.band.band_join.BandJoin` operator in whole batches of
``--batch-size`` rows each (:func:`~splice.joins.common.join_windows.drive_tables`), and the operator merges
them into that order itself (its ``order``), joining each merged prefix in one call of its
core (or one parallel run with ``--threads T > 1``). Output: the left input's columns, then the
right input's (``_right`` on taken names), by arrival of the later tuple, then of its partner.

Without ``--merge-ratio``/``--insertion-depth`` the join takes :class:`BandJoin`'s defaults
(merge ratio by window size, 1/8 up to 2^13 tuples, 1/16 up to 2^19 and 1/32 above, insertion
depth 2 or less; the task-queue join merge ratio 1 and the deepest level of a full window's
``T_S``); a depth beyond that level is an error.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import pyarrow as pa

from splice.core.errors import PlanError, SchemaError
from splice.joins.band.band_join import BandJoin, band_bounds
from splice.joins.common.join_windows import POSITION, TimeWindow, drive_tables, parse_count_window

__all__ = ["run", "band_join_tables", "parse_windows"]


def parse_windows(text: str | None) -> tuple[int, int]:
    """``'N'`` -> (N, N); ``'N,M'`` -> (N, M); ``2^k`` allowed; PlanError otherwise."""
    if text is None:
        raise PlanError("--window is required for the band join (a count window N or N,M)")
    parts = [p for p in str(text).split(",")]
    if len(parts) not in (1, 2):
        raise PlanError(f"--window: expected N or N,M, got {text!r}")
    sizes = []
    for p in parts:
        w = parse_count_window(p)
        if w is None:
            raise PlanError(f"--window: the band join needs bounded count windows, got {text!r}")
        sizes.append(w)
    return (sizes[0], sizes[-1])


def _key_column(on: str) -> str:
    cols = [c.strip() for c in on.split(",") if c.strip()]
    if len(cols) != 1:
        raise PlanError(f"--on: the band join takes exactly one key column, got {on!r}")
    return cols[0]


def band_join_tables(
    left: pa.Table,
    right: pa.Table,
    on: str,
    spec: BandJoin,
    arrival: str | None = None,
    time: str | None = None,
    batch_size: int = 65_536,
) -> pa.Table:
    """Band join of two tables in arrival order with the options of ``spec``: the operator
    with ``order`` the arrival column, else ``time``, else
    :data:`~splice.joins.common.join_windows.POSITION`, over whole batches of each input
    (:func:`~splice.joins.common.join_windows.drive_tables`)."""
    for t, side in ((left, "left"), (right, "right")):
        if on not in t.schema.names:
            raise SchemaError(f"stream {side!r}: join key column {on!r} is missing "
                              f"(columns: {', '.join(t.schema.names)})")
    spec = dataclasses.replace(spec, left=0, right=1, order=arrival or time or POSITION)
    return drive_tables(spec, left, right, batch_size)[0]


def run(left: pa.Table, right: pa.Table, args: argparse.Namespace) -> pa.Table:
    """The ``splice join --kind band`` entry point (see the module docstring)."""
    on = _key_column(args.on)
    lower, upper = band_bounds(args.eps, getattr(args, "lower", None), getattr(args, "upper", None))
    window_time = getattr(args, "window_time", None)
    window: tuple[int, int] | TimeWindow
    if window_time is not None:
        if args.time is None:
            raise PlanError("--window-time needs --time COL (the event-time column of both inputs)")
        if args.window is not None:
            raise PlanError("give either --window N (count) or --window-time D (time), not both")
        if window_time < 0:
            raise PlanError(f"--window-time must be >= 0, got {window_time}")
        window = TimeWindow(int(window_time), args.time)
    else:
        window = parse_windows(args.window)
    if args.threads < 1:
        raise PlanError(f"--threads must be >= 1, got {args.threads}")
    options: dict[str, Any] = {}
    if args.merge_ratio is not None:
        options["merge_ratio"] = args.merge_ratio
    elif getattr(args, "parallel_mode", "auto") == "task_queue":
        options["merge_ratio"] = 1.0  # merges stop every thread: the PIM-Tree paper's parallel setting
    spec = BandJoin(
        left=0,
        right=1,
        on=on,
        lower=lower,
        upper=upper,
        window=window,
        index=args.index,
        insertion_depth=args.insertion_depth if args.index == "pimtree" else None,
        threads=args.threads,
        task_size=args.task_size,
        parallel=getattr(args, "parallel_mode", "auto"),
        **options,
    )
    return band_join_tables(left, right, on, spec, args.arrival, args.time, args.batch_size)
