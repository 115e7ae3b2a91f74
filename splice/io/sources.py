"""Sources: iterables of ``(stream name, batch)`` that :meth:`splice.runtime.Engine.run` consumes.

A source is replayable from a position: ``skip`` batches are passed over, so a run resumed from a
recorded position sees exactly the batches after it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from splice.core.errors import PlanError
from splice.core.stream import normalize_batch
from splice.io.files import read_table

__all__ = ["bounded_batches", "table_source", "file_source", "round_robin"]


def bounded_batches(table: pa.Table | pa.RecordBatch, batch_size: int,
                    max_batch_bytes: int | None = None) -> list[pa.RecordBatch]:
    """``table`` as non-empty batches of at most ``batch_size`` rows and, with
    ``max_batch_bytes``, at most that many bytes (a batch of one row may exceed it: a row is
    never split; refusing oversized rows is :class:`~splice.io.bad_input.EdgeValidator`'s
    ``max_row_bytes``). Batches are zero-copy slices of the input, in order."""
    if batch_size < 1:
        raise PlanError(f"batch size must be >= 1, got {batch_size}")
    if max_batch_bytes is not None and max_batch_bytes < 1:
        raise PlanError(f"max batch bytes must be >= 1, got {max_batch_bytes}")
    batches = table.to_batches(max_chunksize=batch_size) if isinstance(table, pa.Table) else [
        table.slice(i, batch_size) for i in range(0, table.num_rows, batch_size)]
    out: list[pa.RecordBatch] = []
    for b in batches:
        if not b.num_rows:
            continue
        nbytes = b.nbytes
        if max_batch_bytes is None or nbytes <= max_batch_bytes:
            out.append(b)
            continue
        # rows per piece from the batch's average row width; a piece still too big halves again
        step = max(1, b.num_rows * max_batch_bytes // nbytes)
        pending = deque(b.slice(i, step) for i in range(0, b.num_rows, step))
        while pending:
            piece = pending.popleft()
            if piece.num_rows > 1 and piece.nbytes > max_batch_bytes:
                half = piece.num_rows // 2
                pending.extendleft([piece.slice(half), piece.slice(0, half)])
            else:
                out.append(piece)
    return out


def table_source(stream: str, table: pa.Table, batch_size: int = 65_536, skip: int = 0,
                 max_batch_bytes: int | None = None) -> Iterator[tuple[str, pa.RecordBatch]]:
    """The rows of ``table`` as batches of ``batch_size`` rows (and at most ``max_batch_bytes``
    bytes, see :func:`bounded_batches`) of ``stream``; position ``skip`` = batches passed over."""
    for i, b in enumerate(bounded_batches(table, batch_size, max_batch_bytes)):
        if i >= skip:
            yield stream, normalize_batch(b)


def file_source(stream: str, path: str | Path, batch_size: int = 65_536, skip: int = 0
                ) -> Iterator[tuple[str, pa.RecordBatch]]:
    """A Parquet file read batch by batch (CSV files are read whole, then batched)."""
    p = Path(path)
    if p.suffix.lower() in (".parquet", ".pq"):
        f = pq.ParquetFile(p)
        for i, b in enumerate(f.iter_batches(batch_size=batch_size)):
            if i >= skip and b.num_rows:
                yield stream, normalize_batch(b)
    else:
        yield from table_source(stream, read_table(p), batch_size, skip)


def round_robin(*sources: Iterator[tuple[str, pa.RecordBatch]]) -> Iterator[tuple[str, pa.RecordBatch]]:
    """One batch of each source in turn until all are exhausted (a fixed arrival order)."""
    live = list(sources)
    while live:
        for src in list(live):
            try:
                yield next(src)
            except StopIteration:
                live.remove(src)
