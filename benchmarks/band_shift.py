"""PIM-Tree under a shifting Gaussian (the PIM-Tree paper's Figure 13a/b): inserts per partition over time.

``python -m benchmarks.band_shift [--log-w 18] [--depth 2] [--rs 0,0.2,0.4,0.6,0.8,1] [--plot]``

A self-join over one stream whose keys come in three phases (the PIM-Tree paper's setup, scaled by the
window): ``4w`` tuples from N(0.5, 0.125), ``10w`` tuples whose mean moves linearly from 0.5 to
``0.5 + r``, ``4w`` tuples from N(0.5 + r, 0.125); band ``eps`` for match rate 2 under the fixed
distribution. The PIM-Tree runs with merge ratio 1 (as the parallel join) and insertion depth
``--depth``. For every merge period the inserts each ``T_I`` partition received are read from
the partitions' sizes just before the merge (``T_I`` only grows between merges); per phase the
benchmark reports the largest partition's share of the inserts, the share of partitions that
received almost none (under 1 % of an even share), and the throughput of the single-threaded
join (``1t``) and of the task-queue and key-range joins on ``--threads`` threads, in wall time
(``rate``) and per CPU second of the process (``cpu_rate``), with the key-range join's
rebalances; the joins' results are asserted equal. The machine's
2-thread ceiling measured in the same run comes first. ``--plot`` writes ``benchmarks/out/band_shift.png`` (the sorted, normalized
insert distribution of phase 2 per ``r``, as the PIM-Tree paper's Figure 13a) and
``band_shift_throughput.png``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from benchmarks._band import OUT, emit, machine_parallelism
from splice.index._bptree import T_SIZE
from splice.index._window import M_MERGES, M_NPART
from splice.joins.band.band_join import BandCore
from splice.joins.band.parallel_band import KeyRangeJoin, TaskQueueJoin

SIGMA = 0.125


def shifting_keys(w: int, r: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Keys of the three phases and the phase of each tuple (0, 1, 2)."""
    rng = np.random.default_rng(seed)
    n1, n2, n3 = 4 * w, 10 * w, 4 * w
    mean = np.concatenate([np.full(n1, 0.5), 0.5 + r * np.arange(n2) / n2, np.full(n3, 0.5 + r)])
    keys = rng.normal(mean, SIGMA)
    phase = np.repeat(np.arange(3, dtype=np.int8), [n1, n2, n3])
    return keys, phase


def insert_shares(keys: np.ndarray, w: int, eps: float, depth: int, step: int
                  ) -> tuple[list[np.ndarray], list[int], float]:
    """Per merge period: inserts per partition (before the merge) and the period's last tuple;
    plus the CPU seconds of the run."""
    core = BandCore("pimtree", (w, w), np.dtype(np.float64), -eps, eps, True, 1.0, depth)
    ix = core.indexes[0]
    zeros = np.zeros(len(keys), np.int8)
    periods: list[np.ndarray] = []
    ends: list[int] = []
    cpu = 0.0
    for c0 in range(0, len(keys), step):
        merges = int(ix.meta[M_MERGES])
        sizes = ix.state.tmeta[: int(ix.meta[M_NPART]), T_SIZE].copy()
        t = time.process_time()
        core.run(zeros[c0 : c0 + step], keys[c0 : c0 + step])
        cpu += time.process_time() - t
        ix = core.indexes[0]
        if int(ix.meta[M_MERGES]) != merges and sizes.sum():
            periods.append(sizes)
            ends.append(c0)
    return periods, ends, cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log-w", type=int, default=18)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--rs", default="0,0.2,0.4,0.6,0.8,1")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--task-size", type=int, default=64)
    ap.add_argument("--plot", action="store_true")
    args = ap.parse_args(argv)
    w = 1 << args.log_w
    eps = 2.0 / (2.0 * w * (1.0 / (2.0 * np.sqrt(np.pi) * SIGMA)))  # match rate 2 under N(., SIGMA)
    emit({"bench": "band_shift", "machine_parallelism": machine_parallelism(args.threads)})
    dist: dict[str, list[float]] = {}
    tput: dict[str, tuple[list[float], list[float]]] = {}
    for r in [float(x) for x in args.rs.split(",")]:
        keys, phase = shifting_keys(w, r)
        periods, ends, _ = insert_shares(keys, w, eps, args.depth, max(1, w // 8))
        rec: dict[str, Any] = {"bench": "band_shift", "r": r, "log_w": args.log_w,
                               "depth": args.depth, "merge_periods": len(periods)}
        for ph in range(3):
            mine = [p for p, e in zip(periods, ends, strict=True) if phase[min(e, len(phase) - 1)] == ph]
            if not mine:
                continue
            shares = [p / p.sum() for p in mine]
            rec[f"phase{ph + 1}_partitions"] = int(np.mean([len(s) for s in shares]))
            rec[f"phase{ph + 1}_max_share"] = round(float(np.mean([s.max() for s in shares])), 4)
            rec[f"phase{ph + 1}_idle_share"] = round(float(np.mean(
                [(s < 0.01 / len(s)).mean() for s in shares])), 4)
            if ph == 1:
                top = min(64, min(len(s) for s in shares))
                mean_sorted = np.mean([np.sort(s)[::-1][:top] * len(s) for s in shares], axis=0)
                dist[f"r = {r}"] = mean_sorted.tolist()
        # throughput per phase: single thread (CPU time) and the task-queue join (wall)
        bounds = np.searchsorted(phase, [0, 1, 2, 3])
        for join in ("1t", "task_queue", "key_range"):
            threads = 1 if join == "1t" else args.threads
            if join == "1t":
                core: Any = BandCore("pimtree", (w, w), np.dtype(np.float64), -eps, eps, True, 1.0,
                                     args.depth)
            elif join == "task_queue":
                core = TaskQueueJoin("pimtree", (w, w), np.dtype(np.float64), -eps, eps, True, 1.0,
                                     args.depth, threads, args.task_size)
            else:
                core = KeyRangeJoin("pimtree", (w, w), np.dtype(np.float64), -eps, eps, True, 1.0,
                                    args.depth, threads)
            zeros = np.zeros(len(keys), np.int8)
            outs = []
            for ph in range(3):
                a, b = bounds[ph], bounds[ph + 1]
                t0, c0 = time.perf_counter(), time.process_time()
                g, p = core.run(zeros[a:b], keys[a:b])
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                outs.append((g, p))
                rec[f"phase{ph + 1}_rate_{join}"] = round((b - a) / wall)
                rec[f"phase{ph + 1}_cpu_rate_{join}"] = round((b - a) / cpu)
                label = "1 thread" if join == "1t" else f"{join}, {threads} threads"
                xs, ys = tput.setdefault(f"{label}, phase {ph + 1} (wall)", ([], []))
                xs.append(r)
                ys.append((b - a) / wall)
            if join == "key_range":
                rec["key_range_rebalances"] = core.rebalances
            if join == "1t":
                base = outs
            else:
                for (g0, p0), (g1, p1) in zip(base, outs, strict=True):
                    assert np.array_equal(g0, g1) and np.array_equal(p0, p1), "parallel != serial"
        emit(rec)
    if args.plot and dist:
        from benchmarks._band import plot

        plot(OUT / "band_shift.png",
             {k: (list(range(1, len(v) + 1)), v) for k, v in dist.items()},
             "partitions, most inserts first (top 64)", "inserts / even share",
             f"PIM-Tree inserts per partition while the mean shifts (w = 2^{args.log_w})",
             logx=False)
        plot(OUT / "band_shift_throughput.png", tput, "r (shift of the mean)", "tuples / s",
             "PIM-Tree self-join under a shifting Gaussian", logx=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
