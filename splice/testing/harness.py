"""Drive one operator the way the data path does: batches and control records, in order."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from splice.core.operator import OperatorLogic, OperatorSpec
from splice.core.records import Barrier, Data, End, Watermark
from splice.state.codec import decode_state, encode_state

__all__ = ["OperatorHarness", "Step", "run_operator", "rebatch", "concat"]

Step = Data | Watermark | End | Barrier


def concat(batches: Sequence[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    """One table from ``batches`` (an empty table of ``schema`` when there are none)."""
    if not batches:
        return schema.empty_table()
    return pa.Table.from_batches(list(batches), schema=schema)


def rebatch(table: pa.Table | pa.RecordBatch, size: int) -> list[pa.RecordBatch]:
    """Split ``table`` into batches of exactly ``size`` rows (the last may be shorter)."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    out = []
    for start in range(0, table.num_rows, size):
        out.extend(table.slice(start, size).combine_chunks().to_batches())
    return [b for b in out if b.num_rows] or []


class OperatorHarness:
    """Feeds one operator and keeps what it emitted, its late rows, and its snapshots.

    >>> import pyarrow as pa
    >>> from splice.ops import Select
    >>> h = OperatorHarness(Select("x > 1"), {2: pa.schema([("x", pa.int64())])})
    >>> h.push(2, pa.record_batch({"x": [1, 2, 3]})).to_pydict()
    {'x': [2, 3]}
    """

    def __init__(self, spec: OperatorSpec, inputs: Mapping[int, pa.Schema], state: Any = None):
        self.spec = spec
        self.inputs = dict(inputs)
        self.schema = spec.output_schema(self.inputs)
        self.logic: OperatorLogic = spec.build(self.inputs, state)
        self.output: list[pa.RecordBatch] = []
        #: the late side output: rows refused as late, in order, and the input each came on
        self.late: list[pa.RecordBatch] = []
        self.late_inputs: list[int] = []

    def _keep(self, batches: list[pa.RecordBatch]) -> pa.Table:
        for b in batches:
            if not b.schema.equals(self.schema, check_metadata=False):
                raise AssertionError(
                    f"{self.spec.name}: emitted schema {b.schema} differs from declared {self.schema}"
                )
        self.output.extend(batches)
        for sid, b in self.logic.drain_late():
            self.late.append(b)
            self.late_inputs.append(sid)
        return concat(batches, self.schema)

    def push(self, stream_id: int, batch: pa.RecordBatch) -> pa.Table:
        """Feed one batch; return what the operator emitted for it."""
        return self._keep(self.logic.on_batch(stream_id, batch))

    def watermark(self, stream_id: int, time: int) -> pa.Table:
        return self._keep(self.logic.on_watermark(stream_id, time))

    def end(self) -> pa.Table:
        return self._keep(self.logic.on_end())

    def step(self, record: Step) -> pa.Table:
        if isinstance(record, Data):
            return self.push(record.stream_id, record.batch)
        if isinstance(record, Watermark):
            return self.watermark(record.stream_id, record.time)
        if isinstance(record, End):
            return self.end()
        self.logic.on_barrier(record.checkpoint_id)
        return self.schema.empty_table()

    def run(self, records: Iterable[Step]) -> pa.Table:
        for r in records:
            self.step(r)
        return self.result()

    def snapshot_and_restore(self) -> None:
        """Snapshot the logic, round-trip it through the checkpoint encoding
        (:func:`~splice.state.codec.encode_state`, data only), and continue in a fresh logic
        built from the copy: a snapshot that a checkpoint cannot hold fails here."""
        state = decode_state(encode_state(self.logic.snapshot()))
        self.logic = self.spec.build(self.inputs, state)

    def result(self) -> pa.Table:
        return concat(self.output, self.schema)


def run_operator(
    spec: OperatorSpec,
    inputs: Mapping[int, pa.Schema],
    records: Iterable[Step],
    restore_at: int | None = None,
) -> tuple[pa.Table, OperatorHarness]:
    """Run ``records`` through ``spec``; snapshot and restore before record ``restore_at``."""
    h = OperatorHarness(spec, inputs)
    for i, r in enumerate(records):
        if restore_at is not None and i == restore_at:
            h.snapshot_and_restore()
        h.step(r)
    return h.result(), h
