"""The serial band join with and without leaf prefetching, alternating on one warmed join.

``python -m benchmarks.band_prefetch [--logs 12,14,16,17,18,20,22] [--tuples N]
[--indexes imtree,pimtree,ibchain] [--chunk C] [--threads T] [--warm K] [--merge-ratio M]``

For each window ``w = 2^k`` and structure: the PIM-Tree paper's two-stream workload (uniform keys, match
rate 2, merge ratio ``--merge-ratio``, by default 1/8, chains of length 2), one join warmed
with ``K·w`` tuples (``--warm``, by default 2), then ``--tuples`` tuples fed in chunks of
``--chunk``, prefetching switched on for every other chunk (the core's ``prefetch``: on, the
level the join picks for the window, the leaves' prefetching at least).
``--threads`` above 1 runs the parallel join instead (the key-range join for the IM/PIM-Tree).
Both variants see the same windows, the same merges and the same machine state within a
fraction of a second, so their ratio holds on a noisy machine where two separate runs differ by
10 %. One JSON line per point: tuples per CPU second off and on and their ratio, the same per
wall second (what more threads are for), and the prefetching the join turns on by itself at
this window (``default_on``: for the serial join 0, 1 for the leaves, 2 for the leaves and
the ``T_I`` nodes of the inserts).
"""

from __future__ import annotations

import argparse
import time

from benchmarks._band import emit, workload
from splice.joins.band.band_join import BandJoin


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", default="12,14,16,17,18,20,22")
    ap.add_argument("--tuples", type=int, default=600_000, help="timed tuples per point")
    ap.add_argument("--indexes", default="imtree,pimtree,ibchain")
    ap.add_argument("--chunk", type=int, default=20_000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warm", type=int, default=2, help="warm-up tuples, in windows' worth")
    ap.add_argument("--merge-ratio", type=float, default=0.125)
    args = ap.parse_args(argv)
    for lw in (int(x) for x in args.logs.split(",")):
        w = 1 << lw
        warm = args.warm * w
        sides, keys, eps = workload(warm + args.tuples, w, 2.0, seed=lw)
        for index in args.indexes.split(","):
            spec = BandJoin(left=0, right=1, on="x", eps=eps, window=w, index=index,
                            merge_ratio=args.merge_ratio, threads=args.threads)
            core = spec.make_core(keys.dtype)
            default_on = core.prefetch
            core.run(sides[:warm], keys[:warm])
            cpu = {False: 0.0, True: 0.0}
            wall = {False: 0.0, True: 0.0}
            n = {False: 0, True: 0}
            for c, g in enumerate(range(warm, warm + args.tuples, args.chunk)):
                on = bool(c % 2)
                # on: the join's own level for the window, at least the leaves' prefetching
                core.prefetch = max(int(default_on), 1) if on else 0
                t0, c0 = time.perf_counter(), time.process_time()
                core.run(sides[g : g + args.chunk], keys[g : g + args.chunk])
                cpu[on] += time.process_time() - c0
                wall[on] += time.perf_counter() - t0
                n[on] += len(keys[g : g + args.chunk])
            off_rate, on_rate = n[False] / cpu[False], n[True] / cpu[True]
            off_wall, on_wall = n[False] / wall[False], n[True] / wall[True]
            emit({"bench": "band_prefetch", "index": index, "log_w": lw,
                  "threads": args.threads, "default_on": default_on,
                  "cpu_rows_per_s_off": round(off_rate), "cpu_rows_per_s_on": round(on_rate),
                  "on_over_off": round(on_rate / off_rate, 3),
                  "wall_rows_per_s_off": round(off_wall), "wall_rows_per_s_on": round(on_wall),
                  "wall_on_over_off": round(on_wall / off_wall, 3)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
