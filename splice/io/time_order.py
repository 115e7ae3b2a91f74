"""A bounded input's rows in event-time order, in memory or by an external merge sort.

Semantics: the rows of the input ``R = r_1..r_n`` (file order, bad rows removed by the reader's
policy) are streamed as ``r_p(1)..r_p(n)`` where ``p`` is the *stable* ordering by time: ``t(r_p(i))
<= t(r_p(i+1))``, and rows of equal time keep their file order. That is
``np.argsort(times, kind="stable")``, whichever path runs, so time-based operators fed from an
out-of-order file give the exact answers of a sorted one.

Algorithm. When the input's Arrow size fits ``memory_budget`` it is read whole
(:func:`~splice.io.files.read_input`), the stable permutation of its times taken once (not at all
when the file is already in order) and the result sliced into batches. Otherwise, an external
merge sort:

1. *Runs.* The input is read a batch at a time (:func:`~splice.io.files.iter_input`) into chunks
   of about ``memory_budget / 2`` bytes; each chunk is sorted stably and written as an Arrow IPC
   file. Runs are contiguous pieces of the file, in order.
2. *Merge.* Each run holds one batch at a time. With ``L_r`` the last (largest) time of run
   ``r``'s current batch, ``B = min_r L_r``: every later row of every run has time ``>= B``, so the
   rows with time ``< B`` are safe to emit, and so are rows with time ``= B`` of the runs before
   (and including) ``J``, the first run whose current batch ends at ``B`` with more batches to
   come (rows at ``B`` of a later run must wait for ``J``'s: equal times keep run order, which is
   file order). Those prefixes are merged by time, ties in run order
   (:func:`~splice.core.ordered_merge.merge_order`), and emitted;
   ``J`` (or the run that ends at ``B``) gives up its whole batch, so every step makes progress.

State and cleanup: the runs stay on disk, so :meth:`TimeOrderedInput.batches` can replay; memory
is about the budget while the runs are written, then one batch per run while merging.
:meth:`TimeOrderedInput.close` removes the run files and their folder.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "events.csv"
>>> _ = path.write_text("id,ts\\n1,30\\n2,10\\n3,20\\n4,10\\n")
>>> with order_by_time(path, "events", "ts", memory_budget=1) as ordered:  # spilled: a tiny budget
...     pa.Table.from_batches(ordered.batches(2)).to_pydict()
{'id': [2, 4, 3, 1], 'ts': [10, 10, 20, 30]}
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from splice.core.errors import PlanError
from splice.core.ordered_merge import merge_order
from splice.core.time import time_values
from splice.io.files import FORMATS, iter_input, read_input, rebatch, undecodable_rows_unprinted

if TYPE_CHECKING:
    from splice.io.bad_input import BadInputPolicy, DeadLetterSink

__all__ = ["sort_by_time", "TimeOrderedInput", "order_by_time"]


class TimeOrderedInput:
    """An input's rows in event-time order, stable (equal times keep file order), replayable.

    Made by :func:`order_by_time`: either the ordered table in memory or sorted runs on disk that
    :meth:`batches` merges again at each call. Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, name: str, schema: pa.Schema, num_rows: int, time_column: str, *,
                 table: pa.Table | None = None, run_dir: Path | None = None,
                 runs: tuple[Path, ...] = ()) -> None:
        self.name = name
        self.schema = schema
        self.num_rows = num_rows
        self.time_column = time_column
        self._table = table
        self._run_dir = run_dir
        self.runs = runs
        self._closed = False

    @property
    def spilled(self) -> bool:
        """Whether the rows come from sorted runs on disk (else from a table in memory)."""
        return self._run_dir is not None

    def batches(self, batch_size: int) -> Iterator[pa.RecordBatch]:
        """The rows in time order as batches of exactly ``batch_size`` rows (the last one may be
        shorter); the same batches at every call."""
        if batch_size < 1:
            raise PlanError(f"input {self.name!r}: batch size must be >= 1, got {batch_size}")
        if self._closed:
            raise PlanError(f"input {self.name!r}: the time-ordered input was closed")
        if self._table is not None:
            return rebatch(self._table.to_batches(), batch_size)
        return rebatch(_merge_runs(self.runs, self.time_column, self.name), batch_size)

    def close(self) -> None:
        """Remove the run files (and their folder); the rows are gone after this."""
        self._closed = True
        self._table = None
        if self._run_dir is not None:
            shutil.rmtree(self._run_dir, ignore_errors=True)

    def __enter__(self) -> TimeOrderedInput:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def order_by_time(path: str | Path, name: str, time_column: str, *, memory_budget: int,
                  spill_dir: str | Path | None = None, schema: pa.Schema | None = None,
                  policy: BadInputPolicy = "fail", sink: DeadLetterSink | None = None,
                  batch_size: int = 65_536) -> TimeOrderedInput:
    """Input ``name`` at ``path`` ordered by ``time_column`` (timestamps, dates or integers; see
    the module doc), in memory when its Arrow size fits ``memory_budget`` bytes, else by sorted
    runs written to a fresh folder in ``spill_dir`` (default: the system's temporary folder).

    ``schema``, ``policy`` and ``sink`` are :func:`~splice.io.files.read_input`'s: a null time is
    a bad row. ``batch_size``: rows per batch read and per batch of the runs.
    """
    if memory_budget < 1:
        raise PlanError(f"input {name!r}: memory budget must be >= 1 byte, got {memory_budget}")
    if batch_size < 1:
        raise PlanError(f"input {name!r}: batch size must be >= 1, got {batch_size}")
    if _arrow_bytes(Path(path)) <= memory_budget:
        table = read_input(path, name, schema=schema, time_column=time_column, policy=policy, sink=sink)
        table, _ = _sorted_by_time(table, time_column, name)
        return TimeOrderedInput(name, table.schema, table.num_rows, time_column, table=table)
    out_schema, batches = iter_input(path, name, batch_size=batch_size, schema=schema,
                                     time_column=time_column, policy=policy, sink=sink)
    time_values(out_schema.empty_table(), time_column, name)  # a wrong time type fails now
    run_dir = Path(tempfile.mkdtemp(prefix="splice-runs-", dir=spill_dir))
    try:
        runs, rows = _write_runs(batches, out_schema, run_dir, time_column, name, memory_budget // 2,
                                 batch_size)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return TimeOrderedInput(name, out_schema, rows, time_column, run_dir=run_dir, runs=tuple(runs))


def _arrow_bytes(path: Path) -> int:
    """About how many bytes the file takes as Arrow: Parquet's uncompressed size; for CSV the
    file's size scaled by the Arrow size of its first block; JSON lines by their size (keys are
    repeated on every line, so Arrow takes less). A file that cannot be sized counts as
    unbounded here; its reader says what is wrong with it."""
    try:
        size = path.stat().st_size
        fmt = FORMATS.get(path.suffix.lower())
        if fmt == "parquet":
            meta = pq.ParquetFile(path).metadata
            return sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        if fmt == "csv":
            block = 1 << 20
            with undecodable_rows_unprinted():
                reader = pacsv.open_csv(
                    path, read_options=pacsv.ReadOptions(use_threads=False, block_size=block),
                    parse_options=pacsv.ParseOptions(invalid_row_handler=lambda _: "skip"))
                try:
                    first = reader.read_next_batch().nbytes
                except StopIteration:
                    return size
                finally:
                    reader.close()
            return int(size * first / max(min(size, block), 1))
        return size
    except (OSError, pa.ArrowException, UnicodeDecodeError):
        return np.iinfo(np.int64).max


def _is_sorted(times: np.ndarray) -> bool:
    return len(times) < 2 or bool(np.all(times[:-1] <= times[1:]))


def _sorted_by_time(table: pa.Table, time_column: str, name: str) -> tuple[pa.Table, np.ndarray]:
    times = time_values(table, time_column, name)
    if _is_sorted(times):
        return table, times
    order = np.argsort(times, kind="stable")
    return table.take(pa.array(order)), times[order]


def sort_by_time(table: pa.Table, time_column: str, name: str) -> pa.Table:
    """``table`` (input ``name``) stably ordered by ``time_column``; as it is when in order."""
    return _sorted_by_time(table, time_column, name)[0]


def _write_runs(batches: Iterator[pa.RecordBatch], schema: pa.Schema, run_dir: Path, time_column: str,
                name: str, chunk_bytes: int, batch_size: int) -> tuple[list[Path], int]:
    """Sorted runs of about ``chunk_bytes`` each from ``batches``: (run paths, rows)."""
    runs: list[Path] = []
    rows = 0
    held: list[pa.RecordBatch] = []
    held_bytes = 0

    def flush() -> None:
        table, _ = _sorted_by_time(pa.Table.from_batches(held, schema=schema), time_column, name)
        path = run_dir / f"run-{len(runs):06d}.arrow"
        with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, schema) as writer:
            writer.write_table(table, max_chunksize=batch_size)
        runs.append(path)

    for b in batches:
        if not b.num_rows:
            continue
        held.append(b)
        held_bytes += b.nbytes
        rows += b.num_rows
        if held_bytes >= chunk_bytes:
            flush()
            held, held_bytes = [], 0
    if held:
        flush()
    return runs, rows


class _RunCursor:
    """A run's current batch (the part not yet emitted) and its times."""

    def __init__(self, reader: pa.ipc.RecordBatchFileReader, time_column: str, name: str) -> None:
        self.reader = reader
        self.time_column = time_column
        self.name = name
        self.next = 0  # index of the next batch to load
        self.batch: pa.RecordBatch | None = None
        self.times = np.empty(0, np.int64)

    def load(self) -> bool:
        """Make the current batch non-empty if the run has rows left; False when exhausted."""
        while not len(self.times) and self.next < self.reader.num_record_batches:
            self.batch = self.reader.get_batch(self.next)
            self.times = time_values(self.batch, self.time_column, self.name)
            self.next += 1
        return bool(len(self.times))

    def more(self) -> bool:
        return self.next < self.reader.num_record_batches

    def last(self) -> int:
        return int(self.times[-1])

    def take(self, bound: int, inclusive: bool) -> tuple[pa.RecordBatch, np.ndarray] | None:
        """Remove and return the rows with time < ``bound`` (``<=`` when ``inclusive``)."""
        k = int(np.searchsorted(self.times, bound, side="right" if inclusive else "left"))
        if not k:
            return None
        assert self.batch is not None
        piece, times = self.batch.slice(0, k), self.times[:k]
        self.batch, self.times = self.batch.slice(k), self.times[k:]
        return piece, times


def _merge_runs(runs: tuple[Path, ...], time_column: str, name: str) -> Iterator[pa.RecordBatch]:
    """The k-way merge of the sorted runs (see the module doc), stable in run order."""
    sources = [pa.memory_map(str(p)) for p in runs]
    try:
        cursors = [_RunCursor(pa.ipc.open_file(s), time_column, name) for s in sources]
        live = [c for c in cursors if c.load()]
        while live:
            bound = min(c.last() for c in live)
            j = next((i for i, c in enumerate(live) if c.last() == bound and c.more()), len(live))
            pieces: list[pa.RecordBatch] = []
            times: list[np.ndarray] = []
            for i, c in enumerate(live):
                got = c.take(bound, inclusive=i <= j)
                if got is not None:
                    pieces.append(got[0])
                    times.append(got[1])
            merged = pa.Table.from_batches(pieces)
            # each piece is in order; laid end to end they are when each starts where the last ends
            if any(int(b[0]) < int(a[-1]) for a, b in zip(times, times[1:], strict=False)):
                merged = merged.take(pa.array(merge_order(times)))
            yield from merged.to_batches()
            live = [c for c in live if c.load()]
    finally:
        for s in sources:
            s.close()
