"""GrepSum (window sizes, trigger periods, non-deterministic share), Toll Processing (nested) and
the stock exchange hash window join as transactions (window sizes, skew).

``python -m benchmarks.txn_apps [--events N] [--threads T] [--apps gs,tp,sej]``
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
    p.add_argument("--apps", default="gs,tp,sej", help="which applications, comma separated")
    a = p.parse_args()
    apps = set(a.apps.split(","))
    if "gs" in apps:
        prepare("gs", a.threads, ["auto", "sstore", "tstream", "serial"])
    if "tp" in apps:
        prepare("tp", a.threads, ["auto", "sstore", "tstream", "serial", "nested"])
    if "sej" in apps:
        prepare("sej", a.threads, ["auto", "sstore", "tstream", "serial"])
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
    for window, skew in ((1_000, 0.0), (1_000, 1.0), (10_000, 0.0)):
        runs.append(("sej", {"window": window, "skew": skew}, replace(base, window=window, skew=skew)))
    for app, params, w in runs:
        if app not in apps:
            continue
        scheds = ["serial", "sstore", "tstream", "auto"] + (["nested"] if app == "tp" else [])
        configs = [(s, 1 if s == "serial" else a.threads) for s in scheds]
        for m in measure_round_robin(app, w, configs, 0.0, a.repeat):
            m.update({"bench": "txn_apps", **params})
            emit(m)


if __name__ == "__main__":
    main()
