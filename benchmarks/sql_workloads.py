"""The peers' three workloads as SQL, timed as a user runs them: ``splice sql`` in a fresh process.

Run: ``python -m benchmarks.sql_workloads [--rows 1000000] [--repeat 3]`` (one JSON object per line).

Data: the W1-W3 streams of ``../shared/workloads/gen.py`` (two CSV streams L and R of ``--rows``
rows, header ``key,ts,payload``, 10,000 keys, times in ms with 10 ms of jitter). Each table is
declared with ``WATERMARK FOR ts AS ts - 20`` (the jitter is 10 ms, so no row is late):

* W1: ``l JOIN r ON l.key = r.key AND r.ts BETWEEN l.ts - 100 AND l.ts + 100``, its row count and
  checksum ``sum(l.payload + r.payload)`` in the same statement;
* W2: ``TUMBLE(l, ts, 1000)`` grouped by key: ``count(*)``, ``sum(payload)``, and the checksum
  ``sum(s * (w + 1) + c * c)`` over it with ``w = window_start / 1000``;
* W3: two ``TUMBLE(.., ts, 1000)`` tables joined on key and ``window_start``, count and checksum.

Each answer is checked against DuckDB's (``../shared/workloads/reference.py``'s queries on the
same CSV files). Figures, medians over ``--repeat`` runs taking turns: the command's wall time
(process start to exit), its streaming ``seconds`` and ``load_seconds``, rows/s of both, and the
same-run baseline: DuckDB's batch answer to the same query in a fresh process, wall time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT.parent / "shared" / "workloads"

_TABLES = """CREATE TABLE l (key BIGINT, ts BIGINT, payload BIGINT, WATERMARK FOR ts AS ts - 20)
  WITH (connector = 'file', path = '{d}/L.csv');
CREATE TABLE r (key BIGINT, ts BIGINT, payload BIGINT, WATERMARK FOR ts AS ts - 20)
  WITH (connector = 'file', path = '{d}/R.csv');
"""

SPLICE = {
    "w1": "SELECT count(*) AS rows, sum(l.payload + r.payload) AS chk FROM l JOIN r "
          "ON l.key = r.key AND r.ts BETWEEN l.ts - 100 AND l.ts + 100",
    "w2": "SELECT count(*) AS rows, sum(s * (window_start / 1000 + 1) + c * c) AS chk FROM ("
          "SELECT key, window_start, count(*) AS c, sum(payload) AS s FROM TUMBLE(l, ts, 1000) "
          "GROUP BY key, window_start, window_end) AS w",
    "w3": "SELECT count(*) AS rows, sum(a.payload + b.payload) AS chk FROM TUMBLE(l, ts, 1000) a "
          "JOIN TUMBLE(r, ts, 1000) b ON a.key = b.key AND a.window_start = b.window_start",
}

DUCKDB = {
    "w1": "SELECT count(*), sum(l.payload + r.payload) FROM '{d}/L.csv' l JOIN '{d}/R.csv' r "
          "ON l.key = r.key AND r.ts BETWEEN l.ts - 100 AND l.ts + 100",
    "w2": "SELECT count(*), sum(s * (w + 1) + c * c) FROM (SELECT key, ts // 1000 AS w, count(*) "
          "AS c, sum(payload) AS s FROM '{d}/L.csv' GROUP BY key, ts // 1000)",
    "w3": "SELECT count(*), sum(l.payload + r.payload) FROM '{d}/L.csv' l JOIN '{d}/R.csv' r "
          "ON l.key = r.key AND l.ts // 1000 = r.ts // 1000",
}


def data(rows: int, root: Path) -> Path:
    out = root / f"n{rows}"
    if not (out / "L.csv").exists():
        subprocess.run([sys.executable, str(WORKLOADS / "gen.py"), "--n", str(rows),
                        "--root", str(root)], check=True, capture_output=True)
    return out


def _splice(d: Path, w: str, work: Path) -> tuple[float, dict, dict]:
    job = work / f"{w}.sql"
    job.write_text(_TABLES.format(d=d) + SPLICE[w])
    t0 = time.perf_counter()
    got = subprocess.run([sys.executable, "-m", "splice.cli", "sql", "--file", str(job), "--json"],
                         check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    lines = got.stdout.strip().splitlines()
    return wall, json.loads(lines[0]), json.loads(lines[-1])["metrics"]


def _duckdb(d: Path, w: str) -> tuple[float, list]:
    code = (f"import duckdb, json; print(json.dumps([int(v or 0) for v in "
            f"duckdb.sql({DUCKDB[w].format(d=d)!r}).fetchall()[0]]))")
    t0 = time.perf_counter()
    got = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return time.perf_counter() - t0, json.loads(got.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--root", default=None, help="data directory (default: a temporary one)")
    ap.add_argument("--only", nargs="*", default=list(SPLICE))
    args = ap.parse_args()
    root = Path(args.root) if args.root else Path(tempfile.gettempdir()) / "splice-peers"
    d = data(args.rows, root)
    total = {"w1": 2 * args.rows, "w2": args.rows, "w3": 2 * args.rows}
    with tempfile.TemporaryDirectory() as tmp:
        for w in args.only:
            walls, secs, loads, duck = [], [], [], []
            for _ in range(args.repeat):
                wall, answer, metrics = _splice(d, w, Path(tmp))
                dwall, expected = _duckdb(d, w)
                if [answer["rows"], int(answer["chk"] or 0)] != expected:
                    raise SystemExit(f"{w}: splice {answer} != duckdb {expected}")
                walls.append(wall)
                secs.append(metrics["seconds"])
                loads.append(metrics["load_seconds"])
                duck.append(dwall)
            wall, sec, dk = (statistics.median(v) for v in (walls, secs, duck))
            print(json.dumps({
                "workload": w, "rows": total[w], "wall_s": round(wall, 3),
                "wall_rows_per_s": round(total[w] / wall), "streaming_s": round(sec, 3),
                "streaming_rows_per_s": round(total[w] / sec),
                "load_s": round(statistics.median(loads), 3),
                "duckdb_wall_s": round(dk, 3), "duckdb_wall_rows_per_s": round(total[w] / dk),
                "wall_vs_duckdb": round(wall / dk, 2)}), flush=True)


if __name__ == "__main__":
    main()
