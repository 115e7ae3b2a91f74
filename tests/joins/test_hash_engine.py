"""Bad hash and multiway join plans on a running engine: each fails alone with a clear error, and
the other queries deployed on the same engine keep serving."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from splice.core.errors import PlanError, SchemaError, StateError
from splice.core.records import Data
from splice.joins.common.join_windows import CountWindow, TimeWindow
from splice.joins.hash.hash_window_join import HashWindowJoin
from splice.joins.multiway.multiway_join import MultiwayJoin
from splice.runtime import BindInputs, Engine, Node, Query
from splice.testing import OperatorHarness

LS = pa.schema([("k", pa.int64()), ("ts", pa.int64()), ("a", pa.int64())])
RS = pa.schema([("k", pa.int64()), ("ts", pa.int64()), ("b", pa.int64())])
SS = pa.schema([("k", pa.string()), ("c", pa.int64())])
TS = pa.schema([("k", pa.int64()), ("d", pa.int64())])


def three_way(a: int, b: int, c: int, window: int | None = 8, key: str = "k") -> MultiwayJoin:
    return MultiwayJoin((a, b, c), ((a, "k", b, "k"), (b, "k", c, key)), window)


def batches(seed: int, n: int, schema: pa.Schema, null_ts_at: int | None = None) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ts = pa.array([10 * i, 10 * i + 1], pa.int64()) if i != null_ts_at else pa.array([None, 3], pa.int64())
        out.append(pa.record_batch([pa.array(rng.integers(0, 4, 2), pa.int64()), ts,
                                    pa.array([2 * i, 2 * i + 1], pa.int64())], schema=schema))
    return out


@pytest.mark.parametrize("executor", ["serial", "pipelined"])
def test_bad_joins_fail_alone(executor: str) -> None:
    eng = Engine(executor=executor)  # type: ignore[arg-type]
    lid = eng.define_stream("l", LS).id
    rid = eng.define_stream("r", RS).id
    eng.define_stream("s", SS)
    tid = eng.define_stream("t", TS).id
    good = BindInputs(HashWindowJoin, {"on": "k", "window": CountWindow(4)})
    eng.deploy(Query("good", (Node("join", good, ("l", "r")),)))

    # rejected at deployment, naming the query, stream and column; nothing else changes
    with pytest.raises(SchemaError, match=r"query 'mixed'.*column 'k' is string"):
        eng.deploy(Query("mixed", (Node("join", good, ("l", "s")),)))
    with pytest.raises(PlanError, match="nope"):
        eng.deploy(Query("unknown", (Node("join", good, ("l", "nope")),)))
    with pytest.raises(SchemaError, match="column 'k' is string"):
        eng.deploy(Query("mixed3", (Node("join", BindInputs(three_way, {}, ("a", "b", "c")), ("l", "r", "s")),)))
    with pytest.raises(PlanError, match="window size must be >= 1"):
        eng.deploy(Query("w0", (Node("join", BindInputs(HashWindowJoin, {"on": "k", "window": CountWindow(0)}),
                                     ("l", "r")),)))
    # accepted, but fails on a row without an event time while running
    fragile = BindInputs(HashWindowJoin, {"on": "k", "window": TimeWindow(5, "ts")})
    eng.deploy(Query("fragile", (Node("join", fragile, ("l", "r")),)))
    multi = BindInputs(three_way, {}, ("a", "b", "c"))
    eng.deploy(Query("multi", (Node("join", multi, ("l", "r", "t")),)))

    lb, rb = batches(1, 30, LS, null_ts_at=10), batches(2, 30, RS)
    tb = [pa.record_batch([pa.array([i % 4], pa.int64()), pa.array([i], pa.int64())], schema=TS) for i in range(30)]
    arrivals: list[tuple[str, pa.RecordBatch]] = []
    for x, y, z in zip(lb, rb, tb, strict=True):
        arrivals += [("l", x), ("r", y), ("t", z)]
    raised = []  # the failure is told once, from the push (or end) after it
    for name, b in arrivals:
        try:
            eng.push(name, b)
        except StateError as exc:
            raised.append(str(exc))
    try:
        eng.end()
    except StateError as exc:
        raised.append(str(exc))
    assert len(raised) == 1 and "query 'fragile' failed" in raised[0] and "'ts'" in raised[0]

    with pytest.raises(StateError, match="query 'fragile' failed: .*time column 'ts' has 1 null"):
        eng.results("fragile")
    assert eng.metrics()["queries"]["fragile"]["failed"]
    assert not eng.metrics()["queries"]["good"]["failed"]
    # the good queries served the whole input, the rows after the failure included
    ids = {"l": lid, "r": rid, "t": tid}
    for q, spec, inputs in (("good", good.bind([lid, rid]), {lid: LS, rid: RS}),
                            ("multi", multi.bind([lid, rid, tid]), {lid: LS, rid: RS, tid: TS})):
        want = OperatorHarness(spec, inputs).run([Data(ids[s], b) for s, b in arrivals if ids[s] in inputs])
        got = eng.results(q)
        assert got.num_rows > 0 and got.to_pylist() == want.to_pylist()
        assert max(got.column("a").to_pylist()) > 2 * 10 + 1  # rows past the bad batch
