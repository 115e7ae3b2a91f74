"""Every scheduler, baseline and thread count equals serial execution in timestamp order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.txn import txn_executor as executor
from splice.txn.scheduler import ALL_STRATEGIES
from splice.txn.state_tables import StateTable
from splice.txn.txn_engine import TxnEngine
from tests.txn.reference import SerialReference
from tests.txn.workload import assert_matches_reference

SCHEDULERS = ["serial", "sstore", "tstream", "auto"] + [s.name for s in ALL_STRATEGIES]
TABLES = [StateTable("a", keys=8, initial=10.0, history=1000),
          StateTable("b", keys=8, initial=0.0, history=1000)]


def _check(scheduler: str, threads: int, seed: int, keys: int, skew: float, abort_bias: float,
           n_txn: int, batches: int) -> None:
    eng = TxnEngine(TABLES, threads=threads, scheduler=scheduler)
    ref = SerialReference({0: 10.0, 1: 0.0})
    assert_matches_reference(eng, ref, np.random.default_rng(seed), batches, n_txn, keys, skew, abort_bias)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("threads", [1, 2, 3])
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31), keys=st.integers(1, 8), skew=st.sampled_from([0.0, 1.0, 2.0]),
       abort_bias=st.sampled_from([0.0, 0.3, 0.8]), n_txn=st.integers(0, 40))
def test_equals_serial_reference(scheduler: str, threads: int, seed: int, keys: int, skew: float,
                                 abort_bias: float, n_txn: int) -> None:
    _check(scheduler, threads, seed, keys, skew, abort_bias, n_txn, batches=2)


@pytest.mark.parametrize("full_redo_share", [0, 10**9])
@pytest.mark.parametrize("threads", [1, 2])
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31), keys=st.integers(1, 8), abort_bias=st.sampled_from([0.3, 0.8]),
       n_txn=st.integers(1, 40))
def test_lazy_abort_redo_paths_equal_serial(full_redo_share: int, threads: int, seed: int,
                                            keys: int, abort_bias: float, n_txn: int) -> None:
    """Lazy abort's two redo paths, pinned: always the data-edge closure (share 0) and always a
    whole-batch pass (any changed exclusion)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(executor, "FULL_REDO_SHARE", full_redo_share)
        _check("ns,f,l", threads, seed, keys, 1.0, abort_bias, n_txn, batches=3)
