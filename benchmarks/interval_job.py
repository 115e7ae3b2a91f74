"""Complete time-bounded join jobs: input rows/s end to end, peak state bytes, DuckDB same run.

Run: ``python -m benchmarks.interval_job [--rows N] [--long-rows N] [--batch B ...]``
(one JSON object per line).

Workload (seeded): two streams of ``--rows`` rows each, int64 keys uniform over 10,000,
event times sorted uniform over ``[0, rows)`` ms (about one event per ms per stream), an int64
payload. The streams arrive as alternating batches of ``B`` rows per side (left, right, left, ...),
each side's watermark generated with out-of-orderness 0. Each variant runs once untimed over the
whole input (numba's compiled code and the allocator's state warm up; a long-running job is in
that steady state), then ``--repeat`` timed runs, the best kept; the median is reported too.

* ``interval``: INNER interval join, bounds [-100, +100] ms, the hybrid (key index above 1,024
  retained rows) and, as baselines in the same run, the full probe (``index_threshold`` = inf),
  the hybrid with output batches made of Arrow arrays (``hybrid_arrays``: see
  ``benchmarks.interval_probe``) and DuckDB's SQL join of the two whole tables
  (``r.ts BETWEEN l.ts - 100 AND l.ts + 100``, run after the splice variants, best of two); the
  splice variants' timed runs take turns. Rows/s = input rows (both streams) / seconds; the
  output row count is asserted equal to DuckDB's.
* ``interval_cli``: the same join through ``splice join --kind interval``'s streaming path
  (time-ordered blocks of ``B`` rows), without file IO.
* ``interval_long``: ``--long-rows`` rows per stream in 1M-row chunks generated on the fly; the
  state bytes after every batch: the peak over the first chunk and over the whole run (flat
  memory means they match).
* ``window``: INNER window join in 1,000 ms tumbling windows, with DuckDB's equi-join on
  ``(key, ts // 1000)`` as the same-run baseline; and in 1,000 ms windows sliding by 250 ms
  (each row in four windows), against DuckDB's equi-join on the key and each row's window ids
  (``unnest(range(...))``).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from benchmarks.interval_probe import build_logic
from splice.core.operator import OperatorSpec
from splice.joins.temporal.interval_join import IntervalJoin
from splice.joins.temporal.window_join import WindowJoin

L, R = 2, 3
KEYS = 10_000


def streams(rows: int, seed: int = 0, offset: int = 0) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(seed)
    tables = []
    for name in ("v", "w"):
        ts = np.sort(rng.integers(offset, offset + rows, rows))
        tables.append(pa.table({"k": rng.integers(0, KEYS, rows), "ts": ts,
                                name: np.arange(offset, offset + rows)}))
    return tables[0], tables[1]


def run_stream(spec: OperatorSpec, left: pa.Table, right: pa.Table, batch: int,
               arrays: bool = False) -> tuple[float, int, int]:
    """Seconds, output rows and peak state bytes of one streamed run (batches prepared first);
    ``arrays``: an interval join's output made of Arrow arrays."""
    lb, rb = left.to_batches(batch), right.to_batches(batch)
    inputs = {L: left.schema, R: right.schema}
    logic = (build_logic(spec, inputs, arrays) if isinstance(spec, IntervalJoin)
             else spec.build(inputs))
    t0 = time.perf_counter()
    out, peak = push_pairs(logic, lb, rb)
    for o in logic.on_end():
        out += o.num_rows
    return time.perf_counter() - t0, out, peak


def push_pairs(logic: Any, lb: list[pa.RecordBatch], rb: list[pa.RecordBatch]) -> tuple[int, int]:
    """Push left and right batches in turn: output rows and peak state bytes."""
    out = peak = 0
    for a, b in zip(lb, rb, strict=True):
        for o in logic.on_batch(L, a):
            out += o.num_rows
        for o in logic.on_batch(R, b):
            out += o.num_rows
        peak = max(peak, logic.state_bytes())
    return out, peak


def _duck(sql: str, **tables: pa.Table) -> tuple[float, int]:
    con = duckdb.connect()
    for name, t in tables.items():
        con.register(name, t)
    t0 = time.perf_counter()
    n = con.execute(sql).fetchone()[0]  # type: ignore[index]
    return time.perf_counter() - t0, int(n)


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows per stream")
    ap.add_argument("--long-rows", type=int, default=10_000_000,
                    help="rows per stream of the long run (0 skips it)")
    ap.add_argument("--batch", type=int, nargs="+", default=[16_384, 65_536])
    ap.add_argument("--repeat", type=int, default=5, help="runs per variant; the best is kept")
    args = ap.parse_args(argv)
    left, right = streams(args.rows)
    inputs = 2 * args.rows

    sql_iv = ("SELECT count(*) FROM lt l JOIN rt r ON l.k = r.k "
              "AND r.ts BETWEEN l.ts - 100 AND l.ts + 100")
    results = []
    variants: list[tuple[str, dict[str, Any], bool]] = [
        ("hybrid", {}, False), ("full_probe", {"index_threshold": 10**12}, False),
        ("hybrid_arrays", {}, True)]
    for batch in args.batch:
        specs = [IntervalJoin(left=L, right=R, on="k", time="ts", lower=-100, upper=100,
                              **extra) for _, extra, _ in variants]  # type: ignore[arg-type]
        for spec, (_, _, arrays) in zip(specs, variants, strict=True):
            run_stream(spec, left, right, batch, arrays)  # warm-up: numba, the allocator
        runs: list[list[tuple[float, int, int]]] = [[] for _ in variants]
        for _ in range(args.repeat):
            for i, (spec, (_, _, arrays)) in enumerate(zip(specs, variants, strict=True)):
                runs[i].append(run_stream(spec, left, right, batch, arrays))
        results.extend((name, batch, r) for (name, _, _), r in zip(variants, runs, strict=True))
    # DuckDB after splice: its threads and freed memory slowed whatever ran right after it
    duck_s, want = min(_duck(sql_iv, lt=left, rt=right) for _ in range(min(2, args.repeat)))
    emit(bench="interval_job", variant="duckdb_sql", rows=inputs, output_rows=want,
         seconds=round(duck_s, 4), rows_per_s=round(inputs / duck_s))
    for variant, batch, runs in results:
        secs, out, peak = min(runs)
        median = float(np.median([r[0] for r in runs]))
        assert all(r[1] == want for r in runs), f"{variant}: {out} rows, DuckDB {want}"
        emit(bench="interval_job", variant=variant, batch=batch, rows=inputs,
             output_rows=out, seconds=round(secs, 4), rows_per_s=round(inputs / secs),
             median_rows_per_s=round(inputs / median),
             runs_rows_per_s=[round(inputs / r[0]) for r in runs],
             peak_state_bytes=peak, vs_duckdb=round(duck_s / secs, 2))

    # the command line's streaming path (time-ordered blocks), no file IO
    from splice.joins.interval_command import run as run_interval

    ns = argparse.Namespace(on="k", time="ts", lower=-100, upper=100, how="inner",
                            batch_size=65_536, arrival=None, kind="interval")
    run_interval(left.slice(0, 50_000), right.slice(0, 50_000), ns)
    t0 = time.perf_counter()
    res = run_interval(left, right, ns)
    secs = time.perf_counter() - t0
    assert res.num_rows == want
    emit(bench="interval_job", variant="cli_path", batch=65_536, rows=inputs,
         output_rows=res.num_rows, seconds=round(secs, 4), rows_per_s=round(inputs / secs))

    # window join: 1,000 ms tumbling windows, and 1,000 ms windows sliding by 250 ms (a row in
    # four windows; DuckDB joins each row's window ids, unnested)
    hop = ("(SELECT k, unnest(range(CAST(floor((ts - 1000) / 250) AS BIGINT) + 1, "
           "CAST(floor(ts / 250) AS BIGINT) + 1)) AS w FROM {})")
    for variant, slide, sql_w in (
        ("tumbling_1000ms", None,
         "SELECT count(*) FROM lt l JOIN rt r ON l.k = r.k AND l.ts // 1000 = r.ts // 1000"),
        ("hopping_1000ms_250ms", 250,
         f"SELECT count(*) FROM {hop.format('lt')} l JOIN {hop.format('rt')} r "
         "ON l.k = r.k AND l.w = r.w"),
    ):
        wresults = []
        for batch in args.batch:
            wspec = WindowJoin(left=L, right=R, on="k", time="ts", size=1000, slide=slide)
            run_stream(wspec, left, right, batch)
            wresults.append((batch, min(run_stream(wspec, left, right, batch)
                                        for _ in range(args.repeat))))
        duck_s, want_w = min(_duck(sql_w, lt=left, rt=right) for _ in range(args.repeat))
        emit(bench="window_job", variant=f"duckdb_sql_{variant}", rows=inputs,
             output_rows=want_w, seconds=round(duck_s, 4), rows_per_s=round(inputs / duck_s))
        for batch, (secs, out, peak) in wresults:
            assert out == want_w, f"window {variant}: {out} rows, DuckDB {want_w}"
            emit(bench="window_job", variant=variant, batch=batch, rows=inputs,
                 output_rows=out, seconds=round(secs, 4), rows_per_s=round(inputs / secs),
                 peak_state_bytes=peak, vs_duckdb=round(duck_s / secs, 2))

    # long run: state stays flat
    if args.long_rows:
        batch = args.batch[0]
        spec = IntervalJoin(left=L, right=R, on="k", time="ts", lower=-100, upper=100)
        logic = spec.build({L: left.schema, R: right.schema})
        chunk = 1_000_000
        peaks = []
        secs = 0.0
        out = 0
        for i, start in enumerate(range(0, args.long_rows, chunk)):
            n = min(chunk, args.long_rows - start)
            lt, rt = streams(n, seed=100 + i, offset=start)
            lb, rb = lt.to_batches(batch), rt.to_batches(batch)
            t0 = time.perf_counter()
            n_out, peak = push_pairs(logic, lb, rb)
            secs += time.perf_counter() - t0
            out += n_out
            peaks.append(peak)
        emit(bench="interval_job", variant="long_run", batch=batch, rows=2 * args.long_rows,
             output_rows=out, seconds=round(secs, 3),
             rows_per_s=round(2 * args.long_rows / secs),
             peak_state_bytes_first_chunk=peaks[0], peak_state_bytes=max(peaks),
             peak_state_bytes_per_chunk=peaks)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
