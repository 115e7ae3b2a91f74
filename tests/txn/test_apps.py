"""Applications: every scheduler reproduces the serial checksum and outcomes; app invariants."""

from __future__ import annotations

import numpy as np
import pytest

from splice.txn import TxnEngine
from splice.txn.scheduler import ALL_STRATEGIES
from splice.workloads.txn_apps import TxnWorkload, make_app, phased_sl, run_app
from tests.txn.reference import SerialReference

SCHEDULERS = ["serial", "sstore", "tstream", "auto"] + [s.name for s in ALL_STRATEGIES]

CASES = [
    ("sl", dict(keys=50, skew=1.2, abort_ratio=0.1, deposit_ratio=0.3)),
    ("sl", dict(keys=20, skew=0.0, abort_ratio=0.0, deposit_ratio=0.0)),
    ("gs", dict(keys=40, skew=0.8, abort_ratio=0.05, keys_per_access=3, window=50)),
    ("gs", dict(keys=40, cyclic=False, multi_access=0.5, window=200, window_trigger=7)),
    ("gs", dict(keys=30, nd_ratio=0.1, window=30)),
    ("tp", dict(keys=16, skew=1.0, abort_ratio=0.2)),
    ("sej", dict(keys=10, window=40)),
]


def _run(app_name: str, kw: dict, scheduler: str, threads: int) -> tuple[str, int, list]:
    w = TxnWorkload(events=600, punctuation=97, seed=5, **kw)
    app = make_app(app_name, w)
    eng = TxnEngine(app.tables, threads=threads, scheduler=scheduler)
    outcomes: list = []
    try:
        for lo in range(0, w.events, w.punctuation):
            hi = min(lo + w.punctuation, w.events)
            built = app.build(eng, app.events, lo, hi)
            batch, nd = built if isinstance(built, tuple) else (built, None)
            r = eng.execute(batch, nd)
            outcomes.append((r.committed.tolist(), np.nan_to_num(r.op_result, nan=-1.0).tolist()))
        return eng.store.checksum(), eng.committed, outcomes
    finally:
        eng.close()


@pytest.mark.parametrize("case", CASES, ids=[f"{a}-{i}" for i, (a, _) in enumerate(CASES)])
def test_all_schedulers_agree_with_serial(case: tuple[str, dict]) -> None:
    app_name, kw = case
    expected = _run(app_name, kw, "serial", 1)
    for threads in (1, 2):
        for sched in SCHEDULERS:
            assert _run(app_name, kw, sched, threads) == expected, (sched, threads)


@pytest.mark.parametrize("app_name,kw", [(a, k) for a, k in CASES if not k.get("nd_ratio")])
def test_serial_engine_equals_python_reference(app_name: str, kw: dict) -> None:
    w = TxnWorkload(events=300, punctuation=64, seed=9, **kw)
    app = make_app(app_name, w)
    eng = TxnEngine(app.tables, scheduler="ns,f,l", threads=2)
    ref = SerialReference({i: t.initial for i, t in enumerate(app.tables)})
    for lo in range(0, w.events, w.punctuation):
        batch = app.build(eng, app.events, lo, min(lo + w.punctuation, w.events))
        r = eng.execute(batch)
        committed, reasons, results = ref.run(batch)
        assert r.committed.tolist() == committed
        np.testing.assert_array_equal(r.op_result, np.array(results))
    eng.close()


def test_streaming_ledger_conserves_money_and_never_goes_negative() -> None:
    w = TxnWorkload(events=3000, keys=30, skew=1.0, deposit_ratio=0.2, abort_ratio=0.05)
    app = make_app("sl", w)
    eng = TxnEngine(app.tables, threads=2, scheduler="auto")
    committed = np.zeros(0, bool)
    for lo in range(0, w.events, 500):
        r = eng.execute(app.build(eng, app.events, lo, lo + 500))
        committed = np.concatenate([committed, r.committed])
    ev = app.events
    dep = ev["deposit"] & committed
    accounts = eng.store.values[0][:30, 0]
    assert accounts.sum() == 30 * 10_000.0 + ev["amount"][dep].sum()
    assert (accounts >= 0).all() and (eng.store.values[1][:30, 0] >= 0).all()
    assert not committed[ev["abort"]].any()
    eng.close()


def test_nested_configuration_matches_plain_run() -> None:
    w = TxnWorkload(events=2000, keys=40, skew=1.0, abort_ratio=0.2, punctuation=500)
    app = make_app("tp", w)
    plain = TxnEngine(app.tables, threads=2, scheduler="serial")
    run_app(app, plain, w.punctuation)
    app2 = make_app("tp", w)
    nested = TxnEngine(app2.tables, threads=2, nested=app2.nested)
    run_app(app2, nested, w.punctuation)
    assert nested.store.checksum() == plain.store.checksum()
    assert all(name.startswith("nested(") for name in nested.strategies)
    plain.close()
    nested.close()


def test_phased_workload_has_four_phases() -> None:
    phases = phased_sl(8000, 100)
    assert [p for p, _ in phases][::4] == ["1-deposits", "2-skew", "3-transfers", "4-aborts"]
    assert phases[-1][1].abort_ratio > phases[-4][1].abort_ratio


@pytest.mark.parametrize("case", CASES, ids=[f"{a}-{i}" for i, (a, _) in enumerate(CASES)])
def test_pipelined_runs_equal_one_batch_at_a_time(case: tuple[str, dict]) -> None:
    app_name, kw = case
    w = TxnWorkload(events=900, punctuation=128, seed=11, **kw)
    sums = set()
    for sched, threads in (("serial", 1), ("auto", 2), ("auto", 3), ("tstream", 2),
                           ("sstore", 2), ("s,c,e", 3)):
        app = make_app(app_name, w)
        eng = TxnEngine(app.tables, threads=threads, scheduler=sched)
        out = run_app(app, eng, w.punctuation)
        sums.add((eng.store.checksum(), out["committed"]))
        eng.close()
    assert len(sums) == 1


def test_pipelined_construction_survives_table_growth() -> None:
    from splice.txn import ADD, WINDOW_READ, OpBatchBuilder, StateTable

    def batches(eng: TxnEngine):  # type: ignore[no-untyped-def]
        for k in range(6):
            b = OpBatchBuilder([10 * k + 1, 10 * k + 2])
            key = 4 ** (k + 1)  # beyond capacity: the table grows while the previous batch runs
            b.add([0, 1], eng.store.cells(0, [key, 1]), [ADD, WINDOW_READ], [1.0, 100.0])
            yield b.build(), None

    results = []
    for threads in (1, 2):
        eng = TxnEngine([StateTable("t", keys=2, history=100)], threads=threads)
        results.append([r.op_result.tolist() for r in eng.execute_many(batches(eng))]
                       + [eng.store.checksum()])
        eng.close()
    assert results[0] == results[1]
