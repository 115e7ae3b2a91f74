"""Scheduling strategies: how executor threads explore the TPG, in what units, and how aborts go.

A :class:`Strategy` is MorphStream's triple::

    explore      s  structured: stages (TPG levels) separated by barriers; within a stage no
                    op depends on another, so threads never wait on single ops
                 ns non-structured: each thread walks its own ops in timestamp order and waits
                    only for the dependencies it actually has (spinning on op states)
    granularity  f  the unit is one operation; ops spread over threads by chain (LPT)
                 c  the unit is a group of operation chains: chains that depend on each other
                    in a cycle are merged (strongly connected components of the chain graph),
                    and a unit runs start to end on one thread
    abort        e  eager: a write first decides its transaction (evaluating the conditional
                    ops' inputs, LD edges), so an abort takes effect at once and nothing is undone
                 l  lazy: writes run speculatively as if every transaction commits; failed
                    conditions are collected and handled together after the pass: the failed
                    transactions are excluded, the ops whose values that changes (their
                    data-edge closure: TD successors, PD readers) roll back to BLK and are redone,
                    until exclusions and failures agree (usually one round)

Every combination executes any batch correctly (deadlock-free: each thread's work list respects a
global topological order). The decision model :func:`choose_strategy` picks one per batch from
measured TPG statistics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from splice.core.errors import PlanError
from splice.txn import _kernels as K
from splice.txn.tpg import TPG

__all__ = ["Strategy", "Explore", "Granularity", "AbortMode", "WorkOrder", "work_order",
           "choose_strategy", "executor_threads",
           "initial_executor_threads", "ALL_STRATEGIES"]

Explore = Literal["s", "ns"]
Granularity = Literal["c", "f"]
AbortMode = Literal["e", "l"]


@dataclass(frozen=True)
class Strategy:
    """One scheduling configuration (explore, granularity, abort)."""

    explore: Explore = "ns"
    granularity: Granularity = "f"
    abort: AbortMode = "l"

    def __post_init__(self) -> None:
        if self.explore not in get_args(Explore):
            raise PlanError(f"explore must be one of {get_args(Explore)}, got {self.explore!r}")
        if self.granularity not in get_args(Granularity):
            raise PlanError(f"granularity must be c or f, got {self.granularity!r}")
        if self.abort not in get_args(AbortMode):
            raise PlanError(f"abort must be e or l, got {self.abort!r}")

    @property
    def name(self) -> str:
        return f"{self.explore}-explore,{self.granularity}-schedule,{self.abort}-abort"

    @classmethod
    def parse(cls, text: str) -> Strategy:
        """Parse ``"ns-explore,f-schedule,l-abort"`` or the short ``"ns,f,l"``."""
        parts = [p.strip().split("-")[0] for p in text.split(",")]
        if len(parts) != 3:
            raise PlanError(f"strategy must be <explore>,<granularity>,<abort>, got {text!r}")
        return cls(parts[0], parts[1], parts[2])  # type: ignore[arg-type]


ALL_STRATEGIES = tuple(Strategy(e, g, a) for e in ("s", "ns") for g in ("c", "f") for a in ("e", "l"))


@dataclass
class WorkOrder:
    """Per-thread op lists: thread t runs ``work[ptr[t]:ptr[t+1]]`` (-1 = barrier)."""

    work: np.ndarray
    ptr: np.ndarray
    stages: int
    units: int
    largest_unit: int


def _ns_f(tpg: TPG, threads: int, eager: bool) -> WorkOrder:
    """Threads own contiguous runs of chains; each walks its ops in timestamp order. Without
    LD waits (lazy) and PD edges, chains are independent: walk them in memory order instead."""
    chain_len = np.bincount(tpg.chain, minlength=tpg.n_chains).astype(np.int64)
    owner = K.chain_blocks(chain_len, threads)
    largest = int(chain_len.max(initial=0))
    if not eager and tpg.src_op.shape[0] == 0:
        n = tpg.pred.shape[0]
        ptr = np.zeros(threads + 1, np.int64)
        np.cumsum(np.bincount(owner, weights=chain_len, minlength=threads).astype(np.int64),
                  out=ptr[1:])
        return WorkOrder(np.arange(n, dtype=np.int64), ptr, 0, tpg.n_chains, largest)
    work, ptr = K.group_by_owner(tpg.proc, K.chain_owner_ops(tpg.proc, tpg.chain, owner), threads)
    return WorkOrder(work, ptr, 0, tpg.n_chains, largest)


def _s_f(tpg: TPG, threads: int, eager: bool) -> WorkOrder:
    level, top = K.op_levels(tpg.proc, tpg.pred, tpg.kind, tpg.txn, tpg.src_ptr, tpg.src_op,
                             tpg.chk_ptr, tpg.chk_op, eager)
    o = np.argsort(level[tpg.proc], kind="stable")
    seq = tpg.proc[o]
    stage = level[seq]
    thread = K.split_stages(stage, threads)
    work, ptr = K.staged_work(seq, thread, stage, int(top), threads)
    return WorkOrder(work, ptr, int(top), int(seq.shape[0]), 1)


def _units(tpg: TPG, eager: bool) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """Chain -> unit (SCCs of the chain graph merged); unit rank (topological) and level."""
    a, b = K.chain_edges(tpg.pred, tpg.chain, tpg.kind, tpg.txn, tpg.src_ptr, tpg.src_op,
                         tpg.chk_ptr, tpg.chk_op, eager)
    nc = tpg.n_chains
    if a.shape[0]:
        e = np.unique(a * nc + b)
        a, b = e // nc, e % nc
    ptr = np.zeros(nc + 1, np.int64)
    np.cumsum(np.bincount(a, minlength=nc), out=ptr[1:])
    comp, ncomp = K.strongly_connected(nc, ptr, b)  # a sorted, so b is the CSR adjacency
    rank = (ncomp - 1) - comp  # Tarjan numbers SCCs in reverse topological order
    ua, ub = rank[a], rank[b]
    m = ua != ub
    if m.any():
        e = np.unique(ua[m] * ncomp + ub[m])
        ua, ub = e // ncomp, e % ncomp
    else:
        ua, ub = ua[:0], ub[:0]
    ulevel = K.dag_levels(int(ncomp), ua, ub)
    return rank, int(ncomp), ulevel, np.bincount(rank[tpg.chain], minlength=ncomp)


def _c(tpg: TPG, threads: int, eager: bool, structured: bool) -> WorkOrder:
    chain_unit, nunits, ulevel, usize = _units(tpg, eager)
    usize = usize.astype(np.int64)
    op_unit = chain_unit[tpg.chain[tpg.proc]]
    largest = int(usize.max(initial=0))
    if not structured:
        owner = K.lpt_assign(usize, np.argsort(-usize, kind="stable"), threads)
        o = np.lexsort((op_unit, owner[op_unit]))  # stable: timestamp order within a unit
        op_owner = owner[op_unit]
        ptr = np.zeros(threads + 1, np.int64)
        np.cumsum(np.bincount(op_owner, minlength=threads), out=ptr[1:])
        return WorkOrder(tpg.proc[o], ptr, 0, nunits, largest)
    # structured: one stage per unit level, units of a level spread over threads (LPT per level)
    uorder = np.lexsort((-usize, ulevel))
    owner = np.empty(nunits, np.int64)
    lv = ulevel[uorder]
    bounds = np.flatnonzero(np.diff(lv)) + 1
    for grp in np.split(uorder, bounds):
        owner[grp] = K.lpt_assign(usize, grp, threads)[grp]
    o = np.lexsort((op_unit, ulevel[op_unit]))
    seq = tpg.proc[o]
    stage = ulevel[op_unit[o]]
    top = int(ulevel.max(initial=-1)) + 1
    work, ptr = K.staged_work(seq, owner[op_unit[o]], stage, top, threads)
    return WorkOrder(work, ptr, top, nunits, largest)


def work_order(tpg: TPG, strategy: Strategy, threads: int) -> WorkOrder:
    """Per-thread work lists for ``strategy`` (levels and units use LD edges only when eager)."""
    eager = strategy.abort == "e"
    if strategy.granularity == "f":
        return _s_f(tpg, threads, eager) if strategy.explore == "s" else _ns_f(tpg, threads, eager)
    return _c(tpg, threads, eager, strategy.explore == "s")


def choose_strategy(
    stats: dict[str, float], threads: int, complexity_us: float, abort_ratio: float
) -> Strategy:
    """The decision model: a strategy for the next batch from measured statistics.

    The rules follow MorphStream's decision tree, with thresholds set from this engine's own
    measurements (``benchmarks/txn_dynamic.py``; docs/benchmarks.md, "Transactions", and
    docs/lab/transactions.md). Operations are *heavy* when ``complexity_us`` (the declared work
    per operation) is at least 5: then execution, not scheduling, dominates an operation's cost.

    * abort: ``l`` (speculate, then redo what the failed transactions' exclusion changes) unless
      aborts are frequent (an abort ratio of at least 2 % over recent batches) *and* operations
      are heavy: then ``e``, since a redo repeats the heavy work. With cheap operations the redo
      costs less than eager waits on other threads at every abort ratio measured
      (docs/lab/transactions.md, "The dynamic workload before executor threads per batch"), as
      in MorphStream's Figure 20 (l-abort for high abort ratios at low complexity).
    * explore: ``ns`` by default: barriers cost most where threads are descheduled or chains are
      long (skew: many levels), and on shared 2-core machines ``ns`` won every configuration
      measured (docs/lab/transactions.md, "Every strategy on Streaming Ledger"). ``s`` only for
      heavy operations on very wide, flat TPGs (ops per longest chain >= 256 x threads, degree
      skew < 4), where one barrier per level is amortised over many independent heavy ops.
    * granularity: ``f``, except with no cross-chain dependencies at all (no LD checks, no PD
      reads) and heavy operations, where chains are the natural unit (``c``).
    """
    heavy = complexity_us >= 5.0
    abort: AbortMode = "e" if abort_ratio >= 0.02 and heavy else "l"
    if threads <= 1:
        return _BY_PARTS[("ns", "f", abort)]
    ops = max(stats["ops"], 1.0)
    width = ops / max(stats["max_chain"], 1.0)
    wide = width >= 256 * threads and stats["degree_skew"] < 4
    explore: Explore = "s" if heavy and wide else "ns"
    coupled = stats["checks"] + stats["pd"] > 0
    granularity: Granularity = "c" if heavy and not coupled else "f"
    return _BY_PARTS[(explore, granularity, abort)]


#: The strategies by their parts: the model runs once per batch and returns one of these.
_BY_PARTS = {(s.explore, s.granularity, s.abort): s for s in ALL_STRATEGIES}


def initial_executor_threads(most: int, cores: int, complexity_us: float) -> int:
    """Executor threads for ``auto``'s first pipelined batch: all of them for heavy operations
    (``complexity_us >= 5``, execution dominates), otherwise as many as leave the driver thread a
    core of its own (construction runs beside execution); :func:`executor_threads` adapts it from
    there."""
    if complexity_us >= 5.0:
        return most
    return max(1, min(most, cores - 1))


def executor_threads(current: int, most: int, waited_s: float, exec_s: float) -> int:
    """How many executor threads ``auto`` gives the next batch of a pipelined run.

    While batch k executes, the driver thread constructs batch k+1 (decomposition, TPG). When the
    driver then hardly waits for batch k (``waited_s`` under a tenth of its execution time
    ``exec_s``), construction is the bottleneck: every executor thread beyond what keeps up only
    spins on dependencies and takes a core from the driver when cores are short (2 executor
    threads and the driver on 2 cores), so one thread fewer. When the driver waits for more than
    a third of the execution, execution is the bottleneck: one thread more, up to ``most``.
    """
    if exec_s <= 0.0:
        return current
    if waited_s < 0.1 * exec_s and current > 1:
        return current - 1
    if waited_s > exec_s / 3 and current < most:
        return current + 1
    return current
