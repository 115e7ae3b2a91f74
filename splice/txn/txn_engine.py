"""The transaction engine: progress control, per-batch planning, scheduling and execution.

``TxnEngine.execute(batch)`` runs one punctuation interval (every transaction between two
punctuations) and is exact: committed flags, read results and the final state equal serial
execution in timestamp order, whatever the scheduler and thread count. Pipeline per batch::

    progress check   timestamps must pass the last punctuation, else REASON_LATE
    construct        TPG: chains by sort, PD reads, LD check lists        (TxnManager)
    decide           decision model on the TPG's measured statistics       (TxnScheduler)
    execute          executor threads run the strategy's work lists        (TxnExecutor)
    apply            final values and committed versions to the state table

Schedulers: ``"auto"`` (decision model per batch), a fixed ``"<explore>,<granularity>,<abort>"``,
the baselines ``"serial"``, ``"sstore"``, ``"tstream"``, or ``nested`` per transaction group.
"""

from __future__ import annotations

import numbers
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from splice.core.errors import PlanError
from splice.kernels.numba_internals import Dispatcher
from splice.kernels.team import ThreadTeam
from splice.txn.objects import run_with_objects
from splice.txn.ops import REASON_CONDITION, REASON_LATE, REASON_UDF, OpBatch
from splice.txn.scheduler import (
    Strategy,
    choose_strategy,
    executor_threads,
    initial_executor_threads,
)
from splice.txn.state_tables import StateStore, StateTable
from splice.txn.tpg import TPG, build_tpg, refresh_tpg, tpg_stats
from splice.txn.txn_executor import (
    Execution,
    SStorePrep,
    busy_iters_for,
    exec_sstore,
    prepare_sstore,
    run_serial,
    run_tpg,
    run_tstream,
)

__all__ = ["TxnEngine", "BatchResult", "BASELINES", "subset_batch", "NonDeterministic"]

BASELINES = ("serial", "sstore", "tstream")
TIME_KEYS = ("useful", "sync", "lock", "construct", "explore", "abort")


@dataclass
class BatchResult:
    """Outcome of one batch: per transaction ``committed`` and ``reason`` (0 when committed),
    per operation ``op_result`` (read value, window sum, or the written value)."""

    committed: np.ndarray
    reason: np.ndarray
    op_result: np.ndarray
    scheduler: str
    seconds: float
    times: dict[str, float] = field(default_factory=dict)
    memory_bytes: int = 0
    resolved: np.ndarray | None = None
    #: object accesses' results (aligned with ``OpBatch.objects``; ``None`` where not committed)
    object_results: list[Any] | None = None
    #: transaction -> detail of its abort reason (object functions)
    details: dict[int, str] = field(default_factory=dict)


def subset_batch(batch: OpBatch, txn_mask: np.ndarray) -> tuple[OpBatch, np.ndarray]:
    """The transactions where ``txn_mask`` holds, as a batch; also the kept op indices."""
    new_id = np.cumsum(txn_mask) - 1
    op_keep = np.flatnonzero(txn_mask[batch.op_txn])
    counts = (batch.src_ptr[1:] - batch.src_ptr[:-1])[op_keep]
    ptr = np.zeros(op_keep.shape[0] + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    starts = batch.src_ptr[:-1][op_keep]
    total = int(counts.sum())
    flat = np.repeat(starts - ptr[:-1], counts) + np.arange(total, dtype=np.int64)
    sub = OpBatch(
        txn_ts=batch.txn_ts[txn_mask], op_txn=new_id[batch.op_txn[op_keep]],
        op_cell=batch.op_cell[op_keep], op_kind=batch.op_kind[op_keep],
        op_operand=batch.op_operand[op_keep], op_cond=batch.op_cond[op_keep],
        op_cond_arg=batch.op_cond_arg[op_keep], src_ptr=ptr, src_cell=batch.src_cell[flat],
        txn_reason=batch.txn_reason[txn_mask],
        txn_group=batch.txn_group[txn_mask] if batch.txn_group.shape[0] else batch.txn_group,
        udf_params=batch.udf_params,
        objects=batch.objects.subset(txn_mask, new_id) if batch.objects is not None else None,
    )
    return sub, op_keep


@dataclass(frozen=True)
class NonDeterministic:
    """State accesses whose key is only known at execution time.

    ``slot[j]`` names a cell of the batch: ``slot < num_ops`` is ``op_cell[slot]``, otherwise
    ``src_cell[slot - num_ops]``. At its transaction's turn it becomes the cell of key
    ``(int(value(seed_cell[j])) + offset[j]) % modulus[j]`` in table ``table[j]``, read from the
    state that every earlier transaction left. The engine cuts the batch before each such
    transaction (a barrier: MorphStream's virtual operations on every chain), resolves the keys
    and records them in :attr:`BatchResult.resolved`, so a redo reuses exactly those cells.
    """

    slot: np.ndarray
    seed_cell: np.ndarray
    offset: np.ndarray
    table: np.ndarray
    modulus: np.ndarray


@dataclass
class _Prep:
    """A batch between construction and execution."""

    batch: OpBatch
    reason: np.ndarray
    refused: np.ndarray
    t0: float
    now: int
    tpg: TPG | None = None
    stats: dict[str, float] | None = None   # the decision model's TPG statistics (auto)
    sstore: SStorePrep | None = None
    nested: bool = False
    objects: bool = False
    construct: float = 0.0


def available_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity interface on this platform
        return os.cpu_count() or 1


def _timed(go: Callable[[], tuple[Execution, str]]) -> tuple[Execution, str]:
    """Run an execution and record its wall time in ``info["wall_s"]``."""
    t0 = time.perf_counter()
    ex, name = go()
    ex.info["wall_s"] = time.perf_counter() - t0
    return ex, name


class TxnEngine:
    """Shared state plus the machinery that runs batches of transactions on it.

    >>> from splice.txn import StateTable, TxnEngine, OpBatchBuilder, ADD, COND_GE
    >>> eng = TxnEngine([StateTable("acct", keys=4, initial=100.0)], threads=1)
    >>> b = OpBatchBuilder([1, 2])
    >>> cells = eng.store.cells(0, [0, 0])
    >>> b.add([0, 1], cells, ADD, operand=[-80.0, -80.0], cond=COND_GE, cond_arg=[80.0, 80.0])
    >>> r = eng.execute(b.build())
    >>> r.committed.tolist(), eng.store.value("acct", 0)
    ([True, False], 20.0)
    """

    def __init__(
        self,
        tables: Sequence[StateTable],
        *,
        threads: int = 1,
        scheduler: str = "auto",
        complexity_us: float = 0.0,
        nested: Mapping[int, str] | None = None,
        udf: Any = None,
    ) -> None:
        if threads < 1:
            raise PlanError(f"threads must be >= 1, got {threads}")
        if udf is not None and not isinstance(udf, Dispatcher):
            raise PlanError(f"udf {getattr(udf, '__name__', udf)!r} must be a numba @njit function "
                            "(value: float, params: float64[:]) -> (float, bool)")
        self.udf: Any = udf
        self._udf_given = udf is not None
        self._udf_widths: set[int] = set()
        self.store = StateStore(tables)
        self.threads = threads
        self.scheduler = scheduler
        self.fixed: Strategy | None = None
        if scheduler not in ("auto", *BASELINES):
            self.fixed = Strategy.parse(scheduler)
        self.nested = {int(g): s for g, s in (nested or {}).items()}
        for spec in self.nested.values():
            if spec not in ("auto", *BASELINES):
                Strategy.parse(spec)
        self.busy = busy_iters_for(complexity_us)
        self.complexity_us = complexity_us
        self.team = ThreadTeam(threads, "splice-txn")
        # auto, pipelined: executor threads per batch
        self.exec_threads = initial_executor_threads(threads, available_cores(), complexity_us)
        self.thread_use: Counter[int] = Counter()
        self.last_punctuation: int | None = None
        self.abort_ema = 0.0
        self.times = dict.fromkeys(TIME_KEYS, 0.0)
        self.strategies: Counter[str] = Counter()
        self.committed = 0
        self.aborted = 0
        self.batches = 0
        self.peak_batch_bytes = 0
        self.nested_fallbacks = 0
        self.history = any(t.history > 0 for t in tables)
        self._driver: ThreadPoolExecutor | None = None
        #: the batch :meth:`submit` left executing, with its execution
        self._pending: tuple[_Prep, Future[tuple[Execution, str]]] | None = None

    def close(self) -> None:
        """Stop the executor threads."""
        if self._driver is not None:
            self._driver.shutdown(wait=True)  # a batch still executing finishes first
            self._driver = None
        self._pending = None
        self.team.close()

    # ------------------------------------------------------------------ execution
    def execute(self, batch: OpBatch, nondeterministic: NonDeterministic | None = None) -> BatchResult:
        """Run one batch (a punctuation interval) and apply its committed writes."""
        if self._pending is not None:
            raise PlanError("a batch handed to submit() is still executing: drain() first")
        if nondeterministic is None or nondeterministic.slot.shape[0] == 0:
            return self._execute(batch)
        if batch.objects:
            raise PlanError("a batch cannot mix non-deterministic accesses and object accesses")
        return self._execute_nd(batch, nondeterministic)

    def _execute_nd(self, batch: OpBatch, nd: NonDeterministic) -> BatchResult:
        t0 = time.perf_counter()
        n_ops = batch.num_ops
        slot = np.asarray(nd.slot, np.int64)
        owner_op = np.where(slot < n_ops, slot,
                            np.searchsorted(batch.src_ptr, slot - n_ops, side="right") - 1)
        slot_txn = batch.op_txn[owner_op]
        op_cell = batch.op_cell.copy()
        src_cell = batch.src_cell.copy()
        committed = np.zeros(batch.num_txns, np.bool_)
        reason = np.zeros(batch.num_txns, np.int8)
        op_result = np.full(n_ops, np.nan)
        times = dict.fromkeys(TIME_KEYS, 0.0)
        names: list[str] = []
        mem = 0
        cuts = np.unique(slot_txn)
        bounds = []
        prev = 0
        for t in cuts.tolist():
            if t > prev:
                bounds.append((prev, t, False))
            bounds.append((t, t + 1, True))
            prev = t + 1
        if prev < batch.num_txns:
            bounds.append((prev, batch.num_txns, False))
        for lo, hi, resolve in bounds:
            if resolve:
                js = np.flatnonzero(slot_txn == lo)
                seed_vals = self.store.gather(nd.seed_cell[js])
                for j, v in zip(js.tolist(), seed_vals.tolist(), strict=True):
                    k = (int(v) + int(nd.offset[j])) % int(nd.modulus[j])
                    cell = int(self.store.cells(int(nd.table[j]), [k])[0])
                    if slot[j] < n_ops:
                        op_cell[slot[j]] = cell
                    else:
                        src_cell[slot[j] - n_ops] = cell
            mask = np.zeros(batch.num_txns, np.bool_)
            mask[lo:hi] = True
            full = OpBatch(batch.txn_ts, batch.op_txn, op_cell, batch.op_kind, batch.op_operand,
                           batch.op_cond, batch.op_cond_arg, batch.src_ptr, src_cell,
                           batch.txn_reason, batch.txn_group, batch.udf_params, batch.objects)
            sub, op_keep = subset_batch(full, mask)
            r = self._execute(sub)
            committed[lo:hi] = r.committed
            reason[lo:hi] = r.reason
            op_result[op_keep] = r.op_result
            for key in TIME_KEYS:
                times[key] += r.times.get(key, 0.0)
            names.append(r.scheduler)
            mem = max(mem, r.memory_bytes)
        resolved = np.where(slot < n_ops, op_cell[np.minimum(slot, max(n_ops - 1, 0))],
                            src_cell[np.clip(slot - n_ops, 0, max(src_cell.shape[0] - 1, 0))])
        name = Counter(names).most_common(1)[0][0] if names else "none"
        return BatchResult(committed, reason, op_result, name, time.perf_counter() - t0, times,
                           mem, resolved)

    def _execute(self, batch: OpBatch) -> BatchResult:
        prep = self._prepare(batch)
        if prep.nested:
            ex, name = self._run_nested(batch, prep.refused)
        else:
            ex, name = self._launch(prep)()
        return self._complete(prep, ex, name)

    def execute_many(
        self, batches: Iterable[tuple[OpBatch, NonDeterministic | None]]
    ) -> Iterator[BatchResult]:
        """Run batches in order, constructing batch k+1 while batch k executes (pipelined).

        Results are exactly those of calling :meth:`execute` on each batch in turn: batch k+1
        reads its starting state only after batch k's writes are applied. With one thread, or for
        batches with non-deterministic accesses or nested groups, batches run one at a time.
        """
        for batch, nd in batches:
            yield from self.submit(batch, nd)
        yield from self.drain()

    def submit(self, batch: OpBatch, nondeterministic: NonDeterministic | None = None
               ) -> list[BatchResult]:
        """The push form of :meth:`execute_many`: hand over the next batch; return the batches
        that completed meanwhile, in order (the previous one, once this one is constructed).

        The batch handed over last may still be executing: :meth:`drain` completes it (call it
        after the last batch, and before reading the state).
        """
        nd = nondeterministic
        simple = (nd is None or nd.slot.shape[0] == 0) and not (
            self.nested and batch.txn_group.shape[0]) and not batch.objects
        if self.threads == 1 or self.scheduler == "serial" or not simple:
            done = self.drain()
            done.append(self.execute(batch, nd))
            return done
        prep = self._prepare(batch)
        done = []
        if self._pending is not None:
            t_wait = time.perf_counter()
            before, running = self._pending
            self._pending = None
            ex, name = running.result()
            if self.scheduler == "auto":
                self.exec_threads = executor_threads(
                    self.exec_threads, self.threads, time.perf_counter() - t_wait,
                    ex.info.get("wall_s", 0.0))
            done.append(self._complete(before, ex, name))
        if self._driver is None:
            self._driver = ThreadPoolExecutor(max_workers=1)
        go = self._launch(prep, self.team.using(self.exec_threads))
        self._pending = (prep, self._driver.submit(_timed, go))
        return done

    def drain(self) -> list[BatchResult]:
        """Complete the batch :meth:`submit` left executing (none: an empty list)."""
        if self._pending is None:
            return []
        prep, running = self._pending
        self._pending = None
        return [self._complete(prep, *running.result())]

    def _prepare(self, batch: OpBatch) -> _Prep:
        """Progress check and construction: everything that does not read the state."""
        t0 = time.perf_counter()
        if batch.has_udf:
            self._check_udf(batch.udf_params.shape[1])
        reason = batch.txn_reason.copy()
        if batch.num_txns and self.last_punctuation is not None:
            late = batch.txn_ts <= self.last_punctuation
            reason[late & (reason == 0)] = REASON_LATE
        if batch.num_txns:
            top = int(batch.txn_ts.max())
            if self.last_punctuation is None or top > self.last_punctuation:
                self.last_punctuation = top
        refused = reason != 0
        prep = _Prep(batch, reason, refused, t0, self.last_punctuation or 0)
        if batch.objects:
            prep.objects = True
        elif self.nested and batch.txn_group.shape[0]:
            prep.nested = True
        elif self.scheduler == "sstore":
            prep.sstore = prepare_sstore(batch, refused, self.threads)
        elif self.scheduler != "serial":
            prep.tpg = build_tpg(batch, refused, self.store)
            if self.scheduler == "auto":
                # measured here, while the previous batch executes: only the abort ratio the
                # model also reads must wait for that batch's outcome
                prep.stats = tpg_stats(prep.tpg)
        prep.construct = time.perf_counter() - t0
        return prep

    def _launch(self, prep: _Prep, auto_team: ThreadTeam | None = None
                ) -> Callable[[], tuple[Execution, str]]:
        """Read the starting state, decide the strategy; return the execution to run.
        ``auto_team``: the threads ``auto`` gives this batch (default: all)."""
        batch, refused = prep.batch, prep.refused
        udf = self.udf
        if prep.objects:
            return lambda: (run_with_objects(batch, refused, self.store, self.busy, udf),
                            "serial-objects")
        if self.scheduler == "serial":
            return lambda: (run_serial(batch, refused, self.store, self.busy, udf), "serial")
        if prep.sstore is not None:
            go = exec_sstore(prep.sstore, self.store, self.team, self.busy, udf)
            return lambda: (go(), "sstore")
        tpg = prep.tpg
        assert tpg is not None
        refresh_tpg(tpg, self.store)
        if self.scheduler == "tstream":
            return lambda: (run_tstream(batch, refused, tpg, self.team, self.busy, self.history,
                                        udf), "tstream")
        if self.scheduler == "auto":
            stats = prep.stats if prep.stats is not None else tpg_stats(tpg)
            team = auto_team or self.team
            strategy = choose_strategy(stats, team.threads, self.complexity_us, self.abort_ema)
            self.thread_use[team.threads] += 1
            return lambda: (run_tpg(batch, refused, tpg, strategy, team, self.busy,
                                    self.history, udf), strategy.name)
        strategy = Strategy.parse(self.scheduler)
        return lambda: (run_tpg(batch, refused, tpg, strategy, self.team, self.busy,
                                self.history, udf), strategy.name)

    def _complete(self, prep: _Prep, ex: Execution, name: str) -> BatchResult:
        """Apply committed writes and versions; account outcomes and times."""
        batch, reason, refused = prep.batch, prep.reason, prep.refused
        if prep.tpg is not None:
            ex.times["construct"] = ex.times.get("construct", 0.0) + prep.construct
        self.store.scatter(ex.cells, ex.final)
        self.store.log_versions(ex.version_cell, ex.version_ts, ex.version_value, prep.now)
        seconds = time.perf_counter() - prep.t0
        obj_reason = ex.info.get("object_reason")
        if obj_reason is not None:
            m = (reason == 0) & (obj_reason != 0)
            reason[m] = obj_reason[m]
        if ex.udf_raised is not None:
            reason[~ex.committed & ex.udf_raised & (reason == 0)] = REASON_UDF
        reason[~ex.committed & (reason == 0)] = REASON_CONDITION
        committed = int(ex.committed.sum())
        self.committed += committed
        self.aborted += batch.num_txns - committed
        valid = int((~refused).sum())
        if valid:
            ratio = float((~ex.committed & ~refused).sum()) / valid
            self.abort_ema = ratio if self.batches == 0 else 0.5 * self.abort_ema + 0.5 * ratio
        self.batches += 1
        for k in TIME_KEYS:
            self.times[k] += ex.times.get(k, 0.0)
        self.strategies[name] += 1
        self.peak_batch_bytes = max(self.peak_batch_bytes, ex.memory_bytes)
        return BatchResult(ex.committed, reason, ex.op_result, name, seconds, ex.times,
                           ex.memory_bytes, object_results=ex.info.get("object_results"),
                           details=ex.info.get("details", {}))

    def _run(self, batch: OpBatch, refused: np.ndarray, scheduler: str) -> tuple[Execution, str]:
        """One batch under ``scheduler`` (used for the groups of a nested configuration)."""
        saved = self.scheduler
        self.scheduler = scheduler
        try:
            prep = _Prep(batch, batch.txn_reason.copy(), refused, time.perf_counter(), 0)
            if scheduler == "sstore":
                prep.sstore = prepare_sstore(batch, refused, self.threads)
            elif scheduler != "serial":
                prep.tpg = build_tpg(batch, refused, self.store)
            prep.construct = time.perf_counter() - prep.t0
            ex, name = self._launch(prep)()
            if prep.tpg is not None:
                ex.times["construct"] = ex.times.get("construct", 0.0) + prep.construct
            return ex, name
        finally:
            self.scheduler = saved

    def _run_nested(self, batch: OpBatch, refused: np.ndarray) -> tuple[Execution, str]:
        """Nested configuration: each transaction group with its own scheduler, when the groups
        touch disjoint cells (then their order does not matter); otherwise one scheduler."""
        groups = np.unique(batch.txn_group)
        cells = np.concatenate([batch.op_cell, batch.src_cell])
        owner = np.concatenate([batch.op_txn, np.repeat(batch.op_txn, batch.src_ptr[1:]
                                                        - batch.src_ptr[:-1])])
        o = np.argsort(cells, kind="stable")
        c, g = cells[o], batch.txn_group[owner[o]]
        if bool(np.any((c[1:] == c[:-1]) & (g[1:] != g[:-1]))):
            self.nested_fallbacks += 1
            return self._run(batch, refused, self.scheduler)
        n = batch.num_txns
        committed = np.zeros(n, np.bool_)
        raised = np.zeros(n, np.bool_)
        op_result = np.full(batch.num_ops, np.nan)
        parts: list[Execution] = []
        names = []
        for g in groups.tolist():
            mask = batch.txn_group == g
            sub, op_keep = subset_batch(batch, mask)
            ex, name = self._run(sub, refused[mask], self.nested.get(g, self.scheduler))
            committed[mask] = ex.committed
            if ex.udf_raised is not None:
                raised[mask] = ex.udf_raised
            op_result[op_keep] = ex.op_result
            parts.append(ex)
            names.append(f"{g}:{name}")
        times = {k: sum(p.times.get(k, 0.0) for p in parts) for k in TIME_KEYS}
        out = Execution(
            committed=committed, op_result=op_result,
            cells=np.concatenate([p.cells for p in parts]),
            final=np.concatenate([p.final for p in parts]),
            version_cell=np.concatenate([p.version_cell for p in parts]),
            version_ts=np.concatenate([p.version_ts for p in parts]),
            version_value=np.concatenate([p.version_value for p in parts]),
            times=times, memory_bytes=sum(p.memory_bytes for p in parts), udf_raised=raised,
        )
        return out, "nested(" + ";".join(names) + ")"

    def _check_udf(self, width: int) -> None:
        """Call the user function once from Python per parameter width: a clear error here
        instead of a crash inside the executor threads."""
        if width in self._udf_widths:
            return
        if not self._udf_given:
            raise PlanError("the batch has UDF operations but the engine was built without udf=")
        name = getattr(self.udf, "__name__", repr(self.udf))
        try:
            out = self.udf(0.0, np.zeros(width, np.float64))
        except Exception as exc:
            raise PlanError(f"udf {name!r} failed on (0.0, {width} zero parameters): "
                            f"{type(exc).__name__}: {exc}") from exc
        if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], numbers.Real)
                and isinstance(out[1], (bool, np.bool_))):
            raise PlanError(f"udf {name!r} must return (new value: float, ok: bool), got {out!r}")
        self._udf_widths.add(width)

    # ------------------------------------------------------------------ reporting
    def breakdown(self) -> dict[str, float]:
        """Accumulated time per category (seconds)."""
        return dict(self.times)
