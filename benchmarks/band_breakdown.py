"""Where a PIM-Tree join's time goes: the index's inserts and searches alone, against the join.

``python -m benchmarks.band_breakdown [--logs 16,18,20] [--tuples N]``

For each ``w = 2^k`` (merge ratio by window size, the join's default insertion depth, uniform keys in [0, 1)):

* ``insert_ns`` — one window's :class:`~splice.index.window_index.WindowIndex`, warmed with ``2w`` keys,
  then ``--tuples`` more appended (``T_I`` inserts and the merges they trigger), per key;
* ``search_ns`` — then, with ``T_I`` half full (as on average between two merges), as many
  band searches over the whole window (width ``2/w``: about two hits each, the join's match
  rate), each its own descent of ``T_S`` and ``T_I``, no prefetching, per search;
* ``join_ns`` — the single-threaded band join of two such streams (match rate 2, warmed with
  ``2w`` tuples) over ``--tuples`` tuples, per tuple: one search of the opposite window, one
  insert into its own, the output, with the join's leaf prefetching.

Every figure is CPU nanoseconds. ``join_ns`` is the same-run reference: a join tuple does one
insert and one search, so ``insert_ns + search_ns`` against ``join_ns`` shows what prefetching
and the loop around them add or save. One JSON line per window.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks._band import emit, measure, workload
from splice.index import default_merge_ratio
from splice.index._window import idx_search_many
from splice.index.window_index import WindowIndex
from splice.joins.band.band_join import BandJoin


def index_costs(w: int, n: int, seed: int = 1) -> tuple[float, float, float, int]:
    """``(insert ns, search ns, hits per search, merges)`` of one PIM-Tree window."""
    rng = np.random.default_rng(seed)
    ratio = default_merge_ratio(w)
    depth = BandJoin(left=0, right=1, on="x", eps=1.0, window=w, index="pimtree").depth
    ix = WindowIndex("pimtree", w, np.float64, merge_ratio=ratio, insertion_depth=depth)
    ix.insert(rng.random(2 * w))
    keys = rng.random(n)
    c0 = time.process_time()
    ix.insert(keys)
    insert = time.process_time() - c0
    ix.insert(rng.random(max(1, int(ratio * w) // 2)))  # T_I half full, as on average in a join
    q = rng.random(n)
    eps = 1.0 / w
    los, his = q - eps, q + eps
    out_i = np.empty(4 * n + 1024, np.int64)  # about 2n hits
    out_p = np.empty(4 * n + 1024, np.int64)
    nxt = len(ix)
    plo, phi = nxt - w, nxt - 1
    idx_search_many(ix.state, los[:16], his[:16], plo, phi, out_i, out_p, 0, 0)  # compiled
    c0 = time.process_time()
    _, hits, full = idx_search_many(ix.state, los, his, plo, phi, out_i, out_p, 0, 0)
    search = time.process_time() - c0
    assert not full
    return insert / n * 1e9, search / n * 1e9, hits / n, ix.merges


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", default="16,18,20")
    ap.add_argument("--tuples", type=int, default=1 << 20)
    args = ap.parse_args(argv)
    for lw in [int(x) for x in args.logs.split(",")]:
        w = 1 << lw
        insert_ns, search_ns, hits, merges = index_costs(w, args.tuples)
        sides, keys, eps = workload(2 * w + args.tuples, w, 2.0, seed=lw)
        spec = BandJoin(left=0, right=1, on="x", eps=eps, window=w, index="pimtree")
        run = measure(spec, sides, keys, 2 * w, None)
        emit({"bench": "band_breakdown", "log_w": lw, "merge_ratio": spec.ratio,
              "insert_ns": round(insert_ns), "search_ns": round(search_ns),
              "hits_per_search": round(hits, 2), "merges": merges,
              "join_ns": round(1e9 / run["cpu_rows_per_s"]),
              "join_match_rate": run["match_rate"]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
