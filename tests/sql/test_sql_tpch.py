"""TPC-H Q1, Q3 and Q6 written as the benchmark's SQL over CREATE TABLE sources equal DuckDB's
answers; Q1 and Q6 run the operators of the hand-written plans (GroupBy with the filter folded
in), Q3 joins on keys over the finite tables."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from splice.cli.sql import run_statements
from splice.io.tpch_data import generate, load_table
from splice.workloads.tpch_q3 import Q3_SQL as Q3_TEXT
from splice.workloads.tpch_queries import Q1_SQL, Q6_SQL

#: ties in revenue and date ordered by the order key, so the ten rows are one answer
Q3_SQL = Q3_TEXT.replace("o_orderdate\nLIMIT", "o_orderdate, l_orderkey\nLIMIT")

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
    assert len([line for line in explained if line.startswith("  brick")]) == 2 - (name == "q6")


def test_tpch_q3_sql_equals_duckdb():
    names = ("customer", "orders", "lineitem")
    folder = generate(SF, names)
    tables = [f"{n}={folder / n}.parquet" for n in names]
    run = run_statements(Q3_SQL, tables=tables, batch_size=4096)
    con = duckdb.connect()
    for n in names:
        con.register(n, load_table(n, SF))
    want = con.sql(Q3_SQL).arrow()
    want = want.read_all() if isinstance(want, pa.RecordBatchReader) else want
    got = run.results["query"]
    assert got.num_rows == want.num_rows == 10
    assert [c.to_pylist() for c in got.columns] == [c.to_pylist() for c in want.columns]
