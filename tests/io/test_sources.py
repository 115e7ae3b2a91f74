"""Sources cut their input into bounded batches: at most ``batch_size`` rows and, with
``max_batch_bytes``, at most that many bytes; the batches concatenate back to the input."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import PlanError
from splice.io.sources import bounded_batches, table_source


@settings(max_examples=30)
@given(lengths=st.lists(st.integers(0, 300), max_size=200), batch_size=st.sampled_from([1, 2, 7, 49, 50, 51, 100]),
       max_bytes=st.one_of(st.none(), st.integers(1, 5_000)), chunks=st.integers(1, 4))
def test_bounded_batches_are_bounded_and_lose_nothing(lengths: list[int], batch_size: int, max_bytes: int | None,
                                                       chunks: int) -> None:
    t = pa.table({"s": ["x" * n for n in lengths], "i": list(range(len(lengths)))})
    step = max(1, len(lengths) // chunks)
    t = pa.concat_tables([t.slice(i, step) for i in range(0, len(lengths), step)]) if lengths else t
    out = bounded_batches(t, batch_size, max_bytes)
    assert all(0 < b.num_rows <= batch_size for b in out)
    if max_bytes is not None:
        # a batch over the bound is a single row (rows are never split)
        assert all(b.nbytes <= max_bytes or b.num_rows == 1 for b in out)
    got = pa.Table.from_batches(out, schema=t.schema) if out else t.schema.empty_table()
    assert got.equals(t.combine_chunks())


def test_table_source_replays_from_a_position_with_the_byte_bound() -> None:
    t = pa.table({"s": ["y" * 100] * 50})
    whole = [b for _, b in table_source("s", t, batch_size=20, max_batch_bytes=1_000)]
    assert len(whole) > 3 and all(b.num_rows <= 9 for b in whole)
    tail = [b for _, b in table_source("s", t, batch_size=20, skip=2, max_batch_bytes=1_000)]
    assert [b.num_rows for b in tail] == [b.num_rows for b in whole[2:]]


def test_bad_bounds_are_plan_errors() -> None:
    t = pa.table({"a": [1]})
    with pytest.raises(PlanError, match="batch size must be >= 1"):
        bounded_batches(t, 0)
    with pytest.raises(PlanError, match="max batch bytes must be >= 1"):
        bounded_batches(t, 10, 0)
