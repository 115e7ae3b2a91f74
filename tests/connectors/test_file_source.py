"""A directory tailed for new files, as a live job reads it: files dropped while the job runs,
the job stopped and resumed from its checkpoint, results written as a part per epoch, every
input row accounted for (in a window or late)."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from splice.cli.sql import SqlRun, run_statements
from splice.core.errors import PlanError

SCHEMA = pa.schema([("key", pa.int64()), ("ts", pa.int64()), ("v", pa.int64())])


def _drop(inbox: Path, i: int, table: pa.Table) -> None:
    """Write a file elsewhere, then rename it into the directory (whole, as a tail expects)."""
    tmp = inbox.parent / f"tmp-{i}"
    if i % 2:
        pacsv.write_csv(table, tmp)
        os.replace(tmp, inbox / f"part-{i:03d}.csv")
    else:
        pq.write_table(table, tmp)
        os.replace(tmp, inbox / f"part-{i:03d}.parquet")


def _job(inbox: Path, out: Path) -> str:
    return f"""
CREATE TABLE ev (key BIGINT, ts BIGINT, v BIGINT, WATERMARK FOR ts AS ts - 30)
  WITH (connector = 'file', path = '{inbox}', 'source.monitor-interval' = '50ms');
CREATE TABLE o WITH (connector = 'file', path = '{out}', format = 'parquet');
INSERT INTO o SELECT window_start, key, count(*) AS n, sum(v) AS s
  FROM TUMBLE(ev, ts, 100) GROUP BY window_start, window_end, key;
"""


def _run_until(job: str, ck: Path, files: list[pa.Table], inbox: Path, first: int) -> SqlRun:
    stop = threading.Event()
    box: dict[str, SqlRun] = {}
    runner = threading.Thread(target=lambda: box.setdefault("run", run_statements(
        job, stop=stop, checkpoint_dir=ck, checkpoint_interval=0.05)))
    runner.start()
    for i, t in enumerate(files):
        time.sleep(0.15)
        _drop(inbox, first + i, t)
    time.sleep(1.0)
    stop.set()
    runner.join(30)
    assert not runner.is_alive()
    return box["run"]


def test_a_tailed_directory_stopped_and_resumed_accounts_for_every_row(tmp_path):
    inbox, out, ck = tmp_path / "inbox", tmp_path / "out", tmp_path / "ck"
    inbox.mkdir()
    rng = np.random.default_rng(3)
    files = []
    for i in range(6):  # 200 rows a file, times moving on, disordered within the bound of 30
        ts = np.arange(i * 200, i * 200 + 200) + rng.integers(0, 25, 200)
        if i == 4:
            ts[:20] -= 600  # far behind: late where their windows have closed
        files.append(pa.table({"key": rng.integers(0, 3, 200), "ts": ts,
                               "v": np.arange(i * 200, i * 200 + 200)}, schema=SCHEMA))
    closing = pa.table({"key": [0], "ts": [10_000], "v": [-1]}, schema=SCHEMA)
    job = _job(inbox, out)
    _run_until(job, ck, files[:3], inbox, 0)
    parts_first = sorted(p.name for p in out.iterdir())
    run = _run_until(job, ck, [*files[3:], closing], inbox, 3)  # resumes from the checkpoint
    parts = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    assert parts_first and set(parts_first) <= set(parts)
    got = pa.concat_tables([pq.read_table(out / p) for p in parts])
    late = run.late["o"].get("ev")
    late_v = set() if late is None else set(late.column("v").to_pylist())
    everything = pa.concat_tables(files)
    v = everything.column("v").to_numpy()
    keep = ~np.isin(v, list(late_v))
    # the closing row's window stays open; every other row is in a window or late, once
    assert sum(got.column("n").to_pylist()) + len(late_v) == everything.num_rows
    assert len(late_v) > 0
    want: Counter = Counter()
    for t, k, x in zip(everything.column("ts").to_numpy()[keep].tolist(),
                       everything.column("key").to_numpy()[keep].tolist(), v[keep].tolist(),
                       strict=True):
        want[(t // 100 * 100, k)] += x
    have = Counter()
    for r in got.to_pylist():
        have[(r["window_start"], r["key"])] += r["s"]
    assert have == want


def test_a_tail_needs_a_directory_and_a_column_list(tmp_path):
    f = tmp_path / "one.parquet"
    pq.write_table(pa.table({"key": [1], "ts": [1], "v": [1]}, schema=SCHEMA), f)
    with pytest.raises(PlanError, match="needs its column list"):
        run_statements(f"CREATE TABLE ev WITH (connector = 'file', path = '{f}', "
                       "'source.monitor-interval' = '1s'); SELECT key FROM ev")
    with pytest.raises(PlanError, match="only a directory can be tailed"):
        run_statements(f"CREATE TABLE ev (key BIGINT, ts BIGINT, v BIGINT) WITH (connector = "
                       f"'file', path = '{f}', 'source.monitor-interval' = '1s'); SELECT key FROM ev")


def test_sigterm_stops_splice_run_after_a_last_checkpoint(tmp_path):
    import json
    import signal
    import subprocess
    import sys

    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    _drop(inbox, 0, pa.table({"key": [1, 1, 2], "ts": [1, 150, 320], "v": [1, 2, 3]},
                             schema=SCHEMA))
    job = tmp_path / "job.sql"
    job.write_text(_job(inbox, out))
    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "splice.cli", "run", str(job), "--checkpoint-dir",
           str(tmp_path / "ck"), "--checkpoint-interval", "0.1", "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(root)})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(out.glob("part-*")):
        time.sleep(0.2)  # running: the first windows are out
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "SIGTERM: stopping after a last checkpoint" in stderr
    metrics = json.loads(stdout.strip().splitlines()[-1])["metrics"]
    assert metrics["stopped"] is True and metrics["input_rows"] == 3
    assert sum(pq.read_table(p).num_rows for p in out.glob("part-*")) == 2  # windows 0 and 100
