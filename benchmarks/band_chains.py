"""The chain-length experiment (seed Fig. 8b) with B-chain, IB-chain and B+-Tree interleaved.

``python -m benchmarks.band_chains [--logs 16,18,20] [--lengths 2,3,4,6,8] [--rounds 8]
[--chunk 20000]``

For each window ``w = 2^k`` and chain length ``L``: the two-stream workload of
:mod:`benchmarks.band_windows` (uniform keys, match rate 2), one serial join per structure
(B-chain and IB-chain of length ``L``, the B+-Tree as the PIM-Tree paper's reference), each warmed with
``2w`` tuples; then ``--rounds`` rounds, each feeding the next ``--chunk`` tuples to every join
in an order that rotates from round to round, timing each call in CPU seconds. Every chunk's
results are asserted equal. Structures measured one after another drift apart on a shared
machine by more than the difference between them; chunks a fraction of a second apart do not.

One JSON line per point: each structure's median CPU nanoseconds per tuple and the medians of
the per-round ratios IB-chain / B-chain and each chain / B+-Tree (throughput ratios); then per
window the IB-chain / B-chain ratio averaged over the lengths, the figure the PIM-Tree paper reports
(``"summary"``).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks._band import emit, workload
from splice.joins.band.band_join import BandCore

STRUCTURES = ("bptree", "bchain", "ibchain")


def _ratio(cpu: dict[str, list[float]], slow: str, fast: str) -> float:
    """Throughput of ``fast`` over ``slow``: the median of the per-round CPU time ratios."""
    return round(float(np.median(np.array(cpu[slow]) / np.array(cpu[fast]))), 3)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", default="16,18,20")
    ap.add_argument("--lengths", default="2,3,4,6,8")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--chunk", type=int, default=20_000)
    args = ap.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    for k in (int(x) for x in args.logs.split(",")):
        w = 1 << k
        n = 2 * w + args.rounds * args.chunk
        sides, keys, eps = workload(n, w, 2.0, seed=k)
        ratios = []
        for length in lengths:
            cores = {s: BandCore(s, (w, w), np.dtype(np.float64), -eps, eps, chain_length=length)
                     for s in STRUCTURES}
            for core in cores.values():
                core.run(sides[: 2 * w], keys[: 2 * w])
            cpu: dict[str, list[float]] = {s: [] for s in STRUCTURES}
            for r in range(args.rounds):
                a = 2 * w + r * args.chunk
                b = a + args.chunk
                order = STRUCTURES[r % 3:] + STRUCTURES[: r % 3]
                res = {}
                for s in order:
                    c0 = time.process_time()
                    res[s] = cores[s].run(sides[a:b], keys[a:b])
                    cpu[s].append(time.process_time() - c0)
                for s in STRUCTURES[1:]:
                    assert all(np.array_equal(x, y) for x, y in zip(res[s], res["bptree"], strict=True)), \
                        f"{s}: result differs from the B+-Tree's"
            ib_over_b = _ratio(cpu, "bchain", "ibchain")
            ratios.append(ib_over_b)
            emit({"bench": "band_chains", "log_w": k, "chain_length": length,
                  "prefetch": bool(cores["ibchain"].prefetch),
                  **{f"{s}_ns": round(float(np.median(cpu[s])) / args.chunk * 1e9)
                     for s in STRUCTURES},
                  "ibchain_over_bchain": ib_over_b,
                  "bchain_over_bptree": _ratio(cpu, "bptree", "bchain"),
                  "ibchain_over_bptree": _ratio(cpu, "bptree", "ibchain")})
        emit({"bench": "band_chains", "summary": True, "log_w": k, "lengths": lengths,
              "ibchain_over_bchain_mean": round(float(np.mean(ratios)), 3)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
