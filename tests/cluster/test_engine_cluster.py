"""``Engine(cluster=RayCluster(...))`` from Python: a query keyed two ways (an interval join by
one key, then a windowed aggregate by another) on 2 workers gives the single-process answer,
watermarks reach the second keyed stage while the input flows, a snapshot resumes on new
workers, bad input is checked at the edge, and a failing query leaves the others running."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from splice.core.errors import SchemaError, StateError
from splice.core.plan import BindInputs, Query
from splice.ops.aggregate import Agg
from splice.ops.window_aggregate import WindowAggregate
from splice.runtime import Engine

ray = pytest.importorskip("ray")

from splice.cluster import RayCluster  # noqa: E402
from splice.joins.temporal.interval_join import IntervalJoin  # noqa: E402

N = 30_000
JOIN = BindInputs(IntervalJoin, {"on": ["key"], "right_on": ["key"], "time": "ts",
                                 "right_time": "ts", "lower": -50, "upper": 50,
                                 "lower_inclusive": True, "upper_inclusive": True, "how": "inner"})
BY_GROUP = WindowAggregate("ts", 1000, keys=["g"], aggregates=[Agg("c", "count"),
                                                               Agg("s", "sum", "payload")])


def _table(seed: int) -> pa.Table:
    """Times disordered within the bound (20), and every 500th row 300 behind: late."""
    rng = np.random.default_rng(seed)
    ts = np.sort(np.arange(N) + rng.integers(0, 10, N))
    ts[::500] -= 300
    return pa.table({"key": rng.integers(0, 200, N), "g": rng.integers(0, 7, N), "ts": ts,
                     "payload": rng.integers(0, 1000, N)})


L, R = _table(1), _table(2)


def _batches() -> list[tuple[str, pa.RecordBatch]]:
    return [(s, b) for pair in zip(L.to_batches(max_chunksize=1024),
                                   R.to_batches(max_chunksize=1024), strict=True)
            for s, b in zip("lr", pair, strict=True)]


def _engine(cluster: RayCluster | None, **kw) -> Engine:
    eng = Engine(cluster=cluster)
    for name, t in (("l", L), ("r", R)):
        eng.define_stream(name, t.schema, "ts", max_out_of_orderness=20, **kw)
    return eng


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by([(c, "ascending") for c in t.column_names])


def _query() -> Query:
    return Query.chain("q", ["l", "r"], JOIN, BY_GROUP)


def test_a_query_keyed_two_ways_gets_its_watermarks_through_both_stages(local_ray):
    one = _engine(None)
    one.deploy(_query())
    two = _engine(RayCluster(2))
    two.deploy(_query())
    for s, b in _batches():
        one.push(s, b)
        two.push(s, b)
    before_end = one.results("q")
    two.snapshot()  # a checkpoint delivers what the watermarks have closed so far
    assert before_end.num_rows > 0
    assert _sorted(two.results("q")).equals(_sorted(before_end))
    one.end()
    two.end()
    assert _sorted(two.results("q")).equals(_sorted(one.results("q")))
    assert two.queries["q"].late_rows == one.queries["q"].late_rows != {}
    figures = two.metrics()["queries"]["q"]["operators"]["cluster"]
    assert figures["stages"] == 2 and figures["restarts"] == 0
    one.close()
    two.close()


def test_a_snapshot_resumes_on_new_workers_with_the_uninterrupted_answer(local_ray):
    batches = _batches()
    cut = len(batches) // 2
    whole = _engine(None)
    whole.deploy(_query())
    for s, b in batches:
        whole.push(s, b)
    whole.end()

    first = _engine(RayCluster(2))
    first.deploy(_query())
    for s, b in batches[:cut]:
        first.push(s, b)
    state = first.snapshot()
    sources = first.source_state()
    delivered = first.results("q")
    late = first.queries["q"].late_rows
    first.close()

    with pytest.raises(StateError, match="resume on as many workers"):
        _engine(RayCluster(3)).deploy(_query(), state["q"])
    second = _engine(RayCluster(2))
    second.restore_source_state(sources)
    second.deploy(_query(), state["q"])
    for s, b in batches[cut:]:
        second.push(s, b)
    second.end()
    got = pa.concat_tables([delivered, second.results("q")])
    assert _sorted(got).equals(_sorted(whole.results("q")))
    late_after = second.queries["q"].late_rows
    assert {k: late.get(k, 0) + late_after.get(k, 0) for k in late | late_after} == \
        whole.queries["q"].late_rows
    second.close()


def test_bad_input_is_refused_at_the_edge_and_the_workers_go_on(local_ray):
    bad = pa.record_batch({"key": [1, 2], "g": [0, 0], "ts": pa.array([5, None], pa.int64()),
                           "payload": [1, 1]})
    strict = _engine(RayCluster(2))
    strict.deploy(_query())
    with pytest.raises(SchemaError, match=r"stream 'l', row 2: .*event time"):
        strict.push("l", bad)
    strict.push("l", bad.slice(0, 1))
    strict.close()

    lenient = _engine(RayCluster(2), bad_input="dead_letter")
    lenient.deploy(_query())
    lenient.push("l", bad)
    assert lenient.dead_letters.total == 1
    for s, b in _batches():
        lenient.push(s, b)
    lenient.end()
    assert lenient.results("q").num_rows > 0
    lenient.close()


def test_a_failing_query_fails_alone(local_ray):
    def broken(batch: pa.RecordBatch) -> None:
        raise RuntimeError("sink down")

    eng = _engine(RayCluster(2, checkpoint_batches=8))
    eng.deploy(Query.chain("bad", ["l", "r"], JOIN, BY_GROUP), on_output=broken)
    eng.deploy(_query())
    raised = 0
    for s, b in _batches():
        try:
            eng.push(s, b)
        except StateError as exc:
            assert "query 'bad' failed" in str(exc) and "sink down" in str(exc)
            raised += 1
    eng.end()
    assert raised == 1
    one = _engine(None)
    one.deploy(_query())
    for s, b in _batches():
        one.push(s, b)
    one.end()
    assert _sorted(eng.results("q")).equals(_sorted(one.results("q")))
    eng.close()


def test_every_row_is_in_a_window_late_or_a_dead_letter_on_workers(local_ray):
    """Disorder within the bound (jitter), beyond it (every 250th row 3 s behind: its window
    has closed) and rows without a time: each input row is counted in a window, in the late rows
    or in the dead letters, and the windows equal one process's."""
    ts = L.column("ts").to_numpy().copy()
    ts[::250] -= 3_000
    ts = ts.astype(object)
    ts[7::997] = None
    table = L.set_column(L.schema.get_field_index("ts"), "ts", pa.array(ts, pa.int64()))
    spec = WindowAggregate("ts", 1000, keys=["key"], aggregates=[Agg("c", "count")])
    answers = []
    for cluster in (None, RayCluster(2, checkpoint_batches=5)):
        eng = Engine(cluster=cluster)
        eng.define_stream("l", table.schema, "ts", max_out_of_orderness=20,
                          bad_input="dead_letter")
        eng.deploy(Query.chain("w", "l", spec))
        for b in table.to_batches(max_chunksize=1024):
            eng.push("l", b)
        eng.end()
        windows = eng.results("w")
        late = sum(eng.queries["w"].late_rows.values())
        letters = eng.dead_letters.total
        assert late > 0 and letters == len(range(7, N, 997))
        assert pa.compute.sum(windows.column("c")).as_py() + late + letters == N
        answers.append(_sorted(windows))
        eng.close()
    assert answers[1].equals(answers[0])
