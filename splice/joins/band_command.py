"""``splice join --kind band``: an index-based band join of two files, in their arrival order.

``splice join --kind band --left L --right R --on X --eps E --window N [--arrival COL]
[--index bptree|bchain|ibchain|imtree|pimtree|nlwj] [--threads T] [--task-size K]
[--parallel-mode auto|key_range|task_queue|round_robin] [--merge-ratio m] [--insertion-depth D] --out OUT.parquet [--json]``

pairs ``(l, r)`` with ``|l.X - r.X| <= E`` (or ``--lower A --upper B``: ``A <= r.X - l.X <= B``)
over count windows of the last N tuples of each input (``--window N,M``: N left, M right), or,
with ``--time TS --window-time D`` instead of ``--window``, over time windows: pairs whose
``TS`` differ by at most D (:mod:`splice.joins.band_time`; ``--threads T > 1`` joins by key
ranges, on ``imtree``/``pimtree``). Arriving by time,
nothing is late and each input's watermark trails its largest time by one, retiring the other
input's tuples as the join goes; with ``--arrival`` there are no watermarks.
Arrival order is :func:`splice.io.arrival.arrival_positions`: by ``--arrival``, else by ``--time``
(ties left first), else row i of the left input just before row i of the right. The whole
arrival sequence runs through the join in chunks of ``--batch-size`` tuples (one kernel call
each, or one parallel run with ``--threads T > 1``). Output: the left input's columns, then the
right input's (``_right`` on taken names), by arrival of the later tuple, then of its partner.

Without ``--merge-ratio``/``--insertion-depth`` the join takes :class:`BandJoin`'s defaults
(merge ratio by window size, 1/8 up to 2^13 tuples, 1/16 up to 2^19 and 1/32 above, insertion
depth 2 or less; the task-queue join merge ratio 1 and the deepest level of a full window's
``T_S``); a depth beyond that level is an error.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import pyarrow as pa

from splice.core.errors import PlanError, SchemaError
from splice.core.time import MIN_TIME, time_values
from splice.io.arrival import arrival_positions
from splice.joins.band_join import BandJoin, band_bounds, key_dtype, key_values
from splice.joins.hash_window_join import join_output_schema
from splice.joins.window import TimeWindow, parse_count_window

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
    """Band join of two tables in arrival order with the options of ``spec``."""
    for t, side in ((left, "left"), (right, "right")):
        if on not in t.schema.names:
            raise SchemaError(f"stream {side!r}: join key column {on!r} is missing "
                              f"(columns: {', '.join(t.schema.names)})")
    dtype = key_dtype([left.schema.field(on).type, right.schema.field(on).type],
                      [("left", on), ("right", on)])
    sides, rows = arrival_positions(left, right, arrival, time)
    lk = key_values(left.column(on), dtype, "left", on)
    rk = key_values(right.column(on), dtype, "right", on)
    is_left = sides == 0
    keys = np.empty(len(sides), dtype)
    keys[is_left] = lk[rows[is_left]]
    keys[~is_left] = rk[rows[~is_left]]
    sides8 = sides.astype(np.int8)
    core = spec.make_core(dtype)
    tw = spec.time_window
    times = None
    if tw is not None:
        lt = time_values(left, tw.column, "left")
        rt = time_values(right, tw.column, "right")
        times = np.empty(len(sides), np.int64)
        times[is_left] = lt[rows[is_left]]
        times[~is_left] = rt[rows[~is_left]]
    gs, ps = [], []
    wm = [MIN_TIME, MIN_TIME]
    for c0 in range(0, len(keys), batch_size):
        c1 = min(len(keys), c0 + batch_size)
        if times is None:
            g, p = core.run(sides8[c0:c1], keys[c0:c1])
        else:
            g, p = core.run(sides8[c0:c1], keys[c0:c1], times[c0:c1])
            if tw is not None and time is not None and arrival is None:
                # arriving by time nothing is late; each input's watermark trails its largest
                # time by one, and the other input's tuples a window behind it are retired
                for s in (0, 1):
                    mine = times[c0:c1][sides8[c0:c1] == s]
                    if len(mine):
                        wm[s] = max(wm[s], int(mine.max()) - 1)
                        core.evict(1 - s, wm[s] - tw.length)
        gs.append(g + c0)
        ps.append(p)
    g = np.concatenate(gs) if gs else np.empty(0, np.int64)
    p = np.concatenate(ps) if ps else np.empty(0, np.int64)
    lrows, rrows = rows[is_left], rows[~is_left]
    probe_left = sides[g] == 0
    li = np.empty(len(g), np.int64)
    ri = np.empty(len(g), np.int64)
    li[probe_left] = rows[g[probe_left]]
    ri[probe_left] = rrows[p[probe_left]]
    li[~probe_left] = lrows[p[~probe_left]]
    ri[~probe_left] = rows[g[~probe_left]]
    schema, _ = join_output_schema(left.schema, right.schema)
    lt = left.take(pa.array(li, pa.int64()))
    rt = right.take(pa.array(ri, pa.int64()))
    return pa.Table.from_arrays(lt.columns + rt.columns, schema=schema)


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
        options["merge_ratio"] = 1.0  # merges stop every thread: the seed's parallel setting
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
