"""The parallel join's probe (``par_task``) with positions still in flight, against brute force.

A probe finds its partners among indexed positions through the index and among positions not
yet indexed (other threads' unfinished tasks, a merge's phase 1) by scanning the indexed bitmap
from the edge tuple. Here the in-flight positions are chosen at random, so the scan meets every
shape of bitmap word (empty, full, partial, ranges starting and ending inside a word).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.index.window_index import WindowIndex
from splice.joins.band._band_kernels import (
    LOCK_STRIDE,
    R_ALLOW,
    R_LEN,
    BandProbe,
    Matches,
    PlacedBandArrivals,
    TaskWindow,
    chunk_setup,
    clear_bits,
    gather_tasks,
    par_insert_range,
    par_task,
)
from splice.joins.band.band_join import probe_offsets
from splice.joins.band.parallel_band import TaskQueueJoin, arrival_bounds
from splice.kernels.jit import kernel_input

RING = 512  # window slots (a power of 2, 8 bitmap words)


@settings(max_examples=80)
@given(
    keys=st.lists(st.integers(0, 30), min_size=1, max_size=400),
    data=st.data(),
    probe=st.integers(0, 30),
    band=st.tuples(st.integers(-4, 0), st.integers(0, 4)),
)
def test_probe_with_positions_in_flight_matches_brute_force(keys, data, probe, band):
    n = len(keys)
    in_flight = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
    t_e = data.draw(st.integers(0, n - 1))
    ring = np.zeros(RING, np.int64)
    ring[:n] = keys
    bits = np.zeros(RING // 64, np.int64)
    ix = WindowIndex("pimtree", RING, np.dtype(np.int64), merge_ratio=1.0, insertion_depth=0)
    locks = np.zeros(ix.state.tmeta.shape[0] * LOCK_STRIDE, np.int64)
    path = np.zeros(1024, np.int64)
    res = np.zeros(R_LEN, np.int64)
    # index every position but those in flight (flagged first so the insert skips them), then
    # mark the in-flight ones not indexed again
    for p in np.flatnonzero(in_flight):
        bits[p >> 6] |= 1 << (p & 63)
    win = TaskWindow(ix.state, locks, ring, bits, 0)
    assert par_insert_range(win, 0, n - 1, path, res) == n - in_flight.sum()
    for p in np.flatnonzero(in_flight):
        clear_bits(bits, p, p + 1)
    # the edge: at or before the first position in flight (every position before it indexed)
    first = int(np.argmax(in_flight)) if in_flight.any() else n
    edge = np.array([data.draw(st.integers(0, first)), 0], np.int64)
    lo, hi = probe_offsets(band[0], band[1], np.dtype(np.int64), True)
    out_g = np.zeros(n + 1, np.int64)
    out_p = np.zeros(n + 1, np.int64)
    res[R_ALLOW] = 0  # probe only
    tuples = PlacedBandArrivals(np.zeros(1, np.int8), kernel_input([probe], np.int64),
                            np.array([n], np.int64), np.array([t_e], np.int64),
                            np.array([n - 1], np.int64))
    g, m, status = par_task(0, 1, tuples, BandProbe(lo, hi, True), win, win, edge, res, path,
                            Matches(out_g, out_p), 0)
    assert (g, status) == (1, 0)
    want = [p for p in range(t_e, n) if probe + band[0] <= keys[p] <= probe + band[1]]
    assert out_p[:m].tolist() == want
    assert (out_g[:m] == 0).all()


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_inserted_position_is_flagged_after_a_run(threads):
    # the indexed flags are set per word at the end of a task: after a run every position is
    # flagged, so the edge tuples reach the end of both streams
    rng = np.random.default_rng(threads)
    n = 5000
    sides = rng.integers(0, 2, n).astype(np.int8)
    keys = rng.integers(0, 1000, n)
    join = TaskQueueJoin("pimtree", (700, 300), np.dtype(np.int64), -3, 3, False, 1.0, 1,
                         threads, 5)
    join.run(sides, keys)
    counts = [int((sides == 0).sum()), int((sides == 1).sum())]
    assert join.edge.tolist() == counts
    for s in (0, 1):
        flagged = [(int(join.bits[s][(p & (len(join.bits[s]) * 64 - 1)) >> 6]) >> (p & 63)) & 1
                   for p in range(max(0, counts[s] - 2000), counts[s])]
        assert all(flagged)


@given(
    sides=st.lists(st.integers(0, 1), max_size=300),
    counts=st.tuples(st.integers(0, 5000), st.integers(0, 5000)),
    windows=st.tuples(st.integers(1, 300), st.integers(1, 300)),
    self_join=st.booleans(),
)
def test_chunk_setup_matches_the_vectorized_arrival_bounds(sides, counts, windows, self_join):
    # the compiled pass that prepares a chunk against the NumPy formulation of the same bounds
    s = np.array(sides, np.int8)
    if self_join:
        s[:] = 0
    n = len(s)
    keys = np.arange(n, dtype=np.float64) + 0.5
    rings = [np.full(RING, -1.0), np.full(RING, -1.0)]
    pos, t_e, t_l = (np.empty(n, np.int64) for _ in range(3))
    before = np.empty((2, n + 1), np.int64)
    chunk_setup(PlacedBandArrivals(s, keys, pos, t_e, t_l), counts[0], counts[1], windows[0],
                windows[1], self_join, rings[0], rings[1], before)
    want_pos, want_te, want_tl = arrival_bounds(s, counts, windows, self_join)
    assert pos.tolist() == want_pos.tolist()
    assert t_e.tolist() == want_te.tolist() and t_l.tolist() == want_tl.tolist()
    for side in (0, 1):
        mine = s == side
        assert before[side].tolist() == [0, *np.cumsum(mine).tolist()]
        assert rings[side][want_pos[mine] % RING].tolist() == keys[mine].tolist()


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 6)), max_size=40), st.data())
def test_gather_tasks_emits_each_tasks_rows_in_queue_order(tasks, data):
    # tasks (thread, rows) laid out in per-thread buffers in a random order of completion
    order = data.draw(st.permutations(range(len(tasks))))
    buffers: dict[int, list[int]] = {}
    src_in_thread = [0] * len(tasks)
    for t in order:
        thr, cnt = tasks[t]
        buf = buffers.setdefault(thr, [])
        src_in_thread[t] = len(buf)
        buf.extend(range(1000 * t, 1000 * t + cnt))
    threads = sorted(buffers)
    starts = np.cumsum([0] + [len(buffers[t]) for t in threads]).tolist()
    base = dict(zip(threads, starts[:-1], strict=True))
    all_g = np.array([v for t in threads for v in buffers[t]], np.int64)
    src = np.array([base[thr] + src_in_thread[t] for t, (thr, _) in enumerate(tasks)], np.int64)
    cnt = np.array([c for _, c in tasks], np.int64)
    # after 2 rows already in the output, with the chunk's tuples numbered from 5
    out_g, out_p = np.full(int(cnt.sum()) + 2, -1, np.int64), np.full(int(cnt.sum()) + 2, -1, np.int64)
    end = gather_tasks(Matches(all_g, all_g + 7), src, cnt, 5, Matches(out_g, out_p), 2)
    want = [1000 * t + j for t, (_, c) in enumerate(tasks) for j in range(c)]
    assert end == len(want) + 2
    assert out_g[2:].tolist() == [v + 5 for v in want] and out_p[2:].tolist() == [v + 7 for v in want]
    assert out_g[:2].tolist() == [-1, -1]
