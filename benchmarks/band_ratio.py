"""The IM/PIM-Tree merge ratio by window size, interleaved: the figures behind the default ratio.

``python -m benchmarks.band_ratio [--logs 12,14,16,18,20] [--ratios 8,16,32] [--index pimtree]
[--chunk 131072] [--chunks 12]``

For each ``w = 2^k``: one single-threaded band join per merge ratio ``1/r`` (``--ratios`` lists
the ``r``), over the seeded two-stream workload (uniform keys, match rate 2), each warmed with
``2w`` tuples untimed. Then the same chunks of ``--chunk`` tuples go through every join in turn,
the order rotating from chunk to chunk so that no join always runs first or last; results are
asserted equal. Each stream merges about ``chunk * r / (2 * w)`` times a chunk: with the
default chunk, at least once up to 2^20 at 1/16 and smaller ratios (at 1/8 and 2^20, every other
chunk), so the medians over chunks weigh the merges about in proportion; raise ``--chunk`` for
larger windows. Comparing ratios chunk by chunk in one process, rather than run after run, keeps
the comparison on a shared host to what the host did in the same second.

One JSON line per window: CPU nanoseconds per tuple at each ratio (median over chunks), the
median per-chunk ratio of each ratio's time to the time of the ratio
:func:`~splice.index.default_merge_ratio` picks (above 1: slower than the default), and the
ratio with the least median time.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks._band import emit, workload
from splice.index import default_merge_ratio
from splice.joins.band.band_join import BandJoin


def compare(w: int, ratios: list[int], index: str, chunk: int, chunks: int) -> dict[str, object]:
    sides, keys, eps = workload(2 * w + chunk * chunks, w, 2.0, seed=w.bit_length())
    cores = {}
    for r in ratios:
        spec = BandJoin(left=0, right=1, on="x", eps=eps, window=w, index=index,
                        merge_ratio=1.0 / r)
        core = spec.make_core(np.dtype(np.float64))
        core.run(sides[: 2 * w], keys[: 2 * w])
        cores[r] = core
    cpu: dict[int, list[float]] = {r: [] for r in ratios}
    for c in range(chunks):
        a, b = 2 * w + c * chunk, 2 * w + (c + 1) * chunk
        first = None
        for r in ratios[c % len(ratios):] + ratios[: c % len(ratios)]:
            c0 = time.process_time()
            got = cores[r].run(sides[a:b], keys[a:b])
            cpu[r].append(time.process_time() - c0)
            if first is None:
                first = got
            else:
                assert all(np.array_equal(x, y) for x, y in zip(first, got, strict=True)), \
                    f"merge ratio 1/{r}: result differs"
    default = round(1.0 / default_merge_ratio(w))
    ns = {r: float(np.median(cpu[r])) / chunk * 1e9 for r in ratios}
    record: dict[str, object] = {
        "bench": "band_ratio", "index": index, "log_w": w.bit_length() - 1,
        "ns_per_tuple": {f"1/{r}": round(ns[r]) for r in ratios},
        "best": f"1/{min(ratios, key=lambda r: ns[r])}", "default": f"1/{default}",
    }
    if default in cpu:
        base = np.array(cpu[default])
        record["time_vs_default"] = {f"1/{r}": round(float(np.median(np.array(cpu[r]) / base)), 3)
                                     for r in ratios}
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", default="12,14,16,18,20")
    ap.add_argument("--ratios", default="8,16,32", help="the r of merge ratios 1/r")
    ap.add_argument("--index", default="pimtree", choices=["imtree", "pimtree"])
    ap.add_argument("--chunk", type=int, default=131072)
    ap.add_argument("--chunks", type=int, default=12)
    args = ap.parse_args(argv)
    ratios = [int(r) for r in args.ratios.split(",")]
    for lw in (int(x) for x in args.logs.split(",")):
        emit(compare(1 << lw, ratios, args.index, args.chunk, args.chunks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
