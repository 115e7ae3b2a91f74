"""A file, or a directory tailed for new files, as a live source of a continuous job.

The files (Parquet, CSV or JSON lines, by suffix) are read in name order, each as batches of
``batch_size`` rows streamed by Arrow's readers (:func:`splice.io.files.iter_input`). A tailed
directory (``monitor_interval`` seconds) is listed again when its files are read, and the job
goes on until it is stopped; a file must appear whole (written elsewhere, then renamed into the
directory), as Flink's file source also expects. Without tailing, the source ends after its
files.

Position: the files read whole, and the batches read of the current one; a resumed source skips
those (the batch boundaries are the same on every read). The watermark trails the largest time
read by ``max_out_of_orderness`` + 1. Bad rows follow the bad-input policy: the job fails naming
the file and row, or they go to the dead letters.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from splice.core.dead_letters import BadInputPolicy, DeadLetterSink
from splice.core.errors import PlanError
from splice.core.time import MIN_TIME, time_values
from splice.io.files import iter_input
from splice.runtime.checkpoint import SourceEvent

__all__ = ["FileSource"]

_SUFFIXES = (".parquet", ".pq", ".csv", ".jsonl", ".ndjson", ".json")


@dataclass
class FileSource:
    """The rows of ``path`` (a file or a directory) as batches of stream ``name``."""

    name: str
    path: str | Path
    schema: pa.Schema | None
    time_column: str | None = None
    max_out_of_orderness: int = 0
    monitor_interval: float | None = None
    bad_input: BadInputPolicy = "fail"
    batch_size: int = 65_536

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if self.monitor_interval is not None and not self.path.is_dir():
            raise PlanError(f"file source {self.name!r}: only a directory can be tailed "
                            f"(source.monitor-interval), and {str(self.path)!r} is not one")
        self._done: list[str] = []
        self._current: str | None = None
        self._batches = 0
        self._max_time = int(MIN_TIME)
        self._reported = int(MIN_TIME)
        self._reader: Iterator[pa.RecordBatch] | None = None
        self._letters = DeadLetterSink()
        self._next_listing = 0.0

    # -- position -----------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {"done": list(self._done), "current": self._current, "batches": self._batches,
                "max_time": self._max_time}

    def open(self, state: Mapping[str, Any] | None = None) -> None:
        saved = dict(state or {})
        self._done = list(saved.get("done", []))
        self._current = saved.get("current")
        self._batches = int(saved.get("batches", 0))
        self._max_time = self._reported = int(saved.get("max_time", MIN_TIME))
        self._reader = None
        if self._current is not None:
            self._reader = self._open_file(self._current, skip=self._batches)

    def close(self) -> None:
        self._reader = None

    def drain(self) -> Iterator[pa.RecordBatch | SourceEvent]:
        return iter(())  # nothing is read ahead

    def ended(self) -> bool:
        return (self.monitor_interval is None and self._reader is None
                and not self._unread())

    # -- reading ------------------------------------------------------------------------------
    def _files(self) -> list[str]:
        path = Path(self.path)
        if path.is_dir():
            return sorted(p.name for p in path.iterdir()
                          if p.is_file() and p.suffix.lower() in _SUFFIXES)
        if not path.exists():
            raise PlanError(f"file source {self.name!r}: no such file {str(path)!r}")
        return [path.name]

    def _unread(self) -> list[str]:
        done = set(self._done)
        return [f for f in self._files() if f not in done]

    def _open_file(self, file: str, skip: int = 0) -> Iterator[pa.RecordBatch]:
        path = Path(self.path)
        full = path / file if path.is_dir() else path
        _, batches = iter_input(full, self.name, batch_size=self.batch_size, schema=self.schema,
                                time_column=self.time_column, policy=self.bad_input,
                                sink=self._letters)
        for _ in range(skip):
            next(batches, None)
        return batches

    def poll(self) -> Iterator[pa.RecordBatch | SourceEvent]:
        if self._reader is None:
            now = time.monotonic()
            if self.monitor_interval is not None and now < self._next_listing:
                return
            unread = self._unread()
            if not unread:
                self._next_listing = now + (self.monitor_interval or 0)
                return
            self._current, self._batches = unread[0], 0
            self._reader = self._open_file(unread[0])
        batch = next(self._reader, None)
        if batch is None:
            assert self._current is not None
            self._done.append(self._current)
            self._current, self._batches, self._reader = None, 0, None
            return
        self._batches += 1
        if self.time_column is not None and batch.num_rows:
            t = time_values(batch, self.time_column, f"file source {self.name!r}")
            self._max_time = max(self._max_time, int(t.max()))
        letters = tuple((r["reason"], r["record"]) for b in self._letters.batches
                        for r in b.to_pylist())
        self._letters.batches.clear()
        if batch.num_rows:
            yield batch
        watermark = None
        if self.time_column is not None and self._max_time != MIN_TIME:
            mark = self._max_time - int(self.max_out_of_orderness) - 1
            if mark > self._reported:
                self._reported = watermark = mark
        if letters or watermark is not None:
            yield SourceEvent(watermark, letters)
