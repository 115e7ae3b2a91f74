"""Hash window join: the two-way equi-join over sliding windows, and its fast default index.

Semantics. Tuples of the left stream R and the right stream S arrive in one order on the data
path. An arriving r is processed as::

    emit { (r, s) : s in W_S, s.key == r.key }   ->   expire from W_R   ->   insert r into W_R

and symmetrically for an arriving s. ``W`` is a count window (the last ``w`` tuples of the
stream, :class:`~splice.joins.window.CountWindow`) or a time window
(:class:`~splice.joins.window.TimeWindow`: stored tuples within ``D`` of the arriving tuple's
event time, evicted by watermark; late tuples go to the late side output). The key is one or
several columns of any hashable type (integers, strings, binaries, dates, timestamps, decimals,
booleans, ...); per column both inputs' types must agree or cast safely to one type. A key with
a null in any column never matches (the tuple still occupies its window position) and is
counted. Output rows list the left input's
columns then the right input's (a right column whose name is taken gets the suffix ``_right``),
ordered by the arrival of the later tuple, then by the arrival of the matched one. Results are
therefore deterministic for a given arrival order, however the input is cut into batches.

Algorithm. Keys become ``int64`` codes (:mod:`splice.joins.hash_keys`): one integer-like
column is its own code; strings, several columns and the like are hashed, and every matched
pair of a hashed key is checked for real key equality before it is emitted. Within one batch
of one stream the opposite window does not change, so the batch probes it in one kernel call,
then expires and inserts its tuples in order. Implementations:

* ``impl="fast"`` (:class:`FastIndex`): a ring of window positions threaded by per-bucket FIFO
  chains (``2 w`` buckets): the window's oldest tuple always heads its chain, so expiry and
  insert are O(1) and a probe walks one chain, yielding matches oldest first. The ring starts
  at 1,024 positions and doubles as the window fills (:meth:`FastIndex.reserve`).
* ``impl="hbsj"`` (:class:`~splice.joins.hbsj.HBSJIndex`): Diba's four Murmur3 tables and
  overflow buffer; same results, plus per-table and overflow statistics. Over time windows its
  ordered window grows with the retained tuples, and watermark eviction rebuilds the tables.
* ``parallel=P`` (:class:`~splice.joins.splitjoin.SplitIndex`): SplitJoin over P PUs.

State: per side the retained rows (:class:`~splice.joins.window.RowStore`), the index and the
key codes (derived: rebuilt from the rows on restore, not stored), the next sequence number and
the null-key count. Time windows evict a side's tuples with ``time <= W_other - D`` once they
are at least half of what it holds, so its state stays within twice the live tuples.

>>> import pyarrow as pa
>>> from splice.testing import OperatorHarness
>>> spec = HashWindowJoin(left=2, right=3, on="k", window=CountWindow(2))
>>> h = OperatorHarness(spec, {2: pa.schema([("k", pa.int64()), ("a", pa.int64())]),
...                            3: pa.schema([("k", pa.int64()), ("b", pa.int64())])})
>>> _ = h.push(2, pa.record_batch({"k": [1, 1, 1], "a": [10, 11, 12]}))
>>> h.push(3, pa.record_batch({"k": [1], "b": [20]})).to_pydict()  # left 10 has expired
{'k': [1, 1], 'a': [11, 12], 'k_right': [1, 1], 'b': [20, 20]}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import pyarrow as pa

from splice.core.errors import PlanError, SchemaError, StateError
from splice.core.operator import InputSchemas, OperatorLogic, OperatorSpec
from splice.core.time import MIN_TIME, time_values
from splice.joins._hash_kernels import (
    NO_TIME,
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
from splice.joins.hash_keys import HashKeys, common_key_types
from splice.joins.hbsj import HBSJIndex
from splice.joins.splitjoin import SplitIndex, WindowIndex, merge_matches
from splice.joins.window import CountWindow, JoinWindow, RowStore, TimeWindow

__all__ = [
    "HashWindowJoin",
    "FastIndex",
    "Impl",
    "join_output_schema",
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
        self.used = 0  # unbounded: next dense position

    def arrays(self) -> tuple[np.ndarray, ...]:
        return (self.ring, self.keys, self.valid, self.nxt, self.head, self.tail)

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
        fx_update(*self.arrays(), self.shift, exp, ins, seqs, keys, valid)  # type: ignore[call-arg]

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

    def retain(self, keep: np.ndarray) -> None:
        """Unbounded mode: keep only the live tuples whose seq is in sorted ``keep``."""
        seqs, keys, valid = self._live()
        m = np.isin(seqs, keep)
        self._alloc(max(1024, _next_pow2(2 * int(m.sum()))))
        self.insert(seqs[m], keys[:, m], valid[:, m], expire=False)

    def probe(self, attr: int, keys: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(probe index, stored seq) of every match on attribute ``attr``, oldest match first."""
        keys = np.ascontiguousarray(keys, np.int64)
        return drain(fx_probe, len(keys), self.cap, self.ring, self.keys, self.nxt, self.head,
                     self.shift, attr, keys, np.ascontiguousarray(valid, np.bool_))

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
) -> WindowIndex:
    """The window index of ``impl`` (SplitJoin across ``parallel`` PUs when > 1)."""
    if impl not in get_args(Impl):
        raise PlanError(f"unknown hash join implementation {impl!r} (choose {', '.join(get_args(Impl))})")

    def one(pu: int, parts: int) -> WindowIndex:
        if impl == "hbsj":
            return HBSJIndex(n_attrs, window, table_size, pu, parts)
        return FastIndex(n_attrs, window, pu, parts, buckets=table_size)

    return one(0, 1) if parallel == 1 else SplitIndex(one, parallel)


# --------------------------------------------------------------------------------------------
# keys and schemas
# --------------------------------------------------------------------------------------------


def join_output_schema(left: pa.Schema, right: pa.Schema) -> tuple[pa.Schema, list[str]]:
    """Left's fields then right's; a right name already taken gets ``_right`` (repeated)."""
    taken = set(left.names)
    names = []
    for f in right:
        n = f.name
        while n in taken:
            n = n + "_right"
        taken.add(n)
        names.append(n)
    fields = list(left) + [pa.field(n, f.type, f.nullable) for n, f in zip(names, right, strict=True)]
    return pa.schema(fields), names


def key_columns(on: str | Sequence[str], what: str = "on") -> tuple[str, ...]:
    """``"k"`` -> ``("k",)``; a sequence of names -> a tuple; no names -> PlanError."""
    cols = (on,) if isinstance(on, str) else tuple(on)
    if not cols or not all(isinstance(c, str) and c for c in cols):
        raise PlanError(f"hash window join: {what} must name one or more key columns, got {on!r}")
    return cols


# --------------------------------------------------------------------------------------------
# the operator
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HashWindowJoin(OperatorSpec):
    """Two-way equi-join of streams ``left`` and ``right`` over sliding windows (see module doc).

    ``on`` is the key column or columns (of both inputs, or of the left input when ``right_on``
    names the right input's), of any hashable type (:mod:`splice.joins.hash_keys`); ``window`` a
    :class:`CountWindow` or :class:`TimeWindow`, ``impl`` ``"fast"`` or ``"hbsj"``,
    ``table_size`` the HB-SJ table size (default the next power of two >= 2 w) or the fast
    index's bucket count, ``parallel`` the number of SplitJoin PUs.
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
        if isinstance(self.window, TimeWindow):
            for s, sid in ((ls, self.left), (rs, self.right)):
                c = self.window.column
                if c not in s.names:
                    raise SchemaError(f"{self.name}: stream {sid} has no time column {c!r}")
        return ls, rs, types

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        ls, rs = self._schemas(inputs)
        return join_output_schema(ls, rs)[0]

    def columns_used(self, inputs: InputSchemas) -> dict[int, set[str]] | None:
        return None

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        ls, rs, types = self._checked(inputs)
        return _HashWindowJoinLogic(self, ls, rs, HashKeys(types), state)


class _Side:
    """One input's window: rows, index, sequence counter, event times, watermark."""

    def __init__(self, spec: HashWindowJoin, schema: pa.Schema, keys: tuple[str, ...], sid: int,
                 hk: HashKeys) -> None:
        self.schema, self.keys, self.sid, self.hk = schema, keys, sid, hk
        w = spec.window.size if isinstance(spec.window, CountWindow) else None
        self.count = w
        self.index = make_index(spec.impl, 1, w, spec.parallel, spec.table_size)
        self.rows = RowStore(schema)
        self.nulls = 0
        self.times = np.zeros(0, np.int64)  # time windows: event time by seq - times_base
        self.times_base = 0
        self.watermark = MIN_TIME
        self.late = 0

    def time_of(self, seqs: np.ndarray) -> np.ndarray:
        return self.times[seqs - self.times_base]

    def encode(self, rows: pa.RecordBatch | pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """(int64 key codes, valid) of ``rows`` (see :mod:`splice.joins.hash_keys`)."""
        return self.hk.encode([rows.column(c) for c in self.keys], str(self.sid), self.keys)

    def key_cols(self, rows: pa.RecordBatch | pa.Table) -> list[Any]:
        return [rows.column(c) for c in self.keys]


class _HashWindowJoinLogic(OperatorLogic):
    def __init__(self, spec: HashWindowJoin, ls: pa.Schema, rs: pa.Schema, hk: HashKeys, state: Any) -> None:
        self.spec = spec
        lon, ron = spec.key_pairs
        self.hk = hk
        self.schema, self._right_names = join_output_schema(ls, rs)
        self.sides = {spec.left: _Side(spec, ls, lon, spec.left, hk), spec.right: _Side(spec, rs, ron, spec.right, hk)}
        self.time = spec.window if isinstance(spec.window, TimeWindow) else None
        self._late: list[pa.RecordBatch] = []
        if state is not None:
            self._restore(state)

    # -- data ---------------------------------------------------------------------------------

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        me = self.sides.get(stream_id)
        if me is None:
            raise PlanError(
                f"{self.spec.name}: unknown stream id {stream_id} (inputs: {self.spec.left}, {self.spec.right})"
            )
        if batch.num_rows == 0:
            return []
        other = self.sides[self.spec.right if stream_id == self.spec.left else self.spec.left]
        if batch.schema.names != me.schema.names:
            batch = batch.select(me.schema.names)
        t_new: np.ndarray | None = None
        if self.time is not None:
            t_new = time_values(batch, self.time.column, str(stream_id))
            late = t_new <= me.watermark
            if late.any():
                self._late.append(batch.filter(pa.array(late)))
                me.late += int(late.sum())
                keep = ~late
                batch = batch.filter(pa.array(keep))
                t_new = t_new[keep]
                if batch.num_rows == 0:
                    return []
        keys, valid = me.encode(batch)
        me.nulls += int(len(valid) - valid.sum())
        out: list[pa.RecordBatch] = []
        pidx, mseq = other.index.probe(0, keys, valid)
        if self.time is not None and len(pidx):
            assert t_new is not None
            ok = np.abs(t_new[pidx] - other.time_of(mseq)) <= self.time.length
            pidx, mseq = pidx[ok], mseq[ok]
        if len(pidx):
            mine = batch.take(pa.array(pidx))
            theirs = other.rows.take(mseq)
            if not self.hk.exact:
                # hashed codes: equal codes are candidates, emitted only when the keys are equal
                eq = self.hk.equal(me.key_cols(mine), other.key_cols(theirs), str(me.sid), str(other.sid),
                                   me.keys, other.keys)
                if not eq.all():
                    m = pa.array(eq)
                    mine, theirs = mine.filter(m), theirs.filter(m)
            if mine.num_rows:
                out.append(self._assemble(mine, theirs, stream_id == self.spec.left))
        first = me.rows.append(batch)
        seqs = np.arange(first, first + batch.num_rows, dtype=np.int64)
        me.index.insert(seqs, keys[None, :], valid[None, :])
        if me.count is not None:
            me.rows.evict_before(me.rows.end - me.count)
        elif t_new is not None:
            me.times = np.concatenate([me.times[me.rows.start - me.times_base:], t_new])
            me.times_base = me.rows.start
        return out

    def _assemble(self, mine: pa.RecordBatch, theirs: pa.Table, mine_is_left: bool) -> pa.RecordBatch:
        lt = mine if mine_is_left else theirs
        rt = theirs if mine_is_left else mine
        cols = [lt.column(i) for i in range(lt.num_columns)] + [rt.column(i) for i in range(rt.num_columns)]
        cols = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in cols]
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)

    # -- time ---------------------------------------------------------------------------------

    def on_watermark(self, stream_id: int, time: int) -> list[pa.RecordBatch]:
        me = self.sides.get(stream_id)
        if me is None:
            raise PlanError(f"{self.spec.name}: watermark for unknown stream id {stream_id}")
        if time <= me.watermark:
            return []
        me.watermark = time
        if self.time is not None:
            other = self.sides[self.spec.right if stream_id == self.spec.left else self.spec.left]
            self._evict(other, time - self.time.length)
        return []

    def _evict(self, side: _Side, upto: int) -> None:
        """Drop tuples of ``side`` with time ``<= upto`` when they are at least half of it."""
        live = side.index.live_seqs()
        if not len(live):
            return
        dead = side.time_of(live) <= upto
        n_dead = int(dead.sum())
        if n_dead == 0 or 2 * n_dead < len(live):
            return
        keep = live[~dead]
        idx = side.index
        for ix in idx.pus if isinstance(idx, SplitIndex) else [idx]:
            assert isinstance(ix, FastIndex | HBSJIndex)
            ix.retain(keep)
        first = int(keep[0]) if len(keep) else side.rows.end
        side.rows.evict_before(first)
        side.times = side.times[side.rows.start - side.times_base:]
        side.times_base = side.rows.start

    def drain_late(self) -> list[pa.RecordBatch]:
        out, self._late = self._late, []
        return out

    # -- state --------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Per side: null keys, late rows, window size now, and the index's statistics."""
        out: dict[str, Any] = {}
        for name, sid in (("left", self.spec.left), ("right", self.spec.right)):
            s = self.sides[sid]
            out[name] = {"null_keys": s.nulls, "late": s.late, "stored": int(len(s.index.live_seqs())),
                         "index": s.index.stats()[0]}
        return out

    def snapshot(self) -> Any:
        snap = {}
        for sid, s in self.sides.items():
            live = s.index.live_seqs()
            first = int(live[0]) if len(live) else s.rows.end
            snap[sid] = {
                "rows": s.rows.rows_from(first), "first": first, "end": s.rows.end, "live": live.copy(),
                "nulls": s.nulls, "late": s.late, "watermark": s.watermark,
                "times": s.times[first - s.times_base:].copy() if self.time is not None else None,
                "counters": s.index.counters(),
            }
        return snap

    def _restore(self, state: Any) -> None:
        for sid, st in state.items():
            s = self.sides.get(sid)
            if s is None:
                raise StateError(f"{self.spec.name}: snapshot has unknown stream id {sid}")
            s.rows = RowStore(s.schema, st["first"])
            rows: pa.Table = st["rows"]
            for b in rows.select(s.schema.names).to_batches():
                s.rows.append(b)
            if s.rows.end != st["end"]:
                s.rows.end = st["end"]
            s.nulls, s.late, s.watermark = st["nulls"], st["late"], st["watermark"]
            live = np.asarray(st["live"], np.int64)
            if len(live):
                keys, valid = s.encode(rows)
                off = live - st["first"]
                s.index.insert(live, keys[off][None, :], valid[off][None, :], expire=False)
            if st["times"] is not None:
                s.times, s.times_base = st["times"], st["first"]
            s.index.set_counters(st["counters"])

    def state_bytes(self) -> int:
        return sum(s.rows.nbytes() for s in self.sides.values())

    def retained_rows(self) -> int:
        """Rows both sides hold now (whole chunks: at least the live tuples)."""
        return sum(s.rows.end - s.rows.start for s in self.sides.values())


# --------------------------------------------------------------------------------------------
# whole arrival sequences (the `splice join` command): both streams interleaved in one call
# --------------------------------------------------------------------------------------------


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
    """Count-window join over a whole mixed arrival sequence, in chunks of ``chunk`` tuples.

    ``sides[i]`` is 0 (left) or 1 (right), ``keys``/``valid`` the tuple's key. Returns
    ``(arrival index, left seq, right seq)`` of every output row, in output order, and the
    indexes' statistics. ``seq`` numbers each side's tuples 0, 1, ... in arrival order.
    """
    if window < 1:
        raise PlanError(f"count window size must be >= 1, got {window}")
    sides = np.ascontiguousarray(sides, np.int8)
    keys = np.ascontiguousarray(keys, np.int64)
    valid = np.ascontiguousarray(valid, np.bool_)
    is_right = sides.astype(np.int64)
    nright = np.cumsum(is_right) - is_right
    seqs = np.where(sides == 0, np.arange(len(sides)) - nright, nright).astype(np.int64)

    pus: list[tuple[Any, Any]] = []
    for pu in range(parallel):
        if impl == "hbsj":
            pus.append((HBSJIndex(1, window, table_size, pu, parallel),
                        HBSJIndex(1, window, table_size, pu, parallel)))
        else:
            pus.append((FastIndex(1, window, pu, parallel, table_size),
                        FastIndex(1, window, pu, parallel, table_size)))

    def run(pu: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        li, ri = pus[pu]
        sl = slice(lo, hi)
        if isinstance(li, FastIndex) and isinstance(ri, FastIndex):
            for ix in (li, ri):  # the same capacity for both: the kernel takes one
                ix.reserve(seqs[sl])
        exp, ins = ring_positions(seqs[sl], window, li.cap, pu, parallel)
        n = hi - lo
        kbuf, vbuf = np.empty((1, 1), np.int64), np.empty((1, 1), np.bool_)
        if impl == "hbsj":
            assert isinstance(li, HBSJIndex) and isinstance(ri, HBSJIndex)
            buf, tmp = np.empty(li.cap + 4, np.int64), np.empty(li.cap + 4, np.int64)
            i, s = drain(hb_join_sequence, n, li.cap + 4, sides[sl], seqs[sl], keys[sl], valid[sl],
                         exp, ins, *li.arrays(), *ri.arrays(), buf, tmp, kbuf, vbuf)
        else:
            assert isinstance(li, FastIndex) and isinstance(ri, FastIndex)
            i, s = drain(fx_join_sequence, n, li.cap, sides[sl], seqs[sl], keys[sl], valid[sl],
                         exp, ins, *li.arrays(), *ri.arrays(), li.shift, kbuf, vbuf)
        return i + lo, s

    out_i, out_s = [], []
    pool = None
    if parallel > 1:
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(parallel)
    try:
        for lo in range(0, len(sides), chunk):
            hi = min(len(sides), lo + chunk)
            if pool is None:
                i, s = run(0, lo, hi)
            else:
                i, s = merge_matches(list(pool.map(lambda pu: run(pu, lo, hi), range(parallel))))  # noqa: B023
            out_i.append(i)
            out_s.append(s)
    finally:
        if pool is not None:
            pool.shutdown()
    ai = np.concatenate(out_i) if out_i else np.zeros(0, np.int64)
    ms = np.concatenate(out_s) if out_s else np.zeros(0, np.int64)
    from_left = sides[ai] == 0
    lseq = np.where(from_left, seqs[ai], ms)
    rseq = np.where(from_left, ms, seqs[ai])
    stats: dict[str, Any] = {
        "left": SplitIndex(lambda pu, _p: pus[pu][0], parallel).stats()[0],
        "right": SplitIndex(lambda pu, _p: pus[pu][1], parallel).stats()[0],
        "null_keys": int(len(valid) - valid.sum()),
    }
    return ai, lseq, rseq, stats


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
    """Time-window join over a whole mixed arrival sequence in which nothing is late.

    Pairs tuples of the two sides with equal keys and event times at most ``length`` apart,
    each pair emitted when its later tuple arrives (ordered by that arrival, then by the
    matched tuple's). ``time_sorted`` says the arrival follows event time: then each side's
    watermark trails its largest time by one, probes stop at the window's edge, and a tuple's
    slot is reused once the other side's watermark retired it, so the retained state stays
    bounded by the tuples of a window (:func:`~splice.joins._hash_kernels.fx_time_ring_sequence`;
    the ring starts at ``capacity`` slots per side and doubles when a slot to reuse still holds
    a live tuple). Without ``time_sorted`` there are no watermarks and every tuple is retained.
    ``impl="hbsj"`` runs HB-SJ instead (:func:`~splice.joins._hash_kernels.hb_time_sequence`):
    the same pairs in the same order, each side's ordered window a ring that expires its oldest
    tuples by watermark (tables of ``table_size`` slots, default twice the ring); its statistics
    come under ``stats["left"]``/``["right"]``. Returns ``(arrival index, left seq, right seq,
    stats)``; ``stats["capacity"]`` is the ring's final size in slots per side.
    """
    if length < 0:
        raise PlanError(f"time window length must be >= 0, got {length}")
    sides = np.ascontiguousarray(sides, np.int8)
    keys = np.ascontiguousarray(keys, np.int64)
    valid = np.ascontiguousarray(valid, np.bool_)
    times = np.ascontiguousarray(times, np.int64)
    n = len(sides)
    is_right = sides.astype(np.int64)
    nright = np.cumsum(is_right) - is_right
    seqs = np.where(sides == 0, np.arange(n) - nright, nright).astype(np.int64)
    if impl == "hbsj":
        return _hb_time_join(sides, seqs, keys, valid, times, int(length), bool(time_sorted),
                             _next_pow2(max(16, capacity)), table_size)
    if impl != "fast":
        raise PlanError(f"unknown hash join implementation {impl!r} (choose {', '.join(get_args(Impl))})")
    ring = _TimeRing(_next_pow2(max(16, capacity)))
    maxt = np.full(2, NO_TIME, np.int64)
    parts_i: list[np.ndarray] = []
    parts_s: list[np.ndarray] = []
    start, grows = 0, 0
    while start < n or not parts_i:
        size = max(2 * ring.cap + 16, min(2 * (n - start) + 16, 1 << 22))
        out_i, out_s = np.empty(size, np.int64), np.empty(size, np.int64)
        w, start, grow = fx_time_ring_sequence(
            sides, seqs, keys, valid, times, int(length), bool(time_sorted),
            ring.seq, ring.key, ring.val, ring.time, ring.nxt, ring.head, maxt, ring.shift,
            start, out_i, out_s)
        parts_i.append(out_i[:w])
        parts_s.append(out_s[:w])
        if grow:
            ring.grow()
            grows += 1
    ai, ms = np.concatenate(parts_i), np.concatenate(parts_s)
    from_left = sides[ai] == 0
    stats = {"capacity": ring.cap, "grows": grows, "retained": ring.retained(),
             "null_keys": int(len(valid) - valid.sum())}
    return ai, np.where(from_left, seqs[ai], ms), np.where(from_left, ms, seqs[ai]), stats


def _hb_time_join(sides: np.ndarray, seqs: np.ndarray, keys: np.ndarray, valid: np.ndarray, times: np.ndarray,
                  length: int, time_sorted: bool, cap: int, table_size: int | None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """:func:`time_join_sequence` with HB-SJ rings (see there)."""
    n = len(sides)
    ix = [HBSJIndex(1, cap, table_size), HBSJIndex(1, cap, table_size)]
    rtime = np.zeros((2, cap), np.int64)
    lo = np.zeros(2, np.int64)
    maxt = np.full(2, NO_TIME, np.int64)
    kbuf, vbuf = np.empty((1, 1), np.int64), np.empty((1, 1), np.bool_)
    parts_i: list[np.ndarray] = []
    parts_s: list[np.ndarray] = []
    start, grows = 0, 0
    while start < n or not parts_i:
        size = max(2 * cap + 24, min(2 * (n - start) + 16, 1 << 22))
        out_i, out_s = np.empty(size, np.int64), np.empty(size, np.int64)
        buf, tmp = np.empty(cap + 4, np.int64), np.empty(cap + 4, np.int64)
        w, start, grow = hb_time_sequence(
            sides, seqs, keys, valid, times, length, time_sorted, *ix[0].arrays(), *ix[1].arrays(),
            rtime, lo, maxt, buf, tmp, kbuf, vbuf, start, out_i, out_s)
        parts_i.append(out_i[:w])
        parts_s.append(out_s[:w])
        if grow:
            cap *= 2
            moved = np.zeros((2, cap), np.int64)
            for side in range(2):
                live = ix[side].live_seqs()
                moved[side, live & (cap - 1)] = rtime[side, live & (cap // 2 - 1)]
                ix[side] = ix[side].resized(cap)
            rtime = moved
            grows += 1
    ai, ms = np.concatenate(parts_i), np.concatenate(parts_s)
    from_left = sides[ai] == 0
    stats = {"capacity": cap, "grows": grows, "retained": int(sum(len(x.live_seqs()) for x in ix)),
             "null_keys": int(len(valid) - valid.sum()), "left": ix[0].stats()[0], "right": ix[1].stats()[0]}
    return ai, np.where(from_left, seqs[ai], ms), np.where(from_left, ms, seqs[ai]), stats


class _TimeRing:
    """Both sides' rings of :func:`time_join_sequence` (``cap`` slots each, a power of two)."""

    def __init__(self, cap: int) -> None:
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

    def grow(self) -> None:
        """Double the ring: tuples move to ``seq & (2 cap - 1)``, chains are relinked."""
        old = (self.seq, self.key, self.val, self.time)
        self._alloc(2 * self.cap)
        for side in range(2):
            occ = np.flatnonzero(old[0][side] >= 0)
            sq = old[0][side][occ]
            pos = sq & (self.cap - 1)
            self.seq[side, pos] = sq
            self.key[side, pos] = old[1][side][occ]
            self.val[side, pos] = old[2][side][occ]
            self.time[side, pos] = old[3][side][occ]
            order = pos[np.argsort(sq, kind="stable")]
            fx_ring_relink(self.seq[side], self.key[side], self.val[side], self.nxt[side], self.head[side],
                           self.shift, order)

    def retained(self) -> int:
        return int((self.seq >= 0).sum())
