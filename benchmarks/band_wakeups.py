"""The key-range join's wall time with worker threads that spin between the rounds of a call and
with threads that block at once, after what a machine does between two calls.

``python -m benchmarks.band_wakeups [--logs 17] [--rounds 8] [--tuples 100000] [--threads 2]``

The parallel join meets its threads three times per chunk of tuples (list, join, interleave).
A thread that blocks in between puts its core to sleep, and waking it again takes what the host
takes to schedule it: on a virtual machine from tens of microseconds to milliseconds. How much
that costs depends on what ran before: a join right after another join finds the cores awake,
one after a pause or after other work on every core may not. For each ``w = 2^k`` this warms
two key-range joins on the same PIM-Tree workload (:mod:`benchmarks.band_windows`), one whose
threads spin for up to :data:`splice.joins._workers.SPIN_US` between the rounds of a call
before they block (the default; after a call's last round they block at once) and one whose
threads always block at once, then times segments of ``--tuples`` tuples through both, each
segment after one of four preludes: ``back_to_back`` (nothing), ``idle`` (0.3 s asleep),
``busy`` (0.2 s of busy work on every thread) and ``memory`` (0.2 s of random reads from 64
MiB on every thread); which join goes first alternates by round, and both results are asserted
equal. One JSON line per prelude and window: the median wall rate of each join, the median of
the per-segment ratios (spinning over blocking), and the median share of the wall time the
spinning join's threads were on a core (its process CPU time over ``threads`` times its wall
time; spinning counts as CPU time).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks._band import (
    WARM_WINDOWS,
    emit,
    machine_parallelism,
    memory_parallelism,
    workload,
)
from splice.index import default_merge_ratio, max_insertion_depth
from splice.joins import _workers
from splice.joins.parallel_band import KeyRangeJoin

PRELUDES: dict[str, Callable[[int], Any]] = {
    "back_to_back": lambda threads: None,
    "idle": lambda threads: time.sleep(0.3),
    "busy": lambda threads: machine_parallelism(threads, 0.2),
    "memory": lambda threads: memory_parallelism(threads, 0.2),
}


def _join(w: int, eps: float, threads: int, spin_us: int) -> KeyRangeJoin:
    saved = _workers.SPIN_US
    _workers.SPIN_US = spin_us  # read when the join starts its threads
    try:
        return KeyRangeJoin("pimtree", (w, w), np.dtype(np.float64), -eps, eps, False,
                            default_merge_ratio(w), min(2, max_insertion_depth(w)), threads)
    finally:
        _workers.SPIN_US = saved


def _timed(join: KeyRangeJoin, sides: np.ndarray, keys: np.ndarray
           ) -> tuple[float, float, tuple[np.ndarray, np.ndarray]]:
    t0, c0 = time.perf_counter(), time.process_time()
    out = join.run(sides, keys)
    return time.perf_counter() - t0, time.process_time() - c0, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", default="17")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--tuples", type=int, default=100_000)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    for lw in [int(x) for x in args.logs.split(",")]:
        w = 1 << lw
        warm = WARM_WINDOWS * w
        n = warm + args.rounds * len(PRELUDES) * args.tuples
        sides, keys, eps = workload(n, w, 2.0, seed=lw)
        spinning = _join(w, eps, args.threads, _workers.SPIN_US)
        blocking = _join(w, eps, args.threads, 0)
        for join in (spinning, blocking):
            join.run(sides[:warm], keys[:warm])
        seen: dict[str, list[tuple[float, float, float]]] = {p: [] for p in PRELUDES}
        a = warm
        for r in range(args.rounds):
            for name, prelude in PRELUDES.items():
                seg = (sides[a : a + args.tuples], keys[a : a + args.tuples])
                a += args.tuples
                timed: dict[str, tuple[float, float, Any]] = {}
                order = ("spinning", "blocking") if r % 2 == 0 else ("blocking", "spinning")
                for which in order:
                    prelude(args.threads)
                    timed[which] = _timed(spinning if which == "spinning" else blocking, *seg)
                (ws, cs, o1), (wb, _, o2) = timed["spinning"], timed["blocking"]
                assert np.array_equal(o1[0], o2[0]) and np.array_equal(o1[1], o2[1])
                seen[name].append((args.tuples / ws, args.tuples / wb,
                                   cs / (args.threads * ws)))
        for name, rows in seen.items():
            v = np.array(rows)
            emit({"bench": "band_wakeups", "log_w": lw, "prelude": name,
                  "threads": args.threads, "rounds": args.rounds, "spin_us": _workers.SPIN_US,
                  "spinning_rows_per_s": round(float(np.median(v[:, 0]))),
                  "blocking_rows_per_s": round(float(np.median(v[:, 1]))),
                  "spinning_over_blocking": round(float(np.median(v[:, 0] / v[:, 1])), 3),
                  "spinning_on_core_share": round(float(np.median(v[:, 2])), 3)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
