"""TPG structure (TD/PD/LD), the op state machine, strategy parsing and the decision model."""

from __future__ import annotations

import numpy as np
import pytest

from splice.core.errors import PlanError
from splice.kernels.team import ThreadTeam
from splice.txn import (
    ABT,
    ADD,
    COND_GE,
    EXE,
    READ,
    SUM_WRITE,
    OpBatchBuilder,
    StateTable,
    Strategy,
    TxnEngine,
    choose_strategy,
)
from splice.txn.scheduler import (
    ALL_STRATEGIES,
    executor_threads,
    initial_executor_threads,
    work_order,
)
from splice.txn.tpg import build_tpg, tpg_stats
from splice.txn.txn_executor import run_tpg


def _batch(eng: TxnEngine):  # type: ignore[no-untyped-def]
    c = eng.store.cells(0, [0, 1, 2])
    b = OpBatchBuilder([1, 2, 3])
    # t0: transfer 0 -> 1 (conditional); t1: sum of 0 and 1 into 2; t2: impossible debit of 2
    b.add([0, 0], [c[0], c[1]], ADD, [-5.0, 5.0], [COND_GE, 0], [5.0, 0.0])
    b.add([1], [c[2]], SUM_WRITE, 0.0, sources=[[c[0], c[1]]])
    b.add([2, 2], [c[2], c[0]], [ADD, READ], [-1.0, 0.0], [COND_GE, 0], [1e9, 0.0])
    return b.build()


def test_tpg_links_chains_sources_and_checks() -> None:
    eng = TxnEngine([StateTable("a", keys=3, initial=10.0)])
    tpg = build_tpg(_batch(eng), np.zeros(3, bool), eng.store)
    # ops: 5 user ops + 2 PD reads; chains for cells 0, 1, 2
    assert tpg.pred.shape[0] == 7 and tpg.n_chains == 3
    # chain of cell 0: t0's add, t1's PD read, t2's read, in timestamp order
    chain0 = np.flatnonzero(tpg.chain == tpg.chain[tpg.user_pos[0]])
    assert tpg.txn[chain0].tolist() == [0, 1, 2]
    assert tpg.pred[chain0].tolist() == [-1, chain0[0], chain0[1]]
    # the SUM_WRITE depends on two reads of t1 (PD)
    sw = tpg.user_pos[2]
    assert tpg.kind[sw] == SUM_WRITE
    srcs = tpg.src_op[tpg.src_ptr[sw]:tpg.src_ptr[sw + 1]]
    assert sorted(tpg.txn[srcs].tolist()) == [1, 1] and (tpg.kind[srcs] == READ).all()
    # LD: conditional ops per transaction
    assert (tpg.chk_ptr[1:] - tpg.chk_ptr[:-1]).tolist() == [1, 0, 1]
    st = tpg_stats(tpg)
    assert st["td"] == 4 and st["pd"] == 2 and st["checks"] == 2


@pytest.mark.parametrize("strategy", ALL_STRATEGIES, ids=lambda s: s.name)
@pytest.mark.parametrize("threads", [1, 2])
def test_state_machine_ends_in_exe_or_abt(strategy: Strategy, threads: int) -> None:
    eng = TxnEngine([StateTable("a", keys=3, initial=10.0)])
    batch = _batch(eng)
    refused = np.zeros(3, bool)
    tpg = build_tpg(batch, refused, eng.store)
    team = ThreadTeam(threads)
    ex = run_tpg(batch, refused, tpg, strategy, team, 0)
    team.close()
    assert ex.committed.tolist() == [True, True, False]
    assert ex.op_state is not None and set(ex.op_state.tolist()) <= {EXE, ABT}
    writes_of_aborted = (tpg.txn == 2) & (tpg.kind == ADD)
    assert (ex.op_state[writes_of_aborted] == ABT).all()
    assert ex.op_result[2] == 20.0  # 5 + 15 after the transfer


def test_work_orders_cover_every_op_once() -> None:
    eng = TxnEngine([StateTable("a", keys=3, initial=10.0)])
    tpg = build_tpg(_batch(eng), np.zeros(3, bool), eng.store)
    for s in ALL_STRATEGIES:
        for threads in (1, 2, 3):
            wo = work_order(tpg, s, threads)
            ops = wo.work[wo.work >= 0]
            assert sorted(ops.tolist()) == list(range(tpg.pred.shape[0])), s.name
            barriers = [int((wo.work[wo.ptr[t]:wo.ptr[t + 1]] < 0).sum()) for t in range(threads)]
            assert len(set(barriers)) == 1  # every thread meets every barrier


def test_strategy_parsing() -> None:
    assert Strategy.parse("ns-explore,f-schedule,l-abort") == Strategy("ns", "f", "l")
    assert Strategy.parse("s,c,e").name == "s-explore,c-schedule,e-abort"
    for bad in ("x,f,l", "s,f", "s,q,l", "s,f,z"):
        with pytest.raises(PlanError):
            Strategy.parse(bad)


def test_decision_model_follows_statistics() -> None:
    flat = {"ops": 30000.0, "chains": 20000.0, "td": 10000.0, "pd": 0.0, "ld": 0.0,
            "sum_ops": 0.0, "checks": 0.0, "max_chain": 4.0, "mean_chain": 1.5,
            "degree_skew": 2.7}
    skewed = dict(flat, max_chain=8000.0, degree_skew=5000.0)
    coupled = dict(flat, ld=25000.0, pd=5000.0, checks=100.0)
    assert choose_strategy(flat, 2, 0.0, 0.0).abort == "l"
    assert choose_strategy(flat, 2, 0.0, 0.3).abort == "l"
    assert choose_strategy(flat, 2, 10.0, 0.3).abort == "e"
    assert choose_strategy(flat, 1, 10.0, 0.3) == Strategy("ns", "f", "e")
    assert choose_strategy(skewed, 2, 10.0, 0.0).explore == "ns"
    assert choose_strategy(flat, 2, 10.0, 0.0) == Strategy("s", "c", "l")
    assert choose_strategy(flat, 2, 0.0, 0.0).explore == "ns"
    assert choose_strategy(coupled, 2, 10.0, 0.0).granularity == "f"
    assert choose_strategy(flat, 1, 0.0, 0.0) == Strategy("ns", "f", "l")


def test_executor_threads_follow_the_pipeline_bottleneck() -> None:
    # the driver hardly waited: construction is the bottleneck, one thread fewer (not below 1)
    assert executor_threads(2, 2, 0.0001, 0.003) == 1
    assert executor_threads(1, 2, 0.0, 0.003) == 1
    # the driver waited for most of the execution: one thread more (not above the most)
    assert executor_threads(1, 4, 0.002, 0.003) == 2
    assert executor_threads(4, 4, 0.002, 0.003) == 4
    # in between, or nothing measured: unchanged
    assert executor_threads(2, 4, 0.0005, 0.003) == 2
    assert executor_threads(3, 4, 0.5, 0.0) == 3
    assert initial_executor_threads(2, 2, 0.0) == 1
    assert initial_executor_threads(2, 2, 10.0) == 2
    assert initial_executor_threads(8, 16, 0.0) == 8
    assert initial_executor_threads(16, 16, 0.0) == 15
    assert initial_executor_threads(4, 1, 0.0) == 1


def test_a_team_of_fewer_threads_shares_the_pool() -> None:
    team = ThreadTeam(3)
    two = team.using(2)
    assert two.threads == 2 and team.using(5) is team
    assert sorted(two.run(lambda t: t)) == [0, 1]
    two.close()  # a view: the team's pool keeps serving
    assert sorted(team.run(lambda t: t)) == [0, 1, 2]
    team.close()
