"""Random transaction batches for differential tests (hypothesis draws the parameters)."""

from __future__ import annotations

from typing import Any

import numpy as np

from splice.txn.ops import (
    ADD,
    COND_GE,
    COND_LE,
    COND_NONE,
    MAX,
    READ,
    SUM_ADD,
    SUM_WRITE,
    WINDOW_READ,
    WRITE,
    OpBatch,
    OpBatchBuilder,
)
from splice.txn.state_tables import StateStore


def random_batch(rng: np.random.Generator, store: StateStore, ts0: int, n_txn: int, keys: int,
                 skew: float, abort_bias: float, max_ops: int = 4, udf_ratio: float = 0.0) -> OpBatch:
    """Mixed kinds, conditions near current magnitudes, Zipf-ish keys over two tables; with
    ``udf_ratio``, that share of ops are ``UDF`` ops for :func:`tests.txn.udfs.ledger_udf`."""
    ts = ts0 + np.cumsum(rng.integers(1, 3, n_txn))
    b = OpBatchBuilder(ts)
    p = 1.0 / np.arange(1, keys + 1) ** skew
    p /= p.sum()
    rows: list[tuple[int, int, int, int, float, int, float, list[int]]] = []
    udf_rows: list[tuple[int, int, list[float]]] = []
    for t in range(n_txn):
        for _ in range(int(rng.integers(1, max_ops + 1))):
            table = int(rng.integers(0, 2))
            key = int(rng.choice(keys, p=p))
            if rng.random() < udf_ratio:
                which = int(rng.choice([0, 0, 1, 3, 4, 2 if rng.random() < 0.1 else 1]))
                a = float(rng.choice([-1.0, 0.5, 2.0])) if which == 1 else float(rng.integers(0, 15))
                udf_rows.append((t, int(store.cells(table, [key])[0]), [which, a, float(rng.integers(0, 4))]))
                continue
            kind = int(rng.choice([READ, WRITE, ADD, ADD, SUM_WRITE, SUM_ADD, WINDOW_READ, MAX]))
            operand = float(rng.integers(-20, 21))
            if kind == WINDOW_READ:
                operand = float(rng.integers(1, 30))
            cond = COND_NONE
            arg = 0.0
            if rng.random() < abort_bias:
                cond = int(rng.choice([COND_GE, COND_LE]))
                arg = float(rng.integers(-30, 60))
            srcs: list[int] = []
            if kind in (SUM_WRITE, SUM_ADD):
                srcs = [int(store.cells(int(rng.integers(0, 2)), [int(rng.choice(keys, p=p))])[0])
                        for _ in range(2)]
            cell = int(store.cells(table, [key])[0])
            rows.append((t, cell, kind, 0, operand, cond, arg, srcs))
    plain = [r for r in rows if not r[7]]
    summed = [r for r in rows if r[7]]
    if plain:
        b.add([r[0] for r in plain], [r[1] for r in plain], [r[2] for r in plain],
              [r[4] for r in plain], [r[5] for r in plain], [r[6] for r in plain])
    if udf_rows:
        b.add_udf([r[0] for r in udf_rows], [r[1] for r in udf_rows], [r[2] for r in udf_rows])
    if summed:
        b.add([r[0] for r in summed], [r[1] for r in summed], [r[2] for r in summed],
              [r[4] for r in summed], [r[5] for r in summed], [r[6] for r in summed],
              sources=[r[7] for r in summed])
    return b.build()


def assert_matches_reference(eng: Any, ref: Any, rng: np.random.Generator, batches: int, n_txn: int,
                             keys: int, skew: float, abort_bias: float, udf_ratio: float = 0.0) -> None:
    """Run ``batches`` random batches through the engine and the serial reference: each
    transaction's outcome, reason and results, then the final state of both tables, are equal.
    Closes the engine."""
    ts = 0
    try:
        for _ in range(batches):
            batch = random_batch(rng, eng.store, ts, n_txn, keys, skew, abort_bias, udf_ratio=udf_ratio)
            ts = int(batch.txn_ts[-1]) if n_txn else ts
            got = eng.execute(batch)
            committed, reasons, results = ref.run(batch)
            assert got.committed.tolist() == committed
            assert got.reason.tolist() == reasons
            np.testing.assert_array_equal(got.op_result, np.array(results, dtype=np.float64))
        cells = np.concatenate([eng.store.cells(0, np.arange(keys)), eng.store.cells(1, np.arange(keys))])
        np.testing.assert_array_equal(eng.store.gather(cells), ref.values(cells))
    finally:
        eng.close()
