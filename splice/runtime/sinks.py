"""Exactly-once file sinks: an epoch's results become visible only when its checkpoint completes.

Two-phase commit into part files (Arrow IPC: written as the batches lie in memory, no encoding,
so staging costs little more than the fsync). For epoch ``e`` (the results between checkpoints
``e - 1`` and ``e``):

1. **pre-commit** (:meth:`TransactionalSink.stage`, before checkpoint ``e`` is saved): the batches
   are written durably to ``staged/epoch-<e>.arrow`` (temporary name, fsync, rename);
2. **commit** (:meth:`TransactionalSink.commit`, after checkpoint ``e`` is saved): the staged file is
   renamed to ``committed/part-<e>.arrow``.

A committed part is published: it is never deleted or changed. Each part records the source
position its epoch ended at (and whether it was the last epoch, flushed at END).

Recovery from checkpoint ``c`` (:meth:`TransactionalSink.recover`) finishes commits the crash
interrupted (staged epochs ``<= c``: their checkpoint completed) and discards staged epochs ``> c``
(their checkpoint never completed: the replay produces them again). Committed parts ``> c``
exist only when checkpoint ``c + 1`` or later was found corrupt and ``c`` restored instead; they
stay. The coordinator replays to the positions they record (:meth:`TransactionalSink.published`)
and checkpoints exactly there, so each replayed epoch holds the same rows; committing an epoch
whose part is already published compares the two byte for byte: equal, the staged copy is
dropped; different (the input or the job changed), the run fails loudly and the part stays.
:meth:`TransactionalSink.publish` concatenates the committed parts in epoch order into the final
output file, atomically. Parts hold the rows in production order, so the published file equals
the one an uninterrupted run publishes, byte for byte.

>>> import tempfile, pyarrow as pa
>>> sink = TransactionalSink(tempfile.mkdtemp(), "q", pa.schema([("x", pa.int64())]))
>>> sink.stage(1, [pa.record_batch({"x": [1, 2]})], position=4); sink.commit(1)
>>> sink.stage(2, [pa.record_batch({"x": [3]})], position=9)   # crash before checkpoint 2 completes
>>> sink.recover(1); sink.committed().to_pydict()
{'x': [1, 2]}
"""

from __future__ import annotations

import filecmp
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from splice.core.errors import StateError
from splice.runtime.checkpoint_store import _fsync_dir

__all__ = ["TransactionalSink", "FilePartsSink", "MemorySink", "OutputSink", "publish_table",
           "write_table"]

_EPOCH = re.compile(r"^(?:epoch|part)-(\d+)\.arrow$")
#: where a part records the source position its epoch ended at, and whether it was the last
_POSITION, _FINAL = b"splice.position", b"splice.final"


def write_table(table: pa.Table, path: str | Path) -> None:
    """Write ``table`` as Parquet (``.parquet``), CSV (``.csv``) or JSON lines (``.jsonl``), by
    the path's suffix."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    suffix = p.suffix.lower()
    if suffix == ".csv":
        pacsv.write_csv(table, p)
    elif suffix in (".jsonl", ".ndjson", ".json"):
        with open(p, "w") as f:
            for row in table.to_pylist():
                f.write(json.dumps(row, default=str) + "\n")
    else:
        pq.write_table(table, p)


def publish_table(table: pa.Table, out: str | Path) -> None:
    """Write ``table`` to ``out`` (Parquet or CSV by suffix) atomically: a temporary file,
    fsynced, renamed into place."""
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp{target.suffix}")
    write_table(table, tmp)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, target)
    _fsync_dir(target.parent)


class OutputSink(Protocol):
    """Where a job's query results go, epoch by epoch (see :class:`TransactionalSink`)."""

    schema: pa.Schema

    def stage(self, epoch: int, batches: Sequence[pa.RecordBatch], position: int = 0,
              final: bool = False) -> None: ...

    def commit(self, epoch: int) -> None: ...

    def recover(self, checkpoint_epoch: int) -> None: ...

    def published(self, after: int) -> list[tuple[int, int, bool]]: ...

    def committed(self) -> pa.Table: ...

    def publish(self, out: str | Path) -> pa.Table: ...


@dataclass
class MemorySink:
    """The results of a job run without checkpoints: kept in memory, each epoch visible at once.

    It takes the place of a :class:`TransactionalSink` so that a job runs the same way with
    checkpoints and without."""

    schema: pa.Schema
    batches: list[pa.RecordBatch] = field(default_factory=list)

    def stage(self, epoch: int, batches: Sequence[pa.RecordBatch], position: int = 0,
              final: bool = False) -> None:
        self.batches.extend(batches)

    def commit(self, epoch: int) -> None:
        return None

    def recover(self, checkpoint_epoch: int) -> None:
        return None

    def published(self, after: int) -> list[tuple[int, int, bool]]:
        return []

    def committed(self) -> pa.Table:
        return pa.Table.from_batches(self.batches, schema=self.schema)

    def publish(self, out: str | Path) -> pa.Table:
        table = self.committed()
        publish_table(table, out)
        return table


def _epoch_of(path: Path) -> int | None:
    m = _EPOCH.match(path.name)
    return int(m.group(1)) if m else None


@dataclass
class TransactionalSink:
    """Part files of query ``name`` under ``directory/sink/<name>``, committed by epoch."""

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
        return self.staged_dir / f"epoch-{epoch:012d}.arrow"

    def _part(self, epoch: int) -> Path:
        return self.committed_dir / f"part-{epoch:012d}.arrow"

    def stage(self, epoch: int, batches: Sequence[pa.RecordBatch], position: int = 0,
              final: bool = False) -> None:
        """Pre-commit: write epoch ``epoch``'s ``batches`` durably, invisible until :meth:`commit`;
        the epoch ended at source position ``position`` (``final``: at END)."""
        target = self._staged(epoch)
        tmp = target.with_name(target.name + ".tmp")
        schema = self.schema.with_metadata({_POSITION: str(int(position)).encode(),
                                            _FINAL: b"1" if final else b"0"})
        with open(tmp, "wb") as f:
            with pa.ipc.new_file(f, schema) as writer:
                for b in batches:
                    if b.num_rows:
                        writer.write_batch(b)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        _fsync_dir(self.staged_dir)

    def commit(self, epoch: int) -> None:
        """Make epoch ``epoch`` visible; idempotent (a commit repeated after recovery is a
        no-op). A part already published for the epoch is never replaced: the staged copy must
        equal it byte for byte, or :class:`StateError`."""
        staged, part = self._staged(epoch), self._part(epoch)
        if staged.exists():
            if part.exists():
                if not filecmp.cmp(staged, part, shallow=False):
                    raise StateError(
                        f"sink {self.name!r}: epoch {epoch} was published as {str(part)!r}, and "
                        "its replay differs: the input or the job changed since; the published "
                        "part is kept (run with --restart to discard this job's output)")
                staged.unlink()
            else:
                os.replace(staged, part)
            _fsync_dir(self.committed_dir)
        elif not part.exists():
            raise StateError(f"sink {self.name!r}: epoch {epoch} was never staged")

    def recover(self, checkpoint_epoch: int) -> None:
        """Bring the sink to the state checkpoint ``checkpoint_epoch`` committed (see module doc);
        published parts are kept, whatever their epoch."""
        for p in sorted(self.staged_dir.iterdir()):
            e = _epoch_of(p)
            if e is not None and e <= checkpoint_epoch:
                self.commit(e)
            else:
                p.unlink()
        _fsync_dir(self.staged_dir)
        _fsync_dir(self.committed_dir)

    def published(self, after: int) -> list[tuple[int, int, bool]]:
        """``(epoch, position, final)`` of each published part after epoch ``after``."""
        out = []
        for p in sorted(self.committed_dir.iterdir()):
            e = _epoch_of(p)
            if e is None or e <= after:
                continue
            with pa.memory_map(str(p)) as source:
                meta = pa.ipc.open_file(source).schema.metadata or {}
            out.append((e, int(meta.get(_POSITION, b"0")), meta.get(_FINAL) == b"1"))
        return out

    def committed(self) -> pa.Table:
        """Every committed row, in epoch order."""
        parts = sorted((e, p) for p in self.committed_dir.iterdir() if (e := _epoch_of(p)) is not None)
        batches: list[pa.RecordBatch] = []
        for _, p in parts:
            with pa.memory_map(str(p)) as source:
                batches.extend(pa.ipc.open_file(source).read_all().to_batches())
        return pa.Table.from_batches(batches, schema=self.schema)

    def publish(self, out: str | Path) -> pa.Table:
        """Write the committed rows to ``out`` (Parquet or CSV by suffix) atomically; return them."""
        table = self.committed()
        publish_table(table, out)
        return table


_PART_SUFFIX = {"parquet": ".parquet", "csv": ".csv", "json": ".jsonl"}


@dataclass
class FilePartsSink(TransactionalSink):
    """A query's results as one file per committed epoch, ``part-<epoch>.<suffix>`` in the
    directory ``target`` (Parquet, CSV or JSON lines by ``fmt``), for jobs that run until
    stopped: a reader sees whole parts only, each written under a temporary name and renamed
    once its epoch's checkpoint is saved, exactly once across crashes (the two phases of
    :class:`TransactionalSink`, whose committed part each file is exported from)."""

    target: str | Path = ""
    fmt: str = "parquet"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.fmt not in _PART_SUFFIX:
            raise StateError(f"sink {self.name!r}: format {self.fmt!r} is not one of "
                             f"{', '.join(_PART_SUFFIX)}")
        Path(self.target).mkdir(parents=True, exist_ok=True)

    def _export(self, epoch: int) -> None:
        out = Path(self.target) / f"part-{epoch:012d}{_PART_SUFFIX[self.fmt]}"
        part = self._part(epoch)
        if out.exists() or not part.exists():
            return
        with pa.memory_map(str(part)) as source:
            table = pa.ipc.open_file(source).read_all()
        if table.num_rows:
            publish_table(table, out)

    def commit(self, epoch: int) -> None:
        super().commit(epoch)
        self._export(epoch)

    def recover(self, checkpoint_epoch: int) -> None:
        super().recover(checkpoint_epoch)
        for p in sorted(self.committed_dir.iterdir()):  # committed, the export cut short
            e = _epoch_of(p)
            if e is not None:
                self._export(e)
