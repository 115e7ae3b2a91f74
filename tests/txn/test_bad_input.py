"""Bad input aborts its own transaction with a reason; the engine goes on; nothing is lost."""

from __future__ import annotations

import math

import numpy as np
import pytest

from splice.core.errors import PlanError
from splice.txn import ADD, OpBatchBuilder, StateTable, TxnEngine
from splice.txn.api import Access, add, read, run_events, sum_write
from splice.txn.ops import REASON_LATE, REASON_OPERAND


def _transfer(e: dict) -> list[Access]:
    return [add(e.get("table", "acct"), e["src"], -e["amount"], require_ge=e["amount"]),
            add("acct", e["dst"], e["amount"])]


def _engine(scheduler: str = "auto", threads: int = 2) -> TxnEngine:
    return TxnEngine([StateTable("acct", keys=4, initial=100.0)], threads=threads,
                     scheduler=scheduler)


@pytest.mark.parametrize("scheduler", ["serial", "sstore", "tstream", "auto", "ns,f,e", "s,c,l"])
def test_each_kind_of_bad_input_aborts_only_its_event(scheduler: str) -> None:
    eng = _engine(scheduler)
    events = [
        {"src": 0, "dst": 1, "amount": 10},                     # ok
        {"src": 0, "dst": 1, "amount": 10, "table": "nope"},    # undeclared table
        {"src": "k", "dst": 1, "amount": 10},                   # key of the wrong type
        {"src": -1, "dst": 1, "amount": 10},                    # negative key
        {"src": 1.5, "dst": 1, "amount": 10},                   # float key
        {"src": 0, "dst": 1, "amount": math.nan},               # non-finite amount
        {"src": 0, "dst": 1, "amount": None},                   # the function raises
        {"src": 0, "dst": 1, "amount": 1000},                   # insufficient balance
        {"src": 2, "dst": 3, "amount": 5},                      # ok
    ]
    out = run_events(eng, events, _transfer)
    reasons = [o.reason.split(":")[0] for o in out]
    assert reasons == ["", "undeclared table or column", "key of the wrong type or out of range",
                       "key of the wrong type or out of range",
                       "key of the wrong type or out of range", "non-numeric operand",
                       "user function raised", "condition failed", ""]
    assert [o.committed for o in out] == [True] + [False] * 7 + [True]
    vals = [eng.store.value("acct", k) for k in range(4)]
    assert vals == [90.0, 110.0, 95.0, 105.0]
    # the engine goes on
    out = run_events(eng, [{"src": 1, "dst": 0, "amount": 110}], _transfer)
    assert out[0].committed and eng.store.value("acct", 1) == 0.0
    eng.close()


def test_punctuation_going_backwards_aborts_late_events_and_continues() -> None:
    eng = _engine("ns,f,l")
    b = OpBatchBuilder([10, 11])
    b.add([0, 1], eng.store.cells(0, [0, 1]), ADD, [1.0, 2.0])
    assert eng.execute(b.build()).committed.all()
    late = OpBatchBuilder([5, 11, 12])  # 5 and 11 are at or behind the punctuation at 11
    late.add([0, 1, 2], eng.store.cells(0, [0, 0, 0]), ADD, [100.0, 100.0, 7.0])
    r = eng.execute(late.build())
    assert r.committed.tolist() == [False, False, True]
    assert r.reason.tolist()[:2] == [REASON_LATE, REASON_LATE]
    assert eng.store.value("acct", 0) == 108.0
    eng.close()


def test_non_finite_operand_in_columns_aborts() -> None:
    eng = _engine("s,f,e")
    b = OpBatchBuilder([1, 2, 3])
    b.add([0, 1, 2], eng.store.cells(0, [0, 1, 2]), ADD, [1.0, np.inf, np.nan])
    r = eng.execute(b.build())
    assert r.committed.tolist() == [True, False, False]
    assert r.reason.tolist() == [0, REASON_OPERAND, REASON_OPERAND]
    assert [eng.store.value("acct", k) for k in range(3)] == [101.0, 100.0, 100.0]
    eng.close()


def test_programming_mistakes_raise_plan_errors() -> None:
    eng = _engine()
    with pytest.raises(PlanError):
        run_events(eng, [{"x": 1}], lambda e: [Access("teleport", "acct", 0)])
    with pytest.raises(PlanError):
        run_events(eng, [{"x": 1}], lambda e: ["not an access"])  # type: ignore[list-item]
    with pytest.raises(PlanError):
        OpBatchBuilder([2, 1])
    b = OpBatchBuilder([1])
    with pytest.raises(PlanError):
        b.add([0], eng.store.cells(0, [0]), 42)
    with pytest.raises(PlanError):
        eng.store.table_index("missing")
    with pytest.raises(PlanError):
        TxnEngine([StateTable("a", 1)], scheduler="fast,furious,now")
    eng.close()


def test_keys_beyond_capacity_grow_the_table() -> None:
    eng = _engine("ns,c,e")
    out = run_events(eng, [{"k": 1000}], lambda e: [add("acct", e["k"], 5.0), read("acct", 0)])
    assert out[0].committed and eng.store.value("acct", 1000) == 105.0
    assert out[0].results == (105.0, 100.0)
    eng.close()


def test_sum_write_reads_sources_before_the_transaction() -> None:
    eng = TxnEngine([StateTable("v", keys=4, initial=1.0)], threads=2, scheduler="ns,f,e")
    out = run_events(eng, [{"k": 0}, {"k": 1}],
                     lambda e: [sum_write("v", e["k"], [("v", 0), ("v", 1), ("v", 2)])])
    assert [o.results for o in out] == [(3.0,), (5.0,)]
    eng.close()


@pytest.mark.parametrize("threads", [1, 2])
def test_no_committed_write_lost_or_applied_twice(threads: int) -> None:
    rng = np.random.default_rng(3)
    events = []
    for _ in range(300):
        e: dict = {"src": int(rng.integers(0, 4)), "dst": int(rng.integers(0, 4)),
                   "amount": float(rng.integers(1, 80))}
        r = rng.random()
        if r < 0.1:
            e["amount"] = math.inf
        elif r < 0.2:
            e["table"] = "ghost"
        elif r < 0.3:
            e["src"] = "zero"
        events.append(e)

    def deposit_and_transfer(e: dict) -> list[Access]:
        if e["src"] == e["dst"]:
            return [add(e.get("table", "acct"), e["src"], e["amount"])]
        return _transfer(e)

    totals = {}
    for sched in ("serial", "auto", "tstream", "ns,f,l", "s,c,e"):
        eng = _engine(sched, threads)
        committed_deposits = 0.0
        for lo in range(0, 300, 50):
            chunk = events[lo:lo + 50]
            for e, o in zip(chunk, run_events(eng, chunk, deposit_and_transfer), strict=True):
                if o.committed and e["src"] == e["dst"]:
                    committed_deposits += e["amount"]
        total = sum(eng.store.value("acct", k) for k in range(4))
        assert total == pytest.approx(400.0 + committed_deposits)
        totals[sched] = (eng.store.checksum(), total)
        eng.close()
    assert len(set(totals.values())) == 1


def test_undeclared_column_and_source_abort() -> None:
    eng = TxnEngine([StateTable("seg", keys=2, columns=("speed", "count"))], scheduler="ns,f,l")
    out = run_events(eng, [{"c": "speed"}, {"c": "colour"}, {"c": "count"}],
                     lambda e: [add("seg", 0, 1.0, column=e["c"]),
                                sum_write("seg", 1, [("seg", 0)] if e["c"] != "count"
                                          else [("ghost", 0)])])
    assert [o.committed for o in out] == [True, False, False]
    assert out[1].reason.startswith("undeclared table or column")
    assert eng.store.value("seg", 0, "speed") == 1.0
    eng.close()
