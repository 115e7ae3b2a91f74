"""Memory on an unbounded stream: a running windowed query whose output goes to a sink.

Run: ``python -m benchmarks.engine_memory [--rows N] [--batch B] [--executor serial|pipelined]``
(one JSON object per line; each variant in a process of its own, since a peak is per process).

Workload (seeded): ``--rows`` rows made batch by batch as they are pushed (the input is never
held whole): event time ``t`` = the row's position plus up to ``--disorder`` of noise, a key
``k`` over 1,000 values and a float ``v``. The source declares bounded out-of-orderness
``--disorder``; one row in a thousand arrives three windows behind (late: to the late sink). One query,
``WindowAggregate`` in tumbling windows of ``--window`` time units per key (count and sum of
``v``), hands each result batch to ``on_output`` and each late batch to ``on_late``, which only
count. The answer is asserted first: every row is counted once, in a window or as late.

Variants: ``sink`` as above; ``compose``, the same plus a second query that selects one row in
a thousand (``k = 7``) and has ``v`` composed back on by row id (``v`` never travels; its sink
counts the rows); ``buffered``, the baseline in the same run, the window query without
sinks and without the buffer bound (``result_buffer_rows=None``): the engine keeps every result
and late row, as it did for every query before sinks existed.

Figures: the process's peak resident set (``VmHWM``) after the first 10% of the rows and at the
end, and their ratio: flat memory (nothing grows with the stream) means a ratio near 1; the
check asks for at most 1.2 of the ``sink`` and ``compose`` variants. Rows/s are input rows over the streaming
time.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from splice.core.time import WatermarkStrategy
from splice.ops import Select
from splice.ops.aggregate import Agg
from splice.ops.window_aggregate import WindowAggregate
from splice.runtime import Engine, Query

SCHEMA = pa.schema([("t", pa.int64()), ("k", pa.int64()), ("v", pa.float64())])


def peak_rss_bytes() -> int:
    """The process's peak resident set so far (``VmHWM``; ``ru_maxrss`` where /proc is not)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def make_batch(rng: np.random.Generator, start: int, n: int, disorder: int, window: int
               ) -> pa.RecordBatch:
    pos = np.arange(start, start + n, dtype=np.int64)
    t = pos + rng.integers(0, disorder + 1, n)
    far = rng.random(n) < 0.001  # one row in a thousand arrives three windows behind: late
    t[far] = np.maximum(t[far] - 3 * window, 0)
    return pa.record_batch([pa.array(t),
                            pa.array(rng.integers(0, 1_000, n)),
                            pa.array(rng.random(n))], schema=SCHEMA)


def run(rows: int, batch: int, executor: str, window: int, disorder: int, variant: str = "sink",
        switch_interval: float | None = None, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    counted = {"out_rows": 0, "in_windows": 0, "late": 0}

    def on_output(b: pa.RecordBatch) -> None:
        counted["out_rows"] += b.num_rows
        counted["in_windows"] += int(pc.sum(b.column("n")).as_py() or 0)

    def on_late(_input: str, b: pa.RecordBatch) -> None:
        counted["late"] += b.num_rows

    sink = variant != "buffered"
    eng = Engine(executor=executor, result_buffer_rows=None,  # type: ignore[arg-type]
                 switch_interval=switch_interval)
    eng.define_stream("events", SCHEMA, "t", watermark=WatermarkStrategy(disorder))
    spec = WindowAggregate("t", size=window, keys=["k"],
                           aggregates=[Agg("n", "count"), Agg("sum_v", "sum", "v")])
    result = eng.deploy(Query.chain("windows", "events", spec), on_output=on_output if sink else None,
                        on_late=on_late if sink else None)
    picked = [0]
    if variant == "compose":
        eng.deploy(Query.chain("picked", "events", Select(pc.field("k") == 7), compose={"events": ["v"]}),
                   on_output=lambda b: picked.__setitem__(0, picked[0] + b.num_rows))
    want_picked = 0
    tenth = rows // 10
    at_tenth = None
    started = time.perf_counter()
    pushed = 0
    while pushed < rows:
        n = min(batch, rows - pushed)
        b = make_batch(rng, pushed, n, disorder, window)
        want_picked += int(pc.sum(pc.equal(b.column("k"), 7)).as_py())
        eng.push("events", b)
        pushed += n
        if at_tenth is None and pushed >= tenth:
            at_tenth = peak_rss_bytes()
    eng.end()
    seconds = time.perf_counter() - started
    final = peak_rss_bytes()
    eng.close()
    if not sink:
        for b in result.batches:
            on_output(b)
        for bs in result.late.values():
            for b in bs:
                on_late("events", b)
    assert counted["in_windows"] + counted["late"] == rows, counted
    assert (result.batches == [] and result.late == {}) == sink
    assert variant != "compose" or picked[0] == want_picked
    assert at_tenth is not None
    return {"bench": "engine_memory", "variant": variant, "executor": executor,
            "switch_interval": switch_interval, "rows": rows, "batch": batch,
            "window": window, "output_rows": counted["out_rows"], "late_rows": counted["late"],
            "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds, 1),
            "peak_rss_at_10pct_mb": round(at_tenth / 2**20, 1),
            "peak_rss_final_mb": round(final / 2**20, 1),
            "ratio_final_vs_10pct": round(final / at_tenth, 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--batch", type=int, default=65_536)
    ap.add_argument("--executor", choices=["serial", "pipelined"], default="serial")
    ap.add_argument("--window", type=int, default=10_000)
    ap.add_argument("--disorder", type=int, default=1_000)
    ap.add_argument("--max-ratio", type=float, default=1.2)
    ap.add_argument("--switch-interval", type=float, default=None,
                    help="the pipelined executor's GIL switch interval (default: left alone)")
    ap.add_argument("--variant", choices=["sink", "compose", "buffered"], default=None,
                    help="run this variant here (default: each in a process of its own)")
    args = ap.parse_args(argv)
    if args.variant is None:
        rc = 0
        for variant in ("sink", "compose", "buffered"):
            cmd = [sys.executable, "-m", "benchmarks.engine_memory", "--variant", variant,
                   "--rows", str(args.rows), "--batch", str(args.batch), "--executor",
                   args.executor, "--window", str(args.window), "--disorder", str(args.disorder),
                   "--max-ratio", str(args.max_ratio)]
            if args.switch_interval is not None:
                cmd += ["--switch-interval", str(args.switch_interval)]
            rc |= subprocess.run(cmd).returncode
        return rc
    out = run(args.rows, args.batch, args.executor, args.window, args.disorder, args.variant,
              args.switch_interval)
    print(json.dumps(out), flush=True)
    if args.variant != "buffered" and out["ratio_final_vs_10pct"] > args.max_ratio:
        print(f"peak RSS grew {out['ratio_final_vs_10pct']}x after the first 10% of the rows "
              f"(allowed {args.max_ratio}x)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
