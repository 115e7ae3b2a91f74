"""The obvious implementation: transactions one at a time in timestamp order, on a dict."""

from __future__ import annotations

import math
from typing import Any

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
    REASON_UDF,
    SUM_ADD,
    SUM_WRITE,
    UDF,
    WINDOW_READ,
    WRITE,
    OpBatch,
)


class SerialReference:
    """State as {cell: value}; committed versions as a list of (cell, ts, value)."""

    def __init__(self, initial: dict[int, float], udf: Any = None) -> None:
        self.initial = initial  # table index -> initial value
        self.udf = udf  # called from Python: (value, params row) -> (new value, ok)
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
            raised = False
            for i in ops:
                b = self.get(int(batch.op_cell[i]))
                c, arg = int(batch.op_cond[i]), float(batch.op_cond_arg[i])
                if (c == COND_GE and not b >= arg) or (c == COND_LE and not b <= arg):
                    ok = False
                if int(batch.op_kind[i]) == UDF:
                    _, uok, rz = self._udf(batch, i, b)
                    ok = ok and uok
                    raised = raised or rz
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
                elif k == UDF:
                    v = self._udf(batch, i, b)[0]
                    results[i] = v if ok else b
                    new[cell] = v
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
            reasons.append(0 if ok else REASON_UDF if raised else REASON_CONDITION)
            if ok:
                for cell, v in new.items():
                    self.state[cell] = v
                    self.versions.append((cell, ts, v))
        self.last_ts = top
        for t in range(batch.num_txns):
            if not committed[t]:
                pass
        return committed, reasons, results

    def _udf(self, batch: OpBatch, i: int, b: float) -> tuple[float, bool, bool]:
        try:
            v, ok = self.udf(b, batch.udf_params[int(batch.op_operand[i])])
        except Exception:
            return math.nan, False, True
        v = float(v)
        return v, bool(ok) and math.isfinite(v), False

    def values(self, cells: np.ndarray) -> np.ndarray:
        return np.array([self.get(int(c)) for c in cells])


class AccessReference:
    """Events one at a time on dicts, at the level of declared accesses (read, add, write,
    read_object, update_object): the obvious implementation of the object slow path."""

    def __init__(self, tables: list[Any]) -> None:
        self.tables = {t.name: t for t in tables}
        self.num: dict[tuple[str, int, str], float] = {}
        self.obj: dict[tuple[str, str, int], Any] = {}

    def _num(self, table: str, key: int, col: str | None) -> float:
        t = self.tables[table]
        return self.num.get((table, key, col or t.columns[0]), t.initial)

    def _obj(self, table: str, col: str | None, key: int) -> Any:
        t = self.tables[table]
        where = (table, col or t.objects[0], key)
        if where in self.obj:
            return self.obj[where]
        return t.object_initial() if t.object_initial else None

    def run(self, events: list[Any], fn: Any) -> list[tuple[bool, str, tuple[Any, ...]]]:
        import copy

        from splice.txn.objects import Abort

        out = []
        for ev in events:
            accesses = fn(ev)
            ok = True
            reason = ""
            results: list[Any] = []
            num_new: dict[tuple[str, int, str], float] = {}
            obj_new: dict[tuple[str, str, int], Any] = {}
            for a in accesses:
                col = a.column or self.tables[a.table].columns[0]
                if a.kind == "read":
                    b = self._num(a.table, a.key, a.column)
                    results.append(b)
                    if a.cond == ">=" and not b >= a.cond_arg:
                        ok, reason = False, reason or "condition failed"
                elif a.kind in ("add", "write"):
                    b = self._num(a.table, a.key, a.column)
                    if a.cond == ">=" and not b >= a.cond_arg:
                        ok, reason = False, reason or "condition failed"
                    v = b + a.operand if a.kind == "add" else float(a.operand)
                    num_new[(a.table, a.key, col)] = v
                    results.append(v)
                elif a.kind == "read_object":  # object accesses see the earlier ones of the event
                    ocol = a.column or self.tables[a.table].objects[0]
                    where = (a.table, ocol, a.key)
                    cur = obj_new[where] if where in obj_new else self._obj(a.table, ocol, a.key)
                    results.append(copy.deepcopy(cur))
                else:
                    ocol = a.column or self.tables[a.table].objects[0]
                    where = (a.table, ocol, a.key)
                    cur = obj_new[where] if where in obj_new else self._obj(a.table, ocol, a.key)
                    try:
                        obj_new[where] = a.operand(copy.deepcopy(cur), *a.params)
                        results.append(copy.deepcopy(obj_new[where]))
                    except Abort as exc:
                        ok, reason = False, reason or f"condition failed: {exc}"
                    except Exception as exc:
                        ok, reason = False, reason or f"user function raised: {exc}"
            if ok:
                self.num.update(num_new)
                self.obj.update(obj_new)
            out.append((ok, reason, tuple(results)))
        return out
