"""Two-phase commit of the exactly-once sink: what recovery keeps, finishes and discards."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from splice.core.errors import StateError
from splice.state.sink import TransactionalSink

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


def test_recover_to_an_older_checkpoint_drops_later_parts(tmp_path: Path) -> None:
    sink = TransactionalSink(tmp_path, "q", SCHEMA)
    for e in (1, 2, 3):
        sink.stage(e, [_b(e)])
        sink.commit(e)
    sink.recover(1)  # checkpoint 3 and 2 corrupt: their epochs will be produced again
    assert sink.committed().to_pydict() == {"x": [1]}


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
