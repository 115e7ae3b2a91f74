"""Python-object state: the serial slow path equals the access-level reference; snapshots hold the
objects as data (JSON), and values a checkpoint cannot hold are refused, naming table and key."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import PlanError, StateError
from splice.core.records import Data, End, Watermark
from splice.state.codec import decode_state, encode_state
from splice.testing.contract import check_operator
from splice.testing.harness import OperatorHarness
from splice.txn import StateTable, TxnEngine
from splice.txn.api import Access, add, read, read_object, run_events, update_object
from splice.txn.objects import Abort
from splice.txn.txn_operator import TransactionalOperator
from tests.txn.reference import AccessReference

CAP = 3


def place(book: list, ts: int, qty: float) -> list:
    """Append an order; a full book aborts the transaction."""
    if len(book) >= CAP:
        raise Abort(f"book full ({len(book)} orders)")
    book.append((ts, qty))
    return book


def fill(book: list, qty: float) -> list:
    """Take ``qty`` from the oldest orders; a bad quantity is a user error (raises)."""
    if qty < 0:
        raise ValueError("negative quantity")
    while book and qty > 0:
        ts, q = book[0]
        take = min(q, qty)
        qty -= take
        book = [(ts, q - take)] + book[1:] if q > take else book[1:]
    return book


def tables() -> list[StateTable]:
    return [StateTable("cash", keys=4, initial=50.0),
            StateTable("books", keys=4, objects=("orders", "log"), object_initial=list)]


def order_event(e: dict) -> list[Access]:
    if e["type"] == "place":  # pay, then append to the book
        return [add("cash", e["k"], -e["qty"], require_ge=e["qty"]),
                update_object("books", e["k"], place, e["ts"], e["qty"]),
                read_object("books", e["k"])]
    if e["type"] == "fill":
        return [update_object("books", e["k"], fill, e["qty"]), add("cash", e["k"], e["qty"]),
                update_object("books", e["k"], lambda log, q: log + [q], e["qty"], column="log")]
    return [add("cash", e["k"], e["qty"]), read("cash", e["k"])]  # a plain deposit


def _events(seed: int, n: int, keys: int, plain_share: float) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for ts in range(n):
        r = rng.random()
        kind = "deposit" if r < plain_share else ("place" if rng.random() < 0.6 else "fill")
        qty = float(rng.integers(-2, 30)) if kind == "fill" else float(rng.integers(1, 30))
        out.append({"type": kind, "k": int(rng.integers(0, keys)), "qty": qty, "ts": ts})
    return out


def _run_engine(events: list[dict], cuts: list[int], scheduler: str, threads: int
                ) -> tuple[list, TxnEngine]:
    eng = TxnEngine(tables(), threads=threads, scheduler=scheduler)
    got = []
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        got += run_events(eng, events[lo:hi], order_event)
    return got, eng


@pytest.mark.parametrize("scheduler,threads", [("serial", 1), ("auto", 2), ("ns,f,l", 2),
                                               ("s,c,e", 2), ("tstream", 2), ("sstore", 2)])
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(0, 60), keys=st.integers(1, 4),
       plain_share=st.sampled_from([0.2, 0.8, 1.0]), batch=st.sampled_from([1, 7, 50]))
def test_object_batches_equal_reference(scheduler: str, threads: int, seed: int, n: int, keys: int,
                                        plain_share: float, batch: int) -> None:
    events = _events(seed, n, keys, plain_share)
    cuts = list(range(0, n, batch)) + [n]
    got, eng = _run_engine(events, cuts, scheduler, threads)
    want = AccessReference(tables()).run(events, order_event)
    ref = AccessReference(tables())
    ref_out = ref.run(events, order_event)
    assert [o.committed for o in got] == [w[0] for w in want]
    assert [o.reason.split(":")[0] for o in got] == [w[1].split(":")[0] for w in want]
    for o, w in zip(got, want, strict=True):
        if o.committed:
            assert o.results == w[2]
    for k in range(keys):
        assert eng.store.value("cash", k) == ref._num("cash", k, None)
        assert eng.store.object_value("books", k) == ref._obj("books", "orders", k)
        assert eng.store.object_value("books", k, "log") == ref._obj("books", "log", k)
    assert len(ref_out) == n
    eng.close()


def test_abort_and_user_errors_leave_objects_unchanged() -> None:
    eng = TxnEngine(tables(), threads=2)
    out = run_events(eng, [{"type": "place", "k": 0, "qty": 5, "ts": t} for t in range(4)]
                     + [{"type": "fill", "k": 0, "qty": -1, "ts": 9},
                        {"type": "place", "k": 1, "qty": 500, "ts": 10}], order_event)
    assert [o.committed for o in out] == [True, True, True, False, False, False]
    assert out[3].reason == "condition failed: book full (3 orders)"
    assert out[4].reason.startswith("user function raised: fill raised ValueError")
    assert out[5].reason == "condition failed"  # not enough cash: the append never lands
    assert out[2].results[2] == [(0, 5.0), (1, 5.0), (2, 5.0)]
    assert eng.store.object_value("books", 0) == [(0, 5.0), (1, 5.0), (2, 5.0)]
    assert eng.store.object_value("books", 1) == [] and eng.store.value("cash", 0) == 35.0
    # a result is a copy: changing it does not change the state
    out[2].results[2].clear()
    assert len(eng.store.object_value("books", 0)) == 3
    eng.close()


def test_snapshot_mid_stream_restores_objects() -> None:
    events = _events(4, 120, 3, 0.3)
    straight, eng = _run_engine(events, [0, 40, 80, 120], "auto", 2)
    half, eng1 = _run_engine(events[:40], [0, 40], "auto", 2)
    snap = decode_state(encode_state(eng1.store.snapshot()))
    eng2 = TxnEngine(tables(), threads=2)
    eng2.store.restore(snap)
    rest = run_events(eng2, events[40:80], order_event) + run_events(eng2, events[80:], order_event)
    assert [o.committed for o in half + rest] == [o.committed for o in straight]
    assert eng2.store.checksum() == eng.store.checksum()
    assert eng2.store.objects == eng.store.objects
    books = [eng2.store.object_value("books", k) for k in range(3)]
    assert any(books) and all(type(o) is tuple for b in books for o in b)  # tuples stay tuples
    with pytest.raises(StateError):
        TxnEngine([StateTable("books", keys=4, objects=("other",))]).store.restore(snap)
    for e in (eng, eng1, eng2):
        e.close()


def test_object_declaration_and_access_errors() -> None:
    with pytest.raises(PlanError):
        StateTable("t", keys=2, objects=("value",))
    with pytest.raises(PlanError):
        StateTable("t", keys=2, objects=("a",), object_initial=[])  # type: ignore[arg-type]
    with pytest.raises(PlanError):
        update_object("books", 0, "not callable")  # type: ignore[arg-type]
    eng = TxnEngine(tables())
    out = run_events(eng, [{"k": 0}, {"k": "x"}, {"k": 1}],
                     lambda e: [read_object("cash" if e["k"] == 1 else "books", e["k"])])
    assert [o.reason.split(":")[0] for o in out] == [
        "", "key of the wrong type or out of range", "undeclared table or column"]
    assert out[0].results == ([],)
    eng.close()


SCHEMA = pa.schema([("type", pa.string()), ("k", pa.int64()), ("qty", pa.float64()),
                    ("ts", pa.int64())])


def test_transactional_operator_with_objects_passes_the_contract() -> None:
    events = _events(8, 30, 2, 0.3)
    spec = TransactionalOperator(tuple(tables()), order_event, punctuation=4, threads=2)
    batch = pa.RecordBatch.from_pylist(events, schema=SCHEMA)
    records: list = [Data(1, batch.slice(0, 13)), Watermark(1, 5), Data(1, batch.slice(13)), End()]
    out = check_operator(spec, {1: SCHEMA}, records)
    want = AccessReference(tables()).run(events, order_event)
    assert out.column("committed").to_pylist() == [w[0] for w in want]


def _store_set(value: object, item: int) -> set:
    return {item}


def test_values_that_state_cannot_hold_are_refused_at_declaration() -> None:
    with pytest.raises(PlanError, match="table 't': object_initial set makes values that state cannot hold"):
        StateTable("t", keys=2, objects=("a",), object_initial=set)
    with pytest.raises(PlanError, match=r"table 't': object_initial\(\): value\['b'\] is a set"):
        StateTable("t", keys=2, objects=("a",), object_initial=lambda: {"b": {1}})
    with pytest.raises(PlanError, match="object_initial\\(\\) raised ZeroDivisionError"):
        StateTable("t", keys=2, objects=("a",), object_initial=lambda: 1 / 0)
    fine: list[Any] = [list, dict, tuple, lambda: {"bids": [], "asks": []}, lambda: (0, 1.5, None)]
    for ok in fine:
        StateTable("t", keys=2, objects=("a",), object_initial=ok)


def test_a_value_that_state_cannot_hold_is_refused_at_the_snapshot_naming_its_key() -> None:
    eng = TxnEngine(tables())
    out = run_events(eng, [{"k": 2}], lambda e: [update_object("books", e["k"], _store_set, 5)])
    assert out[0].committed  # the engine itself holds any object
    where = "table 'books', object column 'orders', key 2: value is a set"
    with pytest.raises(StateError, match=where):
        eng.store.snapshot()
    with pytest.raises(StateError, match=where):
        eng.store.checksum()
    eng.close()
    spec = TransactionalOperator(tuple(tables()), lambda row: [update_object("books", row["k"], _store_set, 1)],
                                 punctuation=1)
    h = OperatorHarness(spec, {1: SCHEMA})
    h.push(1, pa.RecordBatch.from_pylist([{"type": "x", "k": 3, "qty": 1.0, "ts": 0}], schema=SCHEMA))
    with pytest.raises(StateError, match="table 'books', object column 'orders', key 3: value is a set"):
        h.snapshot_and_restore()


def test_pickled_objects_are_never_loaded(tmp_path) -> None:  # type: ignore[no-untyped-def]
    class CreatesFile:
        def __reduce__(self) -> tuple:
            return (open, (str(tmp_path / "pwned"), "w"))

    eng = TxnEngine(tables())
    snap = eng.store.snapshot()
    snap["objects"] = pickle.dumps([{"orders": {0: CreatesFile()}, "log": {}}, {}])
    with pytest.raises(StateError, match="pickled objects of an older format are never loaded"):
        TxnEngine(tables()).store.restore(snap)
    snap["objects"] = '[{}, {"orders": [[0, {"$": "set", "v": [1]}]], "log": []}]'
    with pytest.raises(StateError, match="key 0: value is a 'set' node, which a plain value cannot hold"):
        TxnEngine(tables()).store.restore(snap)
    assert not (tmp_path / "pwned").exists()
    eng.close()


def test_checksum_holds_objects_as_data() -> None:
    def state(order: list[str]) -> str:
        eng = TxnEngine(tables())
        for k in order:
            value = {k: [1, (2, 3.5)], "z": None} if order[0] == "a" else {"z": None, k: [1, (2, 3.5)]}
            eng.store.set_object(1, "orders", 0 if k == "a" else 1, value)
        out = eng.store.checksum()
        eng.close()
        return out

    assert state(["a", "b"]) == state(["b", "a"])  # keys are hashed in order, dicts by key
    eng = TxnEngine(tables())
    eng.store.set_object(1, "orders", 0, {"a": [1, [2, 3.5]], "z": None})  # a list, not a tuple
    assert eng.store.checksum() != state(["a"])
    eng.close()
