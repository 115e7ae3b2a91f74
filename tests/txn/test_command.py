"""``splice txn``: metrics line, checksums equal across schedulers, clear errors."""

from __future__ import annotations

import json

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
