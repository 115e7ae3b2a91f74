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
from splice.txn.objects import ObjectOps
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
    UDF,
    OpBatch,
    OpBatchBuilder,
)
from splice.txn.state_tables import CELL_SHIFT, MAX_KEY, StateStore
from splice.txn.txn_engine import TxnEngine

__all__ = ["Access", "read", "write", "add", "window_read", "sum_write", "update",
           "read_object", "update_object", "compile_events", "CompiledEvents", "run_events",
           "EventOutcome"]


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
    params: tuple[Any, ...] = ()


def read_object(table: str, key: Any, column: str | None = None) -> Access:
    """Read a Python object (the slow path, :mod:`splice.txn.objects`); ``column`` defaults to the
    table's first object column. The result is a copy."""
    return Access("read_object", table, key, column=column)


def update_object(table: str, key: Any, fn: Callable[..., Any], *args: Any,
                  column: str | None = None) -> Access:
    """``object = fn(copy of object, *args)``; ``fn`` raising :class:`~splice.txn.objects.Abort`
    aborts the transaction (any other exception too, as a failed user function)."""
    if not callable(fn):
        raise PlanError(f"update_object on {table!r}: fn must be callable, got {fn!r}")
    return Access("update_object", table, key, fn, column, params=tuple(args))


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


def update(table: str, key: Any, *params: Any, column: str | None = None) -> Access:
    """``cell, ok = udf(cell, params)`` with the engine's user function (``TxnEngine(udf=...)``),
    run inside the executor kernels; ``ok`` false (or a non-finite value) aborts the transaction.
    """
    return Access("udf", table, key, column=column, params=tuple(params))


@dataclass(frozen=True)
class EventOutcome:
    """Post-processing input: did the event's transaction commit, why not, what it read (one
    result per access, in access order: floats, objects for object accesses)."""

    committed: bool
    reason: str
    results: tuple[Any, ...]


_KIND = {name: i for i, name in enumerate(KIND_NAMES)}
_COND = {None: COND_NONE, ">=": COND_GE, "<=": COND_LE}


def _is_key(k: Any) -> bool:
    if type(k) is int:  # the common case first: no ABC check
        return 0 <= k < MAX_KEY
    return isinstance(k, numbers.Integral) and not isinstance(k, bool) and 0 <= int(k) < MAX_KEY


def _number(x: Any) -> float | None:
    t = type(x)
    if t is not float and t is not int and (isinstance(x, bool) or not isinstance(x, numbers.Real)):
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
    k = int(key)
    if k >= store.caps[ti]:
        store.grow(ti, k + 1)
    elif k >= store.used[ti]:
        store.used[ti] = k + 1
    return (ti << CELL_SHIFT) | (k * len(cols) + ci), 0


def _object_cell(store: StateStore, a: Access) -> tuple[tuple[int, str, int], int]:
    """((table, column, key), reason) of an object access."""
    ti = store.index.get(a.table)
    if ti is None:
        return (0, "", 0), REASON_TABLE
    cols = store.tables[ti].objects
    if not cols or (a.column is not None and a.column not in cols):
        return (0, "", 0), REASON_TABLE
    if not _is_key(a.key):
        return (0, "", 0), REASON_KEY
    return (ti, a.column or cols[0], int(a.key)), 0


@dataclass
class CompiledEvents:
    """Events packed into a batch: ``details`` of refused events, and for each op of the batch
    (then each object access) its position among its event's accesses."""

    batch: OpBatch
    details: dict[int, str]
    op_pos: np.ndarray


def compile_events(
    store: StateStore, events: Sequence[Any], fn: Callable[[Any], Sequence[Access]],
    ts: Sequence[int] | np.ndarray,
) -> CompiledEvents:
    """Call ``fn`` per event and pack the accesses (numeric ops as columns, object accesses
    aside); also details of refused events and each access's position in its event."""
    b = OpBatchBuilder(np.asarray(ts, np.int64))
    details: dict[int, str] = {}
    cols: dict[str, list[Any]] = {k: [] for k in ("txn", "cell", "kind", "opnd", "cond", "carg", "pos")}
    c_txn, c_cell, c_kind, c_opnd = cols["txn"], cols["cell"], cols["kind"], cols["opnd"]
    c_cond, c_carg, c_pos = cols["cond"], cols["carg"], cols["pos"]
    sums: dict[str, list[Any]] = {k: [] for k in ("txn", "cell", "kind", "opnd", "src", "pos")}
    udfs: dict[str, list[Any]] = {k: [] for k in ("txn", "cell", "params", "pos")}
    objs = ObjectOps()
    name = getattr(fn, "__name__", repr(fn))
    for t, ev in enumerate(events):
        try:
            accesses = list(fn(ev))
        except Exception as exc:  # the user function failed: abort this event only
            b.abort([t], REASON_UDF)
            details[t] = f"{name} raised {type(exc).__name__}: {exc}"
            continue
        staged: list[tuple[Any, ...]] = []
        staged_obj: list[tuple[Any, ...]] = []
        reason = 0
        for pos, a in enumerate(accesses):
            if not isinstance(a, Access):
                raise PlanError(f"{name} must return Access objects, got {type(a).__name__}")
            if a.kind in ("read_object", "update_object"):
                where, reason = _object_cell(store, a)
                if reason:
                    details[t] = f"{a.table!r}[{a.key!r}] object column {a.column!r}"
                    break
                staged_obj.append((*where, a.operand if a.kind == "update_object" else None,
                                   a.params, pos))
                continue
            kind = _KIND.get(a.kind)
            if kind is None or a.cond not in _COND:
                raise PlanError(f"{name}: unknown access kind {a.kind!r} or condition {a.cond!r}")
            cell, reason = _cell(store, a.table, a.key, a.column)
            if reason:
                details[t] = f"{a.table!r}[{a.key!r}]"
                break
            opnd = _number(a.operand)
            carg = _number(a.cond_arg) if a.cond is not None else 0.0
            params = [_number(x) for x in a.params]
            if opnd is None or carg is None or None in params:
                reason = REASON_OPERAND
                details[t] = (f"operand {a.operand!r} / condition {a.cond_arg!r}" if not a.params
                              else f"parameters {a.params!r}")
                break
            if kind == UDF:
                staged.append((cell, kind, params, COND_NONE, 0.0, [], pos))
                continue
            srcs = []
            for st, sk in a.sources:
                sc, reason = _cell(store, st, sk, None)
                if reason:
                    details[t] = f"source {st!r}[{sk!r}]"
                    break
                srcs.append(sc)
            if reason:
                break
            staged.append((cell, kind, opnd, _COND[a.cond], carg, srcs, pos))
        if reason:
            b.abort([t], reason)
            continue
        for ti, col, key, f, args, pos in staged_obj:
            objs.txn.append(t)
            objs.table.append(ti)
            objs.column.append(col)
            objs.key.append(key)
            objs.fn.append(f)
            objs.args.append(args)
            objs.pos.append(pos)
        for cell, kind, opnd, cond, carg, srcs, pos in staged:
            if kind == UDF:
                for k, v in zip(udfs, (t, cell, opnd, pos), strict=True):
                    udfs[k].append(v)
            elif srcs:
                if cond != COND_NONE:
                    raise PlanError(f"{name}: conditions on sum accesses are not supported")
                for k, v in zip(sums, (t, cell, kind, opnd, srcs, pos), strict=True):
                    sums[k].append(v)
            else:
                c_txn.append(t)
                c_cell.append(cell)
                c_kind.append(kind)
                c_opnd.append(opnd)
                c_cond.append(cond)
                c_carg.append(carg)
                c_pos.append(pos)
    order_txn: list[Any] = []
    order_pos: list[Any] = []
    if cols["txn"]:
        b.add(cols["txn"], cols["cell"], np.array(cols["kind"], np.int8), cols["opnd"],
              np.array(cols["cond"], np.int8), cols["carg"])
        order_txn += cols["txn"]
        order_pos += cols["pos"]
    if udfs["txn"]:  # parameter rows padded with zeros to the widest
        width = max(1, max(len(p) for p in udfs["params"]))
        rows = np.zeros((len(udfs["txn"]), width), np.float64)
        for j, p in enumerate(udfs["params"]):
            rows[j, : len(p)] = p
        b.add_udf(udfs["txn"], udfs["cell"], rows)
        order_txn += udfs["txn"]
        order_pos += udfs["pos"]
    # sum accesses grouped by source count (the builder takes rectangular sources)
    by_len: dict[int, list[int]] = {}
    for j, s in enumerate(sums["src"]):
        by_len.setdefault(len(s), []).append(j)
    for _, js in sorted(by_len.items()):
        b.add([sums["txn"][j] for j in js], [sums["cell"][j] for j in js],
              np.array([sums["kind"][j] for j in js], np.int8), [sums["opnd"][j] for j in js],
              sources=[sums["src"][j] for j in js])
        order_txn += [sums["txn"][j] for j in js]
        order_pos += [sums["pos"][j] for j in js]
    batch = b.build()
    if objs:
        batch.objects = objs
    # the builder sorts ops by transaction, stably: the same permutation orders the positions
    o = np.argsort(np.asarray(order_txn, np.int64), kind="stable")
    op_pos = np.concatenate([np.asarray(order_pos, np.int64)[o], np.asarray(objs.pos, np.int64)])
    return CompiledEvents(batch, details, op_pos)


def run_events(
    engine: TxnEngine, events: Sequence[Any], fn: Callable[[Any], Sequence[Access]],
    ts: Sequence[int] | None = None,
) -> list[EventOutcome]:
    """Run ``events`` as one batch (their own punctuation interval); outcomes in event order,
    each event's results in the order of its accesses.

    Timestamps default to the progress controller's next ones (after the last punctuation).
    """
    if ts is None:
        start = (engine.last_punctuation or 0) + 1
        stamps = np.arange(start, start + len(events), dtype=np.int64)
    else:
        stamps = np.asarray(ts, np.int64)
    ce = compile_events(engine.store, events, fn, stamps)
    batch = ce.batch
    res = engine.execute(batch)
    txns = batch.op_txn.tolist()
    values: list[Any] = res.op_result.tolist()
    if batch.objects:
        txns += batch.objects.txn
        values += res.object_results or [None] * len(batch.objects)
    # results in access order: sort by (transaction, position) once
    order = np.lexsort((ce.op_pos, np.asarray(txns, np.int64))).tolist()
    ordered = [values[i] for i in order]
    bounds = np.searchsorted(np.asarray(txns, np.int64)[order], np.arange(batch.num_txns + 1)).tolist()
    committed = res.committed.tolist()
    reasons = res.reason.tolist()
    out: list[EventOutcome] = []
    for t in range(batch.num_txns):
        reason = REASONS[reasons[t]]
        detail = ce.details.get(t) or res.details.get(t)
        if detail:
            reason = f"{reason}: {detail}"
        out.append(EventOutcome(committed[t], reason, tuple(ordered[bounds[t]:bounds[t + 1]])))
    return out
