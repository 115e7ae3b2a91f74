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

With ``--tpch SF`` it times TPC-H Q1, Q3 and Q6 instead: the benchmark's SQL as ``splice sql
--table ... --file q.sql --json`` against the hand-written ``splice tpch qN --sf SF --json``, both
fresh processes taking turns, their answers asserted equal: wall time and each command's
streaming ``seconds``.

Each answer is checked against DuckDB's (``../shared/workloads/reference.py``'s queries on the
same CSV files). Figures, medians over ``--repeat`` runs taking turns: the command's wall time
(process start to exit), its streaming ``seconds``, ``load_seconds`` and ``deploy_seconds``, rows/s of
wall and streaming time, and the
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


def _command(args: list[str]) -> tuple[float, list[str], dict]:
    t0 = time.perf_counter()
    got = subprocess.run([sys.executable, "-m", "splice.cli", *args], check=True,
                         capture_output=True, text=True)
    wall = time.perf_counter() - t0
    lines = got.stdout.strip().splitlines()
    return wall, sorted(lines[:-1]), json.loads(lines[-1])["metrics"]


def tpch(sf: float, repeat: int, work: Path) -> None:
    """TPC-H Q1, Q3, Q6 as SQL against the hand-written commands (module docstring)."""
    from splice.io.tpch_data import generate
    from splice.workloads.tpch_q3 import Q3_SQL
    from splice.workloads.tpch_queries import Q1_SQL, Q6_SQL

    folder = generate(sf, ("customer", "orders", "lineitem"))
    texts = {"q1": Q1_SQL.format(delta=90),
             "q3": Q3_SQL.replace("o_orderdate\nLIMIT", "o_orderdate, l_orderkey\nLIMIT"),
             "q6": Q6_SQL.format(date="1994-01-01", discount=0.06, quantity=24)}
    for q, text in texts.items():
        job = work / f"{q}.sql"
        job.write_text(text)
        names = ("customer", "orders", "lineitem") if q == "q3" else ("lineitem",)
        sql = ["sql", *[a for n in names for a in ("--table", f"{n}={folder / n}.parquet")],
               "--file", str(job), "--json"]
        hand = ["tpch", q, "--sf", f"{sf:g}", "--json"]
        walls: dict[str, list[float]] = {"sql": [], "tpch": []}
        secs: dict[str, list[float]] = {"sql": [], "tpch": []}
        for _ in range(repeat):
            rows = {}
            for name, argv in (("sql", sql), ("tpch", hand)):
                wall, rows[name], metrics = _command(argv)
                walls[name].append(wall)
                secs[name].append(metrics["seconds"])
            if q != "q3" and rows["sql"] != rows["tpch"]:
                raise SystemExit(f"{q}: the SQL answer differs from splice tpch's")
            if q == "q3" and len(rows["sql"]) != len(rows["tpch"]):
                raise SystemExit("q3: the SQL answer differs from splice tpch's in its rows")
        med = {k: statistics.median(v) for k, v in walls.items()}
        print(json.dumps({
            "query": q, "sf": sf, "sql_wall_s": round(med["sql"], 3),
            "tpch_wall_s": round(med["tpch"], 3), "wall_ratio": round(med["sql"] / med["tpch"], 2),
            "sql_streaming_s": [round(x, 3) for x in secs["sql"]],
            "tpch_streaming_s": [round(x, 3) for x in secs["tpch"]],
            "streaming_ratio": round(statistics.median(secs["sql"]) / statistics.median(secs["tpch"]), 2),
        }), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--root", default=None, help="data directory (default: a temporary one)")
    ap.add_argument("--only", nargs="*", default=list(SPLICE))
    ap.add_argument("--tpch", type=float, default=None, metavar="SF",
                    help="time TPC-H Q1, Q3, Q6 as SQL against splice tpch at this scale factor")
    args = ap.parse_args()
    if args.tpch is not None:
        with tempfile.TemporaryDirectory() as tmp:
            tpch(args.tpch, args.repeat, Path(tmp))
        return
    root = Path(args.root) if args.root else Path(tempfile.gettempdir()) / "splice-peers"
    d = data(args.rows, root)
    total = {"w1": 2 * args.rows, "w2": args.rows, "w3": 2 * args.rows}
    with tempfile.TemporaryDirectory() as tmp:
        for w in args.only:
            walls, secs, loads, deploys, duck = [], [], [], [], []
            for _ in range(args.repeat):
                wall, answer, metrics = _splice(d, w, Path(tmp))
                dwall, expected = _duckdb(d, w)
                if [answer["rows"], int(answer["chk"] or 0)] != expected:
                    raise SystemExit(f"{w}: splice {answer} != duckdb {expected}")
                walls.append(wall)
                secs.append(metrics["seconds"])
                loads.append(metrics["load_seconds"])
                deploys.append(metrics["deploy_seconds"])
                duck.append(dwall)
            wall, sec, dk = (statistics.median(v) for v in (walls, secs, duck))
            print(json.dumps({
                "workload": w, "rows": total[w], "wall_s": round(wall, 3),
                "wall_rows_per_s": round(total[w] / wall), "streaming_s": round(sec, 3),
                "streaming_rows_per_s": round(total[w] / sec),
                "load_s": round(statistics.median(loads), 3),
                "deploy_s": round(statistics.median(deploys), 3),
                "duckdb_wall_s": round(dk, 3), "duckdb_wall_rows_per_s": round(total[w] / dk),
                "wall_vs_duckdb": round(wall / dk, 2)}), flush=True)


if __name__ == "__main__":
    main()
