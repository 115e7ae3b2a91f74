"""Band-join throughput vs window size per index structure (the PIM-Tree paper's Figures 8a, 10a, 13c).

``python -m benchmarks.band_windows [--min-log 10] [--max-log 20] [--tuples N] [--threads 2]
[--parallel key_range|task_queue] [--repeat R] [--batch N]``

For each ``w = 2^k``: a seeded two-stream workload with uniform keys and match rate 2, windows
warmed with ``--warm`` windows' worth of tuples (untimed; by default 3w, see
:data:`benchmarks._band.WARM_WINDOWS`), then ``--tuples`` tuples, and at least ``2w`` (whole
periods of the chains' link conversion and the IM/PIM-Tree merges, which the warm-up's end
would otherwise put at the segment's start or leave out), timed through the single-threaded
IBWJ on every structure, the B+-Tree as the same-run baseline (NLWJ up to ``2^--nlwj-max-log``),
and the PIM-Tree join on 1 thread (the serial join, no concurrency control) and on ``--threads``
threads: ``--parallel key_range`` (default; the serial join's merge ratio and insertion depth)
or ``task_queue`` (nonblocking merge, merge ratio 1 as the PIM-Tree paper uses for the parallel join,
insertion depth ``--par-depth``, by default the deepest level of ``T_S``), each against the
serial join with the same settings.
``--batch N`` feeds the timed tuples in calls of ``N`` (as ``splice join`` feeds its
``--batch-size`` chunks; each call's rows checked and dropped between calls, so that result
arrays reuse memory), by default all in one call.
Every result is asserted equal to the B+-Tree's before its time counts. ``--repeat R`` measures
every single-thread point R times (a fresh, warmed join each time) and keeps the run of median
rate: a single run of a small window lasts a tenth of a second, short enough for one
preemption to move it by 10 %. One JSON line per run, then a summary line with the PIM-Tree paper's goals:
IM-Tree >= 1.5x and PIM-Tree >= 1.6x the B+-Tree, IB-chain >= 1.5x B-chain (averaged over
window sizes), the PIM-Tree's rate at 2^20, and the parallel speedup for w >= 2^16 next to the
machine's own 2-thread ceilings measured in the same run (busy work, and reads from memory:
:func:`benchmarks._band.memory_parallelism`). ``--plot`` writes
``benchmarks/out/band_windows.png``.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from benchmarks._band import (
    OUT,
    WARM_WINDOWS,
    emit,
    machine_parallelism,
    measure,
    memory_parallelism,
    plot,
    workload,
)
from splice.index import max_insertion_depth
from splice.joins.band.band_join import BandJoin

SERIAL = ["bptree", "imtree", "pimtree", "bchain", "ibchain", "nlwj"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-log", type=int, default=10)
    ap.add_argument("--max-log", type=int, default=20)
    ap.add_argument("--tuples", type=int, default=300_000,
                    help="timed tuples per run (at least 2w unless --no-whole-periods)")
    ap.add_argument("--no-whole-periods", dest="whole_periods", action="store_false",
                    help="time exactly --tuples tuples, even where that is less than one period "
                         "of a chain link or between two merges")
    ap.add_argument("--nlwj-max-log", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--task-size", type=int, default=64)
    ap.add_argument("--parallel", default="key_range", choices=["key_range", "task_queue"])
    ap.add_argument("--merge-ratio", type=float, default=None,
                    help="IM/PIM-Tree, single thread and key_range (default: the join's, by "
                         "window size)")
    ap.add_argument("--indexes", default=",".join(SERIAL), help="single-thread structures to run")
    ap.add_argument("--par-depth", type=int, default=None,
                    help="parallel PIM-Tree insertion depth (default: key_range as one thread; "
                         "task_queue the deepest level of T_S, the most partitions)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per single-thread point; the run of median rate is kept")
    ap.add_argument("--warm", type=int, default=WARM_WINDOWS,
                    help="untimed tuples before each measurement, in windows' worth")
    ap.add_argument("--batch", type=int, default=0,
                    help="tuples per call of the joins (the command's --batch-size chunks are "
                         "65,536); 0: the timed tuples in one call")
    ap.add_argument("--plot", action="store_true")
    args = ap.parse_args(argv)
    ceiling = machine_parallelism(args.threads)
    memory = memory_parallelism(args.threads)
    emit({"bench": "band_windows", "machine_parallelism": ceiling,
          "memory_parallelism": memory, "threads": args.threads})
    rates: dict[str, dict[int, float]] = {}
    cpu_rates: dict[int, dict[int, float]] = {}
    for lw in range(args.min_log, args.max_log + 1):
        w = 1 << lw
        # whole periods of the structures' periodic work: a chain link of length 2 fills in w
        # arrivals per stream (then the IB-chain converts it), the IM/PIM-Tree merges every
        # m*w; a shorter segment would count such a step fully or not at all, by where the
        # warm-up happened to end
        timed = max(args.tuples, 2 * w) if args.whole_periods else args.tuples
        warm = args.warm * w
        n = warm + timed
        sides, keys, eps = workload(n, w, 2.0, seed=lw)
        base = None
        for index in [i for i in SERIAL if i in args.indexes.split(",")]:
            if index == "nlwj" and lw > args.nlwj_max_log:
                continue
            spec = BandJoin(left=0, right=1, on="x", eps=eps, window=w, index=index,
                            merge_ratio=args.merge_ratio)
            runs = []
            for _ in range(max(1, args.repeat)):
                runs.append(measure(spec, sides, keys, warm, base, args.batch))
                base = base or runs[-1]["_result"]
                runs[-1].pop("_core")  # the next run builds its own
            m = sorted(runs, key=lambda r: r["cpu_rows_per_s"])[len(runs) // 2]
            rates.setdefault(index, {})[lw] = m["cpu_rows_per_s"]
            emit({"bench": "band_windows", "index": index, "threads": 1, "log_w": lw,
                  "merge_ratio": spec.ratio, **m})
        if args.threads > 1:
            queue = args.parallel == "task_queue"
            for threads in (1, args.threads):
                depth = args.par_depth
                if queue and depth is None:
                    depth = max_insertion_depth(w)
                spec = BandJoin(left=0, right=1, on="x", eps=eps, window=w, index="pimtree",
                                merge_ratio=1.0 if queue else args.merge_ratio, threads=threads,
                                task_size=args.task_size, parallel=args.parallel,
                                insertion_depth=depth)
                m = measure(spec, sides, keys, warm, base, args.batch)
                rates.setdefault(f"parallel_pimtree_{threads}", {})[lw] = m["rows_per_s"]
                cpu_rates.setdefault(threads, {})[lw] = m["cpu_rows_per_s"]
                emit({"bench": "band_windows", "index": "pimtree", "parallel": args.parallel,
                      "threads": threads, "log_w": lw, "merge_ratio": spec.ratio, **m})

    def avg_ratio(a: str, b: str, logs: list[int]) -> float | None:
        xs = [rates[a][k] / rates[b][k] for k in logs if k in rates.get(a, {}) and k in rates.get(b, {})]
        return round(float(np.mean(xs)), 3) if xs else None

    logs = list(range(args.min_log, args.max_log + 1))
    big = [k for k in logs if k >= 16]
    par = f"parallel_pimtree_{args.threads}"
    summary = {
        "bench": "band_windows", "summary": True,
        "imtree_over_bptree": avg_ratio("imtree", "bptree", logs),
        "pimtree_over_bptree": avg_ratio("pimtree", "bptree", logs),
        "ibchain_over_bchain": avg_ratio("ibchain", "bchain", logs),
        "pimtree_rate_at_2_20": rates.get("pimtree", {}).get(20),
        "parallel_speedup_w_ge_2_16": avg_ratio(par, "parallel_pimtree_1", big),
        "parallel_cpu_efficiency_w_ge_2_16": round(float(np.mean(
            [cpu_rates[args.threads][k] / cpu_rates[1][k] for k in big
             if k in cpu_rates.get(1, {}) and k in cpu_rates.get(args.threads, {})] or [0.0])), 3),
        "machine_parallelism": ceiling,
        "memory_parallelism": memory,
        "throughput": "cpu_rows_per_s for single-thread, rows_per_s (wall) for parallel",
    }
    print(json.dumps(summary), flush=True)
    if args.plot:
        def label(k: str) -> str:
            if k.startswith("parallel_pimtree_"):
                return f"pimtree {args.parallel}, {k.rsplit('_', 1)[1]} thread(s) (wall)"
            return f"{k} (CPU time)"

        series = {label(k): ([1 << lw for lw in v], list(v.values())) for k, v in rates.items()}
        plot(OUT / "band_windows.png", series, "window size w (tuples)", "tuples / s",
             "IBWJ throughput vs window size (match rate 2)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
