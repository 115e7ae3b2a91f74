"""``splice tpch ... --checkpoint-dir``: the same answer as the command without checkpoints,
and a run that resumes from a checkpoint written midway still prints that answer."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from splice.cli import main
from splice.io.tpch_data import load_table


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tpch")
    for t in ("customer", "orders", "lineitem"):
        load_table(t, 0.01, d)
    return d


def _rows(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[list[dict], dict]:
    assert main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    return [json.loads(x) for x in lines[:-1]], json.loads(lines[-1])["metrics"]


@pytest.mark.parametrize(("query", "extra"), [("q1", []), ("q6", []),
                                              ("q3", ["--window", "256", "--order", "sequential"]),
                                              ("q3", ["--window", "64"]), ("q3", ["--order", "reversed"])])
def test_checkpointed_answer_equals_the_plain_command(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      data_dir: Path, query: str, extra: list[str]) -> None:
    base = ["tpch", query, "--sf", "0.01", "--data-dir", str(data_dir), "--batch-size", "2048", "--json", *extra]
    want, _ = _rows(capsys, base)
    ck = [*base, "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-interval", "0.001"]
    got, metrics = _rows(capsys, ck)
    assert metrics["checkpoints"] >= 2
    assert got == want
    # resume from the first checkpoint of that run (a crash right after it), answer unchanged
    ckdir = tmp_path / "ck" / "checkpoints"
    ids = sorted(ckdir.iterdir())
    for later in ids[1:]:
        shutil.rmtree(later)
    resumed, m2 = _rows(capsys, ck)
    assert m2["resumed_from"] is not None and resumed == want


def test_q3_killed_after_checkpoints_resumes_to_the_uninterrupted_answer(tmp_path: Path, capsys, data_dir: Path) -> None:
    base = ["tpch", "q3", "--sf", "0.01", "--data-dir", str(data_dir), "--batch-size", "1000", "--window", "128",
            "--json"]
    want, _ = _rows(capsys, base)
    ck = [*base, "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-interval", "0.0001"]
    env = {k: v for k, v in os.environ.items() if k != "SPLICE_FAULT"}
    root = Path(__file__).resolve().parents[2]
    for fault in ("q3_saved:3", "q3_saved:2"):  # each run dies after its n-th checkpoint
        run = subprocess.run([sys.executable, "-m", "splice.cli", *ck], cwd=root, env=dict(env, SPLICE_FAULT=fault),
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == -9, run.stderr
    got, metrics = _rows(capsys, ck)
    assert metrics["resumed_from"] == 5 and got == want
