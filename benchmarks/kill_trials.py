"""Kill -9 at random moments, resume, compare: three commands as a user runs them.

Run: ``python -m benchmarks.kill_trials [--trials 20] [--only interval|q1|txn]`` (one JSON
object per line).

Each workload is a ``splice`` command with ``--checkpoint-dir``:

* ``interval``: ``splice join --kind interval --how full`` over 2 x 300,000 rows whose times are
  out of order by up to 10 (3,000 keys, bounds ``[-10, 10]``), checkpoints every 0.05 s;
* ``q1``: ``splice tpch q1 --sf 0.1 --json``, checkpoints every 0.05 s;
* ``txn``: ``splice txn sl --events 300000 --json``, checkpoints every 0.05 s.

The same-run baseline is the command run clean (no kill) three times: its median wall time, its
streaming time (the metrics' ``seconds``) and its output (``--out`` byte for byte; the answer's
rows; ``committed``, ``aborted`` and ``state_checksum``). A trial starts the command in a fresh
directory, sends SIGKILL at a moment drawn uniformly over the last part of the clean run that
is 1.5 times its streaming time long (the streaming, when checkpoints are taken, and the end of
the loading before it and of the publishing after it), runs the same command again to the end,
and compares its output with the baseline. A trial's time is the killed run's time plus the
resumed run's; the figure is that time over the clean run's median.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]


def _interval_inputs(d: Path) -> None:
    rng = np.random.default_rng(1)
    n = 300_000
    for name in ("L", "R"):
        ts = np.sort(rng.integers(0, n, n)) + rng.integers(-10, 11, n)
        pq.write_table(pa.table({"k": rng.integers(0, 3_000, n), "ts": ts,
                                 "p": rng.integers(0, 1000, n)}), d / f"{name}.parquet")


def workloads(data: Path) -> dict[str, Callable[[Path, Path], list[str]]]:
    """Per workload: (checkpoint dir, output file) -> the command."""
    cli = [sys.executable, "-m", "splice.cli"]
    ck = ["--checkpoint-interval", "0.05"]
    return {
        "interval": lambda d, out: [*cli, "join", "--kind", "interval", "--left",
                                    str(data / "L.parquet"), "--right", str(data / "R.parquet"),
                                    "--on", "k", "--time", "ts", "--lower", "-10", "--upper",
                                    "10", "--how", "full", "--out", str(out), "--json",
                                    "--checkpoint-dir", str(d), *ck],
        "q1": lambda d, out: [*cli, "tpch", "q1", "--sf", "0.1", "--json",
                              "--checkpoint-dir", str(d), *ck],
        "txn": lambda d, out: [*cli, "txn", "sl", "--events", "300000", "--json",
                               "--checkpoint-dir", str(d), *ck],
    }


def _answer(workload: str, stdout: str, out: Path) -> Any:
    """What must equal the clean run: the output file's bytes, the answer rows, the counts."""
    lines = stdout.strip().splitlines()
    if workload == "interval":
        return out.read_bytes()
    if workload == "q1":
        return lines[:-1]
    m = json.loads(lines[-1])["metrics"]
    return (m["committed"], m["aborted"], m["state_checksum"])


def _clean(workload: str, cmd: Callable[[Path, Path], list[str]], tmp: Path
           ) -> tuple[float, float, Any]:
    walls, streaming, answer = [], [], None
    for i in range(3):
        d, out = tmp / f"clean{i}", tmp / f"clean{i}.parquet"
        t0 = time.perf_counter()
        done = subprocess.run(cmd(d, out), cwd=ROOT, capture_output=True, text=True)
        walls.append(time.perf_counter() - t0)
        if done.returncode != 0:
            raise SystemExit(f"{workload}: the clean run failed: {done.stderr[-500:]}")
        streaming.append(json.loads(done.stdout.strip().splitlines()[-1])["metrics"]["seconds"])
        got = _answer(workload, done.stdout, out)
        if answer is not None and got != answer:
            raise SystemExit(f"{workload}: two clean runs disagree")
        answer = got
        shutil.rmtree(d, ignore_errors=True)
    return statistics.median(walls), statistics.median(streaming), answer


def trials(workload: str, cmd: Callable[[Path, Path], list[str]], n: int, seed: int,
           tmp: Path) -> None:
    clean_wall, streaming, want = _clean(workload, cmd, tmp)
    print(json.dumps({"bench": "kill", "workload": workload, "clean_wall_s": round(clean_wall, 3),
                      "clean_streaming_s": round(streaming, 3)}), flush=True)
    rng = random.Random(seed)
    ratios, equal, killed = [], 0, 0
    for trial in range(n):
        d, out = tmp / f"t{trial}", tmp / f"t{trial}.parquet"
        kill_at = rng.uniform(max(0.0, clean_wall - 1.5 * streaming), clean_wall)
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd(d, out), cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        try:
            p.wait(timeout=kill_at)
            was_killed = False
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
            was_killed = True
        done = subprocess.run(cmd(d, out), cwd=ROOT, capture_output=True, text=True)
        took = time.perf_counter() - t0
        ok = done.returncode == 0 and _answer(workload, done.stdout, out) == want
        resumed = None
        if done.returncode == 0:
            resumed = json.loads(done.stdout.strip().splitlines()[-1])["metrics"].get("resumed_from")
        ratios.append(took / clean_wall)
        equal += ok
        killed += was_killed
        print(json.dumps({"bench": "kill", "workload": workload, "trial": trial,
                          "kill_at_s": round(kill_at, 3), "killed": was_killed,
                          "resumed_from": resumed, "equal": ok,
                          "trial_over_clean": round(took / clean_wall, 2),
                          **({} if done.returncode == 0 else {"error": done.stderr[-300:]})}),
              flush=True)
        shutil.rmtree(d, ignore_errors=True)
        out.unlink(missing_ok=True)
    print(json.dumps({"bench": "kill", "workload": workload, "summary": True, "trials": n,
                      "killed": killed, "equal": equal,
                      "trial_over_clean_max": round(max(ratios), 2),
                      "trial_over_clean_median": round(statistics.median(ratios), 2)}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--only", choices=["interval", "q1", "txn"], default=None)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    try:
        _interval_inputs(tmp)
        for name, cmd in workloads(tmp).items():
            if a.only in (None, name):
                trials(name, cmd, a.trials, a.seed, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
