"""The transactional operator under the operator contract (pickling, snapshot/restore, ...)."""

from __future__ import annotations

import pyarrow as pa

from splice.core.records import Data, End, Watermark
from splice.testing.contract import check_operator
from splice.txn import StateTable
from splice.txn.api import Access, add, read
from splice.txn.operator import TransactionalOperator

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
    records = [Data(1, batches[0]), Watermark(1, 5), Data(1, batches[1]), End()]
    out = check_operator(spec, {1: SCHEMA}, records)
    assert out.column("committed").to_pylist() == [True, False, True, True, True, True]
    assert out.column("abort_reason").to_pylist()[1] == "condition failed"
    assert out.column("results").to_pylist()[5] == [24.0, 32.0, 31.0]
