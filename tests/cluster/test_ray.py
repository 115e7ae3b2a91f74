"""The peers' workloads W1-W3 as SQL on 2 Ray workers give exactly the single-process answers,
with disordered input (within and beyond the bound: late rows are the same as one process's)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from splice.cli.sql import run_statements
from splice.core.errors import PlanError

ray = pytest.importorskip("ray")

QUERIES = {
    "w1": "SELECT count(*) AS rows, sum(l.payload + r.payload) AS chk FROM l JOIN r "
          "ON l.key = r.key AND r.ts BETWEEN l.ts - 100 AND l.ts + 100",
    "w2": "SELECT key, window_start, count(*) AS c, sum(payload) AS s FROM TUMBLE(l, ts, 1000) "
          "GROUP BY key, window_start, window_end",
    "w3": "SELECT count(*) AS rows, sum(a.payload + b.payload) AS chk FROM TUMBLE(l, ts, 1000) a "
          "JOIN TUMBLE(r, ts, 1000) b ON a.key = b.key AND a.window_start = b.window_start",
}


def _tables(tmp_path, n: int = 20_000) -> str:
    ddl = []
    for seed, name in ((1, "l"), (2, "r")):
        rng = np.random.default_rng(seed)
        ts = np.sort(np.arange(n) + rng.integers(0, 10, n))
        ts[::500] -= 300  # beyond the bound: late in either run
        t = pa.table({"key": rng.integers(0, 200, n), "ts": ts, "payload": rng.integers(0, 1000, n)})
        pq.write_table(t, tmp_path / f"{name}.parquet")
        ddl.append(f"CREATE TABLE {name} (key BIGINT, ts BIGINT, payload BIGINT, WATERMARK FOR "
                   f"ts AS ts - 20) WITH (connector = 'file', path = '{tmp_path / name}.parquet');")
    return "\n".join(ddl)


@pytest.mark.parametrize("workload", sorted(QUERIES))
def test_two_workers_give_the_single_process_answer(local_ray, tmp_path, workload):
    text = _tables(tmp_path) + QUERIES[workload]
    one = run_statements(text)
    two = run_statements(text, workers=2)
    want = one.results["query"]
    got = two.results["query"]
    key = [(c, "ascending") for c in want.column_names]
    assert got.sort_by(key).equals(want.sort_by(key))
    assert two.metrics["exchanged_rows"] == two.metrics["input_rows"]
    assert two.metrics["late_rows"] == one.metrics["late_rows"]


def test_a_query_without_a_key_to_partition_by_is_refused(local_ray, tmp_path):
    with pytest.raises(PlanError, match="no operator keyed by columns"):
        run_statements(_tables(tmp_path) + "SELECT count(*) AS n FROM l", workers=2)


@pytest.mark.parametrize("workload", sorted(QUERIES))
def test_a_worker_that_dies_mid_run_gives_the_same_answer(local_ray, tmp_path, workload):
    """Subtask 1's process exits at its 7th message (after a checkpoint or two); every subtask
    restarts from the last checkpoint, the input since is replayed, and the answer (with its
    late rows) is the uninterrupted one."""
    from splice.cluster import RayCluster
    from splice.core.ordered_merge import batch_turns
    from splice.runtime import Engine
    from splice.sql.planner import SourceTable, plan_query
    from splice.sql.statements import parse_statements

    ddl = _tables(tmp_path)
    one = run_statements(ddl + QUERIES[workload], batch_size=1024)  # lateness depends on batches
    tables = {n: pq.read_table(tmp_path / f"{n}.parquet") for n in ("l", "r")}
    schema = tables["l"].schema
    plan = plan_query(parse_statements(QUERIES[workload])[-1].query,
                      {n: SourceTable(n, schema, "ts", True) for n in tables}, "query")
    batches = [tables[n].to_batches(max_chunksize=1024) for n in ("l", "r")]
    shared = tmp_path / "shared"  # the subtasks' states go through a directory they all reach
    cluster = RayCluster(2, checkpoint_batches=4, die_at=(1, 7), state_dir=shared)
    eng = Engine(cluster=cluster)
    for n in ("l", "r"):
        eng.define_stream(n, schema, "ts", 20)
    eng.deploy(plan.query)
    looked = False
    for side, b in batch_turns(batches, ["ts", "ts"], ["l", "r"]):
        eng.push("lr"[side], b)
        if not looked and cluster.queries["query"].saved.number == 2:
            looked = True
            kept = list((shared / "query").iterdir())  # the last checkpoint only
            assert [p.name for p in kept] == ["checkpoint-000002"]
            assert sorted(p.name for p in kept[0].iterdir()) == ["stage0-subtask0",
                                                                 "stage0-subtask1"]
    assert looked
    eng.end()
    got = eng.results("query")
    figures = eng.metrics()["queries"]["query"]
    eng.close()
    want = one.results["query"]
    key = [(c, "ascending") for c in want.column_names]
    assert figures["operators"]["cluster"]["restarts"] == 1
    assert got.sort_by(key).equals(want.sort_by(key))
    assert figures["late_rows"] == one.metrics["late_rows"]["query"]


def test_tpch_q3_on_two_workers_gives_the_single_process_answer(local_ray):
    """Q3 joins customer and orders on the customer key, then lineitem on the order key: two
    keyed stages, the first one's output exchanged again by order key; its top 10 is the
    single-process top 10."""
    from splice.io.tpch_data import generate
    from splice.workloads.tpch_q3 import Q3_SQL

    folder = generate(0.01, ("customer", "orders", "lineitem"))
    tables = [f"{n}={folder / n}.parquet" for n in ("customer", "orders", "lineitem")]
    text = Q3_SQL.replace("o_orderdate\nLIMIT", "o_orderdate, l_orderkey\nLIMIT")
    one = run_statements(text, tables=tables)
    two = run_statements(text, tables=tables, workers=2)
    assert two.results["query"].equals(one.results["query"])
    assert two.results["query"].num_rows == 10
