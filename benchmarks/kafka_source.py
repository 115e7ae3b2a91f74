"""Kafka to Arrow, and a windowed job Kafka to Kafka, on librdkafka's mock cluster.

Run: ``python -m benchmarks.kafka_source [--records 1000000] [--repeat 3]`` (JSON lines).

Data: ``--records`` JSON records ``{"key", "ts", "v"}`` (1,000 keys, times in ms with up to 40 ms
of disorder) over 4 partitions of a topic of the mock cluster in this process (zstd batches,
so that the mock's per-partition log keeps them all).

Figures, medians over ``--repeat`` runs, taking turns:

* ``raw_poll_per_s``: the baseline, a consumer assigned every partition (the source's fetch
  settings) calling ``consume(65536, 0.1)`` until it has every record, doing nothing with them;
* ``source_per_s``: :class:`splice.connectors.kafka_source.KafkaSource` over the same topic,
  records decoded into Arrow batches with their watermarks, until it has every record;
* ``job_per_s``: ``splice run`` of a 1 s tumbling count and sum per key, Kafka to Kafka with
  checkpoints every 0.2 s, in a fresh process: records over the streaming ``seconds``, and over
  the whole process's wall time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = pa.schema([("key", pa.int64()), ("ts", pa.int64()), ("v", pa.int64())])


def produce(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    rng = np.random.default_rng(0)
    key = rng.integers(0, 1000, n).tolist()
    ts = (np.arange(n) + rng.integers(0, 40, n)).tolist()
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0, "linger.ms": 20,
                         "compression.type": "zstd", "queue.buffering.max.messages": 2_000_000})
    for i in range(n):
        producer.produce(topic, b'{"key":%d,"ts":%d,"v":%d}' % (key[i], ts[i], i), partition=i % 4)
        if i % 50_000 == 0:
            producer.poll(0)
    producer.flush(60)


def raw_poll(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "queued.min.messages": 262_144,
                         "log_level": 0})
    t0 = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(4)])
    got = 0
    while got < n:
        got += len(consumer.consume(65_536, 0.1))  # no end-of-partition events: all records
    seconds = time.perf_counter() - t0
    consumer.close()
    return n / seconds


def source(bootstrap: str, topic: str, n: int) -> float:
    from splice.connectors.kafka_source import KafkaSource

    src = KafkaSource("events", topic, bootstrap, SCHEMA, "ts", 50, bounded=True)
    t0 = time.perf_counter()
    src.open()
    got = 0
    while got < n:
        for item in src.poll():
            if isinstance(item, pa.RecordBatch):
                got += item.num_rows
    seconds = time.perf_counter() - t0
    src.close()
    assert got == n, got
    return n / seconds


JOB = """
CREATE TABLE events (key BIGINT, ts BIGINT, v BIGINT, WATERMARK FOR ts AS ts - 50)
  WITH (connector = 'kafka', topic = '{topic}', 'bootstrap.servers' = '{bootstrap}',
        format = 'json', 'scan.bounded.mode' = 'latest-offset');
CREATE TABLE out (window_start BIGINT, key BIGINT, n BIGINT, s BIGINT)
  WITH (connector = 'kafka', topic = '{out}', 'bootstrap.servers' = '{bootstrap}', format = 'json');
INSERT INTO out SELECT window_start, key, count(*) AS n, sum(v) AS s
  FROM TUMBLE(events, ts, 1000) GROUP BY window_start, window_end, key;
"""


def job(bootstrap: str, topic: str, n: int, work: Path, k: int) -> tuple[float, float, int]:
    path = work / f"job{k}.sql"
    path.write_text(JOB.format(topic=topic, out=f"out{k}", bootstrap=bootstrap))
    t0 = time.perf_counter()
    got = subprocess.run([sys.executable, "-m", "splice.cli", "run", str(path), "--checkpoint-dir",
                          str(work / f"ck{k}"), "--checkpoint-interval", "0.2", "--json"],
                         check=True, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    metrics = json.loads(got.stdout.strip().splitlines()[-1])["metrics"]
    assert metrics["input_rows"] == n, metrics
    return n / metrics["seconds"], n / wall, metrics["output_rows"]


def main() -> None:
    from splice.connectors.kafka_source import mock_cluster

    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    handle, bootstrap = mock_cluster()
    produce(bootstrap, "bench", args.records)
    raw, decoded, streamed, walled = [], [], [], []
    outputs = 0
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.repeat):
            raw.append(raw_poll(bootstrap, "bench", args.records))
            decoded.append(source(bootstrap, "bench", args.records))
            s, w, outputs = job(bootstrap, "bench", args.records, Path(tmp), k)
            streamed.append(s)
            walled.append(w)
    r, d = statistics.median(raw), statistics.median(decoded)
    print(json.dumps({
        "bench": "kafka_source", "records": args.records, "partitions": 4,
        "raw_poll_per_s": round(r), "source_per_s": round(d), "source_vs_raw": round(d / r, 2),
        "job_per_s": round(statistics.median(streamed)),
        "job_wall_per_s": round(statistics.median(walled)), "job_output_rows": outputs}))
    del handle


if __name__ == "__main__":
    main()
