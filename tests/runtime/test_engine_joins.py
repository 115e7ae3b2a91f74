"""Joins deployed on the data path: the engine gives what the operator gives on its own."""

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from splice.core.records import Data, End
from splice.io.sources import round_robin, table_source
from splice.io.tpch_data import load_table
from splice.joins.common.join_windows import CountWindow
from splice.joins.hash.hash_window_join import HashWindowJoin
from splice.joins.temporal.interval_join import IntervalJoin
from splice.runtime import BindInputs, Engine, Node, Query
from splice.testing import OperatorHarness
from splice.workloads.tpch_plans import q3_query
from splice.workloads.tpch_q3 import Q3_SQL

EXECUTORS = ["serial", "pipelined"]


def _streams(seed: int, n: int):
    rng = np.random.default_rng(seed)
    left = pa.table({"k": pa.array(rng.integers(0, 8, n), pa.int64()),
                     "ts": pa.array(np.sort(rng.integers(0, 200, n)), pa.int64()),
                     "a": pa.array(rng.random(n))})
    right = pa.table({"k": pa.array(rng.integers(0, 8, n), pa.int64()),
                      "ts": pa.array(np.sort(rng.integers(0, 200, n)), pa.int64()),
                      "b": pa.array(rng.random(n))})
    return left, right


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("make", [
    lambda: BindInputs(HashWindowJoin, {"on": "k", "window": CountWindow(16)}),
    lambda: BindInputs(IntervalJoin, {"on": "k", "time": "ts", "lower": -5, "upper": 5,
                                      "how": "full"}),
])
def test_two_input_joins_on_the_path_equal_the_operator_alone(executor, make):
    left, right = _streams(7, 300)
    eng = Engine(executor=executor)
    lid = eng.define_stream("l", left.schema).id
    rid = eng.define_stream("r", right.schema).id
    eng.deploy(Query("j", (Node("join", make(), ("l", "r")),)))
    arrivals = list(round_robin(table_source("l", left, 37), table_source("r", right, 23)))
    for stream, batch in arrivals:
        eng.push(stream, batch)
    eng.end()
    got = eng.results("j")

    spec = make().bind([lid, rid])
    h = OperatorHarness(spec, {lid: left.schema, rid: right.schema})
    want = h.run([Data(lid if s == "l" else rid, b) for s, b in arrivals] + [End()])
    assert got.schema.names == want.schema.names
    assert got.to_pylist() == want.to_pylist()
    assert got.num_rows > 0


@pytest.mark.parametrize("executor", EXECUTORS)
def test_q3_deployed_on_the_path_equals_duckdb(executor, tmp_path_factory):
    data = tmp_path_factory.mktemp("tpch")
    tables = {n: load_table(n, 0.01, data) for n in ("customer", "orders", "lineitem")}
    eng = Engine(executor=executor, bricks=4, units_per_brick=3)
    for n, t in tables.items():
        eng.define_stream(n, t.schema)
    eng.deploy(q3_query())
    eng.run(round_robin(*(table_source(n, t, 8192) for n, t in tables.items())))
    got = eng.results("q3").select(["l_orderkey", "revenue", "o_orderdate", "o_shippriority"])
    con = duckdb.connect()
    for n, t in tables.items():
        con.register(n, t)
    want = con.sql(Q3_SQL).to_arrow_table()
    assert got.to_pylist() == want.cast(got.schema).to_pylist()
    # only the columns the plan reads travel: lineitem's comment never reaches a unit
    travel = eng.decomposer.travel[eng.catalog["lineitem"].id]
    assert travel is not None and "l_comment" not in travel and "l_orderkey" in travel
