"""Parallel IBWJ speedup next to the machine's own ceiling, in interleaved rounds.

``python -m benchmarks.band_parallel [--mode key_range|task_queue] [--logs 16,18,20] [--rounds 8]
[--tuples 400000] [--threads 2] [--batch N]``

On a machine shared with other work, the cores a run gets change from second to second, so one
pair of runs says little. For each ``w = 2^k`` (uniform keys, match rate 2, the two-stream
workload of :mod:`benchmarks.band_windows`) this warms the serial PIM-Tree join and the parallel
join ``--mode`` on ``--threads`` threads with ``--warm`` windows' worth of tuples each (by
default 3w, see :data:`benchmarks._band.WARM_WINDOWS`): ``key_range`` (default; merge ratio
``--merge-ratio``, by default by window size, and insertion depth 2 or the deepest level of
``T_S``, as the serial join's defaults) or ``task_queue`` (merge ratio by default 1; merge
``--merge``; the deepest insertion depth; task size ``--task-size``). The serial join runs with
the same merge ratio and depth. Then it times ``--rounds`` consecutive segments of ``--tuples``
tuples through both, alternating which goes first, and measures just before each pair the
speedup of ``--threads`` threads of GIL-free busy work over one (``ceiling``) and of as many
threads reading random words of a 64 MiB array (``memory_ceiling``: the cores can be free while
the memory they share is busy with other work on the host), and the first again just after the
pair (``ceiling_after``: other work may take a core for a moment during the pair, as a 2-thread
run's wall time equal to its CPU time shows). Right after the probes, which keep every core busy
for 0.4 s, the 2-thread join spends a few milliseconds with its threads off their cores (its
wall rate 1.4-1.6x its CPU rate over a 20 ms segment then, 1.85-1.95x when it follows the serial
join), so the segments are long enough (``--tuples``) for those milliseconds to weigh little.
Every segment's results are asserted equal. One JSON line per pair (wall and CPU rates, ratio,
ceilings), then per window the median ratio over all pairs, over the pairs whose ceilings
before and after were both at least ``--free`` (the moments the machine had the cores to give)
and over those whose memory ceiling was too, the median memory ceiling, and the time one cache
line takes to pass between two cores (``core_handoff_ns``): the task queue's shared index moves
a few lines between the threads per tuple, which costs that much each; the key ranges share
none. """

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from benchmarks._band import (
    WARM_WINDOWS,
    core_handoff_ns,
    emit,
    machine_parallelism,
    memory_parallelism,
    workload,
)
from splice.index import default_merge_ratio, max_insertion_depth
from splice.joins.band.band_join import BandCore
from splice.joins.band.parallel_band import KeyRangeJoin, TaskQueueJoin


def _timed(core: Any, sides: np.ndarray, keys: np.ndarray, batch: int
           ) -> tuple[float, float, Any]:
    """Run the segment through ``core`` in calls of ``batch`` tuples (0: one call); time it."""
    step = batch or len(keys)
    t0, c0 = time.perf_counter(), time.process_time()
    parts = [core.run(sides[a : a + step], keys[a : a + step]) for a in range(0, len(keys), step)]
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    g = np.concatenate([p[0] + a for p, a in zip(parts, range(0, len(keys), step), strict=True)])
    return wall, cpu, (g, np.concatenate([p[1] for p in parts]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", default="key_range", choices=["key_range", "task_queue"])
    ap.add_argument("--logs", default="16,18,20")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--tuples", type=int, default=400_000,
                    help="tuples per timed segment; shorter segments (20 ms on 2 threads at "
                         "100,000) mostly time the few milliseconds after the ceilings' probes")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--task-size", type=int, default=64)
    ap.add_argument("--free", type=float, default=1.8,
                    help="ceiling counted as 'cores free' (the memory ceiling: 'memory free')")
    ap.add_argument("--merge", default="nonblocking", choices=["nonblocking", "blocking"])
    ap.add_argument("--merge-ratio", type=float, default=None,
                    help="default: by window size for key_range (default_merge_ratio, as the "
                         "serial join), 1 for task_queue")
    ap.add_argument("--batch", type=int, default=0,
                    help="tuples per call of the joins, as an operator fed batch by batch "
                         "calls them (0: the whole segment in one call)")
    ap.add_argument("--warm", type=int, default=WARM_WINDOWS,
                    help="untimed tuples before the rounds, in windows' worth")
    args = ap.parse_args(argv)
    for lw in [int(x) for x in args.logs.split(",")]:
        w = 1 << lw
        warm = args.warm * w
        n = warm + args.rounds * args.tuples
        sides, keys, eps = workload(n, w, 2.0, seed=lw)
        key_range = args.mode == "key_range"
        depth = min(2, max_insertion_depth(w)) if key_range else max_insertion_depth(w)
        m = args.merge_ratio
        if m is None:
            m = default_merge_ratio(w) if key_range else 1.0
        serial = BandCore("pimtree", (w, w), np.dtype(np.float64), -eps, eps, False, m, depth)
        par: KeyRangeJoin | TaskQueueJoin
        if key_range:
            par = KeyRangeJoin("pimtree", (w, w), np.dtype(np.float64), -eps, eps, False, m,
                               depth, args.threads)
        else:
            par = TaskQueueJoin("pimtree", (w, w), np.dtype(np.float64), -eps, eps, False, m,
                                depth, args.threads, args.task_size, args.merge)
        serial.run(sides[:warm], keys[:warm])
        par.run(sides[:warm], keys[:warm])
        ratios, free, free_memory, memories = [], [], [], []
        for r in range(args.rounds):
            a = warm + r * args.tuples
            seg = (sides[a : a + args.tuples], keys[a : a + args.tuples])
            ceiling = machine_parallelism(args.threads, 0.2)
            memory = memory_parallelism(args.threads, 0.2)
            if r % 2 == 0:
                ws, cs, (g0, p0) = _timed(serial, *seg, args.batch)
                wp, cp, (g1, p1) = _timed(par, *seg, args.batch)
            else:
                wp, cp, (g1, p1) = _timed(par, *seg, args.batch)
                ws, cs, (g0, p0) = _timed(serial, *seg, args.batch)
            assert np.array_equal(g0, g1) and np.array_equal(p0, p1), "parallel != serial"
            after = machine_parallelism(args.threads, 0.2)
            ratio = ws / wp
            ratios.append(ratio)
            memories.append(memory)
            cores = min(ceiling, after)
            if cores >= args.free:
                free.append(ratio)
            if cores >= args.free and memory >= args.free:
                free_memory.append(ratio)
            emit({"bench": "band_parallel", "mode": args.mode, "log_w": lw, "round": r,
                  "threads": args.threads,
                  "task_size": args.task_size, "batch": args.batch, "ceiling": ceiling,
                  "ceiling_after": after, "memory_ceiling": memory,
                  "serial_rows_per_s": round(args.tuples / ws),
                  "parallel_rows_per_s": round(args.tuples / wp),
                  "serial_cpu_rows_per_s": round(args.tuples / cs),
                  "parallel_cpu_rows_per_s": round(args.tuples / cp),
                  "speedup": round(ratio, 3)})
        emit({"bench": "band_parallel", "summary": True, "mode": args.mode, "log_w": lw,
              "threads": args.threads, "merge": args.merge, "merge_ratio": m,
              "median_speedup": round(float(np.median(ratios)), 3),
              "pairs_with_free_cores": len(free),
              "median_speedup_free_cores": round(float(np.median(free)), 3) if free else None,
              "median_memory_ceiling": round(float(np.median(memories)), 3),
              "pairs_with_free_memory": len(free_memory),
              "median_speedup_free_memory": (round(float(np.median(free_memory)), 3)
                                             if free_memory else None),
              "merges": par.merges if isinstance(par, TaskQueueJoin) else None,
              "rebalances": par.rebalances if isinstance(par, KeyRangeJoin) else None,
              "core_handoff_ns": core_handoff_ns()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
