"""Multiway stream join over count windows: Circular-MJ generalized (Diba section 5.2.1).

Semantics. Streams ``X_1 .. X_N`` each keep a count window of their last ``w`` tuples (or all of
them when ``window is None``). Equi-predicates ``X_a.c = X_b.d`` connect them (nulls never
match; a tuple with a null join column is counted per stream). An arriving tuple x of stream X
is processed as::

    emit { (x, t_1, ..) : t_j in W_j for every other stream j, all predicates hold }
    expire the oldest tuple of W_X (when it holds w)  ->  insert x into W_X

Algorithm. One stage per stream window, as in Circular-MJ: the stage of X stores and expires
X's tuples, the other N-1 stages probe. The probe order is planned once per arriving stream:
starting from X, each next stage is the first stream (in declaration order) joined by a
predicate to a stream already bound, probed through its index on that predicate's column; the
remaining predicates between bound streams filter the intermediate results. A stream joined on
several columns keeps one window indexed on each of them: TPC-H Q3's orders stage indexes
``o_custkey`` and ``o_orderkey`` in one stage (Diba Fig. 13(b)). Within a batch of one stream
the other windows do not change, so a batch probes each stage with one vectorized kernel call.

Keys. Join columns may be of any hashable Arrow type (:mod:`splice.joins.common.hash_keys`). Columns
that predicates tie together (``a.x = b.y``, ``b.y = c.z``) form one key
(:func:`key_classes`): they must agree or cast safely to one type, and one codec turns their
values into ``int64`` codes, so the indexes and kernels are those of the two-way join. One
integer-like column is its own code (exact); strings, decimals, binaries are hashed, and every
result whose predicates compare hashed codes is checked for real key equality (Arrow ``equal``
on the gathered columns) before it is emitted, so distinct keys never match.

Output: every stream's columns in declaration order (``_right`` suffixes on taken names), rows
grouped by arriving tuple in arrival order.

:func:`q3_stream_join` is the Q3 customization over a whole mixed arrival sequence in one
numba kernel (fast index or HB-SJ stages), aggregating revenue as it joins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np
import pyarrow as pa

from splice.core.errors import PlanError, SchemaError, StateError
from splice.core.operator import InputSchemas, OperatorLogic, OperatorSpec
from splice.joins.common.join_windows import RowStore
from splice.joins.common.key_codec import KeyCodec, common_key_type, common_key_types
from splice.joins.hash._hash_kernels import (
    InsertBuffer,
    OrderRevenue,
    ProbeBuffers,
    Q3KeyColumns,
    Q3Stages,
    q3_hbsj_sequence,
)
from splice.joins.hash.hash_window_join import Impl, make_index
from splice.joins.hash.hbsj import HBSJIndex
from splice.joins.hash.splitjoin import HashIndex
from splice.joins.multiway._q3_kernels import (
    EXPLICIT,
    Q3Arrival,
    RevenueWords,
    StageChains,
    new_cursor,
    partition_arrival,
    q3_join_arrival,
)
from splice.kernels.jit import kernel_input
from splice.kernels.team import ThreadTeam

__all__ = ["MultiwayJoin", "equi_join", "keyed_join", "Predicate", "key_classes", "plan_probe_order", "q3_stream_join", "q3_partitioned_join", "Q3FastJoin"]

#: ``(stream a, column of a, stream b, column of b)``: ``a.column == b.column``.
Predicate = tuple[int, str, int, str]


def plan_probe_order(streams: tuple[int, ...], predicates: tuple[Predicate, ...], start: int
                     ) -> list[tuple[int, str, int, str, list[Predicate]]]:
    """Stages for a tuple of ``start``: (stream, its column, bound stream, bound column, filters)."""
    bound = [start]
    steps = []
    while len(bound) < len(streams):
        step = None
        for y in streams:
            if y in bound:
                continue
            for a, ca, b, cb in predicates:
                if a == y and b in bound:
                    step = (y, ca, b, cb)
                elif b == y and a in bound:
                    step = (y, cb, a, ca)
                if step:
                    break
            if step:
                break
        if step is None:
            missing = [s for s in streams if s not in bound]
            raise PlanError(f"multiway join: streams {missing} are not connected to stream {start} "
                            "by any predicate (cross products are not supported)")
        y = step[0]
        used = (step[0], step[1], step[2], step[3])
        filters = []
        for p in predicates:
            a, ca, b, cb = p
            others = {a, b} - {y}
            if y in (a, b) and others and others <= set(bound) and (a, ca, b, cb) not in (
                used, (step[2], step[3], step[0], step[1])):
                filters.append(p)
        bound.append(y)
        steps.append((y, step[1], step[2], step[3], filters))
    return steps


def key_classes(predicates: tuple[Predicate, ...]) -> dict[tuple[int, str], int]:
    """Number the join keys: ``(stream, column)`` pairs that predicates tie together share a class.

    ``a.x = b.y`` and ``b.y = c.z`` put ``x``, ``y`` and ``z`` in one class: they are one key,
    encoded with one type and one codec, so equal values get equal codes on every stream.
    """
    parent: dict[tuple[int, str], tuple[int, str]] = {}

    def find(x: tuple[int, str]) -> tuple[int, str]:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, ca, b, cb in predicates:
        ra, rb = find((a, ca)), find((b, cb))
        if ra != rb:
            parent[rb] = ra
    roots: dict[tuple[int, str], int] = {}
    out = {}
    for x in parent:
        out[x] = roots.setdefault(find(x), len(roots))
    return out


@dataclass(frozen=True)
class MultiwayJoin(OperatorSpec):
    """N-way count-window equi-join of ``streams`` (ids) under ``predicates`` (see module doc).

    Keys are columns of any hashable Arrow type (integers, strings, binaries, dates, timestamps,
    decimals, booleans, ...; :mod:`splice.joins.common.hash_keys`); the columns that predicates tie
    together must agree or cast safely to one type. A tuple with a null in any of its join
    columns never matches; :meth:`stats` counts them per stream (``null_keys``).
    """

    streams: tuple[int, ...]
    predicates: tuple[Predicate, ...]
    window: int | None
    impl: Impl = "fast"
    table_size: int | None = None
    name: str = "multiway_join"
    attrs: dict[int, tuple[str, ...]] = field(init=False, compare=False, repr=False)
    classes: dict[tuple[int, str], int] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if len(set(self.streams)) != len(self.streams) or len(self.streams) < 2:
            raise PlanError(f"{self.name}: needs two or more distinct streams, got {self.streams}")
        if self.window is not None and (isinstance(self.window, bool) or self.window < 1):
            raise PlanError(f"{self.name}: count window size must be >= 1, got {self.window}")
        if self.impl not in get_args(Impl):
            raise PlanError(f"{self.name}: unknown impl {self.impl!r} (choose {', '.join(get_args(Impl))})")
        if self.impl == "hbsj" and self.window is None:
            raise PlanError(f"{self.name}: HB-SJ stages need a count window")
        if self.table_size is not None and self.table_size < 1:
            raise PlanError(f"{self.name}: table_size must be >= 1, got {self.table_size}")
        attrs: dict[int, list[str]] = {s: [] for s in self.streams}
        for a, ca, b, cb in self.predicates:
            for s in (a, b):
                if s not in attrs:
                    raise PlanError(f"{self.name}: predicate names unknown stream id {s} "
                                    f"(streams: {', '.join(map(str, self.streams))})")
            if a == b:
                raise PlanError(f"{self.name}: predicate {a}.{ca} = {b}.{cb} compares a stream with itself")
            for s, c in ((a, ca), (b, cb)):
                if c not in attrs[s]:
                    attrs[s].append(c)
        object.__setattr__(self, "attrs", {s: tuple(v) for s, v in attrs.items()})
        object.__setattr__(self, "classes", key_classes(self.predicates))
        for s in self.streams:
            plan_probe_order(self.streams, self.predicates, s)

    def key_types(self, inputs: InputSchemas) -> dict[int, pa.DataType]:
        """The common type of each key class (see :func:`key_classes`), else SchemaError."""
        for s in self.streams:
            if s not in inputs:
                raise PlanError(f"{self.name}: unknown stream id {s} (inputs: {', '.join(map(str, sorted(inputs)))})")
        members: dict[int, list[tuple[str, str, pa.DataType]]] = {}
        for (s, c), k in self.classes.items():
            if c not in inputs[s].names:
                raise SchemaError(f"{self.name}: stream {s} has no key column {c!r} "
                                  f"(columns: {', '.join(inputs[s].names)})")
            members.setdefault(k, []).append((str(s), c, inputs[s].field(c).type))
        for a, ca, b, cb in self.predicates:  # the clash of one predicate, named first
            common_key_types(inputs[a], inputs[b], [ca], [cb], str(a), str(b), self.name)
        return {k: common_key_type(m, self.name) for k, m in members.items()}

    def columns_used(self, inputs: InputSchemas) -> dict[int, set[str]]:
        """The join columns of each stream; other columns pass through to the output."""
        return {s: set(self.attrs[s]) for s in self.streams if s in inputs}

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        self.key_types(inputs)
        taken: set[str] = set()
        fields = []
        for s in self.streams:
            for f in inputs[s]:
                n = f.name
                while n in taken:
                    n += "_right"
                taken.add(n)
                fields.append(pa.field(n, f.type, f.nullable))
        return pa.schema(fields)

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        return _MultiwayLogic(self, inputs, state)


def equi_join(left: int, right: int, on: tuple[str, ...], right_on: tuple[str, ...],
              window: int | None = None, name: str = "equi_join") -> MultiwayJoin:
    """The inner equi-join ``left.on[i] = right.on[i]`` of two streams as a two-way
    :class:`MultiwayJoin`: over all their tuples (``window=None``, for finite inputs) or over a
    count window of each stream's last ``window`` tuples."""
    if len(on) != len(right_on) or not on:
        raise PlanError(f"{name}: need the same non-zero number of key columns per side, "
                        f"got {list(on)} and {list(right_on)}")
    return MultiwayJoin((left, right), tuple((left, a, right, b) for a, b in zip(on, right_on, strict=True)),
                        window, name=name)


def keyed_join(predicates: tuple[tuple[int, str, int, str], ...], window: int | None,
               impl: Impl = "fast", name: str = "equi_join", **inputs: int) -> MultiwayJoin:
    """The inner equi-join of the streams ``inputs`` (``in0``, ``in1``, ... by position: their
    ids, known at deployment) under ``predicates`` that name inputs by position, as one
    :class:`MultiwayJoin` over count windows of ``window`` tuples. The factory that SQL's plans
    bind (:class:`~splice.core.plan.BindInputs`) when several streams share a key."""
    ids = [inputs[f"in{i}"] for i in range(len(inputs))]
    return MultiwayJoin(tuple(ids), tuple((ids[a], ca, ids[b], cb) for a, ca, b, cb in predicates),
                        window, impl, name=name)


class _Stage:
    """One stream's window: its rows, its index on each join column, the columns' key codes."""

    def __init__(self, spec: MultiwayJoin, sid: int, schema: pa.Schema, codecs: dict[int, KeyCodec]) -> None:
        self.sid, self.schema = sid, schema
        self.attrs = spec.attrs[sid]
        self.col = {c: i for i, c in enumerate(self.attrs)}
        self.codecs = [codecs[spec.classes[(sid, c)]] for c in self.attrs]
        self.index: HashIndex = make_index(spec.impl, max(1, len(self.attrs)), spec.window, 1, spec.table_size)
        self.rows = RowStore(schema)
        self._codes = np.zeros((len(self.attrs), 0), np.int64)
        self._flags = np.zeros((len(self.attrs), 0), np.bool_)
        self.keys = self._codes  # the held rows' codes, by seq - keys_base
        self.valid = self._flags
        self.keys_base = 0
        self.nulls = 0

    def encode(self, rows: pa.RecordBatch | pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """``(codes, valid)`` of every join column, shape ``(columns, rows)``."""
        kv = [hk.encode([rows.column(c)], str(self.sid), [c]) for c, hk in zip(self.attrs, self.codecs, strict=True)]
        if not kv:
            return np.zeros((1, rows.num_rows), np.int64), np.zeros((1, rows.num_rows), np.bool_)
        ones = np.ones(rows.num_rows, np.bool_)
        return np.stack([x[0] for x in kv]), np.stack([ones if x[1] is None else x[1] for x in kv])

    def append(self, batch: pa.RecordBatch, k: np.ndarray, v: np.ndarray, window: int | None) -> None:
        first = self.rows.append(batch)
        seqs = np.arange(first, first + batch.num_rows, dtype=np.int64)
        self.index.insert(seqs, k, v)
        if window is not None:
            self.rows.evict_before(self.rows.end - window)
        start = self.rows.start
        drop = start - self.keys_base
        held = self.keys.shape[1] - drop
        need = held + batch.num_rows
        cap = self._codes.shape[1]
        if drop or need > cap:
            # the codes live in a buffer that at least doubles when it fills, so a window that
            # keeps every row (window=None) copies each code O(1) times, not once per batch
            size = max(need, 2 * cap) if need > cap else cap
            codes = np.empty((len(self.attrs), size), np.int64)
            flags = np.empty((len(self.attrs), size), np.bool_)
            codes[:, :held] = self.keys[:, drop:]
            flags[:, :held] = self.valid[:, drop:]
            self._codes, self._flags = codes, flags
        self._codes[:, held:need] = k[: len(self.attrs)]
        self._flags[:, held:need] = v[: len(self.attrs)]
        self.keys, self.valid = self._codes[:, :need], self._flags[:, :need]
        self.keys_base = start

    def key_of(self, col: str, seqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a = self.col[col]
        off = seqs - self.keys_base
        return self.keys[a, off], self.valid[a, off]


class _MultiwayLogic(OperatorLogic):
    def __init__(self, spec: MultiwayJoin, inputs: InputSchemas, state: Any) -> None:
        self.spec = spec
        self.schema = spec.output_schema(inputs)
        types = spec.key_types(inputs)
        codecs = {k: KeyCodec([t]) for k, t in types.items()}
        self.stages = {s: _Stage(spec, s, inputs[s], codecs) for s in spec.streams}
        self.plans = {s: plan_probe_order(spec.streams, spec.predicates, s) for s in spec.streams}
        # predicates whose codes are hashed: matches are checked for real key equality
        self.checked = [(p, codecs[spec.classes[(p[0], p[1])]]) for p in spec.predicates
                        if not codecs[spec.classes[(p[0], p[1])]].exact]
        self.results = 0
        if state is not None:
            self._restore(state)

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        me = self.stages.get(stream_id)
        if me is None:
            raise PlanError(f"{self.spec.name}: unknown stream id {stream_id} "
                            f"(inputs: {', '.join(map(str, self.spec.streams))})")
        if batch.num_rows == 0:
            return []
        if batch.schema.names != me.schema.names:
            batch = batch.select(me.schema.names)
        own_k, own_v = me.encode(batch)
        me.nulls += int(batch.num_rows - np.count_nonzero(own_v.all(axis=0)))
        cur: dict[int, np.ndarray] = {stream_id: np.arange(batch.num_rows, dtype=np.int64)}

        def key(s: int, c: str) -> tuple[np.ndarray, np.ndarray]:
            if s == stream_id:
                a = me.col[c]
                return own_k[a, cur[s]], own_v[a, cur[s]]
            return self.stages[s].key_of(c, cur[s])

        for y, ycol, b, bcol, filters in self.plans[stream_id]:
            pk, pv = key(b, bcol)
            ii, ys = self.stages[y].index.probe(self.stages[y].col[ycol], pk, pv)
            cur = {s: v[ii] for s, v in cur.items()}
            cur[y] = ys
            for a, ca, bb, cb in filters:
                ka, va = key(a, ca)
                kb, vb = key(bb, cb)
                ok = va & vb & (ka == kb)
                cur = {s: v[ok] for s, v in cur.items()}
            if len(ys) == 0:
                break
        out: list[pa.RecordBatch] = []
        n = len(cur[stream_id]) if len(cur) == len(self.stages) else 0
        if n:
            parts = {s: batch.take(pa.array(cur[s])) if s == stream_id else self.stages[s].rows.take(cur[s])
                     for s in self.spec.streams}
            if self.checked:
                parts = self._equal_keys(parts)
            if parts[stream_id].num_rows:
                cols: list[pa.Array] = []
                for s in self.spec.streams:
                    for c in parts[s].columns:
                        cols.append(c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c)
                out.append(pa.RecordBatch.from_arrays(cols, schema=self.schema))
                self.results += out[0].num_rows
        me.append(batch, own_k, own_v, self.spec.window)
        return out

    def _equal_keys(self, parts: dict[int, Any]) -> dict[int, Any]:
        """Candidates of hashed keys (equal codes) kept only where the keys are really equal."""
        eq: np.ndarray | None = None
        for (a, ca, b, cb), hk in self.checked:
            e = hk.equal([parts[a].column(ca)], [parts[b].column(cb)], str(a), str(b), [ca], [cb])
            eq = e if eq is None else eq & e
        if eq is None or eq.all():
            return parts
        m = pa.array(eq)
        return {s: t.filter(m) for s, t in parts.items()}

    def snapshot(self) -> Any:
        snap: dict[str, Any] = {"results": self.results, "stages": {}}
        for s, st in self.stages.items():
            live = st.index.live_seqs()
            first = int(live[0]) if len(live) else st.rows.end
            snap["stages"][s] = {"rows": st.rows.rows_from(first), "first": first, "end": st.rows.end,
                                 "live": live.copy(), "counters": st.index.counters(), "nulls": st.nulls}
        return snap

    def _restore(self, state: Any) -> None:
        self.results = state["results"]
        for s, sn in state["stages"].items():
            st = self.stages.get(s)
            if st is None:
                raise StateError(f"{self.spec.name}: snapshot has unknown stream id {s}")
            st.rows = RowStore(st.schema, sn["first"])
            rows: pa.Table = sn["rows"].select(st.schema.names)
            for b in rows.to_batches():
                st.rows.append(b)
            st.rows.end = sn["end"]
            k, v = st.encode(rows)
            st.keys, st.valid, st.keys_base = k[: len(st.attrs)], v[: len(st.attrs)], sn["first"]
            st._codes, st._flags = st.keys, st.valid
            st.nulls = int(sn.get("nulls", 0))
            live = np.asarray(sn["live"], np.int64)
            if len(live):
                off = live - sn["first"]
                st.index.insert(live, k[:, off], v[:, off], expire=False)
            st.index.set_counters(sn["counters"])

    def stats(self) -> dict[str, Any]:
        """Join results, per stream the tuples with a null join key, per stage the index's statistics."""
        return {"results": self.results,
                "null_keys": {s: st.nulls for s, st in self.stages.items()},
                "stages": {s: st.index.stats() for s, st in self.stages.items()}}

    def state_bytes(self) -> int:
        return sum(st.rows.nbytes() + st.keys.nbytes for st in self.stages.values())


# --------------------------------------------------------------------------------------------
# the Q3 customization over a whole arrival sequence
# --------------------------------------------------------------------------------------------


class Q3FastJoin:
    """Q3's join with fast-index stages over the raw arrival of the three tables, advanced in
    steps, its whole state in arrays (so a run can be checkpointed between steps).

    ``mode`` is an arrival mode of :mod:`splice.joins.multiway._q3_kernels` (``EXPLICIT`` reads
    ``arrival`` = (table, raw row) arrays); ``masks`` are the selections over raw rows, ``keys``
    c_custkey, o_orderkey, o_custkey, l_orderkey over raw rows and ``valid`` their validity (None:
    no nulls; a null key takes its window position and joins nothing), ``words`` the (low, high)
    words of l_extendedprice and l_discount and the unscaled 1. ``agg_rev``/``agg_hit``: revenue
    and whether a result exists, per raw orders row (``agg``: arrays to share).

    ``stored``: how many tuples each stage will hold (default: the rows each mask passes).
    """

    def __init__(
        self,
        mode: int,
        n_raw: tuple[int, int, int],
        masks: tuple[np.ndarray, np.ndarray, np.ndarray],
        keys: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
        valid: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None,
        words: tuple[np.ndarray, np.ndarray, int],
        window: int | None,
        table_size: int | None = None,
        arrival: tuple[np.ndarray, np.ndarray] | None = None,
        agg: tuple[np.ndarray, np.ndarray] | None = None,
        stored: tuple[int, int, int] | None = None,
    ):
        passed = list(stored) if stored is not None else [int(np.count_nonzero(m)) for m in masks]
        wins = [window if window is not None else max(1, n) for n in passed]
        chains = []
        for n_attrs, w in zip((1, 2, 1), wins, strict=True):
            # 2 w buckets for a window, one per tuple when unbounded; int32 positions (halves the
            # memory a probe touches: unbounded stages hold whole streams)
            nb = table_size or max(16, 2 * w if window is not None else w)
            nb = 1 << (nb - 1).bit_length()
            tail = np.full((n_attrs, nb if window is not None else 1), -1, np.int32)
            chains.append(StageChains(np.full(w, -1, np.int32), np.zeros((n_attrs, w), np.int64),
                                      np.full((n_attrs, w), -1, np.int32), np.full((n_attrs, nb), -1, np.int32),
                                      tail, 64 - (nb.bit_length() - 1)))
        #: the three stages' chains, as the kernel takes them (updated in place)
        self.chains: Q3Stages[StageChains] = Q3Stages(*chains)
        #: the stages' arrays, in a fixed order (what a snapshot holds)
        self.stages: list[np.ndarray] = [a for c in chains for a in c[:5]]
        if agg is None:
            agg = (np.zeros(n_raw[1], np.int64), np.zeros(n_raw[1], np.bool_))
        self.agg = OrderRevenue(*agg)
        self.agg_rev: np.ndarray = self.agg.revenue
        self.agg_hit: np.ndarray = self.agg.hit
        self.cursor = new_cursor()
        self.mode = mode
        sides, rows = arrival if arrival is not None else (np.zeros(0, np.int8), np.zeros(0, np.int64))
        self.arrival = Q3Arrival(mode, np.array(n_raw, np.int64), np.ascontiguousarray(sides, np.int8),
                                 np.ascontiguousarray(rows, np.int64))
        if valid is None:
            valid = (np.ones(n_raw[0], np.bool_), *(np.ones(n_raw[1], np.bool_),) * 2, np.ones(n_raw[2], np.bool_))
        self.passes = Q3Stages(*masks)
        self.keys = Q3KeyColumns(*(kernel_input(k, np.int64) for k in keys), *valid)
        self.words = RevenueWords(*words)
        self.lifo = window is None

    def step(self, n: int) -> bool:
        """Process up to ``n`` raw arrivals; whether the arrival is exhausted."""
        return bool(q3_join_arrival(n, self.cursor, self.arrival, self.passes, self.keys, self.words,
                                    self.chains, self.agg, self.lifo))

    def run(self, batch_size: int = 65_536) -> None:
        """Process the rest of the arrival, ``batch_size`` raw arrivals per kernel call."""
        while not self.step(batch_size):
            pass

    @property
    def consumed(self) -> int:
        """Raw arrivals processed so far."""
        return int(self.cursor[0] + self.cursor[1] + self.cursor[2]) if self.mode != EXPLICIT else int(self.cursor[11])

    @property
    def results(self) -> int:
        return int(self.cursor[9])

    @property
    def fits(self) -> bool:
        """Whether every revenue so far fit 63 bits."""
        return bool(self.cursor[10])

    def state_bytes(self) -> int:
        return sum(a.nbytes for a in self.stages) + self.agg_rev.nbytes + self.agg_hit.nbytes + self.cursor.nbytes

    def snapshot(self) -> dict[str, Any]:
        """The cursor, the stages' arrays and the revenue of the orders that have results
        (copies)."""
        hit = np.flatnonzero(self.agg_hit)
        return {"cursor": self.cursor.copy(), "stages": [a.copy() for a in self.stages],
                "hit": hit, "revenue": self.agg_rev[hit]}

    def restore(self, state: dict[str, Any]) -> None:
        """Load a :meth:`snapshot` of a join over the same inputs and parameters."""
        try:
            stages = state["stages"]
            if len(stages) != len(self.stages) or any(
                    a.shape != b.shape or a.dtype != b.dtype for a, b in zip(stages, self.stages, strict=True)):
                raise ValueError("stage arrays differ in shape (another window, table size or input)")
            for mine, saved in zip(self.stages, stages, strict=True):
                mine[...] = saved
            self.cursor[:] = state["cursor"]
            self.agg_rev[:] = 0
            self.agg_hit[:] = False
            self.agg_rev[state["hit"]] = state["revenue"]
            self.agg_hit[state["hit"]] = True
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise StateError(f"Q3: cannot restore the join from the checkpoint: {exc}") from exc


def q3_partitioned_join(
    mode: int,
    n_raw: tuple[int, int, int],
    masks: tuple[np.ndarray, np.ndarray, np.ndarray],
    keys: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    valid: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None,
    words: tuple[np.ndarray, np.ndarray, int],
    n_parts: int,
    batch_size: int = 65_536,
) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """Q3's join with unbounded stages on ``n_parts`` threads: thread ``p`` joins the orders and
    lineitems of partition ``p`` of the order key and every customer (SplitJoin's store-a-share,
    by key), in their arrival order (:func:`~splice.joins.multiway._q3_kernels.partition_arrival`). Same
    results as one :class:`Q3FastJoin` with ``window=None``."""
    okeys = np.ascontiguousarray(keys[1], np.int64)
    lkeys = np.ascontiguousarray(keys[3], np.int64)
    n = np.array(n_raw, np.int64)
    agg = (np.zeros(n_raw[1], np.int64), np.zeros(n_raw[1], np.bool_))

    def one(p: int) -> Q3FastJoin:
        sides, rows = partition_arrival(mode, n, *masks, okeys, lkeys, p, n_parts)
        stored = tuple(int(np.count_nonzero(sides == t)) for t in range(3))
        join = Q3FastJoin(EXPLICIT, n_raw, masks, (keys[0], okeys, keys[2], lkeys), valid, words, None,
                          arrival=(sides, rows), agg=agg, stored=stored)  # type: ignore[arg-type]
        join.run(batch_size)
        return join

    with ThreadTeam(n_parts, "splice-q3") as team:
        joins = team.run(one)
    return agg[0], agg[1], sum(j.results for j in joins), all(j.fits for j in joins)


def q3_stream_join(
    sides: np.ndarray,
    rows: np.ndarray,
    c_custkey: np.ndarray,
    o_orderkey: np.ndarray,
    o_custkey: np.ndarray,
    l_orderkey: np.ndarray,
    l_revenue: np.ndarray,
    window: int | None,
    impl: Literal["fast", "hbsj"] = "fast",
    table_size: int | None = None,
    batch_size: int = 65_536,
    valid: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Q3's join (customer, orders, lineitem) and revenue sum per order over a mixed sequence.

    ``sides[i]`` is 0/1/2 (customer/orders/lineitem) and ``rows[i]`` the row of that (already
    filtered) stream; each stream's rows must arrive in row order (the row is its sequence
    number). Returns (revenue per orders row, whether the row has a result, statistics).
    ``window=None`` is unbounded (each stage holds its whole stream). ``valid``: the validity of
    c_custkey, o_orderkey, o_custkey, l_orderkey (None: no nulls).
    """
    nc, no, nl = len(c_custkey), len(o_orderkey), len(l_orderkey)
    if window is not None and window < 1:
        raise PlanError(f"Q3: count window size must be >= 1, got {window}")
    if impl == "hbsj" and window is None:
        raise PlanError("Q3: HB-SJ stages need a count window")
    if impl == "fast":
        n = len(sides)
        ones = [np.ones(k, np.bool_) for k in (nc, no, nl)]
        rev = np.ascontiguousarray(l_revenue, np.int64)
        ep = np.stack([rev, rev >> 63], axis=1)
        join = Q3FastJoin(EXPLICIT, (nc, no, nl), (ones[0], ones[1], ones[2]),
                          (c_custkey, o_orderkey, o_custkey, l_orderkey), valid,
                          (ep, np.zeros((nl, 2), np.int64), 1), window, table_size, (sides, rows))
        join.run(batch_size or max(1, n))
        return join.agg_rev, join.agg_hit, {"join_results": join.results}
    windows = Q3Stages(*(window if window is not None else max(1, n) for n in (nc, no, nl)))
    hb = Q3Stages(HBSJIndex(1, windows.customer, table_size), HBSJIndex(2, windows.orders, table_size),
                  HBSJIndex(1, windows.lineitem, table_size))
    agg = OrderRevenue(np.zeros(no, np.int64), np.zeros(no, np.bool_))
    merge = np.empty(max(h.cap for h in hb) + 4, np.int64)  # one probe merges at a time
    scratch = Q3Stages(*(ProbeBuffers(np.empty(h.cap + 4, np.int64), merge) for h in hb))
    one_key = InsertBuffer(np.empty((1, 1), np.int64), np.ones((1, 1), np.bool_))
    insert_bufs = Q3Stages(one_key, InsertBuffer(np.empty((2, 1), np.int64), np.ones((2, 1), np.bool_)), one_key)
    stages = Q3Stages(hb.customer.arrays, hb.orders.arrays, hb.lineitem.arrays)
    results = 0
    sides = np.ascontiguousarray(sides, np.int8)
    rows = np.ascontiguousarray(rows, np.int64)
    if valid is None:
        valid = (np.ones(nc, np.bool_), *(np.ones(no, np.bool_),) * 2, np.ones(nl, np.bool_))
    keys = Q3KeyColumns(*(np.ascontiguousarray(a, np.int64) for a in (c_custkey, o_orderkey, o_custkey, l_orderkey)),
                        *valid)
    l_rev = np.ascontiguousarray(l_revenue, np.int64)
    for lo in range(0, len(sides), batch_size):
        hi = lo + batch_size
        results += q3_hbsj_sequence(sides[lo:hi], rows[lo:hi], windows, keys, l_rev, stages, agg, scratch,
                                    insert_bufs)
    agg_rev, agg_hit = agg
    c, o, li = (h.stats() for h in hb)
    stats = {"join_results": int(results),
             "hbsj": {"c_custkey": c[0], "o_custkey": o[0], "o_orderkey": o[1], "l_orderkey": li[0]}}
    return agg_rev, agg_hit, stats
