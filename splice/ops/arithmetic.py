"""Exact arithmetic expressions over columns, the inputs of aggregates.

An aggregate input is a column or an arithmetic expression of columns and literals with ``+``,
``-``, ``*`` and unary ``-``, such as TPC-H's ``l_extendedprice * (1 - l_discount) * (1 + l_tax)``.
Decimal arithmetic is exact, as in SQL: ``decimal(p1, s1) * decimal(p2, s2)`` has scale
``s1 + s2``; ``+`` and ``-`` align both sides to the larger scale. A decimal is computed as a
scaled ``int64`` (the unscaled value) with NumPy, so there is no per-row Python; each batch first
bounds every intermediate result from the inputs' largest magnitudes, and a batch whose bound
does not fit 64 bits is refused with a :class:`~splice.core.errors.SchemaError` rather than
computed wrongly. Integers stay integers (``int64``); any float operand makes the result
``float64``. A null operand makes the result null.

An expression can be written three ways, all picklable::

    col("l_extendedprice") * (1 - col("l_discount"))         # this module's classes
    "l_extendedprice * (1 - l_discount)"                      # text, parsed by ``parse``
    pc.field("l_extendedprice") * (pc.scalar(1) - pc.field("l_discount"))   # Arrow expression

>>> import pyarrow as pa
>>> from decimal import Decimal
>>> b = pa.record_batch({"p": pa.array([Decimal("10.00"), Decimal("3.33")], pa.decimal128(15, 2)),
...                      "d": pa.array([Decimal("0.10"), None], pa.decimal128(15, 2))})
>>> v = parse("p * (1 - d)").evaluate(b)
>>> (v.kind, v.scale, v.values[:1].tolist(), v.valid.tolist())
('decimal', 4, [90000], [True, False])
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from splice.core.errors import SchemaError
from splice.ops._agg_kernels import decimal_low_words, max_abs

__all__ = [
    "Arith",
    "Column",
    "Literal",
    "BinaryOp",
    "Negate",
    "ValueType",
    "Values",
    "col",
    "lit",
    "parse",
    "as_arith",
    "decimal_words",
    "full_values",
]

_I64_MAX = (1 << 63) - 1
_NO_ROWS = np.zeros(0, dtype=np.bool_)

#: Value kinds: ``int`` (int64), ``decimal`` (scaled int64), ``float`` (float64), ``temporal``
#: (dates, timestamps, times and durations as int64 in their own unit), ``other`` (kept as Arrow).
KINDS = ("int", "decimal", "float", "temporal", "other")


@dataclass(frozen=True)
class ValueType:
    """The static type of an expression: its kind, Arrow type, and decimal precision/scale."""

    kind: str
    arrow: pa.DataType
    precision: int = 0
    scale: int = 0


@dataclass
class Values:
    """An expression evaluated over one batch.

    ``values`` is an ``int64`` (unscaled for decimals) or ``float64`` array for numeric kinds,
    or the Arrow array itself for ``other``; ``valid`` is ``None`` when no row is null; ``bound``
    is an upper bound of ``abs(values)`` for integer kinds (an exact Python int).
    """

    kind: str
    values: Any
    valid: np.ndarray | None
    scale: int = 0
    bound: int = 0


def leaf_type(t: pa.DataType) -> ValueType:
    """The :class:`ValueType` of a column of Arrow type ``t``."""
    if pa.types.is_integer(t):
        return ValueType("int", t)
    if pa.types.is_decimal(t) and t.bit_width == 128:
        return ValueType("decimal", t, t.precision, t.scale)
    if pa.types.is_floating(t):
        return ValueType("float", t)
    if (
        pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_time(t)
        or pa.types.is_duration(t)
    ):
        return ValueType("temporal", t)
    return ValueType("other", t)


def decimal_words(arr: pa.Array) -> np.ndarray:
    """The 128-bit values of a decimal128 array as an ``(n, 2)`` int64 view (low, high), no copy."""
    buf = arr.buffers()[1]
    words = np.frombuffer(buf, dtype=np.int64, count=2 * (arr.offset + len(arr)))
    return words.reshape(-1, 2)[arr.offset :]


def _validity(arr: pa.Array) -> np.ndarray | None:
    if arr.null_count == 0:
        return None
    return np.asarray(arr.is_valid())


def _as_array(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks()
    return col


def _int64_values(arr: pa.Array) -> np.ndarray:
    """int64 values of an integer or temporal array (nulls hold arbitrary values)."""
    t = arr.type
    if pa.types.is_date64(t):
        arr = arr.cast(pa.int64())
    elif pa.types.is_date32(t) or pa.types.is_time32(t):
        arr = arr.view(pa.int32())
    elif pa.types.is_timestamp(t) or pa.types.is_duration(t) or pa.types.is_time64(t):
        arr = arr.view(pa.int64())
    if arr.null_count:
        arr = arr.fill_null(0)
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.int64)


class Arith:
    """An arithmetic expression over the columns of a batch (see the module docstring)."""

    def columns(self) -> set[str]:
        raise NotImplementedError

    def type_in(self, schema: pa.Schema, where: str = "expression") -> ValueType:
        """The static type over ``schema``; a missing column or a bad operand raises naming it."""
        raise NotImplementedError

    def evaluate(self, batch: pa.RecordBatch, cache: dict[str, Values] | None = None) -> Values:
        """Values over ``batch``; ``cache`` shares common subexpressions between aggregates.

        The values of a constant expression may be a 0-d array (see :func:`full_values`).
        """
        if cache is None:
            return self._eval(batch, {})
        key = str(self)
        got = cache.get(key)
        if got is None:
            got = self._eval(batch, cache)
            cache[key] = got
        return got

    def _eval(self, batch: pa.RecordBatch, cache: dict[str, Values]) -> Values:
        raise NotImplementedError

    # operator overloading, so that col("a") * (1 - col("b")) builds a tree
    def __add__(self, other: Any) -> Arith:
        return BinaryOp("+", self, as_arith(other))

    def __radd__(self, other: Any) -> Arith:
        return BinaryOp("+", as_arith(other), self)

    def __sub__(self, other: Any) -> Arith:
        return BinaryOp("-", self, as_arith(other))

    def __rsub__(self, other: Any) -> Arith:
        return BinaryOp("-", as_arith(other), self)

    def __mul__(self, other: Any) -> Arith:
        return BinaryOp("*", self, as_arith(other))

    def __rmul__(self, other: Any) -> Arith:
        return BinaryOp("*", as_arith(other), self)

    def __neg__(self) -> Arith:
        return Negate(self)


@dataclass(frozen=True, eq=True)
class Column(Arith):
    """The column ``name``."""

    name: str

    def __str__(self) -> str:
        return self.name if re.fullmatch(r"[A-Za-z_]\w*", self.name) else repr(self.name)

    def columns(self) -> set[str]:
        return {self.name}

    def type_in(self, schema: pa.Schema, where: str = "expression") -> ValueType:
        if self.name not in schema.names:
            raise SchemaError(
                f"{where}: column {self.name!r} does not exist (columns: {', '.join(schema.names)})"
            )
        return leaf_type(schema.field(self.name).type)

    def _eval(self, batch: pa.RecordBatch, cache: dict[str, Values]) -> Values:
        if self.name not in batch.schema.names:
            raise SchemaError(f"column {self.name!r} is missing from the batch")
        arr = _as_array(batch.column(self.name))
        vt = leaf_type(arr.type)
        valid = _validity(arr)
        if vt.kind == "decimal" and valid is None and vt.precision <= 18:
            # every value fits 64 bits by its type: use the low words in place, no copy
            low = decimal_words(arr)[:, 0]
            return Values("decimal", low, None, vt.scale, max_abs(low))
        if vt.kind == "decimal":
            low, bound, fits = decimal_low_words(
                decimal_words(arr), valid if valid is not None else _NO_ROWS
            )
            if not fits:
                raise SchemaError(
                    f"column {self.name!r}: a decimal value does not fit 64 bits; "
                    "exact aggregation supports unscaled values below 2**63"
                )
            return Values("decimal", low, valid, vt.scale, bound)
        if vt.kind in ("int", "temporal"):
            vals = _int64_values(arr)
            return Values(vt.kind, vals, valid, 0, max_abs(vals))
        if vt.kind == "float":
            vals = arr.cast(pa.float64()).to_numpy(zero_copy_only=False)
            if valid is not None:
                vals = np.where(valid, vals, 0.0)
            return Values("float", np.asarray(vals, dtype=np.float64), valid)
        return Values("other", arr, valid)


@dataclass(frozen=True, eq=True)
class Literal(Arith):
    """A constant: an int, a float, or a :class:`~decimal.Decimal` (exact, scale from its digits)."""

    value: int | float | Decimal

    def __str__(self) -> str:
        return str(self.value)

    def columns(self) -> set[str]:
        return set()

    def _decimal(self) -> tuple[int, int, int]:
        """(unscaled, precision, scale) of a Decimal literal."""
        d = self.value if isinstance(self.value, Decimal) else Decimal(str(self.value))
        sign, digits, exp = d.as_tuple()
        scale = max(0, -int(exp))
        unscaled = int(d.scaleb(scale))
        return unscaled, max(len(digits), scale, 1), scale

    def type_in(self, schema: pa.Schema, where: str = "expression") -> ValueType:
        if isinstance(self.value, bool):
            raise SchemaError(f"{where}: boolean literal {self.value} in arithmetic")
        if isinstance(self.value, int):
            return ValueType("int", pa.int64())
        if isinstance(self.value, float):
            return ValueType("float", pa.float64())
        _, p, s = self._decimal()
        return ValueType("decimal", pa.decimal128(p, s), p, s)

    def _eval(self, batch: pa.RecordBatch, cache: dict[str, Values]) -> Values:
        # a 0-d array: NumPy broadcasts it, so a literal costs nothing per row
        if isinstance(self.value, int):
            return Values("int", np.array(self.value, dtype=np.int64), None, 0, abs(self.value))
        if isinstance(self.value, float):
            return Values("float", np.array(self.value, dtype=np.float64), None)
        u, _, s = self._decimal()
        return Values("decimal", np.array(u, dtype=np.int64), None, s, abs(u))


_NUMERIC = ("int", "decimal", "float")


def _and_valid(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    if a is None:
        return b
    if b is None:
        return a
    return a & b


def _check_bound(bound: int, what: Arith) -> None:
    if bound > _I64_MAX:
        raise SchemaError(
            f"expression {what}: intermediate values may exceed 64 bits in this batch "
            f"(bound {bound}); exact aggregation needs them below 2**63"
        )


def _rescale(v: Values, scale: int, what: Arith) -> tuple[np.ndarray, int]:
    """``v`` as unscaled integers at ``scale`` (>= v.scale), with its new bound."""
    if v.scale == scale:
        return v.values, v.bound
    f = 10 ** (scale - v.scale)
    bound = v.bound * f
    _check_bound(bound, what)
    return v.values * np.int64(f), bound


@dataclass(frozen=True, eq=True)
class BinaryOp(Arith):
    """``left op right`` for op in ``+``, ``-``, ``*``."""

    op: str
    left: Arith
    right: Arith

    def __str__(self) -> str:
        return f"({self.left} {self.op} {self.right})"

    def columns(self) -> set[str]:
        return self.left.columns() | self.right.columns()

    def type_in(self, schema: pa.Schema, where: str = "expression") -> ValueType:
        if self.op not in ("+", "-", "*"):
            raise SchemaError(f"{where}: operator {self.op!r} is not supported (use +, -, *)")
        a = self.left.type_in(schema, where)
        b = self.right.type_in(schema, where)
        for side, t in ((self.left, a), (self.right, b)):
            if t.kind not in _NUMERIC:
                raise SchemaError(
                    f"{where}: {side} has type {t.arrow}; arithmetic needs numeric operands"
                )
        if "float" in (a.kind, b.kind):
            return ValueType("float", pa.float64())
        if a.kind == "int" and b.kind == "int":
            return ValueType("int", pa.int64())
        pa_, sa = (a.precision, a.scale) if a.kind == "decimal" else (19, 0)
        pb, sb = (b.precision, b.scale) if b.kind == "decimal" else (19, 0)
        if self.op == "*":
            s = sa + sb
            p = pa_ + pb
            # DuckDB keeps products of two 64-bit decimals 64-bit wide (checked at run time)
            p = 18 if p > 18 and pa_ <= 18 and pb <= 18 else min(p, 38)
        else:
            s = max(sa, sb)
            p = min(max(pa_ - sa, pb - sb) + s + 1, 38)
        if s > 38:
            raise SchemaError(f"{where}: {self} has scale {s} > 38")
        p = max(p, s, 1)
        return ValueType("decimal", pa.decimal128(p, s), p, s)

    def _eval(self, batch: pa.RecordBatch, cache: dict[str, Values]) -> Values:
        a = self.left.evaluate(batch, cache)
        b = self.right.evaluate(batch, cache)
        valid = _and_valid(a.valid, b.valid)
        if a.kind == "float" or b.kind == "float":
            av = _to_float(a)
            bv = _to_float(b)
            out = av * bv if self.op == "*" else (av + bv if self.op == "+" else av - bv)
            return Values("float", out, valid)
        kind = "int" if a.kind == "int" and b.kind == "int" else "decimal"
        if self.op == "*":
            bound = a.bound * b.bound
            _check_bound(bound, self)
            return Values(kind, a.values * b.values, valid, a.scale + b.scale, bound)
        s = max(a.scale, b.scale)
        av, ab = _rescale(a, s, self)
        bv, bb = _rescale(b, s, self)
        bound = ab + bb
        _check_bound(bound, self)
        out = av + bv if self.op == "+" else av - bv
        return Values(kind, out, valid, s, bound)


def full_values(v: Values, n: int) -> np.ndarray:
    """``v.values`` as an array of ``n`` rows (a constant is broadcast; may be a strided view)."""
    vals = np.asarray(v.values)
    if vals.ndim == 0:
        return np.full(n, vals, dtype=vals.dtype)
    return vals


def _to_float(v: Values) -> np.ndarray:
    if v.kind == "float":
        return np.asarray(v.values, dtype=np.float64)
    out = v.values.astype(np.float64)
    if v.scale:
        out = out / float(10**v.scale)
    return out


@dataclass(frozen=True, eq=True)
class Negate(Arith):
    """``-operand``."""

    operand: Arith

    def __str__(self) -> str:
        return f"(-{self.operand})"

    def columns(self) -> set[str]:
        return self.operand.columns()

    def type_in(self, schema: pa.Schema, where: str = "expression") -> ValueType:
        t = self.operand.type_in(schema, where)
        if t.kind not in _NUMERIC:
            raise SchemaError(f"{where}: {self.operand} has type {t.arrow}; cannot negate")
        return t

    def _eval(self, batch: pa.RecordBatch, cache: dict[str, Values]) -> Values:
        v = self.operand.evaluate(batch, cache)
        return Values(v.kind, -v.values, v.valid, v.scale, v.bound)


def col(name: str) -> Column:
    """The column ``name`` as an expression."""
    return Column(name)


def lit(value: int | float | Decimal | str) -> Literal:
    """A literal; a string is read as an exact :class:`~decimal.Decimal` (``lit("0.05")``)."""
    if isinstance(value, str):
        return Literal(Decimal(value))
    return Literal(value)


def as_arith(value: Any) -> Arith:
    """An :class:`Arith` from an Arith, a column name/expression text, an Arrow expression or a literal."""
    if isinstance(value, Arith):
        return value
    if isinstance(value, bool):
        raise SchemaError(f"boolean {value} is not an arithmetic operand")
    if isinstance(value, int | float | Decimal):
        return Literal(value)
    if isinstance(value, str):
        return parse(value)
    if isinstance(value, pc.Expression):
        return parse(_arrow_text(value))
    raise SchemaError(f"cannot use {value!r} as an aggregate input (a column name or expression)")


_ARROW_FUNCS = {
    "add": "+",
    "add_checked": "+",
    "subtract": "-",
    "subtract_checked": "-",
    "multiply": "*",
    "multiply_checked": "*",
}


def _arrow_text(expr: pc.Expression) -> str:
    """Rewrite an Arrow expression's text (``multiply(a, subtract(1, b))``) as infix text."""
    text = str(expr)
    # Arrow prints field names bare and functions as name(args); turn calls into infix.
    tree = ast.parse(text, mode="eval")

    def infix(node: ast.AST) -> str:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            fn = node.func.id
            if fn in _ARROW_FUNCS and len(node.args) == 2:
                return f"({infix(node.args[0])} {_ARROW_FUNCS[fn]} {infix(node.args[1])})"
            if fn in ("negate", "negate_checked") and len(node.args) == 1:
                return f"(-{infix(node.args[0])})"
            raise SchemaError(f"Arrow function {fn!r} is not supported in an aggregate input")
        return ast.unparse(node)

    try:
        return infix(tree.body)
    except SyntaxError as exc:  # pragma: no cover - Arrow text is always parseable for + - *
        raise SchemaError(f"cannot read Arrow expression {text!r} as arithmetic") from exc


def parse(text: str) -> Arith:
    """Parse ``text`` (column names, numbers, ``+ - *``, parentheses) into an :class:`Arith`.

    Number literals are exact: ``0.05`` is the decimal 0.05, not a float. A column whose name is
    not an identifier can be quoted with backticks: ```my col` * 2``.
    """
    quoted: dict[str, str] = {}

    def quote(m: re.Match[str]) -> str:
        key = f"__q{len(quoted)}__"
        quoted[key] = m.group(1)
        return key

    src = re.sub(r"`([^`]*)`", quote, text)
    try:
        tree = ast.parse(src.strip(), mode="eval")
    except SyntaxError as exc:
        raise SchemaError(f"cannot parse aggregate input {text!r}: {exc.msg}") from exc

    def build(node: ast.AST) -> Arith:
        if isinstance(node, ast.Name):
            return Column(quoted.get(node.id, node.id))
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            if isinstance(node.value, bool):
                raise SchemaError(f"{text!r}: boolean literal in arithmetic")
            if isinstance(node.value, float):
                seg = ast.get_source_segment(src, node) or repr(node.value)
                return Literal(Decimal(seg))
            return Literal(node.value)
        if isinstance(node, ast.BinOp):
            ops = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}
            op = ops.get(type(node.op))
            if op is None:
                raise SchemaError(f"{text!r}: operator {type(node.op).__name__} is not supported")
            return BinaryOp(op, build(node.left), build(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            inner = build(node.operand)
            return Negate(inner) if isinstance(node.op, ast.USub) else inner
        raise SchemaError(f"{text!r}: {ast.unparse(node)!r} is not a column, number or + - *")

    return build(tree.body)
