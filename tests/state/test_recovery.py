"""Crash and resume: SIGKILL the command at several points; the rerun's --out equals an
uninterrupted run byte for byte. Also in-process resume, the state budget, and mismatched dirs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from splice.core.errors import StateError
from splice.io.sources import table_source
from splice.ops.aggregate import Agg, GroupBy
from splice.ops.stateless import Select
from splice.runtime import Query
from splice.runtime.checkpoint import CheckpointCoordinator, Job, SourceStream

ROOT = Path(__file__).resolve().parents[2]


def _inputs(tmp: Path, n: int = 600) -> tuple[Path, Path]:
    rng = np.random.default_rng(7)
    # times in alternating blocks of 40 per side, so arrival by time travels in runs of 40 rows
    base = (np.arange(n) // 40) * 100
    for side, shift in (("l", 0), ("r", 50)):
        t = pa.table({"k": rng.integers(0, 30, n), "ts": base + shift + np.sort(rng.integers(0, 40, n)) % 40,
                      "v": rng.random(n)})
        pq.write_table(t.sort_by("ts"), tmp / f"{side}.parquet")
    return tmp / "l.parquet", tmp / "r.parquet"


def _join(tmp: Path, kind: list[str], out: Path, ckpt: Path, fault: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SPLICE_FAULT"}
    if fault:
        env["SPLICE_FAULT"] = fault
    cmd = [sys.executable, "-m", "splice.cli", "join", *kind, "--left", str(tmp / "l.parquet"),
           "--right", str(tmp / "r.parquet"), "--on", "k", "--time", "ts", "--out", str(out),
           "--batch-size", "16", "--checkpoint-dir", str(ckpt), "--checkpoint-interval", "0.001"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


KINDS = {
    "interval": ["--kind", "interval", "--lower", "-60", "--upper", "60", "--how", "full"],
    "window": ["--kind", "window", "--size", "200"],
}
#: (kind, faults of successive runs): each run is killed at its fault, the last runs to the end.
CRASHES = [
    ("interval", ["batch:9", "staged:3", "saved:2", "committed:5", "publish:1"]),
    ("window", ["batch:40"]),
]


@pytest.mark.parametrize(("kind", "faults"), CRASHES)
def test_sigkill_and_resume_gives_the_uninterrupted_output(tmp_path: Path, kind: str, faults: list[str]) -> None:
    _inputs(tmp_path)
    clean = tmp_path / "clean.parquet"
    r = _join(tmp_path, KINDS[kind], clean, tmp_path / "clean_ckpt", None)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out.parquet"
    for fault in faults:
        r = _join(tmp_path, KINDS[kind], out, tmp_path / "ckpt", fault)
        assert r.returncode == -9, f"{fault}: expected SIGKILL, got {r.returncode}: {r.stderr}"
    r = _join(tmp_path, KINDS[kind], out, tmp_path / "ckpt", None)
    assert r.returncode == 0, r.stderr
    assert "resumed_from=" in r.stdout and "resumed_from=None" not in r.stdout
    assert out.read_bytes() == clean.read_bytes()
    assert pq.read_table(clean).num_rows > 0
    # a finished job run again only republishes
    r = _join(tmp_path, KINDS[kind], out, tmp_path / "ckpt", None)
    assert r.returncode == 0 and out.read_bytes() == clean.read_bytes()


def _agg_job(t: pa.Table) -> Job:
    return Job([SourceStream("s", t.schema)],
               [Query.chain("sums", "s", Select(pc.field("v") > 0.1), GroupBy(["k"], [Agg("s", "sum", "v")])),
                Query.chain("big", "s", Select(pc.field("v") > 0.9))],
               lambda pos: table_source("s", t, batch_size=50, skip=pos))


def test_in_process_resume_after_abandoned_run(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    t = pa.table({"k": rng.integers(0, 20, 1000), "v": rng.random(1000)})
    want = CheckpointCoordinator(_agg_job(t), tmp_path / "a", interval_batches=3).run()
    # run to a checkpoint, "crash" (abandon), resume: equal output and fewer batches replayed
    src = _agg_job(t).source
    stopped = Job(_agg_job(t).streams, _agg_job(t).queries, lambda pos: (x for i, x in enumerate(src(pos)) if i < 11))
    partial = CheckpointCoordinator(stopped, tmp_path / "b", interval_batches=3)
    partial.engine = partial._build(None, None)
    partial._stream(partial.engine)  # stops mid-job: no final checkpoint
    resumed = CheckpointCoordinator(_agg_job(t), tmp_path / "b", interval_batches=3)
    got = resumed.run()
    assert resumed.stats.resumed_from == 3 and resumed.stats.resumed_position == 9
    for name in want:
        assert got[name].equals(want[name]), name


def test_state_budget_turns_overflow_into_a_clear_error(tmp_path: Path) -> None:
    t = pa.table({"k": np.arange(5000), "v": np.ones(5000)})
    job = Job([SourceStream("s", t.schema)], [Query.chain("g", "s", GroupBy(["k"], [Agg("n", "count")]))],
              lambda pos: table_source("s", t, batch_size=100, skip=pos))
    with pytest.raises(StateError, match=r"state budget exceeded.*query 'g'"):
        CheckpointCoordinator(job, tmp_path, state_budget=10_000).run()


def test_checkpoint_dir_of_another_job_is_refused(tmp_path: Path) -> None:
    t = pa.table({"k": np.arange(10), "v": np.ones(10)})
    job = _agg_job(t)
    CheckpointCoordinator(job, tmp_path, interval_batches=1).run()
    other = Job(job.streams, [job.queries[0]], job.source)
    with pytest.raises(StateError, match="belongs to queries"):
        CheckpointCoordinator(other, tmp_path).run()


@pytest.mark.parametrize("app", ["sl", "gs"])
def test_txn_resumes_to_the_uninterrupted_counts_and_checksum(tmp_path: Path, app: str) -> None:
    import json

    base = [sys.executable, "-m", "splice.cli", "txn", app, "--events", "30000", "--keys", "500",
            "--punctuation", "1024", "--abort-ratio", "0.1", "--skew", "0.5", "--json"]
    env = {k: v for k, v in os.environ.items() if k != "SPLICE_FAULT"}

    def run(extra: list[str], fault: str | None = None) -> subprocess.CompletedProcess[str]:
        e = dict(env, SPLICE_FAULT=fault) if fault else env
        return subprocess.run(base + extra, cwd=ROOT, env=e, capture_output=True, text=True, timeout=120)

    want = json.loads(run([]).stdout.strip().splitlines()[-1])["metrics"]
    ck = ["--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-interval", "0.001"]
    assert run(ck, "txn_saved:3").returncode == -9
    got = json.loads(run(ck).stdout.strip().splitlines()[-1])["metrics"]
    assert got["resumed_from"] == 3
    assert (got["committed"], got["aborted"], got["state_checksum"]) == \
        (want["committed"], want["aborted"], want["state_checksum"])


def _windowed_job(t: pa.Table) -> Job:
    from splice.ops.window_aggregate import WindowAggregate

    return Job([SourceStream("s", t.schema, "ts", 5)],
               [Query.chain("w", "s", WindowAggregate("ts", 50, keys=["k"], aggregates=[Agg("n", "count")]))],
               lambda pos: table_source("s", t, batch_size=40, skip=pos))


def test_resume_past_a_corrupted_checkpoint_with_engine_watermarks(tmp_path: Path) -> None:
    """Results come out every window (engine watermarks, restored with the sources' state); the
    newest checkpoint is damaged, so the run resumes from the one before and the sink drops the
    epoch it had committed after it: the output is still the uninterrupted one."""
    rng = np.random.default_rng(5)
    ts = np.arange(2000) + rng.integers(-5, 1, 2000)
    t = pa.table({"k": rng.integers(0, 5, 2000), "ts": ts})
    want = CheckpointCoordinator(_windowed_job(t), tmp_path / "a", interval_batches=4).run()["w"]
    src = _windowed_job(t).source
    cut = Job(_windowed_job(t).streams, _windowed_job(t).queries,
              lambda pos: (x for i, x in enumerate(src(pos)) if pos + i < 30))
    partial = CheckpointCoordinator(cut, tmp_path / "b", interval_batches=4)
    partial.engine = partial._build(None, None)
    partial._stream(partial.engine)  # checkpoints 1..7 taken, then the "crash"
    newest = sorted((tmp_path / "b" / "checkpoints").iterdir())[-1]
    victim = newest / "state.arrow"
    victim.write_bytes(victim.read_bytes()[:-7])
    resumed = CheckpointCoordinator(_windowed_job(t), tmp_path / "b", interval_batches=4)
    got = resumed.run()["w"]
    assert resumed.stats.resumed_from == 6 and "checkpoint 7" in resumed.stats.skipped[0]
    assert want.num_rows > 10 and got.equals(want)


@pytest.mark.parametrize("kind", [
    ["--kind", "hash", "--window", "100", "--on", "k"],
    ["--kind", "hash", "--window-time", "120", "--on", "k"],
    ["--kind", "band", "--eps", "0.01", "--window", "100", "--on", "v"],
    ["--kind", "interval", "--lower", "-30", "--upper", "30", "--how", "full", "--on", "k"],
    ["--kind", "window", "--size", "100", "--how", "left", "--on", "k"],
])
def test_every_join_kind_checkpointed_equals_the_plain_command(tmp_path: Path, kind: list[str]) -> None:
    from splice.cli import main
    from splice.testing.contract import assert_same_rows

    _inputs(tmp_path, 300)
    common = [*kind, "--left", str(tmp_path / "l.parquet"), "--right", str(tmp_path / "r.parquet"),
              "--time", "ts", "--batch-size", "32"]
    assert main(["join", *common, "--out", str(tmp_path / "plain.parquet")]) == 0
    assert main(["join", *common, "--out", str(tmp_path / "ck.parquet"), "--checkpoint-dir", str(tmp_path / "d"),
                 "--checkpoint-interval", "0.001"]) == 0
    want, got = pq.read_table(tmp_path / "plain.parquet"), pq.read_table(tmp_path / "ck.parquet")
    assert want.num_rows > 0 and got.schema == want.schema
    assert_same_rows(got, want, ordered=False, what=" ".join(kind))


def test_a_resume_by_another_job_is_refused_naming_what_differs(tmp_path: Path, capsys) -> None:
    from splice.cli import main

    _inputs(tmp_path, 300)
    ckpt = tmp_path / "ckpt"
    base = ["join", "--kind", "interval", "--lower", "-30", "--upper", "30", "--on", "k", "--left",
            str(tmp_path / "l.parquet"), "--right", str(tmp_path / "r.parquet"), "--time", "ts",
            "--out", str(tmp_path / "o.parquet"), "--checkpoint-dir", str(ckpt)]
    assert main([*base, "--batch-size", "32"]) == 0
    capsys.readouterr()
    assert main([*base, "--batch-size", "64"]) == 2
    err = capsys.readouterr().err
    assert "another job's state" in err and "options.batch_size: 32 then, 64 now" in err
    assert main([*base, "--batch-size", "32", "--upper", "40"]) == 2
    assert "plan.join" in capsys.readouterr().err  # the operator's parameters differ
    t = pq.read_table(tmp_path / "l.parquet")
    pq.write_table(t.slice(1), tmp_path / "l.parquet")  # the input changed since
    assert main([*base, "--batch-size", "32"]) == 2
    assert "inputs.left.size" in capsys.readouterr().err
    assert main([*base, "--batch-size", "32", "--restart"]) == 0  # discards the old state


def test_published_epochs_replay_to_the_same_parts_after_an_older_checkpoint(tmp_path: Path) -> None:
    """Checkpoints past the first are lost, their epochs already published: the replay
    checkpoints where those epochs ended and finds the same parts, byte for byte."""
    rng = np.random.default_rng(9)
    ts = np.arange(3000) + rng.integers(-5, 1, 3000)
    t = pa.table({"k": rng.integers(0, 5, 3000), "ts": ts})
    want = CheckpointCoordinator(_windowed_job(t), tmp_path / "a", interval_batches=4).run()["w"]
    cut = Job(_windowed_job(t).streams, _windowed_job(t).queries,
              lambda pos: (x for i, x in enumerate(_windowed_job(t).source(pos)) if pos + i < 40))
    partial = CheckpointCoordinator(cut, tmp_path / "b", interval_batches=4)
    partial.engine = partial._build(None, None)
    partial._stream(partial.engine)  # checkpoints 1..10 taken, epochs 1..10 published
    parts = sorted((tmp_path / "b" / "sink" / "w" / "committed").iterdir())
    published = {p.name: p.read_bytes() for p in parts}
    assert len(published) == 10
    kept = sorted((tmp_path / "b" / "checkpoints").iterdir())  # the last three: 8, 9 and 10
    for chk in kept[1:]:
        shutil.rmtree(chk)  # 9 and 10 lost: the run resumes from 8
    resumed = CheckpointCoordinator(_windowed_job(t), tmp_path / "b", interval_batches=4)
    got = resumed.run()["w"]
    assert resumed.stats.resumed_from == 8
    assert [(e, pos) for e, pos, _ in resumed.replay] == [(9, 36), (10, 40)]
    assert got.equals(want)
    for name, data in published.items():
        assert (tmp_path / "b" / "sink" / "w" / "committed" / name).read_bytes() == data
