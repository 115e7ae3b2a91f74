"""Read a query's input files (Parquet, CSV, JSON lines) into Arrow, every row accounted for.

Semantics: ``read_input(path, name)`` is the file's rows in file order with the file's types, where
every row of the file is either returned or *bad*. A row is bad when it does not parse (a CSV row
with the wrong number of fields, a JSON line that is not an object), when a value does not parse
as its column's type (``abc`` in an ``int64`` column, ``2024-13-45`` in a timestamp column), or,
with ``time_column``, when its time is null. The policy decides what happens to bad rows:
``"fail"`` raises :class:`~splice.core.errors.SchemaError` naming the input, the file, the row,
the column, the value and the reason; ``"dead_letter"`` hands each one, with its reason, to a
:class:`~splice.io.bad_input.DeadLetterSink`. So ``returned rows + dead letters = rows``.

Types. A declared ``schema`` is used as given: its columns, in its order, with its types. Without
one, CSV types are inferred from the file's first rows (10,000 rows, at most 1 MiB), never from
the whole file, so that one bad value late in a column cannot turn the column into strings; a
column whose values there are integers (numbers, times) but for at most 1% of them takes that
type too, the others being bad rows (a column empty in those rows is read as strings). Parquet keeps the file's types. JSON lines take
Arrow's inference over the whole file when it reads cleanly; otherwise, and in :func:`iter_input`,
the fields and types of the first clean lines, and a later line with a field of its own is bad.
View types (``string_view``, ``binary_view``) become plain ones and schema metadata is dropped.

Algorithm. The fast path is one multithreaded Arrow read of the whole file with explicit types;
on a clean file it is the only read. Only when it raises (or finds a null time) does the error
path run, which never loops in Python over all rows:

- CSV: the file is read again, serially, with every column as raw bytes; Arrow's
  ``invalid_row_handler`` records each row with the wrong number of fields together with its
  row number. Each column is then converted with the CSV reader's own rules; a column that fails
  is searched by bisection over slices (a slice that converts is good, one that fails is split),
  so the cost is about ``bad rows * log2(rows)`` conversions of ever smaller slices.
- JSON lines: the file is cut at newlines into blocks; a block that parses is good, one that
  does not is split by lines, down to the single bad lines.
- Parquet: a file Arrow cannot read, or one whose columns drift from the declared schema, is an
  error; only null times are bad rows.

Positions. CSV bad rows are reported by *data row*: 1-based, the header excluded, blank lines
not counted, a quoted field with newlines counted once (Arrow's own row count). JSON lines are
reported by their 1-based *line* in the file, Parquet rows by their 1-based *row*. Dead-lettered
records are the raw text: the line as Arrow saw it for a CSV row with the wrong number of
fields, the row's fields joined again as CSV for a CSV row with a bad value, the line itself for
JSON lines, the row as JSON for Parquet.

:func:`iter_input` is the same reader a batch at a time, for inputs too large to hold.

>>> import tempfile, pathlib
>>> from splice.io.bad_input import DeadLetterSink
>>> path = pathlib.Path(tempfile.mkdtemp()) / "left.csv"
>>> _ = path.write_text("k,ts\\n1,10\\n2,abc\\n3,30,7\\n4,40\\n")
>>> schema = pa.schema([("k", pa.int64()), ("ts", pa.int64())])
>>> sink = DeadLetterSink()
>>> read_input(path, "left", schema=schema, policy="dead_letter", sink=sink).to_pydict()
{'k': [1, 4], 'ts': [10, 40]}
>>> sink.counts
{'column ts: not a valid int64': 1, 'malformed CSV row': 1}
>>> read_input(path, "left", schema=schema)  # doctest: +ELLIPSIS
Traceback (most recent call last):
splice.core.errors.SchemaError: input 'left' (...left.csv), data row 2: column 'ts': 'abc' is not a valid int64 (use ...)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from splice.core.errors import InternalError, PlanError, SchemaError
from splice.core.stream import normalize_schema
from splice.runtime.sinks import write_table

if TYPE_CHECKING:
    from splice.io.bad_input import BadInputPolicy, DeadLetterSink

__all__ = ["iter_input", "read_input", "read_table", "rebatch", "write_table"]

#: File formats by suffix.
FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}

# CSV types are inferred from the first rows: this many lines after the header, at most this many bytes
_INFER_ROWS = 10_000
_INFER_BYTES = 1 << 20
# rows per slice at the first step of the bisection (a slice that converts is not split)
_CHECK_ROWS = 65_536
# bytes of JSON lines parsed at once on the error path and by iter_input
_JSON_BLOCK = 4 << 20
# a value shown in an error message is cut to this many characters
_SHOW = 40
# what may go wrong reading or converting a file's content (not its absence: that is checked first)
_READ_ERRORS = (pa.ArrowException, UnicodeDecodeError)

_CSV_DEFAULTS = pacsv.ConvertOptions()
_CSV_NULLS = pa.array(_CSV_DEFAULTS.null_values, pa.string())
_CSV_TRUE = pa.array(_CSV_DEFAULTS.true_values, pa.string())
_CSV_FALSE = pa.array(_CSV_DEFAULTS.false_values, pa.string())


# ----------------------------------------------------------------------------------------------
# the input, its bad rows and their routing


@dataclass(frozen=True)
class _InputFile:
    path: Path
    name: str
    fmt: str

    def where(self) -> str:
        return f"input {self.name!r} ({self.path})"


@dataclass(frozen=True)
class _BadRow:
    position: int  # 1-based, in ``unit``
    unit: str  # "data row" (CSV), "line" (JSON lines) or "row" (Parquet)
    reason: str  # what the sink counts
    detail: str  # what the error message says
    record: str  # what the sink keeps


def _open(path: str | Path, name: str, policy: BadInputPolicy, sink: DeadLetterSink | None) -> _InputFile:
    from splice.io.bad_input import check_policy

    check_policy(policy)
    p = Path(path)
    fmt = FORMATS.get(p.suffix.lower())
    if fmt is None:
        raise PlanError(f"input {name!r} ({p}): unknown format {p.suffix!r} "
                        f"(use {', '.join(FORMATS)})")
    if not p.exists():
        raise PlanError(f"input {name!r} ({p}): the file does not exist")
    if policy == "dead_letter" and sink is None:
        raise PlanError(f"input {name!r} ({p}): the dead-letter policy needs a dead-letter sink")
    return _InputFile(p, name, fmt)


def _show(value: object) -> str:
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    text = text.rstrip("\r\n")
    return repr(text if len(text) <= _SHOW else text[: _SHOW - 3] + "...")


def _route(src: _InputFile, bad: list[_BadRow], policy: BadInputPolicy, sink: DeadLetterSink | None) -> None:
    """Raise for the first of ``bad`` (policy ``fail``) or hand them all to ``sink``."""
    if not bad:
        return
    bad = sorted(bad, key=lambda b: b.position)
    if policy == "fail":
        first = bad[0]
        raise SchemaError(f"{src.where()}, {first.unit} {first.position}: {first.detail} "
                          "(use --bad-input dead-letter to route bad rows instead)")
    if sink is None:
        raise InternalError(f"{src.where()}: dead-letter policy without a sink")
    by_reason: dict[str, list[str]] = {}
    for b in bad:
        by_reason.setdefault(b.reason, []).append(b.record)
    for reason, records in by_reason.items():
        sink.add(src.name, reason, records)


def _plain(data: pa.Table) -> pa.Table:
    target = normalize_schema(data.schema)
    if target != data.schema:
        data = data.cast(target)
    return data.replace_schema_metadata(None)


def _plain_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    target = normalize_schema(batch.schema)
    if target != batch.schema:
        batch = batch.cast(target)
    return batch.replace_schema_metadata(None)


def _require_time(src: _InputFile, schema: pa.Schema, time_column: str | None) -> None:
    if time_column is not None and time_column not in schema.names:
        raise SchemaError(f"{src.where()}: time column {time_column!r} is missing "
                          f"(columns: {', '.join(schema.names)})")


def _time_nulls(data: pa.Table | pa.RecordBatch, time_column: str | None) -> np.ndarray | None:
    """Positions of null times, or None when there are none."""
    if time_column is None:
        return None
    col = data.column(time_column)
    if not col.null_count:
        return None
    return np.flatnonzero(np.asarray(pc.is_null(col)))


def _null_time_rows(src: _InputFile, data: pa.Table | pa.RecordBatch, positions: np.ndarray,
                    time_column: str, first_row: int) -> list[_BadRow]:
    from splice.io.bad_input import rows_json

    mask = np.zeros(data.num_rows, bool)
    mask[positions] = True
    records = rows_json(data, mask)
    return [_BadRow(int(first_row + i + 1), "row", f"null time column {time_column}",
                    f"time column {time_column!r} is null", r) for i, r in zip(positions, records, strict=True)]


# ----------------------------------------------------------------------------------------------
# public API


def read_input(path: str | Path, name: str, *, schema: pa.Schema | None = None,
               time_column: str | None = None, policy: BadInputPolicy = "fail",
               sink: DeadLetterSink | None = None) -> pa.Table:
    """The rows of input ``name`` read from ``path`` (``.parquet``/``.pq``, ``.csv``,
    ``.jsonl``/``.ndjson``), in file order; bad rows fail or go to ``sink`` (see the module doc).

    ``schema``: the columns and types to read (missing columns, or Parquet columns of another
    type, are a :class:`~splice.core.errors.SchemaError`). ``time_column``: a null time is a bad
    row. Raises :class:`~splice.core.errors.PlanError` for a missing file or an unknown suffix.
    """
    src = _open(path, name, policy, sink)
    if src.fmt == "parquet":
        return _parquet_read(src, schema, time_column, policy, sink)
    if src.fmt == "csv":
        return _csv_read(src, schema, time_column, policy, sink)
    return _json_read(src, schema, time_column, policy, sink)


def iter_input(path: str | Path, name: str, *, batch_size: int, schema: pa.Schema | None = None,
               time_column: str | None = None, policy: BadInputPolicy = "fail",
               sink: DeadLetterSink | None = None) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """:func:`read_input` a batch at a time: ``(schema, batches)``, the good rows in file order as
    batches of exactly ``batch_size`` rows (the last one may be shorter).

    Streams with Arrow's readers (``pyarrow.csv.open_csv`` with the same explicit types,
    ``ParquetFile.iter_batches``, JSON lines a block at a time), so memory stays about a block.
    The file is opened and its schema settled at once; bad rows are met while iterating, where
    the policy applies to them as in :func:`read_input` (``fail`` raises from the iterator).
    A CSV stream that meets a bad row starts over on the error path, skipping the rows it has
    already passed on.
    """
    if batch_size < 1:
        raise PlanError(f"input {name!r}: batch size must be >= 1, got {batch_size}")
    src = _open(path, name, policy, sink)
    if src.fmt == "parquet":
        out_schema, batches = _parquet_batches(src, schema, time_column, policy, sink, batch_size)
    elif src.fmt == "csv":
        out_schema, batches = _csv_batches(src, schema, time_column, policy, sink)
    else:
        out_schema, batches = _json_batches(src, schema, time_column, policy, sink)
    return out_schema, rebatch(batches, batch_size)


def read_table(path: str | Path) -> pa.Table:
    """Read a ``.parquet``, ``.csv`` or JSON-lines file whole; any bad row fails (named after the
    file's stem). :func:`read_input` with its defaults."""
    return read_input(path, Path(path).stem)


def rebatch(batches: Iterable[pa.RecordBatch], batch_size: int) -> Iterator[pa.RecordBatch]:
    """``batches`` cut and joined into batches of exactly ``batch_size`` rows (the last one may
    be shorter), in order, empty ones dropped. Slices are zero-copy; only a batch made of pieces
    of several input batches is concatenated."""
    pending: list[pa.RecordBatch] = []
    held = 0
    for b in batches:
        off = 0
        if held:
            piece = b.slice(0, batch_size - held)
            pending.append(piece)
            held += piece.num_rows
            off = piece.num_rows
            if held < batch_size:
                continue
            yield pa.concat_batches(pending)
            pending, held = [], 0
        while b.num_rows - off >= batch_size:
            yield b.slice(off, batch_size)
            off += batch_size
        if off < b.num_rows:
            pending, held = [b.slice(off)], b.num_rows - off
    if held:
        yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)


# ----------------------------------------------------------------------------------------------
# Parquet


def _parquet_file(src: _InputFile, declared: pa.Schema | None) -> tuple[pq.ParquetFile, list[str] | None]:
    """The open file and the columns to read; schema drift against ``declared`` is an error."""
    try:
        pf = pq.ParquetFile(src.path)
        have = normalize_schema(pf.schema_arrow)
    except _READ_ERRORS as exc:
        raise SchemaError(f"{src.where()}: not a readable Parquet file: {exc}") from exc
    if declared is None:
        return pf, None
    for f in normalize_schema(declared):
        problem = None
        if f.name not in have.names:
            problem = f"column {f.name!r} is missing (schema drift; the file has {', '.join(have.names)})"
        elif have.field(f.name).type != f.type:
            problem = (f"column {f.name!r} is {have.field(f.name).type} in the file, declared {f.type} "
                       "(schema drift)")
        if problem is not None:
            pf.close()
            raise SchemaError(f"{src.where()}: {problem}")
    return pf, list(declared.names)


def _parquet_read(src: _InputFile, declared: pa.Schema | None, time_column: str | None,
                  policy: BadInputPolicy, sink: DeadLetterSink | None) -> pa.Table:
    pf, columns = _parquet_file(src, declared)
    try:
        table = _plain(pf.read(columns=columns, use_threads=True))
    except _READ_ERRORS as exc:
        raise SchemaError(f"{src.where()}: not a readable Parquet file: {exc}") from exc
    finally:
        pf.close()
    _require_time(src, table.schema, time_column)
    nulls = _time_nulls(table, time_column)
    if nulls is None:
        return table
    assert time_column is not None
    _route(src, _null_time_rows(src, table, nulls, time_column, 0), policy, sink)
    keep = np.ones(table.num_rows, bool)
    keep[nulls] = False
    return table.filter(pa.array(keep))


def _parquet_batches(src: _InputFile, declared: pa.Schema | None, time_column: str | None,
                     policy: BadInputPolicy, sink: DeadLetterSink | None,
                     batch_size: int) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    pf, columns = _parquet_file(src, declared)
    schema = normalize_schema(pf.schema_arrow)
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns])
    _require_time(src, schema, time_column)

    def batches() -> Iterator[pa.RecordBatch]:
        first = 0
        try:
            it = pf.iter_batches(batch_size=batch_size, columns=columns, use_threads=True)
            for raw in it:
                b = _plain_batch(raw)
                nulls = _time_nulls(b, time_column)
                if nulls is not None:
                    assert time_column is not None
                    _route(src, _null_time_rows(src, b, nulls, time_column, first), policy, sink)
                    keep = np.ones(b.num_rows, bool)
                    keep[nulls] = False
                    first += b.num_rows
                    b = b.filter(pa.array(keep))
                else:
                    first += b.num_rows
                yield b
        except _READ_ERRORS as exc:
            raise SchemaError(f"{src.where()}: not a readable Parquet file: {exc}") from exc
        finally:
            pf.close()

    return schema, batches()


# ----------------------------------------------------------------------------------------------
# CSV: the fast path


@contextmanager
def undecodable_rows_unprinted() -> Iterator[None]:
    """Arrow decodes a malformed CSV row's text before it calls the invalid-row handler; for a
    row that is not UTF-8 that raises inside the callback, which Python would print as
    "Exception ignored ... UnicodeDecodeError". The read then fails with a parse error naming the
    row, and that error is what the user sees, once."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, UnicodeDecodeError):
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def _csv_header(src: _InputFile) -> pa.Schema:
    """The header's columns with the types Arrow infers from the first rows: the first
    ``_INFER_ROWS`` lines after the header, at most ``_INFER_BYTES`` bytes (the read costs about
    a thirtieth of reading a million rows, so the fast path stays as fast as a plain read)."""
    with undecodable_rows_unprinted():
        return _csv_inferred(src)


def _csv_inferred(src: _InputFile) -> pa.Schema:
    skip_bad = pacsv.ParseOptions(invalid_row_handler=lambda _: "skip")
    with open(src.path, "rb") as f:
        head = f.read(_INFER_BYTES)
    newlines = np.flatnonzero(np.frombuffer(head, np.uint8) == 10)
    cut = int(newlines[_INFER_ROWS]) + 1 if len(newlines) > _INFER_ROWS else \
        int(newlines[-1]) + 1 if len(head) == _INFER_BYTES and len(newlines) else len(head)
    sample = pa.py_buffer(head)[:cut]
    try:
        inferred = pacsv.read_csv(pa.BufferReader(sample), parse_options=skip_bad,
                                  read_options=pacsv.ReadOptions(use_threads=True,
                                                                 block_size=1 << 16)).schema
    except _READ_ERRORS:
        pass  # a prefix Arrow cannot read (a quoted field cut, say): its streaming reader decides
    else:
        return _majority_types(sample, inferred)
    try:
        reader = pacsv.open_csv(src.path, read_options=pacsv.ReadOptions(use_threads=False),
                                parse_options=skip_bad)
    except _READ_ERRORS as exc:
        raise SchemaError(f"{src.where()}: cannot read the CSV header: {exc}") from exc
    try:
        return reader.schema
    finally:
        reader.close()


#: what a value of the first rows looks like when it is an integer, a number or a time
_SHAPES = (r"^\s*[-+]?\d+\s*$",
           r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$",
           r"^\s*\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[-+]\d{2}:?\d{2})?)?\s*$")
#: of a column's non-empty values in the first rows, at most this share may fail to have the
#: shape the rest share for the column to take the type of the rest (they are then bad rows)
_STRAY = 0.01


def _majority_types(sample: pa.Buffer, inferred: pa.Schema) -> pa.Schema:
    """``inferred`` with each column Arrow read as strings only because a few of its values in
    the first rows are malformed (``abc`` among integers) given the type of the rest: those
    values are bad rows of that type, not evidence that the column holds text."""
    text = [f.name for f in inferred if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    if not text:
        return inferred
    raw = pacsv.read_csv(
        pa.BufferReader(sample), parse_options=pacsv.ParseOptions(invalid_row_handler=lambda _: "skip"),
        convert_options=pacsv.ConvertOptions(column_types={c: pa.string() for c in text},
                                             include_columns=text, strings_can_be_null=True))
    fields = {f.name: f for f in inferred}
    for name in text:
        col = raw.column(name).drop_null()
        n = len(col)
        if n == 0:
            continue
        for shape in _SHAPES:
            fits = pc.match_substring_regex(col, shape)
            good = int(pc.sum(fits).as_py() or 0)
            if good == n or good < n * (1 - _STRAY):
                continue
            values = col.filter(fits)
            # Arrow's own inference on the values that have the shape
            body = pa.py_buffer(("v\n" + "\n".join(values.to_pylist()) + "\n").encode())
            typ = pacsv.read_csv(pa.BufferReader(body)).schema.field("v").type
            if not pa.types.is_string(typ):
                fields[name] = pa.field(name, typ)
                break
    return pa.schema([fields[f.name] for f in inferred])


def _csv_types(src: _InputFile, header: pa.Schema, declared: pa.Schema | None,
               time_column: str | None) -> dict[str, pa.DataType]:
    """The column types to read with: the declared ones, or those inferred from the first rows
    (a column empty there is read as strings, the time column as integers)."""
    if declared is None:
        return {f.name: (pa.int64() if f.name == time_column else pa.string())
                if pa.types.is_null(f.type) else f.type for f in header}
    types = {}
    for f in declared:
        if f.name not in header.names:
            raise SchemaError(f"{src.where()}: column {f.name!r} is missing (schema drift; the file "
                              f"has {', '.join(header.names)})")
        try:  # a type the CSV reader cannot produce fails here, not on every row
            _csv_converter(f.type)(pa.array([b""], pa.binary()))
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise SchemaError(f"{src.where()}: column {f.name!r}: CSV values cannot be read as "
                              f"{f.type}: {exc}") from exc
        except pa.ArrowInvalid:
            pass
        types[f.name] = f.type
    return types


def _csv_read(src: _InputFile, declared: pa.Schema | None, time_column: str | None,
              policy: BadInputPolicy, sink: DeadLetterSink | None) -> pa.Table:
    header = _csv_header(src)
    types = _csv_types(src, header, declared, time_column)
    schema = pa.schema(list(types.items()))
    _require_time(src, schema, time_column)
    options = pacsv.ConvertOptions(column_types=types, include_columns=list(types))
    try:
        table = pacsv.read_csv(src.path, read_options=pacsv.ReadOptions(use_threads=True),
                               convert_options=options)
    except _READ_ERRORS:
        table = None
    if table is not None and _time_nulls(table, time_column) is None:
        return table
    checked = _csv_checked(src, header, types, time_column, policy, sink, skip=0)
    return pa.Table.from_batches(list(checked), schema=schema)


def _csv_batches(src: _InputFile, declared: pa.Schema | None, time_column: str | None,
                 policy: BadInputPolicy, sink: DeadLetterSink | None
                 ) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    header = _csv_header(src)
    types = _csv_types(src, header, declared, time_column)
    schema = pa.schema(list(types.items()))
    _require_time(src, schema, time_column)

    def batches() -> Iterator[pa.RecordBatch]:
        passed = 0  # rows passed on by the fast stream: all good, none of them bad
        options = pacsv.ConvertOptions(column_types=types, include_columns=list(types))
        try:
            reader = pacsv.open_csv(src.path, read_options=pacsv.ReadOptions(use_threads=True),
                                    convert_options=options)
        except _READ_ERRORS:
            reader = None
        if reader is not None:
            try:
                while True:
                    try:
                        b = reader.read_next_batch()
                    except StopIteration:
                        return
                    except _READ_ERRORS:
                        break
                    if _time_nulls(b, time_column) is not None:
                        break
                    passed += b.num_rows
                    yield b
            finally:
                reader.close()
        yield from _csv_checked(src, header, types, time_column, policy, sink, skip=passed)

    return schema, batches()


# ----------------------------------------------------------------------------------------------
# CSV: the error path


def _csv_converter(typ: pa.DataType) -> Callable[[pa.Array], pa.Array]:
    """Raw CSV field bytes -> ``typ`` by the CSV reader's rules (null tokens, whitespace trimmed
    around numbers and dates, ``true``/``false`` spellings); raises where a value does not fit.

    Common types are converted with compute kernels that follow those rules (checked against
    the reader in the tests); any other type goes through the CSV reader itself."""
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return lambda col: col.cast(typ)
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return lambda col: col.cast(pa.string()).cast(typ)
    trimmed = pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_decimal(typ) \
        or pa.types.is_date(typ)
    if not (trimmed or pa.types.is_boolean(typ) or pa.types.is_timestamp(typ)):
        return lambda col: _csv_reader_convert(col, typ)

    def convert(col: pa.Array) -> pa.Array:
        s = col.cast(pa.string())
        s = pc.if_else(pc.is_in(s, value_set=_CSV_NULLS), pa.scalar(None, pa.string()), s)
        if trimmed:
            s = pc.utf8_trim(s, " \t")
        if not pa.types.is_boolean(typ):
            return s.cast(typ)
        true = pc.is_in(s, value_set=_CSV_TRUE)
        spelled = pc.or_(true, pc.is_in(s, value_set=_CSV_FALSE))
        if pc.any(pc.and_(pc.is_valid(s), pc.invert(spelled))).as_py():
            raise pa.ArrowInvalid("not a CSV boolean")
        return pc.if_else(pc.is_null(s), pa.scalar(None, pa.bool_()), true)

    return convert


def _csv_reader_convert(col: pa.Array, typ: pa.DataType) -> pa.Array:
    """``col``'s values written as a one-column CSV (every value quoted) and read back as ``typ``."""
    if not len(col):
        return pa.array([], typ)
    out = pa.BufferOutputStream()
    pacsv.write_csv(pa.table({"v": col.cast(pa.string())}), out,
                    write_options=pacsv.WriteOptions(include_header=False, quoting_style="all_valid"))
    table = pacsv.read_csv(pa.BufferReader(out.getvalue()),
                           read_options=pacsv.ReadOptions(column_names=["v"], use_threads=False),
                           parse_options=pacsv.ParseOptions(newlines_in_values=True),
                           convert_options=pacsv.ConvertOptions(column_types={"v": typ}))
    return table.column(0).combine_chunks()


def _failing_rows(col: pa.Array, convert: Callable[[pa.Array], pa.Array]) -> np.ndarray:
    """Positions of the values of ``col`` that ``convert`` rejects, found by bisection: a slice
    that converts is good, one that does not is split in two, down to single values."""
    bad: list[int] = []
    n = len(col)
    pending = [(off, min(_CHECK_ROWS, n - off)) for off in range(0, n, _CHECK_ROWS)]
    while pending:
        off, length = pending.pop()
        try:
            convert(col.slice(off, length))
            continue
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass
        if length == 1:
            bad.append(off)
        else:
            half = length // 2
            pending += [(off + half, length - half), (off, half)]
    return np.array(sorted(bad), dtype=np.int64)


def _csv_line(raw: pa.RecordBatch, i: int) -> str:
    """Row ``i`` of the raw (binary) batch as one CSV line."""
    fields = []
    for col in raw.columns:
        v = col[i].as_py()
        text = "" if v is None else v.decode("utf-8", "replace")
        if any(ch in text for ch in ',"\r\n'):
            text = '"' + text.replace('"', '""') + '"'
        fields.append(text)
    return ",".join(fields)


class _CsvChecker:
    """Checks raw (all-binary) CSV batches read serially: converts them to ``types``, finds the
    rows that do not convert, and maps positions to data rows past the malformed rows that the
    reader skipped (which ``invalid_row`` records as Arrow reports them)."""

    def __init__(self, src: _InputFile, types: dict[str, pa.DataType], time_column: str | None) -> None:
        self.src = src
        self.types = types
        self.schema = pa.schema(list(types.items()))
        self.converters = {c: _csv_converter(t) for c, t in types.items()}
        self.time_column = time_column
        self.skipped: list[int] = []  # 0-based data rows of the malformed rows, in file order
        self.pending: list[_BadRow] = []  # malformed rows not yet routed, in file order

    def invalid_row(self, row: pacsv.InvalidRow) -> str:
        # Arrow's row number counts the header and no blank line: data row = number - 1
        number = int(row.number) - 1 if row.number is not None else 0
        text = row.text or ""
        self.skipped.append(number - 1)
        self.pending.append(_BadRow(number, "data row", "malformed CSV row",
                                    f"malformed CSV row: expected {row.expected_columns} fields, got "
                                    f"{row.actual_columns}: {_show(text)}", text))
        return "skip"

    def data_rows(self, valid: np.ndarray) -> np.ndarray:
        """0-based data rows of the rows at 0-based positions ``valid`` among the parsed rows."""
        skipped = np.asarray(self.skipped, dtype=np.int64)
        before = skipped - np.arange(len(skipped))  # parsed rows before each skipped row
        return valid + np.searchsorted(before, valid, side="right")

    def check(self, raw: pa.RecordBatch, first: int) -> tuple[pa.RecordBatch, list[_BadRow]]:
        """The good rows of ``raw`` (whose first row is parsed row ``first``) typed, and the bad."""
        bad = np.zeros(raw.num_rows, bool)
        out: list[_BadRow] = []
        converted: dict[str, pa.Array] = {}
        for c, convert in self.converters.items():
            col = raw.column(c)
            try:
                converted[c] = convert(col)
                continue
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                pass
            failing = _failing_rows(col, convert)
            new = failing[~bad[failing]]
            bad[failing] = True
            typ = self.types[c]
            text = pa.types.is_string(typ) or pa.types.is_large_string(typ)
            reason = f"column {c}: not valid UTF-8" if text else f"column {c}: not a valid {typ}"
            for i, row in zip(new, self.data_rows(first + new), strict=True):
                value = col[int(i)].as_py()
                detail = (f"column {c!r}: {_show(value)} is not valid UTF-8" if text
                          else f"column {c!r}: {_show(value)} is not a valid {typ}")
                out.append(_BadRow(int(row) + 1, "data row", reason, detail, _csv_line(raw, int(i))))
        keep = ~bad
        if bad.any():
            good = raw.filter(pa.array(keep))
            cols = []
            for c, convert in self.converters.items():
                try:
                    cols.append(converted[c].filter(pa.array(keep)) if c in converted
                                else convert(good.column(c)))
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                    raise InternalError(f"{self.src.where()}: column {c!r} still fails to convert "
                                        f"after its bad rows were removed: {exc}") from exc
        else:
            cols = [converted[c] for c in self.types]
        typed = pa.record_batch(cols, schema=self.schema)
        nulls = _time_nulls(typed, self.time_column)
        if nulls is not None:
            at = np.flatnonzero(keep)[nulls]  # positions in raw
            for i, row in zip(at, self.data_rows(first + at), strict=True):
                out.append(_BadRow(int(row) + 1, "data row", f"null time column {self.time_column}",
                                   f"time column {self.time_column!r} is null", _csv_line(raw, int(i))))
            still = np.ones(typed.num_rows, bool)
            still[nulls] = False
            typed = typed.filter(pa.array(still))
        if raw.num_rows:  # the malformed rows up to this batch's last row (the reader reads ahead)
            last = int(self.data_rows(np.array([first + raw.num_rows - 1]))[0]) + 1
            out += [b for b in self.pending if b.position < last]
            self.pending = [b for b in self.pending if b.position >= last]
        return typed, out


def _csv_checked(src: _InputFile, header: pa.Schema, types: dict[str, pa.DataType], time_column: str | None,
                 policy: BadInputPolicy, sink: DeadLetterSink | None, skip: int) -> Iterator[pa.RecordBatch]:
    """The error path: the good rows typed, batch by batch, after the first ``skip`` rows (all
    good: rows a fast stream already passed on); bad rows are routed as they are met."""
    with undecodable_rows_unprinted():
        yield from _csv_checked_rows(src, header, types, time_column, policy, sink, skip)


def _csv_checked_rows(src: _InputFile, header: pa.Schema, types: dict[str, pa.DataType],
                      time_column: str | None, policy: BadInputPolicy, sink: DeadLetterSink | None,
                      skip: int) -> Iterator[pa.RecordBatch]:
    checker = _CsvChecker(src, types, time_column)
    raw_types = {f.name: pa.binary() for f in header}
    try:
        reader = pacsv.open_csv(src.path, read_options=pacsv.ReadOptions(use_threads=False),
                                parse_options=pacsv.ParseOptions(invalid_row_handler=checker.invalid_row),
                                convert_options=pacsv.ConvertOptions(column_types=raw_types))
    except _READ_ERRORS as exc:
        raise SchemaError(f"{src.where()}: cannot read as CSV: {exc}") from exc
    seen = 0  # parsed (not malformed) rows so far
    try:
        while True:
            try:
                raw = reader.read_next_batch()
            except StopIteration:
                break
            except _READ_ERRORS as exc:
                raise SchemaError(f"{src.where()}: cannot read as CSV: {exc}") from exc
            start = min(max(skip - seen, 0), raw.num_rows)
            typed, bad = checker.check(raw.slice(start), seen + start)
            seen += raw.num_rows
            _route(src, bad, policy, sink)
            if typed.num_rows:
                yield typed
    finally:
        reader.close()
    _route(src, checker.pending, policy, sink)


# ----------------------------------------------------------------------------------------------
# JSON lines


def _json_options(schema: pa.Schema | None, unexpected: str = "ignore") -> pajson.ParseOptions:
    if schema is None:
        return pajson.ParseOptions()
    return pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior=unexpected)


def _json_parse(data: pa.Buffer, options: pajson.ParseOptions, threads: bool = False) -> pa.Table:
    read = pajson.ReadOptions(use_threads=True) if threads else \
        pajson.ReadOptions(use_threads=False, block_size=max(data.size + 1, 1 << 16))
    return pajson.read_json(pa.BufferReader(data), read_options=read, parse_options=options)


def _line_starts(block: bytes) -> np.ndarray:
    """Offsets of each line's first byte in ``block``, then ``len(block)``."""
    nl = np.flatnonzero(np.frombuffer(block, np.uint8) == 10) + 1
    starts = np.concatenate([[0], nl]).astype(np.int64)
    if starts[-1] != len(block):
        starts = np.append(starts, len(block))
    return starts


def _line_blocks(path: Path, size: int) -> Iterator[tuple[bytes, int]]:
    """The file as blocks of whole lines of about ``size`` bytes, each with its first line's
    1-based number."""
    line = 1
    with open(path, "rb") as f:
        carry = b""
        while True:
            chunk = f.read(size)
            if not chunk:
                break
            data = carry + chunk
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                carry = data
                continue
            block, carry = data[:cut], data[cut:]
            yield block, line
            line += block.count(b"\n")
        if carry:
            yield carry, line


def _json_first_schema(src: _InputFile) -> pa.Schema:
    """Types of the first block's clean lines: the longest run of lines from the first clean
    line on that Arrow reads together."""
    block = next(_line_blocks(src.path, 1 << 20), (b"", 1))[0]
    starts = _line_starts(block)
    buf = pa.py_buffer(block)

    def parse(i: int, j: int) -> pa.Table | None:
        try:
            return _json_parse(buf.slice(int(starts[i]), int(starts[j] - starts[i])), pajson.ParseOptions())
        except _READ_ERRORS:
            return None

    n = len(starts) - 1
    for s in range(n):
        best = parse(s, s + 1)
        if best is None or not best.num_rows:  # a bad or blank line: the next one
            continue
        lo, hi = s + 2, n  # the longest run s..k-1 that parses: binary search on k
        while lo <= hi:
            k = (lo + hi) // 2
            t = parse(s, k)
            if t is None:
                hi = k - 1
            else:
                best, lo = t, k + 1
        return pa.schema([pa.field(f.name, pa.string() if pa.types.is_null(f.type) else f.type)
                          for f in normalize_schema(best.schema)])
    raise SchemaError(f"{src.where()}: no JSON object in the first block to take the types from")


def _json_bad_line(line: bytes, number: int, schema: pa.Schema, time_column: str | None,
                   inferred: bool) -> _BadRow:
    """Why a single JSON line fails (Python per bad line, on the error path only)."""
    text = line.decode("utf-8", "replace").rstrip("\r\n")

    def bad(reason: str, detail: str) -> _BadRow:
        return _BadRow(number, "line", reason, detail, text)

    try:
        obj = json.loads(line)
    except ValueError:
        return bad("malformed JSON line", f"malformed JSON line (not valid JSON): {_show(text)}")
    if not isinstance(obj, dict):
        return bad("malformed JSON line", f"malformed JSON line (not a JSON object): {_show(text)}")
    for f in schema:
        if obj.get(f.name) is None:
            continue
        one = json.dumps({f.name: obj[f.name]}).encode()
        try:
            _json_parse(pa.py_buffer(one), _json_options(pa.schema([f])))
        except _READ_ERRORS:
            return bad(f"column {f.name}: not a valid {f.type}",
                       f"column {f.name!r}: {_show(json.dumps(obj[f.name]))} is not a valid {f.type}")
    if time_column is not None and obj.get(time_column) is None:
        return bad(f"null time column {time_column}", f"time column {time_column!r} is null")
    unknown = [k for k in obj if k not in schema.names]
    if inferred and unknown:
        return bad("field not in the first lines",
                   f"field {unknown[0]!r} is not among the fields of the file's first lines")
    return bad("malformed JSON line", f"malformed JSON line: {_show(text)}")


def _json_block(src: _InputFile, block: bytes, first_line: int, schema: pa.Schema, options: pajson.ParseOptions,
                time_column: str | None, inferred: bool) -> tuple[list[pa.Table], list[_BadRow]]:
    """The good rows of a block of whole lines and its bad lines: the block whole when it parses
    (and has no null time), else bisection over its lines."""
    buf = pa.py_buffer(block)

    def parse(data: pa.Buffer, threads: bool = False) -> pa.Table | None:
        try:
            t = _json_parse(data, options, threads)
        except _READ_ERRORS:
            return None
        return t if _time_nulls(t, time_column) is None else None

    whole = parse(buf, threads=True)
    if whole is not None:
        return [whole], []
    starts = _line_starts(block)
    n = len(starts) - 1
    step = 4096
    pending = [(i, min(step, n - i)) for i in range(0, n, step)][::-1]
    good: list[pa.Table] = []
    bad: list[_BadRow] = []
    while pending:  # depth first, left half first: the good rows come out in file order
        i, length = pending.pop()
        lo, hi = int(starts[i]), int(starts[i + length])
        t = parse(buf.slice(lo, hi - lo))
        if t is not None:
            good.append(t)
        elif length == 1:
            bad.append(_json_bad_line(block[lo:hi], first_line + i, schema, time_column, inferred))
        else:
            half = length // 2
            pending += [(i + half, length - half), (i, half)]
    return good, bad


def _json_checked(src: _InputFile, schema: pa.Schema, inferred: bool, time_column: str | None,
                  policy: BadInputPolicy, sink: DeadLetterSink | None) -> Iterator[pa.RecordBatch]:
    options = _json_options(schema, "error" if inferred else "ignore")
    for block, first_line in _line_blocks(src.path, _JSON_BLOCK):
        good, bad = _json_block(src, block, first_line, schema, options, time_column, inferred)
        _route(src, bad, policy, sink)
        for t in good:
            t = _plain(t)
            if t.schema != schema:
                t = t.select(schema.names).cast(schema)
            yield from t.to_batches()


def _json_read(src: _InputFile, declared: pa.Schema | None, time_column: str | None,
               policy: BadInputPolicy, sink: DeadLetterSink | None) -> pa.Table:
    try:
        table = _plain(pajson.read_json(src.path, read_options=pajson.ReadOptions(use_threads=True),
                                        parse_options=_json_options(declared)))
    except _READ_ERRORS:
        table = None
    if table is not None:
        _require_time(src, table.schema, time_column)
        if _time_nulls(table, time_column) is None:
            return table
    schema = declared if declared is not None else table.schema if table is not None else _json_first_schema(src)
    schema = normalize_schema(schema)
    _require_time(src, schema, time_column)
    inferred = declared is None and table is None
    return pa.Table.from_batches(list(_json_checked(src, schema, inferred, time_column, policy, sink)),
                                 schema=schema)


def _json_batches(src: _InputFile, declared: pa.Schema | None, time_column: str | None,
                  policy: BadInputPolicy, sink: DeadLetterSink | None
                  ) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    schema = normalize_schema(declared) if declared is not None else _json_first_schema(src)
    _require_time(src, schema, time_column)
    return schema, _json_checked(src, schema, declared is None, time_column, policy, sink)
