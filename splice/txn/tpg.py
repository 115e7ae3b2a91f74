"""The task precedence graph (TPG) of one batch, built with sorts instead of per-op objects.

Vertices are operations; edges are MorphStream's three dependencies:

* **TD** (temporal): consecutive operations on one cell, in timestamp order. Sorting operations
  by (cell, transaction, reads first) makes each cell's *operation chain* a contiguous run; an
  op's TD predecessor is the previous row of its run (``pred``, -1 at the head).
* **PD** (parametric): a ``SUM_*`` write reads other cells at its timestamp. Each source becomes
  a ``READ`` op placed in the source cell's chain; the write depends on those reads (``src_op``).
* **LD** (logical): the operations of one transaction commit or abort together. A write depends
  on the TD predecessors of its transaction's conditional operations (``chk_op``), whose
  conditions decide commit.

Everything is an int64 array; chains and levels come from numba passes over ops in timestamp
order (``proc``), in which every dependency precedes its dependents.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from splice.txn import _kernels as K
from splice.txn.ops import SUM_ADD, SUM_WRITE, WINDOW_READ, OpBatch
from splice.txn.state_tables import StateStore

__all__ = ["TPG", "build_tpg", "refresh_tpg", "tpg_stats", "op_columns"]


@dataclass
class TPG:
    """Operation arrays sorted by chain, plus the indexes the executors need."""

    n_txn: int
    txn_ts: np.ndarray
    cell: np.ndarray        # dense cell id == chain id
    cells: np.ndarray       # chain id -> global cell
    init: np.ndarray        # chain id -> value before the batch
    pred: np.ndarray
    chain: np.ndarray
    n_chains: int
    kind: np.ndarray
    operand: np.ndarray
    cond: np.ndarray
    cond_arg: np.ndarray
    txn: np.ndarray
    ts: np.ndarray
    src_ptr: np.ndarray
    src_op: np.ndarray
    chk_ptr: np.ndarray
    chk_op: np.ndarray
    proc: np.ndarray        # ops in timestamp order (txn, reads first)
    txn_ptr: np.ndarray     # proc[txn_ptr[t]:txn_ptr[t+1]] are transaction t's ops
    user_pos: np.ndarray    # OpBatch op index -> position here (-1: refused)
    hist: np.ndarray        # window reads: sum of logged versions in the window

    def kernel_arrays(self) -> K.TPGArrays:
        """The arrays the executors read (built per execution pass: :func:`refresh_tpg` replaces
        ``init``)."""
        return K.TPGArrays(self.pred, self.chain, self.init, self.kind, self.operand, self.cond,
                           self.cond_arg, self.ts, self.txn, self.src_ptr, self.src_op, self.chk_ptr,
                           self.chk_op, self.hist)

    def nbytes(self) -> int:
        return int(sum(v.nbytes for v in vars(self).values() if isinstance(v, np.ndarray)))


def op_columns(batch: OpBatch, cell: np.ndarray | None = None, src_cell: np.ndarray | None = None
               ) -> K.OpColumns:
    """``batch``'s operations as the kernels take them; ``cell``/``src_cell`` replace the store
    cell ids (the serial executors' indexes among the batch's gathered cells)."""
    return K.OpColumns(batch.op_txn, batch.op_cell if cell is None else cell, batch.op_kind,
                       batch.op_operand, batch.op_cond, batch.op_cond_arg, batch.src_ptr,
                       batch.src_cell if src_cell is None else src_cell)


def build_tpg(batch: OpBatch, refused: np.ndarray, store: StateStore) -> TPG:
    """Decompose ``batch`` (minus ``refused`` transactions) into ops and link them."""
    txn_ptr_u = np.zeros(batch.num_txns + 1, np.int64)
    np.cumsum(np.bincount(batch.op_txn, minlength=batch.num_txns), out=txn_ptr_u[1:])
    (pos, chain, pred, nch, cells, init, kind, operand, cond, cond_arg, txn, ts, src_ptr, src_op,
     chk_ptr, chk_op, txn_ptr, user_pos) = K.build_graph(
        op_columns(batch), K.TxnColumns(txn_ptr_u, batch.txn_ts, refused),
        K.StoreCells(store.offsets, store.flat, store.dense_slot, store.stamp, store.next_stamp()))
    n = pred.shape[0]
    hist = np.zeros(n, np.float64)
    win = np.flatnonzero(kind == WINDOW_READ)
    if win.shape[0]:
        hist[win] = store.window_sums(cells[chain[win]], ts[win] - operand[win].astype(np.int64))
    return TPG(
        n_txn=batch.num_txns, txn_ts=batch.txn_ts, cell=chain, cells=cells, init=init,
        pred=pred, chain=chain, n_chains=int(nch), kind=kind, operand=operand, cond=cond,
        cond_arg=cond_arg, txn=txn, ts=ts, src_ptr=src_ptr, src_op=src_op, chk_ptr=chk_ptr,
        chk_op=chk_op, proc=pos, txn_ptr=txn_ptr, user_pos=user_pos, hist=hist,
    )


def refresh_tpg(tpg: TPG, store: StateStore) -> None:
    """Re-read the state the batch starts from (chain heads, window history): needed when the TPG
    was built while the previous batch was still executing (pipelined construction)."""
    tpg.init = store.gather(tpg.cells)
    win = np.flatnonzero(tpg.kind == WINDOW_READ)
    if win.shape[0]:
        tpg.hist[win] = store.window_sums(tpg.cells[tpg.chain[win]],
                                          tpg.ts[win] - tpg.operand[win].astype(np.int64))


def tpg_stats(tpg: TPG) -> dict[str, float]:
    """Measured TPG statistics for the decision model: dependency counts and degree skew (one
    kernel call: the model runs once per batch, so its inputs must cost little next to building
    the batch's TPG)."""
    n = tpg.pred.shape[0]
    longest, multi, sums = K.tpg_counts(tpg.chain, tpg.n_chains, tpg.txn_ptr, tpg.kind, SUM_WRITE, SUM_ADD)
    mean_chain = n / max(tpg.n_chains, 1)
    return {
        "ops": float(n),
        "chains": float(tpg.n_chains),
        "td": float(n - tpg.n_chains),
        "pd": float(tpg.src_op.shape[0]),
        "ld": float(multi),
        "sum_ops": float(sums),
        "checks": float(tpg.chk_op.shape[0]),
        "max_chain": float(longest),
        "mean_chain": float(mean_chain),
        "degree_skew": float(longest / max(mean_chain, 1e-9)) if n else 0.0,
    }
