"""Transactional applications and their workload generators (MorphStream's parameters).

Each application turns a columnar event table into batches of transactions, one batch per
punctuation interval, built column-wise (no per-event Python). A builder,
``build(engine, events, lo, hi)``, reads any mapping of column name to NumPy array, so the
engine's transactional operator runs it unchanged (:mod:`splice.workloads.txn_jobs`). Bad input
aborts only its event, with its reason: a non-finite amount ``REASON_OPERAND``, a key outside
the table's declared ``0..keys-1`` ``REASON_KEY`` (a table never grows to a key an event names).

* **Streaming Ledger (sl)**: tables ``accounts`` and ``book_entries``. A deposit adds to one
  account and one book entry; a transfer moves an amount between two accounts and a second amount
  between two book entries, each debit conditional on ``balance >= amount``. *Insufficient balance
  aborts the whole transfer* (no partial transfer, no negative balance, the event is reported
  aborted with reason "condition failed") rather than rejecting it in pre-processing, because the
  balance is only known in timestamp order during execution.
* **GrepSum (gs)**: table ``values`` (with versions for windows) and ``sums``. An update event
  writes ``keys_per_access`` values; a sum event writes ``sums[k0] = sum(values[k1..kr])`` (a
  parametric dependency); every ``window_trigger``-th event is a window read summing the versions
  of ``window_keys`` values within ``window`` timestamps. With ``nd_ratio`` > 0 that fraction of
  sum events reads non-deterministic keys: ``values[(values[seed] + j) % keys]``, resolved at
  execution time.
* **Toll Processing (tp)**: table ``segments`` with columns ``speed_sum`` and ``count``; each
  position report reads both (toll from the pre-state) and adds its speed and one vehicle.
  Segments split into two groups (group 1 skewed with aborts, group 2 uniform) for nested
  configurations.
* **Stock exchange join (sej)**: tables ``traded`` and ``quoted``; a trade writes its volume as a
  new version of ``traded[stock]`` and probes ``quoted[stock]`` with a window read (sum of quote
  volumes in the window), and symmetrically: the hash window join of Diba as transactions.

Common parameters: ``keys``, ``skew`` (Zipf exponent, 0 uniform), ``abort_ratio`` (events made to
abort: they carry a condition that cannot hold), ``multi_access`` (share of multi-key events),
``keys_per_access``, ``deposit_ratio``, ``cyclic`` (GrepSum: when false, sums read only keys
below the one they write, so chains form no cycles). ``phased_sl`` concatenates MorphStream's four
phases of the dynamic workload.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
from numba import njit

from splice.core.errors import PlanError
from splice.txn.ops import (
    ADD,
    COND_GE,
    READ,
    REASON_KEY,
    REASON_OPERAND,
    SUM_WRITE,
    WINDOW_READ,
    WRITE,
    OpBatch,
    OpBatchBuilder,
)
from splice.txn.state_tables import StateStore, StateTable
from splice.txn.txn_engine import BatchResult, NonDeterministic, TxnEngine

__all__ = ["TxnWorkload", "TxnApp", "zipf_keys", "make_app", "phased_sl", "APPS", "run_app",
           "events_from_file", "EVENT_COLUMNS"]

#: A condition argument no balance reaches: events chosen to abort carry it.
NEVER = 1e15


@dataclass(frozen=True)
class TxnWorkload:
    """Generator parameters (MorphStream's knobs)."""

    events: int = 100_000
    keys: int = 10_000
    skew: float = 0.0
    abort_ratio: float = 0.0
    punctuation: int = 10_240
    multi_access: float = 1.0
    keys_per_access: int = 2
    deposit_ratio: float = 0.5
    cyclic: bool = True
    window: int = 1_000
    window_trigger: int = 100
    window_keys: int = 10
    nd_ratio: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.abort_ratio <= 1.0:
            raise PlanError(f"abort_ratio must be in 0..1, got {self.abort_ratio}")
        if self.skew < 0:
            raise PlanError(f"skew must be >= 0, got {self.skew}")
        if self.keys < 2 or self.events < 0 or self.punctuation < 1:
            raise PlanError("need keys >= 2, events >= 0, punctuation >= 1")


def zipf_keys(rng: np.random.Generator, n: int, keys: int, skew: float) -> np.ndarray:
    """``n`` keys in ``0..keys-1``, P(k) proportional to 1/(k+1)**skew (uniform when 0)."""
    if skew == 0:
        return rng.integers(0, keys, n, dtype=np.int64)
    w = 1.0 / np.arange(1, keys + 1, dtype=np.float64) ** skew
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, rng.random(n)), keys - 1).astype(np.int64)


def _distinct(rng: np.random.Generator, a: np.ndarray, b: np.ndarray, keys: int) -> np.ndarray:
    same = a == b
    b = b.copy()
    b[same] = (b[same] + 1 + rng.integers(0, keys - 1, int(same.sum()))) % keys
    return b


@dataclass
class TxnApp:
    """An application: its tables, its events (columns) and how a slice becomes a batch."""

    name: str
    tables: list[StateTable]
    events: dict[str, np.ndarray]
    build: Any  # (engine, events, lo, hi) -> OpBatch
    post: Any = None  # (events, lo, hi, batch, result) -> output columns
    nested: dict[int, str] = field(default_factory=dict)

    @property
    def num_events(self) -> int:
        return int(next(iter(self.events.values())).shape[0])


def _declared(st: StateStore, tables: Sequence[int], keys: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray | None]:
    """``keys`` with those outside a table's declared ``0..keys-1`` replaced by 0, and where
    they were (``None`` when every key is declared): the builder refuses their events with
    ``REASON_KEY`` rather than grow a table to whatever key an event names."""
    bad: np.ndarray | None = None
    for t in tables:
        m = st.undeclared_keys(t, keys)
        if m is not None:
            bad = m if bad is None else bad | m
    if bad is None:
        return keys, None
    return np.where(bad, 0, keys), bad


# ------------------------------------------------------------------ Streaming Ledger


def _sl_events(w: TxnWorkload, rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = w.events
    deposit = rng.random(n) < w.deposit_ratio
    a = zipf_keys(rng, n, w.keys, w.skew)
    b = _distinct(rng, a, zipf_keys(rng, n, w.keys, w.skew), w.keys)
    return {
        "ts": np.arange(1, n + 1, dtype=np.int64),
        "deposit": deposit,
        "src": a,
        "dst": b,
        "amount": rng.integers(1, 100, n).astype(np.float64),
        "book_amount": rng.integers(1, 100, n).astype(np.float64),
        "abort": rng.random(n) < w.abort_ratio,
    }


@njit(cache=True, nogil=True)
def _sl_ops(deposit: np.ndarray, abort: np.ndarray, a_src: np.ndarray, a_dst: np.ndarray,
            b_src: np.ndarray, b_dst: np.ndarray, amt: np.ndarray, bamt: np.ndarray):
    """SL events -> operations, already in transaction order (one pass, no sort)."""
    n = deposit.shape[0]
    m = 0
    for e in range(n):
        m += (2 + (1 if abort[e] else 0)) if deposit[e] else 4
    txn = np.empty(m, np.int64)
    cell = np.empty(m, np.int64)
    kind = np.empty(m, np.int8)
    opnd = np.empty(m, np.float64)
    cond = np.zeros(m, np.int8)
    carg = np.zeros(m, np.float64)
    k = 0
    for e in range(n):
        if deposit[e]:
            if abort[e]:  # reads first: the order the TPG builder takes without re-sorting
                txn[k], cell[k], kind[k], opnd[k] = e, a_src[e], READ, 0.0
                cond[k], carg[k] = COND_GE, NEVER
                k += 1
            txn[k], cell[k], kind[k], opnd[k] = e, a_src[e], ADD, amt[e]
            txn[k + 1], cell[k + 1], kind[k + 1], opnd[k + 1] = e, b_src[e], ADD, bamt[e]
            k += 2
        else:
            txn[k], cell[k], kind[k], opnd[k] = e, a_src[e], ADD, -amt[e]
            cond[k], carg[k] = COND_GE, NEVER if abort[e] else amt[e]
            txn[k + 1], cell[k + 1], kind[k + 1], opnd[k + 1] = e, a_dst[e], ADD, amt[e]
            txn[k + 2], cell[k + 2], kind[k + 2], opnd[k + 2] = e, b_src[e], ADD, -bamt[e]
            cond[k + 2], carg[k + 2] = COND_GE, bamt[e]
            txn[k + 3], cell[k + 3], kind[k + 3], opnd[k + 3] = e, b_dst[e], ADD, bamt[e]
            k += 4
    return txn, cell, kind, opnd, cond, carg


def _sl_build(engine: TxnEngine, ev: Mapping[str, np.ndarray], lo: int, hi: int) -> OpBatch:
    """Deposits and transfers of events ``lo..hi``; a non-numeric amount aborts its event, so
    does an account outside the declared keys (a deposit names ``src`` only)."""
    st = engine.store
    deposit = ev["deposit"][lo:hi]
    src, src_bad = _declared(st, (0, 1), ev["src"][lo:hi])
    dst, dst_bad = _declared(st, (0, 1), ev["dst"][lo:hi])
    amt, bamt = ev["amount"][lo:hi], ev["book_amount"][lo:hi]
    bad = ~(np.isfinite(amt) & np.isfinite(bamt))
    if bad.any():
        amt, bamt = np.where(bad, 0.0, amt), np.where(bad, 0.0, bamt)
    txn, cell, kind, opnd, cond, carg = _sl_ops(
        deposit, ev["abort"][lo:hi], st.cells(0, src), st.cells(0, dst),
        st.cells(1, src), st.cells(1, dst), amt, bamt)
    reason = np.where(bad, REASON_OPERAND, 0).astype(np.int8)
    if src_bad is not None:
        reason[src_bad] = REASON_KEY
    if dst_bad is not None:
        reason[dst_bad & ~deposit] = REASON_KEY
    return OpBatch(
        txn_ts=np.ascontiguousarray(ev["ts"][lo:hi]), op_txn=txn, op_cell=cell, op_kind=kind,
        op_operand=opnd, op_cond=cond, op_cond_arg=carg,
        src_ptr=np.zeros(txn.shape[0] + 1, np.int64), src_cell=np.zeros(0, np.int64),
        txn_reason=reason, txn_group=np.zeros(0, np.int32))


def make_sl(w: TxnWorkload) -> TxnApp:
    rng = np.random.default_rng(w.seed)
    tables = [StateTable("accounts", w.keys, initial=10_000.0),
              StateTable("book_entries", w.keys, initial=10_000.0)]
    return TxnApp("sl", tables, _sl_events(w, rng), _sl_build)


def phased_sl(events_per_phase: int, keys: int, seed: int = 0,
              punctuation: int = 10_240) -> list[tuple[str, TxnWorkload]]:
    """MorphStream's dynamic workload: (1) deposits, uniform; (2) skew rising; (3) transfers rising;
    (4) aborts rising. Each phase is a list of sub-phases with its own parameters."""
    phases: list[tuple[str, TxnWorkload]] = []
    base = TxnWorkload(events=events_per_phase // 4, keys=keys, punctuation=punctuation, seed=seed)
    for i in range(4):
        phases.append(("1-deposits", replace(base, deposit_ratio=0.95, seed=seed + i)))
    for i, z in enumerate((0.4, 0.8, 1.0, 1.2)):
        phases.append(("2-skew", replace(base, deposit_ratio=0.95, skew=z, seed=seed + 10 + i)))
    for i, dr in enumerate((0.7, 0.5, 0.3, 0.1)):
        phases.append(("3-transfers", replace(base, deposit_ratio=dr, skew=0.4, seed=seed + 20 + i)))
    for i, ar in enumerate((0.01, 0.05, 0.1, 0.3)):
        phases.append(("4-aborts", replace(base, deposit_ratio=0.1, skew=0.4, abort_ratio=ar,
                                           seed=seed + 30 + i)))
    return phases


# ------------------------------------------------------------------ GrepSum


def _gs_events(w: TxnWorkload, rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = w.events
    r = max(w.keys_per_access, 1)
    kind = np.where(rng.random(n) < 0.5, 0, 1)  # 0 update, 1 sum
    kind[(np.arange(n) % w.window_trigger) == w.window_trigger - 1] = 2  # window read
    multi = rng.random(n) < w.multi_access
    keys = zipf_keys(rng, n * (r + 1), w.keys, w.skew).reshape(n, r + 1)
    if not w.cyclic:
        # sums write key k0 and read keys < k0 only: the chain graph has no cycles
        keys[:, 0] = np.maximum(keys[:, 0], 1)
        keys[:, 1:] = keys[:, 1:] % keys[:, :1]
    nd = (kind == 1) & (rng.random(n) < w.nd_ratio)
    return {
        "ts": np.arange(1, n + 1, dtype=np.int64),
        "kind": kind.astype(np.int8),
        "keys": keys,
        "nkeys": np.where(multi, r, 1).astype(np.int64),
        "value": rng.integers(0, 100, n).astype(np.float64),
        "abort": rng.random(n) < w.abort_ratio,
        "nd": nd,
        "wkeys": zipf_keys(rng, n * w.window_keys, w.keys, w.skew).reshape(n, w.window_keys),
    }


@dataclass(frozen=True)
class _GsBuild:
    """GrepSum's builder: update, sum and window-read events of ``lo..hi`` as one batch (and
    the non-deterministic keys of its sums). A key outside the declared ones aborts its event."""

    window: int
    keys: int

    def __call__(self, engine: TxnEngine, ev: Mapping[str, np.ndarray], lo: int, hi: int) -> Any:
        st = engine.store
        b = OpBatchBuilder(ev["ts"][lo:hi])
        kind, nk = ev["kind"][lo:hi], ev["nkeys"][lo:hi]
        ab, val = ev["abort"][lo:hi], ev["value"][lo:hi]
        idx = np.arange(hi - lo, dtype=np.int64)
        keys, bad = _declared(st, (0, 1), ev["keys"][lo:hi])
        if bad is not None:
            b.abort(idx[bad.any(axis=1)], REASON_KEY)
        r = keys.shape[1] - 1
        for j in range(r):  # update: write values[k_j] for j < nkeys
            m = (kind == 0) & (nk > j)
            b.add(idx[m], st.cells(0, keys[m, j + 1]), WRITE, val[m] + j)
        m = kind == 1
        if m.any():
            ks = keys[m]
            srcs = st.cells(0, ks[:, 1:].reshape(-1)).reshape(-1, r)
            b.add(idx[m], st.cells(1, ks[:, 0]), SUM_WRITE, 0.0, sources=srcs)
        m = kind == 2
        if m.any():
            wk, wbad = _declared(st, (0,), ev["wkeys"][lo:hi][m])
            if wbad is not None:
                b.abort(idx[m][wbad.any(axis=1)], REASON_KEY)
            cnt = wk.shape[1]
            b.add(np.repeat(idx[m], cnt), st.cells(0, wk.reshape(-1)), WINDOW_READ, float(self.window))
        if ab.any():
            b.add(idx[ab], st.cells(1, keys[ab, 0]), READ, 0.0, COND_GE, NEVER)
        batch = b.build()
        nd = ev["nd"][lo:hi]
        if not nd.any():
            return batch
        # non-deterministic sums: source j reads values[(values[k1] + j) % keys], resolved at
        # execution time (the engine cuts the batch there)
        ops = np.flatnonzero((batch.op_kind == SUM_WRITE) & nd[batch.op_txn])
        cnt = batch.src_ptr[ops + 1] - batch.src_ptr[ops]
        slot = batch.num_ops + np.repeat(batch.src_ptr[ops], cnt) + _ranges(cnt)
        seed = st.cells(0, keys[batch.op_txn[ops], 1])
        return batch, NonDeterministic(
            slot=slot, seed_cell=np.repeat(seed, cnt), offset=_ranges(cnt),
            table=np.zeros(slot.shape[0], np.int64), modulus=np.full(slot.shape[0], self.keys))


def _ranges(counts: np.ndarray) -> np.ndarray:
    """0..c-1 for each c in ``counts``, concatenated."""
    total = int(counts.sum())
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(total, dtype=np.int64) - starts


def make_gs(w: TxnWorkload) -> TxnApp:
    rng = np.random.default_rng(w.seed)
    tables = [StateTable("values", w.keys, history=max(w.window, 1)),
              StateTable("sums", w.keys)]
    return TxnApp("gs", tables, _gs_events(w, rng), _GsBuild(w.window, w.keys))


# ------------------------------------------------------------------ Toll Processing


def _tp_events(w: TxnWorkload, rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = w.events
    half = max(w.keys // 2, 1)
    group = (rng.random(n) < 0.5).astype(np.int32)  # 0: skewed + aborts, 1: uniform
    seg = np.where(group == 0, zipf_keys(rng, n, half, max(w.skew, 1.0)),
                   half + rng.integers(0, w.keys - half, n))
    abort = np.where(group == 0, rng.random(n) < max(w.abort_ratio, 0.0), rng.random(n) < w.abort_ratio / 10)
    return {
        "ts": np.arange(1, n + 1, dtype=np.int64),
        "segment": seg.astype(np.int64),
        "speed": rng.integers(10, 120, n).astype(np.float64),
        "group": group,
        "abort": abort,
    }


def _tp_build(engine: TxnEngine, ev: Mapping[str, np.ndarray], lo: int, hi: int) -> OpBatch:
    """Position reports of ``lo..hi``: read the segment's sums, add speed and one vehicle; a
    non-numeric speed or a segment outside the declared ones aborts its event."""
    st = engine.store
    b = OpBatchBuilder(ev["ts"][lo:hi])
    b.group[:] = ev["group"][lo:hi]
    speed, ab = ev["speed"][lo:hi], ev["abort"][lo:hi]
    idx = np.arange(hi - lo, dtype=np.int64)
    seg, bad = _declared(st, (0,), ev["segment"][lo:hi])
    if bad is not None:
        b.abort(idx[bad], REASON_KEY)
    s_cells, c_cells = st.cells(0, seg, 0), st.cells(0, seg, 1)
    b.add(idx, s_cells, READ)
    b.add(idx, c_cells, READ, 0.0, COND_GE, np.where(ab, NEVER, 0.0))
    b.add(idx, s_cells, ADD, speed)
    b.add(idx, c_cells, ADD, 1.0)
    return b.build()


def _tp_post(ev: dict[str, np.ndarray], lo: int, hi: int, batch: OpBatch,
             op_result: np.ndarray) -> dict[str, np.ndarray]:
    n = hi - lo
    speed_sum = op_result[:n]
    count = op_result[n:2 * n]
    avg = np.where(count > 0, speed_sum / np.maximum(count, 1), 0.0)
    toll = np.where((avg < 40) & (count > 50), 2.0 * (count - 50) ** 2, 0.0)
    return {"toll": toll}


def make_tp(w: TxnWorkload) -> TxnApp:
    rng = np.random.default_rng(w.seed)
    tables = [StateTable("segments", w.keys, columns=("speed_sum", "count"))]
    return TxnApp("tp", tables, _tp_events(w, rng), _tp_build, _tp_post,
                  nested={0: "ns,f,e", 1: "ns,f,l"})


# ------------------------------------------------------------------ stock exchange join


def _sej_events(w: TxnWorkload, rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = w.events
    return {
        "ts": np.arange(1, n + 1, dtype=np.int64),
        "traded": rng.random(n) < 0.5,
        "stock": zipf_keys(rng, n, w.keys, w.skew),
        "volume": rng.integers(1, 1000, n).astype(np.float64),
    }


@dataclass(frozen=True)
class _SejBuild:
    """The stock exchange join's builder: each event inserts its volume on its side and probes
    the other side's window. A stock outside the declared ones aborts its event."""

    window: int

    def __call__(self, engine: TxnEngine, ev: Mapping[str, np.ndarray], lo: int, hi: int) -> OpBatch:
        st = engine.store
        b = OpBatchBuilder(ev["ts"][lo:hi])
        tr, vol = ev["traded"][lo:hi], ev["volume"][lo:hi]
        idx = np.arange(hi - lo, dtype=np.int64)
        stock, bad = _declared(st, (0, 1), ev["stock"][lo:hi])
        if bad is not None:
            b.abort(idx[bad], REASON_KEY)
        own = np.where(tr, 0, 1)
        other = 1 - own
        for side in (0, 1):
            m = own == side
            b.add(idx[m], st.cells(side, stock[m]), WRITE, vol[m])      # insert
            m = other == side
            b.add(idx[m], st.cells(side, stock[m]), WINDOW_READ, float(self.window))  # probe
        return b.build()


def make_sej(w: TxnWorkload) -> TxnApp:
    rng = np.random.default_rng(w.seed)
    tables = [StateTable("traded", w.keys, history=w.window),
              StateTable("quoted", w.keys, history=w.window)]
    return TxnApp("sej", tables, _sej_events(w, rng), _SejBuild(w.window))


APPS = {"sl": make_sl, "gs": make_gs, "tp": make_tp, "sej": make_sej}


def make_app(name: str, w: TxnWorkload) -> TxnApp:
    """The application ``name`` (sl, gs, tp, sej) on workload ``w``."""
    try:
        return APPS[name](w)
    except KeyError:
        raise PlanError(f"unknown transactional app {name!r}; choose from {sorted(APPS)}") from None


def batches(app: TxnApp, punctuation: int) -> Iterator[tuple[int, int]]:
    """Event ranges between punctuations."""
    n = app.num_events
    for lo in range(0, n, punctuation):
        yield lo, min(lo + punctuation, n)


def run_app(app: TxnApp, engine: TxnEngine, punctuation: int,
            ranges: Sequence[tuple[int, int]] | None = None,
            on_result: Callable[[int, int, OpBatch, BatchResult], None] | None = None
            ) -> dict[str, Any]:
    """Stream ``app``'s events through ``engine`` (pre-processing of the next batch overlaps the
    current batch's execution); per-batch latency and outcome counts. ``on_result(lo, hi,
    batch, result)`` sees each batch's outcome, in order."""
    import time
    from collections import deque

    lat: list[tuple[float, int]] = []
    committed = aborted = 0
    build_s = 0.0
    inflight: deque[tuple[float, int, int, OpBatch]] = deque()
    t_start = time.perf_counter()

    def produce() -> Iterator[tuple[OpBatch, NonDeterministic | None]]:
        nonlocal build_s
        for lo, hi in ranges if ranges is not None else batches(app, punctuation):
            t0 = time.perf_counter()
            built = app.build(engine, app.events, lo, hi)
            batch, nd = built if isinstance(built, tuple) else (built, None)
            build_s += time.perf_counter() - t0
            inflight.append((t0, lo, hi, batch))
            yield batch, nd

    for res in engine.execute_many(produce()):
        t0, lo, hi, batch = inflight.popleft()
        if app.post is not None:
            app.post(app.events, lo, hi, None, res.op_result)
        if on_result is not None:
            on_result(lo, hi, batch, res)
        lat.append((time.perf_counter() - t0, hi - lo))
        committed += int(res.committed.sum())
        aborted += int((~res.committed).sum())
    seconds = time.perf_counter() - t_start
    return {"seconds": seconds, "latency": lat, "committed": committed, "aborted": aborted,
            "build_seconds": build_s}


# ------------------------------------------------------------------ events from a file

#: Columns an input file gives per application: required and optional (with their defaults).
EVENT_COLUMNS: dict[str, tuple[dict[str, pa.DataType], dict[str, pa.DataType]]] = {
    "sl": ({"deposit": pa.bool_(), "src": pa.int64(), "dst": pa.int64(), "amount": pa.float64()},
           {"ts": pa.int64(), "book_amount": pa.float64(), "abort": pa.bool_()}),
    "tp": ({"segment": pa.int64(), "speed": pa.float64()},
           {"ts": pa.int64(), "group": pa.int32(), "abort": pa.bool_()}),
    "sej": ({"traded": pa.bool_(), "stock": pa.int64(), "volume": pa.float64()},
            {"ts": pa.int64()}),
}
#: Key columns: never null, ids in ``0..keys-1``.
KEY_COLUMNS = {"sl": ("src", "dst"), "tp": ("segment",), "sej": ("stock",)}


def events_from_file(app: str, path: str, keys: int, policy: str = "fail",
                     sink: Any = None) -> dict[str, np.ndarray]:
    """Read application ``app``'s events from a ``.parquet``/``.csv`` file and check them.

    Bad rows — malformed CSV rows, a missing column or a value of the wrong type, a null key,
    a NaN or infinite amount, an id outside ``0..keys-1``, a timestamp not after the previous
    event's — fail with a :class:`~splice.core.errors.SchemaError` naming the stream (the app),
    the column and the problem (``policy="fail"``), or go to ``sink`` (a
    :class:`~splice.io.bad_input.DeadLetterSink`) with their reason, counted
    (``policy="dead_letter"``). Without ``ts`` events are numbered 1, 2, ... in file order.
    """
    from pathlib import Path

    from splice.core.errors import SchemaError
    from splice.io.bad_input import DeadLetterSink, EdgeValidator, read_csv_checked
    from splice.io.files import read_table

    if app not in EVENT_COLUMNS:
        raise PlanError(f"--input is supported for {sorted(EVENT_COLUMNS)}, not {app!r}")
    if policy == "dead_letter" and sink is None:
        sink = DeadLetterSink()
    p = Path(path)
    if p.suffix.lower() == ".csv" and p.exists():
        table = read_csv_checked(p, app, policy, sink)  # type: ignore[arg-type]
    else:
        table = read_table(p)
    required, optional = EVENT_COLUMNS[app]
    fields = [pa.field(n, t) for n, t in required.items()]
    fields += [pa.field(n, t) for n, t in optional.items() if n in table.schema.names]
    schema = pa.schema(fields)
    validator = EdgeValidator(app, schema, keys=KEY_COLUMNS[app], policy=policy,  # type: ignore[arg-type]
                              sink=sink)
    batch = validator.check(table)
    keep = np.ones(batch.num_rows, np.bool_)
    cols = {n: batch.column(n) for n in schema.names}

    def bad(mask: np.ndarray, column: str, problem: str) -> None:
        if not mask.any():
            return
        if policy == "fail":
            first = int(np.flatnonzero(mask)[0])
            raise SchemaError(f"stream {app!r}: column {column!r}: {problem} (row {first} of the "
                              "checked input; use --bad-input dead-letter to route such rows)")
        rows = batch.filter(pa.array(mask)).to_pylist()
        sink.add(app, f"column {column}: {problem}", [json.dumps(r, default=str) for r in rows])

    for k in KEY_COLUMNS[app]:
        v = cols[k].to_numpy(zero_copy_only=False)
        out = keep & ((v < 0) | (v >= keys))
        bad(out, k, f"id out of range 0..{keys - 1}")
        keep &= ~out
    for n in schema.names:
        if n not in KEY_COLUMNS[app] and n != "ts" and cols[n].null_count:
            nulls = keep & np.asarray(cols[n].is_null())
            bad(nulls, n, "null value")
            keep &= ~nulls
    if "ts" in cols:
        ts = cols["ts"].to_numpy(zero_copy_only=False)
        nulls = keep & np.asarray(cols["ts"].is_null())
        bad(nulls, "ts", "null timestamp")
        keep &= ~nulls
        idx = np.flatnonzero(keep)
        t = ts[idx]
        prev = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(t)[:-1]])
        late = np.zeros(batch.num_rows, np.bool_)
        late[idx[t <= prev]] = True
        bad(late, "ts", "timestamp not after the previous event's")
        keep &= ~late
    good = batch.filter(pa.array(keep)) if not keep.all() else batch
    n = good.num_rows

    def col(name: str, default: Any, dtype: Any) -> np.ndarray:
        if name in good.schema.names:
            # a writable copy: Arrow's buffers are read-only, which numba compiles for anew
            return np.array(good.column(name).to_numpy(zero_copy_only=False), dtype=dtype)
        return np.full(n, default, dtype)

    ts = col("ts", 0, np.int64) if "ts" in good.schema.names else np.arange(1, n + 1, dtype=np.int64)
    if app == "sl":
        amount = col("amount", 0.0, np.float64)
        book = col("book_amount", 0.0, np.float64) if "book_amount" in good.schema.names else amount
        return {"ts": ts, "deposit": col("deposit", False, np.bool_), "src": col("src", 0, np.int64),
                "dst": col("dst", 0, np.int64), "amount": amount, "book_amount": book.copy(),
                "abort": col("abort", False, np.bool_)}
    if app == "tp":
        return {"ts": ts, "segment": col("segment", 0, np.int64), "speed": col("speed", 0.0, np.float64),
                "group": col("group", 0, np.int32), "abort": col("abort", False, np.bool_)}
    return {"ts": ts, "traded": col("traded", False, np.bool_), "stock": col("stock", 0, np.int64),
            "volume": col("volume", 0.0, np.float64)}
