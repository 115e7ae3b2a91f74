"""``splice txn``: metrics line, checksums equal across schedulers, clear errors; the engine
path (``--engine``) reports the direct path's answer and resumes after a kill."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from splice.cli import main


def _metrics(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]


@pytest.mark.parametrize("app", ["sl", "gs", "tp", "sej"])
def test_txn_command_metrics_agree_across_schedulers(capsys: pytest.CaptureFixture[str],
                                                     app: str) -> None:
    base = ["txn", app, "--events", "3000", "--keys", "200", "--skew", "0.8",
            "--abort-ratio", "0.1", "--punctuation", "500", "--json"]
    sums = set()
    for sched, threads in (("serial", "1"), ("auto", "2"), ("sstore", "2"), ("tstream", "2"),
                           ("s,c,e", "2")):
        m = _metrics(capsys, base + ["--scheduler", sched, "--threads", threads])
        for key in ("input_rows", "output_rows", "seconds", "rows_per_s", "events_per_s",
                    "committed", "aborted", "state_checksum", "p50_ms", "p99_ms", "breakdown_s",
                    "memory_per_batch_bytes", "load_seconds"):
            assert key in m
        assert m["input_rows"] == 3000 and m["committed"] + m["aborted"] == 3000
        sums.add((m["state_checksum"], m["committed"]))
    assert len(sums) == 1


def test_txn_command_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["txn", "sl", "--events", "1000", "--threads", "2"]) == 0
    out = capsys.readouterr().out
    for word in ("throughput", "latency", "breakdown", "useful", "checksum"):
        assert word in out


@pytest.mark.parametrize("bad", [["--abort-ratio", "1.5"], ["--scheduler", "fast,er,now"],
                                 ["--skew", "-1"]])
def test_txn_command_rejects_bad_arguments(capsys: pytest.CaptureFixture[str],
                                           bad: list[str]) -> None:
    assert main(["txn", "sl", "--events", "100"] + bad) == 2
    assert "error" in capsys.readouterr().err


@pytest.mark.parametrize("app", ["sl", "gs", "tp"])
def test_command_engine_path_reports_the_direct_answer(capsys: pytest.CaptureFixture[str],
                                                      app: str) -> None:
    base = ["txn", app, "--events", "5000", "--keys", "200", "--skew", "0.8", "--abort-ratio",
            "0.1", "--punctuation", "700", "--threads", "2", "--json"]
    direct = _metrics(capsys, base)
    engine = _metrics(capsys, base + ["--engine", "--batch-size", "1000"])
    assert engine["path"] == "engine" and engine["batch_size"] == 1000
    for key in ("input_rows", "committed", "aborted", "state_checksum"):
        assert engine[key] == direct[key], key
    assert engine["events_per_s"] > 0


def test_command_batch_size_needs_the_engine(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["txn", "sl", "--events", "10", "--batch-size", "5"]) == 2
    assert "--batch-size applies to --engine" in capsys.readouterr().err


def test_command_engine_path_resumes_after_a_kill(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "splice.cli", "txn", "sl", "--events", "60000", "--keys", "300",
            "--abort-ratio", "0.1", "--punctuation", "1000", "--engine", "--batch-size", "1500",
            "--json", "--checkpoint-interval", "0.01"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def run(d: Path, fault: str | None = None) -> subprocess.CompletedProcess[str]:
        e = {**env, "SPLICE_FAULT": fault} if fault else env
        return subprocess.run(base + ["--checkpoint-dir", str(d)], env=e, capture_output=True,
                              text=True, timeout=300)

    clean = run(tmp_path / "clean")
    assert clean.returncode == 0, clean.stderr
    want = json.loads(clean.stdout.splitlines()[-1])["metrics"]
    killed = run(tmp_path / "killed", "saved:3")
    assert killed.returncode == -9
    resumed = run(tmp_path / "killed")
    assert resumed.returncode == 0, resumed.stderr
    got = json.loads(resumed.stdout.splitlines()[-1])["metrics"]
    assert got["resumed_from"] == 3
    for key in ("committed", "aborted", "state_checksum"):
        assert got[key] == want[key], key
