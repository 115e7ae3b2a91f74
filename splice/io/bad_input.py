"""Bad input at the edges: fail with a clear error, or route each bad record with its reason to a
dead-letter sink and count it. Never drop silently.

A record is **bad** when its source line does not parse (malformed CSV or JSON lines), when its
batch does not fit the stream's schema (a missing column, or a value the declared type cannot
hold: schema drift), when a key or time column is null, or when a floating-point value is NaN or
infinite. :class:`EdgeValidator` checks batches on their way into the engine (vectorized: one mask
per check); the parsing itself is checked where files are read, by
:func:`splice.io.files.read_input` (which :func:`read_csv_checked`, :func:`read_json_lines_checked`
and :func:`load_checked` wrap).

Policy per source (``BadInputPolicy``): ``"fail"`` (default) raises
:class:`~splice.core.errors.SchemaError` naming the stream, the column, the reason and the first
bad row; ``"dead_letter"`` sends the bad rows to a :class:`DeadLetterSink` (columns ``stream``,
``reason``, ``record``: the row as JSON or the raw line) and passes on the good rows.
Out-of-order and late events are the watermarks' business: operators send late rows to their
late side output (:meth:`splice.runtime.Engine.late`).

>>> import pyarrow as pa
>>> dl = DeadLetterSink()
>>> v = EdgeValidator("s", pa.schema([("k", pa.int64()), ("x", pa.float64())]), keys=["k"],
...                   policy="dead_letter", sink=dl)
>>> v.check(pa.record_batch({"k": [1, None, 3], "x": [1.0, 2.0, float("nan")]})).to_pydict()
{'k': [1], 'x': [1.0]}
>>> dl.counts
{'null key column k': 1, 'NaN or infinite value in column x': 1}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from splice.core.dead_letters import (
    BadInputPolicy,
    DeadLetterSink,
    check_policy,
    rows_json,
)
from splice.core.errors import PlanError, SchemaError

__all__ = ["BadInputPolicy", "DeadLetterSink", "EdgeValidator", "check_policy", "load_checked", "read_csv_checked",
           "read_json_lines_checked", "row_bytes", "rows_json"]


@dataclass
class EdgeValidator:
    """Checks batches of source ``stream`` against ``schema`` before they enter the engine.

    ``keys`` and ``time_column`` must not be null; float columns must be finite. Schema drift
    (missing columns, values the declared type cannot hold) is checked first, per batch. With
    ``max_row_bytes``, a row whose values take more bytes than that (strings and binaries by
    their length plus a 4-byte offset, fixed-width values by their width) is bad too.
    """

    stream: str
    schema: pa.Schema
    keys: Sequence[str] = ()
    time_column: str | None = None
    policy: BadInputPolicy = "fail"
    sink: DeadLetterSink | None = None
    max_row_bytes: int | None = None

    def __post_init__(self) -> None:
        check_policy(self.policy)
        if self.max_row_bytes is not None and self.max_row_bytes < 1:
            raise PlanError(f"stream {self.stream!r}: max_row_bytes must be >= 1, got {self.max_row_bytes}")
        if self.policy == "dead_letter" and self.sink is None:
            self.sink = DeadLetterSink()
        for c in [*self.keys, *([self.time_column] if self.time_column else [])]:
            if c not in self.schema.names:
                raise SchemaError(f"stream {self.stream!r}: column {c!r} is not in its schema")

    def _bad(self, reason: str, batch: pa.RecordBatch | pa.Table, mask: np.ndarray | None) -> None:
        if self.policy == "fail":
            first = int(np.flatnonzero(mask)[0]) if mask is not None else 0
            raise SchemaError(f"stream {self.stream!r}: {reason} (row {first} of the batch; use the "
                              "dead-letter policy to route such rows instead of failing)")
        assert self.sink is not None
        rows = rows_json(batch, mask if mask is not None else np.ones(batch.num_rows, bool))
        self.sink.add(self.stream, reason, rows)

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch | None:
        missing = [n for n in self.schema.names if n not in batch.schema.names]
        if missing:
            self._bad(f"schema drift: missing column(s) {', '.join(missing)}", batch, None)
            return None
        cols = []
        bad = np.zeros(batch.num_rows, bool)
        reasons = []
        for f in self.schema:
            col = batch.column(f.name)
            if col.type != f.type:
                try:
                    col = col.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    # find the values that do not fit: cast each non-null value's text
                    safe = pc.cast(col, pa.string(), safe=False)
                    ok = np.array([self._fits(v, f.type) for v in safe.to_pylist()], bool)
                    bad |= ~ok
                    reasons.append(f"schema drift: column {f.name} value not {f.type}")
                    col = None  # type: ignore[assignment]
            cols.append(col)
        if reasons:
            self._bad("; ".join(reasons), batch, bad)
            good = batch.filter(pa.array(~bad))
            return self._conform(good) if good.num_rows else None
        return pa.record_batch(cols, schema=self.schema)

    @staticmethod
    def _fits(value: str | None, typ: pa.DataType) -> bool:
        if value is None:
            return True
        try:
            pa.array([value]).cast(typ)
            return True
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return False

    def check(self, batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
        """The good rows of ``batch`` conformed to the schema (all of them, or the error)."""
        if isinstance(batch, pa.Table):
            table = batch.combine_chunks()
            batch = table.to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], schema=table.schema)
        conformed = self._conform(batch)
        if conformed is None:
            return pa.RecordBatch.from_pylist([], schema=self.schema)
        batch = conformed
        keep = np.ones(batch.num_rows, bool)
        if self.max_row_bytes is not None and batch.num_rows:
            big = row_bytes(batch) > self.max_row_bytes
            if big.any():
                self._bad(f"row over {self.max_row_bytes} bytes", batch, big)
                keep &= ~big
        for c in [*self.keys, *([self.time_column] if self.time_column else [])]:
            col = batch.column(c)
            if col.null_count:
                mask = np.asarray(col.is_null())
                what = "time" if c == self.time_column else "key"
                self._bad(f"null {what} column {c}", batch, mask & keep)
                keep &= ~mask
        for f in self.schema:
            if pa.types.is_floating(f.type):
                col = batch.column(f.name)
                finite = pc.fill_null(pc.is_finite(col), True)
                if not pc.all(finite).as_py():
                    mask = ~np.asarray(finite)
                    newly = mask & keep
                    if newly.any():
                        self._bad(f"NaN or infinite value in column {f.name}", batch, newly)
                    keep &= ~mask
        return batch if keep.all() else batch.filter(pa.array(keep))


def row_bytes(batch: pa.RecordBatch) -> np.ndarray:
    """Bytes each row of ``batch`` takes: string/binary values by length (+4 for the offset),
    fixed-width values by width, other types by their column's average per row (vectorized)."""
    n = batch.num_rows
    size = np.zeros(n, dtype=np.int64)
    for col in batch.columns:
        t = col.type
        if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) \
                or pa.types.is_large_binary(t):
            lengths = pc.fill_null(pc.binary_length(col), 0)
            size += np.asarray(lengths.to_numpy(zero_copy_only=False), dtype=np.int64) + 4
        elif pa.types.is_boolean(t):
            continue
        else:
            try:
                size += max(t.bit_width // 8, 1)
            except ValueError:  # nested or dictionary: the column's average
                size += col.nbytes // max(n, 1)
    return size


def _read(path: str | Path, stream: str, schema: pa.Schema | None, time_column: str | None,
          policy: BadInputPolicy, sink: DeadLetterSink | None) -> pa.Table:
    # the readers' errors keep naming the stream first, as before they moved to splice.io.files
    from splice.io.files import read_input

    try:
        return read_input(path, stream, schema=schema, time_column=time_column, policy=policy, sink=sink)
    except SchemaError as exc:
        raise SchemaError(f"stream {stream!r}: {exc}") from exc


def read_csv_checked(path: str | Path, stream: str, policy: BadInputPolicy = "fail",
                     sink: DeadLetterSink | None = None) -> pa.Table:
    """Read CSV input ``stream``: :func:`splice.io.files.read_input` (types from the first rows;
    a row with the wrong number of fields or a value its column's type cannot hold fails or goes
    to ``sink``)."""
    return _read(path, stream, None, None, policy, sink)


def read_json_lines_checked(path: str | Path, stream: str, schema: pa.Schema, policy: BadInputPolicy = "fail",
                            sink: DeadLetterSink | None = None) -> pa.Table:
    """Read JSON-lines input ``stream`` into ``schema``: :func:`splice.io.files.read_input` (a
    line that is not a JSON object, or a value of the wrong type, fails or goes to ``sink``)."""
    return _read(path, stream, schema, None, policy, sink)


def load_checked(path: str | Path, stream: str, keys: Sequence[str] = (), time_column: str | None = None,
                 policy: BadInputPolicy = "fail", sink: DeadLetterSink | None = None) -> pa.Table:
    """Read input ``stream`` (Parquet, CSV or JSON lines) and check it at the edge.

    :func:`splice.io.files.read_input` routes the rows that do not parse and null
    ``time_column`` values; :class:`EdgeValidator` then the null ``keys`` and NaN/inf floats. Each
    fails with a clear error or goes to ``sink`` with its reason (a fresh sink when none is given).
    """
    check_policy(policy)
    if policy == "dead_letter" and sink is None:
        sink = DeadLetterSink()
    table = _read(path, stream, None, time_column, policy, sink)
    validator = EdgeValidator(stream, table.schema, keys=keys, time_column=time_column, policy=policy, sink=sink)
    return pa.Table.from_batches([validator.check(table)], schema=table.schema)
