"""Duplicate records at the edge: the second and later records with an already-seen id.

A record of stream ``s`` is a **duplicate** when its values in the id columns ``on`` equal those
of a record of ``s`` that arrived before it (null equals null, as in a group-by). The first
record with an id passes; every later one is bad for the reason ``"duplicate"`` and follows the
source's bad-input policy: ``"fail"`` raises :class:`~splice.core.errors.SchemaError` naming the
stream, the id columns and the row; ``"dead_letter"`` routes it to the
:class:`~splice.io.bad_input.DeadLetterSink`, counted. Never dropped silently.

Algorithm, per batch, vectorized: the id columns are coded as int64 words (the group-by's key
coder: integers and dates as themselves, strings up to 7 bytes packed, longer ones interned);
a batch-local hash table gives each row's distinct id and its first row in the batch; one
``get`` on the seen-id store says which of the batch's ids arrived in earlier batches; the new
ids are ``put``. Rows that are not the first of a new id are the duplicates.

Memory: the seen ids are a keyed state (:mod:`splice.state.keyed`). With the ``"memory"``
backend each distinct id costs its key words plus a null word and one value word, in arrays
and an open-addressing table that grow by doubling: about 50 to 100 bytes per id for one
integer id column (54 bytes measured at 400,000 ids), so 10 M distinct ids take 0.5 to 1 GB.
With the ``"rocksdb"`` backend the ids live on disk and memory stays at the memtables (two of
2 MB at most) and a 4 MB block cache, plus one batch. Interned id strings longer than 7 bytes are held in memory with
either backend (one copy per distinct value).

>>> import pyarrow as pa
>>> from splice.io.bad_input import DeadLetterSink
>>> dl = DeadLetterSink()
>>> d = Deduplicator("orders", pa.schema([("id", pa.int64())]), ["id"], policy="dead_letter", sink=dl)
>>> d.check(pa.record_batch({"id": [1, 2, 1]})).to_pydict(), d.check(pa.record_batch({"id": [2, 3]})).to_pydict()
({'id': [1, 2]}, {'id': [3]})
>>> dl.counts
{'duplicate': 2}
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from splice.core.errors import PlanError, SchemaError
from splice.io.bad_input import BadInputPolicy, DeadLetterSink, check_policy, rows_json
from splice.kernels import group_keys as K
from splice.state.keyed import StateBackendKind, open_keyed_state

__all__ = ["Deduplicator", "DUPLICATE"]

#: the dead-letter reason of a duplicate record
DUPLICATE = "duplicate"

_EMPTY_BOOL = np.zeros(0, dtype=np.bool_)


class Deduplicator:
    """Passes the first record of each id of ``stream``; the later ones are bad (``"duplicate"``)."""

    def __init__(
        self,
        stream: str,
        schema: pa.Schema,
        on: Sequence[str],
        policy: BadInputPolicy = "fail",
        sink: DeadLetterSink | None = None,
        backend: StateBackendKind = "memory",
        directory: str | Path | None = None,
    ) -> None:
        from splice.ops.aggregate import GroupKeyCoder

        check_policy(policy)
        if not on:
            raise PlanError(f"stream {stream!r}: deduplication needs at least one id column")
        missing = [c for c in on if c not in schema.names]
        if missing:
            raise SchemaError(f"stream {stream!r}: dedupe column(s) {', '.join(missing)} not in its schema "
                              f"(columns: {', '.join(schema.names)})")
        self.stream = stream
        self.on = list(on)
        self.policy = policy
        self.sink = sink if sink is not None or policy == "fail" else DeadLetterSink()
        self.coders = [GroupKeyCoder(c, schema.field(c).type) for c in self.on]
        self.seen = open_keyed_state(backend, len(self.on) + 1, 1, directory)
        self.slots = np.full(64, -1, dtype=np.int64)
        self.gkeys = np.zeros((32, len(self.on) + 1), dtype=np.int64)
        self.duplicates = 0

    def _codes(self, batch: pa.RecordBatch) -> np.ndarray:
        keys = np.empty((batch.num_rows, len(self.coders) + 1), dtype=np.int64)
        keys[:, -1] = 0
        for c, coder in enumerate(self.coders):
            col = batch.column(coder.name)
            col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
            nulls = coder.code_into(col, keys, c)
            if nulls is not None:
                keys[:, -1] |= nulls.astype(np.int64) << c
        return keys

    def duplicate_mask(self, batch: pa.RecordBatch) -> np.ndarray:
        """True for the rows of ``batch`` whose id was seen before (and remembers the new ids)."""
        n = batch.num_rows
        if n == 0:
            return np.zeros(0, dtype=bool)
        keys = self._codes(batch)
        self.slots.fill(-1)
        gids, self.slots, self.gkeys, m = K.assign_groups(keys, _EMPTY_BOOL, self.slots, self.gkeys, 0)
        m = int(m)
        # ids are numbered in first-seen order: a row opens a new id when its id exceeds all before
        opens = gids > np.maximum.accumulate(np.concatenate([[-1], gids[:-1]]))
        first = np.flatnonzero(opens)
        ids = self.gkeys[:m]
        _, before = self.seen.get(ids)
        dup = np.ones(n, dtype=bool)
        fresh = np.flatnonzero(~before)
        dup[first[fresh]] = False
        if len(fresh):
            self.seen.put(np.ascontiguousarray(ids[fresh]), np.zeros((len(fresh), 1), dtype=np.int64))
        return dup

    def check(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` without its duplicates (routed or raised as the policy says)."""
        dup = self.duplicate_mask(batch)
        if not dup.any():
            return batch
        count = int(dup.sum())
        if self.policy == "fail":
            row = int(np.flatnonzero(dup)[0])
            raise SchemaError(
                f"stream {self.stream!r}: duplicate record: id ({', '.join(self.on)}) seen before "
                f"(row {row} of the batch; use the dead-letter policy to route duplicates instead of failing)")
        assert self.sink is not None
        self.sink.add(self.stream, DUPLICATE, rows_json(batch, dup))
        self.duplicates += count
        return batch.filter(pa.array(~dup))

    def memory_bytes(self) -> int:
        return int(self.seen.memory_bytes() + self.slots.nbytes + self.gkeys.nbytes
                   + sum(c.nbytes() for c in self.coders))

    def close(self) -> None:
        self.seen.close()
