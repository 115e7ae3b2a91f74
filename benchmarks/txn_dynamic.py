"""MorphStream's phased dynamic workload: adaptive scheduling vs every fixed strategy and baselines.

``python -m benchmarks.txn_dynamic [--events-per-phase N] [--threads T]``

Each of the four phases (deposits; rising skew; rising transfers; rising aborts) is run under
``auto``, each fixed strategy, S-Store-like and TStream-like engines; one JSON line per
(phase, scheduler), then per phase the adaptive/best-fixed ratio (goal >= 0.9) and overall
totals (goal: ahead of S-Store-like and TStream-like).
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from benchmarks._txn import emit, measure_round_robin, prepare
from splice.txn.scheduler import ALL_STRATEGIES
from splice.workloads.txn_apps import phased_sl


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events-per-phase", type=int, default=200_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--punctuation", type=int, default=10_240)
    p.add_argument("--repeat", type=int, default=2)
    a = p.parse_args()
    fixed = [s.name for s in ALL_STRATEGIES]
    scheds = ["serial", "sstore", "tstream", "auto"] + fixed
    prepare("sl", a.threads, scheds)
    secs: dict[tuple[str, str], float] = defaultdict(float)
    events: dict[str, int] = defaultdict(int)
    for phase, w in phased_sl(a.events_per_phase, a.keys, punctuation=a.punctuation):
        events[phase] += w.events
        configs = [(s, 1 if s == "serial" else a.threads) for s in scheds]
        for m in measure_round_robin("sl", w, configs, 0.0, a.repeat):
            secs[(phase, m["scheduler"])] += m["seconds"]
            m.update({"bench": "txn_dynamic", "phase": phase, "skew": w.skew,
                      "deposit_ratio": w.deposit_ratio, "abort_ratio": w.abort_ratio})
            emit(m)
    total = defaultdict(float)
    for phase in events:
        rate = {s: events[phase] / secs[(phase, s)] for s in scheds}
        best_fixed = max(fixed, key=lambda s: rate[s])
        emit({"bench": "txn_dynamic", "phase": phase, "auto_events_per_s": round(rate["auto"]),
              "best_fixed": best_fixed, "best_fixed_events_per_s": round(rate[best_fixed]),
              "auto_vs_best_fixed": round(rate["auto"] / rate[best_fixed], 3),
              "sstore_events_per_s": round(rate["sstore"]),
              "tstream_events_per_s": round(rate["tstream"]),
              "serial_events_per_s": round(rate["serial"])})
        for s in scheds:
            total[s] += secs[(phase, s)]
    n = sum(events.values())
    emit({"bench": "txn_dynamic", "overall_events_per_s": {s: round(n / total[s]) for s in scheds}})


if __name__ == "__main__":
    main()
