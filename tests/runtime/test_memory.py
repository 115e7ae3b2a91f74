"""Memory stays flat on a long stream: 20 M rows through a running windowed query whose output
goes to a sink (and, in one run, a composing query beside it); the peak resident set after the
first 10% of the rows is within 1.2x of the final peak. Each run is a process of its own, since
a peak is per process (``benchmarks/engine_memory.py`` does the work)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("variant", "executor"), [("sink", "serial"), ("compose", "pipelined")])
def test_peak_memory_after_a_tenth_of_the_stream_is_the_peak_at_its_end(variant, executor):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.engine_memory", "--variant", variant, "--executor",
         executor, "--rows", "20000000"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["rows"] == 20_000_000 and figures["late_rows"] > 0
    assert figures["ratio_final_vs_10pct"] <= 1.2, figures
