"""User functions at execution time: every scheduler equals the serial reference; bad UDFs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import PlanError
from splice.txn import OpBatchBuilder, StateTable, TxnEngine
from splice.txn.api import add, read, run_events, update
from splice.txn.ops import REASON_CONDITION, REASON_OPERAND
from splice.txn.scheduler import ALL_STRATEGIES
from tests.txn.reference import SerialReference
from tests.txn.udfs import ledger_udf, returns_one_value
from tests.txn.workload import assert_matches_reference

SCHEDULERS = ["serial", "sstore", "tstream", "auto"] + [s.name for s in ALL_STRATEGIES]
TABLES = [StateTable("a", keys=8, initial=10.0, history=1000),
          StateTable("b", keys=8, initial=0.0, history=1000)]


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**31), threads=st.sampled_from([1, 2, 3]), keys=st.integers(1, 6),
       skew=st.sampled_from([0.0, 1.5]), udf_ratio=st.sampled_from([0.3, 0.7]),
       n_txn=st.integers(0, 40))
def test_udf_batches_equal_serial_reference(scheduler: str, threads: int, seed: int, keys: int,
                                            skew: float, udf_ratio: float, n_txn: int) -> None:
    eng = TxnEngine(TABLES, threads=threads, scheduler=scheduler, udf=ledger_udf)
    ref = SerialReference({0: 10.0, 1: 0.0}, udf=ledger_udf)
    assert_matches_reference(eng, ref, np.random.default_rng(seed), 3, n_txn, keys, skew, 0.3, udf_ratio=udf_ratio)


def _fee_transfer(e: dict) -> list:
    """Debit ``amount`` plus a fee from ``src`` (abort below zero), credit ``amount`` to ``dst``."""
    return [update("acct", e["src"], 0, e["amount"], e.get("fee", 1.0)),
            add("acct", e["dst"], e["amount"])]


@pytest.mark.parametrize("scheduler,threads", [("serial", 1), ("ns,f,l", 2), ("ns,f,e", 2),
                                               ("tstream", 2), ("sstore", 2), ("s,c,l", 2)])
def test_failed_udf_condition_aborts_and_rolls_back_later_operations(scheduler: str,
                                                                     threads: int) -> None:
    """An early debit fails; every later debit of the same account must see the rolled-back
    balance (lazy abort redoes them), and the credit of the failed transfer never lands."""
    eng = TxnEngine([StateTable("acct", keys=4, initial=20.0)], threads=threads,
                    scheduler=scheduler, udf=ledger_udf)
    events = [{"src": 0, "dst": 1, "amount": 15},   # 20 -> 4
              {"src": 0, "dst": 2, "amount": 5},    # 4 - 6 < 0: aborts
              {"src": 0, "dst": 3, "amount": 2},    # 4 -> 1
              {"src": 1, "dst": 0, "amount": 30},   # 35 -> 4
              {"src": 0, "dst": 1, "amount": 3, "fee": 0.0},  # 31 -> 28
              {"src": 2, "dst": 1, "amount": math.nan}]       # bad parameter
    out = run_events(eng, events, _fee_transfer)
    assert [o.committed for o in out] == [True, False, True, True, True, False]
    assert out[1].reason == "condition failed"
    assert out[5].reason.startswith("non-numeric operand")
    assert [eng.store.value("acct", k) for k in range(4)] == [28.0, 7.0, 20.0, 22.0]
    assert out[0].results == (4.0, 35.0) and out[1].results == (4.0, 20.0)
    eng.close()


def test_udf_results_in_window_reads_and_operator_results() -> None:
    eng = TxnEngine([StateTable("acct", keys=2, initial=8.0, history=100)], threads=2,
                    scheduler="ns,f,l", udf=ledger_udf)
    b = OpBatchBuilder([1, 2, 3, 4])
    c = eng.store.cells(0, [0, 0, 0, 0])
    b.add_udf([0, 1, 2], c[:3], [[1, 2.0, 0.0], [2, 0.0, 0.0], [1, 0.5, 1.0]])
    from splice.txn.ops import WINDOW_READ
    b.add([3], c[3:], WINDOW_READ, 10.0)
    r = eng.execute(b.build())
    assert r.committed.tolist() == [True, False, True, True]
    assert r.reason.tolist() == [0, REASON_CONDITION, 0, 0]
    assert r.op_result.tolist() == [16.0, 16.0, 9.0, 25.0]  # versions 16 and 9 in the window
    eng.close()


@pytest.mark.parametrize("scheduler,threads", [("serial", 1), ("ns,f,l", 2), ("ns,f,e", 2),
                                               ("s,f,e", 2), ("tstream", 2), ("sstore", 2)])
def test_udf_that_raises_aborts_its_transaction_and_the_engine_goes_on(scheduler: str,
                                                                       threads: int) -> None:
    eng = TxnEngine([StateTable("acct", keys=2, initial=5.0)], threads=threads,
                    scheduler=scheduler, udf=ledger_udf)
    limit = {"ok": 100.0, "raise": 0.0}
    out = run_events(eng, [{"k": 0, "m": "ok"}, {"k": 0, "m": "raise"}, {"k": 1, "m": "ok"}],
                     lambda e: [update("acct", e["k"], 4, limit[e["m"]]),
                                add("acct", 1 - e["k"], 1.0)])
    assert [o.committed for o in out] == [True, False, True]
    assert [o.reason for o in out] == ["", "user function raised", ""]
    assert [eng.store.value("acct", k) for k in range(2)] == [7.0, 7.0]
    eng.close()


def test_udf_programming_mistakes_are_plan_errors() -> None:
    with pytest.raises(PlanError, match="numba @njit"):
        TxnEngine([StateTable("acct", keys=2)], udf=lambda v, p: (v, True))
    eng = TxnEngine([StateTable("acct", keys=2)], udf=returns_one_value)
    with pytest.raises(PlanError, match="must return"):
        run_events(eng, [{"src": 0, "dst": 1, "amount": 1}], _fee_transfer)
    eng.close()
    plain = TxnEngine([StateTable("acct", keys=2)])
    with pytest.raises(PlanError, match="without udf"):
        run_events(plain, [{"src": 0, "dst": 1, "amount": 1}], _fee_transfer)
    plain.close()
    b = OpBatchBuilder([1, 2])
    b.add_udf([0], [0], [[1.0, 2.0]])
    with pytest.raises(PlanError, match="width"):
        b.add_udf([1], [0], [[1.0]])
    with pytest.raises(PlanError, match="add_udf"):
        OpBatchBuilder([1]).add([0], [0], 7)


def test_non_finite_parameter_rows_abort_with_operand_reason() -> None:
    eng = TxnEngine([StateTable("acct", keys=2, initial=5.0)], udf=ledger_udf)
    b = OpBatchBuilder([1, 2])
    b.add_udf([0, 1], eng.store.cells(0, [0, 1]), [[0, 1.0, np.inf], [0, 1.0, 0.0]])
    r = eng.execute(b.build())
    assert r.committed.tolist() == [False, True]
    assert r.reason.tolist() == [REASON_OPERAND, 0]
    assert out_values(eng) == [5.0, 4.0]
    out = run_events(eng, [{"k": 0}], lambda e: [update("acct", e["k"], 0, "two"), read("acct", 1)])
    assert not out[0].committed and out[0].reason.startswith("non-numeric operand")
    eng.close()


def out_values(eng: TxnEngine) -> list[float]:
    return [eng.store.value("acct", k) for k in range(2)]
