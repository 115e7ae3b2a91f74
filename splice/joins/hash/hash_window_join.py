"""Hash window join: the two-way equi-join over sliding windows, and its fast default index.

Semantics. Tuples of the left stream R and the right stream S arrive in one order. An arriving
r is processed as::

    emit { (r, s) : s in W_S, s.key == r.key }   ->   expire from W_R   ->   insert r into W_R

and symmetrically for an arriving s. ``W`` is a count window (the last ``w`` tuples of the
stream, :class:`~splice.joins.common.join_windows.CountWindow`) or a time window
(:class:`~splice.joins.common.join_windows.TimeWindow`: stored tuples within ``D`` of the arriving tuple's
event time; tuples evicted by watermark; a tuple whose time is ``<=`` its own input's watermark
is late: counted and handed to the late side output with its stream id, joined with nothing).
The key is one or several columns of any hashable type (integers, strings, binaries, dates,
timestamps, decimals, booleans, ...); per column both inputs' types must agree or cast safely
to one type. A key with a null in any column never matches (the tuple still occupies its
window position), is counted (``stats()["left"]["null_keys"]``) and never raises. Output rows
list the left input's columns then the right input's (a right column whose name is taken gets
the suffix ``_right``), ordered by the arrival of the later tuple, then by the arrival of the
matched one.

The arrival order. With ``order=None`` it is the data path's: batch by batch, in the order the
path delivers them. With ``order`` a column both inputs carry (an arrival position, or the
event time), or :data:`~splice.joins.common.join_windows.POSITION` (each input's running row count), the
join merges the two inputs itself: rows are joined in the order of that column, ties left
first — the order :func:`splice.io.arrival.arrival_positions` gives — whatever batches the path
cuts and however it interleaves them (:class:`~splice.joins.common.join_windows.ArrivalMerge`). Each input
must then arrive in nondecreasing order of the column (else a ``SchemaError`` names the stream,
the column and the row). Results are deterministic for a given arrival order, however the input
is cut into batches. Over time windows the SET of pairs depends only on which rows are late:
with nothing late it is every pair with equal keys and ``|dt| <= D``, however the inputs
interleave.

Algorithm. Keys become ``int64`` codes (:mod:`splice.joins.common.hash_keys`): one integer-like
column is its own code; strings, several columns and the like are hashed, and every matched
pair of a hashed key is checked for real key equality before it is emitted. Rows released in
their arrival order (one batch of one input, or the merged prefix of both) go through one
sequence-kernel call, whose state persists in the logic across calls:

* count windows (:class:`CountCore`): ``impl="fast"`` (:class:`FastIndex`) keeps a ring of
  window positions threaded by per-bucket FIFO chains (``2 w`` buckets): the window's oldest
  tuple always heads its chain, so expiry and insert are O(1) and a probe walks one chain,
  yielding matches oldest first; the ring starts at 1,024 positions and doubles as the window
  fills. ``impl="hbsj"`` (:class:`~splice.joins.hash.hbsj.HBSJIndex`): Diba's four Murmur3 tables and
  overflow buffer; same results, plus per-table and overflow statistics.
* time windows (:class:`TimeCore`): each input's tuples sit in a ring whose slot is reused once
  the other input's watermark retired its tuple (the ring doubles when the slot to reuse still
  holds a live tuple); with ``impl="hbsj"`` the ring is HB-SJ's ordered sliding window, expired
  from its head by watermark. Watermarks come only from the path (``on_watermark``); when
  ``order`` is the time column each input arrives sorted by time, so its watermark also trails
  its largest time by one and probes stop at the window's edge.
* ``parallel=P``: SplitJoin over P PUs (:mod:`splice.joins.hash.splitjoin`): each PU keeps every
  P-th tuple of both windows and runs the whole sequence on its thread; matches are merged.

State: per side the retained rows (:class:`~splice.joins.common.join_windows.RowStore`), the rows waiting for
their place in the arrival order, the null-key and late counts and the watermarks; the indexes
and rings and the key codes are derived: rebuilt from the rows on restore, not stored.

>>> import pyarrow as pa
>>> from splice.testing import OperatorHarness
>>> spec = HashWindowJoin(left=2, right=3, on="k", window=CountWindow(2))
>>> h = OperatorHarness(spec, {2: pa.schema([("k", pa.int64()), ("a", pa.int64())]),
...                            3: pa.schema([("k", pa.int64()), ("b", pa.int64())])})
>>> _ = h.push(2, pa.record_batch({"k": [1, 1, 1], "a": [10, 11, 12]}))
>>> h.push(3, pa.record_batch({"k": [1], "b": [20]})).to_pydict()  # left 10 has expired
{'k': [1, 1], 'a': [11, 12], 'k_right': [1, 1], 'b': [20, 20]}

With ``order=POSITION`` the same rows come out however the two inputs' batches meet on the path:
row ``i`` of the left input is joined just before row ``i`` of the right.

>>> spec = HashWindowJoin(left=2, right=3, on="k", window=CountWindow(2), order=POSITION)
>>> h = OperatorHarness(spec, {2: pa.schema([("k", pa.int64()), ("a", pa.int64())]),
...                            3: pa.schema([("k", pa.int64()), ("b", pa.int64())])})
>>> _ = h.push(2, pa.record_batch({"k": [1, 1, 1], "a": [10, 11, 12]}))
>>> h.push(3, pa.record_batch({"k": [1], "b": [20]})).to_pydict()  # left 10, right 20, left 11
{'k': [1, 1], 'a': [10, 11], 'k_right': [1, 1], 'b': [20, 20]}
>>> h.end().to_pydict()                      # left 12 waited for right 21, which never came
{'k': [1], 'a': [12], 'k_right': [1], 'b': [20]}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import pyarrow as pa

from splice.core.errors import PlanError, SchemaError, StateError
from splice.core.operator import InputSchemas, OperatorLogic, OperatorSpec
from splice.core.time import MIN_TIME, is_temporal, time_values
from splice.joins.common.join_windows import (
    POSITION,
    ArrivalMerge,
    CountWindow,
    JoinWindow,
    Release,
    RowStore,
    TimeWindow,
    conform,
)
from splice.joins.common.key_codec import KeyCodec, common_key_types
from splice.joins.common.output_schema import pair_output_schema
from splice.joins.hash._hash_kernels import (
    NO_TIME,
    FastIndexArrays,
    HashArrivals,
    HBSJTimeWindows,
    InsertBuffer,
    ProbeBuffers,
    RingPositions,
    TimeJoinParams,
    TimeProgress,
    TimeRings,
    drain,
    fx_join_sequence,
    fx_probe,
    fx_ring_relink,
    fx_time_ring_sequence,
    fx_update,
    hb_join_sequence,
    hb_time_sequence,
    ring_positions,
)
from splice.joins.hash.hbsj import HBSJIndex
from splice.joins.hash.splitjoin import HashIndex, SplitIndex, merge_matches
from splice.kernels.team import ThreadTeam

__all__ = [
    "HashWindowJoin",
    "FastIndex",
    "CountCore",
    "TimeCore",
    "Impl",
    "POSITION",
    "pair_output_schema",
    "key_columns",
    "make_index",
    "join_sequence",
    "time_join_sequence",
]

Impl = Literal["fast", "hbsj"]


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


class FastIndex:
    """One stream's window indexed on ``n_attrs`` attributes by FIFO bucket chains.

    ``window=None`` makes it unbounded (positions are handed out densely and the ring grows);
    a count window's ring grows too, up to the window; ``pu``/``parts`` make it one PU's share
    of a SplitJoin (tuples ``seq % parts == pu``).
    """

    kind = "fast"

    def __init__(
        self, n_attrs: int, window: int | None, pu: int = 0, parts: int = 1, buckets: int | None = None
    ) -> None:
        if window is not None and window < 1:
            raise PlanError(f"count window size must be >= 1, got {window}")
        self.n_attrs, self.window, self.pu, self.parts = n_attrs, window, pu, parts
        self._buckets = buckets
        #: a count window's ring when full; it starts at 1,024 positions and doubles as the
        #: window fills, so a window longer than its stream costs what the stream holds
        self.full_cap = -(-window // parts) if window is not None else None
        self._alloc(min(self.full_cap, 1024) if self.full_cap is not None else 1024)

    def _alloc(self, cap: int) -> None:
        k = self.n_attrs
        nb = _next_pow2(self._buckets) if self._buckets else max(16, _next_pow2(2 * cap))
        self.cap, self.mask = cap, nb - 1
        self.shift = 64 - (nb.bit_length() - 1)  # Fibonacci hashing keeps the top bits
        self.ring = np.full(cap, -1, np.int64)
        self.keys = np.zeros((k, cap), np.int64)
        self.valid = np.zeros((k, cap), np.bool_)
        self.nxt = np.full((k, cap), -1, np.int64)
        self.head = np.full((k, nb), -1, np.int64)
        self.tail = np.full((k, nb), -1, np.int64)
        #: the same arrays as the kernels take them (rebuilt here, where they are reallocated)
        self.arrays = FastIndexArrays(self.ring, self.keys, self.valid, self.nxt, self.head,
                                      self.tail, self.shift)
        self.used = 0  # unbounded: next dense position

    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.ring, self.keys, self.valid, self.nxt, self.head, self.tail))

    def insert(self, seqs: np.ndarray, keys: np.ndarray, valid: np.ndarray, expire: bool = True) -> None:
        """Tuples ``seqs`` arrive in order; for each, the tuple ``w`` arrivals older expires, then
        it is stored (when this PU owns it). ``keys``/``valid`` are ``(n_attrs, n)``."""
        seqs = np.ascontiguousarray(seqs, dtype=np.int64)
        keys = np.ascontiguousarray(keys, np.int64)
        valid = np.ascontiguousarray(valid, np.bool_)
        p = self.parts
        own = seqs % p == self.pu
        self.reserve(seqs)
        if self.window is None:
            n_own = int(own.sum())
            if self.used + n_own > self.cap:
                self._grow(self.used + n_own)
            ins = np.full(len(seqs), -1, np.int64)
            ins[own] = self.used + np.arange(n_own)
            self.used += n_own
            exp = np.full(len(seqs), -1, np.int64)
        else:
            ins = np.where(own, (seqs // p) % self.cap, -1)
            e = seqs - self.window
            if expire:
                exp = np.where((e >= 0) & (e % p == self.pu), (e // p) % self.cap, -1)
            else:
                exp = np.full(len(seqs), -1, np.int64)
        fx_update(self.arrays, RingPositions(exp, ins), seqs, keys, valid)

    def _live(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pos = np.flatnonzero(self.ring >= 0)
        order = np.argsort(self.ring[pos], kind="stable")
        pos = pos[order]
        return self.ring[pos], self.keys[:, pos], self.valid[:, pos]

    def reserve(self, seqs: np.ndarray) -> None:
        """Count windows: make the ring hold the positions of sequence numbers ``seqs`` (it
        doubles, up to the full window; once full, nothing to look at)."""
        if self.full_cap is None or self.cap >= self.full_cap or not len(seqs):
            return
        last = int(seqs.max())
        if last // self.parts >= self.cap:
            self._grow(last // self.parts + 1)

    def _grow(self, need: int) -> None:
        seqs, keys, valid = self._live()
        cap = max(2 * self.cap, _next_pow2(need))
        self._alloc(cap if self.full_cap is None else min(cap, self.full_cap))
        self.insert(seqs, keys, valid, expire=False)

    def probe(self, attr: int, keys: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(probe index, stored seq) of every match on attribute ``attr``, oldest match first."""
        keys = np.ascontiguousarray(keys, np.int64)
        return drain(fx_probe, len(keys), self.cap, self.arrays, attr, keys,
                     np.ascontiguousarray(valid, np.bool_))

    def live_seqs(self) -> np.ndarray:
        return np.sort(self.ring[self.ring >= 0])

    def stats(self) -> list[dict[str, Any]]:
        return [{"buckets": self.mask + 1, "stored": int((self.ring >= 0).sum())}
                for _ in range(self.n_attrs)]

    def counters(self) -> np.ndarray:
        return np.zeros(0, np.int64)

    def set_counters(self, counters: np.ndarray) -> None:
        pass


def make_index(
    impl: Impl, n_attrs: int, window: int | None, parallel: int = 1, table_size: int | None = None
) -> HashIndex:
    """The window index of ``impl`` (SplitJoin across ``parallel`` PUs when > 1)."""
    if impl not in get_args(Impl):
        raise PlanError(f"unknown hash join implementation {impl!r} (choose {', '.join(get_args(Impl))})")

    def one(pu: int, parts: int) -> HashIndex:
        if impl == "hbsj":
            return HBSJIndex(n_attrs, window, table_size, pu, parts)
        return FastIndex(n_attrs, window, pu, parts, buckets=table_size)

    return one(0, 1) if parallel == 1 else SplitIndex(one, parallel)


# --------------------------------------------------------------------------------------------
# keys and schemas
# --------------------------------------------------------------------------------------------


def key_columns(on: str | Sequence[str], what: str = "on") -> tuple[str, ...]:
    """``"k"`` -> ``("k",)``; a sequence of names -> a tuple; no names -> PlanError."""
    cols = (on,) if isinstance(on, str) else tuple(on)
    if not cols or not all(isinstance(c, str) and c for c in cols):
        raise PlanError(f"hash window join: {what} must name one or more key columns, got {on!r}")
    return cols


# --------------------------------------------------------------------------------------------
# the join cores: both windows, one mixed arrival sequence per call, state kept across calls
# --------------------------------------------------------------------------------------------

_EMPTY = np.zeros(0, np.int64)


def _check_impl(impl: str) -> None:
    if impl not in get_args(Impl):
        raise PlanError(f"unknown hash join implementation {impl!r} (choose {', '.join(get_args(Impl))})")


class _Threads:
    """The SplitJoin PUs' threads (made at the first parallel call)."""

    def __init__(self, parallel: int) -> None:
        self.parallel = parallel
        self._team: ThreadTeam | None = None

    def map(self, fn: Callable[[int], tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        """``fn(pu)`` on every PU; their matches merged (by arrival, then matched tuple)."""
        if self.parallel == 1:
            return fn(0)
        if self._team is None:
            self._team = ThreadTeam(self.parallel, "splitjoin-pu")
        return merge_matches(self._team.run(fn))


def _same_capacity(a: FastIndex, b: FastIndex) -> None:
    """Grow the smaller ring to the larger one's size: the sequence kernel takes one size."""
    while a.cap != b.cap:
        small = a if a.cap < b.cap else b
        small._grow(max(a.cap, b.cap))


class CountCore:
    """Both inputs' count windows of ``window`` tuples, joined one mixed arrival sequence per call.

    ``run(sides, seqs, keys, valid)``: tuple ``i`` of input ``sides[i]`` (0 left, 1 right), with
    its sequence number ``seqs[i]`` on that input (0, 1, ... across calls) and its key code,
    probes the other input's window, expires its own input's tuple ``w`` arrivals older and is
    inserted (:func:`~splice.joins.hash._hash_kernels.fx_join_sequence`, or HB-SJ's
    :func:`~splice.joins.hash._hash_kernels.hb_join_sequence`); one kernel call for the sequence.
    Returns ``(i, matched seq)`` per output row, by ``i``, then oldest match first. The indexes
    persist between calls, so the windows span calls. With ``parallel`` P > 1 each of P
    SplitJoin PUs keeps every P-th tuple of both windows and runs the sequence on its thread.
    """

    def __init__(self, impl: Impl, window: int, parallel: int = 1, table_size: int | None = None) -> None:
        if window < 1:
            raise PlanError(f"count window size must be >= 1, got {window}")
        _check_impl(impl)
        self.impl, self.window, self.parallel = impl, int(window), int(parallel)
        self.pus: list[tuple[Any, Any]] = [
            (self._index(pu, table_size), self._index(pu, table_size)) for pu in range(self.parallel)]
        self._threads = _Threads(self.parallel)

    def _index(self, pu: int, table_size: int | None) -> FastIndex | HBSJIndex:
        if self.impl == "hbsj":
            return HBSJIndex(1, self.window, table_size, pu, self.parallel)
        return FastIndex(1, self.window, pu, self.parallel, buckets=table_size)

    def run(self, sides: np.ndarray, seqs: np.ndarray, keys: np.ndarray, valid: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
        if not len(sides):
            return _EMPTY, _EMPTY
        sides = np.ascontiguousarray(sides, np.int8)
        seqs = np.ascontiguousarray(seqs, np.int64)
        keys = np.ascontiguousarray(keys, np.int64)
        valid = np.ascontiguousarray(valid, np.bool_)
        return self._threads.map(lambda pu: self._run(pu, sides, seqs, keys, valid))

    def _run(self, pu: int, sides: np.ndarray, seqs: np.ndarray, keys: np.ndarray, valid: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
        li, ri = self.pus[pu]
        n = len(sides)
        arrivals = HashArrivals(sides, seqs, keys, valid)
        insert_buf = InsertBuffer(np.empty((1, 1), np.int64), np.empty((1, 1), np.bool_))
        if isinstance(li, HBSJIndex) and isinstance(ri, HBSJIndex):
            positions = ring_positions(seqs, self.window, li.cap, pu, self.parallel)
            scratch = ProbeBuffers(np.empty(li.cap + 4, np.int64), np.empty(li.cap + 4, np.int64))
            return drain(hb_join_sequence, n, li.cap + 4, arrivals, positions,  # type: ignore[no-any-return]
                         li.arrays, ri.arrays, scratch, insert_buf)
        assert isinstance(li, FastIndex) and isinstance(ri, FastIndex)
        li.reserve(seqs)
        ri.reserve(seqs)
        _same_capacity(li, ri)
        positions = ring_positions(seqs, self.window, li.cap, pu, self.parallel)
        return drain(fx_join_sequence, n, li.cap, arrivals, positions,  # type: ignore[no-any-return]
                     li.arrays, ri.arrays, insert_buf)

    def load(self, side: int, seqs: np.ndarray, keys: np.ndarray, valid: np.ndarray) -> None:
        """Restore: input ``side``'s window holds the tuples ``seqs`` (ascending) again."""
        if not len(seqs):
            return
        for pair in self.pus:
            pair[side].insert(np.asarray(seqs, np.int64), np.asarray(keys, np.int64)[None, :],
                              np.asarray(valid, np.bool_)[None, :], expire=False)
        for li, ri in self.pus:
            if isinstance(li, FastIndex) and isinstance(ri, FastIndex):
                _same_capacity(li, ri)

    def held(self, side: int) -> int:
        """Tuples in input ``side``'s window."""
        return sum(len(pair[side].live_seqs()) for pair in self.pus)

    def stats(self, side: int) -> dict[str, Any]:
        """Input ``side``'s index statistics (the PUs' summed; ``per_pu`` keeps each PU's)."""
        if self.parallel == 1:
            return self.pus[0][side].stats()[0]  # type: ignore[no-any-return]
        return SplitIndex(lambda pu, _p: self.pus[pu][side], self.parallel).stats()[0]

    def counters(self, side: int) -> np.ndarray:
        return np.stack([pair[side].counters() for pair in self.pus])

    def set_counters(self, side: int, counters: np.ndarray) -> None:
        for pair, c in zip(self.pus, counters, strict=True):
            pair[side].set_counters(c)

    def nbytes(self) -> int:
        return sum(ix.nbytes() for pair in self.pus for ix in pair)


class _FastRing:
    """One PU's rings of :class:`TimeCore` with ``impl="fast"``: both inputs, ``cap`` slots each
    (a power of two); input ``side``'s tuple ``s`` (this PU's when ``s % parts == pu``) at slot
    ``(s // parts) & (cap - 1)``; ``wm`` the inputs' watermarks as the kernel sees them."""

    def __init__(self, cap: int, pu: int, parts: int) -> None:
        self.pu, self.parts = pu, parts
        self.wm = np.full(2, NO_TIME, np.int64)
        #: whether each input's tuples came in nondecreasing time so far, and its largest time
        self.in_order = np.ones(2, np.bool_)
        self.newest = np.full(2, NO_TIME, np.int64)
        #: the same three arrays as the kernel takes them (updated in place, never reallocated)
        self.progress = TimeProgress(self.wm, self.in_order, self.newest)
        self.grows = 0
        self._alloc(cap)

    def _alloc(self, cap: int) -> None:
        self.cap = cap
        self.seq = np.full((2, cap), -1, np.int64)
        self.key = np.zeros((2, cap), np.int64)
        self.val = np.zeros((2, cap), np.bool_)
        self.time = np.zeros((2, cap), np.int64)
        self.nxt = np.full((2, cap), -1, np.int64)
        nb = 2 * cap
        self.head = np.full((2, nb), -1, np.int64)
        self.shift = 64 - (nb.bit_length() - 1)
        #: the same arrays as the kernel takes them (rebuilt here, where they are reallocated)
        self.rings = TimeRings(self.seq, self.key, self.val, self.time, self.nxt, self.head, self.shift)

    def run(self, sides: np.ndarray, seqs: np.ndarray, keys: np.ndarray, valid: np.ndarray,
            times: np.ndarray, length: int, time_sorted: bool) -> tuple[np.ndarray, np.ndarray]:
        n = len(sides)
        arrivals = HashArrivals(sides, seqs, keys, valid)
        params = TimeJoinParams(length, time_sorted, self.pu, self.parts)
        parts_i: list[np.ndarray] = []
        parts_s: list[np.ndarray] = []
        start = 0
        while start < n or not parts_i:
            size = max(2 * self.cap + 16, min(2 * (n - start) + 16, 1 << 22))
            out_i, out_s = np.empty(size, np.int64), np.empty(size, np.int64)
            w, start, grow = fx_time_ring_sequence(arrivals, times, params, self.rings, self.progress,
                                                   start, out_i, out_s)
            parts_i.append(out_i[:w])
            parts_s.append(out_s[:w])
            if grow:
                self.grow()
        if len(parts_i) == 1:
            return parts_i[0], parts_s[0]
        return np.concatenate(parts_i), np.concatenate(parts_s)

    def grow(self) -> None:
        """Double the ring: tuples move to their slots of the new size, chains are relinked."""
        old = (self.seq, self.key, self.val, self.time)
        self._alloc(2 * self.cap)
        self.grows += 1
        for side in range(2):
            occ = np.flatnonzero(old[0][side] >= 0)
            self._place(side, old[0][side][occ], old[1][side][occ], old[2][side][occ], old[3][side][occ])

    def _place(self, side: int, seqs: np.ndarray, keys: np.ndarray, valid: np.ndarray,
               times: np.ndarray) -> None:
        """Put tuples ``seqs`` (distinct slots) of input ``side`` in and relink its chains."""
        pos = (seqs // self.parts) & (self.cap - 1)
        self.seq[side, pos] = seqs
        self.key[side, pos] = keys
        self.val[side, pos] = valid
        self.time[side, pos] = times
        self.head[side] = -1
        occ = np.flatnonzero(self.seq[side] >= 0)
        order = occ[np.argsort(self.seq[side, occ], kind="stable")]
        fx_ring_relink(self.seq[side], self.key[side], self.val[side], self.nxt[side], self.head[side],
                       self.shift, order)

    def load(self, side: int, seqs: np.ndarray, keys: np.ndarray, valid: np.ndarray,
             times: np.ndarray, end: int) -> None:
        own = seqs % self.parts == self.pu
        seqs, keys, valid, times = seqs[own], keys[own], valid[own], times[own]
        while len(np.unique((seqs // self.parts) & (self.cap - 1))) < len(seqs):
            self.grow()
        self._place(side, seqs, keys, valid, times)

    def live(self, side: int, length: int) -> np.ndarray:
        """Input ``side``'s tuples that can still match (key not null, not retired)."""
        ok = (self.seq[side] >= 0) & self.val[side] & (self.time[side] > self.wm[1 - side] - length)
        return self.seq[side][ok]

    def stored(self) -> int:
        return int((self.seq >= 0).sum())

    def stats(self, side: int) -> dict[str, Any]:
        return {"buckets": 2 * self.cap, "capacity": self.cap, "stored": int((self.seq[side] >= 0).sum())}

    def counters(self, side: int) -> np.ndarray:
        return _EMPTY

    def set_counters(self, side: int, counters: np.ndarray) -> None:
        pass

    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.seq, self.key, self.val, self.time, self.nxt, self.head))


class _HBRing:
    """One PU's rings of :class:`TimeCore` with ``impl="hbsj"``: per input an HB-SJ ordered
    sliding window of ``cap`` positions (this PU's tuple ``s`` at ``(s // parts) & (cap - 1)``),
    the tuples' times, the position count ``lo`` of each input's oldest stored tuple, and ``wm``
    the inputs' watermarks as the kernel sees them."""

    def __init__(self, cap: int, pu: int, parts: int, table_size: int | None) -> None:
        self.pu, self.parts, self.cap, self.table_size = pu, parts, cap, table_size
        # a PU's share of a window of `cap * parts` positions is `cap` positions
        self.ix = [HBSJIndex(1, cap * parts, table_size, pu, parts) for _ in range(2)]
        self.rtime = np.zeros((2, cap), np.int64)
        self.lo = np.zeros(2, np.int64)
        self.wm = np.full(2, NO_TIME, np.int64)
        self.in_order = np.ones(2, np.bool_)  # (probes go through tables: not used)
        self.newest = np.full(2, NO_TIME, np.int64)
        #: the times, oldest positions and watermarks as the kernel takes them (rebuilt when
        #: the times are reallocated)
        self.windows = HBSJTimeWindows(self.rtime, self.lo, self.wm)
        self.grows = 0

    def run(self, sides: np.ndarray, seqs: np.ndarray, keys: np.ndarray, valid: np.ndarray,
            times: np.ndarray, length: int, time_sorted: bool) -> tuple[np.ndarray, np.ndarray]:
        n = len(sides)
        arrivals = HashArrivals(sides, seqs, keys, valid)
        params = TimeJoinParams(length, time_sorted, self.pu, self.parts)
        insert_buf = InsertBuffer(np.empty((1, 1), np.int64), np.empty((1, 1), np.bool_))
        parts_i: list[np.ndarray] = []
        parts_s: list[np.ndarray] = []
        start = 0
        while start < n or not parts_i:
            cap = self.cap
            size = max(2 * cap + 24, min(2 * (n - start) + 16, 1 << 22))
            out_i, out_s = np.empty(size, np.int64), np.empty(size, np.int64)
            scratch = ProbeBuffers(np.empty(cap + 4, np.int64), np.empty(cap + 4, np.int64))
            w, start, grow = hb_time_sequence(
                arrivals, times, params, self.ix[0].arrays, self.ix[1].arrays, self.windows, scratch,
                insert_buf, start, out_i, out_s)
            parts_i.append(out_i[:w])
            parts_s.append(out_s[:w])
            if grow:
                self.grow()
        if len(parts_i) == 1:
            return parts_i[0], parts_s[0]
        return np.concatenate(parts_i), np.concatenate(parts_s)

    def grow(self) -> None:
        """Double the rings: tuples are re-placed in arrival order, counters kept."""
        old, cap = self.cap, 2 * self.cap
        moved = np.zeros((2, cap), np.int64)
        for side in range(2):
            j = self.ix[side].live_seqs() // self.parts
            moved[side, j & (cap - 1)] = self.rtime[side, j & (old - 1)]
            self.ix[side] = self.ix[side].resized(cap * self.parts)
        self.rtime, self.cap = moved, cap
        self.windows = HBSJTimeWindows(self.rtime, self.lo, self.wm)
        self.grows += 1

    def load(self, side: int, seqs: np.ndarray, keys: np.ndarray, valid: np.ndarray,
             times: np.ndarray, end: int) -> None:
        own = seqs % self.parts == self.pu
        seqs, keys, valid, times = seqs[own], keys[own], valid[own], times[own]
        j = seqs // self.parts
        while len(j) and int(j.max() - j.min()) >= self.cap:
            self.grow()
        self.ix[side].insert(seqs, keys[None, :], valid[None, :], expire=False)
        self.rtime[side, j & (self.cap - 1)] = times
        # with no tuple of its own: the position count of this PU's next tuple
        self.lo[side] = int(j.min()) if len(j) else (end + (self.pu - end) % self.parts) // self.parts

    def live(self, side: int, length: int) -> np.ndarray:
        ix = self.ix[side]
        pos = np.flatnonzero(ix.wseq >= 0)
        ok = (ix.wloc[0, pos] < 5) & (self.rtime[side, pos] > self.wm[1 - side] - length)
        return ix.wseq[pos[ok]]

    def stored(self) -> int:
        return sum(len(ix.live_seqs()) for ix in self.ix)

    def stats(self, side: int) -> dict[str, Any]:
        return self.ix[side].stats()[0]

    def counters(self, side: int) -> np.ndarray:
        return self.ix[side].counters()

    def set_counters(self, side: int, counters: np.ndarray) -> None:
        self.ix[side].set_counters(counters)

    def nbytes(self) -> int:
        return self.rtime.nbytes + sum(ix.nbytes() for ix in self.ix)


class TimeCore:
    """Both inputs' time windows of length ``length``, joined one mixed arrival sequence per call.

    ``run(sides, seqs, keys, valid, times)``: tuple ``i`` (input ``sides[i]``, sequence number
    ``seqs[i]`` on that input, event time ``times[i]``) pairs with every retained tuple of the
    other input with an equal key and ``|dt| <= length``, then is retained; nothing in the
    sequence may be late. Returns ``(i, matched seq)``, by ``i``, then oldest match first.

    Each input's tuples sit in a ring (``impl="fast"``:
    :func:`~splice.joins.hash._hash_kernels.fx_time_ring_sequence`; ``"hbsj"``: HB-SJ's ordered
    sliding window, :func:`~splice.joins.hash._hash_kernels.hb_time_sequence`). A slot is reused once
    the other input's watermark retired its tuple (time ``<= W_other - length``); a slot to reuse
    that still holds a live tuple doubles the ring (from ``capacity`` slots). ``watermark(side,
    w)`` raises input ``side``'s watermark; with ``time_sorted`` (each input arrives in
    nondecreasing time) each input's watermark also trails its largest time by one, and probes
    stop at the window's edge. The rings persist between calls. ``parallel`` P > 1: SplitJoin,
    each PU rings every P-th tuple of each input.
    """

    def __init__(self, impl: Impl, length: int, time_sorted: bool, parallel: int = 1,
                 table_size: int | None = None, capacity: int = 256) -> None:
        if length < 0:
            raise PlanError(f"time window length must be >= 0, got {length}")
        _check_impl(impl)
        #: lengths beyond 2^62 reach every time the rings can hold; kept within int64 arithmetic
        self.length = min(int(length), 1 << 62)
        self.time_sorted = bool(time_sorted)
        self.impl, self.parallel = impl, int(parallel)
        cap = _next_pow2(max(16, capacity))
        self.pus: list[_FastRing | _HBRing] = [
            _HBRing(cap, pu, self.parallel, table_size) if impl == "hbsj" else _FastRing(cap, pu, self.parallel)
            for pu in range(self.parallel)]
        self._threads = _Threads(self.parallel)

    def run(self, sides: np.ndarray, seqs: np.ndarray, keys: np.ndarray, valid: np.ndarray,
            times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not len(sides):
            return _EMPTY, _EMPTY
        sides = np.ascontiguousarray(sides, np.int8)
        seqs = np.ascontiguousarray(seqs, np.int64)
        keys = np.ascontiguousarray(keys, np.int64)
        valid = np.ascontiguousarray(valid, np.bool_)
        times = np.ascontiguousarray(times, np.int64)
        return self._threads.map(
            lambda pu: self.pus[pu].run(sides, seqs, keys, valid, times, self.length, self.time_sorted))

    def watermark(self, side: int, time: int) -> None:
        """No later tuple of input ``side`` has a time ``<= time``."""
        for ring in self.pus:
            if time > ring.wm[side]:
                ring.wm[side] = time

    def live(self, side: int) -> np.ndarray:
        """Sequence numbers of input ``side``'s tuples that can still match, ascending."""
        return np.sort(np.concatenate([r.live(side, self.length) for r in self.pus]))

    def first_live(self, side: int, default: int) -> int:
        """The oldest tuple of input ``side`` that can still match (``default`` when none)."""
        firsts = [int(x.min()) for x in (r.live(side, self.length) for r in self.pus) if len(x)]
        return min(firsts) if firsts else default

    def load(self, side: int, seqs: np.ndarray, keys: np.ndarray, valid: np.ndarray,
             times: np.ndarray, end: int) -> None:
        """Restore: input ``side``'s tuples ``seqs`` (ascending, next tuple ``end``) again."""
        for ring in self.pus:
            ring.load(side, np.asarray(seqs, np.int64), np.asarray(keys, np.int64),
                      np.asarray(valid, np.bool_), np.asarray(times, np.int64), end)

    def arrival(self) -> dict[str, list[Any]]:
        """What the rings know of the inputs' times: watermarks, whether each input came in
        time order so far, and its largest time (the same on every PU)."""
        r = self.pus[0]
        return {"watermarks": [int(x) for x in r.wm], "in_order": [bool(x) for x in r.in_order],
                "newest": [int(x) for x in r.newest]}

    def restore_rings(self, capacities: Sequence[int], arrival: dict[str, Any]) -> None:
        """Restore: empty rings of these sizes (one per PU), and :meth:`arrival`."""
        for ring, cap in zip(self.pus, capacities, strict=True):
            while ring.cap < cap:
                ring.grow()
            ring.wm[:] = np.asarray(arrival["watermarks"], np.int64)
            ring.in_order[:] = np.asarray(arrival["in_order"], np.bool_)
            ring.newest[:] = np.asarray(arrival["newest"], np.int64)

    @property
    def capacities(self) -> list[int]:
        return [r.cap for r in self.pus]

    @property
    def grows(self) -> int:
        return sum(r.grows for r in self.pus)

    def held(self) -> int:
        """Tuples both inputs' rings hold (retired ones included until their slot is reused)."""
        return sum(r.stored() for r in self.pus)

    def slots(self) -> int:
        """Slots of both inputs' rings: what the join's state is sized for."""
        return sum(2 * r.cap for r in self.pus)

    def stats(self, side: int) -> dict[str, Any]:
        per = [r.stats(side) for r in self.pus]
        if self.parallel == 1:
            return per[0]
        total: dict[str, Any] = {}
        for k, v in per[0].items():
            total[k] = [sum(p[k][j] for p in per) for j in range(len(v))] if isinstance(v, list) \
                else sum(p[k] for p in per)
        total["per_pu"] = per
        return total

    def counters(self, side: int) -> list[np.ndarray]:
        return [r.counters(side) for r in self.pus]

    def set_counters(self, side: int, counters: Sequence[np.ndarray]) -> None:
        for r, c in zip(self.pus, counters, strict=True):
            r.set_counters(side, c)

    def nbytes(self) -> int:
        return sum(r.nbytes() for r in self.pus)


#: the HB-SJ figures of each input that the hash join reports (Diba Fig. 17)
HBSJ_FIGURES = ("table_inserts", "overflow_inserts", "overflow_peak", "overflow_comparisons", "probes")


# --------------------------------------------------------------------------------------------
# the operator
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HashWindowJoin(OperatorSpec):
    """Two-way equi-join of streams ``left`` and ``right`` over sliding windows (see module doc).

    ``on`` is the key column or columns (of both inputs, or of the left input when ``right_on``
    names the right input's), of any hashable type (:mod:`splice.joins.common.hash_keys`); ``window`` a
    :class:`CountWindow` or :class:`TimeWindow`, ``impl`` ``"fast"`` or ``"hbsj"``,
    ``table_size`` the HB-SJ table size (default the next power of two >= 2 w) or the fast
    count index's bucket count, ``parallel`` the number of SplitJoin PUs. ``order``: ``None``
    joins in the data path's order, batch by batch; a column both inputs carry (nondecreasing
    on each input), or :data:`~splice.joins.common.join_windows.POSITION`, makes the join merge the two
    inputs into that order itself, ties left first.
    """

    left: int
    right: int
    on: str | Sequence[str]
    window: JoinWindow
    impl: Impl = "fast"
    table_size: int | None = None
    parallel: int = 1
    name: str = "hash_window_join"
    right_on: str | Sequence[str] | None = None
    order: str | None = None

    def __post_init__(self) -> None:
        on = key_columns(self.on)
        ron = on if self.right_on is None else key_columns(self.right_on, "right_on")
        if len(on) != len(ron):
            raise PlanError(f"{self.name}: on and right_on must name as many columns, got {list(on)} "
                            f"and {list(ron)}")
        object.__setattr__(self, "on", on)
        object.__setattr__(self, "right_on", ron)
        if self.left == self.right:
            raise PlanError(f"{self.name}: left and right must be different streams, got {self.left} twice")
        if not isinstance(self.window, CountWindow | TimeWindow):
            raise PlanError(f"{self.name}: window must be a CountWindow or TimeWindow, got {self.window!r}")
        if self.impl not in get_args(Impl):
            raise PlanError(f"{self.name}: unknown impl {self.impl!r} (choose fast or hbsj)")
        if self.parallel < 1:
            raise PlanError(f"{self.name}: parallel must be >= 1, got {self.parallel}")
        if self.table_size is not None and self.table_size < 1:
            raise PlanError(f"{self.name}: table_size must be >= 1, got {self.table_size}")
        if self.order is not None and (not isinstance(self.order, str) or not self.order):
            raise PlanError(f"{self.name}: order must name a column both inputs carry, or be "
                            f"POSITION, got {self.order!r}")

    @property
    def key_pairs(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(left key columns, right key columns), normalized by the constructor."""
        assert isinstance(self.on, tuple) and isinstance(self.right_on, tuple)
        return self.on, self.right_on

    def _schemas(self, inputs: InputSchemas) -> tuple[pa.Schema, pa.Schema]:
        ls, rs, _ = self._checked(inputs)
        return ls, rs

    def _checked(self, inputs: InputSchemas) -> tuple[pa.Schema, pa.Schema, list[pa.DataType]]:
        for sid, side in ((self.left, "left"), (self.right, "right")):
            if sid not in inputs:
                known = ", ".join(map(str, sorted(inputs))) or "none"
                raise PlanError(f"{self.name}: unknown {side} stream id {sid} (inputs: {known})")
        ls, rs = inputs[self.left], inputs[self.right]
        lon, ron = self.key_pairs
        types = common_key_types(ls, rs, lon, ron, str(self.left), str(self.right), self.name)
        columns = []
        if isinstance(self.window, TimeWindow):
            columns.append(("time", self.window.column))
        if self.order is not None and self.order != POSITION:
            columns.append(("order", self.order))
        for what, c in columns:
            for s, sid in ((ls, self.left), (rs, self.right)):
                if c not in s.names:
                    raise SchemaError(f"{self.name}: stream {sid} has no {what} column {c!r}")
                if not is_temporal(s.field(c).type):
                    raise SchemaError(f"{self.name}: stream {sid} {what} column {c!r} has type "
                                      f"{s.field(c).type}, expected timestamp, date or integer")
        return ls, rs, types

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        ls, rs = self._schemas(inputs)
        return pair_output_schema(ls, rs)[0]

    def columns_used(self, inputs: InputSchemas) -> dict[int, set[str]] | None:
        return None

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        ls, rs, types = self._checked(inputs)
        return _HashWindowJoinLogic(self, ls, rs, KeyCodec(types), state)


class _HashSide:
    """One input: its retained rows, key columns, counts, watermark and pending watermarks."""

    def __init__(self, schema: pa.Schema, keys: tuple[str, ...], sid: int, hk: KeyCodec) -> None:
        self.schema, self.keys, self.sid, self.hk = schema, keys, sid, hk
        self.rows = RowStore(schema)
        self.nulls = 0
        self.late = 0
        #: rows taken into the join (not late); the next one's sequence number once released
        self.accepted = 0
        #: the input's watermark, as the path delivered it
        self.watermark = MIN_TIME
        #: watermarks not yet handed to the core: (rows accepted before it, time)
        self.pending: list[tuple[int, int]] = []

    def encode(self, rows: pa.RecordBatch | pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """(int64 key codes, valid) of ``rows`` (see :mod:`splice.joins.common.key_codec`)."""
        codes, valid = self.hk.encode([rows.column(c) for c in self.keys], str(self.sid), self.keys)
        return codes, np.ones(len(codes), np.bool_) if valid is None else valid

    def key_cols(self, rows: pa.RecordBatch | pa.Table) -> list[Any]:
        return [rows.column(c) for c in self.keys]


class _HashWindowJoinLogic(OperatorLogic):
    def __init__(self, spec: HashWindowJoin, ls: pa.Schema, rs: pa.Schema, hk: KeyCodec, state: Any) -> None:
        self.spec = spec
        lon, ron = spec.key_pairs
        self.hk = hk
        self.schema, self._right_names = pair_output_schema(ls, rs)
        self.ids = (spec.left, spec.right)
        self.sides = (_HashSide(ls, lon, spec.left, hk), _HashSide(rs, ron, spec.right, hk))
        self.time = spec.window if isinstance(spec.window, TimeWindow) else None
        self.count = spec.window.size if isinstance(spec.window, CountWindow) else None
        self.core: CountCore | TimeCore
        if self.time is not None:
            self.core = TimeCore(spec.impl, self.time.length, spec.order == self.time.column,
                                 spec.parallel, spec.table_size)
        else:
            assert self.count is not None
            self.core = CountCore(spec.impl, self.count, spec.parallel, spec.table_size)
        self.merge = (ArrivalMerge(spec.order, self.ids, (ls, rs), spec.name)
                      if spec.order is not None else None)
        self._late: list[tuple[int, pa.RecordBatch]] = []
        #: the most ring slots a time window held after a batch (an upper bound on its tuples)
        self.slots_max = 0
        if state is not None:
            self._restore(state)

    def _index(self, stream_id: int) -> int:
        if stream_id == self.spec.left:
            return 0
        if stream_id == self.spec.right:
            return 1
        raise PlanError(
            f"{self.spec.name}: unknown stream id {stream_id} (inputs: {self.spec.left}, {self.spec.right})")

    # -- data ---------------------------------------------------------------------------------

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        side = self._index(stream_id)
        if batch.num_rows == 0:
            return []
        me = self.sides[side]
        batch = conform(batch, me.schema, self.spec.name, stream_id)
        if self.time is not None:
            t_new = time_values(batch, self.time.column, str(stream_id))
            late = t_new <= me.watermark
            if late.any():  # the late side output: joined with nothing, never dropped silently
                self._late.append((stream_id, batch.filter(pa.array(late))))
                me.late += int(late.sum())
                batch = batch.filter(pa.array(~late))
                if batch.num_rows == 0:
                    return []
        if self.merge is None:
            me.accepted += batch.num_rows
            out = self._join(Release.single(side, batch))
        else:
            self.merge.add(side, batch)
            me.accepted += batch.num_rows
            out = self._release()
        if isinstance(self.core, TimeCore):
            self.slots_max = max(self.slots_max, self.core.slots())
        return out

    def _release(self, final: bool = False) -> list[pa.RecordBatch]:
        assert self.merge is not None
        rel = self.merge.release(final)
        out = self._join(rel) if rel is not None else []
        self._apply_watermarks()
        return out

    def _join(self, rel: Release) -> list[pa.RecordBatch]:
        """Join the released rows in their order: one core call; the output batches."""
        n = len(rel)
        keys = np.empty(n, np.int64)
        valid = np.empty(n, np.bool_)
        seqs = np.empty(n, np.int64)
        times = np.empty(n, np.int64) if self.time is not None else None
        for s in (0, 1):
            rows = rel.rows[s]
            if rows is None or rows.num_rows == 0:
                continue
            me, pos = self.sides[s], rel.positions[s]
            k, v = me.encode(rows)
            me.nulls += int(len(v) - v.sum())
            keys[pos], valid[pos] = k, v
            seqs[pos] = me.rows.append(rows) + np.arange(rows.num_rows, dtype=np.int64)
            if times is not None:
                assert self.time is not None
                times[pos] = time_values(rows, self.time.column, str(me.sid))
        if isinstance(self.core, TimeCore):
            assert times is not None
            ai, ms = self.core.run(rel.sides, seqs, keys, valid, times)
        else:
            ai, ms = self.core.run(rel.sides, seqs, keys, valid)
        out: list[pa.RecordBatch] = []
        if len(ai):
            from_left = rel.sides[ai] == 0
            lseq = np.where(from_left, seqs[ai], ms)
            rseq = np.where(from_left, ms, seqs[ai])
            lt, rt = self.sides[0].rows.take(lseq), self.sides[1].rows.take(rseq)
            if not self.hk.exact:
                # hashed codes: equal codes are candidates, emitted only when the keys are equal
                lme, rme = self.sides
                eq = self.hk.equal(lme.key_cols(lt), rme.key_cols(rt), str(lme.sid), str(rme.sid),
                                   lme.keys, rme.keys)
                if not eq.all():
                    m = pa.array(eq)
                    lt, rt = lt.filter(m), rt.filter(m)
            if lt.num_rows:
                t = pa.Table.from_arrays(list(lt.columns) + list(rt.columns), schema=self.schema)
                out = t.combine_chunks().to_batches()
        self._evict()
        return out

    def _evict(self) -> None:
        """Forget the rows no window can match again (whole chunks)."""
        for s, me in enumerate(self.sides):
            if self.count is not None:
                me.rows.evict_before(me.rows.end - self.count)
            else:
                assert isinstance(self.core, TimeCore)
                me.rows.evict_before(self.core.first_live(s, me.rows.end))

    # -- time ---------------------------------------------------------------------------------

    def on_watermark(self, stream_id: int, time: int) -> list[pa.RecordBatch]:
        side = self._index(stream_id)
        me = self.sides[side]
        if time <= me.watermark:
            return []
        me.watermark = int(time)
        if self.time is None:
            return []
        # the core may retire by it once every row accepted before it has been joined
        me.pending.append((me.accepted, int(time)))
        out: list[pa.RecordBatch] = []
        if self.merge is not None and self.merge.order == self.time.column:
            # later rows of this input are after `time`: rows of the other up to it have their place
            self.merge.advance(side, int(time) + 1 if time < np.iinfo(np.int64).max else int(time))
            out = self._release()
        self._apply_watermarks()
        return out

    def _apply_watermarks(self) -> None:
        if self.time is None:
            return
        assert isinstance(self.core, TimeCore)
        moved = False
        for s, me in enumerate(self.sides):
            while me.pending and me.pending[0][0] <= me.rows.end:
                self.core.watermark(s, me.pending.pop(0)[1])
                moved = True
        if moved:
            self._evict()

    def on_end(self) -> list[pa.RecordBatch]:
        if self.merge is None:
            return []
        return self._release(final=True)

    def drain_late(self) -> list[tuple[int, pa.RecordBatch]]:
        out, self._late = self._late, []
        return out

    # -- state --------------------------------------------------------------------------------

    def metrics(self) -> dict[str, Any]:
        """``null_keys`` and ``late_rows`` of both inputs; for time windows ``retained_max`` (the
        most ring slots held after a batch); with HB-SJ each input's table figures (Diba Fig.
        17: inserts per table, overflow inserts and peak, comparisons in the overflow buffer,
        probes; SplitJoin units summed) under ``hbsj``."""
        st = self.stats()
        out: dict[str, Any] = {"null_keys": sum(st[n]["null_keys"] for n in ("left", "right")),
                               "late_rows": sum(st[n]["late"] for n in ("left", "right"))}
        if isinstance(self.core, TimeCore):
            out["retained_max"] = int(max(self.slots_max, self.core.slots()))
        if self.spec.impl == "hbsj":
            out["hbsj"] = {n: {k: st[n]["index"][k] for k in HBSJ_FIGURES} for n in ("left", "right")}
        return out

    def stats(self) -> dict[str, Any]:
        """Per side: null keys, late rows, tuples in the window now, rows waiting for their
        place in the arrival order, and the index's statistics."""
        out: dict[str, Any] = {}
        for s, name in enumerate(("left", "right")):
            me = self.sides[s]
            stored = self.core.held(s) if isinstance(self.core, CountCore) else len(self.core.live(s))
            out[name] = {"null_keys": me.nulls, "late": me.late, "stored": int(stored),
                         "waiting": self.merge.pending(s) if self.merge is not None else 0,
                         "index": self.core.stats(s)}
        return out

    def snapshot(self) -> Any:
        sides = []
        for s, me in enumerate(self.sides):
            if self.count is not None:
                live = np.arange(max(0, me.rows.end - self.count), me.rows.end, dtype=np.int64)
            else:
                assert isinstance(self.core, TimeCore)
                live = self.core.live(s)
            first = int(live[0]) if len(live) else me.rows.end
            sides.append({
                "rows": me.rows.rows_from(first), "first": first, "end": me.rows.end,
                "live": live.copy(), "nulls": me.nulls, "late": me.late, "accepted": me.accepted,
                "watermark": me.watermark, "pending": list(me.pending),
                "counters": self.core.counters(s),
            })
        core: dict[str, Any] = {}
        if isinstance(self.core, TimeCore):
            core = {"capacities": self.core.capacities, "arrival": self.core.arrival(),
                    "grows": [r.grows for r in self.core.pus]}
        return {"sides": sides, "core": core,
                "merge": self.merge.snapshot() if self.merge is not None else None}

    def _restore(self, state: Any) -> None:
        try:
            sides, core, merge = state["sides"], state["core"], state["merge"]
        except (TypeError, KeyError) as exc:
            raise StateError(f"{self.spec.name}: unreadable snapshot {type(state).__name__}") from exc
        if len(sides) != 2:
            raise StateError(f"{self.spec.name}: snapshot holds {len(sides)} inputs, expected 2")
        if isinstance(self.core, TimeCore):
            self.core.restore_rings(core["capacities"], core["arrival"])
            for ring, g in zip(self.core.pus, core["grows"], strict=True):
                ring.grows = int(g)
        for s, st in enumerate(sides):
            me = self.sides[s]
            me.rows = RowStore(me.schema, int(st["first"]))
            rows: pa.Table = st["rows"].select(me.schema.names)
            for b in rows.to_batches():
                me.rows.append(b)
            me.rows.end = int(st["end"])
            me.nulls, me.late, me.accepted = int(st["nulls"]), int(st["late"]), int(st["accepted"])
            me.watermark = int(st["watermark"])
            me.pending = [(int(c), int(t)) for c, t in st["pending"]]
            live = np.asarray(st["live"], np.int64)
            if len(live):
                keys, valid = me.encode(rows)
                off = live - int(st["first"])
                if isinstance(self.core, TimeCore):
                    assert self.time is not None
                    times = time_values(rows, self.time.column, str(me.sid))[off]
                    self.core.load(s, live, keys[off], valid[off], times, me.rows.end)
                else:
                    self.core.load(s, live, keys[off], valid[off])
            self.core.set_counters(s, st["counters"])
        if self.merge is not None:
            if merge is None:
                raise StateError(f"{self.spec.name}: snapshot has no arrival-order state")
            self.merge.restore(merge)

    def state_bytes(self) -> int:
        waiting = self.merge.nbytes() if self.merge is not None else 0
        return sum(s.rows.nbytes() for s in self.sides) + waiting

    def retained_rows(self) -> int:
        """Rows both sides hold now (whole chunks: at least the live tuples)."""
        return sum(s.rows.end - s.rows.start for s in self.sides)


# --------------------------------------------------------------------------------------------
# whole arrival sequences: both streams interleaved, through the cores in one go
# --------------------------------------------------------------------------------------------


def _side_seqs(sides: np.ndarray) -> np.ndarray:
    """Each tuple's sequence number on its own side (0, 1, ... in arrival order)."""
    is_right = sides.astype(np.int64)
    nright = np.cumsum(is_right) - is_right
    return np.where(sides == 0, np.arange(len(sides)) - nright, nright).astype(np.int64)


def join_sequence(
    sides: np.ndarray,
    keys: np.ndarray,
    valid: np.ndarray,
    window: int,
    impl: Impl = "fast",
    parallel: int = 1,
    table_size: int | None = None,
    chunk: int = 1 << 20,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """Count-window join over a whole mixed arrival sequence, ``chunk`` tuples per
    :class:`CountCore` call.

    ``sides[i]`` is 0 (left) or 1 (right), ``keys``/``valid`` the tuple's key. Returns
    ``(arrival index, left seq, right seq)`` of every output row, in output order, and the
    indexes' statistics. ``seq`` numbers each side's tuples 0, 1, ... in arrival order.
    """
    core = CountCore(impl, window, parallel, table_size)
    sides = np.ascontiguousarray(sides, np.int8)
    keys = np.ascontiguousarray(keys, np.int64)
    valid = np.ascontiguousarray(valid, np.bool_)
    seqs = _side_seqs(sides)
    out_i, out_s = [], []
    for lo in range(0, len(sides), chunk):
        hi = min(len(sides), lo + chunk)
        i, s = core.run(sides[lo:hi], seqs[lo:hi], keys[lo:hi], valid[lo:hi])
        out_i.append(i + lo)
        out_s.append(s)
    ai = np.concatenate(out_i) if out_i else _EMPTY
    ms = np.concatenate(out_s) if out_s else _EMPTY
    from_left = sides[ai] == 0
    stats: dict[str, Any] = {"left": core.stats(0), "right": core.stats(1),
                             "null_keys": int(len(valid) - valid.sum())}
    return ai, np.where(from_left, seqs[ai], ms), np.where(from_left, ms, seqs[ai]), stats


def time_join_sequence(
    sides: np.ndarray,
    keys: np.ndarray,
    valid: np.ndarray,
    times: np.ndarray,
    length: int,
    time_sorted: bool,
    capacity: int = 1024,
    impl: Impl = "fast",
    table_size: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """Time-window join over a whole mixed arrival sequence in which nothing is late: one
    :class:`TimeCore` call.

    Pairs tuples of the two sides with equal keys and event times at most ``length`` apart,
    each pair emitted when its later tuple arrives (ordered by that arrival, then by the
    matched tuple's). ``time_sorted`` says the arrival follows event time: then each side's
    watermark trails its largest time by one and the rings stay about one window; without it
    there are no watermarks and every tuple is retained. Rings start at ``capacity`` slots per
    side. Returns ``(arrival index, left seq, right seq, stats)``; ``stats["capacity"]`` is the
    ring's final size in slots per side; with ``impl="hbsj"`` HB-SJ's statistics come under
    ``stats["left"]``/``["right"]``.
    """
    core = TimeCore(impl, length, time_sorted, 1, table_size, capacity)
    sides = np.ascontiguousarray(sides, np.int8)
    seqs = _side_seqs(sides)
    ai, ms = core.run(sides, seqs, keys, valid, times)
    from_left = sides[ai] == 0
    stats: dict[str, Any] = {"capacity": core.capacities[0], "grows": core.grows, "retained": core.held(),
                             "null_keys": int(len(valid) - np.count_nonzero(valid))}
    if impl == "hbsj":
        stats["left"], stats["right"] = core.stats(0), core.stats(1)
    return ai, np.where(from_left, seqs[ai], ms), np.where(from_left, ms, seqs[ai]), stats
