"""A Kafka topic as a source stream: JSON or Avro records decoded into Arrow batches, a watermark
per partition, offsets kept in splice's checkpoints.

The consumer is assigned every partition of the topic (no consumer group rebalancing: the
checkpoint, not Kafka, owns the offsets, and nothing is ever committed to Kafka). Each
:meth:`KafkaSource.poll` takes up to ``batch_size`` records and decodes them, JSON with Arrow's
JSON reader (:mod:`splice.connectors.json_records`), Avro with a numba kernel
(:mod:`splice.connectors.avro_records`), on a worker thread while the next poll runs, so
parsing overlaps the consumer's own work.

Event time and watermarks, as Flink's Kafka source keeps them: each partition tracks the largest
time it has delivered; its watermark is that minus ``max_out_of_orderness`` minus one, and the
source's watermark is the least over its partitions. A partition that has delivered nothing for
``idle_timeout`` seconds (wall clock) is idle and left out of that minimum until it delivers
again, so one silent partition does not hold every window open; a partition that reached the
end of a bounded read is left out too.

Position: per partition, the next offset to read and the largest time seen, and for a bounded
read (``bounded=True``: stop at the end offsets the first run found) those end offsets. The
coordinator stores it in each checkpoint; a resumed source reads from exactly there.

Bad records: a record that is not JSON, or whose fields do not convert to the schema's types,
is named by topic, partition and offset. Under ``bad_input="fail"`` the job stops with that
error; under ``"dead_letter"`` the record goes to the dead letters with its reason. Neither
drops a record silently.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from splice.connectors.avro_records import avro_kinds, decode_avro
from splice.connectors.json_records import decode_json
from splice.core.dead_letters import BadInputPolicy, check_policy
from splice.core.errors import PlanError, SchemaError
from splice.core.time import MIN_TIME, time_values
from splice.runtime.checkpoint import SourceEvent

__all__ = ["KafkaSource", "mock_cluster"]


def mock_cluster(brokers: int = 1) -> tuple[Any, str]:
    """A Kafka cluster inside this process (librdkafka's mock cluster, shipped in the
    ``confluent-kafka`` wheel): ``(handle, bootstrap servers)``. It lives as long as ``handle``;
    clients in this and other processes reach it at the bootstrap address. Topics are created
    on first use with 4 partitions."""
    from confluent_kafka.admin import AdminClient

    handle = AdminClient({"test.mock.num.brokers": brokers, "log_level": 0})
    brokers_md = handle.list_topics(timeout=10).brokers.values()
    return handle, ",".join(f"{b.host}:{b.port}" for b in brokers_md)


@dataclass
class KafkaSource:
    """Records of ``topic`` as batches of stream ``name`` (see the module docstring).

    ``properties`` are extra librdkafka settings of the consumer. ``idle_timeout`` is in
    seconds; ``max_out_of_orderness`` in the time column's units.
    """

    name: str
    topic: str
    bootstrap_servers: str
    schema: pa.Schema
    time_column: str | None = None
    max_out_of_orderness: int = 0
    idle_timeout: float | None = None
    bounded: bool = False
    bad_input: BadInputPolicy = "fail"
    batch_size: int = 65_536
    poll_timeout: float = 0.1
    properties: Mapping[str, Any] = field(default_factory=dict)
    #: ``json``, ``avro`` (binary records of the columns' schema) or ``avro-confluent`` (the
    #: same after Confluent's 5-byte header)
    format: str = "json"

    def __post_init__(self) -> None:
        check_policy(self.bad_input)
        if self.format not in ("json", "avro", "avro-confluent"):
            raise PlanError(f"Kafka source {self.name!r}: format {self.format!r} is not one of "
                            "json, avro, avro-confluent")
        if self.format != "json":
            avro_kinds(self.schema)  # every column has an Avro type
        if self.time_column is not None and self.time_column not in self.schema.names:
            raise PlanError(f"Kafka source {self.name!r}: time column {self.time_column!r} is "
                            f"not a column (columns: {', '.join(self.schema.names)})")
        if self.batch_size < 1:
            raise PlanError(f"Kafka source {self.name!r}: batch size must be >= 1")
        self._consumer: Any = None
        self._offsets: dict[int, int] = {}
        self._max_time: dict[int, int] = {}
        self._ends: dict[int, int] | None = None
        self._last_seen: dict[int, float] = {}
        self._watermark = int(MIN_TIME)
        self._eof: dict[int, int] = {}
        self._pending: Future[_Decoded] | None = None
        self._pool: ThreadPoolExecutor | None = None

    # -- position -----------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The position after every batch returned so far (module docstring), JSON-able."""
        state: dict[str, Any] = {"offsets": {str(p): o for p, o in self._offsets.items()},
                                 "max_time": {str(p): t for p, t in self._max_time.items()}}
        if self._ends is not None:
            state["ends"] = {str(p): o for p, o in self._ends.items()}
        return state

    def open(self, state: Mapping[str, Any] | None = None) -> None:
        """Connect and assign every partition, from ``state`` (:meth:`state`) or the start."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        config = {"bootstrap.servers": self.bootstrap_servers, "group.id": f"splice-{self.name}",
                  "enable.auto.commit": False, "enable.auto.offset.store": False,
                  "queued.min.messages": max(100_000, 4 * self.batch_size), "log_level": 0,
                  "enable.partition.eof": self.bounded,
                  **dict(self.properties)}
        self._consumer = Consumer(config)
        meta = self._consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise PlanError(f"Kafka source {self.name!r}: topic {self.topic!r} not found at "
                            f"{self.bootstrap_servers} ({meta.error if meta else 'no metadata'})")
        partitions = sorted(meta.partitions)
        saved = dict(state or {})
        self._offsets = {int(p): int(o) for p, o in saved.get("offsets", {}).items()}
        self._max_time = {int(p): int(t) for p, t in saved.get("max_time", {}).items()}
        if self.bounded:
            if "ends" in saved:
                self._ends = {int(p): int(o) for p, o in saved["ends"].items()}
            else:
                self._ends = {p: int(self._consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=10)[1]) for p in partitions}
        now = time.monotonic()
        self._last_seen = {p: now for p in partitions}
        self._consumer.assign([TopicPartition(self.topic, p, self._offsets.get(p, OFFSET_BEGINNING))
                               for p in partitions])
        self._partitions = partitions
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"splice-kafka-{self.name}")

    def close(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # -- reading ------------------------------------------------------------------------------
    def ended(self) -> bool:
        """Whether a bounded read has delivered every record up to its end offsets."""
        return self._ends is not None and self._pending is None and all(
            self._read_to_end(p) for p in self._ends)

    def _read_to_end(self, p: int) -> bool:
        # a topic written in transactions ends in a commit marker, which has an offset but no
        # record: the end-of-partition event says the consumer is past it
        if self._ends is None:
            return False
        return max(self._offsets.get(p, 0), self._eof.get(p, -1)) >= self._ends[p]

    def _fetch(self) -> list[Any]:
        from confluent_kafka import KafkaError, Message

        msgs = self._consumer.consume(self.batch_size, self.poll_timeout)
        eof: dict[int, int] = {}
        if not msgs:
            return [[], None, None, eof]
        errors = list(map(Message.error, msgs))
        if any(errors):  # the error path: end-of-partition events, faults
            for m, err in zip(msgs, errors, strict=True):
                if err is None:
                    continue
                if err.code() == KafkaError._PARTITION_EOF:
                    eof[m.partition()] = max(eof.get(m.partition(), -1), m.offset())
                else:
                    raise PlanError(f"Kafka source {self.name!r} (topic {self.topic!r}): "
                                    f"{err.str()}")
            msgs = [m for m, err in zip(msgs, errors, strict=True) if err is None]
        parts = np.fromiter(map(Message.partition, msgs), np.int64, len(msgs))
        offsets = np.fromiter(map(Message.offset, msgs), np.int64, len(msgs))
        values = list(map(Message.value, msgs))
        if self._ends is not None and len(msgs):  # a bounded read stops at its end offsets
            ends = np.array([self._ends.get(p, 0) for p in range(int(parts.max()) + 1)])
            keep = offsets < ends[parts]
            if not keep.all():
                rows = np.flatnonzero(keep)
                values = [values[i] for i in rows.tolist()]
                parts, offsets = parts[rows], offsets[rows]
        return [values, parts, offsets, eof]

    def _decode(self, fetched: list[Any]) -> _Decoded:
        values, parts, offsets, eof = fetched
        if self.format == "json":
            batch, bad = decode_json(values, self.schema)
        else:
            batch, bad = decode_avro(values, self.schema, self.format == "avro-confluent")
        times = None
        if self.time_column is not None and batch.num_rows:
            times = time_values(batch, self.time_column, f"Kafka source {self.name!r}")
        return _Decoded(batch, bad, parts, offsets, times, values, eof)

    def poll(self) -> Iterator[pa.RecordBatch | SourceEvent]:
        """The next batch (when records arrived) and then a :class:`SourceEvent` with the
        source's watermark, when it moved, and the records set aside."""
        assert self._consumer is not None and self._pool is not None, "open() first"
        fetched = self._fetch()
        ready = None
        if self._pending is not None:
            ready = self._pending.result()
            self._pending = None
        if fetched[0]:
            self._pending = self._pool.submit(self._decode, fetched)
            yield from self._deliver(ready)
        else:
            # an end of partition takes effect once the records fetched before it are delivered
            yield from self._deliver(ready, fetched[3])

    def drain(self) -> Iterator[pa.RecordBatch | SourceEvent]:
        """What a decode still holds: every record fetched so far is returned (before a
        checkpoint, so that the position saved covers exactly the records pushed)."""
        while self._pending is not None:
            ready = self._pending.result()
            self._pending = None
            yield from self._deliver(ready)

    def _deliver(self, ready: _Decoded | None, eof: dict[int, int] | None = None
                 ) -> Iterator[pa.RecordBatch | SourceEvent]:
        now = time.monotonic()
        dead: list[tuple[str, str]] = []
        if ready is not None:
            dead = self._bad_records(ready)
            self._advance(ready, now)
            if ready.batch.num_rows:
                yield ready.batch
        for p, offset in (eof or {}).items():
            self._eof[p] = max(self._eof.get(p, -1), offset)
        watermark = self._source_watermark(now)
        if dead or watermark is not None:
            yield SourceEvent(watermark, tuple(dead))

    def _bad_records(self, ready: _Decoded) -> list[tuple[str, str]]:
        if not ready.bad:
            return []
        parts, offsets = ready.parts, ready.offsets
        i, reason = ready.bad[0]
        where = f"topic {self.topic!r}, partition {int(parts[i])}, offset {int(offsets[i])}"
        if self.bad_input == "fail":
            raise SchemaError(f"Kafka source {self.name!r}: {where}: {reason} (set the source's "
                              "bad-input policy to dead-letter to set such records aside)")
        return [(f"{r} (topic {self.topic!r}, partition {int(parts[j])}, offset "
                 f"{int(offsets[j])})", _text(ready.values[j])) for j, r in ready.bad]

    def _advance(self, ready: _Decoded, now: float) -> None:
        """Move each partition's next offset and largest time past the decoded records."""
        parts, offsets, times, bad = ready.parts, ready.offsets, ready.times, ready.bad
        for p, offset in ready.eof.items():
            self._eof[p] = max(self._eof.get(p, -1), offset)
        if not len(parts):
            return
        order = np.argsort(parts, kind="stable")
        sp = parts[order]
        cuts = np.flatnonzero(np.diff(sp)) + 1
        starts = np.concatenate([[0], cuts])
        ends = np.concatenate([cuts, [len(sp)]])
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            p = int(sp[a])
            self._offsets[p] = int(offsets[order[a:b]].max()) + 1
            self._last_seen[p] = now
        if times is None or not len(times):
            return
        good = parts
        if bad:
            keep = np.ones(len(parts), dtype=bool)
            keep[[i for i, _ in bad]] = False
            good = parts[keep]
        for p in np.unique(good).tolist():
            t = int(times[good == p].max())
            if t > self._max_time.get(p, int(MIN_TIME)):
                self._max_time[p] = t

    def _source_watermark(self, now: float) -> int | None:
        """The source's watermark when it moved past the last one reported, else None."""
        if self.time_column is None:
            return None
        marks = []
        for p in self._partitions:
            if self._read_to_end(p):
                continue
            idle = (self.idle_timeout is not None and now - self._last_seen[p] >= self.idle_timeout)
            if idle:
                continue
            t = self._max_time.get(p)
            if t is None:
                return None  # an active partition has delivered nothing yet
            marks.append(t - int(self.max_out_of_orderness) - 1)
        if not marks:
            return None
        wm = min(marks)
        if wm > self._watermark:
            self._watermark = wm
            return wm
        return None


@dataclass(frozen=True)
class _Decoded:
    """One poll's records, decoded: the batch, the bad records, and where each record was."""

    batch: pa.RecordBatch
    bad: list[tuple[int, str]]
    parts: np.ndarray
    offsets: np.ndarray
    times: np.ndarray | None
    values: list[bytes | None]
    #: partitions whose end this fetch reached, and at which offset
    eof: dict[int, int]


def _text(value: bytes | None) -> str:
    return "" if value is None else value.decode("utf-8", errors="replace")
