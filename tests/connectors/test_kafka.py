"""Kafka in and out, against librdkafka's mock cluster (in the confluent-kafka wheel): windowed
SQL jobs Kafka to Kafka with disordered event times, bad records under both policies, a silent
partition under an idle timeout, and a job killed with SIGKILL and run again."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from splice.cli.sql import run_statements
from splice.core.errors import SchemaError

confluent_kafka = pytest.importorskip("confluent_kafka")

ROOT = Path(__file__).resolve().parents[2]


def _produce(bootstrap: str, topic: str, records: list[tuple[int, bytes]]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "log_level": 0,
                                         "compression.type": "zstd", "linger.ms": 20,
                                         "queue.buffering.max.messages": 2_000_000})
    for i, (partition, value) in enumerate(records):
        producer.produce(topic, value, partition=partition)
        if i % 50_000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def _read_committed(bootstrap: str, topic: str, timeout: float = 30, complete: bool = True
                    ) -> list[dict]:
    """Every committed record of ``topic`` (4 partitions), as a consumer with read_committed
    sees it (``complete=False``: what it sees within ``timeout``, the topic maybe not there yet)."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"check-{topic}-{time.monotonic_ns()}",
        "isolation.level": "read_committed", "enable.partition.eof": True, "log_level": 0})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(4)])
    rows, done, deadline = [], set(), time.monotonic() + timeout
    while len(done) < 4 and time.monotonic() < deadline:
        for m in consumer.consume(10_000, 0.2):
            if m.error() is not None:
                done.add(m.partition())
            else:
                rows.append(json.loads(m.value()))
    consumer.close()
    assert len(done) == 4 or not complete, "the output topic was not read to its end"
    return rows


def _events(n: int, seed: int, beyond: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Times with up to 40 ms of disorder within each partition (the bound is 50) and a share
    ``beyond`` of rows far behind (3 s: late wherever their window has closed)."""
    rng = np.random.default_rng(seed)
    ts = np.arange(n) + rng.integers(0, 40, n)
    far = rng.random(n) < beyond
    ts[far] = np.maximum(ts[far] - 3_000, 0)
    return ts, rng.integers(0, 20, n), np.arange(n)


def _job(bootstrap: str, source: str, sink: str, extra: str = "") -> str:
    return f"""
CREATE TABLE events (key BIGINT, ts BIGINT, v BIGINT, WATERMARK FOR ts AS ts - 50)
  WITH (connector = 'kafka', topic = '{source}', 'bootstrap.servers' = '{bootstrap}',
        format = 'json'{extra});
CREATE TABLE out (window_start BIGINT, key BIGINT, n BIGINT, s BIGINT)
  WITH (connector = 'kafka', topic = '{sink}', 'bootstrap.servers' = '{bootstrap}', format = 'json');
INSERT INTO out SELECT window_start, key, count(*) AS n, sum(v) AS s
  FROM TUMBLE(events, ts, 1000) GROUP BY window_start, window_end, key;
"""


def _windows(ts: np.ndarray, key: np.ndarray, v: np.ndarray, keep: np.ndarray) -> Counter:
    out: Counter = Counter()
    for t, k, x in zip(ts[keep].tolist(), key[keep].tolist(), v[keep].tolist(), strict=True):
        out[(t // 1000 * 1000, k, "n")] += 1
        out[(t // 1000 * 1000, k, "s")] += x
    return out


def _as_counter(rows: list[dict]) -> Counter:
    out: Counter = Counter()
    for r in rows:
        out[(r["window_start"], r["key"], "n")] += r["n"]
        out[(r["window_start"], r["key"], "s")] += r["s"]
    return out


@pytest.mark.parametrize("beyond", [0.0, 0.01])
def test_a_windowed_job_kafka_to_kafka_accounts_for_every_record(kafka, beyond):
    n = 30_000
    topic, out = f"ev-{beyond}", f"out-{beyond}"
    ts, key, v = _events(n, 7, beyond)
    _produce(kafka, topic, [(i % 4, b'{"key":%d,"ts":%d,"v":%d}' % (key[i], ts[i], v[i]))
                            for i in range(n)] + [(2, b'{"key": 1, "ts": "noon", "v": 2}')])
    run = run_statements(_job(kafka, topic, out, ", 'scan.bounded.mode' = 'latest-offset'"),
                         batch_size=2048, bad_input="dead_letter")
    got = _as_counter(_read_committed(kafka, out))
    late = run.late["out"].get("events")
    late_v = set() if late is None else set(late.column("v").to_pylist())
    letters = run.dead_letters
    assert letters is not None and letters.num_rows == 1
    assert "partition 2" in letters.column("reason")[0].as_py()
    assert run.metrics["input_rows"] == n  # the bad record never reached the engine
    keep = ~np.isin(v, list(late_v))
    assert sum(c for (_, _, f), c in got.items() if f == "n") + len(late_v) == n
    assert got == _windows(ts, key, v, keep)
    if beyond == 0.0:
        assert not late_v  # within the bound in each partition: nothing is late
    else:
        assert late_v and ts[list(late_v)].max() < ts.max() - 2_000


def test_a_bad_record_fails_the_job_naming_where_it_is(kafka):
    _produce(kafka, "bad-fail", [(0, b'{"key":1,"ts":5,"v":1}'), (3, b"not json")])
    with pytest.raises(SchemaError, match=r"topic 'bad-fail', partition 3, offset 0"):
        run_statements(_job(kafka, "bad-fail", "bad-out", ", 'scan.bounded.mode' = 'latest-offset'"))


@pytest.mark.parametrize("idle", [None, "500ms"])
def test_a_silent_partition_stalls_the_watermark_only_until_its_idle_timeout(kafka, idle):
    topic, out = f"quiet-{idle}", f"quiet-out-{idle}"
    # partitions 0-2 carry 6 s of events; partition 3 stays silent
    _produce(kafka, topic, [(i % 3, b'{"key":1,"ts":%d,"v":1}' % (i * 10)) for i in range(600)])
    extra = "" if idle is None else f", 'scan.watermark.idle-timeout' = '{idle}'"
    stop = threading.Event()
    runner = threading.Thread(target=run_statements, args=(_job(kafka, topic, out, extra),),
                              kwargs={"stop": stop, "checkpoint_interval": 0.1}, daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + (3 if idle is None else 20)
        rows: list[dict] = []
        while not rows and time.monotonic() < deadline:
            time.sleep(0.3)
            rows = _read_committed(kafka, out, timeout=2, complete=False)
    finally:
        stop.set()
        runner.join(30)
    assert not runner.is_alive()
    if idle is None:
        assert rows == []  # the silent partition holds every window open
    else:
        assert {r["window_start"] for r in rows} >= {0, 1000, 2000}


def test_a_job_killed_with_sigkill_gives_exactly_the_uninterrupted_result(kafka, tmp_path):
    """1 M JSON records over 4 partitions through a windowed job with 0.2 s checkpoints; the
    job is killed at a random moment and run again; a read_committed consumer then sees exactly
    what an uninterrupted run writes."""
    n = 1_000_000
    ts, key, v = _events(n, 11, 0.0)
    _produce(kafka, "big", [(i % 4, b'{"key":%d,"ts":%d,"v":%d}' % (key[i], ts[i], v[i]))
                            for i in range(n)])
    bounded = ", 'scan.bounded.mode' = 'latest-offset'"

    def command(out: str, ck: Path) -> list[str]:
        job = tmp_path / f"{out}.sql"
        job.write_text(_job(kafka, "big", out, bounded))
        return [sys.executable, "-m", "splice.cli", "run", str(job), "--checkpoint-dir", str(ck),
                "--checkpoint-interval", "0.2", "--json"]

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    clean = subprocess.run(command("clean", tmp_path / "ck-clean"), env=env, capture_output=True,
                           text=True, timeout=300)
    assert clean.returncode == 0, clean.stderr
    victim = subprocess.Popen(command("killed", tmp_path / "ck-killed"), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(random.Random(os.getpid()).uniform(1.5, 3.5))  # start-up, then mid-stream
    victim.send_signal(signal.SIGKILL)
    victim.wait(30)
    again = subprocess.run(command("killed", tmp_path / "ck-killed"), env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    want = _read_committed(kafka, "clean", timeout=60)
    got = _read_committed(kafka, "killed", timeout=60)
    assert sum(r["n"] for r in want) == n
    assert sorted(map(json.dumps, got)) == sorted(map(json.dumps, want))


def test_a_group_by_over_a_topic_writes_a_changelog_that_replays_to_the_answer(kafka):
    n = 5_000
    ts, key, v = _events(n, 5, 0.0)
    _produce(kafka, "clog", [(i % 4, b'{"key":%d,"ts":%d,"v":%d}' % (key[i], ts[i], v[i]))
                             for i in range(n)])
    run_statements(f"""
CREATE TABLE events (key BIGINT, ts BIGINT, v BIGINT, WATERMARK FOR ts AS ts - 50)
  WITH (connector = 'kafka', topic = 'clog', 'bootstrap.servers' = '{kafka}',
        'scan.bounded.mode' = 'latest-offset');
CREATE TABLE totals (op VARCHAR, key BIGINT, n BIGINT, s BIGINT)
  WITH (connector = 'kafka', topic = 'clog-out', 'bootstrap.servers' = '{kafka}');
INSERT INTO totals SELECT key, count(*) AS n, sum(v) AS s FROM events GROUP BY key;
""", batch_size=1024)
    rows = _read_committed(kafka, "clog-out")
    assert {r["op"] for r in rows} == {"+", "-"}  # an updating aggregate, not one answer at END
    answer: Counter = Counter()
    for r in rows:  # replayed, the changelog is the answer
        answer[(r["key"], r["n"], r["s"])] += 1 if r["op"] == "+" else -1
    final = {k: (nn, s) for (k, nn, s), c in answer.items() if c}
    assert all(c in (0, 1) for c in answer.values())
    want = {int(k): (int((key == k).sum()), int(v[key == k].sum())) for k in np.unique(key)}
    assert final == want


def test_avro_records_with_the_schema_of_the_ddl(kafka):
    fastavro = pytest.importorskip("fastavro")
    import io

    import pyarrow as pa

    from splice.connectors.avro_records import avro_schema

    schema = pa.schema([("key", pa.int64()), ("ts", pa.int64()), ("v", pa.int64())])
    parsed = fastavro.parse_schema(avro_schema(schema))
    n = 4_000
    ts, key, v = _events(n, 9, 0.0)
    records = []
    for i in range(n):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, {"key": int(key[i]), "ts": int(ts[i]),
                                                 "v": int(v[i])})
        records.append((i % 4, buf.getvalue()))
    _produce(kafka, "avro-in", records + [(1, b"\x02\x02")])  # the last one is cut short
    run = run_statements(_job(kafka, "avro-in", "avro-out",
                              ", 'scan.bounded.mode' = 'latest-offset'").replace(
                                  "format = 'json'", "format = 'avro'", 1),
                         bad_input="dead_letter")
    got = _as_counter(_read_committed(kafka, "avro-out"))
    assert got == _windows(ts, key, v, np.ones(n, dtype=bool))
    assert run.dead_letters is not None and run.dead_letters.num_rows == 1
    assert "Avro" in run.dead_letters.column("reason")[0].as_py()
