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


@pytest.fixture(scope="module")
def local_ray():
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    yield
    ray.shutdown()


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
    assert two.metrics["late_rows"] == sum(sum(v.values()) for v in one.metrics["late_rows"].values())


def test_a_query_without_a_key_to_partition_by_is_refused(local_ray, tmp_path):
    with pytest.raises(PlanError, match="no operator keyed by columns"):
        run_statements(_tables(tmp_path) + "SELECT count(*) AS n FROM l", workers=2)
