"""GroupBy with its per-group state in a keyed state backend (RocksDB): equal to the reference
and to the in-memory GroupBy, checkpointed incrementally, restored after SIGKILL to the
uninterrupted answer, and running where the state budget stops the in-memory one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import PlanError, StateError
from splice.core.records import End
from splice.io.sources import table_source
from splice.ops.aggregate import Agg, BackedGroupAggregator, GroupBy, plan_aggregates
from splice.runtime import Query
from splice.runtime.checkpoint import CheckpointCoordinator, Job, SourceStream
from splice.testing import OperatorHarness, check_operator, run_operator
from tests.ops.test_aggregate import AGGS, SCHEMA, SIZES, VIA_SUM, _data, _rows, _same, tables
from tests.reference.aggregates import group_by as ref_group_by

ROOT = Path(__file__).resolve().parents[2]
#: every aggregate of the in-memory suite but min/max of strings (kept in memory only)
NUMERIC = [(a, r, v) for (a, r), v in zip(AGGS, VIA_SUM, strict=True) if a.name != "mnk"]


@settings(max_examples=12)
@given(tables(), st.sampled_from(SIZES), st.sampled_from([["k"], ["k", "n"], ["d", "n"]]))
def test_rocksdb_group_by_matches_reference(table: pa.Table, size: int, keys: list[str]) -> None:
    spec = GroupBy(keys, [a for a, _, _ in NUMERIC], state_backend="rocksdb")
    out, _ = run_operator(spec, {2: SCHEMA}, [*_data(table, size), End()])
    want = ref_group_by(table.to_pylist(), keys, [r for _, r, _ in NUMERIC], [v for _, _, v in NUMERIC])
    _same(_rows(out), want)


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
def test_backed_aggregator_equals_the_in_memory_one_on_many_groups(kind: str) -> None:
    rng = np.random.default_rng(3)
    n = 20_000
    t = pa.table({"k": rng.integers(0, 5_000, n), "s": [f"name-{i % 37}-long" for i in range(n)],
                  "v": rng.integers(-1000, 1000, n), "f": rng.random(n)})
    aggs = [Agg("c", "count"), Agg("sv", "sum", "v"), Agg("mx", "max", "v"), Agg("af", "avg", "f"),
            Agg("mf", "min", "f")]
    plan = plan_aggregates(t.schema, ["k", "s"], aggs, "g")
    backed = BackedGroupAggregator(plan, kind)
    mem = GroupBy(["k", "s"], aggs).build({2: t.schema})
    for b in t.to_batches(max_chunksize=1_000):
        backed.update(b)
        mem.on_batch(2, b)
    got = pa.Table.from_arrays(backed.result_columns(), schema=pa.schema(plan.output_fields()))
    assert got.equals(pa.Table.from_batches(mem.on_end()))
    backed.close()


def test_contract_suite_on_the_rocksdb_backend() -> None:
    from decimal import Decimal

    table = pa.table({"k": ["a", None, "long key here", "a", "b", None, "a"],
                      "v": pa.array([Decimal(i) / 4 for i in range(6)] + [None], pa.decimal128(10, 2)),
                      "i": [1, 2, 3, None, 5, 6, 7]})
    spec = GroupBy(["k"], [Agg("n", "count"), Agg("s", "sum", "v"), Agg("a", "avg", "v * i")],
                   state_backend="rocksdb")
    check_operator(spec, {2: table.schema}, [*_data(table, 2), End()])


def test_non_numeric_min_max_and_unknown_backends_are_plan_errors() -> None:
    schema = pa.schema([("k", pa.int64()), ("s", pa.string())])
    with pytest.raises(PlanError, match=r"min/max of non-numeric inputs \(m\)"):
        GroupBy(["k"], [Agg("m", "min", "s")], state_backend="rocksdb").build({2: schema})
    with pytest.raises(PlanError, match="unknown state backend 'disk'"):
        GroupBy(["k"], [Agg("n", "count")], state_backend="disk")


def test_restoring_another_backends_state_is_a_state_error() -> None:
    schema = pa.schema([("k", pa.int64())])
    h = OperatorHarness(GroupBy(["k"], [Agg("n", "count")]), {2: schema})
    h.push(2, pa.record_batch({"k": [1, 2]}, schema=schema))
    with pytest.raises(StateError, match="holds 'memory' state"):
        GroupBy(["k"], [Agg("n", "count")], state_backend="rocksdb").build({2: schema}, h.logic.snapshot())


# -------------------------------------------------------------------- jobs under the coordinator

def _many_groups_job(backend: str, state_dir: str | None, groups: int = 15_000, rows: int = 40_000) -> Job:
    rng = np.random.default_rng(5)
    t = pa.table({"k": rng.integers(0, groups, rows), "v": rng.integers(0, 100, rows)})
    spec = GroupBy(["k"], [Agg("n", "count"), Agg("s", "sum", "v"), Agg("m", "max", "v")],
                   state_backend=backend, state_dir=state_dir)
    return Job([SourceStream("s", t.schema)], [Query.chain("g", "s", spec)],
               lambda pos: table_source("s", t, batch_size=2_000, skip=pos))


def run_job(directory: str, backend: str) -> None:
    """Entry point of the crash test's subprocess: the job, checkpointed every 2 batches."""
    job = _many_groups_job(backend, os.path.join(directory, "keyed"))
    out = CheckpointCoordinator(job, directory, interval_batches=2).run()["g"]
    import pyarrow.parquet as pq

    pq.write_table(out, os.path.join(directory, "out.parquet"))


def test_state_budget_stops_memory_but_not_rocksdb(tmp_path: Path) -> None:
    # ~190,000 groups: ~18 MB in memory; RocksDB holds two 2 MB memtables, a 4 MB block cache
    # and one batch's groups: ~7 MB
    budget = 12_000_000
    with pytest.raises(StateError, match="state budget exceeded"):
        CheckpointCoordinator(_many_groups_job("memory", None, 300_000, 300_000), tmp_path / "m",
                              state_budget=budget).run()
    got = CheckpointCoordinator(_many_groups_job("rocksdb", str(tmp_path / "keyed"), 300_000, 300_000),
                                tmp_path / "r", state_budget=budget, interval_batches=40).run()["g"]
    want = CheckpointCoordinator(_many_groups_job("memory", None, 300_000, 300_000), tmp_path / "w").run()["g"]
    assert got.num_rows > 150_000 and got.equals(want)


def test_rocksdb_checkpoints_are_incremental_under_the_coordinator(tmp_path: Path) -> None:
    coord = CheckpointCoordinator(_many_groups_job("rocksdb", str(tmp_path / "keyed")), tmp_path,
                                  interval_batches=4)
    coord.run()
    # each checkpoint stores a small handle; the state is in hard-linked RocksDB snapshots
    assert max(coord.stats.checkpoint_bytes) < 20_000
    snaps = sorted((tmp_path / "keyed" / "snapshots").iterdir())
    assert 1 <= len(snaps) <= 4


def test_sigkill_and_resume_equals_the_uninterrupted_run(tmp_path: Path) -> None:
    # killed after a batch (RocksDB holds writes past checkpoint 3: discarded on restore), then
    # between the store write and the sink commit of the second checkpoint after resuming
    faults = ["batch:7", "saved:2"]
    want_dir = tmp_path / "want"
    want_dir.mkdir()
    run_job(str(want_dir), "memory")
    import pyarrow.parquet as pq

    want = pq.read_table(want_dir / "out.parquet")
    d = tmp_path / "crash"
    d.mkdir()
    code = f"from tests.ops.test_aggregate_backend import run_job; run_job({str(d)!r}, 'rocksdb')"
    env = {k: v for k, v in os.environ.items() if k != "SPLICE_FAULT"}
    for fault in faults:
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(env, SPLICE_FAULT=fault),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == -9, proc.stderr
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert pq.read_table(d / "out.parquet").equals(want)
