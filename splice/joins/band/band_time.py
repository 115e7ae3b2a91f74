"""The band join over time-based windows: partners within ``D`` of the arriving tuple's event time.

Semantics. An arriving tuple ``x`` (event time ``t``) of one stream pairs with every earlier,
not late tuple ``y`` of the other stream (for a self-join: of its own stream) with::

    lower <= y.x - x.x <= upper   (mirrored for the right stream)   and   |t - y.t| <= D

A tuple whose time is at or before its own stream's watermark is late: it goes to the late side
output and joins nothing. Output order is that of the count-window join: by arrival of the later
tuple, then of its partner.

Algorithm. Each stream keeps the index of the count-window join
(:class:`~splice.index.window_index.WindowIndex`, any kind) over the positions it retains,
``first .. next - 1``, with a capacity ``C >= next - first``, so the count expiry of the index
never drops a retained tuple. A probe searches the key range over the retained positions and
keeps the candidates within ``D`` in time (one compiled pass per call). When a watermark ``W`` arrives on one stream, the other stream's tuples with time
``<= W - D`` can never match again (later tuples of the watermarked stream have times > ``W``);
the longest such prefix of positions is dead. The IM-Tree and PIM-Tree evict it at once and in
place: their window start moves past it, so searches skip it and the next merge drops it. The
other indexes evict it once it is at least half of what the stream retains, by rebuilding the
index over the rest (amortized O(1) per tuple, as the hash join's time windows). Dead tuples behind a not yet evicted prefix stay until then and are filtered
by time. When arrivals would exceed ``C``, the index is rebuilt with ``C`` doubled.

Threads. With ``threads > 1`` the IM/PIM-Tree windows are those of the key-range join
(:class:`~splice.joins.band.parallel_band.KeyRangeJoin`): each thread indexes one key range of both
streams' retained positions and probes it; eviction moves every range's window start, and a
rebuild sorts each range's keys into a new ``T_S`` on its own thread. The time filter and the
bookkeeping above are the same, so the output is the single-threaded join's, row for row.

State: per stream the keys and times of the retained positions and the index (derived: rebuilt
from the retained rows on restore).
"""

from __future__ import annotations

import numpy as np

from splice.core.errors import PlanError
from splice.index.window_index import IndexKind
from splice.joins.band._band_kernels import Matches, Retained, time_window_filter
from splice.joins.band.band_join import BandCore
from splice.joins.band.parallel_band import KeyRangeJoin
from splice.kernels.jit import kernel_input

__all__ = ["TimeBandCore"]

#: Smallest index capacity of a time window (tuples).
MIN_CAPACITY = 1024


class TimeBandCore:
    """IBWJ over time windows of length ``length`` (module docstring), on one thread or, for
    ``threads > 1`` on IM/PIM-Tree windows, on the key-range join's threads.

    ``run(sides, keys, times)`` joins a sequence in which no tuple is late (the operator sends
    late tuples to the side output first); ``evict(stream, upto)`` drops the stream's tuples
    with time ``<= upto`` when enough are dead, and returns the first position it still holds.
    """

    def __init__(
        self,
        index: IndexKind,
        dtype: np.dtype,
        lower: float,
        upper: float,
        length: int,
        self_join: bool = False,
        merge_ratio: float = 0.125,
        insertion_depth: int = 1,
        chain_length: int = 2,
        threads: int = 1,
    ) -> None:
        self.length = int(length)
        self.index = index
        self.dtype = np.dtype(dtype)
        self.self_join = self_join
        n = 1 if self_join else 2
        # IM/PIM-Tree: first live position; the index filters what lies before it out of every
        # search and drops it at its next merge, so evicting needs no rebuild
        self.in_place = index in ("imtree", "pimtree")
        self.core: BandCore | KeyRangeJoin
        if threads > 1:
            if not self.in_place:
                raise PlanError(f"band join: time windows join on several threads by key "
                                f"ranges of an imtree or pimtree, not {index!r}")
            self.core = KeyRangeJoin(index, (MIN_CAPACITY, MIN_CAPACITY), self.dtype, lower,
                                     upper, self_join, merge_ratio, insertion_depth, threads)
        else:
            self.core = BandCore(index, (MIN_CAPACITY, MIN_CAPACITY), self.dtype, lower, upper,
                                 self_join, merge_ratio, insertion_depth, chain_length)
        self.first = [0] * n  # first retained position per stream
        self.live = [0] * n
        # keys and times of the retained positions, by position - first (buffers, cnt used)
        self._keys = [np.zeros(MIN_CAPACITY, self.dtype) for _ in range(n)]
        self._times = [np.zeros(MIN_CAPACITY, np.int64) for _ in range(n)]
        self.cnt = [0] * n
        self.rebuilds = 0

    def keys_of(self, s: int) -> np.ndarray:
        """Keys of stream ``s``'s retained positions."""
        return self._keys[s][: self.cnt[s]]

    def times_of(self, s: int) -> np.ndarray:
        """Event times of stream ``s``'s retained positions."""
        return self._times[s][: self.cnt[s]]

    def _append(self, s: int, keys: np.ndarray, times: np.ndarray) -> None:
        c, n = self.cnt[s], len(keys)
        if c + n > len(self._keys[s]):
            cap = max(2 * (c + n), MIN_CAPACITY)
            for bufs in (self._keys, self._times):
                grown = np.empty(cap, bufs[s].dtype)
                grown[:c] = bufs[s][:c]
                bufs[s] = grown
        self._keys[s][c : c + n] = keys
        self._times[s][c : c + n] = times
        self.cnt[s] = c + n

    def _next(self, s: int) -> int:
        return self.core.next_position(s)

    def _capacity(self, s: int) -> int:
        return self.core.capacity(s)

    def start_at(self, positions: tuple[int, int]) -> None:
        """Continue numbering each stream's arrivals from ``positions`` (an empty core only)."""
        self.core.start_at(positions)
        for s in range(len(self.first)):
            self.first[s] = self.live[s] = int(positions[s])

    def _rebuild(self, s: int, first: int, capacity: int) -> None:
        """Index positions ``first .. next - 1`` of stream ``s`` afresh, with ``capacity``."""
        self._compact(s, first)
        self.core.reindex(s, first, self.keys_of(s), max(capacity, MIN_CAPACITY))
        self.rebuilds += 1

    def _compact(self, s: int, first: int) -> None:
        """Drop the keys and times of stream ``s``'s positions before ``first``."""
        drop = first - self.first[s]
        if drop:
            keys, times = self.keys_of(s)[drop:].copy(), self.times_of(s)[drop:].copy()
            self.cnt[s] = 0
            self._append(s, keys, times)
        self.first[s] = self.live[s] = first

    def run(
        self, sides: np.ndarray, keys: np.ndarray, times: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Join ``(sides[g], keys[g], times[g])`` in order; return ``(g, partner position)``."""
        sides = np.ascontiguousarray(sides, np.int8)
        keys = np.ascontiguousarray(keys, self.dtype)
        times = kernel_input(times, np.int64)
        if self.self_join:
            sides = np.zeros(len(keys), np.int8)
        for s in range(len(self.first)):
            mine = sides == s
            n_s = int(mine.sum())
            if not n_s:
                continue
            held = self._next(s) + n_s - self.live[s]
            if held > self._capacity(s):
                self._rebuild(s, self.live[s], 2 * held)
            if self.in_place:
                # count expiry keeps every live position while these tuples enter
                self.core.set_span(s, held)
            self._append(s, keys[mine], times[mine])
        g, p = self.core.run(sides, keys)
        if not len(g):
            return g, p
        # keep the candidates within the time window
        # (and after the live start: an in-place index may still hold evicted positions, whose
        # times are out of reach of every tuple not late)
        retained = [Retained(self.live[s], self.first[s], self._times[s])
                    for s in range(len(self.first))]
        k = time_window_filter(Matches(g, p), sides, times, self.self_join, retained[0],
                               retained[-1], self.length)
        return g[:k], p[:k]

    def evict(self, s: int, upto: int) -> int:
        """Drop stream ``s``'s oldest tuples with time ``<= upto`` when they are at least half of
        what it retains; return the first position still held."""
        t = self.times_of(s)
        if not len(t):
            return self.first[s]
        # the positions before the live start are dead already (thresholds only grow)
        start = self.live[s] - self.first[s]
        alive = t[start:] > upto
        dead = start + (int(np.argmax(alive)) if alive.any() else len(alive))
        if self.in_place and self.first[s] + dead > self.live[s]:
            self.live[s] = self.first[s] + dead
            self.core.set_span(s, self._next(s) - self.live[s])
        if dead and 2 * dead >= len(t):
            if self.in_place:
                self._compact(s, self.first[s] + dead)
            else:
                self._rebuild(s, self.first[s] + dead, 2 * (len(t) - dead))
        return self.first[s]

    def held(self) -> int:
        """Tuples retained (both streams)."""
        return sum(self.cnt)

    def nbytes(self) -> int:
        return int(self.core.nbytes() + sum(k.nbytes + t.nbytes
                                            for k, t in zip(self._keys, self._times, strict=True)))
