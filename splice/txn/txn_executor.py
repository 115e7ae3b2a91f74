"""Executor threads: run a TPG under a strategy, and the baselines (serial, S-Store, TStream).

Each executor returns an :class:`Execution`: per-transaction commit flags, per-op results, the
final value of every touched cell and the committed versions, plus the time breakdown MorphStream
uses (useful, sync, lock, construct, explore, abort), in seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from splice.kernels.team import ThreadTeam
from splice.txn import _kernels as K
from splice.txn.ops import WINDOW_READ, OpBatch, is_write_kind
from splice.txn.scheduler import Strategy, WorkOrder, work_order
from splice.txn.state_tables import StateStore
from splice.txn.tpg import TPG, op_columns

__all__ = ["Execution", "run_tpg", "run_serial", "run_sstore", "run_tstream",
           "prepare_sstore", "exec_sstore", "SStorePrep",
           "cycles_per_second", "busy_iters_for"]


def _calibrate_cycles() -> float:
    from numba import njit

    from splice.kernels.atomics import cycle_counter

    @njit(nogil=True)
    def _read() -> int:
        return cycle_counter()

    _read()
    t0, c0 = time.perf_counter(), _read()
    time.sleep(0.02)
    t1, c1 = time.perf_counter(), _read()
    return max((c1 - c0) / (t1 - t0), 1.0)


_CPS: float | None = None
_ITERS_PER_US: float | None = None


def cycles_per_second() -> float:
    """Cycle-counter ticks per second (measured once)."""
    global _CPS
    if _CPS is None:
        _CPS = _calibrate_cycles()
    return _CPS


def busy_iters_for(complexity_us: float) -> int:
    """Iterations of :func:`~splice.txn._kernels.busy_work` that take ``complexity_us``."""
    global _ITERS_PER_US
    if complexity_us <= 0:
        return 0
    if _ITERS_PER_US is None:
        K.busy_work(10, 1.0)
        n = 2_000_000
        t0 = time.perf_counter()
        K.busy_work(n, 1.0)
        _ITERS_PER_US = n / max((time.perf_counter() - t0) * 1e6, 1e-9)
    return max(1, int(round(complexity_us * _ITERS_PER_US)))


@dataclass
class Execution:
    """What a batch's execution produced (transactions in batch order)."""

    committed: np.ndarray            # bool per transaction
    op_result: np.ndarray            # float per OpBatch op (NaN for refused transactions)
    cells: np.ndarray                # touched global cells
    final: np.ndarray                # their values after the batch
    version_cell: np.ndarray         # committed writes, for the version log
    version_ts: np.ndarray
    version_value: np.ndarray
    times: dict[str, float] = field(default_factory=dict)
    op_state: np.ndarray | None = None  # per TPG op: EXE (2) or ABT (3) once resolved
    udf_raised: np.ndarray | None = None  # per transaction: a user function raised
    memory_bytes: int = 0
    info: dict[str, Any] = field(default_factory=dict)


class _Run:
    """Arrays one TPG execution mutates."""

    def __init__(self, tpg: TPG) -> None:
        n = tpg.pred.shape[0]
        self.state = np.zeros(n, np.int64)
        self.before = np.zeros(n, np.float64)
        self.after = np.zeros(n, np.float64)
        self.result = np.zeros(n, np.float64)
        self.failed = np.zeros(n, np.bool_)
        self.raised = np.zeros(n, np.bool_)
        self.excluded = np.zeros(tpg.n_txn, np.bool_)

    def go(self, team: ThreadTeam, tpg: TPG, wo: WorkOrder, eager: bool, skip_done: bool,
           busy: int, udf: Any, udf_params: np.ndarray) -> tuple[float, float]:
        bar = np.zeros(1, np.int64)
        graph = tpg.kernel_arrays()
        run = K.RunArrays(self.state, self.before, self.after, self.result, self.failed, self.raised,
                          self.excluded)
        mode = K.RunMode(bool(eager), bool(skip_done), int(busy))

        def one(t: int) -> tuple[int, int, float]:
            return K.executors(udf)[0](wo.work, int(wo.ptr[t]), int(wo.ptr[t + 1]), team.threads, bar,
                                       graph, run, mode, udf, udf_params)

        res = team.run(one)
        cps = cycles_per_second()
        sync = sum(r[0] for r in res) / cps / team.threads
        barrier = sum(r[1] for r in res) / cps / team.threads
        return sync, barrier


def _txn_failed(tpg: TPG, failed: np.ndarray) -> np.ndarray:
    return K.txn_failures(tpg.txn, failed, tpg.n_txn)


def _finish(tpg: TPG, run: _Run, committed_valid: np.ndarray, batch: OpBatch,
            refused: np.ndarray, history: bool) -> Execution:
    committed = committed_valid & ~refused
    if refused.any():
        ok = tpg.user_pos >= 0
        op_result = np.full(tpg.user_pos.shape[0], np.nan)
        op_result[ok] = run.result[tpg.user_pos[ok]]
    else:
        op_result = run.result[tpg.user_pos]
    final = K.chain_finals(tpg.chain, run.after, tpg.n_chains)
    ex = Execution(committed=committed, op_result=op_result, cells=tpg.cells, final=final,
                   version_cell=_EMPTY_I, version_ts=_EMPTY_I, version_value=_EMPTY_F,
                   op_state=run.state)
    ex.udf_raised = K.txn_failures(tpg.txn, run.raised, tpg.n_txn)
    if history:
        wmask = is_write_kind(tpg.kind) & committed[tpg.txn]
        ex.version_cell = tpg.cells[tpg.cell[wmask]]
        ex.version_ts = tpg.ts[wmask]
        ex.version_value = run.after[wmask]
    return ex


_EMPTY_I = np.zeros(0, np.int64)
_EMPTY_F = np.zeros(0, np.float64)

#: Lazy abort redoes the whole batch (instead of the data-edge closure of the changed
#: exclusions) once more than one transaction in ``FULL_REDO_SHARE`` changes its exclusion.
FULL_REDO_SHARE = 4


def run_tpg(batch: OpBatch, refused: np.ndarray, tpg: TPG, strategy: Strategy,
            team: ThreadTeam, busy: int, history: bool = True, udf: Any = None) -> Execution:
    """Execute ``tpg`` under ``strategy`` on ``team`` (exact: equals serial execution)."""
    t0 = time.perf_counter()
    eager = strategy.abort == "e"
    wo = work_order(tpg, strategy, team.threads)
    t1 = time.perf_counter()
    run = _Run(tpg)
    sync, barrier = run.go(team, tpg, wo, eager, False, busy, udf, batch.udf_params)
    t2 = time.perf_counter()
    abort_time = 0.0
    redo_ops = 0
    rounds = 0
    if not eager:
        # lazy abort: exclude the transactions that failed and redo only what that changes
        # (data-edge closure); repeat until exclusions and failures agree. After a pass under
        # exclusion set X, the first transaction whose outcome disagrees with X is decided
        # correctly, as is everything before it, so each round settles at least one more.
        while True:
            fails = _txn_failed(tpg, run.failed)
            bad = np.flatnonzero(fails != run.excluded)
            if bad.shape[0] == 0:
                break
            first = int(bad[0])
            new = run.excluded.copy()
            new[first:] = fails[first:]
            changed = new != run.excluded
            if int(np.count_nonzero(changed)) * FULL_REDO_SHARE > tpg.n_txn:
                # so many exclusions change that nearly every later op depends on one: a
                # fresh pass is cheaper than finding the few it could skip
                run = _reset(run, tpg, new)
                redo_ops += tpg.pred.shape[0]
                skip = False
            else:
                redo_ops += K.reset_closure(tpg.proc, tpg.pred, tpg.txn, tpg.src_ptr, tpg.src_op,
                                            changed, first, tpg.txn_ptr, run.state, run.failed,
                                            run.raised)
                run.excluded = new
                skip = True
            s2, b2 = run.go(team, tpg, wo, False, skip, busy, udf, batch.udf_params)
            sync += s2
            barrier += b2
            rounds += 1
        abort_time = time.perf_counter() - t2
        committed = ~run.excluded
    else:
        committed = ~_txn_failed(tpg, run.failed)
    ex = _finish(tpg, run, committed, batch, refused, history)
    exec_time = t2 - t1
    ex.times = {
        "explore": (t1 - t0) + barrier,
        "sync": sync,
        "lock": 0.0,
        "abort": abort_time,
        "useful": max(exec_time - sync - barrier, 0.0),
    }
    ex.memory_bytes = tpg.nbytes() + wo.work.nbytes + 5 * tpg.pred.shape[0] * 8
    ex.info = {"stages": wo.stages, "units": wo.units, "largest_unit": wo.largest_unit,
               "redo_ops": redo_ops, "redo_rounds": rounds}
    return ex


def run_tstream(batch: OpBatch, refused: np.ndarray, tpg: TPG, team: ThreadTeam,
                busy: int, history: bool = True, udf: Any = None) -> Execution:
    """TStream-like: operation chains per key run in parallel (PD waits only); when any
    transaction fails, the whole batch is redone with the aborted transactions excluded.

    Exactness: after a pass under exclusion set X, the first transaction whose outcome disagrees
    with X (fails but not excluded, or excluded but passes) is decided correctly, as is
    everything before it; X is corrected there and refilled with the pass's failures after it.
    Each redo settles at least one more transaction.
    """
    t0 = time.perf_counter()
    wo = work_order(tpg, Strategy("ns", "f", "l"), team.threads)
    t1 = time.perf_counter()
    run = _Run(tpg)
    sync, _ = run.go(team, tpg, wo, False, False, busy, udf, batch.udf_params)
    t2 = time.perf_counter()
    rounds = 0
    while True:
        fails = _txn_failed(tpg, run.failed)
        bad = np.flatnonzero(fails != run.excluded)
        if bad.shape[0] == 0:
            break
        first = int(bad[0])
        new = run.excluded.copy()
        new[first] = fails[first]
        new[first + 1:] = fails[first + 1:]
        run = _reset(run, tpg, new)
        s, _ = run.go(team, tpg, wo, False, False, busy, udf, batch.udf_params)
        sync += s
        rounds += 1
    t3 = time.perf_counter()
    committed = ~run.excluded
    ex = _finish(tpg, run, committed, batch, refused, history)
    first_pass = t2 - t1
    ex.times = {"construct": 0.0, "explore": t1 - t0, "sync": sync, "lock": 0.0,
                "abort": t3 - t2, "useful": max(first_pass - sync, 0.0)}
    ex.memory_bytes = tpg.nbytes() + wo.work.nbytes + 5 * tpg.pred.shape[0] * 8
    ex.info = {"redo_rounds": rounds}
    return ex


def _reset(run: _Run, tpg: TPG, excluded: np.ndarray) -> _Run:
    fresh = _Run(tpg)
    fresh.excluded = excluded
    return fresh


@dataclass
class _Dense:
    cells: np.ndarray
    cell: np.ndarray
    src_cell: np.ndarray
    txn_ptr: np.ndarray
    hist: np.ndarray


def _window_hist(batch: OpBatch, d: _Dense, store: StateStore) -> None:
    win = np.flatnonzero(batch.op_kind == WINDOW_READ)
    if win.shape[0]:
        ts = batch.txn_ts[batch.op_txn[win]]
        d.hist[win] = store.window_sums(batch.op_cell[win],
                                        ts - batch.op_operand[win].astype(np.int64))


def _dense(batch: OpBatch, store: StateStore | None) -> _Dense:
    allc = np.concatenate([batch.op_cell, batch.src_cell])
    cells, inv = np.unique(allc, return_inverse=True)
    inv = inv.astype(np.int64).reshape(-1)
    n = batch.num_ops
    txn_ptr = np.zeros(batch.num_txns + 1, np.int64)
    np.cumsum(np.bincount(batch.op_txn, minlength=batch.num_txns), out=txn_ptr[1:])
    d = _Dense(cells, inv[:n], inv[n:], txn_ptr, np.zeros(n, np.float64))
    if store is not None:
        _window_hist(batch, d, store)
    return d


def _serial_arrays(batch: OpBatch, d: _Dense, store: StateStore) -> K.SerialState:
    n = batch.num_ops
    return K.SerialState(
        cur=store.gather(d.cells), last=np.full(d.cells.shape[0], -1, np.int64),
        vprev=np.full(n, -1, np.int64), vts=np.zeros(n, np.int64), vval=np.zeros(n, np.float64),
        committed=np.zeros(batch.num_txns, np.bool_), result=np.full(n, np.nan),
        raised=np.zeros(n, np.bool_))


def _serial_columns(batch: OpBatch, d: _Dense, refused: np.ndarray) -> tuple[K.OpColumns, K.TxnColumns]:
    """The batch's operations on its gathered cells and its transactions, as the serial
    executors take them."""
    return op_columns(batch, d.cell, d.src_cell), K.TxnColumns(d.txn_ptr, batch.txn_ts, refused)


def _serial_finish(batch: OpBatch, d: _Dense, refused: np.ndarray, st: K.SerialState) -> Execution:
    cur, committed, result, raised = st.cur, st.committed, st.result, st.raised
    committed = committed & ~refused
    wmask = is_write_kind(batch.op_kind) & committed[batch.op_txn]
    result = np.where(refused[batch.op_txn], np.nan, result)
    ex = Execution(
        committed=committed, op_result=result, cells=d.cells, final=cur,
        version_cell=batch.op_cell[wmask], version_ts=batch.txn_ts[batch.op_txn[wmask]],
        version_value=result[wmask],
    )
    ex.udf_raised = K.txn_failures(batch.op_txn, raised, batch.num_txns)
    return ex


def run_serial(batch: OpBatch, refused: np.ndarray, store: StateStore, busy: int,
               udf: Any = None) -> Execution:
    """One thread, transactions in timestamp order: the reference and the single-core limit."""
    t0 = time.perf_counter()
    d = _dense(batch, store)
    st = _serial_arrays(batch, d, store)
    ops, txns = _serial_columns(batch, d, refused)
    t1 = time.perf_counter()
    K.executors(udf)[1](ops, txns, d.hist, st, 0, batch.num_txns, busy, udf, batch.udf_params)
    t2 = time.perf_counter()
    ex = _serial_finish(batch, d, refused, st)
    ex.times = {"construct": t1 - t0, "explore": 0.0, "sync": 0.0, "lock": 0.0, "abort": 0.0,
                "useful": t2 - t1}
    ex.memory_bytes = batch.nbytes() + 4 * batch.num_ops * 8
    return ex


@dataclass
class SStorePrep:
    """S-Store-like plan of a batch: dense cells and each transaction's partition (-1: many)."""

    batch: OpBatch
    refused: np.ndarray
    dense: _Dense
    txn_part: np.ndarray
    construct: float


def prepare_sstore(batch: OpBatch, refused: np.ndarray, threads: int) -> SStorePrep:
    """Partition cells by hash over ``threads`` and tag transactions (state not read yet)."""
    t0 = time.perf_counter()
    d = _dense(batch, None)
    T = threads
    part_op = (d.cells * np.int64(-7046029254386353131) >> np.int64(33)) % T
    pmin = np.full(batch.num_txns, T, np.int64)
    pmax = np.full(batch.num_txns, -1, np.int64)
    np.minimum.at(pmin, batch.op_txn, part_op[d.cell])
    np.maximum.at(pmax, batch.op_txn, part_op[d.cell])
    if d.src_cell.shape[0]:
        stx = np.repeat(batch.op_txn, batch.src_ptr[1:] - batch.src_ptr[:-1])
        np.minimum.at(pmin, stx, part_op[d.src_cell])
        np.maximum.at(pmax, stx, part_op[d.src_cell])
    txn_part = np.where(pmin == pmax, pmin, -1)
    txn_part = np.where(pmax < 0, 0, txn_part)
    return SStorePrep(batch, refused, d, txn_part, time.perf_counter() - t0)


def exec_sstore(prep: SStorePrep, store: StateStore, team: ThreadTeam, busy: int,
                udf: Any = None) -> Any:
    """Read the state the batch starts from; return a callable that runs it (any thread)."""
    batch, refused, d, txn_part = prep.batch, prep.refused, prep.dense, prep.txn_part
    _window_hist(batch, d, store)
    st = _serial_arrays(batch, d, store)
    ops, txns = _serial_columns(batch, d, refused)
    T = team.threads

    def go() -> Execution:
        bar = np.zeros(1, np.int64)
        t1 = time.perf_counter()

        def one(t: int) -> tuple[int, float]:
            return K.executors(udf)[2](t, T, bar, txn_part, ops, txns, d.hist, st, busy, udf,
                                       batch.udf_params)

        res = team.run(one)
        t2 = time.perf_counter()
        lock = sum(r[0] for r in res) / cycles_per_second() / T
        ex = _serial_finish(batch, d, refused, st)
        ex.times = {"construct": prep.construct, "explore": 0.0, "sync": 0.0, "lock": lock,
                    "abort": 0.0, "useful": max(t2 - t1 - lock, 0.0)}
        ex.memory_bytes = batch.nbytes() + 4 * batch.num_ops * 8 + txn_part.nbytes
        ex.info = {"multi_partition": int(np.count_nonzero(txn_part == -1))}
        return ex

    return go


def run_sstore(batch: OpBatch, refused: np.ndarray, store: StateStore, team: ThreadTeam,
               busy: int, udf: Any = None) -> Execution:
    """S-Store-like: cells hash-partitioned over threads, one partition lock per thread;
    single-partition transactions run in parallel, multi-partition ones take every lock."""
    result: Execution = exec_sstore(prepare_sstore(batch, refused, team.threads), store, team,
                                    busy, udf)()
    return result
