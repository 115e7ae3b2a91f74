"""numba kernels of the transaction engine: TPG levels and units, executors, rollback closure.

Every kernel here has a plain-Python twin in ``tests/txn/reference.py`` (the serial reference) that
the tests compare against. Kernels are compiled ``nogil`` so executor threads run in parallel;
cross-thread completion is published through ``state`` (an int64 array: 0 = BLK, 2 = EXE,
3 = ABT) with the atomic intrinsics of :mod:`splice.kernels.atomics`.

Arrays that travel together reach the TPG build and the executors as named tuples (numba types
them field by field and caches kernels over them): a batch's operations (:class:`OpColumns`)
and transactions (:class:`TxnColumns`), the store's cells (:class:`StoreCells`), the graph
(:class:`TPGArrays`), what an execution pass writes (:class:`RunArrays`, :class:`SerialState`).
Each kernel reads the fields into locals before its loops. The user function stays a separate
argument: numba prunes its call when it is ``None``, and a function-typed field would keep the
cached kernels from matching.
"""

from __future__ import annotations

from types import FunctionType
from typing import Any, NamedTuple

import numpy as np
from numba import njit

from splice.kernels.atomics import atomic_add, cycle_counter
from splice.kernels.atomics import atomic_load_acquire as atomic_load
from splice.kernels.atomics import atomic_store_release as atomic_store
from splice.kernels.atomics import sched_yield as yield_cpu

# Kinds and conditions, mirrored from splice.txn.ops (numba needs literals).
_READ, _WRITE, _ADD, _SUM_WRITE, _SUM_ADD, _WINDOW_READ, _MAX, _UDF = 0, 1, 2, 3, 4, 5, 6, 7
_EXE, _ABT = 2, 3


class OpColumns(NamedTuple):
    """A batch's operations, sorted by transaction, and the cells their sums read."""

    #: int64: each op's transaction
    txn: np.ndarray
    #: int64: its cell: a store cell id, or for the serial executors its index among the
    #: batch's gathered cells
    cell: np.ndarray
    #: int8: its kind (``READ`` ... ``UDF`` of :mod:`splice.txn.ops`)
    kind: np.ndarray
    #: float64: its operand (a window read's length, a UDF op's parameter row)
    operand: np.ndarray
    #: int8: its condition (0 none, 1 ``>=``, 2 ``<=``)
    cond: np.ndarray
    #: float64: the condition's argument
    cond_arg: np.ndarray
    #: int64 (ops + 1): op ``i`` sums the cells ``src_cell[src_ptr[i]:src_ptr[i + 1]]``
    src_ptr: np.ndarray
    #: int64: those cells, ids as in ``cell``
    src_cell: np.ndarray


class TxnColumns(NamedTuple):
    """A batch's transactions."""

    #: int64 (txns + 1): transaction ``t``'s ops are ``ptr[t]:ptr[t + 1]``
    ptr: np.ndarray
    #: int64: each transaction's timestamp (never decreasing; equal ones run in batch order)
    ts: np.ndarray
    #: bool: refused before execution (its ops are skipped)
    refused: np.ndarray


class StoreCells(NamedTuple):
    """The state store's flat cells, and the scratch over them that gives chains dense ids."""

    #: int64: where each table's cells start in ``values`` (a cell id is table << 40 | row)
    offsets: np.ndarray
    #: float64: every cell's value
    values: np.ndarray
    #: int64: per cell, its dense chain id in the batch being built (valid where stamped)
    dense_slot: np.ndarray
    #: int64: per cell, the build that last gave it a dense id
    stamp: np.ndarray
    #: this build's stamp
    stamp_id: int


class EmittedOps(NamedTuple):
    """The TPG's ops in timestamp order (reads first within a transaction), before they are
    sorted by chain: :func:`build_graph` hands them to :func:`_link`."""

    txn: np.ndarray
    cell: np.ndarray
    kind: np.ndarray
    operand: np.ndarray
    cond: np.ndarray
    cond_arg: np.ndarray
    #: int64: a write's first source READ (-1: none); its sources are consecutive
    src0: np.ndarray
    #: int64: its number of sources
    srcn: np.ndarray
    #: int64: the batch op it came from (-1: a source READ)
    user: np.ndarray


class TPGArrays(NamedTuple):
    """The task precedence graph as the executors read it (ops sorted by chain; see
    :class:`splice.txn.tpg.TPG`)."""

    pred: np.ndarray
    chain: np.ndarray
    init: np.ndarray
    kind: np.ndarray
    operand: np.ndarray
    cond: np.ndarray
    cond_arg: np.ndarray
    ts: np.ndarray
    txn: np.ndarray
    src_ptr: np.ndarray
    src_op: np.ndarray
    chk_ptr: np.ndarray
    chk_op: np.ndarray
    hist: np.ndarray


class RunArrays(NamedTuple):
    """What one execution pass over a TPG writes, per op, and the transactions it excludes."""

    #: int64: 0 until resolved, then EXE (2) or ABT (3); published atomically
    state: np.ndarray
    #: float64: the value the op found, and the one it left
    before: np.ndarray
    after: np.ndarray
    #: float64: its result
    result: np.ndarray
    #: bool: its condition failed; its user function raised
    failed: np.ndarray
    raised: np.ndarray
    #: bool per transaction: known to abort, its writes are skipped (lazy abort's redo)
    excluded: np.ndarray


class RunMode(NamedTuple):
    """How :func:`run_ops` executes: e-abort (``eager``) or not, whether to pass over ops already
    resolved (a redo), and the busy-work iterations per op."""

    eager: bool
    skip_done: bool
    busy_iters: int


class SerialState(NamedTuple):
    """What the serial executors read and write besides the batch."""

    #: float64: the value of each gathered cell
    cur: np.ndarray
    #: int64 per cell: the last op that wrote it in this batch (-1: none)
    last: np.ndarray
    #: per op: the previous write of its cell, its timestamp and value (window reads walk them)
    vprev: np.ndarray
    vts: np.ndarray
    vval: np.ndarray
    #: bool per transaction: committed
    committed: np.ndarray
    #: float64 per op: its result
    result: np.ndarray
    #: bool per op: its user function raised
    raised: np.ndarray


@njit(cache=True, nogil=True, inline="always")
def _is_write(k: int) -> bool:
    return (k == _WRITE or k == _ADD or k == _SUM_WRITE or k == _SUM_ADD or k == _MAX
            or k == _UDF)


@njit(cache=True, nogil=True, inline="always")
def _cond_ok(c: int, b: float, arg: float) -> bool:
    if c == 1:
        return b >= arg
    if c == 2:
        return b <= arg
    return True


@njit(nogil=True, inline="always")
def _call_udf(udf, b: float, udf_params: np.ndarray, row: float) -> tuple[float, bool, bool]:
    """``udf(b, params[row])`` as (value, ok, raised): a non-finite value or an exception fails
    the op (its transaction aborts); an exception is caught here, so no thread is left waiting.
    ``udf`` is ``None`` for engines without one: numba prunes the call at compile time."""
    if udf is None:
        return b, True, False
    try:
        v, ok = udf(b, udf_params[int(row)])
    except Exception:
        return np.nan, False, True
    v = float(v)
    return v, bool(ok) and np.isfinite(v), False


@njit(nogil=True, inline="always")
def _op_ok(udf, k: int, c: int, b: float, arg: float, operand: float,
           udf_params: np.ndarray) -> bool:
    """Does op's condition hold on pre-value ``b`` (a UDF op asks the user function)?"""
    if k == _UDF:
        return _call_udf(udf, b, udf_params, operand)[1]
    return _cond_ok(c, b, arg)


@njit(cache=True, nogil=True, inline="always")
def _apply(k: int, b: float, s: float, operand: float) -> float:
    if k == _WRITE:
        return operand
    if k == _ADD:
        return b + operand
    if k == _SUM_WRITE:
        return s + operand
    if k == _SUM_ADD:
        return b + s + operand
    if k == _MAX:
        return b if b >= operand else operand
    return b


@njit(cache=True, nogil=True)
def busy_work(iters: int, seed: float) -> float:
    """``iters`` rounds of arithmetic the compiler cannot remove (the UDF complexity knob)."""
    x = seed
    for _ in range(iters):
        x = x * 1.0000001 + 1e-9
    return x


@njit(cache=True, nogil=True)
def _wait(state: np.ndarray, j: int) -> int:
    """Spin until op ``j`` is resolved; return the cycles spent waiting."""
    if atomic_load(state, j) != 0:
        return 0
    c0 = cycle_counter()
    spins = 0
    while atomic_load(state, j) == 0:
        spins += 1
        if spins > 200:
            yield_cpu()
    return cycle_counter() - c0


# --------------------------------------------------------------------------------------------
# TPG construction
# --------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def chain_links(cell_sorted: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """For ops sorted by (cell, ts): TD predecessor (-1 at a chain head) and chain id."""
    n = cell_sorted.shape[0]
    pred = np.empty(n, np.int64)
    chain = np.empty(n, np.int64)
    c = -1
    for i in range(n):
        if i > 0 and cell_sorted[i] == cell_sorted[i - 1]:
            pred[i] = i - 1
        else:
            pred[i] = -1
            c += 1
        chain[i] = c
    return pred, chain, c + 1


@njit(cache=True, nogil=True)
def op_levels(
    proc: np.ndarray, pred: np.ndarray, kind: np.ndarray, txn: np.ndarray,
    src_ptr: np.ndarray, src_op: np.ndarray, chk_ptr: np.ndarray, chk_op: np.ndarray,
    eager: bool,
) -> tuple[np.ndarray, int]:
    """Longest-path level of every op (0-based); deps: TD, PD and, when eager, LD via checks."""
    n = proc.shape[0]
    level = np.zeros(n, np.int64)
    top = 0
    for w in range(n):
        i = proc[w]
        lv = 0
        p = pred[i]
        if p >= 0:
            lv = max(lv, level[p] + 1)
        for j in range(src_ptr[i], src_ptr[i + 1]):
            lv = max(lv, level[src_op[j]] + 1)
        if eager and _is_write(kind[i]):
            t = txn[i]
            for j in range(chk_ptr[t], chk_ptr[t + 1]):
                c = chk_op[j]
                pc = pred[c]
                if c != i and pc >= 0:
                    lv = max(lv, level[pc] + 1)
        level[i] = lv
        if lv + 1 > top:
            top = lv + 1
    return level, top


@njit(cache=True, nogil=True)
def chain_edges(
    pred: np.ndarray, chain: np.ndarray, kind: np.ndarray, txn: np.ndarray,
    src_ptr: np.ndarray, src_op: np.ndarray, chk_ptr: np.ndarray, chk_op: np.ndarray,
    eager: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Cross-chain dependency edges (from chain, to chain), with repeats."""
    n = pred.shape[0]
    cnt = 0
    for i in range(n):
        cnt += src_ptr[i + 1] - src_ptr[i]
        if eager and _is_write(kind[i]):
            t = txn[i]
            cnt += chk_ptr[t + 1] - chk_ptr[t]
    a = np.empty(cnt, np.int64)
    b = np.empty(cnt, np.int64)
    m = 0
    for i in range(n):
        ci = chain[i]
        for j in range(src_ptr[i], src_ptr[i + 1]):
            cs = chain[src_op[j]]
            if cs != ci:
                a[m] = cs
                b[m] = ci
                m += 1
        if eager and _is_write(kind[i]):
            t = txn[i]
            for j in range(chk_ptr[t], chk_ptr[t + 1]):
                cc = chain[chk_op[j]]
                if cc != ci and pred[chk_op[j]] >= 0:
                    a[m] = cc
                    b[m] = ci
                    m += 1
    return a[:m], b[:m]


@njit(cache=True, nogil=True)
def strongly_connected(n: int, ptr: np.ndarray, adj: np.ndarray) -> tuple[np.ndarray, int]:
    """Tarjan's SCCs of a CSR graph (iterative); component ids in reverse topological order."""
    index = np.full(n, -1, np.int64)
    low = np.zeros(n, np.int64)
    onstack = np.zeros(n, np.bool_)
    comp = np.full(n, -1, np.int64)
    stack = np.empty(n, np.int64)
    sp = 0
    cstack_v = np.empty(n, np.int64)
    cstack_e = np.empty(n, np.int64)
    idx = 0
    ncomp = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        csp = 0
        cstack_v[0] = root
        cstack_e[0] = ptr[root]
        csp = 1
        index[root] = idx
        low[root] = idx
        idx += 1
        stack[sp] = root
        sp += 1
        onstack[root] = True
        while csp > 0:
            v = cstack_v[csp - 1]
            e = cstack_e[csp - 1]
            if e < ptr[v + 1]:
                cstack_e[csp - 1] = e + 1
                w = adj[e]
                if index[w] < 0:
                    index[w] = idx
                    low[w] = idx
                    idx += 1
                    stack[sp] = w
                    sp += 1
                    onstack[w] = True
                    cstack_v[csp] = w
                    cstack_e[csp] = ptr[w]
                    csp += 1
                elif onstack[w]:
                    if index[w] < low[v]:
                        low[v] = index[w]
            else:
                csp -= 1
                if csp > 0:
                    u = cstack_v[csp - 1]
                    if low[v] < low[u]:
                        low[u] = low[v]
                if low[v] == index[v]:
                    while True:
                        sp -= 1
                        w = stack[sp]
                        onstack[w] = False
                        comp[w] = ncomp
                        if w == v:
                            break
                    ncomp += 1
    return comp, ncomp


@njit(cache=True, nogil=True)
def dag_levels(n: int, ea: np.ndarray, eb: np.ndarray) -> np.ndarray:
    """Longest-path levels of a DAG given as edges (Kahn's algorithm)."""
    indeg = np.zeros(n, np.int64)
    ptr = np.zeros(n + 1, np.int64)
    for k in range(ea.shape[0]):
        ptr[ea[k] + 1] += 1
        indeg[eb[k]] += 1
    for v in range(n):
        ptr[v + 1] += ptr[v]
    adj = np.empty(ea.shape[0], np.int64)
    fill = ptr[:-1].copy()
    for k in range(ea.shape[0]):
        adj[fill[ea[k]]] = eb[k]
        fill[ea[k]] += 1
    level = np.zeros(n, np.int64)
    queue = np.empty(n, np.int64)
    qh = 0
    qt = 0
    for v in range(n):
        if indeg[v] == 0:
            queue[qt] = v
            qt += 1
    while qh < qt:
        v = queue[qh]
        qh += 1
        for e in range(ptr[v], ptr[v + 1]):
            w = adj[e]
            if level[v] + 1 > level[w]:
                level[w] = level[v] + 1
            indeg[w] -= 1
            if indeg[w] == 0:
                queue[qt] = w
                qt += 1
    return level


@njit(cache=True, nogil=True)
def lpt_assign(sizes: np.ndarray, order: np.ndarray, nthreads: int) -> np.ndarray:
    """Longest-processing-time-first: each item (visited in ``order``) to the least-loaded thread."""
    load = np.zeros(nthreads, np.int64)
    owner = np.empty(sizes.shape[0], np.int64)
    for k in range(order.shape[0]):
        u = order[k]
        best = 0
        for t in range(1, nthreads):
            if load[t] < load[best]:
                best = t
        owner[u] = best
        load[best] += sizes[u]
    return owner


@njit(cache=True, nogil=True)
def staged_work(
    seq: np.ndarray, thread: np.ndarray, stage: np.ndarray, nstages: int, nthreads: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per-thread work lists from ``seq`` (ops in (stage, order)) with a barrier (-1) per stage."""
    counts = np.zeros(nthreads, np.int64)
    for k in range(seq.shape[0]):
        counts[thread[k]] += 1
    ptr = np.zeros(nthreads + 1, np.int64)
    for t in range(nthreads):
        ptr[t + 1] = ptr[t] + counts[t] + nstages
    work = np.empty(ptr[nthreads], np.int64)
    fill = ptr[:-1].copy()
    k = 0
    n = seq.shape[0]
    for s in range(nstages):
        while k < n and stage[k] == s:
            t = thread[k]
            work[fill[t]] = seq[k]
            fill[t] += 1
            k += 1
        for t in range(nthreads):
            work[fill[t]] = -1
            fill[t] += 1
    return work, ptr


@njit(cache=True, nogil=True)
def split_stages(stage: np.ndarray, nthreads: int) -> np.ndarray:
    """Within each stage (``stage`` sorted), split the ops evenly over threads, contiguously."""
    n = stage.shape[0]
    thread = np.empty(n, np.int64)
    k = 0
    while k < n:
        e = k
        while e < n and stage[e] == stage[k]:
            e += 1
        m = e - k
        for q in range(m):
            thread[k + q] = q * nthreads // m
        k = e
    return thread


# --------------------------------------------------------------------------------------------
# Executors
# --------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def run_ops(
    work: np.ndarray, wlo: int, whi: int, nthreads: int, bar: np.ndarray, graph: TPGArrays,
    run: RunArrays, mode: RunMode, udf, udf_params: np.ndarray,
) -> tuple[int, int, float]:
    """Execute ``work[wlo:whi]`` (op ids; -1 = barrier) of ``graph`` on one thread of
    ``nthreads`` (``bar``: the barrier counter they share), writing ``run``.

    Each op waits (spinning) until its dependencies are resolved: its TD predecessor, its PD
    sources and, when ``eager`` (e-abort), the predecessors of its transaction's conditional ops,
    whose conditions it evaluates itself to decide commit before writing. When not eager
    (l-abort, speculative) a write is applied as if its transaction commits and a failed condition
    is only recorded in ``failed``; the caller then rolls back and redoes what it affected.
    ``excluded[txn]`` (TStream-style redo) skips the writes of known-aborted transactions.
    A ``UDF`` op calls ``udf(pre, udf_params[row])`` for its value and its condition.
    Returns (cycles waiting on dependencies, cycles waiting at barriers, busy-work sink).
    """
    pred = graph.pred
    chain = graph.chain
    init = graph.init
    kind = graph.kind
    operand = graph.operand
    cond = graph.cond
    cond_arg = graph.cond_arg
    ts = graph.ts
    txn = graph.txn
    src_ptr = graph.src_ptr
    src_op = graph.src_op
    chk_ptr = graph.chk_ptr
    chk_op = graph.chk_op
    hist = graph.hist
    state = run.state
    before = run.before
    after = run.after
    result = run.result
    failed = run.failed
    raised = run.raised
    excluded = run.excluded
    eager = mode.eager
    skip_done = mode.skip_done
    busy_iters = mode.busy_iters
    sync = 0
    barrier_wait = 0
    k_bar = 0
    sink = 0.0
    for w in range(wlo, whi):
        i = work[w]
        if i < 0:
            c0 = cycle_counter()
            k_bar += 1
            atomic_add(bar, 0, 1)
            target = k_bar * nthreads
            spins = 0
            while atomic_load(bar, 0) < target:
                spins += 1
                if spins > 200:
                    yield_cpu()
            barrier_wait += cycle_counter() - c0
            continue
        if skip_done and atomic_load(state, i) != 0:
            continue
        p = pred[i]
        if p >= 0:
            sync += _wait(state, p)
            b = after[p]
        else:
            b = init[chain[i]]
        before[i] = b
        k = kind[i]
        s = 0.0
        for j in range(src_ptr[i], src_ptr[i + 1]):
            q = src_op[j]
            sync += _wait(state, q)
            s += after[q]
        if busy_iters > 0:
            sink += busy_work(busy_iters, b)
        if k == _UDF:
            uv, ok, rz = _call_udf(udf, b, udf_params, operand[i])
            raised[i] = rz
        else:
            uv = 0.0
            ok = _cond_ok(cond[i], b, cond_arg[i])
        t = txn[i]
        st = _EXE
        if k == _WINDOW_READ:
            lo = ts[i] - operand[i]
            acc = hist[i]
            j = p
            while j >= 0 and ts[j] >= lo:
                if _is_write(kind[j]) and state[j] == _EXE:
                    acc += after[j]
                j = pred[j]
            result[i] = acc
            after[i] = b
        elif _is_write(k):
            v = uv if k == _UDF else _apply(k, b, s, operand[i])
            commit = True
            if excluded[t]:
                commit = False
            elif eager:
                commit = ok
                for j in range(chk_ptr[t], chk_ptr[t + 1]):
                    if not commit:
                        break
                    c = chk_op[j]
                    if c == i:
                        continue
                    pc = pred[c]
                    if pc >= 0:
                        sync += _wait(state, pc)
                        bc = after[pc]
                    else:
                        bc = init[chain[c]]
                    commit = _op_ok(udf, kind[c], cond[c], bc, cond_arg[c], operand[c],
                                    udf_params)
            if commit:
                after[i] = v
            else:
                after[i] = b
                st = _ABT
            result[i] = after[i]
        else:
            after[i] = b
            result[i] = b
        failed[i] = not ok
        atomic_store(state, i, st)
    return sync, barrier_wait, sink


@njit(cache=True, nogil=True)
def run_serial(
    ops: OpColumns, txns: TxnColumns, hist: np.ndarray, st: SerialState, lo_t: int, hi_t: int,
    busy_iters: int, udf, udf_params: np.ndarray,
) -> float:
    """Serial execution in timestamp order of transactions ``lo_t..hi_t`` on dense cells
    ``st.cur`` (``ops`` name cells by their index there; ``hist``: each window read's logged
    history).

    Versions written in the batch are linked per cell (``last``/``vprev``) for window reads.
    """
    cell = ops.cell
    kind = ops.kind
    operand = ops.operand
    cond = ops.cond
    cond_arg = ops.cond_arg
    src_ptr = ops.src_ptr
    src_cell = ops.src_cell
    txn_ptr = txns.ptr
    txn_ts = txns.ts
    refused = txns.refused
    cur = st.cur
    last = st.last
    vprev = st.vprev
    vts = st.vts
    vval = st.vval
    committed = st.committed
    result = st.result
    raised = st.raised
    sink = 0.0
    for t in range(lo_t, hi_t):
        if refused[t]:
            committed[t] = False
            continue
        ok = True
        for i in range(txn_ptr[t], txn_ptr[t + 1]):
            b = cur[cell[i]]
            if busy_iters > 0:
                sink += busy_work(busy_iters, b)
            if kind[i] == _UDF:
                _, uok, rz = _call_udf(udf, b, udf_params, operand[i])
                raised[i] = rz
                if not uok:
                    ok = False
            elif not _cond_ok(cond[i], b, cond_arg[i]):
                ok = False
        committed[t] = ok
        for i in range(txn_ptr[t], txn_ptr[t + 1]):
            k = kind[i]
            b = cur[cell[i]]
            if k == _WINDOW_READ:
                lo = txn_ts[t] - operand[i]
                acc = hist[i]
                j = last[cell[i]]
                while j >= 0 and vts[j] >= lo:
                    acc += vval[j]
                    j = vprev[j]
                result[i] = acc
            elif k == _UDF:
                result[i] = _call_udf(udf, b, udf_params, operand[i])[0] if ok else b
            elif _is_write(k):
                s = 0.0
                for j in range(src_ptr[i], src_ptr[i + 1]):
                    s += cur[src_cell[j]]
                result[i] = _apply(k, b, s, operand[i]) if ok else b
            else:
                result[i] = b
        if ok:
            for i in range(txn_ptr[t], txn_ptr[t + 1]):
                if _is_write(kind[i]):
                    c = cell[i]
                    cur[c] = result[i]
                    vprev[i] = last[c]
                    vts[i] = txn_ts[t]
                    vval[i] = result[i]
                    last[c] = i
    return sink


@njit(cache=True, nogil=True)
def run_partitioned(
    tid: int, nthreads: int, bar: np.ndarray, txn_part: np.ndarray, ops: OpColumns,
    txns: TxnColumns, hist: np.ndarray, st: SerialState, busy_iters: int, udf,
    udf_params: np.ndarray,
) -> tuple[int, float]:
    """S-Store-like: thread ``tid`` owns partition ``tid``; it runs that partition's transactions in
    timestamp order (:func:`run_serial`), and a multi-partition transaction (``txn_part == -1``)
    takes every partition lock: all threads meet at a barrier, thread 0 runs it, all meet again.
    Returns lock cycles."""
    lock = 0
    k_bar = 0
    sink = 0.0
    ntx = txn_part.shape[0]
    for t in range(ntx):
        pt = txn_part[t]
        if pt == -1 and nthreads > 1:
            c0 = cycle_counter()
            k_bar += 1
            atomic_add(bar, 0, 1)
            spins = 0
            while atomic_load(bar, 0) < k_bar * nthreads:
                spins += 1
                if spins > 200:
                    yield_cpu()
            lock += cycle_counter() - c0
            if tid == 0:
                sink += run_serial(ops, txns, hist, st, t, t + 1, busy_iters, udf, udf_params)
            c0 = cycle_counter()
            k_bar += 1
            atomic_add(bar, 0, 1)
            spins = 0
            while atomic_load(bar, 0) < k_bar * nthreads:
                spins += 1
                if spins > 200:
                    yield_cpu()
            lock += cycle_counter() - c0
        elif pt == tid or (pt == -1 and nthreads == 1):
            sink += run_serial(ops, txns, hist, st, t, t + 1, busy_iters, udf, udf_params)
    return lock, sink


@njit(cache=True, nogil=True)
def window_history(
    log_cell: np.ndarray, log_ts: np.ndarray, log_csum: np.ndarray,
    q_cell: np.ndarray, q_from: np.ndarray,
) -> np.ndarray:
    """For each query: sum of logged versions of ``q_cell`` with ts >= ``q_from``.

    The log is sorted by (cell, ts); ``log_csum`` is its inclusive prefix sum of values.
    """
    m = q_cell.shape[0]
    out = np.zeros(m, np.float64)
    n = log_cell.shape[0]
    for k in range(m):
        c = q_cell[k]
        lo = np.searchsorted(log_cell, c, side="left")
        hi = np.searchsorted(log_cell, c, side="right")
        if lo == hi:
            continue
        a = lo + np.searchsorted(log_ts[lo:hi], q_from[k], side="left")
        if a < hi:
            base = log_csum[a - 1] if a > 0 else 0.0
            out[k] = log_csum[hi - 1] - base
    if n == 0:
        return out
    return out


# --------------------------------------------------------------------------------------------
# Batch and TPG construction in O(ops) passes
# --------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def sort_by_txn(
    n_txn: int, txn: np.ndarray, src_cnt: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stable counting sort of ops by transaction: (perm, txn_ptr, flat source index)."""
    n = txn.shape[0]
    ptr = np.zeros(n_txn + 1, np.int64)
    for i in range(n):
        ptr[txn[i] + 1] += 1
    for t in range(n_txn):
        ptr[t + 1] += ptr[t]
    fill = ptr[:-1].copy()
    perm = np.empty(n, np.int64)
    for i in range(n):
        perm[fill[txn[i]]] = i
        fill[txn[i]] += 1
    sstart = np.zeros(n + 1, np.int64)
    for i in range(n):
        sstart[i + 1] = sstart[i] + src_cnt[i]
    total = sstart[n]
    flat = np.empty(total, np.int64)
    m = 0
    for k in range(n):
        i = perm[k]
        for j in range(sstart[i], sstart[i + 1]):
            flat[m] = j
            m += 1
    return perm, ptr, flat


@njit(cache=True, nogil=True)
def txn_offsets(txn: np.ndarray, n_txn: int) -> np.ndarray:
    """int32 offsets of ops sorted by transaction: transaction ``t``'s ops are
    ``out[t]:out[t + 1]`` (the offsets of a list array of per-transaction results)."""
    out = np.zeros(n_txn + 1, np.int32)
    for i in range(txn.shape[0]):
        out[txn[i] + 1] += 1
    for t in range(n_txn):
        out[t + 1] += out[t]
    return out


@njit(cache=True, nogil=True)
def duplicate_writes(txn_ptr: np.ndarray, cell: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """Transactions that write one cell twice (ops sorted by transaction)."""
    n_txn = txn_ptr.shape[0] - 1
    dup = np.zeros(n_txn, np.bool_)
    for t in range(n_txn):
        for a in range(txn_ptr[t], txn_ptr[t + 1]):
            if not _is_write(kind[a]):
                continue
            for b in range(a + 1, txn_ptr[t + 1]):
                if _is_write(kind[b]) and cell[b] == cell[a]:
                    dup[t] = True
    return dup


@njit(cache=True, nogil=True)
def build_graph(ops: OpColumns, txns: TxnColumns, cells: StoreCells):
    """Decompose a batch (``ops`` sorted by transaction, cells by store id) into the TPG's
    arrays in O(ops).

    Ops are emitted in timestamp order, reads first within a transaction (each PD source
    becomes a READ in its cell's chain), given dense chain ids by first appearance
    (``cells.dense_slot``/``cells.stamp`` are scratch arrays over the store's flat cells), then
    counting-sorted by chain: stable, so every chain is in timestamp order.
    """
    op_txn = ops.txn
    op_cell = ops.cell
    op_kind = ops.kind
    op_operand = ops.operand
    op_cond = ops.cond
    op_cond_arg = ops.cond_arg
    src_ptr_u = ops.src_ptr
    src_cell_u = ops.src_cell
    txn_ptr_u = txns.ptr
    txn_ts = txns.ts
    refused = txns.refused
    n_txn = txn_ts.shape[0]
    n_user = op_cell.shape[0]
    n = 0
    ordered = src_ptr_u[n_user] == 0
    for t in range(n_txn):
        if refused[t]:
            ordered = False
            continue
        seen_write = False
        for i in range(txn_ptr_u[t], txn_ptr_u[t + 1]):
            n += 1 + src_ptr_u[i + 1] - src_ptr_u[i]
            if _is_write(op_kind[i]):
                seen_write = True
            elif seen_write:
                ordered = False
    if ordered:
        # already in timestamp order, reads first, nothing refused, no PD: use the columns as is
        return _link(n, EmittedOps(op_txn, op_cell, op_kind, op_operand, op_cond, op_cond_arg,
                                   np.full(n, -1, np.int64), np.zeros(n, np.int64),
                                   np.arange(n, dtype=np.int64)),
                     n_user, n_txn, txn_ts, cells)
    e_cell = np.empty(n, np.int64)
    e_kind = np.empty(n, np.int8)
    e_operand = np.empty(n, np.float64)
    e_cond = np.empty(n, np.int8)
    e_arg = np.empty(n, np.float64)
    e_txn = np.empty(n, np.int64)
    e_src0 = np.full(n, -1, np.int64)
    e_srcn = np.zeros(n, np.int64)
    e_user = np.full(n, -1, np.int64)
    p = 0
    for t in range(n_txn):
        if refused[t]:
            continue
        for i in range(txn_ptr_u[t], txn_ptr_u[t + 1]):
            if not _is_write(op_kind[i]):
                e_cell[p] = op_cell[i]
                e_kind[p] = op_kind[i]
                e_operand[p] = op_operand[i]
                e_cond[p] = op_cond[i]
                e_arg[p] = op_cond_arg[i]
                e_txn[p] = t
                e_user[p] = i
                p += 1
        for i in range(txn_ptr_u[t], txn_ptr_u[t + 1]):
            for j in range(src_ptr_u[i], src_ptr_u[i + 1]):
                e_cell[p] = src_cell_u[j]
                e_kind[p] = 0
                e_operand[p] = 0.0
                e_cond[p] = 0
                e_arg[p] = 0.0
                e_txn[p] = t
                p += 1
        for i in range(txn_ptr_u[t], txn_ptr_u[t + 1]):
            if _is_write(op_kind[i]):
                e_cell[p] = op_cell[i]
                e_kind[p] = op_kind[i]
                e_operand[p] = op_operand[i]
                e_cond[p] = op_cond[i]
                e_arg[p] = op_cond_arg[i]
                e_txn[p] = t
                e_user[p] = i
                e_srcn[p] = src_ptr_u[i + 1] - src_ptr_u[i]
                p += 1
    # source READs of write i were emitted in order: locate them per transaction
    p = 0
    for t in range(n_txn):
        if refused[t] or src_ptr_u[n_user] == 0:
            continue
        nreads = 0
        for i in range(txn_ptr_u[t], txn_ptr_u[t + 1]):
            if not _is_write(op_kind[i]):
                nreads += 1
        q = p + nreads
        nsrc = 0
        for i in range(txn_ptr_u[t], txn_ptr_u[t + 1]):
            nsrc += src_ptr_u[i + 1] - src_ptr_u[i]
        w = q + nsrc
        for i in range(txn_ptr_u[t], txn_ptr_u[t + 1]):
            if _is_write(op_kind[i]):
                e_src0[w] = q
                q += src_ptr_u[i + 1] - src_ptr_u[i]
                w += 1
            else:
                q += src_ptr_u[i + 1] - src_ptr_u[i]
        p = w
    return _link(n, EmittedOps(e_txn, e_cell, e_kind, e_operand, e_cond, e_arg, e_src0, e_srcn, e_user),
                 n_user, n_txn, txn_ts, cells)


@njit(cache=True, nogil=True)
def _link(n: int, emitted: EmittedOps, n_user: int, n_txn: int, txn_ts: np.ndarray, cells: StoreCells):
    """Chains, predecessors, PD and LD indexes of the ``n`` ops ``emitted`` in timestamp order
    (reads first) by ``n_txn`` transactions from ``n_user`` batch ops."""
    e_txn = emitted.txn
    e_cell = emitted.cell
    e_kind = emitted.kind
    e_operand = emitted.operand
    e_cond = emitted.cond
    e_arg = emitted.cond_arg
    e_src0 = emitted.src0
    e_srcn = emitted.srcn
    e_user = emitted.user
    offsets = cells.offsets
    values = cells.values
    dense_slot = cells.dense_slot
    stamp = cells.stamp
    stamp_id = cells.stamp_id
    mask = (1 << 40) - 1
    user_pos = np.full(n_user, -1, np.int64)
    # dense chain ids by first appearance, counting chain lengths on the way
    cstart = np.zeros(n + 1, np.int64)
    dense = np.empty(n, np.int64)
    chain_cell = np.empty(n, np.int64)
    init = np.empty(n, np.float64)
    nch = 0
    for q in range(n):
        c = e_cell[q]
        f = offsets[c >> 40] + (c & mask)
        if stamp[f] != stamp_id:
            stamp[f] = stamp_id
            dense_slot[f] = nch
            chain_cell[nch] = c
            init[nch] = values[f]
            nch += 1
        d = dense_slot[f]
        dense[q] = d
        cstart[d + 1] += 1
    # counting sort by chain
    for c in range(nch):
        cstart[c + 1] += cstart[c]
    fill = cstart[:-1].copy()
    pos = np.empty(n, np.int64)
    for q in range(n):
        pos[q] = fill[dense[q]]
        fill[dense[q]] += 1
    kind = np.empty(n, np.int8)
    operand = np.empty(n, np.float64)
    cond = np.empty(n, np.int8)
    cond_arg = np.empty(n, np.float64)
    txn = np.empty(n, np.int64)
    ts = np.empty(n, np.int64)
    chain = np.empty(n, np.int64)
    pred = np.empty(n, np.int64)
    cnt = np.zeros(n + 1, np.int64)
    for q in range(n):
        i = pos[q]
        kind[i] = e_kind[q]
        operand[i] = e_operand[q]
        cond[i] = e_cond[q]
        cond_arg[i] = e_arg[q]
        txn[i] = e_txn[q]
        ts[i] = txn_ts[e_txn[q]]
        chain[i] = dense[q]
        cnt[i + 1] = e_srcn[q]
        if e_user[q] >= 0:
            user_pos[e_user[q]] = i
    for i in range(n):
        pred[i] = i - 1 if i > 0 and chain[i - 1] == chain[i] else -1
        cnt[i + 1] += cnt[i]
    src_op = np.empty(cnt[n], np.int64)
    for q in range(n):
        i = pos[q]
        for k in range(e_srcn[q]):
            src_op[cnt[i] + k] = pos[e_src0[q] + k]
    chk_ptr = np.zeros(n_txn + 1, np.int64)
    txn_ptr = np.zeros(n_txn + 1, np.int64)
    nchk = 0
    for q in range(n):
        txn_ptr[e_txn[q] + 1] += 1
        if e_cond[q] != 0:
            chk_ptr[e_txn[q] + 1] += 1
            nchk += 1
    for t in range(n_txn):
        txn_ptr[t + 1] += txn_ptr[t]
        chk_ptr[t + 1] += chk_ptr[t]
    chk_op = np.empty(nchk, np.int64)
    k = 0
    for q in range(n):
        if e_cond[q] != 0:
            chk_op[k] = pos[q]
            k += 1
    return (pos, chain, pred, nch, chain_cell[:nch].copy(), init[:nch].copy(), kind, operand,
            cond, cond_arg, txn, ts, cnt, src_op, chk_ptr, chk_op, txn_ptr, user_pos)


@njit(cache=True, nogil=True)
def group_by_owner(seq: np.ndarray, owner_of: np.ndarray, nthreads: int) -> tuple[np.ndarray, np.ndarray]:
    """Stable counting sort of ``seq`` by ``owner_of[k]`` (per-thread lists, order kept)."""
    n = seq.shape[0]
    ptr = np.zeros(nthreads + 1, np.int64)
    for k in range(n):
        ptr[owner_of[k] + 1] += 1
    for t in range(nthreads):
        ptr[t + 1] += ptr[t]
    fill = ptr[:-1].copy()
    out = np.empty(n, np.int64)
    for k in range(n):
        o = owner_of[k]
        out[fill[o]] = seq[k]
        fill[o] += 1
    return out, ptr


@njit(cache=True, nogil=True)
def chain_owner_ops(proc: np.ndarray, chain: np.ndarray, owner: np.ndarray) -> np.ndarray:
    out = np.empty(proc.shape[0], np.int64)
    for k in range(proc.shape[0]):
        out[k] = owner[chain[proc[k]]]
    return out


@njit(cache=True, nogil=True)
def txn_failures(txn: np.ndarray, failed: np.ndarray, n_txn: int) -> np.ndarray:
    out = np.zeros(n_txn, np.bool_)
    for i in range(txn.shape[0]):
        if failed[i]:
            out[txn[i]] = True
    return out


@njit(cache=True, nogil=True)
def chain_finals(chain: np.ndarray, after: np.ndarray, nch: int) -> np.ndarray:
    """Value after the last op of each chain (ops sorted by chain)."""
    out = np.empty(nch, np.float64)
    for i in range(chain.shape[0]):
        out[chain[i]] = after[i]
    return out


@njit(cache=True, nogil=True)
def scatter_cells(offsets: np.ndarray, values: np.ndarray, cells: np.ndarray, v: np.ndarray) -> None:
    mask = (1 << 40) - 1
    for k in range(cells.shape[0]):
        c = cells[k]
        values[offsets[c >> 40] + (c & mask)] = v[k]


@njit(cache=True, nogil=True)
def gather_cells(offsets: np.ndarray, values: np.ndarray, cells: np.ndarray) -> np.ndarray:
    mask = (1 << 40) - 1
    out = np.empty(cells.shape[0], np.float64)
    for k in range(cells.shape[0]):
        c = cells[k]
        out[k] = values[offsets[c >> 40] + (c & mask)]
    return out


@njit(cache=True, nogil=True)
def chain_blocks(chain_len: np.ndarray, nthreads: int) -> np.ndarray:
    """Owner of each chain: contiguous runs of chains with about equal op counts per thread
    (contiguous, so threads write disjoint regions of the op arrays: no false sharing)."""
    nch = chain_len.shape[0]
    total = 0
    for c in range(nch):
        total += chain_len[c]
    owner = np.empty(nch, np.int64)
    acc = 0
    for c in range(nch):
        t = (acc * nthreads) // max(total, 1)
        owner[c] = t if t < nthreads else nthreads - 1
        acc += chain_len[c]
    return owner


@njit(cache=True, nogil=True)
def reset_closure(proc: np.ndarray, pred: np.ndarray, txn: np.ndarray, src_ptr: np.ndarray,
                  src_op: np.ndarray, changed: np.ndarray, first: int, txn_ptr: np.ndarray,
                  state: np.ndarray, failed: np.ndarray, raised: np.ndarray) -> int:
    """Reset the ops whose value depends on a transaction in ``changed`` through data edges
    only, for a redo; returns how many.

    In timestamp order: an op is affected when its transaction changed, or its TD predecessor or
    a PD source is affected. With commit decisions fixed (lazy abort with an exclusion set),
    these are exactly the ops a change of exclusions can alter. No op of a transaction before
    ``first`` (the earliest changed one) can be affected, so the walk starts there.
    """
    n = proc.shape[0]
    aff = np.zeros(n, np.bool_)
    count = 0
    for w in range(txn_ptr[first], n):
        i = proc[w]
        a = changed[txn[i]]
        p = pred[i]
        if not a and p >= 0 and aff[p]:
            a = True
        if not a:
            for j in range(src_ptr[i], src_ptr[i + 1]):
                if aff[src_op[j]]:
                    a = True
                    break
        if a:
            aff[i] = True
            state[i] = 0
            failed[i] = False
            raised[i] = False
            count += 1
    return count


# --------------------------------------------------------------------------------------------
# Executor variants for a user function
# --------------------------------------------------------------------------------------------
#
# The cached executors above are compiled with ``udf=None``. A user function is a numba
# dispatcher, and numba's on-disk cache never matches a dispatcher-typed argument again in a new
# process: it would compile and write a new cache entry on every run. So a user function gets
# uncached twins of the executors (same code; compiled once per process and function).


def _uncached(fn: Any, **rebind: Any) -> Any:
    """An uncached njit twin of the cached kernel ``fn`` (globals in ``rebind`` replaced)."""
    py = fn.py_func
    g = dict(py.__globals__)
    g.update(rebind)
    twin = FunctionType(py.__code__, g, py.__name__, py.__defaults__, py.__closure__)
    twin.__doc__ = py.__doc__
    return njit(nogil=True)(twin)


run_ops_udf = _uncached(run_ops)
run_serial_udf = _uncached(run_serial)
run_partitioned_udf = _uncached(run_partitioned, run_serial=run_serial_udf)


def executors(udf: Any) -> tuple[Any, Any, Any]:
    """(run_ops, run_serial, run_partitioned) for ``udf`` (``None``: the cached kernels)."""
    if udf is None:
        return run_ops, run_serial, run_partitioned
    return run_ops_udf, run_serial_udf, run_partitioned_udf


@njit(cache=True, nogil=True)
def tpg_counts(chain, n_chains, txn_ptr, kind, sum_write, sum_add):  # type: ignore[no-untyped-def]
    """The decision model's TPG counts in one pass each: (longest chain, operations of
    multi-operation transactions, summation operations)."""
    lengths = np.zeros(max(n_chains, 1), np.int64)
    for i in range(chain.shape[0]):
        lengths[chain[i]] += 1
    longest = 0
    for c in range(lengths.shape[0]):
        if lengths[c] > longest:
            longest = lengths[c]
    multi = 0
    for t in range(txn_ptr.shape[0] - 1):
        k = txn_ptr[t + 1] - txn_ptr[t]
        if k > 1:
            multi += k
    sums = 0
    for i in range(kind.shape[0]):
        if kind[i] == sum_write or kind[i] == sum_add:
            sums += 1
    return longest, multi, sums
