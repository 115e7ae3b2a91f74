"""Shared helpers of the band-join benchmarks: seeded workloads, timed runs, JSON lines, plots."""

from __future__ import annotations

import functools
import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from splice.joins.band.band_join import BandJoin

__all__ = ["workload", "measure", "measure_core", "emit", "plot", "machine_parallelism",
           "core_handoff_ns", "OUT", "WARM_WINDOWS"]

OUT = Path(__file__).parent / "out"

#: Tuples joined untimed before a measurement, in windows' worth (``WARM_WINDOWS * w``). With two
#: streams, ``2w`` tuples leave each window just full: the IM/PIM-Tree's ``T_S`` has not yet been
#: merged at full size into both of its rows, and those first full-size merges write memory for
#: the first time (huge-page faults: 0.1-0.2 s of system time at w = 2^19 in the next ``2w``
#: tuples, none after). A third window's worth brings every structure to its steady state.
WARM_WINDOWS = 3


def workload(n: int, w: int, match_rate: float = 2.0, dist: str = "uniform", seed: int = 0,
             skew: float = 0.5) -> tuple[np.ndarray, np.ndarray, float]:
    """``n`` tuples of two streams (sides drawn with probability ``skew`` for the left) with
    keys in [0, 1) of distribution ``dist``; ``eps`` such that a probe finds ``match_rate``
    partners on average in a window of ``w`` (uniform keys: ``2 * eps * w = match_rate``)."""
    rng = np.random.default_rng(seed)
    sides = (rng.random(n) >= skew).astype(np.int8)
    if dist == "uniform":
        keys = rng.random(n)
    elif dist == "gaussian":
        keys = rng.normal(0.5, 0.125, n)
    elif dist.startswith("gamma"):
        k, theta = (3.0, 3.0) if dist == "gamma33" else (1.0, 5.0)
        keys = rng.gamma(k, theta, n)
    else:
        raise ValueError(dist)
    eps = match_rate / (2.0 * w)
    if dist != "uniform":  # keep the average match rate: scale eps by the mean key density
        hist, edges = np.histogram(keys, bins=256)
        density = (hist / n / np.diff(edges))
        mean_density = float((density * hist / n).sum())
        eps = match_rate / (2.0 * w * mean_density)
    return sides, keys, eps


def _core(spec: BandJoin) -> Any:
    return spec.make_core(np.dtype(np.float64))


def measure(spec: BandJoin, sides: np.ndarray, keys: np.ndarray, warm: int,
            check: tuple[np.ndarray, np.ndarray] | None = None, batch: int = 0) -> dict[str, Any]:
    """Warm the windows with the first ``warm`` tuples (untimed), then time the rest.

    Returns throughput in input tuples per wall second and per CPU second of this process,
    the output rows, the result arrays (asserted equal to ``check`` when given) and the core.
    ``batch``: :func:`measure_core`.
    """
    return measure_core(_core(spec), sides, keys, warm, check, f"{spec.index}/{spec.threads}",
                        batch)


def measure_core(core: Any, sides: np.ndarray, keys: np.ndarray, warm: int,
                 check: tuple[np.ndarray, np.ndarray] | None = None, name: str = "",
                 batch: int = 0) -> dict[str, Any]:
    """:func:`measure` for a join core built by the caller.

    ``batch`` > 0 feeds the timed tuples in calls of ``batch`` (as ``splice join`` feeds the
    join its ``--batch-size`` chunks) and times the calls alone: each call's rows are checked or
    copied aside between the timed calls and then dropped, so that the next call's result
    arrays reuse their memory, as in a pipeline that hands each batch on. ``0``: one call.
    """
    core.run(sides[:warm], keys[:warm])
    n = len(keys) - warm
    step = batch if batch > 0 else n
    wall = cpu = 0.0
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    done = 0  # rows of check matched so far
    for a in range(warm, len(keys), max(step, 1)):
        b = min(len(keys), a + step)
        t0, c0 = time.perf_counter(), time.process_time()
        g, p = core.run(sides[a:b], keys[a:b])
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
        if check is not None:
            rows = len(g)
            assert np.array_equal(g + (a - warm), check[0][done : done + rows]) and \
                np.array_equal(p, check[1][done : done + rows]), \
                f"{name}: result differs from the baseline"
            done += rows
        parts.append((g + (a - warm), np.array(p)))
        del g, p
    if check is not None:
        assert done == len(check[0]), f"{name}: result differs from the baseline"
    g = np.concatenate([x for x, _ in parts]) if parts else np.empty(0, np.int64)
    p = np.concatenate([y for _, y in parts]) if parts else np.empty(0, np.int64)
    return {"tuples": n, "seconds": round(wall, 4), "cpu_seconds": round(cpu, 4),
            "rows_per_s": round(n / max(wall, 1e-9)), "cpu_rows_per_s": round(n / max(cpu, 1e-9)),
            "output_rows": int(len(g)), "match_rate": round(len(g) / max(n, 1), 3),
            "state_bytes": int(core.nbytes()), "batch": step, "_result": (g, p), "_core": core}


def emit(record: dict[str, Any]) -> None:
    print(json.dumps({k: v for k, v in record.items() if not k.startswith("_")}), flush=True)


def _parallelism(work: Any, threads: int, seconds: float) -> float:
    """Speedup of ``threads`` threads each running ``work()`` (GIL-free) over one thread."""
    t = time.perf_counter()
    work()
    one = time.perf_counter() - t
    reps = max(1, int(seconds / max(one, 1e-6)))
    t = time.perf_counter()
    for _ in range(reps):
        work()
    one = (time.perf_counter() - t) / reps
    ths = [threading.Thread(target=lambda: [work() for _ in range(reps)]) for _ in range(threads)]
    t = time.perf_counter()
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    many = (time.perf_counter() - t) / reps
    return round(threads * one / many, 3)


@functools.cache
def _spin() -> Any:
    # busy work for machine_parallelism, compiled once per process
    from numba import njit

    @njit(nogil=True)
    def spin(n: int) -> float:
        s = 0.0
        for i in range(n):
            s += (i % 7) * 0.5
        return s

    spin(10)
    return spin


@functools.cache
def _reads(mib: int) -> tuple[Any, np.ndarray]:
    # random reads for memory_parallelism and their array, made once per process
    from numba import njit

    @njit(nogil=True)
    def reads(a: np.ndarray, n: int, seed: int) -> int:
        s = 0
        x = seed
        m = a.shape[0] - 1
        for _ in range(n):
            x = (x * 6364136223846793005 + 1442695040888963407) & 0x7FFFFFFFFFFFFFFF
            s += a[(x >> 17) & m]
        return s

    a = np.ones((mib << 20) // 8, np.int64)  # a power of two: the mask picks any word
    reads(a, 10, 1)
    return reads, a


def machine_parallelism(threads: int = 2, seconds: float = 0.3) -> float:
    """Speedup of ``threads`` threads of GIL-free busy work over one thread, measured now: the
    ceiling for any parallel run on this machine at this moment (other processes share it)."""
    spin = _spin()
    return _parallelism(lambda: spin(10_000_000), threads, seconds)


def memory_parallelism(threads: int = 2, seconds: float = 0.3, mib: int = 64) -> float:
    """:func:`machine_parallelism` for reads from memory: each thread reads random words of one
    shared ``mib`` MiB array (twice the 32 MiB L3 of the host measured), several reads in
    flight at once, as a join's prefetched probes are. The cores may be free while the memory
    they share is not (other machines' work on the same host): this is the ceiling of a join
    whose windows miss the caches."""
    reads, a = _reads(mib)
    return _parallelism(lambda: reads(a, 2_000_000, 1), threads, seconds)


def core_handoff_ns(rounds: int = 100_000) -> float:
    """Nanoseconds for one cache line to pass from one thread's core to another's, measured now:
    two GIL-free threads hand a flag back and forth (acquire loads, release stores). A shared
    index moves a few lines between the cores per tuple, so this, next to the serial join's time
    per tuple, bounds what a second thread can add."""
    from numba import njit

    from splice.kernels.atomics import atomic_load_acquire, atomic_store_release

    @njit(nogil=True)
    def player(flag: np.ndarray, me: int, n: int) -> int:
        for _ in range(n):
            while atomic_load_acquire(flag, 0) != me:
                pass
            atomic_store_release(flag, 0, 1 - me)
        return 0

    player(np.zeros(8, np.int64), 0, 1)
    flag = np.zeros(8, np.int64)
    ths = [threading.Thread(target=player, args=(flag, k, rounds)) for k in (0, 1)]
    t = time.perf_counter()
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    return round((time.perf_counter() - t) / (2 * rounds) * 1e9, 1)


def plot(path: Path, series: dict[str, tuple[list[float], list[float]]], xlabel: str,
         ylabel: str, title: str, logx: bool = True) -> None:
    """One line per series into a PNG (matplotlib, headless)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", label=name)
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
