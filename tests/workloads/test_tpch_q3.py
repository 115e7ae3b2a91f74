"""TPC-H Q3 as streams: unbounded against DuckDB, windowed against the brute-force reference."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from splice.core.errors import PlanError, SchemaError
from splice.io.tpch import load_tables
from splice.joins._hash_kernels import merge_by_fraction
from splice.workloads.tpch_q3 import q3_arrival, q3_sql, run_q3

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reference.tpch_q3 import q3_windowed  # noqa: E402

SF = 0.01


@pytest.fixture(scope="module")
def tables() -> dict[str, pa.Table]:
    return load_tables(("customer", "orders", "lineitem"), SF)


@pytest.mark.parametrize("order", ["interleaved", "sequential", "reversed"])
def test_unbounded_equals_duckdb(tables: dict[str, pa.Table], order: str) -> None:
    got, metrics = run_q3(tables, None, order, batch_size=4096)
    want = q3_sql(tables)
    assert got.schema.equals(want.schema), (got.schema, want.schema)
    assert got.to_pylist() == want.to_pylist()
    assert metrics["seconds"] > 0 and metrics["window"] == "unbounded"


@pytest.mark.parametrize("window,order,impl,table_size,batch", [
    (1, "interleaved", "fast", None, 7),
    (16, "interleaved", "hbsj", 4, 50),
    (64, "interleaved", "fast", None, 65_536),
    (64, "interleaved", "hbsj", None, 51),
    (32, "sequential", "hbsj", 2, 100),
    (8, "reversed", "fast", None, 1000),
])
def test_windowed_equals_brute_force(tables, window, order, impl, table_size, batch) -> None:
    got, metrics = run_q3(tables, window, order, batch_size=batch, impl=impl, table_size=table_size)
    want = q3_windowed(tables, window, order)
    assert got.to_pylist() == want
    if impl == "hbsj":
        st = metrics["hbsj"]
        assert set(st) == {"c_custkey", "o_custkey", "o_orderkey", "l_orderkey"}
        if table_size == 2:
            assert st["l_orderkey"]["overflow_inserts"] > 0


def test_interleaved_arrival_is_proportional() -> None:
    side, row = q3_arrival((2, 3, 6))
    assert side.tolist() == [2, 1, 0, 2, 2, 1, 2, 0, 2, 1, 2]  # ties: customer first
    for t, n in enumerate((2, 3, 6)):
        assert row[side == t].tolist() == list(range(n))
    sizes = np.array([3, 5, 11], np.int64)
    s1, r1 = merge_by_fraction(sizes)
    s2, r2 = merge_by_fraction.py_func(sizes)
    assert np.array_equal(s1, s2) and np.array_equal(r1, r2)
    want = sorted(((i + 0.5) / n, t) for t, n in enumerate(sizes.tolist()) for i in range(n))
    assert s1.tolist() == [t for _, t in want]


def test_bad_input(tables) -> None:
    with pytest.raises(PlanError, match=">= 1"):
        run_q3(tables, 0)
    with pytest.raises(PlanError, match="arrival order"):
        run_q3(tables, 4, "random")
    with pytest.raises(PlanError, match="'customer' is missing"):
        run_q3({"orders": tables["orders"], "lineitem": tables["lineitem"]}, None)
    with pytest.raises(SchemaError, match="lacks column 'o_custkey'"):
        run_q3({**tables, "orders": tables["orders"].drop_columns(["o_custkey"])}, None)
