"""GrepSum (window sizes, trigger periods, non-deterministic share) and Toll Processing (nested).

``python -m benchmarks.txn_apps [--events N] [--threads T]``
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from benchmarks._txn import emit, measure_round_robin, prepare
from splice.workloads.txn_apps import TxnWorkload


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=2)
    a = p.parse_args()
    prepare("gs", a.threads, ["auto", "sstore", "tstream", "serial"])
    prepare("tp", a.threads, ["auto", "sstore", "tstream", "serial", "nested"])
    base = TxnWorkload(events=a.events, keys=10_000, punctuation=10_240, seed=2)
    runs = []
    for window in (1_000, 10_000, 100_000):
        runs.append(("gs", {"window": window}, replace(base, window=window)))
    for trig in (100, 1_000, 10_000):
        runs.append(("gs", {"window_trigger": trig}, replace(base, window_trigger=trig)))
    for nd in (0.0, 0.001, 0.01):
        runs.append(("gs", {"nd_ratio": nd}, replace(base, nd_ratio=nd, events=a.events // 4)))
    tp = replace(base, skew=1.2, abort_ratio=0.3)
    runs.append(("tp", {"groups": "skewed+aborting / uniform"}, tp))
    for app, params, w in runs:
        scheds = ["serial", "sstore", "tstream", "auto"] + (["nested"] if app == "tp" else [])
        configs = [(s, 1 if s == "serial" else a.threads) for s in scheds]
        for m in measure_round_robin(app, w, configs, 0.0, a.repeat):
            m.update({"bench": "txn_apps", **params})
            emit(m)


if __name__ == "__main__":
    main()
