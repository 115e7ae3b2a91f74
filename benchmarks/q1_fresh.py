"""TPC-H Q1 as a user runs it: ``splice tpch q1 --sf SF --json`` in a fresh process against
DuckDB's Q1 over the same Arrow table in a fresh process, taking turns.

Run: ``python -m benchmarks.q1_fresh [--sf 1] [--repeat 5]`` (one JSON line).

Both sides load lineitem the same way (``splice.io.tpch_data.load_table``, the cached Parquet
file cast to plain strings); splice's figure is the command's ``seconds`` (streaming, default
options: the pipelined executor), DuckDB's the time of ``SELECT ...`` over the registered table
with the result fetched as Arrow. splice's wall time (process start to exit) is reported too.
Medians over ``--repeat`` turns, with the 1-minute load average before the first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

DUCKDB = """
import json, time, duckdb
from splice.io.tpch_data import load_table
from splice.workloads.tpch_queries import Q1_SQL
lineitem = load_table("lineitem", {sf})
con = duckdb.connect()
con.register("lineitem", lineitem)
t0 = time.perf_counter()
out = con.sql(Q1_SQL.format(delta=90)).to_arrow_table()
print(json.dumps({{"seconds": time.perf_counter() - t0, "rows": out.num_rows}}))
"""


def _timed(cmd: list[str]) -> tuple[dict, float]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    last = json.loads(done.stdout.strip().splitlines()[-1])
    return last.get("metrics", last), wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    splice_cmd = [sys.executable, "-m", "splice.cli", "tpch", "q1", "--sf", str(args.sf), "--json"]
    duck_cmd = [sys.executable, "-c", DUCKDB.format(sf=args.sf)]
    load = os.getloadavg()[0]
    _timed(splice_cmd)  # the data generated and cached once, outside the turns
    s_sec, s_wall, d_sec = [], [], []
    for _ in range(args.repeat):
        m, wall = _timed(splice_cmd)
        s_sec.append(m["seconds"])
        s_wall.append(wall)
        m, _ = _timed(duck_cmd)
        assert m["rows"] == 4
        d_sec.append(m["seconds"])
    med = {k: statistics.median(v) for k, v in
           (("splice_s", s_sec), ("duckdb_s", d_sec), ("splice_wall_s", s_wall))}
    print(json.dumps({"bench": "q1_fresh", "sf": args.sf, "repeat": args.repeat,
                      "load_avg_1m": round(load, 2), **{k: round(v, 3) for k, v in med.items()},
                      "splice_runs_s": [round(x, 3) for x in s_sec],
                      "ratio": round(med["splice_s"] / med["duckdb_s"], 2)}))


if __name__ == "__main__":
    main()
