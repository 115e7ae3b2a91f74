"""The engine end to end: reconfiguration in order, shared streams, bad input, both executors."""

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from splice.core.errors import PlanError, SchemaError, StateError
from splice.ops import Project, Select
from splice.runtime import Engine, Node, Query
from tests.runtime.opkit import CountAll, FailOn, Repeat

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.float64()), ("c", pa.string())])
EXECUTORS = ["serial", "pipelined"]


def batch(start: int, n: int) -> pa.RecordBatch:
    ks = list(range(start, start + n))
    return pa.record_batch(
        {"k": pa.array(ks, pa.int64()), "v": pa.array([k * 0.5 for k in ks]),
         "c": pa.array([f"c{k}" for k in ks])}, schema=SCHEMA)


def make(executor="serial", **kw) -> Engine:
    eng = Engine(executor=executor, **kw)
    eng.define_stream("s", SCHEMA)
    return eng


@pytest.mark.parametrize("executor", EXECUTORS)
@given(sizes=st.lists(st.integers(0, 6), min_size=1, max_size=10), data=st.data())
def test_query_deployed_at_p_sees_exactly_the_rows_after_p(executor, sizes, data):
    p = data.draw(st.integers(0, len(sizes)))
    q = data.draw(st.integers(p, len(sizes)))
    eng = make(executor, bricks=1, units_per_brick=2)
    eng.deploy(Query.chain("always", "s", Project({"k": "k"})))
    start = 0
    want_late, want_always = [], []
    for i in range(len(sizes) + 1):
        if i == p:
            eng.deploy(Query.chain("later", "s", Project({"k": "k"})))
        if i == q:
            eng.undeploy("later")
        if i == len(sizes):
            break
        n = sizes[i]
        if p <= i < q:
            want_late += list(range(start, start + n))
        want_always += list(range(start, start + n))
        eng.push("s", batch(start, n))
        start += n
    eng.end()
    assert eng.results("later").column("k").to_pylist() == want_late
    assert eng.results("always").column("k").to_pylist() == want_always
    eng.close()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_queries_share_one_input_stream_and_chains_span_bricks(executor):
    eng = make(executor, bricks=2, units_per_brick=2, grow=False)
    eng.deploy(Query.chain("sel", "s", Select(pc.field("k") < 20), Project({"k": "k"})))
    eng.deploy(Query.chain("cnt", "s", CountAll()))
    for i in range(5):
        eng.push("s", batch(i * 4, 4))
    eng.end()
    assert eng.results("sel").column("k").to_pylist() == list(range(20))
    assert eng.results("cnt").column("n").to_pylist() == [20]
    # the two-operator chain occupies one unit in each brick
    hosts = [[u.query for u in b.units] for b in eng.topology.bricks]
    assert "sel" in hosts[0] and "sel" in hosts[1]
    eng.close()


def test_dag_plan_with_a_node_reading_two_streams():
    eng = make()
    eng.define_stream("t", SCHEMA)
    q = Query("both", (
        Node("a", Project({"k": "k"}), ("s",)),
        Node("b", Project({"k": "k"}), ("t",)),
        Node("all", CountAll(), ("a", "b")),
    ))
    eng.deploy(q)
    eng.push("s", batch(0, 3))
    eng.push("t", batch(0, 4))
    eng.end()
    assert eng.results("both").column("n").to_pylist() == [7]


def test_only_used_columns_travel_and_the_composer_reattaches_others():
    eng = make()
    eng.deploy(Query.chain("v_only", "s", Select(pc.field("v") > 1.0), compose={"s": ["c"]}))
    eng.push("s", batch(0, 5))
    unit = eng.topology.bricks[0].units[0]
    assert unit.loaded is not None and unit.loaded.columns[2] == ["k", "v", "__row_id"]
    assert eng.decomposer.travel[2] == ["k", "v"]  # "c" waits in the parse table
    eng.end()
    assert eng.results("v_only").to_pydict() == {"k": [3, 4], "v": [1.5, 2.0], "c": ["c3", "c4"]}
    assert eng.decomposer.nbytes == 0  # a stateless composing query releases parse entries


def test_replicated_stateless_node_keeps_order_across_units():
    for executor in EXECUTORS:
        eng = make(executor, bricks=2, units_per_brick=4)
        eng.deploy(Query.chain("rep", "s", Repeat(1, tag=0), replicas=3))
        for i in range(10):
            eng.push("s", batch(i * 3, 3))
        eng.end()
        assert eng.results("rep").column("k").to_pylist() == list(range(30))
        busy = [u for b in eng.topology.bricks for u in b.units if u.stats.rows_in]
        assert len(busy) == 4  # the splitter and three replicas
        eng.close()


def test_plan_too_big_for_the_topology_is_refused_clearly():
    eng = make(bricks=1, units_per_brick=1, grow=False)
    with pytest.raises(PlanError, match="does not fit the topology"):
        eng.deploy(Query.chain("two", "s", Project({"k": "k"}), CountAll()))
    # nothing half-deployed remains: a one-unit query still fits
    eng.deploy(Query.chain("one", "s", CountAll()))
    eng.push("s", batch(0, 2))
    eng.end()
    assert eng.results("one").column("n").to_pylist() == [2]


def test_topology_grows_when_allowed():
    eng = make(bricks=1, units_per_brick=1, grow=True)
    eng.deploy(Query.chain("three", "s", Project({"k": "k"}), Project({"k": "k"}), CountAll()))
    assert len(eng.topology.bricks) == 3
    eng.push("s", batch(0, 4))
    eng.end()
    assert eng.results("three").column("n").to_pylist() == [4]


def test_bad_inputs_get_clear_errors_and_other_queries_lose_nothing():
    eng = make()
    eng.deploy(Query.chain("cnt", "s", CountAll()))
    eng.push("s", batch(0, 3))
    wrong = pa.record_batch({"k": pa.array([1], pa.int32()), "v": [1.0], "c": ["x"]})
    with pytest.raises(SchemaError, match=r"stream 's': column 'k' has type int32"):
        eng.push("s", wrong)
    with pytest.raises(SchemaError, match=r"stream 's': batch lacks column\(s\) 'c'"):
        eng.push("s", pa.record_batch({"k": pa.array([1], pa.int64()), "v": [1.0]}))
    with pytest.raises(PlanError, match="unknown stream 'nope'"):
        eng.push("nope", batch(0, 1))
    with pytest.raises(SchemaError, match=r"query 'bad'.*column 'missing' does not exist"):
        eng.deploy(Query.chain("bad", "s", Select(pc.field("missing") > 1)))
    with pytest.raises(PlanError, match="unknown stream 'nowhere'"):
        eng.deploy(Query.chain("lost", "nowhere", CountAll()))
    with pytest.raises(PlanError, match="cannot undeploy unknown query 'ghost'"):
        eng.undeploy("ghost")
    eng.push("s", batch(3, 4))
    eng.end()
    assert eng.results("cnt").column("n").to_pylist() == [7]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_failing_operator_fails_its_query_only_and_says_so_once(executor):
    eng = make(executor)
    eng.deploy(Query.chain("fragile", "s", FailOn("k", 4)))
    eng.deploy(Query.chain("cnt", "s", CountAll()))
    raised = []
    for i in range(4):
        try:
            eng.push("s", batch(i * 3, 3))
        except StateError as exc:
            raised.append(str(exc))
    try:
        eng.end()
    except StateError as exc:
        raised.append(str(exc))
    assert len(raised) == 1 and "query 'fragile' failed: user function failed on k = 4" in raised[0]
    assert eng.results("cnt").column("n").to_pylist() == [12]
    with pytest.raises(StateError, match="query 'fragile' failed: user function failed on k = 4"):
        eng.results("fragile")
    assert eng.results("fragile", partial=True).column("k").to_pylist() == [0, 1, 2]


@given(sizes=st.lists(st.integers(0, 5), min_size=0, max_size=8))
def test_serial_and_pipelined_executors_agree(sizes):
    outs = []
    for executor in EXECUTORS:
        eng = make(executor, bricks=2, units_per_brick=2)
        eng.deploy(Query.chain("a", "s", Select(pc.field("k") > 3), Project({"k": "k"})))
        eng.deploy(Query.chain("b", "s", Repeat(2, tag=1)))
        start = 0
        for n in sizes:
            eng.push("s", batch(start, n))
            start += n
        eng.end()
        outs.append((eng.results("a").to_pydict(), eng.results("b").to_pydict()))
        eng.close()
    assert outs[0] == outs[1]


def test_nulls_in_a_predicate_count_as_false():
    eng = make()
    eng.deploy(Query.chain("q", "s", Select(pc.field("v") > 1.0), compose={"s": ["k"]}))
    b = pa.record_batch({"k": pa.array([1, 2], pa.int64()), "v": pa.array([None, 3.0]),
                         "c": ["a", "b"]}, schema=SCHEMA)
    eng.push("s", b)
    eng.end()
    assert eng.results("q").to_pydict() == {"v": [3.0], "c": ["b"], "k": [2]}


def test_engine_generates_bounded_out_of_orderness_watermarks():
    eng = Engine()
    schema = pa.schema([("t", pa.int64())])
    eng.define_stream("e", schema, time_column="t", max_out_of_orderness=5)
    seen = []
    eng.topology.gswitches[0]._tap = seen.append  # observe records entering the path
    from splice.core.records import Instruction, Watermark
    from splice.runtime.switch import TAP
    eng.executor.submit(Instruction(eng.topology.gswitches[0].switch.block_id, 2, TAP))
    eng.push("e", pa.record_batch({"t": pa.array([10, 3], pa.int64())}))
    eng.push("e", pa.record_batch({"t": pa.array([8], pa.int64())}))  # no advance: no watermark
    eng.push("e", pa.record_batch({"t": pa.array([20], pa.int64())}))
    marks = [r.time for r in seen if isinstance(r, Watermark)]
    assert marks == [4, 14]
    with pytest.raises(PlanError, match="watermarks need a time column"):
        eng.define_stream("x", schema, max_out_of_orderness=1)


@pytest.mark.parametrize("executor", EXECUTORS)
@given(sizes=st.lists(st.integers(0, 5), min_size=1, max_size=8), data=st.data())
def test_snapshot_mid_stream_and_restore_equals_an_uninterrupted_run(executor, sizes, data):
    from splice.testing import EngineHarness

    cut = data.draw(st.integers(0, len(sizes)))
    queries = [Query.chain("cnt", "s", CountAll()),
               Query.chain("sel", "s", Select(pc.field("k") > 2), Project({"k": "k"}), replicas=2)]
    straight = EngineHarness({"s": SCHEMA}, queries, executor)
    broken = EngineHarness({"s": SCHEMA}, queries, executor)
    start = 0
    for i, n in enumerate(sizes):
        if i == cut:
            broken.snapshot_and_restore()
        for h in (straight, broken):
            h.push("s", batch(start, n))
        start += n
    for h in (straight, broken):
        h.end()
    for name in ("cnt", "sel"):
        assert broken.results(name).to_pydict() == straight.results(name).to_pydict()


def test_restored_units_keep_their_watermark_progress():
    """A two-input unit restored from a snapshot remembers both inputs' watermarks."""
    from splice.testing import EngineHarness

    schema = pa.schema([("t", pa.int64())])
    q = Query("both", (Node("all", CountAll(), ("a", "b")),))
    h = EngineHarness({"a": schema, "b": schema}, [q])
    h.watermark("a", 10)
    h.watermark("b", 7)
    h.snapshot_and_restore()
    unit = next(u for br in h.engine.topology.bricks for u in br.units if u.loaded is not None)
    assert unit.loaded is not None
    assert sorted(unit.loaded.watermarks.values()) == [7, 10] and unit.loaded.forwarded == 7
