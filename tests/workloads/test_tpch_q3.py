"""TPC-H Q3 as streams: unbounded against DuckDB, windowed against the brute-force reference."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from splice.core.errors import PlanError, SchemaError
from splice.io.tpch_data import load_tables
from splice.joins.hash._hash_kernels import merge_by_fraction
from splice.workloads.tpch_q3 import q3_arrival, q3_sql, run_q3

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reference.tpch_q3 import DATE, q3_windowed  # noqa: E402

SF = 0.01


@pytest.fixture(scope="module")
def tables() -> dict[str, pa.Table]:
    return load_tables(("customer", "orders", "lineitem"), SF)


@pytest.mark.parametrize("order", ["interleaved", "sequential", "reversed"])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_unbounded_equals_duckdb(tables: dict[str, pa.Table], order: str, threads: int) -> None:
    got, metrics = run_q3(tables, None, order, batch_size=4096, threads=threads)
    want = q3_sql(tables)
    assert got.schema.equals(want.schema), (got.schema, want.schema)
    assert got.to_pylist() == want.to_pylist()
    assert metrics["seconds"] > 0 and metrics["window"] == "unbounded" and metrics["threads"] == threads
    one, m1 = run_q3(tables, None, order, threads=1)
    assert metrics["join_results"] == m1["join_results"] and metrics["groups"] == m1["groups"]


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
    with pytest.raises(PlanError, match="threads must be >= 1"):
        run_q3(tables, None, threads=0)
    with pytest.raises(PlanError, match="arrival order"):
        run_q3(tables, 4, "random")
    with pytest.raises(PlanError, match="'customer' is missing"):
        run_q3({"orders": tables["orders"], "lineitem": tables["lineitem"]}, None)
    with pytest.raises(SchemaError, match="lacks column 'o_custkey'"):
        run_q3({**tables, "orders": tables["orders"].drop_columns(["o_custkey"])}, None)


def _with_null_keys(tables: dict[str, pa.Table], fraction: float, seed: int) -> dict[str, pa.Table]:
    """``tables`` with about ``fraction`` of every join key set to null."""
    rng = np.random.default_rng(seed)
    out = dict(tables)
    for name, key in (("customer", "c_custkey"), ("orders", "o_orderkey"), ("orders", "o_custkey"),
                      ("lineitem", "l_orderkey")):
        t = out[name]
        col = t.column(key).combine_chunks()
        nulls = rng.random(len(col)) < fraction
        out[name] = t.set_column(t.schema.get_field_index(key), key,
                                 pa.array(col.to_numpy(), col.type, mask=nulls))
    return out


@pytest.mark.parametrize("impl,window", [("fast", 64), ("hbsj", 64), ("fast", 512), ("fast", None)])
def test_null_keys_never_match_and_are_counted(tables, impl, window) -> None:
    nulled = _with_null_keys(tables, 0.2, seed=len(impl) + (window or 0))
    got, metrics = run_q3(nulled, window, "interleaved", batch_size=333, impl=impl, threads=3)
    if window is None:
        assert got.to_pylist() == q3_sql(nulled).to_pylist()
    else:
        assert got.to_pylist() == q3_windowed(nulled, window, "interleaved")
    c, o, li = (nulled[n] for n in ("customer", "orders", "lineitem"))
    want = {
        "customer": sum(1 for r in c.to_pylist() if r["c_mktsegment"] == "BUILDING" and r["c_custkey"] is None),
        "orders": sum(1 for r in o.to_pylist() if r["o_orderdate"] < DATE
                      and (r["o_custkey"] is None or r["o_orderkey"] is None)),
        "lineitem": sum(1 for r in li.to_pylist() if r["l_shipdate"] > DATE and r["l_orderkey"] is None),
    }
    assert metrics["null_keys"] == want and all(v > 0 for v in want.values())


def test_fast_and_hbsj_agree_with_null_keys(tables) -> None:
    nulled = _with_null_keys(tables, 0.3, seed=7)
    fast, fm = run_q3(nulled, 128, "sequential", impl="fast")
    hb, hm = run_q3(nulled, 128, "sequential", impl="hbsj", table_size=8)
    assert fast.to_pylist() == hb.to_pylist() and fm["join_results"] == hm["join_results"]
    assert fm["null_keys"] == hm["null_keys"]
