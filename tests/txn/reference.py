"""The obvious implementation: transactions one at a time in timestamp order, on a dict."""

from __future__ import annotations

import math

import numpy as np

from splice.txn.ops import (
    ADD,
    COND_GE,
    COND_LE,
    MAX,
    READ,
    REASON_CONDITION,
    REASON_DUPLICATE,
    REASON_LATE,
    SUM_ADD,
    SUM_WRITE,
    WINDOW_READ,
    WRITE,
    OpBatch,
)


class SerialReference:
    """State as {cell: value}; committed versions as a list of (cell, ts, value)."""

    def __init__(self, initial: dict[int, float]) -> None:
        self.initial = initial  # table index -> initial value
        self.state: dict[int, float] = {}
        self.versions: list[tuple[int, int, float]] = []
        self.last_ts: int | None = None

    def get(self, cell: int) -> float:
        return self.state.get(cell, self.initial[cell >> 40])

    def run(self, batch: OpBatch) -> tuple[list[bool], list[int], list[float]]:
        committed: list[bool] = []
        reasons: list[int] = []
        results = [math.nan] * batch.num_ops
        top = self.last_ts
        for t in range(batch.num_txns):
            ts = int(batch.txn_ts[t])
            ops = [i for i in range(batch.num_ops) if batch.op_txn[i] == t]
            reason = int(batch.txn_reason[t])
            if reason == 0 and self.last_ts is not None and ts <= self.last_ts:
                reason = REASON_LATE
            writes = [int(batch.op_cell[i]) for i in ops if batch.op_kind[i] not in (READ, WINDOW_READ)]
            if reason == 0 and len(writes) != len(set(writes)):
                reason = REASON_DUPLICATE
            top = ts if top is None else max(top, ts)
            if reason:
                committed.append(False)
                reasons.append(reason)
                continue
            ok = True
            for i in ops:
                b = self.get(int(batch.op_cell[i]))
                c, arg = int(batch.op_cond[i]), float(batch.op_cond_arg[i])
                if (c == COND_GE and not b >= arg) or (c == COND_LE and not b <= arg):
                    ok = False
            new: dict[int, float] = {}
            for i in ops:
                cell = int(batch.op_cell[i])
                k = int(batch.op_kind[i])
                b = self.get(cell)
                o = float(batch.op_operand[i])
                srcs = batch.src_cell[batch.src_ptr[i]:batch.src_ptr[i + 1]]
                s = 0.0
                for sc in srcs:
                    s += self.get(int(sc))
                if k == READ:
                    results[i] = b
                elif k == WINDOW_READ:
                    lo = ts - int(o)
                    results[i] = float(sum(v for (c2, t2, v) in self.versions
                                           if c2 == cell and lo <= t2 < ts))
                else:
                    v = {WRITE: o, ADD: b + o, SUM_WRITE: s + o, SUM_ADD: b + s + o,
                         MAX: max(b, o)}[k]
                    results[i] = v if ok else b
                    new[cell] = v
            committed.append(ok)
            reasons.append(0 if ok else REASON_CONDITION)
            if ok:
                for cell, v in new.items():
                    self.state[cell] = v
                    self.versions.append((cell, ts, v))
        self.last_ts = top
        for t in range(batch.num_txns):
            if not committed[t]:
                pass
        return committed, reasons, results

    def values(self, cells: np.ndarray) -> np.ndarray:
        return np.array([self.get(int(c)) for c in cells])
