"""Operations on shared state, as columns: the form every scheduler executes.

A transaction ``T`` with timestamp ``t`` is a set of state accesses, each one an **operation** on
one *cell* ``(table, key, column)``. All of ``T``'s operations see ``S(t-)``, the state left by the
committed transactions with smaller timestamps, and::

    T commits  <=>  every condition of T holds on S(t-)  (and nothing in T was bad input)
    on commit: cell := f_kind(pre, sources, operand)      for each write of T
    on abort:  no cell changes

where ``pre`` is the cell's value in ``S(t-)`` and ``sources`` is the sum of the pre-values of the
cells the write declared as parametric sources (a parametric dependency, PD). A batch holds many
transactions as flat arrays (one row per operation), which is what the TPG builder and the numba
executors consume; :class:`OpBatchBuilder` appends whole columns at once.

Operation kinds (``f_kind``)::

    READ        pre                      (result: pre)
    WRITE       operand
    ADD         pre + operand            (read-modify-write)
    SUM_WRITE   sources + operand        (GrepSum: write the sum of other cells)
    SUM_ADD     pre + sources + operand
    WINDOW_READ pre                      (result: sum of committed versions with ts in [t-w, t),
                                          w = operand; a read over the multi-version table)
    MAX         max(pre, operand)
    UDF         new, ok = udf(pre, params)   (the engine's user function, a numba ``@njit``
                                          function called inside the executor kernels;
                                          ``params`` is the op's row of ``OpBatch.udf_params``,
                                          ``operand`` holds that row's index)

Conditions (on ``pre``): ``NONE``, ``GE`` (``pre >= cond_arg``), ``LE`` (``pre <= cond_arg``),
``UDF`` (every ``UDF`` op: ``ok`` and a finite ``new``, as the user function decides).
A failed condition aborts the whole transaction, never just the operation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from splice.core.errors import PlanError
from splice.txn._kernels import duplicate_writes, sort_by_txn

if TYPE_CHECKING:
    from splice.txn.objects import ObjectOps

__all__ = [
    "READ",
    "WRITE",
    "ADD",
    "SUM_WRITE",
    "SUM_ADD",
    "WINDOW_READ",
    "MAX",
    "UDF",
    "COND_NONE",
    "COND_GE",
    "COND_LE",
    "COND_UDF",
    "BLK",
    "RDY",
    "EXE",
    "ABT",
    "REASONS",
    "REASON_NONE",
    "REASON_CONDITION",
    "REASON_TABLE",
    "REASON_KEY",
    "REASON_OPERAND",
    "REASON_UDF",
    "REASON_LATE",
    "REASON_DUPLICATE",
    "KIND_NAMES",
    "is_write_kind",
    "OpBatch",
    "OpBatchBuilder",
]

READ, WRITE, ADD, SUM_WRITE, SUM_ADD, WINDOW_READ, MAX, UDF = 0, 1, 2, 3, 4, 5, 6, 7
KIND_NAMES = ("read", "write", "add", "sum_write", "sum_add", "window_read", "max", "udf")
COND_NONE, COND_GE, COND_LE, COND_UDF = 0, 1, 2, 3

#: Operation states (MorphStream's state machine): blocked, ready, executed, aborted.
BLK, RDY, EXE, ABT = 0, 1, 2, 3

REASON_NONE = 0
REASON_CONDITION = 1
REASON_TABLE = 2
REASON_KEY = 3
REASON_OPERAND = 4
REASON_UDF = 5
REASON_LATE = 6
REASON_DUPLICATE = 7
#: Abort reason code -> message.
REASONS = {
    REASON_NONE: "",
    REASON_CONDITION: "condition failed",
    REASON_TABLE: "undeclared table or column",
    REASON_KEY: "key of the wrong type or out of range",
    REASON_OPERAND: "non-numeric operand",
    REASON_UDF: "user function raised",
    REASON_LATE: "timestamp behind the last punctuation",
    REASON_DUPLICATE: "two writes to one cell in one transaction",
}

_WRITE_KINDS = np.array([False, True, True, True, True, False, True, True])


def is_write_kind(kind: npt.NDArray[np.int8]) -> npt.NDArray[np.bool_]:
    """True where ``kind`` changes its cell."""
    return _WRITE_KINDS[kind]


@dataclass
class OpBatch:
    """A batch of transactions as columns, transactions in timestamp order.

    ``txn_ts[t]`` is transaction ``t``'s timestamp (never decreasing; equal ones run in order). Operation ``i`` belongs to
    transaction ``op_txn[i]`` (non-decreasing), touches cell ``op_cell[i]`` and, for ``SUM_*`` kinds,
    sums the pre-values of cells ``src_cell[src_ptr[i]:src_ptr[i+1]]``. ``txn_reason[t]`` is non-zero
    for a transaction refused before execution (bad input): it aborts with that reason.
    A ``UDF`` op's parameters are row ``int(op_operand[i])`` of ``udf_params`` (rows x width).
    """

    txn_ts: npt.NDArray[np.int64]
    op_txn: npt.NDArray[np.int64]
    op_cell: npt.NDArray[np.int64]
    op_kind: npt.NDArray[np.int8]
    op_operand: npt.NDArray[np.float64]
    op_cond: npt.NDArray[np.int8]
    op_cond_arg: npt.NDArray[np.float64]
    src_ptr: npt.NDArray[np.int64]
    src_cell: npt.NDArray[np.int64]
    txn_reason: npt.NDArray[np.int8]
    txn_group: npt.NDArray[np.int32] = field(default_factory=lambda: np.zeros(0, np.int32))
    udf_params: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, 1), np.float64))
    objects: ObjectOps | None = None

    @property
    def has_udf(self) -> bool:
        return bool(self.udf_params.shape[0])

    @property
    def num_txns(self) -> int:
        return int(self.txn_ts.shape[0])

    @property
    def num_ops(self) -> int:
        return int(self.op_txn.shape[0])

    def nbytes(self) -> int:
        """Bytes held by the columns."""
        return int(sum(v.nbytes for v in vars(self).values() if isinstance(v, np.ndarray)))


class OpBatchBuilder:
    """Collects operations column-wise and validates them once into an :class:`OpBatch`.

    ``add`` takes equal-length arrays (or scalars broadcast to them): one operation per row. Rows
    with a non-finite operand or condition argument, or two writes to one cell in one transaction,
    abort their transaction with a recorded reason; bad kinds or conditions are programming
    mistakes and raise :class:`~splice.core.errors.PlanError`.
    """

    def __init__(self, txn_ts: npt.ArrayLike) -> None:
        self.txn_ts = np.ascontiguousarray(txn_ts, dtype=np.int64)
        if self.txn_ts.ndim != 1:
            raise PlanError("txn_ts must be one-dimensional")
        if self.txn_ts.shape[0] > 1 and not bool(np.all(np.diff(self.txn_ts) >= 0)):
            raise PlanError("transaction timestamps in a batch must not decrease (the "
                            "transactional operator with time_column= orders each interval)")
        self.reason = np.zeros(self.txn_ts.shape[0], np.int8)
        self.group = np.zeros(self.txn_ts.shape[0], np.int32)
        self._cols: list[tuple[np.ndarray, ...]] = []
        self._srcs: list[tuple[np.ndarray, np.ndarray]] = []
        self._params: list[np.ndarray] = []
        self._param_rows = 0

    def abort(self, txns: npt.ArrayLike, reason: int) -> None:
        """Refuse transactions ``txns`` with ``reason`` (the first reason recorded wins)."""
        t = np.asarray(txns, dtype=np.int64)
        cur = self.reason[t]
        self.reason[t] = np.where(cur == 0, reason, cur)

    def add(
        self,
        txn: npt.ArrayLike,
        cell: npt.ArrayLike,
        kind: int | npt.ArrayLike,
        operand: float | npt.ArrayLike = 0.0,
        cond: int | npt.ArrayLike = COND_NONE,
        cond_arg: float | npt.ArrayLike = 0.0,
        sources: npt.ArrayLike | None = None,
    ) -> None:
        """Append one operation per row of ``txn``; ``sources`` is (rows, k) cells for ``SUM_*``."""
        t = np.ascontiguousarray(txn, dtype=np.int64)
        n = t.shape[0]
        if n and (t.min() < 0 or t.max() >= self.txn_ts.shape[0]):
            raise PlanError("operation refers to a transaction outside the batch")
        k = np.broadcast_to(np.asarray(kind, dtype=np.int8), (n,))
        if n and (k.min() < READ or k.max() > MAX):
            bad_kinds = sorted(set(k.tolist()))
            if UDF in bad_kinds:
                raise PlanError("UDF operations take parameter rows: use OpBatchBuilder.add_udf")
            raise PlanError(f"unknown operation kind in {bad_kinds}")
        c = np.broadcast_to(np.asarray(cond, dtype=np.int8), (n,))
        if n and (c.min() < COND_NONE or c.max() > COND_LE):
            raise PlanError(f"unknown condition in {sorted(set(c.tolist()))}")
        opnd = np.broadcast_to(np.asarray(operand, dtype=np.float64), (n,))
        carg = np.broadcast_to(np.asarray(cond_arg, dtype=np.float64), (n,))
        bad = ~np.isfinite(opnd) | ((c != COND_NONE) & ~np.isfinite(carg))
        if bad.any():
            self.abort(t[bad], REASON_OPERAND)
        cells = np.broadcast_to(np.asarray(cell, dtype=np.int64), (n,))
        if sources is None:
            src = np.zeros((n, 0), np.int64)
        else:
            src = np.asarray(sources, dtype=np.int64).reshape(n, -1)
        needs = (k == SUM_WRITE) | (k == SUM_ADD)
        if src.shape[1] and (~needs).any():
            raise PlanError("only SUM_WRITE and SUM_ADD operations take sources")
        self._cols.append((t, cells.copy(), k.copy(), np.where(bad, 0.0, opnd),
                           c.copy(), np.where(bad, 0.0, carg)))
        self._srcs.append((np.full(n, src.shape[1], np.int64), src.reshape(-1).copy()))

    def add_udf(self, txn: npt.ArrayLike, cell: npt.ArrayLike, params: npt.ArrayLike) -> None:
        """Append one ``UDF`` operation per row of ``txn``: ``cell, ok = udf(cell, params[row])``.

        ``params`` is (rows, width) (a 1-d array is one parameter per row); every ``add_udf`` of a
        batch uses one width. A row with a non-finite parameter aborts its transaction
        (``REASON_OPERAND``).
        """
        t = np.ascontiguousarray(txn, dtype=np.int64)
        n = t.shape[0]
        if n == 0:
            return
        if t.min() < 0 or t.max() >= self.txn_ts.shape[0]:
            raise PlanError("operation refers to a transaction outside the batch")
        p = np.asarray(params, dtype=np.float64)
        p = p.reshape(n, -1) if p.ndim == 1 else p
        if p.ndim != 2 or p.shape[0] != n:
            raise PlanError(f"UDF parameters must be (rows, width) with {n} rows, got {p.shape}")
        if self._params and p.shape[1] != self._params[0].shape[1]:
            raise PlanError(f"UDF parameter width {p.shape[1]} differs from this batch's "
                            f"{self._params[0].shape[1]}")
        bad = np.asarray(~np.isfinite(p).all(axis=1), np.bool_)
        if bad.any():
            self.abort(t[bad], REASON_OPERAND)
            p = np.where(bad.reshape(-1, 1), 0.0, p)
        rows = self._param_rows + np.arange(n, dtype=np.float64)
        cells = np.broadcast_to(np.asarray(cell, dtype=np.int64), (n,))
        self._cols.append((t, cells.copy(), np.full(n, UDF, np.int8), rows,
                           np.full(n, COND_UDF, np.int8), np.zeros(n, np.float64)))
        self._srcs.append((np.zeros(n, np.int64), np.zeros(0, np.int64)))
        self._params.append(np.ascontiguousarray(p))
        self._param_rows += n

    def build(self) -> OpBatch:
        """Stable-sort operations by transaction and return the batch."""
        if self._cols:
            cols = [np.concatenate([c[j] for c in self._cols]) for j in range(6)]
            counts = np.concatenate([s[0] for s in self._srcs])
            flat = np.concatenate([s[1] for s in self._srcs])
        else:
            cols = [np.zeros(0, d) for d in (np.int64, np.int64, np.int8, np.float64, np.int8, np.float64)]
            counts, flat = np.zeros(0, np.int64), np.zeros(0, np.int64)
        perm, ptr_t, flat_idx = sort_by_txn(self.txn_ts.shape[0], cols[0], counts)
        if not bool(np.all(perm[1:] > perm[:-1])) if perm.shape[0] > 1 else False:
            cols = [c[perm] for c in cols]
            counts = counts[perm]
            flat = flat[flat_idx]
        ptr = np.zeros(counts.shape[0] + 1, np.int64)
        np.cumsum(counts, out=ptr[1:])
        txn, cell, kind = cols[0], cols[1], cols[2]
        dup = duplicate_writes(ptr_t, cell, kind)
        if dup.any():
            self.abort(np.flatnonzero(dup), REASON_DUPLICATE)
        return OpBatch(
            txn_ts=self.txn_ts, op_txn=txn, op_cell=cell, op_kind=kind, op_operand=cols[3],
            op_cond=cols[4], op_cond_arg=cols[5], src_ptr=ptr, src_cell=flat,
            txn_reason=self.reason, txn_group=self.group,
            udf_params=(np.ascontiguousarray(np.concatenate(self._params)) if self._params
                        else np.zeros((0, 1), np.float64)),
        )
