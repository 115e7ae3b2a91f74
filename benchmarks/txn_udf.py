"""User functions and object state: what they cost against the built-in numeric operations.

``python -m benchmarks.txn_udf [--events N] [--object-events N] [--repeat R] [--parts udf,objects]``

1. Streaming Ledger with every conditional debit as a ``UDF`` op (a numba function called inside
   the executor kernels: ``new = balance - p[0]``, abort unless ``balance >= p[1]``) against the
   same events with the built-in ``ADD`` + ``GE`` condition. Same semantics, so every run must
   reproduce the built-in serial run's checksum and commit count (asserted before printing).
2. The object slow path: ledger transfers through the per-event API (``run_events``) with and
   without an ``update_object`` appending each transfer to a per-account list; same numeric
   outcome asserted.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from numba import njit

from benchmarks._txn import emit, machine_parallelism, prepare
from splice.txn import COND_GE, StateTable, TxnEngine
from splice.txn.api import add, run_events, update_object
from splice.txn.ops import ADD, COND_UDF, UDF, OpBatch
from splice.workloads.txn_apps import TxnWorkload, make_app, run_app


@njit(cache=True, nogil=True)
def debit(value: float, p: np.ndarray) -> tuple[float, bool]:
    """``p = (amount, required)``: the built-in ``ADD -amount`` with ``GE required``."""
    return value - p[0], value >= p[1]


def _as_udf(batch: OpBatch) -> OpBatch:
    """The batch with its conditional ADDs (debits) turned into UDF ops."""
    m = (batch.op_kind == ADD) & (batch.op_cond == COND_GE)
    rows = np.flatnonzero(m)
    params = np.ascontiguousarray(np.stack([-batch.op_operand[rows], batch.op_cond_arg[rows]], 1))
    kind, operand, cond = batch.op_kind.copy(), batch.op_operand.copy(), batch.op_cond.copy()
    kind[rows], cond[rows] = UDF, COND_UDF
    operand[rows] = np.arange(rows.shape[0], dtype=np.float64)
    return OpBatch(batch.txn_ts, batch.op_txn, batch.op_cell, kind, operand, cond,
                   batch.op_cond_arg, batch.src_ptr, batch.src_cell, batch.txn_reason,
                   batch.txn_group, params if rows.shape[0] else np.zeros((0, 1)))


def _sl_run(w: TxnWorkload, scheduler: str, threads: int, udf: bool) -> dict[str, Any]:
    app = make_app("sl", w)
    if udf:
        build = app.build
        app.build = lambda eng, ev, lo, hi: _as_udf(build(eng, ev, lo, hi))
    eng = TxnEngine(app.tables, threads=threads, scheduler=scheduler, udf=debit if udf else None)
    try:
        out = run_app(app, eng, w.punctuation)
    finally:
        eng.close()
    return {"seconds": out["seconds"], "committed": out["committed"],
            "state_checksum": eng.store.checksum(), "strategies": dict(eng.strategies)}


def _transfer(e: dict) -> list:
    return [add("acct", e["src"], -e["amount"], require_ge=e["amount"]),
            add("acct", e["dst"], e["amount"])]


def _append(log: list, item: tuple) -> list:
    log.append(item)
    return log[-8:]  # the last 8 transfers of the account


def _transfer_logged(e: dict) -> list:
    return _transfer(e) + [update_object("log", e["src"], _append, (e["dst"], e["amount"]))]


def _objects_run(events: list[dict], fn: Any, threads: int, punctuation: int) -> dict[str, Any]:
    eng = TxnEngine([StateTable("acct", 1000, initial=500.0),
                     StateTable("log", 1000, objects=("last",), object_initial=list)],
                    threads=threads)
    t0 = time.perf_counter()
    committed = 0
    for lo in range(0, len(events), punctuation):
        committed += sum(o.committed for o in run_events(eng, events[lo:lo + punctuation], fn))
    seconds = time.perf_counter() - t0
    eng.close()
    return {"seconds": seconds, "committed": committed,
            "accounts": eng.store.values[0][:1000, 0].tobytes()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--object-events", type=int, default=50_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--parts", default="udf,objects")
    a = p.parse_args()
    parts = set(a.parts.split(","))
    if "udf" in parts:
        _udf_part(a)
    if "objects" in parts:
        _objects_part(a)


def _udf_part(a: argparse.Namespace) -> None:
    prepare("sl", 2, ["serial", "auto"])
    small = TxnWorkload(events=4096, keys=64, punctuation=1024, deposit_ratio=0.3, abort_ratio=0.1)
    for s, t in (("serial", 1), ("auto", 2), ("sstore", 2), ("tstream", 2)):
        _sl_run(small, s, t, True)  # compile the kernels for the user function (untimed)
    emit({"bench": "txn_udf", "machine_parallelism_2_threads": machine_parallelism(2)})

    w = TxnWorkload(events=a.events, keys=10_000, punctuation=10_240, deposit_ratio=0.3,
                    abort_ratio=0.05, seed=4)
    configs = [(s, t, u) for s, t in (("serial", 1), ("auto", 1), ("auto", 2), ("tstream", 2),
                                      ("sstore", 2)) for u in (False, True)]
    best: dict[tuple[str, int, bool], dict[str, Any]] = {}
    ref = None
    for r in range(a.repeat):
        for s, t, u in configs[r % len(configs):] + configs[:r % len(configs)]:
            m = _sl_run(w, s, t, u)
            key = (m["state_checksum"], m["committed"])
            ref = ref or key
            assert key == ref, f"{s} on {t} threads (udf={u}) disagrees: {key} != {ref}"
            if (s, t, u) not in best or m["seconds"] < best[(s, t, u)]["seconds"]:
                best[(s, t, u)] = m
    for (s, t, u), m in best.items():
        emit({"bench": "txn_udf", "app": "sl", "scheduler": s, "threads": t,
              "debit": "udf" if u else "built-in", "events": a.events,
              "events_per_s": round(a.events / m["seconds"], 1), "committed": m["committed"],
              "state_checksum": m["state_checksum"], "strategies": m["strategies"]})
    for s, t, _ in configs[::2]:
        emit({"bench": "txn_udf", "scheduler": s, "threads": t,
              "udf_over_builtin": round(best[(s, t, False)]["seconds"] / best[(s, t, True)]["seconds"], 3)})


def _objects_part(a: argparse.Namespace) -> None:
    rng = np.random.default_rng(5)
    n = a.object_events
    src = rng.integers(0, 1000, n)
    dst = (src + 1 + rng.integers(0, 999, n)) % 1000
    events = [{"src": int(x), "dst": int(y), "amount": float(v)}
              for x, y, v in zip(src, dst, rng.integers(1, 200, n), strict=True)]
    runs: dict[str, dict[str, Any]] = {}
    for _ in range(a.repeat):
        for name, fn, t in (("numeric", _transfer, 2), ("with object log", _transfer_logged, 2)):
            m = _objects_run(events, fn, t, 1024)
            if name not in runs or m["seconds"] < runs[name]["seconds"]:
                runs[name] = m
    assert runs["numeric"]["accounts"] == runs["with object log"]["accounts"]
    assert runs["numeric"]["committed"] == runs["with object log"]["committed"]
    for name, m in runs.items():
        emit({"bench": "txn_udf", "app": "ledger via run_events", "accesses": name, "threads": 2,
              "events": n, "events_per_s": round(n / m["seconds"], 1), "committed": m["committed"]})


if __name__ == "__main__":
    main()
