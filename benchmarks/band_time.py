"""Band join over time windows vs count windows of the same size; time windows on threads.

``python -m benchmarks.band_time [--logs 14,16,18] [--tuples 150000] [--batch 4096]
[--threads 2]``

Two streams, sides drawn 50/50, keys uniform in [0, 1), event time = arrival number, so a time
window of ``D = 2w`` holds about ``w`` tuples of the other stream, as a count window of ``w``
does; band ``eps`` for match rate 2. The time-window join (:mod:`splice.joins.band.band_time`) gets a
watermark per stream after every batch of ``--batch`` tuples (its largest time minus one) and
evicts by it. Windows are warmed with ``4w`` tuples (untimed), then ``--tuples`` are timed, in
tuples per CPU second, for the B+-Tree and the PIM-Tree under both window kinds; the time-window
results of the two structures are asserted equal. One JSON line per run, with the tuples the
time window held at the end and the rebuilds its evictions made. With ``--threads T > 1``, the
PIM-Tree time-window join then runs on 1 and on T threads (key ranges), timed in wall seconds
(``rows_per_s``) as well, results asserted equal to the serial join's, and a line gives the
speedup of T threads over one (``--repeat R``: R runs of each, alternating, the ratio of the
median wall times).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from benchmarks._band import emit, workload
from splice.joins.band.band_join import BandCore
from splice.joins.band.band_time import TimeBandCore


def _run(core: Any, sides: np.ndarray, keys: np.ndarray, times: np.ndarray | None, batch: int,
         length: int) -> tuple[np.ndarray, np.ndarray]:
    gs, ps = [], []
    for c0 in range(0, len(keys), batch):
        c1 = min(len(keys), c0 + batch)
        if times is None:
            g, p = core.run(sides[c0:c1], keys[c0:c1])
        else:
            g, p = core.run(sides[c0:c1], keys[c0:c1], times[c0:c1])
            for s in (0, 1):
                mine = times[c0:c1][sides[c0:c1] == s]
                if len(mine):
                    core.evict(1 - s, int(mine.max()) - 1 - length)
        gs.append(g + c0)
        ps.append(p)
    return np.concatenate(gs), np.concatenate(ps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", default="14,16,18")
    ap.add_argument("--tuples", type=int, default=150_000)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=1,
                    help="also time the PIM-Tree time-window join on 1 and this many threads")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each thread count (alternating); the speedup of the medians")
    args = ap.parse_args(argv)
    for lw in [int(x) for x in args.logs.split(",")]:
        w = 1 << lw
        warm = 4 * w
        sides, keys, eps = workload(warm + args.tuples, w, 2.0, seed=lw)
        times = np.arange(len(keys), dtype=np.int64)
        length = 2 * w
        check = None
        for kind in ("bptree", "pimtree"):
            for window in ("count", "time"):
                core: Any
                if window == "count":
                    core = BandCore(kind, (w, w), np.dtype(np.float64), -eps, eps)
                    tt = None
                else:
                    core = TimeBandCore(kind, np.dtype(np.float64), -eps, eps, length)
                    tt = times
                _run(core, sides[:warm], keys[:warm], None if tt is None else tt[:warm],
                     args.batch, length)
                c0 = time.process_time()
                g, p = _run(core, sides[warm:], keys[warm:], None if tt is None else tt[warm:],
                            args.batch, length)
                cpu = time.process_time() - c0
                if window == "time":
                    if check is None:
                        check = (g, p)
                    assert np.array_equal(g, check[0]) and np.array_equal(p, check[1])
                rec = {"bench": "band_time", "log_w": lw, "index": kind, "window": window,
                       "tuples": args.tuples, "cpu_rows_per_s": round(args.tuples / cpu),
                       "output_rows": int(len(g)), "match_rate": round(len(g) / args.tuples, 3)}
                if window == "time":
                    rec["held_end"] = core.held()
                    rec["rebuilds"] = core.rebuilds
                emit(rec)
        if args.threads > 1:
            walls: dict[int, list[float]] = {1: [], args.threads: []}
            for _ in range(args.repeat):  # 1 and T threads alternate: both see the same load
                for threads in walls:
                    core = TimeBandCore("pimtree", np.dtype(np.float64), -eps, eps, length,
                                        threads=threads)
                    _run(core, sides[:warm], keys[:warm], times[:warm], args.batch, length)
                    w0, c0 = time.perf_counter(), time.process_time()
                    g, p = _run(core, sides[warm:], keys[warm:], times[warm:], args.batch,
                                length)
                    walls[threads].append(time.perf_counter() - w0)
                    cpu = time.process_time() - c0
                    assert check is not None
                    assert np.array_equal(g, check[0]) and np.array_equal(p, check[1])
                    emit({"bench": "band_time", "log_w": lw, "index": "pimtree",
                          "window": "time", "threads": threads, "tuples": args.tuples,
                          "rows_per_s": round(args.tuples / walls[threads][-1]),
                          "cpu_rows_per_s": round(args.tuples / cpu)})
            med = {t: float(np.median(v)) for t, v in walls.items()}
            emit({"bench": "band_time", "log_w": lw, "threads": args.threads,
                  "batch": args.batch, "runs": args.repeat,
                  "median_rows_per_s": {t: round(args.tuples / v) for t, v in med.items()},
                  "speedup_over_1_thread": round(med[1] / med[args.threads], 3)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
