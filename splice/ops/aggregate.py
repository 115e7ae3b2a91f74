"""Aggregation-GroupBy: ``SELECT keys, f(x), ... GROUP BY keys`` over a stream, answered at END.

Semantics (SQL's): rows are grouped by equal key tuples; a null key is a value of its own, so all
rows whose key is null form one group. ``count(*)`` counts rows; ``count(x)`` counts non-null x;
``sum``, ``avg``, ``min`` and ``max`` skip nulls and are null for a group without a non-null
input. Over no keys the aggregate is global: one row, even for an empty input. Groups come out in
the order they were first seen.

Result types follow DuckDB: ``sum`` of ``decimal(p, s)`` is ``decimal(38, s)``, exact; ``sum`` of
integers is ``int64`` (an overflow raises) and of floats ``float64``; ``avg`` is ``float64``,
computed as DuckDB computes it (see :func:`decimal_avg`); ``min`` and
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

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from splice.core.errors import PlanError, SchemaError, StateError
from splice.core.operator import InputSchemas, OperatorLogic, OperatorSpec
from splice.core.row_checks import RowCheck, decimal_fits_64
from splice.kernels import group_keys as G
from splice.kernels.key_words import exact_words, is_exact_type
from splice.ops import _agg_kernels as K
from splice.ops.arithmetic import (
    Arith,
    Column,
    Values,
    ValueType,
    as_arith,
    full_values,
)
from splice.ops.expressions import evaluate, expression_columns, result_types

__all__ = [
    "Agg",
    "AggFunc",
    "GroupBy",
    "GroupAggregator",
    "GroupKeyCoder",
    "BackedGroupAggregator",
    "AggPlan",
    "plan_aggregates",
    "decimal_avg",
    "skip_mask",
    "filtered_plan",
    "freeze_keys_and_aggregates",
    "grouping_columns",
]

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
        if self.input is None or (isinstance(self.input, str) and self.input.strip() == "*"):
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
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return arr.cast(t)
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return arr.cast(pa.int32()).view(t)
    return arr.view(t)


def _as_array(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _is_stringlike(t: pa.DataType) -> bool:
    return (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )


class GroupKeyCoder:
    """Codes one key column as exact, decodable int64 words, the same in every batch.

    * integers, booleans, dates, times, timestamps, durations, and decimals of precision <= 18:
      the value itself (:func:`~splice.kernels.key_words.exact_words`);
    * strings and binaries: strings of at most 7 bytes packed into the word
      (:func:`~splice.kernels.group_keys.pack_strings`), longer ones interned to ``-(id + 1)``;
    * anything else (floats, wide decimals, ...): interned to ``id >= 0``.

    A null codes as 0; the group table tells nulls apart with a separate null bitmask word.
    Interned values are kept in first-seen order (``chunks``); the dict over them is derived
    and rebuilt on restore.
    """

    def __init__(self, name: str, t: pa.DataType, state: Any = None):
        self.name = name
        self.type = t
        if _is_stringlike(t):
            self.mode = "str"
        elif is_exact_type(t) and not pa.types.is_floating(t):
            self.mode = "int"
        else:
            self.mode = "intern"
        self.ids: dict[Any, int] = {}
        self.chunks: list[pa.Array] = []
        if state is not None:
            self.chunks = list(state)
            for c in self.chunks:
                for v in c.to_pylist():
                    self.ids[_hashable(v)] = len(self.ids)

    def _intern(self, arr: pa.Array) -> np.ndarray:
        """Dense ids of the (non-null) values of ``arr``, interning new ones.

        Python work is one dict lookup per distinct value of the batch (comprehensions, no
        per-row statements); rows map through the batch dictionary with NumPy.
        """
        if not pa.types.is_dictionary(arr.type):
            arr = pc.dictionary_encode(arr)
        dictionary = arr.dictionary
        values = dictionary.to_pylist()
        if pa.types.is_floating(dictionary.type):
            values = [_hashable(v) for v in values]
        mapping = np.array(
            list(map(self.ids.get, values, itertools.repeat(-1, len(values)))), dtype=np.int64
        )
        new = np.flatnonzero(mapping < 0)
        if len(new):
            start = len(self.ids)
            fresh = np.arange(start, start + len(new), dtype=np.int64)
            self.ids.update(zip([values[j] for j in new.tolist()], fresh.tolist(), strict=True))
            mapping[new] = fresh
            self.chunks.append(dictionary.take(pa.array(new, type=pa.int64())).cast(self.type))
        if len(mapping) == 0:
            return np.zeros(len(arr), dtype=np.int64)
        idx = arr.indices
        if idx.null_count:
            idx = idx.fill_null(0)
        return mapping[idx.to_numpy(zero_copy_only=False)]

    def code_into(self, arr: pa.Array, keys: np.ndarray, c: int) -> np.ndarray | None:
        """Write the codes of ``arr`` into ``keys[:, c]``; return the null mask (None: no nulls)."""
        if pa.types.is_dictionary(arr.type):
            arr = arr.cast(self.type)
        nulls = np.asarray(arr.is_null()) if arr.null_count else None
        if self.mode == "int":
            keys[:, c] = exact_words(arr)
        elif self.mode == "str":
            large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
            bufs = arr.buffers()
            offsets = np.frombuffer(
                bufs[1], dtype=np.int64 if large else np.int32, count=arr.offset + len(arr) + 1
            )[arr.offset :]
            data = (
                np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and bufs[2].size
                else np.zeros(1, dtype=np.uint8)
            )
            valid = _EMPTY_BOOL if nulls is None else ~nulls
            n_long = G.pack_strings(offsets, data, valid, keys, c)
            if n_long:
                rows = np.flatnonzero(keys[:, c] == -1)
                keys[rows, c] = -1 - self._intern(arr.take(pa.array(rows)))
        else:
            keys[:, c] = self._intern(arr)
            if nulls is not None:
                keys[nulls, c] = 0
        return nulls

    def _values(self) -> pa.Array:
        return pa.concat_arrays(self.chunks) if self.chunks else pa.array([], type=self.type)

    def decode(self, codes: np.ndarray, nulls: np.ndarray) -> pa.Array:
        valid = ~nulls if nulls.any() else None
        n = len(codes)
        if self.mode == "int":
            return _from_int64(codes, valid, self.type)
        if self.mode == "intern":
            values = self._values()
            if len(values) == 0:
                return pa.nulls(n, type=self.type)
            out = values.take(pa.array(np.where(nulls, 0, codes), type=pa.int64()))
            if valid is not None:
                out = pc.if_else(pa.array(valid), out, pa.scalar(None, type=self.type))
            return out
        text = pa.types.is_string(self.type) or pa.types.is_large_string(self.type)
        wide = pa.large_string() if text else pa.large_binary()
        codes = np.ascontiguousarray(codes, dtype=np.int64)
        offsets, data = G.unpack_strings(codes)
        out = pa.Array.from_buffers(
            wide, n, [_mask_buffer(valid), pa.py_buffer(offsets), pa.py_buffer(data)]
        )
        is_long = codes < 0
        if valid is not None:
            is_long &= valid
        if is_long.any():
            values = self._values().cast(wide)
            taken = values.take(pa.array(np.where(is_long, -1 - codes, 0), type=pa.int64()))
            out = pc.if_else(pa.array(is_long), taken, out)
        return out.cast(self.type)

    def snapshot(self) -> Any:
        return tuple(self.chunks)

    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.chunks)




def _hashable(v: Any) -> Any:
    # NaN != NaN would put every NaN in a group of its own; SQL groups them together.
    if isinstance(v, float) and v != v:
        return ("nan",)
    return v


# --------------------------------------------------------------------------------------------
# per-group state


@dataclass(frozen=True)
class _AggInput:
    """One distinct aggregate input expression and the state the aggregates over it need."""

    index: int
    expr: Arith
    vtype: ValueType
    sum: bool
    min: bool
    max: bool
    #: a ``sum`` aggregate over this input is in the plan (changes how DuckDB computes ``avg``)
    sum_output: bool


def _inputs_of(plan: AggPlan) -> tuple[list[_AggInput], list[int]]:
    """Distinct input expressions of ``plan`` and, per aggregate, the index of its input."""
    by_key: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    which: list[int] = []
    for a in plan.aggs:
        if a.expr is None:
            which.append(-1)
            continue
        key = str(a.expr)
        if key not in by_key:
            by_key[key] = {
                "expr": a.expr, "vtype": a.vtype, "sum": False, "min": False, "max": False,
                "sum_output": False,
            }
            order.append(key)
        if a.func in ("sum", "avg"):
            by_key[key]["sum"] = True
            if a.func == "sum":
                by_key[key]["sum_output"] = True
        elif a.func in ("min", "max"):
            by_key[key][a.func] = True
        which.append(order.index(key))
    inputs = [_AggInput(i, **by_key[k]) for i, k in enumerate(order)]
    return inputs, which


def _slots_for(gkeys: np.ndarray, n_groups: int) -> np.ndarray:
    """A hash table over the first ``n_groups`` rows of ``gkeys``, at most half full."""
    cap = 16
    while cap < 2 * n_groups + 2:
        cap *= 2
    return G.rehash(np.full(cap // 2, -1, dtype=np.int64), gkeys, n_groups)


def _grow(a: np.ndarray, cap: int, fill: Any) -> np.ndarray:
    if len(a) >= cap:
        return a
    out = np.full(max(cap, 2 * len(a)), fill, dtype=a.dtype)
    out[: len(a)] = a
    return out


_I64_LIMIT = 1 << 63


def decimal_avg(
    hi: np.ndarray, lo: np.ndarray, counts: np.ndarray, scale: int, via_sum: bool
) -> np.ndarray:
    """``avg`` of exact sums (limbs ``hi``/``lo`` at ``scale``) over ``counts``, as DuckDB does.

    DuckDB's ``avg`` returns the exact quotient ``sum / (count * 10**scale)`` correctly rounded
    to a double. But when the same query also asks for ``sum`` of the same input, its optimizer
    rewrites ``avg(x)`` to ``sum(x) / count(x)``: the sum is first rounded to a double, then
    divided. ``via_sum`` selects that second form, so that answers match DuckDB's bit for bit.
    Both use one IEEE division when the operands are exact doubles (below 2**53), and Python's
    exact int arithmetic for the other groups.
    """
    fast = np.abs(hi) < (1 << 20)  # |sum| < 2**52
    sums = hi.astype(np.float64) * 4294967296.0 + lo.astype(np.float64)
    safe_counts = np.where(counts > 0, counts, 1)
    if via_sum:
        if scale:
            sums = sums / float(10**scale)
        for g in np.flatnonzero(~fast):
            sums[g] = ((int(hi[g]) << 32) + int(lo[g])) / 10**scale
        return np.asarray(sums / safe_counts.astype(np.float64))
    div = safe_counts.astype(np.float64) * float(10**scale)
    fast &= div < float(1 << 53)
    out = sums / div
    for g in np.flatnonzero(~fast):
        out[g] = ((int(hi[g]) << 32) + int(lo[g])) / (int(safe_counts[g]) * 10**scale)
    return np.asarray(out)


class GroupAggregator:
    """Per-group aggregate state for one :class:`AggPlan`: ``update`` with batches, then read
    ``result_columns``. Shared by :class:`GroupBy` (one aggregator) and windowed aggregation
    (one per window).

    State, by name, one array slot per group: ``rows`` (rows seen), and per distinct input
    expression ``i``: ``i.nulls`` (rows where it was null), ``i.hi``/``i.lo`` (exact sum limbs)
    or ``i.fsum`` (float sum), ``i.min``/``i.max`` (running extremes, initialised to the
    type's far end). Aggregates over the same input share its state: ``sum(x)`` and ``avg(x)``
    read the same limbs, and ``count(x) = rows - x.nulls``.

    ``extra_words`` adds that many int64 words to every group's key, given per row by the
    caller (a window's index, for windowed aggregation): one table then holds the groups of
    every open window; ``result_columns(groups)`` and :meth:`keep_groups` read and drop groups by id.
    """

    def __init__(self, plan: AggPlan, state: Any = None, extra_words: int = 0):
        self.plan = plan
        self.inputs, self.which = _inputs_of(plan)
        self.extra_words = extra_words
        w = len(plan.keys) + extra_words + 1  # key codes, extra words, a bitmask of null keys
        self.coders = [
            GroupKeyCoder(n, t, None if state is None else state["coders"][i])
            for i, (n, t) in enumerate(plan.keys)
        ]
        self.fills: dict[str, Any] = {"rows": 0}
        for inp in self.inputs:
            i, kind = inp.index, inp.vtype.kind
            self.fills[f"{i}.nulls"] = 0
            if inp.sum:
                if kind == "float":
                    self.fills[f"{i}.fsum"] = 0.0
                else:
                    self.fills[f"{i}.hi"] = 0
                    self.fills[f"{i}.lo"] = 0
            if kind != "other":
                if inp.min:
                    self.fills[f"{i}.min"] = np.inf if kind == "float" else _I64_MAX
                if inp.max:
                    self.fills[f"{i}.max"] = -np.inf if kind == "float" else _I64_MIN
        self.arrays: dict[str, np.ndarray] = {
            k: np.full(0, v, dtype=np.float64 if isinstance(v, float) else np.int64)
            for k, v in self.fills.items()
        }
        #: min/max of non-numeric inputs, as Arrow arrays indexed by group id
        self.others: dict[str, pa.Array] = {}
        if state is None:
            self.n_groups = 0
            self.gkeys = np.zeros((0, w), dtype=np.int64)
        else:
            self.n_groups = int(state["n_groups"])
            self.gkeys = state["gkeys"].copy()
            for k, v in state["arrays"].items():
                self.arrays[k] = v.copy()
            self.others = dict(state["others"])
        self.slots = _slots_for(self.gkeys, self.n_groups)
        if not self._keyed and self.n_groups == 0:
            self.n_groups = 1  # a global aggregate has its one group even over no rows
            self.gkeys = np.zeros((1, w), dtype=np.int64)
        self._reserve(max(len(self.gkeys), 1))

    @property
    def _keyed(self) -> bool:
        return bool(self.plan.keys) or self.extra_words > 0

    def _reserve(self, cap: int) -> None:
        for k, a in self.arrays.items():
            if len(a) < cap:
                self.arrays[k] = _grow(a, cap, self.fills[k])

    def group_ids(
        self, batch: pa.RecordBatch, skip: np.ndarray | None = None, extra: np.ndarray | None = None
    ) -> np.ndarray:
        """Dense group id of each row of ``batch`` (new groups are created); -1 where ``skip``.

        ``extra`` holds the rows' extra key words, shape ``(rows,)`` or ``(rows, extra_words)``.
        """
        n = batch.num_rows
        if not self._keyed:
            gids = np.zeros(n, dtype=np.int64)
            if skip is not None:
                gids[skip] = -1
            return gids
        keys = np.empty((n, len(self.coders) + self.extra_words + 1), dtype=np.int64)
        if self.extra_words:
            if extra is None:
                raise ValueError("this aggregator's groups need extra key words per row")
            first = len(self.coders)
            keys[:, first : first + self.extra_words] = extra.reshape(n, -1)
        nullword: np.ndarray | None = None
        for c, coder in enumerate(self.coders):
            nulls = coder.code_into(_as_array(batch.column(coder.name)), keys, c)
            if nulls is not None:
                bits = nulls.astype(np.int64) << c
                nullword = bits if nullword is None else nullword | bits
        keys[:, -1] = 0 if nullword is None else nullword
        gids, self.slots, self.gkeys, ng = G.assign_groups(
            keys, _EMPTY_BOOL if skip is None else skip, self.slots, self.gkeys, self.n_groups
        )
        self.n_groups = int(ng)
        return gids

    def update(
        self, batch: pa.RecordBatch, skip: np.ndarray | None = None, extra: np.ndarray | None = None
    ) -> np.ndarray:
        """Fold the rows of ``batch`` (except those where ``skip`` is true) into the state;
        returns each row's group id (-1 where skipped)."""
        if batch.num_rows == 0:
            return np.zeros(0, np.int64)
        gids = self.group_ids(batch, skip, extra)
        self._reserve(self.n_groups)
        self.fold(batch, gids)
        return gids

    def fold(self, batch: pa.RecordBatch, gids: np.ndarray) -> None:
        """Fold the rows of ``batch`` into the groups ``gids`` (-1: no group) already reserved."""
        n = batch.num_rows
        arrays = self.arrays
        K.count_rows(gids, _EMPTY_BOOL, arrays["rows"])
        cache: dict[str, Values] = {}
        for inp in self.inputs:
            i = inp.index
            v = inp.expr.evaluate(batch, cache)
            if v.kind != "other":
                v.values = full_values(v, n)
            valid = _EMPTY_BOOL
            if v.valid is not None:
                valid = v.valid
                K.count_rows(gids, ~valid, arrays[f"{i}.nulls"])
            if inp.sum:
                if v.kind == "float":
                    K.sum_f64(gids, v.values, valid, arrays[f"{i}.fsum"])
                elif v.bound * n < _I64_LIMIT and self.n_groups <= 4 * n:
                    # per-batch int64 partials, folded once per group (zeroing them costs
                    # O(groups), so with many more groups than rows add limbs per row instead)
                    part = np.zeros(self.n_groups, dtype=np.int64)
                    K.sum_i64(gids, v.values, valid, part)
                    K.fold128(arrays[f"{i}.hi"], arrays[f"{i}.lo"], part)
                else:
                    K.sum128(gids, v.values, valid, arrays[f"{i}.hi"], arrays[f"{i}.lo"])
            for func in ("min", "max"):
                if not getattr(inp, func):
                    continue
                if v.kind == "other":
                    self._update_other(f"{i}.{func}", func, inp.vtype.arrow, gids, v)
                else:
                    kernel = K.min_i64 if func == "min" else K.max_i64
                    kernel(gids, v.values, valid, arrays[f"{i}.{func}"])

    def _update_other(
        self, key: str, func: str, t: pa.DataType, gids: np.ndarray, v: Values
    ) -> None:
        """min/max of a non-numeric input (strings, booleans, ...) with Arrow's hash kernels."""
        n_groups = self.n_groups
        take = gids >= 0
        if v.valid is not None:
            take &= v.valid
        cur = self.others.get(key)
        if cur is None:
            cur = pa.array([], type=t)
        groups = np.concatenate([np.arange(n_groups, dtype=np.int64), gids[take]])
        vals = pa.concat_arrays(
            [cur, pa.nulls(n_groups - len(cur), type=t), v.values.filter(pa.array(take))]
        )
        table = pa.table({"g": groups, "v": vals})
        agg = table.group_by("g").aggregate([("v", func)]).sort_by("g")
        self.others[key] = agg.column(f"v_{func}").combine_chunks()

    def _normalize(self) -> None:
        for inp in self.inputs:
            if inp.sum and inp.vtype.kind != "float":
                K.normalize128(self.arrays[f"{inp.index}.hi"], self.arrays[f"{inp.index}.lo"])

    def extra_column(self, j: int = 0) -> np.ndarray:
        """Extra key word ``j`` of every group, by group id."""
        return self.gkeys[: self.n_groups, len(self.coders) + j]

    def result_columns(self, groups: np.ndarray | None = None) -> list[pa.Array]:
        """Key columns then aggregate columns, one row per group in first-seen order, or one
        per id of ``groups`` in that order."""
        self._normalize()
        if groups is None:
            n = self.n_groups
            gkeys = self.gkeys[:n]
            arrays = {k: a[:n] for k, a in self.arrays.items()}
        else:
            n = len(groups)
            gkeys = self.gkeys[groups]
            arrays = {k: a[groups] for k, a in self.arrays.items()}
        cols: list[pa.Array] = []
        if self.coders:
            nullword = gkeys[:, -1]
            for c, coder in enumerate(self.coders):
                nulls = ((nullword >> c) & 1).astype(bool)
                cols.append(coder.decode(gkeys[:, c], nulls))
        rows = arrays["rows"]
        for a, i in zip(self.plan.aggs, self.which, strict=True):
            if i < 0:
                cols.append(pa.array(rows, type=pa.int64()))
                continue
            inp = self.inputs[i]
            counts = rows - arrays[f"{i}.nulls"]
            cols.append(self._output(a, inp, counts, n, arrays, groups))
        return cols

    def keep_groups(self, groups: np.ndarray) -> None:
        """Keep only ``groups`` (ids in increasing order), renumbered ``0..len(groups)-1``.

        The table keeps its capacity: the groups dropped (a window's, say) are usually
        replaced by as many new ones.
        """
        m = len(groups)
        gkeys = np.empty_like(self.gkeys)
        gkeys[:m] = self.gkeys[groups]
        self.gkeys = gkeys
        for k, a in self.arrays.items():
            kept = np.full(len(a), self.fills[k], dtype=a.dtype)
            kept[:m] = a[groups]
            self.arrays[k] = kept
        self.others = {k: self._other(k, self.n_groups).take(pa.array(groups, type=pa.int64()))
                       for k in self.others}
        self.n_groups = m
        self.slots = G.rehash(np.full(len(self.slots) // 2, -1, dtype=np.int64), gkeys, m)

    def _other(self, key: str, n: int) -> pa.Array:
        """The non-numeric extreme ``key`` over the first ``n`` groups (null where unset)."""
        cur = self.others[key]
        if len(cur) < n:
            cur = pa.concat_arrays([cur, pa.nulls(n - len(cur), type=cur.type)])
        return cur.slice(0, n)

    def _output(
        self, a: _Resolved, inp: _AggInput, counts: np.ndarray, n: int,
        arrays: dict[str, np.ndarray], groups: np.ndarray | None,
    ) -> pa.Array:
        if a.func == "count":
            return pa.array(counts, type=pa.int64())
        has = counts > 0
        valid = None if bool(has.all()) else has
        mask = None if valid is None else ~valid
        i, kind = inp.index, inp.vtype.kind
        if a.func in ("sum", "avg"):
            if kind == "float":
                sums = arrays[f"{i}.fsum"]
                out = sums / np.maximum(counts, 1) if a.func == "avg" else sums
                return pa.array(out, type=pa.float64(), mask=mask)
            hi: np.ndarray = arrays[f"{i}.hi"]
            lo: np.ndarray = arrays[f"{i}.lo"]
            if a.func == "avg":
                avg = decimal_avg(hi, lo, counts, inp.vtype.scale, inp.sum_output)
                return pa.array(avg, pa.float64(), mask=mask)
            if kind == "int":
                if bool(((hi < -(1 << 31)) | (hi >= (1 << 31))).any()):
                    raise SchemaError(f"aggregate {a.name!r}: integer sum overflows int64")
                return pa.array((hi << 32) | lo, type=pa.int64(), mask=mask)
            words = np.empty((n, 2), dtype=np.int64)
            words[:, 0] = (hi << 32) | lo
            words[:, 1] = hi >> 32
            return pa.Array.from_buffers(a.out_type, n, [_mask_buffer(valid), pa.py_buffer(words)])
        key = f"{i}.{a.func}"
        if kind == "other":
            if key not in self.others:
                return pa.nulls(n, type=a.out_type)
            cur = self._other(key, self.n_groups)
            return cur if groups is None else cur.take(pa.array(groups, type=pa.int64()))
        best = arrays[key]
        if kind == "float":
            return pa.array(best, type=pa.float64(), mask=mask).cast(a.out_type)
        return _from_int64(np.where(has, best, 0), valid, a.out_type)

    def snapshot(self) -> dict[str, Any]:
        self._normalize()
        n = self.n_groups
        return {
            "n_groups": n,
            "gkeys": self.gkeys[:n].copy(),
            "coders": [c.snapshot() for c in self.coders],
            "arrays": {k: a[:n].copy() for k, a in self.arrays.items()},
            "others": dict(self.others),
        }

    def nbytes(self) -> int:
        return (
            self.gkeys.nbytes
            + self.slots.nbytes
            + sum(c.nbytes() for c in self.coders)
            + sum(a.nbytes for a in self.arrays.values())
            + sum(a.nbytes for a in self.others.values())
        )


class BackedGroupAggregator:
    """The per-group accumulators of a :class:`GroupAggregator` kept in a keyed state backend
    (:mod:`splice.state.keyed`), so that the groups may outnumber what memory holds.

    Per batch: the key columns are coded as in :class:`GroupAggregator`; a batch-local group
    table (the same numba kernel) gives the batch's distinct keys in first-seen order; their
    accumulators are read with one ``get`` of all of them, the batch is folded into them with the
    same kernels, and they are written back with one ``put``. Each record is ``[seq, rows, ...]``:
    ``seq`` numbers groups in first-seen order (the output order), then the accumulators in the
    order of :attr:`GroupAggregator.fills`, floats as their IEEE bits. At END the backend is
    scanned and sorted by ``seq``: the result is the same as the in-memory aggregator's.

    In memory stay the interned key values (strings longer than 7 bytes, floats, wide decimals:
    one copy per distinct value) and one batch's worth of accumulators. Min/max of non-numeric
    inputs (kept as Arrow arrays) are not supported here.
    """

    def __init__(self, plan: AggPlan, kind: str, directory: str | None = None, state: Any = None):
        from splice.state.keyed import open_keyed_state

        self.plan = plan
        self.kind = kind
        self.local = GroupAggregator(plan)
        if not plan.keys:
            raise PlanError("a keyed state backend needs group keys (a global aggregate has one group)")
        others = [a.name for a in plan.aggs if a.state == "ext_other"]
        if others:
            raise PlanError(
                f"state backend {kind!r}: min/max of non-numeric inputs ({', '.join(others)}) is kept "
                "in memory only; use the memory backend"
            )
        self.fields = list(self.local.fills)
        self.floats = np.array([isinstance(self.local.fills[f], float) for f in self.fields])
        words = np.zeros(len(self.fields), dtype=np.int64)
        for j, f in enumerate(self.fields):
            v = self.local.fills[f]
            words[j] = np.float64(v).view(np.int64) if isinstance(v, float) else int(v)
        self.fill_words = words
        key_words = len(plan.keys) + 1
        if state is None:
            self.n_groups = 0
            self.store = open_keyed_state(kind, key_words, 1 + len(self.fields), directory)  # type: ignore[arg-type]
        else:
            self.n_groups = int(state["n_groups"])
            self.local.coders = [GroupKeyCoder(n, t, state["coders"][i]) for i, (n, t) in enumerate(plan.keys)]
            self.store = open_keyed_state(kind, key_words, 1 + len(self.fields), directory,  # type: ignore[arg-type]
                                          state["store"])

    def _load(self, vals: np.ndarray, m: int) -> None:
        loc = self.local
        loc._reserve(m)
        for j, f in enumerate(self.fields):
            col = vals[:, j + 1]
            loc.arrays[f][:m] = col.view(np.float64) if self.floats[j] else col

    def update(self, batch: pa.RecordBatch, skip: np.ndarray | None = None) -> None:
        """Fold the rows of ``batch`` (except those where ``skip`` is true) into the backend."""
        if batch.num_rows == 0:
            return
        loc = self.local
        loc.n_groups = 0
        loc.slots.fill(-1)
        gids = loc.group_ids(batch, skip)
        m = loc.n_groups
        if m == 0:
            return
        keys = loc.gkeys[:m]
        vals, found = self.store.get(keys)
        new = np.flatnonzero(~found)
        if len(new):
            vals[new, 0] = self.n_groups + np.arange(len(new), dtype=np.int64)
            vals[new, 1:] = self.fill_words
            self.n_groups += len(new)
        self._load(vals, m)
        loc.fold(batch, gids)
        loc._normalize()
        for j, f in enumerate(self.fields):
            a = loc.arrays[f][:m]
            vals[:, j + 1] = a.view(np.int64) if self.floats[j] else a
        self.store.put(keys, vals)

    @property
    def coders(self) -> list[GroupKeyCoder]:
        return self.local.coders

    def result_columns(self) -> list[pa.Array]:
        """Key columns then aggregate columns, one row per group in first-seen order."""
        keys, vals = self.store.scan()
        order = np.argsort(vals[:, 0], kind="stable")
        keys, vals = keys[order], vals[order]
        loc = self.local
        loc.n_groups = len(keys)
        loc.gkeys = np.ascontiguousarray(keys)
        self._load(vals, len(keys))
        return loc.result_columns()

    def snapshot(self) -> dict[str, Any]:
        return {"n_groups": self.n_groups, "coders": [c.snapshot() for c in self.local.coders],
                "store": self.store.snapshot()}

    def nbytes(self) -> int:
        """Bytes held in memory: the backend's share, the batch scratch, the interned keys."""
        loc = self.local
        return (self.store.memory_bytes() + loc.gkeys.nbytes + loc.slots.nbytes
                + sum(c.nbytes() for c in loc.coders) + sum(a.nbytes for a in loc.arrays.values()))

    def close(self) -> None:
        self.store.close()


# --------------------------------------------------------------------------------------------
# the operator


_BACKENDS = ("memory", "rocksdb")


def freeze_keys_and_aggregates(spec: Any) -> None:
    """Make a grouping spec's ``keys`` and ``aggregates`` tuples (a frozen dataclass's fields),
    refusing one string given as the keys."""
    if isinstance(spec.keys, str):
        raise PlanError(f"{spec.name}: keys must be a list of column names, got {spec.keys!r}")
    object.__setattr__(spec, "keys", tuple(spec.keys))
    object.__setattr__(spec, "aggregates", tuple(spec.aggregates))


def grouping_columns(spec: Any, inputs: InputSchemas) -> dict[int, set[str]]:
    """The columns a grouping spec (``plan``, ``where``, ``name``) reads of its one input: its
    aggregates' and keys', and its filter's."""
    sid, schema = _single_input(inputs, spec.name)
    cols = spec.plan(inputs).columns()
    if spec.where is not None:
        cols |= expression_columns(spec.where, schema.names)
    return {sid: cols}


def _single_input(inputs: InputSchemas, name: str) -> tuple[int, pa.Schema]:
    if len(inputs) != 1:
        raise PlanError(f"{name} takes exactly one input stream, got {len(inputs)}")
    return next(iter(inputs.items()))


@dataclass(frozen=True)
class GroupBy(OperatorSpec):
    """``SELECT keys..., aggregates... [WHERE where] GROUP BY keys``, emitted at END (blocking).

    See the module docstring for the semantics and result types. ``keys=[]`` is a global
    aggregate (one output row). ``where``, a boolean ``pyarrow.compute`` expression, keeps only
    the rows for which it is true (null counts as false) — a selection pushed into the
    aggregate, so that the filtered rows are never copied.

    ``state_backend`` says where the per-group accumulators live: ``"memory"`` (default: NumPy
    arrays folded in place) or ``"rocksdb"`` (:class:`BackedGroupAggregator` over
    :class:`~splice.state.keyed.RocksDBKeyedState` in ``state_dir``, a temporary directory when
    None): more groups than memory holds, and incremental checkpoints. A global aggregate
    (``keys=[]``) has one group and always stays in memory.
    """

    keys: Sequence[str]
    aggregates: Sequence[Agg]
    where: pc.Expression | None = None
    name: str = "group_by"
    state_backend: str = "memory"
    state_dir: str | None = None

    def __post_init__(self) -> None:
        freeze_keys_and_aggregates(self)
        if not self.aggregates and not self.keys:
            raise PlanError(f"{self.name}: needs at least one key or aggregate")
        for a in self.aggregates:
            if not isinstance(a, Agg):
                raise PlanError(f"{self.name}: {a!r} is not an Agg")
        if self.where is not None and not isinstance(self.where, pc.Expression):
            raise PlanError(f"{self.name}: where must be a pyarrow.compute.Expression")
        if self.state_backend not in _BACKENDS:
            raise PlanError(
                f"{self.name}: unknown state backend {self.state_backend!r} (one of {', '.join(_BACKENDS)})"
            )

    def plan(self, inputs: InputSchemas) -> AggPlan:
        return filtered_plan(inputs, self.keys, self.aggregates, self.where, self.name)

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        return pa.schema(self.plan(inputs).output_fields())

    def columns_used(self, inputs: InputSchemas) -> Mapping[int, set[str]]:
        return grouping_columns(self, inputs)

    @property
    def blocking(self) -> bool:
        return True

    def input_checks(self, inputs: InputSchemas) -> Mapping[int, Sequence[RowCheck]]:
        sid, schema = _single_input(inputs, self.name)
        return {sid: decimal_checks(schema, self.plan(inputs).columns())}

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        return _GroupByLogic(self, self.plan(inputs), state)


def filtered_plan(inputs: InputSchemas, keys: Sequence[str], aggregates: Sequence[Agg],
                  where: pc.Expression | None, name: str) -> AggPlan:
    """The aggregates' plan over the one input, ``where`` checked to be a boolean expression."""
    sid, schema = _single_input(inputs, name)
    if where is not None:
        types = result_types(schema, [where], ["_w"], f"{name} where {where}")
        if not pa.types.is_boolean(types.field("_w").type):
            raise SchemaError(f"{name} (stream {sid}): where {where} is of type "
                              f"{types.field('_w').type}, expected boolean")
    return plan_aggregates(schema, keys, aggregates, name)


def decimal_checks(schema: pa.Schema, columns: set[str]) -> list[RowCheck]:
    """Exact aggregation sums decimals as 64-bit unscaled words: each decimal column it reads
    must hold values that fit them."""
    return [decimal_fits_64(f.name) for f in schema
            if f.name in columns and pa.types.is_decimal128(f.type) and f.type.precision > 18]


def skip_mask(batch: pa.RecordBatch, where: pc.Expression) -> np.ndarray:
    """True for the rows of ``batch`` that ``where`` does not keep (false or null)."""
    mask = evaluate(batch, [where], ["_w"]).column(0)
    if mask.null_count:
        mask = pc.fill_null(mask, False)
    return ~np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


class _GroupByLogic(OperatorLogic):
    def __init__(self, spec: GroupBy, plan: AggPlan, state: Any):
        self.spec = spec
        self.plan = plan
        self.schema = pa.schema(plan.output_fields())
        self.columns = sorted(plan.columns())
        self.done = False if state is None else bool(state.get("done", False))
        self.agg: GroupAggregator | BackedGroupAggregator
        backend = spec.state_backend if plan.keys else "memory"
        groups = None if state is None else state.get("groups")
        if state is not None and state.get("backend", "memory") != backend:
            raise StateError(f"{spec.name}: the checkpoint holds {state.get('backend', 'memory')!r} "
                             f"state, the query asks for the {backend!r} backend")
        try:
            if backend == "memory" or (self.done and groups is None):
                self.agg = GroupAggregator(plan, groups)
            else:
                self.agg = BackedGroupAggregator(plan, backend, spec.state_dir, groups)
        except (KeyError, TypeError, IndexError) as exc:
            raise StateError(f"{spec.name}: cannot restore state: {exc}") from exc
        self.backend = backend

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        try:
            skip = None
            if self.spec.where is not None:
                skip = skip_mask(batch, self.spec.where)
                kept = batch.num_rows - int(np.count_nonzero(skip))
                if kept == 0:
                    return []
                if 2 * kept < batch.num_rows and self.columns:
                    # few rows pass: copying just them (and just the columns read) is cheaper
                    # than computing every aggregate input over the whole batch
                    batch = batch.select(self.columns).filter(pa.array(~skip))
                    skip = None
            self.agg.update(batch, skip)
        except SchemaError as exc:
            raise SchemaError(f"{self.spec.name} (stream {stream_id}): {exc}") from exc
        return []

    def on_end(self) -> list[pa.RecordBatch]:
        if self.done:
            return []
        self.done = True
        if self.agg.n_groups == 0:
            return []
        cols = self.agg.result_columns()
        if isinstance(self.agg, BackedGroupAggregator):
            self.agg.close()
            self.agg = GroupAggregator(self.plan)
        return [pa.RecordBatch.from_arrays(cols, schema=self.schema)]

    def snapshot(self) -> Any:
        if self.done:  # answered: nothing left to restore
            return {"groups": None, "done": True, "backend": self.backend}
        return {"groups": self.agg.snapshot(), "done": False, "backend": self.backend}

    def state_bytes(self) -> int:
        return self.agg.nbytes()
