"""Exactly-once file sinks: an epoch's results become visible only when its checkpoint completes.

Two-phase commit into Parquet part files. For epoch ``e`` (the results between checkpoints
``e - 1`` and ``e``):

1. **pre-commit** (:meth:`TransactionalSink.stage`, before checkpoint ``e`` is saved): the batches
   are written durably to ``staged/epoch-<e>.parquet`` (temporary name, fsync, rename);
2. **commit** (:meth:`TransactionalSink.commit`, after checkpoint ``e`` is saved): the staged file is
   renamed to ``committed/part-<e>.parquet``.

Recovery from checkpoint ``c`` (:meth:`TransactionalSink.recover`) finishes commits the crash
interrupted (staged epochs ``<= c``: their checkpoint completed), discards staged epochs ``> c``
(their checkpoint never completed: the replay produces them again) and committed parts ``> c``
(possible only when checkpoint ``c + 1`` was found corrupt and ``c`` restored instead).
:meth:`TransactionalSink.publish` concatenates the committed parts in epoch order into the final
output file, atomically. Parts hold the rows in production order, so the published file equals
the one an uninterrupted run publishes, byte for byte.

>>> import tempfile, pyarrow as pa
>>> sink = TransactionalSink(tempfile.mkdtemp(), "q", pa.schema([("x", pa.int64())]))
>>> sink.stage(1, [pa.record_batch({"x": [1, 2]})]); sink.commit(1)
>>> sink.stage(2, [pa.record_batch({"x": [3]})])         # crash before checkpoint 2 completes
>>> sink.recover(1); sink.committed().to_pydict()
{'x': [1, 2]}
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from splice.core.errors import StateError
from splice.io.files import write_table
from splice.state.store import _fsync_dir

__all__ = ["TransactionalSink"]

_EPOCH = re.compile(r"^(?:epoch|part)-(\d+)\.parquet$")


def _epoch_of(path: Path) -> int | None:
    m = _EPOCH.match(path.name)
    return int(m.group(1)) if m else None


@dataclass
class TransactionalSink:
    """Parquet part files of query ``name`` under ``directory/sink/<name>``, committed by epoch."""

    directory: str | Path
    name: str
    schema: pa.Schema

    def __post_init__(self) -> None:
        base = Path(self.directory) / "sink" / self.name
        self.staged_dir = base / "staged"
        self.committed_dir = base / "committed"
        self.staged_dir.mkdir(parents=True, exist_ok=True)
        self.committed_dir.mkdir(parents=True, exist_ok=True)

    def _staged(self, epoch: int) -> Path:
        return self.staged_dir / f"epoch-{epoch:012d}.parquet"

    def _part(self, epoch: int) -> Path:
        return self.committed_dir / f"part-{epoch:012d}.parquet"

    def stage(self, epoch: int, batches: Sequence[pa.RecordBatch]) -> None:
        """Pre-commit: write epoch ``epoch``'s ``batches`` durably, invisible until :meth:`commit`."""
        table = pa.Table.from_batches(list(batches), schema=self.schema).combine_chunks()
        target = self._staged(epoch)
        tmp = target.with_name(target.name + ".tmp")
        pq.write_table(table, tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
        _fsync_dir(self.staged_dir)

    def commit(self, epoch: int) -> None:
        """Make epoch ``epoch`` visible; idempotent (a commit repeated after recovery is a no-op)."""
        staged = self._staged(epoch)
        if staged.exists():
            os.replace(staged, self._part(epoch))
            _fsync_dir(self.committed_dir)
        elif not self._part(epoch).exists():
            raise StateError(f"sink {self.name!r}: epoch {epoch} was never staged")

    def recover(self, checkpoint_epoch: int) -> None:
        """Bring the sink to the state checkpoint ``checkpoint_epoch`` committed (see module doc)."""
        for p in sorted(self.staged_dir.iterdir()):
            e = _epoch_of(p)
            if e is not None and e <= checkpoint_epoch:
                self.commit(e)
            else:
                p.unlink()
        for p in self.committed_dir.iterdir():
            e = _epoch_of(p)
            if e is None or e > checkpoint_epoch:
                p.unlink()
        _fsync_dir(self.staged_dir)
        _fsync_dir(self.committed_dir)

    def committed(self) -> pa.Table:
        """Every committed row, in epoch order."""
        parts = sorted((e, p) for p in self.committed_dir.iterdir() if (e := _epoch_of(p)) is not None)
        tables = [pq.read_table(p, schema=self.schema) for _, p in parts]
        if not tables:
            return self.schema.empty_table()
        return pa.concat_tables(tables).combine_chunks()

    def publish(self, out: str | Path) -> pa.Table:
        """Write the committed rows to ``out`` (Parquet or CSV by suffix) atomically; return them."""
        table = self.committed()
        target = Path(out)
        tmp = target.with_name(f".{target.name}.tmp{target.suffix}")
        write_table(table, tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
        _fsync_dir(target.parent)
        return table
