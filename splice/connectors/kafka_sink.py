"""A query's results into a Kafka topic, exactly once: one Kafka transaction per checkpoint epoch.

The sink takes part in the coordinator's two-phase commit (:mod:`splice.runtime.sinks`):

1. **pre-commit**: an epoch's results are written durably to a local staged file (as the file
   sink stages them), before the checkpoint is saved;
2. **commit**, after the checkpoint is saved: one transaction of the producer whose
   ``transactional.id`` is stable for the sink (``splice-<sink>`` unless given) writes the
   epoch's rows as JSON records to the topic, and a marker ``{"epoch": e}`` keyed by that
   transactional id to the sink's epochs topic (``<topic>.splice-epochs``), then commits. The
   staged file is removed.

A consumer reading with ``isolation.level=read_committed`` sees an epoch's rows only once its
transaction committed, and each epoch is committed once:

* a crash **before the checkpoint is saved** leaves the epoch uncommitted everywhere; the
  restored job replays it;
* a crash **after the checkpoint is saved and before the Kafka commit** leaves the staged file:
  on recovery the producer's ``init_transactions`` fences the crashed instance and aborts its
  open transaction (its records are never visible), and the epoch is produced again from the
  staged file in a new transaction;
* a crash **after the Kafka commit and before the staged file is removed**: on recovery the
  marker says the epoch is committed, and the file is only removed.

The markers are read back at recovery with ``read_committed``; they are the sink's memory of
what Kafka holds. (A checkpoint found corrupt makes the job restore an older one and replay:
epochs whose markers are already committed are then skipped, not written again.)
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from splice.core.errors import PlanError, StateError
from splice.io.rows import json_value
from splice.runtime.sinks import TransactionalSink

__all__ = ["KafkaSink", "encode_json"]


def _default(value: Any) -> Any:
    """What JSON lacks: bytes as text, the rest as rows are rendered everywhere (decimals as
    exact strings, times in ISO 8601), anything else as its string."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    shown = json_value(value)
    return str(value) if shown is value else shown


def encode_json(batch: pa.RecordBatch) -> list[bytes]:
    """Each row of ``batch`` as one JSON object (decimals as strings, times in ISO 8601)."""
    return [json.dumps(row, default=_default, separators=(",", ":")).encode()
            for row in batch.to_pylist()]


@dataclass
class KafkaSink:
    """Results of query ``name`` into ``topic`` (see the module docstring); staged under
    ``directory`` (the checkpoint directory)."""

    directory: str | Path
    name: str
    schema: pa.Schema
    topic: str
    bootstrap_servers: str
    transactional_id: str | None = None
    properties: Mapping[str, Any] = field(default_factory=dict)
    timeout: float = 30.0

    def __post_init__(self) -> None:
        self.local = TransactionalSink(self.directory, f"kafka~{self.name}", self.schema)
        self.tid = self.transactional_id or f"splice-{self.name}"
        self.epochs_topic = f"{self.topic}.splice-epochs"
        self._producer: Any = None
        self._committed: int | None = None
        self.rows_written = 0

    # -- the producer -------------------------------------------------------------------------
    def _open(self) -> Any:
        if self._producer is None:
            from confluent_kafka import KafkaException, Producer

            self._producer = Producer({"bootstrap.servers": self.bootstrap_servers,
                                       "transactional.id": self.tid, "log_level": 0,
                                       "linger.ms": 5, "compression.type": "zstd",
                                       **dict(self.properties)})
            try:
                self._producer.init_transactions(self.timeout)  # fences a crashed instance
            except KafkaException as exc:
                raise StateError(f"Kafka sink {self.name!r} (topic {self.topic!r}): cannot start "
                                 f"its transactions: {exc}") from exc
        return self._producer

    def committed_epoch(self) -> int:
        """The last epoch whose transaction committed, from the epochs topic (0: none)."""
        if self._committed is None:
            self._committed = _last_marker(self.bootstrap_servers, self.epochs_topic, self.tid,
                                           self.timeout)
        return self._committed

    # -- the two phases -----------------------------------------------------------------------
    def stage(self, epoch: int, batches: Sequence[pa.RecordBatch], position: int = 0,
              final: bool = False) -> None:
        self.local.stage(epoch, batches, position, final)

    def commit(self, epoch: int) -> None:
        staged = self.local._staged(epoch)
        if epoch <= self.committed_epoch():
            staged.unlink(missing_ok=True)
            return
        if not staged.exists():
            raise StateError(f"Kafka sink {self.name!r}: epoch {epoch} was never staged")
        with pa.memory_map(str(staged)) as source:
            table = pa.ipc.open_file(source).read_all()
        from confluent_kafka import KafkaException

        producer = self._open()
        try:
            producer.begin_transaction()
            for batch in table.to_batches():
                for value in encode_json(batch):
                    _produce(producer, self.topic, value)
            _produce(producer, self.epochs_topic, json.dumps({"epoch": epoch}).encode(),
                     key=self.tid.encode(), partition=0)
            producer.commit_transaction(self.timeout)
        except KafkaException as exc:
            raise StateError(f"Kafka sink {self.name!r} (topic {self.topic!r}): epoch {epoch} "
                             f"did not commit: {exc}") from exc
        self._committed = epoch
        self.rows_written += table.num_rows
        staged.unlink()

    def recover(self, checkpoint_epoch: int) -> None:
        """Commit the staged epochs the checkpoint covers that Kafka does not hold yet; drop
        the others (module docstring)."""
        self._open()
        for p in sorted(self.local.staged_dir.iterdir()):
            e = _epoch_number(p)
            if e is not None and e <= checkpoint_epoch:
                self.commit(e)
            else:
                p.unlink()

    def published(self, after: int) -> list[tuple[int, int, bool]]:
        return []

    def committed(self) -> pa.Table:
        """Nothing kept here: the rows are in the topic."""
        return self.schema.empty_table()

    def publish(self, out: str | Path) -> pa.Table:
        raise PlanError(f"Kafka sink {self.name!r}: its rows are in topic {self.topic!r}")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self.timeout)
            self._producer = None


def _produce(producer: Any, topic: str, value: bytes, key: bytes | None = None,
             partition: int | None = None) -> None:
    extra = {} if partition is None else {"partition": partition}
    while True:
        try:
            producer.produce(topic, value, key, **extra)
            return
        except BufferError:  # the local queue is full: let deliveries drain it
            producer.poll(0.05)


def _epoch_number(path: Path) -> int | None:
    stem = path.name.split(".")[0]
    return int(stem.split("-")[1]) if stem.startswith("epoch-") and stem[6:].isdigit() else None


def _last_marker(bootstrap: str, topic: str, tid: str, timeout: float) -> int:
    """The largest committed epoch marker of ``tid`` in ``topic`` (0 when there is none)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{tid}-recovery",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True, "log_level": 0})
    try:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout)
        except KafkaException as exc:
            if exc.args and exc.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                   KafkaError._UNKNOWN_PARTITION):
                return 0  # no epoch was ever committed
            raise
        if high <= low:
            return 0
        consumer.assign([TopicPartition(topic, 0, low)])
        best = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return best
                raise StateError(f"Kafka sink: cannot read its epochs topic {topic!r}: {err.str()}")
            value = msg.value()
            if msg.key() == tid.encode() and value is not None:
                best = max(best, int(json.loads(value)["epoch"]))
        raise StateError(f"Kafka sink: reading its epochs topic {topic!r} timed out")
    finally:
        consumer.close()
