"""Drive a whole engine from tests: streams, queries, pushes, watermarks, snapshot and restore."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa

from splice.runtime import Engine, Query
from splice.state.codec import decode_state, encode_state

__all__ = ["EngineHarness"]


class EngineHarness:
    """An engine with ``streams`` (name -> schema, or (schema, time column)) and ``queries``.

    :meth:`snapshot_and_restore` snapshots every query mid-stream, round-trips the state
    through the checkpoint encoding (:func:`~splice.state.codec.encode_state`), and goes on in
    a fresh engine restored from it; results produced before carry over, so a test can
    compare the interrupted run with an uninterrupted one.
    """

    def __init__(
        self,
        streams: Mapping[str, pa.Schema | tuple[pa.Schema, str | None]],
        queries: Sequence[Query],
        executor: str = "serial",
    ):
        self.streams = dict(streams)
        self.queries = list(queries)
        self.executor = executor
        self.carried: dict[str, list[pa.RecordBatch]] = {q.name: [] for q in self.queries}
        self.engine = self._fresh(None)

    def _fresh(self, states: Mapping[str, dict] | None) -> Engine:
        eng = Engine(executor=self.executor)  # type: ignore[arg-type]
        for name, spec in self.streams.items():
            schema, time_column = spec if isinstance(spec, tuple) else (spec, None)
            eng.define_stream(name, schema, time_column)
        for q in self.queries:
            eng.deploy(q, None if states is None else states.get(q.name))
        return eng

    def push(self, stream: str, batch: pa.RecordBatch) -> None:
        self.engine.push(stream, batch)

    def watermark(self, stream: str, time: int) -> None:
        self.engine.watermark(stream, time)

    def end(self) -> None:
        self.engine.end()

    def snapshot_and_restore(self) -> None:
        states = decode_state(encode_state(self.engine.snapshot()))
        for q in self.queries:
            self.carried[q.name] += self.engine.results(q.name).to_batches()
        self.engine.close()
        self.engine = self._fresh(states)

    def results(self, name: str) -> pa.Table:
        now = self.engine.results(name)
        return pa.Table.from_batches(self.carried[name] + now.to_batches(), schema=now.schema)
