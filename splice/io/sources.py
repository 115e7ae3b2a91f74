"""Sources: iterables of ``(stream name, batch)`` that :meth:`splice.runtime.Engine.run` consumes.

A source is replayable from a position: ``skip`` batches are passed over, so a run resumed from a
recorded position sees exactly the batches after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from splice.core.stream import normalize_batch
from splice.io.files import read_table

__all__ = ["table_source", "file_source", "round_robin"]


def table_source(stream: str, table: pa.Table, batch_size: int = 65_536, skip: int = 0
                 ) -> Iterator[tuple[str, pa.RecordBatch]]:
    """The rows of ``table`` as batches of ``batch_size`` rows of ``stream``."""
    for i, b in enumerate(table.to_batches(max_chunksize=batch_size)):
        if i >= skip and b.num_rows:
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
