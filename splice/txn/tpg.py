"""The task precedence graph (TPG) of one batch, built with sorts instead of per-op objects.

Vertices are operations; edges are the seed's three dependencies:

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
from splice.txn.ops import COND_NONE, SUM_ADD, SUM_WRITE, WINDOW_READ, OpBatch, is_write_kind
from splice.txn.state import StateStore

__all__ = ["TPG", "build_tpg", "tpg_stats"]


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

    def nbytes(self) -> int:
        return int(sum(v.nbytes for v in vars(self).values() if isinstance(v, np.ndarray)))


def build_tpg(batch: OpBatch, refused: np.ndarray, store: StateStore) -> TPG:
    """Decompose ``batch`` (minus ``refused`` transactions) into ops and link them."""
    n_user = batch.num_ops
    keep = ~refused[batch.op_txn] if n_user else np.zeros(0, np.bool_)
    uidx = np.flatnonzero(keep)
    nsrc = (batch.src_ptr[1:] - batch.src_ptr[:-1])[uidx]
    total_src = int(nsrc.sum())
    n_main = uidx.shape[0]
    if total_src:
        starts = batch.src_ptr[:-1][uidx]
        base = np.zeros(n_main, np.int64)
        np.cumsum(nsrc[:-1], out=base[1:])
        flat_idx = np.repeat(starts - base, nsrc) + np.arange(total_src, dtype=np.int64)
        s_cell = batch.src_cell[flat_idx]
        s_txn = np.repeat(batch.op_txn[uidx], nsrc)
    else:
        s_cell = np.zeros(0, np.int64)
        s_txn = np.zeros(0, np.int64)
    n = n_main + total_src
    cell_g = np.concatenate([batch.op_cell[uidx], s_cell])
    kind = np.concatenate([batch.op_kind[uidx], np.zeros(total_src, np.int8)])
    operand = np.concatenate([batch.op_operand[uidx], np.zeros(total_src)])
    cond = np.concatenate([batch.op_cond[uidx], np.zeros(total_src, np.int8)])
    cond_arg = np.concatenate([batch.op_cond_arg[uidx], np.zeros(total_src)])
    txn = np.concatenate([batch.op_txn[uidx], s_txn])
    # source op j of main op i (unsorted numbering): n_main + offset
    src_ptr_u = np.zeros(n + 1, np.int64)
    np.cumsum(np.concatenate([nsrc, np.zeros(total_src, np.int64)]), out=src_ptr_u[1:])
    src_op_u = n_main + np.arange(total_src, dtype=np.int64)

    cells, dense = np.unique(cell_g, return_inverse=True)
    dense = dense.astype(np.int64).reshape(-1)
    n_txn = batch.num_txns
    w = is_write_kind(kind).astype(np.int64)
    perm = np.argsort((dense * max(n_txn, 1) + txn) * 2 + w, kind="stable")
    pos = np.empty(n, np.int64)
    pos[perm] = np.arange(n, dtype=np.int64)
    dense_s = dense[perm]
    pred, chain, n_chains = K.chain_links(dense_s)
    kind_s, txn_s = kind[perm], txn[perm]
    # PD sources, re-indexed to sorted positions (CSR over sorted ops)
    cnt_s = (src_ptr_u[1:] - src_ptr_u[:-1])[perm]
    src_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(cnt_s, out=src_ptr[1:])
    if total_src:
        starts = src_ptr_u[:-1][perm]
        base = src_ptr[:-1]
        flat = np.repeat(starts - base, cnt_s) + np.arange(total_src, dtype=np.int64)
        src_op = pos[src_op_u[flat]]
    else:
        src_op = np.zeros(0, np.int64)
    proc = np.argsort(txn_s * 2 + w[perm], kind="stable")
    counts = np.bincount(txn_s, minlength=n_txn)
    txn_ptr = np.zeros(n_txn + 1, np.int64)
    np.cumsum(counts, out=txn_ptr[1:])
    cond_s = cond[perm]
    chk_op = proc[cond_s[proc] != COND_NONE]
    chk_counts = np.bincount(txn_s[chk_op], minlength=n_txn)
    chk_ptr = np.zeros(n_txn + 1, np.int64)
    np.cumsum(chk_counts, out=chk_ptr[1:])
    ts = batch.txn_ts[txn_s]
    operand_s = operand[perm]
    hist = np.zeros(n, np.float64)
    win = np.flatnonzero(kind_s == WINDOW_READ)
    if win.shape[0]:
        hist[win] = store.window_sums(cells[dense_s[win]], ts[win] - operand_s[win].astype(np.int64))
    user_pos = np.full(n_user, -1, np.int64)
    user_pos[uidx] = pos[:n_main]
    return TPG(
        n_txn=n_txn, txn_ts=batch.txn_ts, cell=dense_s, cells=cells, init=store.gather(cells),
        pred=pred, chain=chain, n_chains=int(n_chains), kind=kind_s, operand=operand_s,
        cond=cond_s, cond_arg=cond_arg[perm], txn=txn_s, ts=ts, src_ptr=src_ptr, src_op=src_op,
        chk_ptr=chk_ptr, chk_op=chk_op, proc=proc, txn_ptr=txn_ptr, user_pos=user_pos, hist=hist,
    )


def tpg_stats(tpg: TPG) -> dict[str, float]:
    """Measured TPG statistics for the decision model: dependency counts and degree skew."""
    n = tpg.pred.shape[0]
    chain_len = np.bincount(tpg.chain, minlength=tpg.n_chains) if n else np.zeros(1, np.int64)
    ops_per_txn = tpg.txn_ptr[1:] - tpg.txn_ptr[:-1]
    multi = int(ops_per_txn[ops_per_txn > 1].sum())
    sums = int(np.count_nonzero((tpg.kind == SUM_WRITE) | (tpg.kind == SUM_ADD)))
    return {
        "ops": float(n),
        "chains": float(tpg.n_chains),
        "td": float(n - tpg.n_chains),
        "pd": float(tpg.src_op.shape[0]),
        "ld": float(multi),
        "sum_ops": float(sums),
        "checks": float(tpg.chk_op.shape[0]),
        "max_chain": float(chain_len.max()) if chain_len.size else 0.0,
        "mean_chain": float(n / max(tpg.n_chains, 1)),
        "degree_skew": float(chain_len.max() / max(n / max(tpg.n_chains, 1), 1e-9)) if n else 0.0,
    }
