"""DataFusion expressions as Arrow compute expressions that splice's Select and Project evaluate.

DataFusion parses, binds and types a query; this module turns the scalar expressions of its
logical plan into ``pyarrow.compute.Expression`` trees over the columns of splice's streams. A
column is found through ``resolve(relation, name)``, which the planner gives (a join renames the
right input's clashing columns, so DataFusion's qualified names and splice's names differ).

Semantics follow DataFusion's typing: ``/`` of two integers is integer division (truncating),
comparisons of mixed types compare after DataFusion's casts (they are explicit in its plan),
``LIKE`` is SQL's (``%`` and ``_``), a ``CASE`` without ``ELSE`` is null where nothing matched. An
expression this module does not know raises :class:`~splice.core.errors.PlanError` naming it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from splice.core.errors import PlanError

__all__ = ["to_arrow", "arrow_type", "literal_value", "Resolve", "unalias"]

#: ``resolve(relation, name)``: the expression of a column in splice's terms (relation ``None``
#: for an unqualified name)
Resolve = Callable[[str | None, str], pc.Expression]

_COMPARE = {"=": "equal", "!=": "not_equal", "<>": "not_equal", "<": "less",
            "<=": "less_equal", ">": "greater", ">=": "greater_equal"}
_ARITH = {"+": "add_checked", "-": "subtract_checked", "*": "multiply_checked",
          "/": "divide_checked", "%": "modulo_checked"}

_SIMPLE_TYPES = {
    "Int8": pa.int8(), "Int16": pa.int16(), "Int32": pa.int32(), "Int64": pa.int64(),
    "UInt8": pa.uint8(), "UInt16": pa.uint16(), "UInt32": pa.uint32(), "UInt64": pa.uint64(),
    "Float16": pa.float16(), "Float32": pa.float32(), "Float64": pa.float64(),
    "Utf8": pa.string(), "Utf8View": pa.string(), "LargeUtf8": pa.large_string(),
    "Boolean": pa.bool_(), "Date32": pa.date32(), "Date64": pa.date64(), "Null": pa.null(),
    "Binary": pa.binary(), "BinaryView": pa.binary(),
}
_UNITS = {"s": "s", "ms": "ms", "µs": "us", "us": "us", "ns": "ns", "Second": "s",
          "Millisecond": "ms", "Microsecond": "us", "Nanosecond": "ns"}


def arrow_type(text: str) -> pa.DataType:
    """The Arrow type that DataFusion prints as ``text`` (``Int64``, ``Decimal128(12, 2)``,
    ``Timestamp(ms)``, ``Timestamp(Millisecond, None)``)."""
    text = text.strip()
    if text in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[text]
    m = re.fullmatch(r"Decimal(128|256)\((\d+),\s*(-?\d+)\)", text)
    if m:
        make = pa.decimal128 if m.group(1) == "128" else pa.decimal256
        return make(int(m.group(2)), int(m.group(3)))
    m = re.fullmatch(r"Timestamp\((\w+|µs)(?:,\s*(?:None|Some\(\"?([^\")]*)\"?\)|\"?([^\")]*)\"?))?\)", text)
    if m and m.group(1) in _UNITS:
        tz = m.group(2) or m.group(3) or None
        return pa.timestamp(_UNITS[m.group(1)], tz=tz)
    raise PlanError(f"SQL: type {text} is not supported")


def _cast_target(expr: Any) -> pa.DataType:
    m = re.search(r" AS (.+)\)$", expr.canonical_name())
    if not m:
        raise PlanError(f"SQL: cannot read the target type of {expr.canonical_name()}")
    return arrow_type(m.group(1))


def literal_value(expr: Any) -> Any:
    """The Python value of a DataFusion literal (``None`` for NULL)."""
    value = expr.python_value()
    return value.as_py() if isinstance(value, pa.Scalar) else value


def _literal(expr: Any, own_digits: bool = False) -> pc.Expression:
    """A literal as an Arrow scalar of DataFusion's type (so a comparison with a column of that
    type casts nothing); ``own_digits``: a decimal keeps only the digits it has, for arithmetic,
    where Arrow sizes a result's precision by its operands' and 38 digits is the limit."""
    value = expr.python_value()
    if isinstance(value, pa.Scalar):
        if pa.types.is_string_view(value.type):
            value = pa.scalar(value.as_py(), pa.string())
        elif own_digits and pa.types.is_decimal(value.type) and value.is_valid:
            value = pa.scalar(value.as_py())
        return pc.scalar(value)
    return pc.scalar(value)


def unalias(expr: Any) -> Any:
    """``expr`` without its ``AS name`` wrappers."""
    while expr.variant_name() == "Alias":
        expr = expr.to_variant().expr()
    return expr


def _like_regex(pattern: str) -> str:
    out = []
    for ch in pattern:
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
    return "^" + "".join(out) + "$"


def _like(pattern: str, operand: pc.Expression, negated: bool) -> pc.Expression:
    if "%" not in pattern.strip("%") and "_" not in pattern:
        inner = pattern.strip("%")
        starts, ends = pattern.startswith("%"), pattern.endswith("%")
        if starts and ends and inner:
            hit = pc.match_substring(operand, inner)
        elif ends and not starts:
            hit = pc.starts_with(operand, inner)
        elif starts and not ends:
            hit = pc.ends_with(operand, inner)
        else:
            hit = pc.match_substring_regex(operand, _like_regex(pattern))
    else:
        hit = pc.match_substring_regex(operand, _like_regex(pattern))
    return pc.invert(hit) if negated else hit


def _interval_days_nanos(value: Any) -> tuple[int, int, int]:
    if hasattr(value, "months"):
        return int(value.months), int(value.days), int(value.nanoseconds)
    raise PlanError(f"SQL: interval {value!r} is not supported")


def _call(name: str, args: list[pc.Expression]) -> pc.Expression:
    return pc.Expression._call(name, args)


_FUNCTIONS: dict[str, Callable[[list[pc.Expression]], pc.Expression]] = {
    "abs": lambda a: _call("abs_checked", a),
    "floor": lambda a: _call("floor", a),
    "ceil": lambda a: _call("ceil", a),
    "sqrt": lambda a: _call("sqrt", a),
    "ln": lambda a: _call("ln", a),
    "exp": lambda a: _call("exp", a),
    "lower": lambda a: _call("utf8_lower", a),
    "upper": lambda a: _call("utf8_upper", a),
    "length": lambda a: _call("utf8_length", a),
    "character_length": lambda a: _call("utf8_length", a),
    "char_length": lambda a: _call("utf8_length", a),
    "trim": lambda a: _call("utf8_trim_whitespace", a),
    "btrim": lambda a: _call("utf8_trim_whitespace", a),
    "ltrim": lambda a: _call("utf8_ltrim_whitespace", a),
    "rtrim": lambda a: _call("utf8_rtrim_whitespace", a),
    "coalesce": lambda a: _call("coalesce", a),
    "power": lambda a: _call("power_checked", a),
    "pow": lambda a: _call("power_checked", a),
    "signum": lambda a: _call("sign", a),
}


class _Translator:
    def __init__(self, resolve: Resolve, types: Callable[[str], pa.DataType] | None) -> None:
        self.resolve = resolve
        self.types = types

    def type_of(self, column: str) -> pa.DataType | None:
        return self.types(column) if self.types is not None else None

    def __call__(self, expr: Any) -> pc.Expression:
        kind = expr.variant_name()
        method = getattr(self, f"_{kind}", None)
        if method is None:
            raise PlanError(f"SQL: the expression {expr.canonical_name()} ({kind}) is not supported")
        return method(expr)

    # -- leaves --
    def _Column(self, expr: Any) -> pc.Expression:
        v = expr.to_variant()
        return self.resolve(v.relation(), v.name())

    def _Literal(self, expr: Any) -> pc.Expression:
        return _literal(expr)

    def _Alias(self, expr: Any) -> pc.Expression:
        return self(expr.to_variant().expr())

    # -- operators --
    def _BinaryExpr(self, expr: Any) -> pc.Expression:
        v = expr.to_variant()
        op = v.op()
        left, right = v.left(), v.right()
        if op in ("+", "-") and unalias(right).variant_name() == "Literal":
            value = unalias(right).python_value()
            if isinstance(value, pa.MonthDayNanoIntervalScalar):
                return self._shift(left, value.as_py(), 1 if op == "+" else -1, expr)
        if op == "+" and unalias(left).variant_name() == "Literal":
            value = unalias(left).python_value()
            if isinstance(value, pa.MonthDayNanoIntervalScalar):
                return self._shift(right, value.as_py(), 1, expr)
        if op in _ARITH:
            a, b = (_literal(unalias(e), own_digits=True) if unalias(e).variant_name() == "Literal"
                    else self(e) for e in (left, right))
            return _call(_ARITH[op], [a, b])
        a, b = self(left), self(right)
        if op in _COMPARE:
            return _call(_COMPARE[op], [a, b])
        if op == "AND":
            return _call("and_kleene", [a, b])
        if op == "OR":
            return _call("or_kleene", [a, b])
        if op == "||" or op == "StringConcat":
            return _call("binary_join_element_wise", [a, b, pc.scalar("")])
        if op in ("IS DISTINCT FROM", "IS NOT DISTINCT FROM"):
            same = _call("or_kleene", [_call("and_kleene", [_call("is_null", [a]), _call("is_null", [b])]),
                                       _call("coalesce", [_call("equal", [a, b]), pc.scalar(False)])])
            return same if op == "IS NOT DISTINCT FROM" else _call("invert", [same])
        raise PlanError(f"SQL: the operator {op} in {expr.canonical_name()} is not supported")

    def _shift(self, operand: Any, interval: Any, sign: int, expr: Any) -> pc.Expression:
        """``operand ± INTERVAL`` of days and smaller units; a date plus whole days stays a date."""
        months, days, nanos = _interval_days_nanos(interval)
        if months:
            raise PlanError(f"SQL: {expr.canonical_name()}: intervals of months or years are not "
                            "supported")
        shifted = _call("add_checked", [self(operand), pc.scalar(
            pa.scalar(sign * (days * 86_400_000_000_000 + nanos), pa.duration("ns")))])
        base = unalias(operand)
        if base.variant_name() == "Column":
            column = self.resolve(base.to_variant().relation(), base.to_variant().name())
            t = self.type_of(str(column))
            if t is not None and pa.types.is_date(t):
                if nanos:
                    raise PlanError(f"SQL: {expr.canonical_name()}: a date moves by whole days")
                shifted = _call("add_checked", [column.cast(pa.timestamp("s")), pc.scalar(
                    pa.scalar(sign * days * 86_400, pa.duration("s")))]).cast(t)
        return shifted

    def _Not(self, expr: Any) -> pc.Expression:
        return _call("invert", [self(expr.to_variant().expr())])

    def _Negative(self, expr: Any) -> pc.Expression:
        return _call("negate_checked", [self(expr.to_variant().expr())])

    def _IsNull(self, expr: Any) -> pc.Expression:
        return _call("is_null", [self(expr.to_variant().expr())])

    def _IsNotNull(self, expr: Any) -> pc.Expression:
        return _call("is_valid", [self(expr.to_variant().expr())])

    def _IsTrue(self, expr: Any) -> pc.Expression:
        return _call("coalesce", [self(expr.to_variant().expr()), pc.scalar(False)])

    def _IsFalse(self, expr: Any) -> pc.Expression:
        return _call("coalesce", [_call("invert", [self(expr.to_variant().expr())]), pc.scalar(False)])

    def _Between(self, expr: Any) -> pc.Expression:
        v = expr.to_variant()
        x = self(v.expr())
        inside = _call("and_kleene", [_call("greater_equal", [x, self(v.low())]),
                                      _call("less_equal", [x, self(v.high())])])
        return _call("invert", [inside]) if v.negated() else inside

    def _InList(self, expr: Any) -> pc.Expression:
        v = expr.to_variant()
        x = self(v.expr())
        items = [self(e) for e in v.list()]
        if not items:
            hit = pc.scalar(False)
        else:
            hit = _call("equal", [x, items[0]])
            for item in items[1:]:
                hit = _call("or_kleene", [hit, _call("equal", [x, item])])
        return _call("invert", [hit]) if v.negated() else hit

    def _Like(self, expr: Any) -> pc.Expression:
        v = expr.to_variant()
        pattern = unalias(v.pattern())
        if pattern.variant_name() != "Literal":
            raise PlanError(f"SQL: {expr.canonical_name()}: LIKE needs a constant pattern")
        if v.escape_char() not in (None, ""):
            raise PlanError(f"SQL: {expr.canonical_name()}: LIKE ... ESCAPE is not supported")
        return _like(str(literal_value(pattern)), self(v.expr()), bool(v.negated()))

    def _Case(self, expr: Any) -> pc.Expression:
        v = expr.to_variant()
        base = v.expr()
        conds, values = [], []
        for when, then in v.when_then_expr():
            c = self(when)
            if base is not None:
                c = _call("equal", [self(base), c])
            conds.append(_call("coalesce", [c, pc.scalar(False)]))
            values.append(self(then))
        other = v.else_expr()
        fallback = self(other) if other is not None else None
        out = fallback
        for c, value in zip(reversed(conds), reversed(values), strict=True):
            out = _call("if_else", [c, value, out if out is not None else pc.scalar(None)])
        assert out is not None
        return out

    def _Cast(self, expr: Any) -> pc.Expression:
        target = _cast_target(expr)
        if pa.types.is_null(target):
            return pc.scalar(None)
        return self(expr.to_variant().expr()).cast(target)

    def _TryCast(self, expr: Any) -> pc.Expression:
        raise PlanError(f"SQL: {expr.canonical_name()}: TRY_CAST is not supported; use CAST")

    def _ScalarFunction(self, expr: Any) -> pc.Expression:
        name = expr.rex_call_operator()
        args = list(expr.rex_call_operands())
        if name == "date_part":
            part = str(literal_value(unalias(args[0]))).lower()
            fn = {"year": "year", "month": "month", "day": "day", "hour": "hour",
                  "minute": "minute", "second": "second", "dow": "day_of_week",
                  "doy": "day_of_year", "quarter": "quarter", "week": "iso_week"}.get(part)
            if fn is None:
                raise PlanError(f"SQL: EXTRACT({part.upper()} ...) is not supported")
            return _call(fn, [self(args[1])])
        if name == "round":
            digits = int(literal_value(unalias(args[1]))) if len(args) > 1 else 0
            return _call("round", [self(args[0])]) if digits == 0 else pc.round(self(args[0]), digits)
        if name in ("substr", "substring"):
            start = int(literal_value(unalias(args[1])))
            length = int(literal_value(unalias(args[2]))) if len(args) > 2 else None
            stop = None if length is None else start - 1 + length
            return pc.utf8_slice_codeunits(self(args[0]), start - 1, stop)
        if name == "nullif":
            a, b = self(args[0]), self(args[1])
            return _call("if_else", [_call("coalesce", [_call("equal", [a, b]), pc.scalar(False)]),
                                     pc.scalar(None), a])
        make = _FUNCTIONS.get(name)
        if make is None:
            raise PlanError(f"SQL: the function {name}() in {expr.canonical_name()} is not supported")
        return make([self(a) for a in args])


def to_arrow(expr: Any, resolve: Resolve, types: Callable[[str], pa.DataType] | None = None
             ) -> pc.Expression:
    """``expr`` (a DataFusion ``Expr``) as an Arrow compute expression over splice's columns."""
    return _Translator(resolve, types)(expr)

