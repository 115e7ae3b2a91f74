"""The per-event API: a function returns an event's declared accesses; batches compile to columns.

A user writes one function per transaction type, ``fn(event) -> list[Access]``, using the
constructors below; :func:`compile_events` calls it for every event of a punctuation interval and
packs the accesses into an :class:`~splice.txn.ops.OpBatch` that the schedulers run with numba
kernels. Per-event Python happens once, in pre-processing; execution never calls back into it.

Bad input aborts only the event it belongs to, with a recorded reason, and the batch goes on:

=========================================  ===================
the function raises                        ``REASON_UDF``
undeclared table or column                 ``REASON_TABLE``
key not a non-negative integer             ``REASON_KEY``
non-numeric or non-finite amount           ``REASON_OPERAND``
two writes to one cell in one transaction  ``REASON_DUPLICATE``
timestamp behind the last punctuation      ``REASON_LATE`` (engine)
=========================================  ===================

An unknown access kind or condition is a programming mistake and raises
:class:`~splice.core.errors.PlanError` naming the function.

>>> from splice.txn import StateTable, TxnEngine
>>> eng = TxnEngine([StateTable("acct", keys=2, initial=50.0)])
>>> def transfer(e):
...     return [add("acct", e["src"], -e["amount"], require_ge=e["amount"]),
...             add("acct", e["dst"], e["amount"])]
>>> out = run_events(eng, [{"src": 0, "dst": 1, "amount": 30},
...                        {"src": 0, "dst": 1, "amount": 30},
...                        {"src": 0, "dst": 1, "amount": float("nan")},
...                        {"src": 0, "dst": 1, "amount": "x"}], transfer)
>>> [o.committed for o in out]
[True, False, False, False]
>>> [o.reason.split(":")[0] for o in out]
['', 'condition failed', 'non-numeric operand', 'user function raised']
>>> eng.store.value("acct", 0), eng.store.value("acct", 1)
(20.0, 80.0)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from splice.core.errors import PlanError
from splice.txn.engine import TxnEngine
from splice.txn.ops import (
    COND_GE,
    COND_LE,
    COND_NONE,
    KIND_NAMES,
    REASON_KEY,
    REASON_OPERAND,
    REASON_TABLE,
    REASON_UDF,
    REASONS,
    OpBatch,
    OpBatchBuilder,
)
from splice.txn.state import MAX_KEY, StateStore

__all__ = ["Access", "read", "write", "add", "window_read", "sum_write", "compile_events",
           "run_events", "EventOutcome"]


@dataclass(frozen=True)
class Access:
    """One declared state access of a transaction (see :mod:`splice.txn.ops` for kinds)."""

    kind: str
    table: str
    key: Any
    operand: Any = 0.0
    column: str | None = None
    cond: str | None = None  # ">=" or "<="
    cond_arg: Any = 0.0
    sources: tuple[tuple[str, Any], ...] = ()


def read(table: str, key: Any, column: str | None = None, require_ge: Any = None) -> Access:
    """Read a cell (optionally abort unless it is ``>= require_ge``)."""
    if require_ge is None:
        return Access("read", table, key, column=column)
    return Access("read", table, key, column=column, cond=">=", cond_arg=require_ge)


def write(table: str, key: Any, value: Any, column: str | None = None) -> Access:
    """Set a cell to ``value``."""
    return Access("write", table, key, value, column)


def add(table: str, key: Any, amount: Any, column: str | None = None,
        require_ge: Any = None) -> Access:
    """Read-modify-write ``cell += amount``; with ``require_ge``, abort unless pre >= it."""
    if require_ge is None:
        return Access("add", table, key, amount, column)
    return Access("add", table, key, amount, column, ">=", require_ge)


def window_read(table: str, key: Any, window: int, column: str | None = None) -> Access:
    """Sum of the cell's committed versions with timestamps in ``[ts - window, ts)``."""
    return Access("window_read", table, key, window, column)


def sum_write(table: str, key: Any, sources: Sequence[tuple[str, Any]], plus: Any = 0.0,
              column: str | None = None) -> Access:
    """``cell = sum(source cells) + plus``: a parametric dependency on the sources."""
    return Access("sum_write", table, key, plus, column, sources=tuple(sources))


@dataclass(frozen=True)
class EventOutcome:
    """Post-processing input: did the event's transaction commit, why not, what it read."""

    committed: bool
    reason: str
    results: tuple[float, ...]


_KIND = {name: i for i, name in enumerate(KIND_NAMES)}
_COND = {None: COND_NONE, ">=": COND_GE, "<=": COND_LE}


def _is_key(k: Any) -> bool:
    return isinstance(k, numbers.Integral) and not isinstance(k, bool) and 0 <= int(k) < MAX_KEY


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return None
    v = float(x)
    return v if math.isfinite(v) else None


def _cell(store: StateStore, table: str, key: Any, column: str | None) -> tuple[int, int]:
    """(cell, reason): reason non-zero when the table or key is not declared."""
    ti = store.index.get(table)
    if ti is None:
        return 0, REASON_TABLE
    if not _is_key(key):
        return 0, REASON_KEY
    cols = store.tables[ti].columns
    if column is not None and column not in cols:
        return 0, REASON_TABLE
    ci = 0 if column is None else cols.index(column)
    return int(store.cells(ti, [int(key)], ci)[0]), 0


def compile_events(
    store: StateStore, events: Sequence[Any], fn: Callable[[Any], Sequence[Access]],
    ts: Sequence[int] | np.ndarray,
) -> tuple[OpBatch, dict[int, str]]:
    """Call ``fn`` per event and pack the accesses; also details of refused events."""
    b = OpBatchBuilder(np.asarray(ts, np.int64))
    details: dict[int, str] = {}
    cols: dict[str, list[Any]] = {k: [] for k in ("txn", "cell", "kind", "opnd", "cond", "carg")}
    sums: dict[str, list[Any]] = {k: [] for k in ("txn", "cell", "kind", "opnd", "src")}
    name = getattr(fn, "__name__", repr(fn))
    for t, ev in enumerate(events):
        try:
            accesses = list(fn(ev))
        except Exception as exc:  # the user function failed: abort this event only
            b.abort([t], REASON_UDF)
            details[t] = f"{name} raised {type(exc).__name__}: {exc}"
            continue
        staged: list[tuple[Any, ...]] = []
        reason = 0
        for a in accesses:
            if not isinstance(a, Access):
                raise PlanError(f"{name} must return Access objects, got {type(a).__name__}")
            kind = _KIND.get(a.kind)
            if kind is None or a.cond not in _COND:
                raise PlanError(f"{name}: unknown access kind {a.kind!r} or condition {a.cond!r}")
            cell, reason = _cell(store, a.table, a.key, a.column)
            if reason:
                details[t] = f"{a.table!r}[{a.key!r}]"
                break
            opnd = _number(a.operand)
            carg = _number(a.cond_arg) if a.cond is not None else 0.0
            if opnd is None or carg is None:
                reason = REASON_OPERAND
                details[t] = f"operand {a.operand!r} / condition {a.cond_arg!r}"
                break
            srcs = []
            for st, sk in a.sources:
                sc, reason = _cell(store, st, sk, None)
                if reason:
                    details[t] = f"source {st!r}[{sk!r}]"
                    break
                srcs.append(sc)
            if reason:
                break
            staged.append((cell, kind, opnd, _COND[a.cond], carg, srcs))
        if reason:
            b.abort([t], reason)
            continue
        for cell, kind, opnd, cond, carg, srcs in staged:
            if srcs:
                if cond != COND_NONE:
                    raise PlanError(f"{name}: conditions on sum accesses are not supported")
                sums["txn"].append(t)
                sums["cell"].append(cell)
                sums["kind"].append(kind)
                sums["opnd"].append(opnd)
                sums["src"].append(srcs)
            else:
                for k, v in zip(cols, (t, cell, kind, opnd, cond, carg), strict=True):
                    cols[k].append(v)
    if cols["txn"]:
        b.add(cols["txn"], cols["cell"], np.array(cols["kind"], np.int8), cols["opnd"],
              np.array(cols["cond"], np.int8), cols["carg"])
    # sum accesses grouped by source count (the builder takes rectangular sources)
    by_len: dict[int, list[int]] = {}
    for j, s in enumerate(sums["src"]):
        by_len.setdefault(len(s), []).append(j)
    for _, js in sorted(by_len.items()):
        b.add([sums["txn"][j] for j in js], [sums["cell"][j] for j in js],
              np.array([sums["kind"][j] for j in js], np.int8), [sums["opnd"][j] for j in js],
              sources=[sums["src"][j] for j in js])
    return b.build(), details


def run_events(
    engine: TxnEngine, events: Sequence[Any], fn: Callable[[Any], Sequence[Access]],
    ts: Sequence[int] | None = None,
) -> list[EventOutcome]:
    """Run ``events`` as one batch (their own punctuation interval); outcomes in event order.

    Timestamps default to the progress controller's next ones (after the last punctuation).
    """
    if ts is None:
        start = (engine.last_punctuation or 0) + 1
        stamps = np.arange(start, start + len(events), dtype=np.int64)
    else:
        stamps = np.asarray(ts, np.int64)
    batch, details = compile_events(engine.store, events, fn, stamps)
    res = engine.execute(batch)
    out: list[EventOutcome] = []
    per_txn: dict[int, list[float]] = {}
    for i, t in enumerate(batch.op_txn.tolist()):
        per_txn.setdefault(t, []).append(float(res.op_result[i]))
    for t in range(batch.num_txns):
        reason = REASONS[int(res.reason[t])]
        if t in details:
            reason = f"{reason}: {details[t]}"
        out.append(EventOutcome(bool(res.committed[t]), reason, tuple(per_txn.get(t, ()))))
    return out
