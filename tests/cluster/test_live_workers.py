"""Jobs on workers the way they run in one process: a windowed Kafka-to-Kafka job on 2 workers
accounts for every record (in a window equal to the reference's, or late), and a job whose driver is
killed with SIGKILL after a checkpoint resumes on new workers with the uninterrupted output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from splice.cli.sql import run_statements

ray = pytest.importorskip("ray")
confluent_kafka = pytest.importorskip("confluent_kafka")

from tests.cluster.test_ray import QUERIES, _tables  # noqa: E402
from tests.connectors.test_kafka import (  # noqa: E402
    _as_counter,
    _events,
    _job,
    _produce,
    _read_committed,
    _windows,
)

ROOT = Path(__file__).resolve().parents[2]


def test_a_kafka_job_on_two_workers_writes_what_one_process_writes(local_ray, kafka):
    n = 20_000
    ts, key, v = _events(n, 3, 0.01)  # 1 % of the records 3 s behind: late
    _produce(kafka, "w-ev", [(i % 4, b'{"key":%d,"ts":%d,"v":%d}' % (key[i], ts[i], v[i]))
                             for i in range(n)])
    bounded = ", 'scan.bounded.mode' = 'latest-offset'"
    two = run_statements(_job(kafka, "w-ev", "w-two", bounded), batch_size=1024, workers=2)
    got = _as_counter(_read_committed(kafka, "w-two"))
    # which rows are late depends on how polls cut the topic into batches, in one process as on
    # workers: every record is in a window or late, and the windows are the reference's over
    # the records that were not late
    late_v = set(two.late["out"]["events"].column("v").to_pylist())
    assert late_v and sum(two.metrics["late_rows"]["out"].values()) == len(late_v)
    assert sum(c for (_, _, f), c in got.items() if f == "n") + len(late_v) == n
    assert got == _windows(ts, key, v, ~np.isin(v, list(late_v)))
    assert two.metrics["workers"] == 2 and two.metrics["exchanged_rows"] == n


def test_a_driver_killed_after_a_checkpoint_resumes_on_new_workers(local_ray, tmp_path):
    """The driver dies (SIGKILL) right after its second checkpoint is saved, before it commits;
    its workers die with it. Run again, the job resumes from that checkpoint on new workers and
    writes exactly what an uninterrupted run writes."""
    ddl = _tables(tmp_path, 200_000)  # long enough for several checkpoints
    job = tmp_path / "job.sql"
    job.write_text(ddl + f"""
CREATE TABLE out (key BIGINT, window_start BIGINT, c BIGINT, s BIGINT)
  WITH (connector = 'file', path = '{tmp_path / 'out.parquet'}');
INSERT INTO out {QUERIES['w2']}""")
    address = ray.get_runtime_context().gcs_address

    def run(ck: Path, fault: str | None) -> subprocess.CompletedProcess:
        env = {k: x for k, x in os.environ.items() if k != "SPLICE_FAULT"}
        env["PYTHONPATH"] = str(ROOT)
        if fault is not None:
            env["SPLICE_FAULT"] = fault
        return subprocess.run([sys.executable, "-m", "splice.cli", "run", str(job), "--workers",
                               "2", "--ray-address", address, "--checkpoint-dir", str(ck),
                               "--checkpoint-interval", "0.02", "--batch-size", "1024", "--json"],
                              env=env, capture_output=True, text=True, timeout=300)

    clean = run(tmp_path / "ck-clean", None)
    assert clean.returncode == 0, clean.stderr
    want = pq.read_table(tmp_path / "out.parquet")
    (tmp_path / "out.parquet").unlink()
    killed = run(tmp_path / "ck", "saved:2")
    assert killed.returncode == -9, killed.stderr
    assert not (tmp_path / "out.parquet").exists()
    again = run(tmp_path / "ck", None)
    assert again.returncode == 0, again.stderr
    figures = json.loads(again.stdout.splitlines()[-1])["metrics"]
    assert figures["resumed_from"] == 2 and 0 < figures["exchanged_rows"] < figures["input_rows"]
    got = pq.read_table(tmp_path / "out.parquet")
    key = [(c, "ascending") for c in want.column_names]
    assert got.num_rows == want.num_rows > 0
    assert got.sort_by(key).equals(want.sort_by(key))
    counts = Counter(got.column("key").to_pylist())
    assert sum(counts.values()) == got.num_rows and np.all(np.asarray(got.column("c")) > 0)
