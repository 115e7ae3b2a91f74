"""A checkpoint that fails is counted and named in the coordinator's stats, and stops the job."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from splice.io.sources import table_source
from splice.ops import Select
from splice.runtime import Query
from splice.runtime.checkpoint import CheckpointCoordinator, Job, SourceStream
from splice.runtime.sinks import TransactionalSink


class BrokenSink(TransactionalSink):
    def commit(self, epoch: int) -> None:
        raise OSError("no space left on device")


def test_a_failed_checkpoint_is_counted_and_stops_the_job(tmp_path):
    t = pa.table({"x": list(range(10))})
    job = Job([SourceStream("s", t.schema)], [Query.chain("q", "s", Select(pc.field("x") > 3))],
              lambda pos: table_source("s", t, batch_size=2, skip=pos),
              sinks={"q": lambda d, n, s: BrokenSink(d, n, s)})
    coord = CheckpointCoordinator(job, tmp_path, interval_batches=2)
    with pytest.raises(OSError, match="no space"):
        coord.run()
    assert coord.stats.failures == 1 and coord.stats.checkpoints == 0
    assert coord.stats.last_failure == "OSError: no space left on device"
