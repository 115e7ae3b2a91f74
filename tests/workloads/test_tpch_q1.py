"""TPC-H Q1 and Q6 as operator chains give exactly DuckDB's answers (types, values, order)."""

from __future__ import annotations

import datetime as dt

import duckdb
import pyarrow as pa
import pytest

from splice.core.operator import OperatorSpec
from splice.core.records import Data, End
from splice.io.tpch_data import load_table
from splice.ops.aggregate import GroupBy
from splice.testing import rebatch, run_operator
from splice.workloads import tpch_queries as tq

SF = 0.01


@pytest.fixture(scope="module")
def lineitem() -> pa.Table:
    return load_table("lineitem", SF)


def _duckdb(lineitem: pa.Table, sql: str) -> pa.Table:
    con = duckdb.connect()
    con.register("lineitem", lineitem)
    return con.sql(sql).to_arrow_table()


def _chain(specs: list[OperatorSpec], table: pa.Table, size: int) -> pa.Table:
    batches, schema = rebatch(table, size), table.schema
    for spec in specs:
        out, _ = run_operator(spec, {2: schema}, [*(Data(2, b) for b in batches), End()])
        batches, schema = out.to_batches(), out.schema
    return out


@pytest.mark.parametrize("size", [4_096, 65_536])
def test_q1_equals_duckdb(lineitem: pa.Table, size: int) -> None:
    want = _duckdb(lineitem, tq.Q1_SQL.format(delta=90))
    got = _chain(tq.q1(), lineitem, size)
    assert got.schema == want.schema
    assert got.equals(want), f"\n{got.to_pylist()}\n{want.to_pylist()}"


def test_q1_with_the_selection_pushed_into_the_group_by(lineitem: pa.Table) -> None:
    fused = tq.q1(60, pushdown=True)
    assert len(fused) == 2 and isinstance(fused[0], GroupBy) and fused[0].where is not None
    assert _chain(fused, lineitem, 10_000).equals(_duckdb(lineitem, tq.Q1_SQL.format(delta=60)))


@pytest.mark.parametrize(
    ("date", "discount", "quantity"), [("1994-01-01", "0.06", 24), ("1996-01-01", "0.03", 30)]
)
def test_q6_equals_duckdb(lineitem: pa.Table, date: str, discount: str, quantity: int) -> None:
    want = _duckdb(lineitem, tq.Q6_SQL.format(date=date, discount=discount, quantity=quantity))
    for pushdown in (False, True):
        got = _chain(tq.q6(date, discount, quantity, pushdown), lineitem, 7_000)
        assert got.schema == want.schema
        assert got.equals(want), f"{got.to_pylist()} != {want.to_pylist()}"


def test_shipmode_revenue_windows_equal_duckdb(lineitem: pa.Table) -> None:
    got = _chain(tq.shipmode_revenue(365), lineitem, 65_536)
    want = _duckdb(
        lineitem,
        """
        select (epoch(l_shipdate)::bigint // 86400 // 365 * 365) as ws, l_shipmode,
               sum(l_extendedprice * (1 - l_discount)) as revenue, count(*) as lines
        from lineitem group by all order by ws, l_shipmode
        """,
    )
    rows = sorted(
        (r["window_start"].toordinal(), r["l_shipmode"], r["revenue"], r["lines"])
        for r in got.to_pylist()
    )
    epoch = 719163  # date(1970, 1, 1).toordinal()
    assert rows == [(r["ws"] + epoch, r["l_shipmode"], r["revenue"], r["lines"]) for r in want.to_pylist()]
    assert all(
        r["window_end"] - r["window_start"] == dt.timedelta(365) for r in got.to_pylist()
    )
