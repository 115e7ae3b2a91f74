"""Band-join parameter sweeps of the PIM-Tree paper: merge ratio, insertion depth D_I, match rate, chain
length, key skew (Figures 8b-d, 9a-d, 10b-d, 12b), memory per structure, and task size.

``python -m benchmarks.band_sweeps [--log-w 16] [--tuples N] [--only merge_ratio,depth,...]``

Each sweep runs the seeded two-stream workload (uniform keys in [0, 1), match rate 2 unless the
sweep varies it) with windows of ``w = 2^--log-w`` warmed untimed, times ``--tuples`` tuples, and
prints one JSON line per point with the B+-Tree at the same point as its same-run baseline
(``vs_bptree``: ratio of CPU-time throughputs). Results are asserted equal to the baseline's.
``--plot`` writes one PNG per sweep under ``benchmarks/out/``.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from benchmarks._band import OUT, emit, measure, measure_core, plot, workload
from splice.joins.band.band_join import BandJoin

SWEEPS = ["merge_ratio", "depth", "match_rate", "chain_length", "skew", "task_size", "latency"]


def _spec(eps: float, w: int, **kw: Any) -> BandJoin:
    return BandJoin(left=0, right=1, on="x", eps=eps, window=w, **kw)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log-w", type=int, default=16)
    ap.add_argument("--tuples", type=int, default=200_000)
    ap.add_argument("--only", default=",".join(SWEEPS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--depth", type=int, default=None, help="latency: PIM-Tree insertion depth")
    ap.add_argument("--plot", action="store_true")
    args = ap.parse_args(argv)
    w = 1 << args.log_w
    n = 2 * w + args.tuples
    only = set(args.only.split(","))
    series: dict[str, dict[str, tuple[list[float], list[float]]]] = {}

    def point(sweep: str, x: float, sides: Any, keys: Any, eps: float, specs: dict[str, BandJoin],
              extra: dict[str, Any]) -> None:
        base = measure(_spec(eps, w, index="bptree"), sides, keys, 2 * w)
        emit({"bench": "band_sweeps", "sweep": sweep, "x": x, "index": "bptree", "log_w": args.log_w,
              **extra, **base})
        for name, spec in specs.items():
            m = measure(spec, sides, keys, 2 * w, base["_result"])
            ratio = round(m["cpu_rows_per_s"] / base["cpu_rows_per_s"], 3)
            emit({"bench": "band_sweeps", "sweep": sweep, "x": x, "index": name,
                  "log_w": args.log_w, "vs_bptree": ratio, **extra, **m})
            xs, ys = series.setdefault(sweep, {}).setdefault(name, ([], []))
            xs.append(x)
            ys.append(m["cpu_rows_per_s"] if spec.threads == 1 else m["rows_per_s"])

    sides, keys, eps = workload(n, w, 2.0, seed=1)
    if "merge_ratio" in only:
        for k in range(6, -1, -1):
            m = 2.0 ** -k
            point("merge_ratio", m, sides, keys, eps,
                  {"imtree": _spec(eps, w, index="imtree", merge_ratio=m),
                   "pimtree": _spec(eps, w, index="pimtree", merge_ratio=m)}, {})
    if "depth" in only:
        from splice.index import max_insertion_depth

        for d in range(0, max_insertion_depth(w) + 1):
            point("depth", d, sides, keys, eps,
                  {"pimtree": _spec(eps, w, index="pimtree", insertion_depth=d)}, {})
    if "match_rate" in only:
        for k in range(-4, 9, 2):  # 2^10 would emit ~10^8 rows here; see the docs
            s2, k2, e2 = workload(n, w, 2.0**k, seed=2)
            point("match_rate", 2.0**k, s2, k2, e2,
                  {"imtree": _spec(e2, w, index="imtree"), "pimtree": _spec(e2, w, index="pimtree")},
                  {})
    if "chain_length" in only:
        for length in (2, 3, 4, 6, 8):
            point("chain_length", length, sides, keys, eps,
                  {"bchain": _spec(eps, w, index="bchain", chain_length=length),
                   "ibchain": _spec(eps, w, index="ibchain", chain_length=length)}, {})
    if "skew" in only:
        for i, dist in enumerate(("uniform", "gaussian", "gamma33", "gamma15")):
            s2, k2, e2 = workload(n, w, 2.0, dist=dist, seed=3)
            point("skew", i, s2, k2, e2, {"pimtree": _spec(e2, w, index="pimtree")},
                  {"distribution": dist})
    if "task_size" in only and args.threads > 1:
        for task in (16, 64, 256, 1024, 4096):
            point("task_size", task, sides, keys, eps,
                  {f"pimtree_{args.threads}t": _spec(eps, w, index="pimtree", merge_ratio=1.0,
                                                     threads=args.threads, task_size=task,
                                                     parallel="task_queue")}, {})
    if "latency" in only:
        # task sizes 1..10 (seed Fig. 10c/d): throughput and the time from a task's assignment
        # to the propagation of its results, on 1 and --threads threads of the task-queue join
        from benchmarks._band import machine_parallelism

        emit({"bench": "band_sweeps", "sweep": "latency",
              "machine_parallelism": machine_parallelism(args.threads)})
        base = measure(_spec(eps, w, index="pimtree", merge_ratio=1.0), sides, keys, 2 * w)
        for task in range(1, 11):
            for threads in sorted({1, args.threads}):
                from splice.joins.band.parallel_band import TaskQueueJoin

                core = TaskQueueJoin("pimtree", (w, w), keys.dtype, -eps, eps, False, 1.0,
                                     _spec(eps, w).depth if args.depth is None else args.depth,
                                     threads, task)
                m = measure_core(core, sides, keys, 2 * w, base["_result"])
                lat = np.concatenate(core.task_latency[1:] or core.task_latency) * 1e6
                rec = {"bench": "band_sweeps", "sweep": "latency", "x": task, "threads": threads,
                       "index": "pimtree", "log_w": args.log_w,
                       "latency_us_p50": round(float(np.percentile(lat, 50)), 1),
                       "latency_us_p99": round(float(np.percentile(lat, 99)), 1), **m}
                emit(rec)
                for name, val in ((f"{threads}t throughput (wall)", m["rows_per_s"]),
                                  (f"{threads}t latency p50 (us)", rec["latency_us_p50"])):
                    xs, ys = series.setdefault("latency" if "latency" in name else "task_rate",
                                               {}).setdefault(name, ([], []))
                    xs.append(task)
                    ys.append(val)
    if args.plot:
        for sweep, s in series.items():
            ylabel = "microseconds" if sweep == "latency" else "tuples / s"
            plot(OUT / f"band_{sweep}.png", s, "task size" if sweep in ("latency", "task_rate")
                 else sweep, ylabel, f"IBWJ: {sweep} (w = 2^{args.log_w})",
                 logx=sweep not in ("depth", "skew", "latency", "task_rate"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
