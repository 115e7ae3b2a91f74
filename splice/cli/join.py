"""``splice join``: one join of two files, run as a job on the engine.

The two files become the source streams ``left`` and ``right``, the join of ``--kind`` is one
node over them, and the job runs under the checkpoint coordinator: with checkpoints when
``--checkpoint-dir`` is given, without them otherwise. Either way the same operators see the
same batches on the same path.

Event time. Time-based joins (``interval``, ``window``, and ``hash``/``band`` with
``--window-time``) take event time from ``--time``:

* without ``--max-out-of-orderness`` each input is ordered by time before it streams (stable:
  equal times keep their file order; an input larger than ``--memory-budget`` is sorted in runs
  on disk and merged), and each source's watermark trails its newest time by one, so no row is
  late and the answer is the SQL answer whatever the order of the rows in the files;
* with ``--max-out-of-orderness D`` the rows stream in file order, each source's watermark
  trails its newest time by ``D + 1``, and a row further behind is late: counted per input
  (``late_rows`` in the metrics) and written to ``--late-output``, never dropped silently.

Count windows (``hash``/``band`` with ``--window N``) are defined by arrival: by ``--arrival``
(a position column both inputs carry), else by ``--time`` (ties left first), else row i of the
left input just before row i of the right. Each input is ordered by that column and the join
operator merges the two inputs itself.

The path carries whole batches of ``--batch-size`` rows. The two inputs' batches take turns by
the smallest time (or arrival position) of each one's next batch, so both sources advance
together; with neither, by the rows each has sent.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from splice.core.errors import PlanError
from splice.core.ordered_merge import batch_turns
from splice.core.plan import BindInputs, Node, Query
from splice.core.time import WatermarkStrategy
from splice.io.bad_input import BadInputPolicy, DeadLetterSink
from splice.kernels.machine import machine_bytes
from splice.runtime.checkpoint import CheckpointCoordinator, Job, ReplayableSource, SourceStream
from splice.runtime.fingerprint import job_fingerprint
from splice.runtime.sinks import publish_table

__all__ = ["run_join", "join_spec", "JoinInput", "interleave", "late_table", "add_arguments"]

KINDS = ("band", "hash", "interval", "window")
SIDES = ("left", "right")


def add_arguments(join: argparse.ArgumentParser) -> None:
    """The event-time and bad-input options of ``splice join`` (the rest are in the parser)."""
    join.add_argument("--max-out-of-orderness", type=int, default=None,
                      help="time-based joins: stream the rows in file order, late beyond D "
                           "(default: order each input by --time first, nothing late)")
    join.add_argument("--idle-timeout", type=int, default=None,
                      help="an input whose watermark lags the other's by more than this is "
                           "moved along (time column units)")
    join.add_argument("--late-output", default=None,
                      help="file for the rows that arrived late (.parquet or .csv)")
    join.add_argument("--memory-budget", type=int, default=None,
                      help="bytes an input may take while it is ordered; larger inputs are "
                           "sorted in runs on disk (default: a quarter of the machine's memory)")


def _keys(on: str) -> list[str]:
    keys = [k.strip() for k in str(on).split(",") if k.strip()]
    if not keys:
        raise PlanError("join: --on names no key column")
    return keys


def time_based(args: argparse.Namespace) -> bool:
    """Whether the join's windows are in event time (else count windows, or none)."""
    return args.kind in ("interval", "window") or args.window_time is not None


def _check_options(args: argparse.Namespace) -> None:
    if args.kind in ("interval", "window") and args.time is None:
        raise PlanError(f"join --kind {args.kind}: --time is required (the event-time column)")
    if args.window_time is not None and args.time is None:
        raise PlanError("--window-time needs --time COL (the event-time column of both inputs)")
    if time_based(args) and args.arrival is not None:
        raise PlanError(f"join --kind {args.kind}: --arrival orders count windows; a time-based "
                        "join streams by --time (with --max-out-of-orderness: in file order)")
    if not time_based(args):
        for flag, value in (("--max-out-of-orderness", args.max_out_of_orderness),
                            ("--idle-timeout", args.idle_timeout)):
            if value is not None:
                raise PlanError(f"{flag} applies to time-based joins (interval, window, "
                                "--window-time), not to count windows")
    if args.how != "inner" and args.kind in ("hash", "band"):
        raise PlanError(f"--kind {args.kind} computes inner joins only, got --how {args.how}")
    if args.window_time is not None and args.window_time < 0:
        raise PlanError(f"--window-time must be >= 0, got {args.window_time}")
    if args.dead_letter is not None and args.bad_input != "dead-letter":
        raise PlanError("--dead-letter needs --bad-input dead-letter")


def _order_column(args: argparse.Namespace) -> str | None:
    """The column each input is ordered by (``None``: file order)."""
    if time_based(args):
        return args.time if args.max_out_of_orderness is None else None
    return args.arrival or args.time


def join_spec(args: argparse.Namespace) -> BindInputs:
    """The join node's spec, its input stream ids bound when the job deploys it."""
    keys = _keys(args.on)
    if args.kind == "interval":
        from splice.joins.temporal.interval_join import IntervalJoin

        if args.lower is None or args.upper is None:
            raise PlanError("join --kind interval: --lower and --upper are required (inclusive bounds)")
        return BindInputs(IntervalJoin, {"on": keys, "time": args.time, "lower": args.lower,
                                         "upper": args.upper, "how": args.how})
    if args.kind == "window":
        from splice.joins.temporal.window_join import WindowJoin

        if args.size is None:
            raise PlanError("join --kind window: --size is required (window length in time units)")
        return BindInputs(WindowJoin, {"on": keys, "time": args.time, "size": args.size,
                                       "slide": args.slide, "how": args.how})
    from splice.joins.common.join_windows import (
        POSITION,
        CountWindow,
        TimeWindow,
        parse_count_window,
    )

    # count windows follow an arrival order that the operator merges (a column, or positions);
    # a time window over time-ordered inputs is ordered by time, so each input's own times
    # retire the other's tuples and a probe stops at the window's edge
    order = _order_column(args) or (None if time_based(args) else POSITION)
    if args.window is not None and args.window_time is not None:
        raise PlanError("give either --window N (count) or --window-time D (time), not both")
    if args.kind == "hash":
        from splice.joins.hash.hash_window_join import HashWindowJoin

        window: Any
        if args.window_time is not None:
            window = TimeWindow(int(args.window_time), args.time)
        else:
            w = parse_count_window(args.window)
            if w is None:
                raise PlanError("the hash join needs --window N (count window) or --time COL "
                                "--window-time D")
            window = CountWindow(w)
        return BindInputs(HashWindowJoin, {"on": keys, "window": window, "impl": args.impl,
                                           "parallel": args.parallel, "order": order})
    if args.kind == "band":
        from splice.joins.band.band_join import BandJoin, band_bounds
        from splice.joins.band.band_tables import _key_column as band_key
        from splice.joins.band.band_tables import parse_windows

        lower, upper = band_bounds(args.eps, None, None)
        options: dict[str, Any] = {
            "on": band_key(args.on), "lower": lower, "upper": upper, "index": args.index,
            "insertion_depth": args.insertion_depth if args.index == "pimtree" else None,
            "threads": args.threads, "task_size": args.task_size, "parallel": args.parallel_mode,
            "window": (TimeWindow(int(args.window_time), args.time) if args.window_time is not None
                       else parse_windows(args.window)),
            "order": order}
        if args.merge_ratio is not None:
            options["merge_ratio"] = args.merge_ratio
        elif args.parallel_mode == "task_queue":
            options["merge_ratio"] = 1.0  # merges stop every thread: the PIM-Tree paper's parallel setting
        return BindInputs(BandJoin, options)
    raise PlanError(f"join --kind {args.kind}: unknown kind (choose {', '.join(KINDS)})")


# -- inputs -----------------------------------------------------------------------------------

@dataclass
class JoinInput:
    """One input as the job streams it: its schema, its rows, and its batches (replayable)."""

    name: str
    schema: pa.Schema
    num_rows: int
    batches: Callable[[], Iterator[pa.RecordBatch]]
    close: Callable[[], None] = field(default=lambda: None)


def _memory_budget(args: argparse.Namespace) -> int:
    if args.memory_budget is not None:
        if args.memory_budget < 1:
            raise PlanError(f"--memory-budget must be >= 1 byte, got {args.memory_budget}")
        return int(args.memory_budget)
    have = machine_bytes()
    return (have // 4) if have else 4 << 30


def _in_memory(name: str, table: pa.Table, batch_size: int) -> JoinInput:
    from splice.io.sources import bounded_batches

    table = table.combine_chunks()
    return JoinInput(name, table.schema, table.num_rows,
                     lambda: iter(bounded_batches(table, batch_size)))


def load_inputs(args: argparse.Namespace, sink: DeadLetterSink | None) -> list[JoinInput]:
    """``--left`` and ``--right`` as the job streams them: read with the bad-input policy,
    ordered by the order column (:func:`_order_column`), deduplicated with ``--dedupe-on``."""
    from splice.io.files import read_input
    from splice.io.time_order import order_by_time

    policy = "dead_letter" if args.bad_input == "dead-letter" else "fail"
    order = _order_column(args)
    dedupe = [c.strip() for c in (args.dedupe_on or "").split(",") if c.strip()]
    inputs: list[JoinInput] = []
    for name, path in zip(SIDES, (args.left, args.right), strict=True):
        if order is not None:
            ordered = order_by_time(path, name, order, memory_budget=_memory_budget(args),
                                    policy=policy, sink=sink,  # type: ignore[arg-type]
                                    batch_size=args.batch_size)
            inp = JoinInput(name, ordered.schema, ordered.num_rows,
                            functools.partial(ordered.batches, args.batch_size), ordered.close)
        else:
            table = read_input(path, name, time_column=args.time, policy=policy, sink=sink)  # type: ignore[arg-type]
            inp = _in_memory(name, table, args.batch_size)
        if dedupe:
            from splice.io.dedupe import Deduplicator

            d = Deduplicator(name, inp.schema, dedupe, policy, sink)  # type: ignore[arg-type]
            try:
                kept = [d.check(b) for b in inp.batches()]
            finally:
                d.close()
                inp.close()
            inp = _in_memory(name, pa.Table.from_batches(kept, inp.schema), args.batch_size)
        inputs.append(inp)
    return inputs


def interleave(inputs: Sequence[JoinInput], column: str | None) -> ReplayableSource:
    """The job's source: the inputs' batches in turns, the next batch always from the input
    whose next batch starts earliest in ``column`` (ties: the first input), or with ``column``
    ``None`` from the input that has sent the fewest rows
    (:func:`~splice.core.ordered_merge.batch_turns`). ``source(p)`` replays from batch p."""

    def source(position: int) -> Iterator[tuple[str, pa.RecordBatch]]:
        turns = batch_turns([inp.batches() for inp in inputs], column,
                            [inp.name for inp in inputs])
        for side, batch in itertools.islice(turns, position, None):
            yield inputs[side].name, batch

    return source


# -- outputs ----------------------------------------------------------------------------------

def late_table(late: dict[str, pa.Table], out_schema: pa.Schema, left_width: int) -> pa.Table:
    """The late rows of both inputs as one table: ``input`` (``left``/``right``), then the
    join's output columns, the other input's null (as an outer join pads)."""
    fields = [pa.field("input", pa.string(), False)] + [
        pa.field(f.name, f.type, True) for f in out_schema]
    schema = pa.schema(fields)
    parts = []
    for name in SIDES:
        t = late.get(name)
        if t is None or t.num_rows == 0:
            continue
        n = t.num_rows
        own = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in t.columns]
        if name == "left":
            other = [pa.nulls(n, f.type) for f in out_schema][left_width:]
            cols = own + other
        else:
            other = [pa.nulls(n, f.type) for f in out_schema][:left_width]
            cols = other + own
        parts.append(pa.Table.from_arrays([pa.array([name] * n, pa.string())] + cols,
                                          schema=schema))
    return pa.concat_tables(parts) if parts else schema.empty_table()


#: options that say where results go or how a run is paced, not what it computes
_NOT_SHAPING = {"command", "out", "json", "late_output", "dead_letter", "checkpoint_dir",
                "checkpoint_interval", "checkpoint_backend", "state_budget", "restart",
                "memory_budget"}


def shaping_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options a resumed run must share with the one it resumes (its fingerprint)."""
    return {k: v for k, v in vars(args).items() if k not in _NOT_SHAPING}


def _emit(metrics: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"metrics": metrics}))
    else:
        print(" ".join(f"{k}={v}" for k, v in metrics.items()))


def run_join(args: argparse.Namespace) -> int:
    """``splice join``: the job the options describe, run once (or resumed from
    ``--checkpoint-dir``); writes ``--out`` (and ``--late-output``), prints the metrics."""
    _check_options(args)
    spec = join_spec(args)
    spec.bind([0, 1])  # options checked before any file is read
    policy: BadInputPolicy = "dead_letter" if args.bad_input == "dead-letter" else "fail"
    sink = DeadLetterSink() if policy == "dead_letter" else None
    t0 = time.perf_counter()
    inputs = load_inputs(args, sink)
    load_seconds = time.perf_counter() - t0
    try:
        timed = time_based(args)
        strategy = (WatermarkStrategy(args.max_out_of_orderness or 0, args.idle_timeout)
                    if timed else None)
        streams = [SourceStream(inp.name, inp.schema, args.time if timed else None,
                                watermark=strategy, bad_input=policy) for inp in inputs]
        queries = [Query("join", (Node("join", spec, SIDES),))]
        job = Job(streams, queries, interleave(inputs, _order_column(args)),
                  fingerprint=job_fingerprint(queries, dict(zip(SIDES, (args.left, args.right),
                                                                strict=True)),
                                              shaping_options(args)))
        coord = CheckpointCoordinator(
            job, args.checkpoint_dir,
            interval_seconds=args.checkpoint_interval if args.checkpoint_dir else None,
            backend=args.checkpoint_backend, state_budget=args.state_budget,
            restart=args.restart)
        t1 = time.perf_counter()
        coord.run(collect=False)
        # the query's deployment (building operators, restoring a checkpoint) is not streaming
        deploy_seconds = coord.stats.restore_seconds
        seconds = time.perf_counter() - t1 - deploy_seconds
        result = coord.publish("join", args.out)
        late = coord.late_outputs("join")
        assert coord.engine is not None
        figures = coord.engine.metrics()["queries"]["join"]["operators"].get("join", {})
    finally:
        for inp in inputs:
            inp.close()
    if args.late_output is not None:
        publish_table(late_table(late, result.schema, len(inputs[0].schema)), args.late_output)
    letters = None
    if sink is not None:
        letters = pa.concat_tables([sink.table(), coord.dead_letters()])
        DeadLetterSink(args.dead_letter, letters.to_batches()).publish()
    rows = sum(inp.num_rows for inp in inputs)
    metrics: dict[str, Any] = {
        "input_rows": rows,
        "output_rows": result.num_rows,
        "seconds": round(seconds, 6),
        "load_seconds": round(load_seconds, 6),
        "deploy_seconds": round(deploy_seconds, 6),
        "rows_per_s": round(rows / seconds, 1) if seconds > 0 else None,
        "late_rows": {name: (late[name].num_rows if name in late else 0) for name in SIDES},
        **{k: v for k, v in figures.items() if k != "late_rows"},
    }
    if letters is not None:
        metrics["dead_letter_rows"] = letters.num_rows
        metrics["dead_letter_reasons"] = dict(Counter(letters.column("reason").to_pylist()))
    if args.checkpoint_dir is not None:
        s = coord.stats
        metrics.update({"checkpoints": s.checkpoints, "resumed_from": s.resumed_from,
                        "restore_seconds": round(s.restore_seconds, 6),
                        "checkpoint_bytes_max": max(s.checkpoint_bytes, default=0)})
        if s.skipped:
            metrics["skipped_checkpoints"] = s.skipped
    _emit(metrics, args.json)
    return 0
