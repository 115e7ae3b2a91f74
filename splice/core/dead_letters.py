"""Dead letters: rows refused at the edge, each with the stream it came on and its reason.

A source's **bad-input policy** (``BadInputPolicy``) says what happens to a row that cannot be
processed: ``"fail"`` refuses it with an error naming the stream, the row, the column and the
reason; ``"dead_letter"`` routes it to a :class:`DeadLetterSink`, where it is kept with its
reason and counted. Never dropped silently.

>>> dl = DeadLetterSink()
>>> dl.add("trades", "null event time in column 'ts'", ['{"ts": null}'])
>>> dl.total, dl.counts
(1, {"null event time in column 'ts'": 1})
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import pyarrow as pa

from splice.core.errors import PlanError

__all__ = ["BadInputPolicy", "DeadLetterSink", "DEAD_LETTER_SCHEMA", "check_policy", "rows_json"]

BadInputPolicy = Literal["fail", "dead_letter"]

DEAD_LETTER_SCHEMA = pa.schema([("stream", pa.string()), ("reason", pa.string()), ("record", pa.string())])


def check_policy(policy: str) -> None:
    if policy not in get_args(BadInputPolicy):
        raise PlanError(f"bad-input policy must be one of {get_args(BadInputPolicy)}, got {policy!r}")


@dataclass
class DeadLetterSink:
    """Bad records with their reason, counted per reason; with ``path``, written there as JSON
    lines by :meth:`publish`, atomically (a reader sees the previous file or the whole new one,
    never a run's partial letters)."""

    path: str | Path | None = None
    batches: list[pa.RecordBatch] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, stream: str, reason: str, records: Sequence[str]) -> None:
        """Route ``records`` (JSON text or raw lines) of ``stream``, bad for ``reason``."""
        if not records:
            return
        n = len(records)
        self.counts[reason] = self.counts.get(reason, 0) + n
        batch = pa.record_batch([pa.array([stream] * n, pa.string()), pa.array([reason] * n, pa.string()),
                                 pa.array(list(records), pa.string())], schema=DEAD_LETTER_SCHEMA)
        self.batches.append(batch)

    def publish(self) -> None:
        """Write every letter so far to ``path`` (JSON lines of ``stream``, ``reason``,
        ``record``), replacing the file atomically; nothing without a path."""
        if self.path is None:
            return
        target = Path(self.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(row) + "\n" for row in self.table().to_pylist())
        tmp = target.with_name(f".{target.name}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def table(self) -> pa.Table:
        return pa.Table.from_batches(self.batches, schema=DEAD_LETTER_SCHEMA)


def rows_json(batch: pa.RecordBatch | pa.Table, mask: np.ndarray) -> list[str]:
    # the bad rows only: Python per *bad* row, on the error path
    return [json.dumps(r, default=str) for r in batch.filter(pa.array(mask)).to_pylist()]


