"""The transactional operator under the operator contract (pickling, snapshot/restore, ...)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa

from splice.core.records import Data, End, Watermark
from splice.testing.contract import check_operator
from splice.testing.harness import Step
from splice.txn import StateTable
from splice.txn.api import Access, add, read
from splice.txn.txn_operator import TransactionalOperator

SCHEMA = pa.schema([("src", pa.int64()), ("dst", pa.int64()), ("amount", pa.float64())])


def transfer(row: dict) -> list[Access]:
    return [add("acct", row["src"], -row["amount"], require_ge=row["amount"]),
            add("acct", row["dst"], row["amount"]), read("acct", 0)]


def test_transactional_operator_contract() -> None:
    spec = TransactionalOperator((StateTable("acct", 4, initial=20.0),), transfer, punctuation=3,
                                 threads=2, scheduler="ns,f,e")
    batches = [
        pa.record_batch({"src": [0, 1, 2, 0], "dst": [1, 2, 3, 3], "amount": [5.0, 30.0, 1.0, 9.0]},
                        schema=SCHEMA),
        pa.record_batch({"src": [3, 0], "dst": [0, 1], "amount": [25.0, 7.0]}, schema=SCHEMA),
    ]
    records: list[Step] = [Data(1, batches[0]), Watermark(1, 5), Data(1, batches[1]), End()]
    out = check_operator(spec, {1: SCHEMA}, records)
    assert out.column("committed").to_pylist() == [True, False, True, True, True, True]
    assert out.column("abort_reason").to_pylist()[1] == "condition failed"
    assert out.column("results").to_pylist()[5] == [24.0, 32.0, 31.0]


RICH = pa.schema([("src", pa.int64()), ("at", pa.timestamp("us", tz="UTC")), ("price", pa.decimal128(9, 2)),
                  ("tags", pa.list_(pa.string())), ("note", pa.binary()), ("amount", pa.float64())])


def pay(row: dict) -> list[Access]:
    return [add("acct", row["src"], -row["amount"], require_ge=row["amount"])]


def test_pending_rows_of_any_arrow_type_survive_a_snapshot() -> None:
    """Rows waiting for the punctuation are snapshotted as an Arrow batch of the input's schema:
    timestamps, decimals, lists and bytes come back as they went in."""
    spec = TransactionalOperator((StateTable("acct", 3, initial=10.0),), pay, punctuation=4)
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    rows = [{"src": i % 3, "at": t0 + dt.timedelta(seconds=i), "price": Decimal(f"{i}.25"),
             "tags": [str(i)] * (i % 2), "note": bytes([i]), "amount": 3.0 * i} for i in range(7)]
    batches = [pa.RecordBatch.from_pylist(rows[:3], schema=RICH), pa.RecordBatch.from_pylist(rows[3:], schema=RICH)]
    out = check_operator(spec, {1: RICH}, [Data(1, batches[0]), Data(1, batches[1]), End()])
    assert out.select(RICH.names).to_pylist() == rows
    assert out.column("committed").to_pylist() == [True] * 4 + [False] * 3
