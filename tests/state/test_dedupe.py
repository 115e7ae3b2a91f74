"""Duplicate records at the edge against a set-based reference: the first record of each id
passes, every later one is dead-lettered with reason "duplicate" (or fails), on any batching."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import PlanError, SchemaError
from splice.io.bad_input import DeadLetterSink
from splice.io.dedupe import Deduplicator
from splice.testing import rebatch

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("v", pa.float64())])
WORDS = ["a", "bb", "a much longer string id", None]


def _reference(rows: list[dict], on: list[str]) -> tuple[list[dict], list[dict]]:
    seen: set[tuple] = set()
    keep: list[dict] = []
    dup: list[dict] = []
    for r in rows:
        key = tuple(r[c] for c in on)
        (dup if key in seen else keep).append(r)
        seen.add(key)
    return keep, dup


@settings(max_examples=30)
@given(ids=st.lists(st.tuples(st.one_of(st.none(), st.integers(-3, 3)), st.sampled_from(WORDS)), max_size=80),
       size=st.sampled_from([1, 2, 7, 49, 50, 51, 100]), on=st.sampled_from([["id"], ["s"], ["id", "s"]]),
       backend=st.sampled_from(["memory", "rocksdb"]))
def test_first_record_of_each_id_passes_later_ones_are_dead_lettered(
        ids: list[tuple[int | None, str | None]], size: int, on: list[str], backend: str) -> None:
    t = pa.table({"id": [i for i, _ in ids], "s": [s for _, s in ids], "v": [float(j) for j in range(len(ids))]},
                 schema=SCHEMA)
    sink = DeadLetterSink()
    d = Deduplicator("events", SCHEMA, on, policy="dead_letter", sink=sink, backend=backend)  # type: ignore[arg-type]
    try:
        kept = [d.check(b) for b in rebatch(t, size)]
    finally:
        d.close()
    want_keep, want_dup = _reference(t.to_pylist(), on)
    got = pa.Table.from_batches(kept, schema=SCHEMA).to_pylist() if kept else []
    assert got == want_keep
    assert sink.counts == ({"duplicate": len(want_dup)} if want_dup else {})
    assert d.duplicates + len(got) == t.num_rows  # nothing dropped silently
    import json
    assert [json.loads(r)["v"] for r in sink.table().column("record").to_pylist()] == [r["v"] for r in want_dup]


def test_fail_policy_names_stream_columns_and_row() -> None:
    d = Deduplicator("orders", SCHEMA, ["id"])
    d.check(pa.record_batch({"id": [1, 2], "s": ["a", "b"], "v": [0.0, 1.0]}, schema=SCHEMA))
    with pytest.raises(SchemaError, match=r"stream 'orders': duplicate record: id \(id\) seen before \(row 1"):
        d.check(pa.record_batch({"id": [3, 2], "s": ["a", "b"], "v": [0.0, 1.0]}, schema=SCHEMA))


def test_bad_specs_are_clear_errors() -> None:
    with pytest.raises(SchemaError, match="dedupe column.*nope.*not in its schema"):
        Deduplicator("s", SCHEMA, ["nope"])
    with pytest.raises(PlanError, match="at least one id column"):
        Deduplicator("s", SCHEMA, [])


def test_seen_ids_in_rocksdb_hold_little_memory(tmp_path: Path) -> None:
    import numpy as np

    n = 300_000
    schema = pa.schema([("id", pa.int64())])
    mem = Deduplicator("s", schema, ["id"], backend="memory")
    rdb = Deduplicator("s", schema, ["id"], backend="rocksdb", directory=tmp_path)
    for start in range(0, n, 10_000):
        b = pa.record_batch({"id": np.arange(start, start + 10_000)}, schema=schema)
        assert mem.check(b).num_rows == rdb.check(b).num_rows == 10_000
    # in memory ~50 bytes per id (keys, a value word, hash slots); RocksDB: memtables, block cache
    assert mem.memory_bytes() > 40 * n
    assert rdb.memory_bytes() < mem.memory_bytes() / 2
    mem.close()
    rdb.close()
