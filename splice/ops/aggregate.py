"""Aggregation-GroupBy: ``SELECT keys, f(x), ... GROUP BY keys`` over a stream, answered at END.

Semantics (SQL's): rows are grouped by equal key tuples; a null key is a value of its own, so all
rows whose key is null form one group. ``count(*)`` counts rows; ``count(x)`` counts non-null x;
``sum``, ``avg``, ``min`` and ``max`` skip nulls and are null for a group without a non-null
input. Over no keys the aggregate is global: one row, even for an empty input. Groups come out in
the order they were first seen.

Result types follow DuckDB: ``sum`` of ``decimal(p, s)`` is ``decimal(38, s)``, exact; ``sum`` of
integers is ``int64`` (an overflow raises) and of floats ``float64``; ``avg`` is ``float64``,
computed as DuckDB does (the exact sum rounded to a double, divided by the count); ``min`` and
``max`` keep the input type; ``count`` is ``int64``.

Algorithm: each batch maps its rows to dense group ids with an open-addressing hash table over
the key columns' int64 codes (integers and temporal values code as themselves; strings, decimals
and other types are interned per distinct batch value), then numba kernels fold the rows into
per-group state: two ``int64`` limbs per exact sum (``hi * 2**32 + lo``, exact up to 2**94),
counts, and running minima/maxima. Aggregate inputs may be arithmetic expressions
(:mod:`splice.ops.arithmetic`), computed exactly as scaled integers. State grows with the number
of groups, not rows; ``snapshot()`` copies it.

>>> import pyarrow as pa
>>> from splice.testing import OperatorHarness
>>> spec = GroupBy(["k"], [Agg("n", "count"), Agg("total", "sum", "x * 2")])
>>> h = OperatorHarness(spec, {2: pa.schema([("k", pa.string()), ("x", pa.int64())])})
>>> _ = h.push(2, pa.record_batch({"k": ["a", None, "a"], "x": [1, 2, None]}))
>>> h.end().to_pydict()
{'k': ['a', None], 'n': [2, 1], 'total': [2, 4]}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from splice.core.errors import PlanError, SchemaError, StateError
from splice.core.operator import InputSchemas, OperatorLogic, OperatorSpec
from splice.ops import _agg_kernels as K
from splice.ops.arithmetic import Arith, Column, Values, ValueType, as_arith, leaf_type

__all__ = ["Agg", "AggFunc", "GroupBy", "GroupAggregator", "AggPlan", "plan_aggregates"]

AggFunc = Literal["count", "sum", "avg", "min", "max"]

_EMPTY_BOOL = np.zeros(0, dtype=np.bool_)
_I64_MIN = np.iinfo(np.int64).min
_I64_MAX = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Agg:
    """One aggregate: output column ``name`` = ``func`` over ``input``.

    ``input`` is a column name, an expression (text such as ``"l_extendedprice * (1 -
    l_discount)"``, an :class:`~splice.ops.arithmetic.Arith`, or a ``pyarrow.compute``
    arithmetic expression), or ``None``/``"*"`` for ``count(*)``.
    """

    name: str
    func: AggFunc
    input: Any = None

    def __post_init__(self) -> None:
        if self.func not in get_args(AggFunc):
            raise PlanError(
                f"aggregate {self.name!r}: unknown function {self.func!r} "
                f"(one of {', '.join(get_args(AggFunc))})"
            )
        if self.input is None or self.input == "*":
            if self.func != "count":
                raise PlanError(f"aggregate {self.name!r}: {self.func}(*) needs an input column")
            object.__setattr__(self, "input", None)
        else:
            object.__setattr__(self, "input", as_arith(self.input))

    @property
    def expr(self) -> Arith | None:
        return self.input  # type: ignore[no-any-return]


# --------------------------------------------------------------------------------------------
# plan: the aggregates resolved against an input schema, once


@dataclass(frozen=True)
class _Resolved:
    name: str
    func: str
    expr: Arith | None
    vtype: ValueType | None
    out_type: pa.DataType
    state: str  # count_star | count | sum128 | sumf | ext_i | ext_f | ext_other


@dataclass(frozen=True)
class AggPlan:
    """Keys and aggregates resolved against one input schema: types, state kinds, output schema."""

    keys: tuple[tuple[str, pa.DataType], ...]
    aggs: tuple[_Resolved, ...]

    def output_fields(self) -> list[pa.Field]:
        return [pa.field(n, t) for n, t in self.keys] + [pa.field(a.name, a.out_type) for a in self.aggs]

    def columns(self) -> set[str]:
        cols = {n for n, _ in self.keys}
        for a in self.aggs:
            if a.expr is not None:
                cols |= a.expr.columns()
        return cols


def _resolve(agg: Agg, schema: pa.Schema, where: str) -> _Resolved:
    what = f"{where}: aggregate {agg.name!r} = {agg.func}({agg.expr if agg.expr else '*'})"
    if agg.expr is None:
        return _Resolved(agg.name, "count", None, None, pa.int64(), "count_star")
    vt = agg.expr.type_in(schema, what)
    if agg.func == "count":
        return _Resolved(agg.name, "count", agg.expr, vt, pa.int64(), "count")
    if agg.func in ("sum", "avg"):
        if vt.kind not in ("int", "decimal", "float"):
            raise SchemaError(
                f"{what}: {agg.func} needs a numeric input, but {agg.expr} has type {vt.arrow}"
            )
        if agg.func == "avg":
            out: pa.DataType = pa.float64()
        elif vt.kind == "decimal":
            out = pa.decimal128(38, vt.scale)
        else:
            out = pa.int64() if vt.kind == "int" else pa.float64()
        return _Resolved(agg.name, agg.func, agg.expr, vt, out, "sumf" if vt.kind == "float" else "sum128")
    # min / max keep the input type (a derived integer expression is int64)
    out = vt.arrow
    if vt.kind == "int" and not isinstance(agg.expr, Column):
        out = pa.int64()
    state = {"int": "ext_i", "decimal": "ext_i", "temporal": "ext_i", "float": "ext_f"}.get(vt.kind, "ext_other")
    if state == "ext_f":
        out = vt.arrow if isinstance(agg.expr, Column) else pa.float64()
    return _Resolved(agg.name, agg.func, agg.expr, vt, out, state)


def plan_aggregates(
    schema: pa.Schema, keys: Sequence[str], aggregates: Sequence[Agg], where: str
) -> AggPlan:
    """Resolve ``keys`` and ``aggregates`` against ``schema``; raise naming a missing column."""
    key_fields = []
    for k in keys:
        if k not in schema.names:
            raise SchemaError(
                f"{where}: group key {k!r} does not exist (columns: {', '.join(schema.names)})"
            )
        key_fields.append((k, schema.field(k).type))
    names = [k for k in keys] + [a.name for a in aggregates]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise PlanError(f"{where}: output column(s) {', '.join(map(repr, dup))} named twice")
    return AggPlan(tuple(key_fields), tuple(_resolve(a, schema, where) for a in aggregates))


# --------------------------------------------------------------------------------------------
# Arrow <-> int64 codes


def _int64_of(arr: pa.Array) -> np.ndarray:
    t = arr.type
    if pa.types.is_date64(t):
        arr = arr.view(pa.int64())
    elif pa.types.is_date32(t) or pa.types.is_time32(t):
        arr = arr.view(pa.int32())
    elif pa.types.is_timestamp(t) or pa.types.is_duration(t) or pa.types.is_time64(t):
        arr = arr.view(pa.int64())
    if arr.null_count:
        arr = arr.fill_null(0)
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.int64)


def _mask_buffer(valid: np.ndarray | None) -> pa.Buffer | None:
    if valid is None or bool(valid.all()):
        return None
    return pa.array(valid, type=pa.bool_()).buffers()[1]


def _from_int64(values: np.ndarray, valid: np.ndarray | None, t: pa.DataType) -> pa.Array:
    """An Arrow array of type ``t`` from int64 codes (unscaled values for decimals)."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    n = len(values)
    if pa.types.is_decimal(t):
        words = np.empty((n, 2), dtype=np.int64)
        words[:, 0] = values
        words[:, 1] = values >> 63
        return pa.Array.from_buffers(t, n, [_mask_buffer(valid), pa.py_buffer(words)])
    mask = None if valid is None else ~valid
    arr = pa.array(values, type=pa.int64(), mask=mask)
    if pa.types.is_integer(t):
        return arr.cast(t)
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return arr.cast(pa.int32()).view(t)
    return arr.view(t)


def _as_array(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


class _KeyCoder:
    """Codes one key column as int64: integers and temporal values as themselves, anything else
    (strings, decimals, floats, ...) interned to dense ids, in first-seen order."""

    def __init__(self, name: str, t: pa.DataType, state: Any = None):
        self.name = name
        self.type = t
        self.direct = pa.types.is_integer(t) or leaf_type(t).kind == "temporal"
        self.ids: dict[Any, int] = {}
        self.chunks: list[pa.Array] = []
        if state is not None:
            self.chunks = list(state)
            for c in self.chunks:
                for v in c.to_pylist():
                    self.ids[_hashable(v)] = len(self.ids)

    def codes(self, arr: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
        nulls = np.asarray(arr.is_null()) if arr.null_count else None
        if self.direct:
            return _int64_of(arr), nulls
        if not pa.types.is_dictionary(arr.type):
            arr = pc.dictionary_encode(arr)
        dictionary = arr.dictionary
        values = dictionary.to_pylist()
        mapping = np.empty(len(values), dtype=np.int64)
        new: list[int] = []
        for j, v in enumerate(values):
            key = _hashable(v)
            code = self.ids.get(key)
            if code is None:
                code = self.ids[key] = len(self.ids)
                new.append(j)
            mapping[j] = code
        if new:
            self.chunks.append(dictionary.take(pa.array(new, type=pa.int64())).cast(self.type))
        idx = arr.indices
        if idx.null_count:
            idx = idx.fill_null(0)
        if len(mapping) == 0:
            return np.zeros(len(arr), dtype=np.int64), nulls
        return mapping[idx.to_numpy(zero_copy_only=False)], nulls

    def decode(self, codes: np.ndarray, nulls: np.ndarray) -> pa.Array:
        valid = ~nulls if nulls.any() else None
        if self.direct:
            return _from_int64(codes, valid, self.type)
        values = (
            pa.concat_arrays(self.chunks) if self.chunks else pa.array([], type=self.type)
        )
        if len(values) == 0:
            return pa.nulls(len(codes), type=self.type)
        safe = np.where(nulls, 0, codes)
        out = values.take(pa.array(safe, type=pa.int64()))
        if valid is not None:
            out = pc.if_else(pa.array(valid), out, pa.scalar(None, type=self.type))
        return out

    def snapshot(self) -> Any:
        return None if self.direct else tuple(self.chunks)

    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.chunks)


def _hashable(v: Any) -> Any:
    # NaN != NaN would put every NaN in a group of its own; SQL groups them together.
    if isinstance(v, float) and v != v:
        return ("nan",)
    return v


# --------------------------------------------------------------------------------------------
# per-aggregate state


def _grow(a: np.ndarray, cap: int, fill: Any = 0) -> np.ndarray:
    if len(a) >= cap:
        return a
    out = np.full(cap, fill, dtype=a.dtype)
    out[: len(a)] = a
    return out


class _AggState:
    """The running state of one aggregate for every group (arrays indexed by group id)."""

    def __init__(self, r: _Resolved, state: Any = None):
        self.r = r
        self.counts = np.zeros(0, dtype=np.int64)
        self.hi = np.zeros(0, dtype=np.int64)
        self.lo = np.zeros(0, dtype=np.int64)
        self.fsum = np.zeros(0, dtype=np.float64)
        self.best: np.ndarray = np.zeros(0, dtype=np.float64 if r.state == "ext_f" else np.int64)
        self.other: pa.Array | None = None
        if state is not None:
            for k, v in state.items():
                setattr(self, k, v.copy() if isinstance(v, np.ndarray) else v)

    def reserve(self, cap: int) -> None:
        self.counts = _grow(self.counts, cap)
        if self.r.state == "sum128":
            self.hi = _grow(self.hi, cap)
            self.lo = _grow(self.lo, cap)
        elif self.r.state == "sumf":
            self.fsum = _grow(self.fsum, cap, 0.0)
        elif self.r.state in ("ext_i", "ext_f"):
            self.best = _grow(self.best, cap)

    def update(self, gids: np.ndarray, n_groups: int, v: Values | None) -> None:
        s = self.r.state
        if v is None:
            K.count_rows(gids, _EMPTY_BOOL, self.counts)
            return
        valid = v.valid if v.valid is not None else _EMPTY_BOOL
        if s == "count":
            K.count_rows(gids, valid, self.counts)
        elif s == "sum128":
            K.sum128(gids, v.values, valid, self.hi, self.lo, self.counts)
        elif s == "sumf":
            K.sum_f64(gids, v.values, valid, self.fsum, self.counts)
        elif s == "ext_i" or s == "ext_f":
            kernel = K.min_i64 if self.r.func == "min" else K.max_i64
            kernel(gids, v.values, valid, self.best, self.counts)
        else:
            self._update_other(gids, n_groups, v)

    def _update_other(self, gids: np.ndarray, n_groups: int, v: Values) -> None:
        """min/max of a non-numeric column (strings, booleans, ...) with Arrow's hash kernels."""
        arr: pa.Array = v.values
        take = gids >= 0
        if v.valid is not None:
            take &= v.valid
        t = self.r.out_type
        cur = self.other if self.other is not None else pa.array([], type=t)
        pad = pa.nulls(n_groups - len(cur), type=t)
        groups = np.concatenate([np.arange(n_groups, dtype=np.int64), gids[take]])
        vals = pa.concat_arrays([cur, pad, arr.filter(pa.array(take))])
        table = pa.table({"g": groups, "v": vals})
        agg = table.group_by("g").aggregate([("v", self.r.func)]).sort_by("g")
        self.other = agg.column(f"v_{self.r.func}").combine_chunks()
        K.count_rows(gids, take, self.counts)

    def output(self, n: int) -> pa.Array:
        s, r = self.r.state, self.r
        counts = self.counts[:n]
        if s in ("count", "count_star"):
            return pa.array(counts, type=pa.int64())
        has = counts > 0
        valid = None if bool(has.all()) else has
        if s == "sum128":
            hi, lo = self.hi[:n], self.lo[:n]
            assert r.vtype is not None
            if r.func == "avg":
                return _exact_avg(hi, lo, counts, r.vtype.scale)
            if r.vtype.kind == "int":
                if bool(((hi < -(1 << 31)) | (hi >= (1 << 31))).any()):
                    raise SchemaError(f"aggregate {r.name!r}: integer sum overflows int64")
                return pa.array((hi << 32) | lo, type=pa.int64(), mask=None if valid is None else ~valid)
            words = np.empty((n, 2), dtype=np.int64)
            words[:, 0] = (hi << 32) | lo
            words[:, 1] = hi >> 32
            return pa.Array.from_buffers(r.out_type, n, [_mask_buffer(valid), pa.py_buffer(words)])
        if s == "sumf":
            sums = self.fsum[:n]
            out = sums / np.maximum(counts, 1) if r.func == "avg" else sums
            return pa.array(out, type=pa.float64(), mask=None if valid is None else ~valid)
        if s == "ext_i":
            return _from_int64(self.best[:n], valid, r.out_type)
        if s == "ext_f":
            arr = pa.array(self.best[:n], type=pa.float64(), mask=None if valid is None else ~valid)
            return arr.cast(r.out_type)
        cur = self.other if self.other is not None else pa.array([], type=r.out_type)
        if len(cur) < n:
            cur = pa.concat_arrays([cur, pa.nulls(n - len(cur), type=r.out_type)])
        return cur.slice(0, n)

    def snapshot(self, n: int) -> dict[str, Any]:
        s = self.r.state
        out: dict[str, Any] = {"counts": self.counts[:n].copy()}
        if s == "sum128":
            out.update(hi=self.hi[:n].copy(), lo=self.lo[:n].copy())
        elif s == "sumf":
            out["fsum"] = self.fsum[:n].copy()
        elif s in ("ext_i", "ext_f"):
            out["best"] = self.best[:n].copy()
        elif s == "ext_other":
            out["other"] = self.other
        return out

    def nbytes(self) -> int:
        b = self.counts.nbytes + self.hi.nbytes + self.lo.nbytes + self.fsum.nbytes + self.best.nbytes
        return b + (self.other.nbytes if self.other is not None else 0)


def _exact_avg(hi: np.ndarray, lo: np.ndarray, counts: np.ndarray, scale: int) -> pa.Array:
    """The average as DuckDB computes it: the exact sum as a double, divided by the count.

    ``double(sum / 10**scale) / count``: the sum is rounded once to the nearest double (exactly
    when below 2**53, with Python's exact int division otherwise), then one IEEE division.
    Null where count is 0.
    """
    n = len(counts)
    fast = np.abs(hi) < (1 << 20)
    sums = hi.astype(np.float64) * 4294967296.0 + lo.astype(np.float64)
    if scale:
        sums = sums / float(10**scale)
    for g in np.flatnonzero(~fast):
        sums[g] = ((int(hi[g]) << 32) + int(lo[g])) / 10**scale
    out = sums / np.where(counts > 0, counts, 1).astype(np.float64)
    mask = counts == 0
    return pa.array(out, type=pa.float64(), mask=mask if n and bool(mask.any()) else None)


# --------------------------------------------------------------------------------------------
# the group table and aggregator


class GroupAggregator:
    """Per-group aggregate state for one :class:`AggPlan`: ``update`` with batches, ``result``.

    Shared by :class:`GroupBy` (one aggregator) and windowed aggregation (one per window).
    """

    def __init__(self, plan: AggPlan, state: Any = None):
        self.plan = plan
        w = len(plan.keys) + 1  # key codes + a bitmask of null keys
        self.coders = [
            _KeyCoder(n, t, None if state is None else state["coders"][i])
            for i, (n, t) in enumerate(plan.keys)
        ]
        self.aggs = [
            _AggState(r, None if state is None else state["aggs"][i]) for i, r in enumerate(plan.aggs)
        ]
        if state is None:
            self.n_groups = 0
            self.gkeys = np.zeros((0, w), dtype=np.int64)
            self.slots = np.full(16, -1, dtype=np.int64)
        else:
            self.n_groups = int(state["n_groups"])
            self.gkeys = state["gkeys"].copy()
            cap = 16
            while cap < 2 * self.n_groups + 2:
                cap *= 2
            self.slots = np.full(cap // 2, -1, dtype=np.int64)
            self.slots = K._rehash(self.slots, self.gkeys, self.n_groups)
        if not plan.keys and self.n_groups == 0:
            self.n_groups = 1  # a global aggregate has its one group even over no rows
            self.gkeys = np.zeros((1, w), dtype=np.int64)
        for a in self.aggs:
            a.reserve(max(len(self.gkeys), 1))

    def group_ids(self, batch: pa.RecordBatch, skip: np.ndarray | None = None) -> np.ndarray:
        """Dense group id of each row of ``batch`` (new groups are created); -1 where ``skip``."""
        n = batch.num_rows
        if not self.plan.keys:
            gids = np.zeros(n, dtype=np.int64)
            if skip is not None:
                gids[skip] = -1
            return gids
        keys = np.empty((n, len(self.coders) + 1), dtype=np.int64)
        nullword = np.zeros(n, dtype=np.int64)
        for c, coder in enumerate(self.coders):
            codes, nulls = coder.codes(_as_array(batch.column(coder.name)))
            if nulls is not None:
                codes = np.where(nulls, 0, codes)
                nullword |= nulls.astype(np.int64) << c
            keys[:, c] = codes
        keys[:, -1] = nullword
        gids, self.slots, self.gkeys, ng = K.assign_groups(
            keys, _EMPTY_BOOL if skip is None else skip, self.slots, self.gkeys, self.n_groups
        )
        self.n_groups = int(ng)
        return gids

    def update(self, batch: pa.RecordBatch, skip: np.ndarray | None = None) -> None:
        """Fold the rows of ``batch`` (except those where ``skip`` is true) into the state."""
        if batch.num_rows == 0:
            return
        gids = self.group_ids(batch, skip)
        cap = max(len(self.gkeys), self.n_groups)
        cache: dict[str, Values] = {}
        for a in self.aggs:
            a.reserve(cap)
            v = None if a.r.expr is None else a.r.expr.evaluate(batch, cache)
            a.update(gids, self.n_groups, v)

    def result_columns(self) -> list[pa.Array]:
        """Key columns then aggregate columns, one row per group in first-seen order."""
        n = self.n_groups
        cols: list[pa.Array] = []
        if self.coders:
            nullword = self.gkeys[:n, -1]
            for c, coder in enumerate(self.coders):
                nulls = ((nullword >> c) & 1).astype(bool)
                cols.append(coder.decode(self.gkeys[:n, c], nulls))
        cols.extend(a.output(n) for a in self.aggs)
        return cols

    def snapshot(self) -> dict[str, Any]:
        n = self.n_groups
        return {
            "n_groups": n,
            "gkeys": self.gkeys[:n].copy(),
            "coders": [c.snapshot() for c in self.coders],
            "aggs": [a.snapshot(n) for a in self.aggs],
        }

    def nbytes(self) -> int:
        return (
            self.gkeys.nbytes
            + self.slots.nbytes
            + sum(c.nbytes() for c in self.coders)
            + sum(a.nbytes() for a in self.aggs)
        )


# --------------------------------------------------------------------------------------------
# the operator


def _single_input(inputs: InputSchemas, name: str) -> tuple[int, pa.Schema]:
    if len(inputs) != 1:
        raise PlanError(f"{name} takes exactly one input stream, got {len(inputs)}")
    return next(iter(inputs.items()))


@dataclass(frozen=True)
class GroupBy(OperatorSpec):
    """``SELECT keys..., aggregates... GROUP BY keys`` over all input, emitted at END (blocking).

    See the module docstring for the semantics and result types. ``keys=[]`` is a global
    aggregate (one output row).
    """

    keys: Sequence[str]
    aggregates: Sequence[Agg]
    name: str = "group_by"

    def __post_init__(self) -> None:
        if isinstance(self.keys, str):
            raise PlanError(f"{self.name}: keys must be a list of column names, got {self.keys!r}")
        object.__setattr__(self, "keys", tuple(self.keys))
        object.__setattr__(self, "aggregates", tuple(self.aggregates))
        if not self.aggregates and not self.keys:
            raise PlanError(f"{self.name}: needs at least one key or aggregate")
        for a in self.aggregates:
            if not isinstance(a, Agg):
                raise PlanError(f"{self.name}: {a!r} is not an Agg")

    def plan(self, inputs: InputSchemas) -> AggPlan:
        _, schema = _single_input(inputs, self.name)
        return plan_aggregates(schema, self.keys, self.aggregates, self.name)

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        return pa.schema(self.plan(inputs).output_fields())

    def columns_used(self, inputs: InputSchemas) -> Mapping[int, set[str]]:
        sid, _ = _single_input(inputs, self.name)
        return {sid: self.plan(inputs).columns()}

    @property
    def blocking(self) -> bool:
        return True

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        return _GroupByLogic(self, self.plan(inputs), state)


class _GroupByLogic(OperatorLogic):
    def __init__(self, spec: GroupBy, plan: AggPlan, state: Any):
        self.spec = spec
        self.plan = plan
        self.schema = pa.schema(plan.output_fields())
        self.done = False
        try:
            self.agg = GroupAggregator(plan, None if state is None else state["groups"])
        except (KeyError, TypeError, IndexError) as exc:
            raise StateError(f"{spec.name}: cannot restore state: {exc}") from exc
        if state is not None:
            self.done = bool(state.get("done", False))

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        try:
            self.agg.update(batch)
        except SchemaError as exc:
            raise SchemaError(f"{self.spec.name} (stream {stream_id}): {exc}") from exc
        return []

    def on_end(self) -> list[pa.RecordBatch]:
        if self.done:
            return []
        self.done = True
        cols = self.agg.result_columns()
        if self.agg.n_groups == 0:
            return []
        return [pa.RecordBatch.from_arrays(cols, schema=self.schema)]

    def snapshot(self) -> Any:
        return {"groups": self.agg.snapshot(), "done": self.done}

    def state_bytes(self) -> int:
        return self.agg.nbytes()
