"""Selective interval-join probes: the fixtures of "Delegate joins to DataFusion's hash join", full probe (before) against key index (after).

Run: ``python -m benchmarks.interval_probe [--samples N]`` (one JSON object per line).

Fixture (seeded, as in seeds/003): the left side holds ``keys`` retained rows with unique int64
keys, all at time 1000, and a nullable string payload of an 8-digit row prefix plus a ``suffix``
of 8 or 264 bytes (every 7th null); one right batch of ``arrivals`` rows at time 1000 touches
``arrivals`` distinct retained keys; bounds are [-100, +100]; INNER. The timed operation is that
one ``on_batch`` push (future-only: nothing retires). Building and preloading the operator,
checking its result (exactly one match per arrival) and dropping it are outside the timing.
Python's cyclic garbage collector is off while the samples are taken, as ``timeit`` does.

Variants, measured in the same run, each round in a fresh (seeded) random order, so that no
variant always follows the same one and inherits its warm caches:

* ``before``  — the full probe for every state size (``index_threshold`` = infinity): the whole
  retained side goes through the numba hash join each push (the original path);
* ``after``   — the hybrid: full probe at <= 1,024 retained rows, key index above;
* ``acero`` / ``datafusion`` — the full probe delegated to pyarrow's Acero hash join or to
  DataFusion's HashJoinExec (one long-lived SessionContext), the engines the matcher can use;
* ``before_arrays`` / ``after_arrays`` — ``before`` and ``after`` with the output batch made of
  Arrow arrays (``Array.from_buffers`` per gathered column, ``RecordBatch.from_arrays``) instead
  of assembled in one kernel and imported through Arrow's C data interface.

Each line: mean, 95% confidence interval, median and minimum of the push in µs; a ratio line per
fixture gives before/after as ratios of means, of medians and of minima (the last two are robust
on a shared, loaded host, where preemption inflates means), and ``ratio_of`` lines the same for
the array-built variants against each other and against the assembled ones.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import random
import time
from typing import Any

import numpy as np
import pyarrow as pa

import splice.joins.temporal.interval_join as interval_join
from splice.core.operator import InputSchemas, OperatorLogic
from splice.joins.temporal.interval_join import IntervalJoin

L, R = 2, 3
VARIANTS: dict[str, dict[str, Any]] = {
    "before": {"index_threshold": 10**12},
    "after": {},
    "acero": {"index_threshold": 10**12, "matcher": "acero"},
    "datafusion": {"index_threshold": 10**12, "matcher": "datafusion"},
    "before_arrays": {"index_threshold": 10**12},
    "after_arrays": {},
}
#: Variants whose output batches are made of Arrow arrays.
ARRAYS = {"before_arrays", "after_arrays"}


def build_logic(spec: IntervalJoin, inputs: InputSchemas, arrays: bool = False) -> OperatorLogic:
    """``spec.build(inputs)``; with ``arrays``, a logic that makes its output batches of Arrow
    arrays, the way before they were assembled through Arrow's C data interface."""
    saved = interval_join._C_BATCHES
    interval_join._C_BATCHES = saved and not arrays
    try:
        return spec.build(inputs)
    finally:
        interval_join._C_BATCHES = saved


def _payload(n: int, suffix: int, start: int) -> pa.Array:
    body = "x" * suffix
    vals = [None if i % 7 == 0 else f"{start + i:08d}{body}" for i in range(n)]
    return pa.array(vals, pa.string())


def fixture(keys: int, arrivals: int, suffix: int, seed: int = 0
            ) -> tuple[pa.Schema, pa.RecordBatch, pa.RecordBatch]:
    rng = np.random.default_rng(seed)
    schema = pa.schema([("k", pa.int64()), ("ts", pa.int64()), ("p", pa.string())])
    left = pa.record_batch({"k": np.arange(keys, dtype=np.int64),
                            "ts": np.full(keys, 1000, np.int64),
                            "p": _payload(keys, suffix, 0)}, schema=schema)
    touched = rng.choice(keys, arrivals, replace=False).astype(np.int64)
    right = pa.record_batch({"k": touched, "ts": np.full(arrivals, 1000, np.int64),
                             "p": _payload(arrivals, suffix, keys)}, schema=schema)
    return schema, left, right


def _ci(xs: list[float]) -> tuple[float, float, float]:
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / max(1, len(xs) - 1))
    h = 1.96 * sd / math.sqrt(len(xs))
    return m, m - h, m + h


def measure(keys: int, arrivals: int, suffix: int, samples: int, variants: list[str]
            ) -> dict[str, list[float]]:
    schema, left, right = fixture(keys, arrivals, suffix)
    inputs = {L: schema, R: schema}
    specs = {v: IntervalJoin(left=L, right=R, on="k", time="ts", lower=-100, upper=100,
                             **VARIANTS[v]) for v in variants}
    times: dict[str, list[float]] = {v: [] for v in variants}
    gc.collect()
    gc.disable()  # as timeit does: a collection triggered by earlier garbage is not the push's
    try:
        order = list(variants)
        rng = random.Random(1)
        for i in range(samples + 2):  # two warm-up rounds (numba, DataFusion session)
            rng.shuffle(order)  # no variant always runs right after another (warm caches)
            for v in order:
                logic = build_logic(specs[v], inputs, v in ARRAYS)
                logic.on_batch(L, left)
                t0 = time.perf_counter()
                out = logic.on_batch(R, right)
                dt = time.perf_counter() - t0
                n = sum(b.num_rows for b in out)
                assert n == arrivals, f"{v}: {n} rows, expected {arrivals}"
                if i >= 2:
                    times[v].append(dt * 1e6)
    finally:
        gc.enable()
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--variants", default="before,after,acero,datafusion")
    args = ap.parse_args(argv)
    variants = args.variants.split(",")
    for keys in (1024, 16384):
        for arrivals in (16, 256):
            for suffix in (264, 8):
                times = measure(keys, arrivals, suffix, args.samples, variants)
                stats, medians = {}, {}
                for v in variants:
                    m, lo, hi = _ci(times[v])
                    stats[v] = m
                    medians[v] = float(np.median(times[v]))
                    print(json.dumps({"bench": "interval_probe", "keys": keys,
                                      "arrivals": arrivals, "suffix_bytes": suffix,
                                      "variant": v, "mean_us": round(m, 1),
                                      "ci95_us": [round(lo, 1), round(hi, 1)],
                                      "median_us": round(medians[v], 1),
                                      "min_us": round(min(times[v]), 1),
                                      "samples": len(times[v])}), flush=True)
                if "before" in stats and "after" in stats:
                    print(json.dumps({"bench": "interval_probe", "keys": keys,
                                      "arrivals": arrivals, "suffix_bytes": suffix,
                                      "ratio_before_over_after":
                                          round(stats["before"] / stats["after"], 2),
                                      "ratio_of_medians":
                                          round(medians["before"] / medians["after"], 2),
                                      "ratio_of_minima":
                                          round(min(times["before"]) / min(times["after"]), 2)}),
                          flush=True)
                for a, b in (("before_arrays", "after_arrays"), ("after_arrays", "after"),
                             ("before_arrays", "before")):
                    if a in stats and b in stats:
                        print(json.dumps({"bench": "interval_probe", "keys": keys,
                                          "arrivals": arrivals, "suffix_bytes": suffix,
                                          "ratio_of": f"{a}/{b}",
                                          "of_means": round(stats[a] / stats[b], 2),
                                          "of_medians": round(medians[a] / medians[b], 2),
                                          "of_minima": round(min(times[a]) / min(times[b]), 2)}),
                              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
