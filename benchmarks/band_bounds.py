"""What a band probe's key range costs: exact mirrored bounds against the plain sums.

``python -m benchmarks.band_bounds [--keys N] [--log-w K]``

A right arrival of a float band join searches the left window for the exact ends of
``{k : k + lower <= x <= k + upper}`` (:func:`~splice.index._band_bounds.band_bounds`), a left
arrival for ``[x + lower, x + upper]``. Over ``--keys`` uniform keys in [0, 1) and the band of
match rate 2 at ``w = 2^K`` (``eps = 1 / w``), in one compiled loop each, nanoseconds per
probe of: the plain sums (``plain``, the floor), the mirrored ends as the joins compute them
(``mirrored``), the lower end alone (``low``, what a prefetch asks for) and both ends by the
gallop-and-bisect search without its quick answer (``searched``, the same-run reference: what
every mirrored probe cost before). One JSON line.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from numba import njit

from benchmarks._band import emit
from splice.index._band_bounds import _max_key_search, band_bounds, band_low


@njit(cache=True, nogil=True)
def _both(keys, lo_off, hi_off, mirrored):  # type: ignore[no-untyped-def]
    s = 0.0
    for i in range(keys.shape[0]):
        a, b = band_bounds(keys[i], lo_off, hi_off, mirrored)
        s += a + b
    return s


@njit(cache=True, nogil=True)
def _low(keys, lo_off, hi_off):  # type: ignore[no-untyped-def]
    s = 0.0
    for i in range(keys.shape[0]):
        s += band_low(keys[i], lo_off, hi_off, True)
    return s


@njit(cache=True, nogil=True)
def _searched(keys, lo_off, hi_off):  # type: ignore[no-untyped-def]
    s = 0.0
    for i in range(keys.shape[0]):
        x = keys[i]
        s += -_max_key_search(-(x + lo_off), lo_off, -x) + _max_key_search(x + hi_off, -hi_off, x)
    return s


def _ns(fn: Any, keys: np.ndarray, *args: Any) -> float:
    fn(keys[:16], *args)  # compiled
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        fn(keys, *args)
        best = min(best, time.process_time() - t0)
    return best / len(keys) * 1e9


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=2_000_000)
    ap.add_argument("--log-w", type=int, default=20)
    args = ap.parse_args(argv)
    keys = np.random.default_rng(0).random(args.keys)
    eps = 1.0 / (1 << args.log_w)
    plain = _ns(_both, keys, -eps, eps, False)
    mirrored = _ns(_both, keys, -eps, eps, True)
    low = _ns(_low, keys, -eps, eps)
    searched = _ns(_searched, keys, -eps, eps)
    emit({"bench": "band_bounds", "keys": args.keys, "log_w": args.log_w,
          "plain_ns": round(plain, 2), "mirrored_ns": round(mirrored, 2), "low_ns": round(low, 2),
          "searched_ns": round(searched, 2), "searched_over_mirrored": round(searched / mirrored, 2)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
