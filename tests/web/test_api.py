"""The web page's JSON API, SSE and Prometheus metrics, through Starlette's test client, over
an engine that streams while the tests read it."""

from __future__ import annotations

import json
import socket

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from starlette.testclient import TestClient

from splice.ops import Select
from splice.runtime import Engine, Query
from splice.web.app import make_app
from splice.web.server import start_server
from splice.web.service import EngineService

SCHEMA = pa.schema([("k", pa.int64()), ("ts", pa.int64()), ("x", pa.float64())])
TOKEN = "s3cret"


def _batch(start: int, n: int = 100) -> pa.RecordBatch:
    return pa.record_batch({"k": [i % 5 for i in range(start, start + n)],
                            "ts": list(range(start, start + n)),
                            "x": [float(i) for i in range(start, start + n)]}, schema=SCHEMA)


@pytest.fixture
def served():
    eng = Engine(bricks=2, units_per_brick=3)
    eng.define_stream("s", SCHEMA, "ts", max_out_of_orderness=5)
    eng.deploy(Query.chain("big", "s", Select(pc.field("x") > 50.0)))
    service = EngineService(eng)
    with TestClient(make_app(service, TOKEN)) as client:
        yield eng, service, client
    eng.close()


def test_topology_has_every_switch_brick_and_unit_and_each_route(served):
    eng, service, client = served
    topo = client.get("/api/topology").json()
    assert len(topo["switches"]) == 3 and len(topo["bricks"]) == 2
    assert sum(len(b["units"]) for b in topo["bricks"]) == 6
    assert topo["queries"]["big"]["units"] and topo["queries"]["big"]["color"].startswith("#")


def test_queries_show_live_figures_as_data_flows(served):
    eng, service, client = served
    service.sample()
    eng.push("s", _batch(0))
    service.sample()
    q = client.get("/api/queries/big").json()
    assert q["rows_in"] == 100 and q["rows_out"] == 49
    assert q["rows_in_per_s"] > 0 and q["watermark"] == 99 - 5 - 1 and q["watermark_lag"] == 6
    assert client.get("/api/queries/nope").status_code == 404


def test_deploy_and_undeploy_need_the_token_and_act_online(served):
    eng, service, client = served
    body = {"sql": "SELECT k, x FROM s WHERE k = 3", "name": "threes"}
    assert client.post("/api/queries", json=body).status_code == 401
    assert client.post("/api/queries", json=body,
                       headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = client.post("/api/queries", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 201 and ok.json() == {"name": "threes"}
    eng.push("s", _batch(100))
    q = client.get("/api/queries/threes").json()
    assert q["sql"] == body["sql"] and q["rows_out"] == 20  # only rows pushed after the deploy
    bad = client.post(f"/api/queries?token={TOKEN}", json={"sql": "SELECT nope FROM s"})
    assert bad.status_code == 400 and "nope" in bad.json()["error"]
    assert client.delete("/api/queries/threes").status_code == 401
    assert client.delete(f"/api/queries/threes?token={TOKEN}").status_code == 200
    assert "threes" not in [q["name"] for q in client.get("/api/queries").json()]
    assert client.delete(f"/api/queries/threes?token={TOKEN}").status_code == 404


def test_metrics_are_prometheus_text(served):
    eng, service, client = served
    eng.push("s", _batch(0))
    text = client.get("/metrics").text
    assert 'splice_query_rows_out_total{query="big"} 49.0' in text
    assert "# TYPE splice_unit_queue_fill gauge" in text
    assert 'splice_unit_rows_in_total{brick="0",query="big",unit="0"} 100.0' in text


def test_events_stream_the_state(served):
    eng, service, client = served
    eng.push("s", _batch(0))
    service.sample()
    with client.stream("GET", "/api/events") as response:
        lines = response.iter_lines()
        assert next(lines) == "event: update"
        state = json.loads(next(lines).removeprefix("data: "))
    assert state["queries"][0]["name"] == "big" and state["topology"]["bricks"]


def test_the_server_listens_only_on_the_address_given():
    eng = Engine()
    web = start_server(EngineService(eng), "127.0.0.1", 0, token=TOKEN, announce=False)
    try:
        bound = [s.getsockname() for srv in web._server.servers for s in srv.sockets]
        assert bound and all(addr[0] == "127.0.0.1" for addr in bound)
        with socket.create_connection(("127.0.0.1", web.port), timeout=5):
            pass
    finally:
        web.stop()
        eng.close()


def test_the_page_of_a_sql_job_shows_its_queries_and_checkpoints(tmp_path):
    import threading
    import time
    import urllib.request

    import pyarrow.parquet as pq

    from splice.cli.serve import JobPage
    from splice.cli.sql import run_statements

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    pq.write_table(pa.table({"k": [1, 2], "ts": [1, 2], "x": [1.0, 2.0]}, schema=SCHEMA),
                   inbox / "a.parquet")
    job = f"""CREATE TABLE s (k BIGINT, ts BIGINT, x DOUBLE, WATERMARK FOR ts AS ts - 5)
      WITH (connector = 'file', path = '{inbox}', 'source.monitor-interval' = '50ms');
    SELECT k, x FROM s WHERE x > 1.5"""
    page = JobPage("127.0.0.1", 0)
    stop = threading.Event()
    runner = threading.Thread(target=run_statements, args=(job,), daemon=True, kwargs={
        "stop": stop, "checkpoint_dir": tmp_path / "ck", "checkpoint_interval": 0.1,
        "observe": page.observe})
    runner.start()
    try:
        deadline, seen = time.monotonic() + 30, {}
        while time.monotonic() < deadline:
            time.sleep(0.2)
            if not page.servers:
                continue
            base = page.servers[0].url
            seen = {k: json.loads(urllib.request.urlopen(f"{base}api/{k}", timeout=10).read())
                    for k in ("queries", "checkpoints")}
            if seen["checkpoints"]["count"] > 0 and seen["queries"]:
                break
        assert seen["queries"][0]["name"] == "query" and seen["queries"][0]["rows_in"] == 2
        assert seen["checkpoints"]["enabled"] and seen["checkpoints"]["count"] > 0
    finally:
        stop.set()
        runner.join(30)
        page.stop()


def test_a_failed_checkpoint_is_counted_and_named():
    from splice.runtime.checkpoint import CheckpointStats

    stats = CheckpointStats(checkpoints=2, checkpoint_seconds=[0.1, 0.2],
                            checkpoint_bytes=[10, 20], failures=1,
                            last_failure="OSError: no space left on device")
    eng = Engine()
    try:
        client = TestClient(make_app(EngineService(eng, checkpoints=lambda: stats), TOKEN))
        got = client.get("/api/checkpoints").json()
    finally:
        eng.close()
    assert got["count"] == 2 and got["last_seconds"] == 0.2 and got["last_bytes"] == 20
    assert got["failures"] == 1 and "no space" in got["last_failure"]
