"""Two-phase commit of the exactly-once sink: what recovery keeps, finishes and discards."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from splice.core.errors import StateError
from splice.runtime.sinks import TransactionalSink

SCHEMA = pa.schema([("x", pa.int64())])


def _b(*xs: int) -> pa.RecordBatch:
    return pa.record_batch({"x": list(xs)}, schema=SCHEMA)


def test_recover_finishes_completed_and_discards_uncompleted_epochs(tmp_path: Path) -> None:
    sink = TransactionalSink(tmp_path, "q", SCHEMA)
    sink.stage(1, [_b(1), _b(2)])
    sink.commit(1)
    sink.stage(2, [_b(3)])             # checkpoint 2 saved, crash before the commit
    sink.stage(3, [_b(4)])             # checkpoint 3 never saved
    assert sink.committed().to_pydict() == {"x": [1, 2]}
    again = TransactionalSink(tmp_path, "q", SCHEMA)
    again.recover(2)
    assert again.committed().to_pydict() == {"x": [1, 2, 3]}
    assert not list(again.staged_dir.iterdir())


def test_recovery_to_an_older_checkpoint_keeps_published_parts(tmp_path: Path) -> None:
    sink = TransactionalSink(tmp_path, "q", SCHEMA)
    for e in (1, 2, 3):
        sink.stage(e, [_b(e)], position=10 * e, final=e == 3)
        sink.commit(e)
    before = {p.name: p.read_bytes() for p in sink.committed_dir.iterdir()}
    sink.recover(1)  # checkpoints 3 and 2 corrupt: their epochs are replayed, not unpublished
    assert sink.committed().to_pydict() == {"x": [1, 2, 3]}
    assert sink.published(1) == [(2, 20, False), (3, 30, True)]
    # the replay of epoch 2 equals what was published: the staged copy is dropped
    sink.stage(2, [_b(2)], position=20)
    sink.commit(2)
    assert {p.name: p.read_bytes() for p in sink.committed_dir.iterdir()} == before
    # a replay that differs fails loudly, and the published part stays as it was
    sink.stage(3, [_b(99)], position=30, final=True)
    with pytest.raises(StateError, match="epoch 3 was published.*replay differs"):
        sink.commit(3)
    assert {p.name: p.read_bytes() for p in sink.committed_dir.iterdir()} == before


def test_publish_is_atomic_and_commit_idempotent(tmp_path: Path) -> None:
    sink = TransactionalSink(tmp_path, "q", SCHEMA)
    sink.stage(1, [])
    sink.commit(1)
    sink.commit(1)
    sink.stage(2, [_b(5, 6)])
    sink.commit(2)
    out = tmp_path / "out.parquet"
    sink.publish(out)
    assert pq.read_table(out).to_pydict() == {"x": [5, 6]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.parquet", "sink"]
    with pytest.raises(StateError, match="never staged"):
        sink.commit(7)
