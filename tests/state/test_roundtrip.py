"""Snapshot -> checkpoint codec (JSON skeleton, Arrow IPC, .npy) -> restore, for every stateful operator.

Each operator runs a random stream straight through, and again with its state taken at a random
point, encoded with :func:`splice.state.codec.encode_state`, decoded and restored into a fresh
logic: the two runs must emit the same rows in the same order. No file of the encoding is a
pickle: what operators snapshot is data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.operator import OperatorSpec
from splice.core.records import Data, End, Watermark
from splice.joins.band.band_join import BandJoin
from splice.joins.common.join_windows import CountWindow, TimeWindow
from splice.joins.hash.hash_window_join import HashWindowJoin
from splice.joins.multiway.multiway_join import MultiwayJoin
from splice.joins.temporal.interval_join import IntervalJoin
from splice.joins.temporal.window_join import WindowJoin
from splice.ops.aggregate import Agg, GroupBy
from splice.ops.order import OrderBy, TopK
from splice.ops.window_aggregate import WindowAggregate
from splice.state.codec import decode_state, encode_state
from splice.testing.contract import assert_same_rows
from splice.testing.harness import OperatorHarness, Step
from splice.txn import StateTable
from splice.txn.api import Access, add, update_object
from splice.txn.txn_operator import TransactionalOperator, _example_debit

SCHEMA = pa.schema([("k", pa.int64()), ("t", pa.int64()), ("v", pa.float64())])
L, R, C = 2, 3, 4


def _one(spec: OperatorSpec) -> tuple[OperatorSpec, dict[int, pa.Schema], list[int]]:
    return spec, {L: SCHEMA}, [L]


def _two(spec: OperatorSpec) -> tuple[OperatorSpec, dict[int, pa.Schema], list[int]]:
    return spec, {L: SCHEMA, R: SCHEMA}, [L, R]


TXN_SCHEMA = pa.schema([("k", pa.int64()), ("amount", pa.float64())])


def _log(entries: list, amount: float) -> list:
    return (entries + [(amount, {"at": len(entries)})])[-3:]  # tuples and dicts: data


def _debit_and_log(row: dict[str, Any]) -> list[Access]:
    return [add("acct", row["k"], -row["amount"], require_ge=row["amount"]),
            update_object("log", row["k"], _log, row["amount"])]


OPERATORS: dict[str, Callable[[], tuple[OperatorSpec, dict[int, pa.Schema], list[int]]]] = {
    "group_by": lambda: _one(GroupBy(["k"], [Agg("s", "sum", "v"), Agg("n", "count")])),
    "group_by_rocksdb": lambda: _one(GroupBy(["k"], [Agg("s", "sum", "v"), Agg("n", "count")],
                                             state_backend="rocksdb")),
    "order_by": lambda: _one(OrderBy([("v", "descending"), ("t", "ascending")])),
    "top_k": lambda: _one(TopK([("v", "descending"), ("t", "ascending")], 3)),
    "window_aggregate": lambda: _one(WindowAggregate("t", 10, 5, keys=["k"], aggregates=[Agg("s", "sum", "v")])),
    "hash_count": lambda: _two(HashWindowJoin(L, R, "k", CountWindow(5))),
    "hash_time": lambda: _two(HashWindowJoin(L, R, "k", TimeWindow(8, "t"))),
    "multiway": lambda: (MultiwayJoin((L, R, C), ((L, "k", R, "k"), (R, "t", C, "t")), window=6),
                         {L: SCHEMA, R: SCHEMA, C: SCHEMA}, [L, R, C]),
    "interval": lambda: _two(IntervalJoin(L, R, "k", "t", -3, 3, how="full")),
    "window_join": lambda: _two(WindowJoin(L, R, "k", "t", 6, how="left")),
    "band": lambda: _two(BandJoin(L, R, "v", eps=0.2, window=6, index="bptree")),
    "transactions": lambda: (TransactionalOperator((StateTable("acct", 4, initial=10.0),), _example_debit, 3),
                             {L: TXN_SCHEMA}, [L]),
    "transactions_objects": lambda: (TransactionalOperator(
        (StateTable("acct", 4, initial=10.0), StateTable("log", 4, objects=("items",), object_initial=list)),
        _debit_and_log, 3), {L: TXN_SCHEMA}, [L]),
}


def _records(draw: Any, streams: list[int], txn: bool) -> list[Step]:
    n_batches = draw(st.integers(1, 8))
    recs: list[Step] = []
    clock = 0
    for _ in range(n_batches):
        sid = draw(st.sampled_from(streams))
        n = draw(st.integers(0, 5))
        seed = draw(st.integers(0, 2**16))
        rng = np.random.default_rng(seed)
        if txn:
            batch = pa.record_batch({"k": rng.integers(0, 4, n), "amount": rng.integers(1, 6, n).astype(float)},
                                    schema=TXN_SCHEMA)
        else:
            times = clock + np.sort(rng.integers(0, 4, n))
            clock = int(times.max()) if n else clock
            batch = pa.record_batch({"k": rng.integers(0, 3, n), "t": times,
                                     "v": np.round(rng.random(n), 2)}, schema=SCHEMA)
        recs.append(Data(sid, batch))
        if not txn and draw(st.booleans()):
            recs.append(Watermark(sid, clock - 3))
    recs.append(End())
    return recs


@pytest.mark.parametrize("name", sorted(OPERATORS))
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_snapshot_restore_through_the_store_codec(name: str, data: Any) -> None:
    spec, inputs, streams = OPERATORS[name]()
    recs = _records(data.draw, streams, name.startswith("transactions"))
    cut = data.draw(st.integers(0, len(recs) - 1))
    straight = OperatorHarness(spec, inputs)
    for r in recs:
        straight.step(r)
    resumed = OperatorHarness(spec, inputs)
    for i, r in enumerate(recs):
        if i == cut:
            files = encode_state({"op": resumed.logic.snapshot()})
            assert not any(d[:1] == b"\x80" for d in files.values())  # no pickle
            state = decode_state(files)["op"]
            resumed.logic = spec.build(inputs, state)
        resumed.step(r)
    assert_same_rows(resumed.result(), straight.result(), ordered=True, what=name)
