"""Lazy abort's redo: the data-edge closure of the changed exclusions against a fresh pass over
the whole batch, by abort ratio (what ``FULL_REDO_SHARE`` in ``splice/txn/txn_executor.py`` decides).

``python -m benchmarks.txn_redo [--threads T] [--samples N]``

One Streaming Ledger batch (10,240 events, 10,000 keys, skew 0.4, 90 % transfers) per abort
ratio, its TPG built once; then ``ns,f,l`` executions of it, interleaved, with the redo pinned
to the closure, pinned to the whole batch, and as the engine picks it, next to the TStream-like
engine (which always redoes the whole batch). One JSON line per abort ratio: median
microseconds per execution of each, and which redo the engine picked.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks._txn import emit
from splice.cli.txn import warm_kernels
from splice.txn import txn_executor as executor
from splice.txn.memory import keep_freed_memory
from splice.txn.scheduler import Strategy
from splice.txn.tpg import build_tpg
from splice.txn.txn_engine import TxnEngine
from splice.workloads.txn_apps import TxnWorkload, batches, make_app

VARIANTS = {"closure": 0, "whole batch": 10**12, "engine": executor.FULL_REDO_SHARE}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--samples", type=int, default=40)
    a = p.parse_args()
    keep_freed_memory()
    warm_kernels("sl", TxnWorkload(keys=64), "ns,f,l", a.threads, 0.0)
    strategy = Strategy("ns", "f", "l")
    for abort_ratio in (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.3):
        w = TxnWorkload(events=10_240, keys=10_000, skew=0.4, abort_ratio=abort_ratio,
                        punctuation=10_240, deposit_ratio=0.1)
        app = make_app("sl", w)
        eng = TxnEngine(app.tables, threads=a.threads, scheduler="ns,f,l")
        lo, hi = next(iter(batches(app, w.punctuation)))
        built = app.build(eng, app.events, lo, hi)
        batch = built[0] if isinstance(built, tuple) else built
        refused = np.zeros(batch.num_txns, bool)
        tpg = build_tpg(batch, refused, eng.store)
        times: dict[str, list[float]] = {v: [] for v in [*VARIANTS, "tstream"]}
        redo_ops = 0
        try:
            for _ in range(a.samples):
                for v, share in VARIANTS.items():
                    executor.FULL_REDO_SHARE = share
                    t0 = time.perf_counter()
                    ex = executor.run_tpg(batch, refused, tpg, strategy, eng.team, 0, False)
                    times[v].append(time.perf_counter() - t0)
                    if v == "engine":
                        redo_ops = ex.info["redo_ops"]
                t0 = time.perf_counter()
                executor.run_tstream(batch, refused, tpg, eng.team, 0, False)
                times["tstream"].append(time.perf_counter() - t0)
        finally:
            executor.FULL_REDO_SHARE = VARIANTS["engine"]
            eng.close()
        ops = int(tpg.pred.shape[0])
        emit({"bench": "txn_redo", "abort_ratio": abort_ratio, "ops": ops,
              "engine_redo_ops": redo_ops,
              "engine_redo": ("none" if redo_ops == 0 else
                              "whole batch" if redo_ops == ops else "closure"),
              **{f"{v}_us": round(float(np.median(t)) * 1e6) for v, t in times.items()}})


if __name__ == "__main__":
    main()
