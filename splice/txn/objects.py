"""Python-object state values: the slow path for state that fixed-width numbers cannot hold.

A table declares object columns (``StateTable(..., objects=("book",), object_initial=list)``);
each key then holds one Python object per such column (a list, a dict, ...), read with
:func:`~splice.txn.api.read_object` and changed with :func:`~splice.txn.api.update_object`::

    new = fn(copy_of_current, *args)        raise Abort("why") -> the transaction aborts

Semantics follow the numeric ones (:mod:`splice.txn.ops`): a transaction sees the state left by
the committed transactions before it; it commits iff every numeric condition and every object
function succeeds; an abort changes nothing (the function works on a deep copy, so an abort never
leaks a mutation). Unlike numeric accesses (which all see that state), a transaction's object
accesses run in their order, each seeing the ones before it: two updates of one object compose. A function that raises anything but :class:`Abort` aborts its
transaction with ``REASON_UDF`` and the message.

**Slow path.** A batch with object accesses runs on one thread in timestamp order: the
transactions without object accesses in runs through the compiled serial kernel, each one with
object accesses on its own (object functions are Python, called once per access, plus a deep copy
of the value). Correctness equals serial execution by construction; throughput is that of Python,
an interpreted call and a copy per object access (figures: docs/benchmarks.md, "Transactions").
A transaction aborted by an object function reports the pre-values for its numeric accesses, as
one aborted by a failed condition. Batches without object accesses keep the parallel schedulers. Object values are not versioned (no window reads); they are JSON-like data
(dicts, lists, tuples, str, int, float, bool, None), which snapshots hold as JSON (see
:mod:`splice.txn.state_tables`): a value of another type is refused when the store is snapshotted.
"""

from __future__ import annotations

import copy
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np

from splice.txn import _kernels as K
from splice.txn.ops import REASON_CONDITION, REASON_UDF, OpBatch, is_write_kind

__all__ = ["Abort", "ObjectOps", "run_with_objects"]


class Abort(Exception):  # noqa: N818 - the user-facing name says what raising it does
    """Raised by an object update function: its transaction aborts with this message."""


@dataclass
class ObjectOps:
    """A batch's object accesses, in access order within each transaction (``txn`` sorted).

    ``fn[j]`` is ``None`` for a read; otherwise ``fn[j](value, *args[j])`` returns the new value.
    ``pos[j]`` is the access's position among its event's accesses (for post-processing).
    """

    txn: list[int] = field(default_factory=list)
    table: list[int] = field(default_factory=list)
    column: list[str] = field(default_factory=list)
    key: list[int] = field(default_factory=list)
    fn: list[Callable[..., Any] | None] = field(default_factory=list)
    args: list[tuple[Any, ...]] = field(default_factory=list)
    pos: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.txn)

    def subset(self, txn_mask: np.ndarray, new_id: np.ndarray) -> ObjectOps:
        """The accesses of transactions where ``txn_mask`` holds, renumbered by ``new_id``."""
        keep = [j for j, t in enumerate(self.txn) if txn_mask[t]]
        return ObjectOps([int(new_id[self.txn[j]]) for j in keep], [self.table[j] for j in keep],
                         [self.column[j] for j in keep], [self.key[j] for j in keep],
                         [self.fn[j] for j in keep], [self.args[j] for j in keep],
                         [self.pos[j] for j in keep])


_ATOMIC = (int, float, str, bytes, bool, type(None))


def _copy(value: Any) -> Any:
    """A deep copy: immutable scalars as they are, containers through pickle (which walks lists
    and dicts in C, where ``copy.deepcopy`` walks them in Python), ``deepcopy`` when pickling
    fails."""
    if type(value) in _ATOMIC:
        return value
    try:
        return pickle.loads(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))
    except Exception:  # not picklable (a lambda inside): the slower generic copy
        return copy.deepcopy(value)


def _objects_of(store: Any, objs: ObjectOps, lo: int, hi: int, t: int,
                ) -> tuple[list[tuple[int, str, int, Any]], list[Any], int, str]:
    """Run transaction ``t``'s object accesses ``objs[lo:hi]`` on the current objects (nothing
    applied): (staged writes, results, reason, detail)."""
    staged: dict[tuple[int, str, int], Any] = {}
    results: list[Any] = []
    for j in range(lo, hi):
        where = (objs.table[j], objs.column[j], objs.key[j])
        cur = staged[where] if where in staged else store.get_object(*where)
        f = objs.fn[j]
        if f is None:
            results.append(_copy(cur))
            continue
        try:
            new = f(_copy(cur), *objs.args[j])
        except Abort as exc:
            return [], [], REASON_CONDITION, str(exc)
        except Exception as exc:  # the user function failed: abort this transaction only
            name = getattr(f, "__name__", repr(f))
            return [], [], REASON_UDF, f"{name} raised {type(exc).__name__}: {exc}"
        staged[where] = new
        results.append(_copy(new))
    return [(ti, col, key, v) for (ti, col, key), v in staged.items()], results, 0, ""


def run_with_objects(batch: OpBatch, refused: np.ndarray, store: Any, busy: int,
                     udf: Any) -> Any:
    """Serial execution of a batch with object accesses (see the module doc); an
    :class:`~splice.txn.txn_executor.Execution` whose ``info`` carries the object results, the
    per-transaction object abort reasons and their details."""
    from splice.txn.txn_executor import _dense, _serial_arrays, _serial_columns, _serial_finish

    objs = batch.objects
    assert objs is not None
    t0 = time.perf_counter()
    d = _dense(batch, store)
    st = _serial_arrays(batch, d, store)
    cur, last, vprev, committed, result = st.cur, st.last, st.vprev, st.committed, st.result
    ops, txns = _serial_columns(batch, d, refused)
    obj_reason = np.zeros(batch.num_txns, np.int8)
    details: dict[int, str] = {}
    obj_results: list[Any] = [None] * len(objs)
    starts = np.searchsorted(np.asarray(objs.txn, np.int64), np.arange(batch.num_txns + 1))
    t1 = time.perf_counter()

    args = (ops, txns, d.hist, st, 0, 0, busy, udf, batch.udf_params)
    # the kernel's compiled entry point for these argument types: one call per transaction with
    # object accesses, without the dispatcher typing every array again on each call
    # (docs/lab/transactions.md, "Object accesses")
    entry = K.executors(udf)[1].compile(tuple(numba.typeof(x) for x in args))
    head, tail = args[:4], args[6:]

    def kernel(lo_t: int, hi_t: int) -> None:
        entry(*head, lo_t, hi_t, *tail)

    run_lo = 0
    for t in np.flatnonzero(starts[1:] > starts[:-1]).tolist():
        if run_lo < t:
            kernel(run_lo, t)  # transactions without object accesses: compiled, in one call
        run_lo = t + 1
        if refused[t]:
            kernel(t, t + 1)
            continue
        writes, res, reason, detail = _objects_of(store, objs, int(starts[t]), int(starts[t + 1]), t)
        lo, hi = int(d.txn_ptr[t]), int(d.txn_ptr[t + 1])
        pre = cur[d.cell[lo:hi]].copy()
        kernel(t, t + 1)
        if reason:
            obj_reason[t] = reason
            details[t] = detail
            if committed[t]:  # the numeric part passed: undo it, as a failed condition does
                for i in range(hi - 1, lo - 1, -1):
                    if is_write_kind(batch.op_kind[i : i + 1])[0]:
                        last[d.cell[i]] = vprev[i]
                        result[i] = pre[i - lo]
                cur[d.cell[lo:hi]] = pre
                committed[t] = False
        elif committed[t]:
            for ti, col, key, v in writes:
                store.set_object(ti, col, key, v)
            for j, r in zip(range(int(starts[t]), int(starts[t + 1])), res, strict=True):
                obj_results[j] = r
    if run_lo < batch.num_txns:
        kernel(run_lo, batch.num_txns)
    t2 = time.perf_counter()
    ex = _serial_finish(batch, d, refused, st)
    ex.times = {"construct": t1 - t0, "explore": 0.0, "sync": 0.0, "lock": 0.0, "abort": 0.0,
                "useful": t2 - t1}
    ex.memory_bytes = batch.nbytes() + 4 * batch.num_ops * 8
    ex.info = {"object_results": obj_results, "object_reason": obj_reason, "details": details}
    return ex
