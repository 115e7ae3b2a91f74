"""TPC-H Q1 and Q6 written as the benchmark's SQL over a CREATE TABLE source equal DuckDB's answers,
and run the same operators as the hand-written plans (GroupBy with the filter folded in)."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from splice.cli.sql import run_statements
from splice.io.tpch_data import generate, load_table
from splice.workloads.tpch_queries import Q1_SQL, Q6_SQL

SF = 0.01
QUERIES = {
    "q1": Q1_SQL.format(delta=90),
    "q6": Q6_SQL.format(date="1994-01-01", discount=0.06, quantity=24),
}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_tpch_sql_equals_duckdb(name):
    path = generate(SF, ("lineitem",)) / "lineitem.parquet"
    sql = QUERIES[name]
    text = f"CREATE TABLE lineitem WITH (connector = 'file', path = '{path}', format = 'parquet');\n{sql}"
    run = run_statements(text, batch_size=8192)
    got = run.results["query"]
    con = duckdb.connect()
    con.register("lineitem", load_table("lineitem", SF))
    want = con.sql(sql).arrow()
    want = want.read_all() if isinstance(want, pa.RecordBatchReader) else want
    assert got.num_rows == want.num_rows > 0
    for g, w in zip(got.columns, want.columns, strict=True):
        for a, b in zip(g.to_pylist(), w.to_pylist(), strict=True):
            assert a == (pytest.approx(b, rel=1e-12) if isinstance(b, float) else b)
    explained = run_statements("EXPLAIN " + text.split(";\n", 1)[1], tables=[f"lineitem={path}"]).explained
    assert any("GroupBy" in line and "filter below it folded in" in line for line in explained)
