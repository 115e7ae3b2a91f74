"""SQL text as statements: table definitions with watermarks and connectors, queries, EXPLAIN, SET.

DataFusion plans the queries; sqlglot parses what DataFusion does not: ``CREATE TABLE`` with a
``WATERMARK FOR col AS col - delay`` clause and ``WITH (connector = ...)`` options, the window
table functions ``TUMBLE(t, ts, size)``, ``HOP(t, ts, slide, size)`` and ``SESSION(t, ts, gap)``
(also written as Flink writes them, ``TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), size))``), and
``SET key = value``.

A window table function in ``FROM`` becomes a reference to a table that has the base table's
columns plus ``window_start`` and ``window_end`` (of the time column's type); the planner knows
it by its :class:`WindowTable` and maps what reads it onto a windowed operator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.tokens import Tokenizer, TokenType

from splice.core.errors import PlanError

__all__ = [
    "TableDef",
    "WindowTable",
    "QueryText",
    "Statement",
    "CreateTable",
    "InsertInto",
    "SelectQuery",
    "Explain",
    "SetOption",
    "parse_statements",
    "interval_in_units",
    "duration_in_units",
    "SETTINGS",
    "DIALECT",
]

#: sqlglot's dialect for what splice parses itself (it knows WATERMARK and WITH options)
DIALECT = "risingwave"
_WINDOW_FUNCTIONS = ("TUMBLE", "HOP", "SESSION")
#: SESSION(...) as sqlglot can parse it in FROM (it reads ``SESSION(a, b) x`` as column aliases)
_SESSION_CALL = "SESSION_WINDOW"

_UNIT_NANOS = {"NANOSECOND": 1, "MICROSECOND": 1_000, "MILLISECOND": 1_000_000,
               "SECOND": 1_000_000_000, "MINUTE": 60_000_000_000, "HOUR": 3_600_000_000_000,
               "DAY": 86_400_000_000_000, "WEEK": 7 * 86_400_000_000_000}
_TS_UNIT_NANOS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}


@dataclass(frozen=True)
class TableDef:
    """``CREATE TABLE name (columns, WATERMARK ...) WITH (options)``.

    ``schema`` is ``None`` when no column list was given (Parquet files carry their schema).
    ``watermark`` is ``(time column, delay expression)``; its delay becomes an integer in the
    column's units once the column's type is known (:meth:`watermark_delay`).
    """

    name: str
    schema: pa.Schema | None
    options: dict[str, str]
    watermark: tuple[str, Any] | None = None

    @property
    def connector(self) -> str:
        return self.options.get("connector", "file")

    @property
    def time_column(self) -> str | None:
        return self.watermark[0] if self.watermark is not None else None

    def watermark_delay(self, time_type: pa.DataType) -> int:
        """The watermark's bounded out-of-orderness in the time column's units."""
        assert self.watermark is not None
        column, delay = self.watermark
        return interval_in_units(delay, time_type, f"table {self.name!r}: WATERMARK FOR {column}")


@dataclass(frozen=True)
class WindowTable:
    """A window table function in ``FROM``: ``kind`` over ``table`` by ``time``."""

    alias: str  # the name DataFusion sees (a table of its own)
    kind: str  # "tumble", "hop" or "session"
    table: str
    time: str
    size: Any  # sqlglot expressions of the sizes, made integers by interval_in_units
    slide: Any = None
    gap: Any = None


@dataclass(frozen=True)
class QueryText:
    """A query as DataFusion reads it, with the window tables its FROM clauses named."""

    sql: str
    windows: tuple[WindowTable, ...] = ()
    hints: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CreateTable:
    table: TableDef


@dataclass(frozen=True)
class InsertInto:
    target: str
    query: QueryText


@dataclass(frozen=True)
class SelectQuery:
    query: QueryText


@dataclass(frozen=True)
class Explain:
    query: QueryText


@dataclass(frozen=True)
class SetOption:
    key: str
    value: str


Statement = CreateTable | InsertInto | SelectQuery | Explain | SetOption


#: what ``SET key = value`` may set
SETTINGS = ("state_ttl",)

_DURATION_UNITS = {"ns": "NANOSECOND", "us": "MICROSECOND", "ms": "MILLISECOND", "s": "SECOND",
                   "sec": "SECOND", "m": "MINUTE", "min": "MINUTE", "h": "HOUR", "d": "DAY"}


def duration_in_units(text: str, time_type: pa.DataType, where: str) -> int:
    """A duration written as ``'10s'``, ``'500 ms'``, ``'2 minutes'`` (or a bare integer, in the
    column's units) in the units of a time column of ``time_type``."""
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    if not m:
        raise PlanError(f"{where}: cannot read the duration {text!r} (e.g. '10s', '500 ms')")
    amount, unit = int(m.group(1)), m.group(2).lower()
    if not unit:
        return amount
    name = _DURATION_UNITS.get(unit) or unit.upper().rstrip("S")
    return interval_in_units(exp.Interval(this=exp.Literal.string(str(amount)),
                                          unit=exp.Var(this=name)), time_type, where)


def interval_in_units(value: Any, time_type: pa.DataType, where: str) -> int:
    """An integer or ``INTERVAL`` (a sqlglot expression or a Python int) in the units of a time
    column of ``time_type``: the value for integers, days for dates, the timestamp's unit."""
    if isinstance(value, int):
        return value
    if isinstance(value, exp.Paren):
        return interval_in_units(value.this, time_type, where)
    if isinstance(value, exp.Neg):
        return -interval_in_units(value.this, time_type, where)
    if isinstance(value, exp.Literal) and not value.is_string:
        try:
            return int(value.this)
        except ValueError:
            raise PlanError(f"{where}: {value.sql()} must be an integer") from None
    if isinstance(value, exp.Interval):
        text = value.this.name if isinstance(value.this, exp.Literal) else value.this.sql()
        unit = value.unit.name.upper() if value.unit is not None else ""
        m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(text))
        if not m:
            raise PlanError(f"{where}: cannot read the interval {value.sql()}")
        amount, unit = int(m.group(1)), (unit or m.group(2)).upper().rstrip("S") or "SECOND"
        if unit not in _UNIT_NANOS:
            raise PlanError(f"{where}: interval unit {unit} is not supported "
                            f"(one of {', '.join(_UNIT_NANOS)})")
        nanos = amount * _UNIT_NANOS[unit]
        if pa.types.is_timestamp(time_type):
            per = _TS_UNIT_NANOS[time_type.unit]
        elif pa.types.is_date(time_type):
            per = _UNIT_NANOS["DAY"]
        else:
            raise PlanError(f"{where}: an INTERVAL needs a TIMESTAMP or DATE time column; "
                            f"this one is {time_type} (give a number in its units)")
        if nanos % per:
            raise PlanError(f"{where}: {value.sql()} is not a whole number of the column's units")
        return nanos // per
    raise PlanError(f"{where}: expected an integer or an INTERVAL, got {value.sql()}")


# -- pieces of text ---------------------------------------------------------------------------

def _split(text: str) -> list[str]:
    """The statements of ``text``, cut at the semicolons between them (not inside strings)."""
    pieces, start = [], 0
    for tok in Tokenizer().tokenize(text):
        if tok.token_type == TokenType.SEMICOLON:
            pieces.append(text[start:tok.start])
            start = tok.end + 1
    pieces.append(text[start:])
    return [p.strip() for p in pieces if p.strip()]


def _flink_windows(text: str) -> str:
    """``TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), args))`` rewritten as ``TUMBLE(t, ts, args)``, and
    ``SESSION(`` as a call sqlglot parses in ``FROM``."""
    tokens = Tokenizer().tokenize(text)
    out, last, i = [], 0, 0

    def word(k: int) -> str:
        return tokens[k].text.upper() if k < len(tokens) else ""

    while i < len(tokens):
        if (word(i) == "TABLE" and word(i + 1) == "(" and word(i + 2) in _WINDOW_FUNCTIONS
                and word(i + 3) == "(" and word(i + 4) == "TABLE" and word(i + 6) == ","
                and word(i + 7) == "DESCRIPTOR" and word(i + 8) == "(" and word(i + 10) == ")"
                and word(i + 11) == ","):
            depth, j = 1, i + 12
            while j < len(tokens) and depth:
                depth += {"(": 1, ")": -1}.get(word(j), 0)
                j += 1
            if depth or word(j) != ")":
                raise PlanError(f"SQL: unbalanced {word(i + 2)}(...) near {text[tokens[i].start:][:60]!r}")
            args = text[tokens[i + 12].start:tokens[j - 1].start]
            out.append(text[last:tokens[i].start])
            fn = _SESSION_CALL if word(i + 2) == "SESSION" else word(i + 2)
            out.append(f"{fn}({tokens[i + 5].text}, {tokens[i + 9].text}, {args})")
            last = tokens[j].end + 1
            i = j + 1
            continue
        if word(i) == "SESSION" and word(i + 1) == "(" and (i == 0 or word(i - 1) != "."):
            out.append(text[last:tokens[i].start])
            out.append(_SESSION_CALL)
            last = tokens[i].end + 1
        i += 1
    out.append(text[last:])
    return "".join(out)


def _hints(text: str) -> dict[str, str]:
    """``/*+ NAME(args) */`` hints of a query, by upper-case name."""
    found = {}
    for body in re.findall(r"/\*\+(.*?)\*/", text, flags=re.S):
        for name, args in re.findall(r"([A-Za-z_]+)\s*\(([^)]*)\)", body):
            found[name.upper()] = args.strip()
    return found


# -- statements -------------------------------------------------------------------------------

_TYPES: dict[str, pa.DataType] = {
    "BIGINT": pa.int64(), "INT": pa.int32(), "INTEGER": pa.int32(), "SMALLINT": pa.int16(),
    "TINYINT": pa.int8(), "DOUBLE": pa.float64(), "FLOAT": pa.float32(), "REAL": pa.float32(),
    "BOOLEAN": pa.bool_(), "DATE": pa.date32(), "VARCHAR": pa.string(), "TEXT": pa.string(),
    "CHAR": pa.string(), "STRING": pa.string(), "NCHAR": pa.string(), "NVARCHAR": pa.string(),
    "DOUBLE PRECISION": pa.float64(),
}


def _arrow_type(dt: exp.DataType, where: str) -> pa.DataType:
    name = dt.this.name if hasattr(dt.this, "name") else str(dt.this)
    name = name.upper()
    params = [int(p.this.name if isinstance(p.this, exp.Literal) else p.name)
              for p in dt.expressions if isinstance(p, exp.DataTypeParam)]
    if name in ("DECIMAL", "NUMERIC"):
        precision, scale = (params + [38, 0][len(params):])[:2] if params else (38, 0)
        if len(params) == 1:
            scale = 0
        return pa.decimal128(precision, scale)
    if name in ("TIMESTAMP", "DATETIME", "TIMESTAMPTZ", "TIMESTAMPLTZ"):
        digits = params[0] if params else 6
        unit = "s" if digits == 0 else "ms" if digits <= 3 else "us" if digits <= 6 else "ns"
        return pa.timestamp(unit, tz="UTC" if name != "TIMESTAMP" and name != "DATETIME" else None)
    if name in _TYPES:
        return _TYPES[name]
    raise PlanError(f"{where}: type {dt.sql()} is not supported")


def _option_value(node: Any) -> str:
    if isinstance(node, exp.Literal):
        return str(node.this)
    return str(node.sql()).strip("'\"")


def _table_def(create: exp.Create) -> TableDef:
    target = create.this
    columns: list[pa.Field] = []
    watermark = None
    if isinstance(target, exp.Schema):
        table = target.this
        for item in target.expressions:
            if isinstance(item, exp.ColumnDef):
                where = f"table {table.name!r}: column {item.name!r}"
                kind = item.args.get("kind")
                if kind is None:
                    raise PlanError(f"{where} has no type")
                not_null = any(isinstance(c.kind, exp.NotNullColumnConstraint)
                               for c in item.args.get("constraints") or [])
                columns.append(pa.field(item.name, _arrow_type(kind, where), not not_null))
            elif isinstance(item, exp.WatermarkColumnConstraint):
                column = item.this.name
                expr = item.expression
                if isinstance(expr, exp.Column) and expr.name == column:
                    delay: Any = 0
                elif (isinstance(expr, exp.Sub) and isinstance(expr.this, exp.Column)
                      and expr.this.name == column):
                    delay = expr.expression
                else:
                    raise PlanError(f"table {table.name!r}: WATERMARK FOR {column} AS {expr.sql()}: "
                                    f"expected {column} or {column} - delay")
                watermark = (column, delay)
            else:
                raise PlanError(f"table {table.name!r}: {item.sql()} is not supported in CREATE TABLE")
    else:
        table = target
    options: dict[str, str] = {}
    props = create.args.get("properties")
    for prop in props.expressions if props is not None else []:
        if isinstance(prop, exp.FileFormatProperty):
            options["format"] = _option_value(prop.this).lower()
        elif isinstance(prop, exp.Property):
            key = prop.this.name if hasattr(prop.this, "name") else str(prop.this)
            options[str(key).strip("'\"").lower()] = _option_value(prop.args.get("value"))
        else:
            raise PlanError(f"table {table.name!r}: option {prop.sql()} is not supported")
    schema = pa.schema(columns) if columns else None
    if watermark is not None and schema is not None and watermark[0] not in schema.names:
        raise PlanError(f"table {table.name!r}: WATERMARK FOR {watermark[0]}: no such column")
    return TableDef(table.name, schema, options, watermark)


def _window_tables(select: exp.Expression, counter: list[int]) -> tuple[WindowTable, ...]:
    """Replace each window table function in ``select`` by a table reference; return them."""
    found = []
    for table in list(select.find_all(exp.Table)):
        fn = table.this
        if not isinstance(fn, exp.Anonymous):
            continue
        name = str(fn.this).upper()
        name = "SESSION" if name == _SESSION_CALL else name
        if name not in _WINDOW_FUNCTIONS:
            continue
        kind = name.lower()
        args = fn.expressions
        want = 4 if kind == "hop" else 3
        shapes = {"tumble": "TUMBLE(table, time_column, size)",
                  "hop": "HOP(table, time_column, slide, size)",
                  "session": "SESSION(table, time_column, gap)"}
        if len(args) != want or not isinstance(args[0], exp.Column | exp.Table) \
                or not isinstance(args[1], exp.Column):
            raise PlanError(f"SQL: {fn.sql()}: expected {shapes[kind]}")
        base, time = args[0].name, args[1].name
        counter[0] += 1
        alias = f"__{kind}_{base}_{counter[0]}"
        window = WindowTable(alias, kind, base, time,
                             size=args[2] if kind == "tumble" else args[3] if kind == "hop" else None,
                             slide=args[2] if kind == "hop" else None,
                             gap=args[2] if kind == "session" else None)
        found.append(window)
        visible = table.alias or base
        table.replace(exp.Table(this=exp.to_identifier(alias),
                                alias=exp.TableAlias(this=exp.to_identifier(visible))))
    return tuple(found)


def _query(text: str, counter: list[int]) -> tuple[Any, QueryText]:
    tree: Any = sqlglot.parse_one(text, read=DIALECT)
    windows = _window_tables(tree, counter)
    sql = tree.sql(dialect="postgres") if windows else text
    return tree, QueryText(sql, windows, _hints(text))


def parse_statements(text: str) -> list[Statement]:
    """The statements of ``text`` (separated by ``;``), each parsed."""
    out: list[Statement] = []
    counter = [0]
    for piece in _split(_flink_windows(text)):
        head = piece.split(None, 1)[0].upper()
        if head == "EXPLAIN":
            rest = piece.split(None, 1)[1] if len(piece.split(None, 1)) > 1 else ""
            if not rest.strip():
                raise PlanError("SQL: EXPLAIN needs a query")
            _, q = _query(rest, counter)
            out.append(Explain(q))
            continue
        try:
            tree = sqlglot.parse_one(piece, read=DIALECT)
        except sqlglot.errors.ParseError as exc:
            raise PlanError(f"SQL: cannot parse {piece[:80]!r}: {str(exc).splitlines()[0]}") from None
        if isinstance(tree, exp.Create):
            if str(tree.args.get("kind", "")).upper() != "TABLE":
                raise PlanError(f"SQL: only CREATE TABLE is supported, got {piece[:60]!r}")
            out.append(CreateTable(_table_def(tree)))
        elif isinstance(tree, exp.Insert):
            target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
            body = tree.expression
            windows = _window_tables(body, counter)
            sql = body.sql(dialect="postgres")
            out.append(InsertInto(target.name, QueryText(sql, windows, _hints(piece))))
        elif isinstance(tree, exp.Set):
            for item in tree.expressions:
                eq = item.this
                if not isinstance(eq, exp.EQ):
                    raise PlanError(f"SQL: expected SET key = value, got {item.sql()}")
                key = eq.this.name.lower()
                if key not in SETTINGS:
                    raise PlanError(f"SQL: SET {key}: unknown setting (one of {', '.join(SETTINGS)})")
                out.append(SetOption(key, _option_value(eq.expression)))
        elif isinstance(tree, exp.Query):
            _, q = _query(piece, counter)
            out.append(SelectQuery(q))
        else:
            raise PlanError(f"SQL: statement {piece[:60]!r} is not supported (CREATE TABLE, "
                            "INSERT INTO, SELECT, EXPLAIN and SET are)")
    return out
