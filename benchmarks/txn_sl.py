"""Streaming Ledger throughput: MorphStream's strategies vs serial, S-Store-like and TStream-like.

``python -m benchmarks.txn_sl [--events N] [--threads 1,2] [--complexity-events N]``

Prints one JSON object per (scheduler, threads, complexity) run, then a summary line per goal.
Every run of one configuration must reproduce the serial run's state checksum and commit count
(asserted before any figure is printed).
"""

from __future__ import annotations

from benchmarks._txn import (
    emit,
    machine_parallelism,
    measure_round_robin,
    prepare,
    workload_parser,
)
from splice.txn.scheduler import ALL_STRATEGIES
from splice.workloads.txn_apps import TxnWorkload

BASELINES = ["serial", "sstore", "tstream"]


def main() -> None:
    p = workload_parser(__doc__)
    p.add_argument("--complexity-events", type=int, default=20_000)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--all-strategies", action="store_true", help="also every fixed strategy")
    a = p.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    scheds = BASELINES + ["auto"] + ([s.name for s in ALL_STRATEGIES] if a.all_strategies else [])
    for t in threads:
        prepare("sl", t, scheds)
    emit({"bench": "txn_sl", "machine_parallelism_2_threads": machine_parallelism(2)})

    best: dict[tuple[float, int], float] = {}
    for complexity, events in ((0.0, a.events), (10.0, a.complexity_events)):
        w = TxnWorkload(events=events, keys=a.keys, punctuation=a.punctuation, seed=1)
        configs = [("serial", 1)] + [(s, t) for t in threads for s in scheds if s != "serial"]
        for m in measure_round_robin("sl", w, configs, complexity, a.repeat):
            m.update({"bench": "txn_sl", "complexity_us": complexity, "events": events})
            emit(m)
            if m["scheduler"] == "auto":
                best[(complexity, m["threads"])] = m["events_per_s"]
    if (0.0, 2) in best:
        emit({"bench": "txn_sl", "goal": "SL complexity 0 on 2 threads >= 1M events/s",
              "events_per_s": best[(0.0, 2)], "met": best[(0.0, 2)] >= 1e6})
    if (10.0, 1) in best and (10.0, 2) in best:
        ratio = best[(10.0, 2)] / best[(10.0, 1)]
        emit({"bench": "txn_sl", "goal": "complexity 10us: 2 threads >= 1.7x 1 thread",
              "speedup": round(ratio, 3), "met": ratio >= 1.7,
              "machine_parallelism_2_threads": machine_parallelism(2)})


if __name__ == "__main__":
    main()
