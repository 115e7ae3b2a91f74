"""The applications on the engine's data path give what the direct path gives.

Each application's events travel an :class:`~splice.runtime.Engine` as Arrow batches into a
:class:`~splice.txn.txn_operator.TransactionalOperator` built with the application's own builder;
the direct path (:func:`~splice.workloads.txn_apps.run_app`) runs the same builder on the same
punctuation intervals. On random inputs — skewed keys, forced aborts, bad amounts and keys,
out-of-order and duplicate timestamps (each interval runs in time order, its output in arrival
order),
empty batches, batches of sizes that do not divide the punctuation, watermarks that cut an
interval short — the two give the same committed flags, abort reasons, per-event results and
final state checksum. A snapshot taken mid-stream and restored into a fresh engine gives the
uninterrupted run's answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import PlanError
from splice.core.plan import Query
from splice.core.records import Data, End, Watermark
from splice.ops import Select
from splice.runtime import Engine
from splice.state.codec import decode_state, encode_state
from splice.testing.contract import check_operator
from splice.testing.harness import Step
from splice.txn import OpBatch, StateTable
from splice.txn._kernels import txn_offsets
from splice.txn.ops import REASON_KEY, REASON_OPERAND, REASONS
from splice.txn.txn_engine import BatchResult, TxnEngine
from splice.txn.txn_operator import TransactionalOperator, _example_debit
from splice.workloads.txn_apps import TxnApp, TxnWorkload, make_app, run_app
from splice.workloads.txn_jobs import EVENTS, app_operator, events_table

SIZES = [1, 2, 7, 49, 50, 51, 100]


@dataclass
class Answer:
    """Per event: committed, abort reason, results (NaN as None); the final state checksum."""

    committed: list[bool]
    reasons: list[str]
    results: list[list[Any]]
    checksum: str


def _plain(values: list[Any]) -> list[Any]:
    return [None if v is None or v != v else v for v in values]


def _answer_of(out: pa.Table, checksum: str) -> Answer:
    return Answer(out.column("committed").to_pylist(), out.column("abort_reason").to_pylist(),
                  [_plain(r) for r in out.column("results").to_pylist()], checksum)


# -- inputs -----------------------------------------------------------------------------------


def _app(name: str, data: st.DataObject) -> TxnApp:
    """A random application instance, its events spoiled here and there."""
    n = data.draw(st.integers(0, 400), label="events")
    w = TxnWorkload(events=n, keys=data.draw(st.integers(4, 40), label="keys"),
                    skew=data.draw(st.sampled_from([0.0, 0.8, 1.5]), label="skew"),
                    abort_ratio=data.draw(st.sampled_from([0.0, 0.1, 0.4]), label="abort_ratio"),
                    deposit_ratio=data.draw(st.sampled_from([0.0, 0.5, 0.9])),
                    nd_ratio=data.draw(st.sampled_from([0.0, 0.0, 0.2])), window=30,
                    window_trigger=7, seed=data.draw(st.integers(0, 1_000), label="seed"))
    app = make_app(name, w)
    ev = app.events
    rng = np.random.default_rng(data.draw(st.integers(0, 1_000), label="spoil"))
    bad = data.draw(st.sampled_from([0.0, 0.0, 0.05, 0.3]), label="bad share")

    def spoil(column: str, values: list[Any]) -> None:
        where = rng.random(n) < bad
        if column in ev and where.any():
            col = ev[column]
            picks = rng.choice(np.array(values, dtype=col.dtype), int(where.sum()))
            if col.ndim == 2:
                col[where, rng.integers(0, col.shape[1])] = picks
            else:
                col[where] = picks

    for key in ("src", "dst", "segment", "keys", "wkeys"):
        spoil(key, [-1, -7, w.keys, w.keys + 3])
    for amount in ("amount", "book_amount", "speed", "value"):
        spoil(amount, [np.nan, np.inf, -np.inf])
    if n and data.draw(st.booleans(), label="disorder"):
        # timestamps that repeat and go back: each interval runs in time order
        ev["ts"] = np.maximum(1, ev["ts"] + rng.integers(-20, 3, n)).astype(np.int64)
    elif n:
        ev["ts"] = np.cumsum(rng.integers(1, 4, n)).astype(np.int64)
    return app


def _records(table: pa.Table, data: st.DataObject) -> list[Step]:
    """The events in batches of sizes from SIZES, with empty batches and watermarks between."""
    out: list[Step] = []
    at = 0
    while at < table.num_rows:
        size = data.draw(st.sampled_from(SIZES), label="batch size")
        if data.draw(st.integers(0, 9)) == 0:
            out.append(Data(1, pa.record_batch([pa.array([], f.type) for f in table.schema],
                                               schema=table.schema)))
        out.append(Data(1, pa.concat_batches(table.slice(at, size).to_batches())))
        at += size
        if data.draw(st.integers(0, 9)) == 0:
            out.append(Watermark(1, at))
    return out


def _intervals(records: list[Step], punctuation: int) -> list[tuple[int, int]]:
    """The punctuation intervals the operator cuts: every ``punctuation`` rows, and what is
    pending at a watermark and at the end."""
    out: list[tuple[int, int]] = []
    start = seen = 0
    for r in records:
        if isinstance(r, Data):
            seen += r.batch.num_rows
            while seen - start >= punctuation:
                out.append((start, start + punctuation))
                start += punctuation
        elif isinstance(r, Watermark) and seen > start:
            out.append((start, seen))
            start = seen
    if seen > start:
        out.append((start, seen))
    return out


# -- the two paths ----------------------------------------------------------------------------


def _direct(app: TxnApp, ranges: list[tuple[int, int]], threads: int) -> Answer:
    """The direct path on the same intervals, each interval's events sorted by time first (a
    stable sort: equal times in arrival order), its outcomes put back in arrival order."""
    orders = {lo: np.argsort(app.events["ts"][lo:hi], kind="stable") for lo, hi in ranges}
    events = {k: v.copy() for k, v in app.events.items()}
    for lo, hi in ranges:
        for k, v in events.items():
            v[lo:hi] = app.events[k][lo:hi][orders[lo]]
    sorted_app = TxnApp(app.name, app.tables, events, app.build, app.post, app.nested)
    eng = TxnEngine(app.tables, threads=threads)
    committed: list[bool] = []
    reasons: list[str] = []
    results: list[list[Any]] = []

    def keep(lo: int, hi: int, batch: OpBatch, res: BatchResult) -> None:
        arrival = np.empty(hi - lo, np.int64)
        arrival[orders[lo]] = np.arange(hi - lo)
        committed.extend(res.committed[arrival].tolist())
        reasons.extend(REASONS[c] for c in res.reason[arrival].tolist())
        bounds = np.searchsorted(batch.op_txn, np.arange(hi - lo + 1))
        values = res.op_result.tolist()
        per_txn = [_plain(values[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        results.extend(per_txn[i] for i in arrival)

    try:
        run_app(sorted_app, eng, 1, ranges=ranges, on_result=keep)
        return Answer(committed, reasons, results, eng.store.checksum())
    finally:
        eng.close()


def _engine(app: TxnApp, records: list[Step], punctuation: int, threads: int,
            snapshot_at: int | None = None) -> Answer:
    """The operator in an engine; with ``snapshot_at``, the engine's snapshot before that
    record goes through the checkpoint codec into a fresh engine, which runs the rest."""
    spec = app_operator(app, punctuation, threads)
    schema = events_table(app).schema
    kept: list[pa.RecordBatch] = []

    def start(state: Any = None) -> Engine:
        eng = Engine()
        eng.define_stream(EVENTS, schema)
        eng.deploy(Query.chain("txn", EVENTS, spec), state, on_output=kept.append)
        return eng

    eng = start()
    for i, r in enumerate([*records, End()]):
        if i == snapshot_at:
            state = decode_state(encode_state(eng.snapshot()["txn"]))
            eng.close()
            eng = start(state)
        if isinstance(r, Data):
            eng.push(EVENTS, r.batch)
        elif isinstance(r, Watermark):
            eng.watermark(EVENTS, r.time)
        else:
            eng.end()
    figures = eng.metrics()["queries"]["txn"]["operators"]
    eng.close()
    checksum = next(m["state_checksum"] for m in figures.values())
    return _answer_of(pa.Table.from_batches(kept, schema=spec.output_schema({1: schema})),
                      checksum)


@pytest.mark.parametrize("name", ["sl", "gs", "tp"])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_engine_path_equals_direct_path(name: str, data: st.DataObject) -> None:
    app = _app(name, data)
    table = events_table(app)
    records = _records(table, data)
    punctuation = data.draw(st.sampled_from([1, 3, 16, 50, 97]), label="punctuation")
    threads = data.draw(st.sampled_from([1, 2]), label="threads")
    want = _direct(app, _intervals(records, punctuation), threads)
    got = _engine(app, records, punctuation, threads)
    assert got == want
    snapshot_at = data.draw(st.integers(0, len(records)), label="snapshot at")
    assert _engine(app, records, punctuation, threads, snapshot_at) == want


# -- bad input --------------------------------------------------------------------------------


def test_bad_input_aborts_only_its_event_and_the_engine_serves_other_queries() -> None:
    app = make_app("sl", TxnWorkload(events=8, keys=10, deposit_ratio=0.0, seed=1))
    ev = app.events
    ev["amount"][1] = np.nan          # non-finite amount
    ev["src"][3] = 10                 # beyond the declared accounts
    ev["dst"][5] = -2                 # negative
    ev["src"][6], ev["amount"][6] = -1, np.inf  # both: the key is named
    table = events_table(app)
    eng = Engine()
    eng.define_stream(EVENTS, table.schema)
    eng.deploy(Query.chain("txn", EVENTS, app_operator(app, punctuation=4, threads=2)))
    eng.deploy(Query.chain("big", EVENTS, Select(pc.field("amount") > 50.0)))
    for b in table.to_batches(max_chunksize=3):
        eng.push(EVENTS, b)
    eng.end()
    out = eng.results("txn")
    assert out.column("committed").to_pylist() == [True, False, True, False, True, False,
                                                   False, True]
    reasons = out.column("abort_reason").to_pylist()
    assert [reasons[i] for i in (1, 3, 5, 6)] == [
        REASONS[REASON_OPERAND], REASONS[REASON_KEY], REASONS[REASON_KEY], REASONS[REASON_KEY]]
    big = eng.results("big")
    assert big.num_rows == int((ev["amount"][~np.isnan(ev["amount"])] > 50).sum())
    eng.close()


def test_the_tables_do_not_grow_to_an_undeclared_key() -> None:
    app = make_app("tp", TxnWorkload(events=4, keys=6, seed=2))
    app.events["segment"][2] = 1 << 30
    eng = TxnEngine(app.tables)
    res = eng.execute(app.build(eng, app.events, 0, 4))
    assert res.reason.tolist()[2] == REASON_KEY and res.committed.tolist()[::3] == [True, True]
    assert eng.store.values[0].shape[0] == 6
    eng.close()


# -- snapshots, contract, spec ------------------------------------------------------------------


def test_builder_form_passes_the_operator_contract() -> None:
    app = make_app("gs", TxnWorkload(events=60, keys=12, window=10, window_trigger=5, seed=3,
                                     abort_ratio=0.2))
    table = events_table(app)
    spec = app_operator(app, punctuation=16, threads=2)
    records: list[Step] = [Data(1, b) for b in table.to_batches(max_chunksize=25)]
    records.insert(2, Watermark(1, 30))
    out = check_operator(spec, {1: table.schema}, records + [End()])
    assert out.num_rows == 60


def test_an_old_snapshot_restores() -> None:
    """A snapshot of the per-event form as it was written before the interval form existed
    (no counts, no unsent output) restores and finishes as an uninterrupted run."""
    schema = pa.schema([("k", pa.int64()), ("amount", pa.float64())])
    spec = TransactionalOperator((StateTable("acct", 4, initial=10.0),), _example_debit, 3)
    batch = pa.record_batch({"k": [0, 1, 0, 2, 0], "amount": [4.0, 2.0, 4.0, 1.0, 4.0]},
                            schema=schema)
    straight = spec.build({1: schema})
    want = straight.on_batch(1, batch) + straight.on_end()
    first = spec.build({1: schema})
    got = first.on_batch(1, batch.slice(0, 4))
    state = first.snapshot()
    old = {k: state[k] for k in ("values", "used", "logs", "objects", "last_punctuation",
                                 "pending")}
    assert old["pending"].num_rows == 1
    second = spec.build({1: schema}, decode_state(encode_state(old)))
    got += second.on_batch(1, batch.slice(4)) + second.on_end()
    assert pa.Table.from_batches(got).equals(pa.Table.from_batches(want))


def test_exactly_one_of_fn_and_builder() -> None:
    tables = (StateTable("acct", 4),)
    app = make_app("sl", TxnWorkload(events=1))
    with pytest.raises(PlanError, match="exactly one of fn= .* and builder="):
        TransactionalOperator(tables)
    with pytest.raises(PlanError, match="exactly one of fn= .* and builder="):
        TransactionalOperator(tables, _example_debit, builder=app.build)
    with pytest.raises(PlanError, match="builder must be callable"):
        TransactionalOperator(tables, builder=42)  # type: ignore[arg-type]


def test_a_builder_that_breaks_its_contract_is_named() -> None:
    def half(engine: TxnEngine, ev: Any, lo: int, hi: int) -> OpBatch:
        app = make_app("sl", TxnWorkload(events=hi - lo))
        return app.build(engine, ev, lo, (lo + hi) // 2)

    spec = TransactionalOperator((StateTable("accounts", 10), StateTable("book_entries", 10)),
                                 builder=half, punctuation=4)
    table = events_table(make_app("sl", TxnWorkload(events=4, keys=10)))
    logic = spec.build({1: table.schema})
    with pytest.raises(PlanError, match="builder .*half.* one transaction per row"):
        logic.on_batch(1, table.to_batches()[0])


@settings(max_examples=30, deadline=None)
@given(counts=st.lists(st.integers(0, 4), max_size=40))
def test_txn_offsets_equals_searchsorted(counts: list[int]) -> None:
    txn = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    want = np.searchsorted(txn, np.arange(len(counts) + 1))
    assert txn_offsets(txn, len(counts)).tolist() == want.tolist()
