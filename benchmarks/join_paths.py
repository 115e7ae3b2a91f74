"""One execution path for ``splice join``: the engine against a direct drive, checkpoints, CSV.

Run: ``python -m benchmarks.join_paths [--rows 1000000] [--repeat 5]`` (one JSON object per line).

Data: the W1-W3 streams of ``../shared/workloads/gen.py`` (two streams L and R of ``--rows``
rows, header ``key,ts,payload``, 10,000 keys, times in ms with 10 ms of jitter), written as CSV
by that generator and copied to Parquet. Every figure below is a median over ``--repeat``
runs, the variants of a comparison taking turns, so that each ratio holds on a noisy machine.

* ``engine_vs_direct`` (in one process, warm): the FULL interval join ``[-100, +100]`` ms of the
  two streams in batches of 65,536 rows: the operator driven directly (batches and watermarks
  handed to its logic, left and right in turns: what the command did before it ran on the
  engine) against the same job on the engine (:mod:`splice.cli.join`'s job, no
  checkpoints). Rows/s of streaming; the answers are asserted equal first.
* ``checkpoint_cost`` (whole commands, fresh processes, wall clock): ``splice join --kind
  interval --how full`` on the Parquet files, without checkpoints and with
  ``--checkpoint-interval 1`` and ``0.05``; the outputs are asserted equal.
* ``csv_vs_parquet`` (whole commands): W1 (inner interval join) and W3 (1 s tumbling window
  join) from CSV and from Parquet: the command's streaming ``seconds``, its ``load_seconds``
  and its wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.csv as pacsv
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT.parent / "shared" / "workloads"


def data(rows: int, root: Path) -> Path:
    """The W1-W3 inputs of ``rows`` rows per stream as CSV and Parquet under ``root``."""
    out = root / f"n{rows}"
    if not (out / "L.csv").exists():
        subprocess.run([sys.executable, str(WORKLOADS / "gen.py"), "--n", str(rows),
                        "--root", str(root)], check=True, capture_output=True)
    for s in ("L", "R"):
        if not (out / f"{s}.parquet").exists():
            pq.write_table(pacsv.read_csv(out / f"{s}.csv"), out / f"{s}.parquet")
    return out


def _command(d: Path, fmt: str, kind: str, how: str, extra: list[str], out: Path) -> list[str]:
    args = [sys.executable, "-m", "splice.cli", "join", "--kind", kind, "--left",
            str(d / f"L.{fmt}"), "--right", str(d / f"R.{fmt}"), "--on", "key", "--time", "ts",
            "--how", how, "--out", str(out), "--json"]
    args += (["--lower", "-100", "--upper", "100"] if kind == "interval" else ["--size", "1000"])
    return args + extra


def _run(cmd: list[str]) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    return wall, json.loads(done.stdout.strip().splitlines()[-1])["metrics"]


def engine_vs_direct(d: Path, repeat: int) -> dict[str, Any]:
    from splice.cli.join import JoinInput, interleave
    from splice.core.time import WatermarkStrategy, time_values
    from splice.io.sources import bounded_batches
    from splice.joins.temporal.interval_join import IntervalJoin
    from splice.runtime import BindInputs, Node, Query
    from splice.runtime.checkpoint import CheckpointCoordinator, Job, SourceStream

    tables = [pq.read_table(d / f"{s}.parquet").combine_chunks() for s in ("L", "R")]
    batches = [bounded_batches(t, 65_536) for t in tables]
    rows = sum(t.num_rows for t in tables)
    params = {"on": "key", "time": "ts", "lower": -100, "upper": 100, "how": "full"}

    def direct() -> int:
        spec = IntervalJoin(left=2, right=3, **params)  # type: ignore[arg-type]
        logic = spec.build({2: tables[0].schema, 3: tables[1].schema})
        n = 0
        for lb, rb in zip(*batches, strict=False):
            for sid, b in ((2, lb), (3, rb)):
                n += sum(o.num_rows for o in logic.on_batch(sid, b))
                mark = int(time_values(b, "ts").max()) - 1
                n += sum(o.num_rows for o in logic.on_watermark(sid, mark))
        return n + sum(o.num_rows for o in logic.on_end())

    def engine() -> int:
        inputs = [JoinInput(name, t.schema, t.num_rows, lambda b=b: iter(b))
                  for name, t, b in zip(("left", "right"), tables, batches, strict=True)]
        streams = [SourceStream(i.name, i.schema, "ts", watermark=WatermarkStrategy(0))
                   for i in inputs]
        job = Job(streams, [Query("join", (Node("join", BindInputs(IntervalJoin, params),
                                                ("left", "right")),))],
                  interleave(inputs, "ts"))
        coord = CheckpointCoordinator(job, None)
        coord.run(collect=False)
        return int(coord.outputs()["join"].num_rows)

    want = direct()
    assert engine() == want, "the engine's answer differs from the direct drive's"
    times: dict[str, list[float]] = {"direct": [], "engine": []}
    for _ in range(repeat):
        for name, fn in (("direct", direct), ("engine", engine)):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"bench": "engine_vs_direct", "rows": rows, "output_rows": want,
            "direct_rows_per_s": round(rows / med["direct"]),
            "engine_rows_per_s": round(rows / med["engine"]),
            "engine_over_direct": round(med["direct"] / med["engine"], 3)}


def checkpoint_cost(d: Path, repeat: int, tmp: Path) -> dict[str, Any]:
    variants = {"none": [], "1s": ["--checkpoint-interval", "1"],
                "0.05s": ["--checkpoint-interval", "0.05"]}
    walls: dict[str, list[float]] = {k: [] for k in variants}
    checkpoints: dict[str, list[int]] = {k: [] for k in variants}
    outs = {}
    for _ in range(repeat):
        for name, extra in variants.items():
            out = tmp / f"ck-{name}.parquet"
            if extra:
                ck = tmp / f"ck-{name}"
                shutil.rmtree(ck, ignore_errors=True)
                extra = extra + ["--checkpoint-dir", str(ck)]
            wall, m = _run(_command(d, "parquet", "interval", "full", extra, out))
            walls[name].append(wall)
            checkpoints[name].append(int(m.get("checkpoints", 0)))
            outs[name] = out
    first = pq.read_table(outs["none"])
    for name in ("1s", "0.05s"):
        assert pq.read_table(outs[name]).equals(first), f"checkpointed ({name}) output differs"
    med = {k: statistics.median(v) for k, v in walls.items()}
    return {"bench": "checkpoint_cost", "rows": 2 * pq.ParquetFile(d / "L.parquet").metadata.num_rows,
            "output_rows": first.num_rows,
            "wall_s": {k: round(v, 3) for k, v in med.items()},
            "checkpoints": {k: statistics.median(v) for k, v in checkpoints.items()},
            "ratio_1s": round(med["1s"] / med["none"], 3),
            "ratio_0.05s": round(med["0.05s"] / med["none"], 3)}


def csv_vs_parquet(d: Path, repeat: int, tmp: Path) -> list[dict[str, Any]]:
    out = []
    for workload, kind in (("w1", "interval"), ("w3", "window")):
        figures: dict[str, dict[str, list[float]]] = {
            fmt: {"seconds": [], "load_seconds": [], "wall": []} for fmt in ("csv", "parquet")}
        for _ in range(repeat):
            for fmt in ("csv", "parquet"):
                wall, m = _run(_command(d, fmt, kind, "inner", [], tmp / f"{workload}.parquet"))
                figures[fmt]["seconds"].append(m["seconds"])
                figures[fmt]["load_seconds"].append(m["load_seconds"])
                figures[fmt]["wall"].append(wall)
        med = {fmt: {k: round(statistics.median(v), 3) for k, v in f.items()}
               for fmt, f in figures.items()}
        out.append({"bench": "csv_vs_parquet", "workload": workload, **med,
                    "streaming_csv_over_parquet": round(
                        med["csv"]["seconds"] / med["parquet"]["seconds"], 3),
                    "wall_csv_over_parquet": round(med["csv"]["wall"] / med["parquet"]["wall"], 3)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows per stream")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--data", default=os.environ.get("PEERS_DATA",
                                                     os.path.join(tempfile.gettempdir(), "peers-data")))
    ap.add_argument("--only", choices=["engine", "checkpoint", "csv"], default=None)
    a = ap.parse_args()
    d = data(a.rows, Path(a.data))
    tmp = Path(tempfile.mkdtemp())
    try:
        if a.only in (None, "engine"):
            print(json.dumps(engine_vs_direct(d, a.repeat)), flush=True)
        if a.only in (None, "checkpoint"):
            print(json.dumps(checkpoint_cost(d, a.repeat, tmp)), flush=True)
        if a.only in (None, "csv"):
            for line in csv_vs_parquet(d, a.repeat, tmp):
                print(json.dumps(line), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
