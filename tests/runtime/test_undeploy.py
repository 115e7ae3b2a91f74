"""Reconfiguration while records are in flight: deploy and undeploy composing queries as batches
flow, on both executors; each query sees exactly the rows pushed between its deploy and its
undeploy, composed right, and what an undeployed query held is freed once it has left the path."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from splice.core.errors import PlanError, StateError
from splice.ops import Select
from splice.runtime import Engine, Query
from tests.runtime.opkit import Delay

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.float64()), ("c", pa.string())])
EXECUTORS = ["serial", "pipelined"]

#: plans by kind, each composing ``c`` (which never travels): (operators, rows held back at the
#: end of the stream by a query undeployed then)
KINDS = {
    "select": ((Select(pc.field("k") >= 3),), 0),
    "chain": ((Select(pc.field("k") >= 3), Select(pc.field("v") < 1e9)), 0),
    "delay": ((Select(pc.field("k") >= 3), Delay(4)), 4),
    "blind": ((Delay(3, report=False), Select(pc.field("k") >= 3)), 3),
}


def batch(start: int, n: int) -> pa.RecordBatch:
    ks = list(range(start, start + n))
    return pa.record_batch({"k": pa.array(ks, pa.int64()), "v": pa.array([k * 0.5 for k in ks]),
                            "c": pa.array([f"c{k}" for k in ks])}, schema=SCHEMA)


@dataclass
class Plan:
    name: str
    kind: str
    sink: bool
    deploy_at: int
    undeploy_at: int | None  # None: deployed until END


@st.composite
def schedules(draw):
    sizes = draw(st.lists(st.integers(0, 7), min_size=1, max_size=14))
    n = len(sizes)
    plans = []
    for i in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, n))
        until = draw(st.one_of(st.none(), st.integers(at, n)))
        plans.append(Plan(f"q{i}", draw(st.sampled_from(sorted(KINDS))), draw(st.booleans()),
                          at, until))
    return sizes, plans


def expected(plan: Plan, sizes: list[int]) -> list[int]:
    """The ``k`` of the rows ``plan`` answers: the rows pushed while it was deployed, less those
    a delay held back when the query was undeployed (END flushes them)."""
    start = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
    until = len(sizes) if plan.undeploy_at is None else plan.undeploy_at
    seen = list(range(start[plan.deploy_at], start[until]))
    held = KINDS[plan.kind][1] if plan.undeploy_at is not None else 0
    if plan.kind == "blind":  # the delay first, then the selection
        seen = seen[: max(0, len(seen) - held)]
    out = [k for k in seen if k >= 3]
    if plan.kind == "delay":  # the selection first, then the delay
        out = out[: max(0, len(out) - held)]
    return out


@pytest.mark.parametrize("executor", EXECUTORS)
@given(schedule=schedules())
def test_queries_undeployed_in_flight_see_exactly_their_rows_composed(executor, schedule):
    sizes, plans = schedule
    eng = Engine(executor=executor, bricks=2, units_per_brick=2)
    eng.define_stream("s", SCHEMA)
    sunk: dict[str, list[pa.RecordBatch]] = {p.name: [] for p in plans}
    start = 0
    for i in range(len(sizes) + 1):
        for p in plans:
            if p.deploy_at == i:
                ops, _ = KINDS[p.kind]
                eng.deploy(Query.chain(p.name, "s", *ops, compose={"s": ["c"]}),
                           on_output=sunk[p.name].append if p.sink else None)
        for p in plans:
            if p.undeploy_at == i:
                eng.undeploy(p.name)
        if i == len(sizes):
            break
        eng.push("s", batch(start, sizes[i]))
        start += sizes[i]
    eng.end()
    for p in plans:
        if p.sink:
            got = pa.Table.from_batches(sunk[p.name]) if sunk[p.name] else None
            # an undeployed query with a sink is forgotten once it has left the path
            assert (p.name in eng.queries) == (p.undeploy_at is None)
            if p.name in eng.queries:
                assert eng.queries[p.name].batches == []
        else:
            got = eng.results(p.name)
            assert eng.queries[p.name].rows_out == got.num_rows
        want = expected(p, sizes)
        ks = [] if got is None else got.column("k").to_pylist()
        assert ks == want, p
        if got is not None:
            assert got.column_names == ["k", "v", "c"]
            assert got.column("c").to_pylist() == [f"c{k}" for k in ks]
    # what undeployed queries held on the path is gone; after END nothing waits to be composed
    live = {p.name for p in plans if p.undeploy_at is None}
    assert set(eng._deployments) == live
    assert {d.result.name for d, _ in eng._sinks.values()} == live
    assert not [s.name for s in eng.catalog if "." in s.name and s.name.split(".")[0] not in live]
    assert eng.decomposer.nbytes == 0
    eng.close()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_the_parse_table_keeps_only_rows_a_composing_query_can_still_emit(executor):
    eng = Engine(executor=executor, bricks=2, units_per_brick=2)
    eng.define_stream("s", SCHEMA)
    eng.deploy(Query.chain("stateless", "s", Select(pc.field("k") >= 0), compose={"s": ["c"]}))
    eng.deploy(Query.chain("delay", "s", Delay(25), compose={"s": ["c"]}))
    table = eng.decomposer.tables[eng.catalog["s"].id]
    most = 0
    for i in range(300):
        eng.push("s", batch(i * 10, 10))
        most = max(most, len(table.batches))
    # the delay holds 25 rows (3-4 batches); the rest is what is in flight between two fences:
    # on the pipelined path up to a queue and the records being worked on per brick, and the
    # batches pushed since the last fence that has left the path (a fence every 8 batches, up
    # to three of them on the path at once)
    ex = eng.executor
    in_flight = (len(eng.topology.bricks) * (getattr(ex, "queue_size", 0) + getattr(ex, "in_flight", 0))
                 + 3 * 8 + 4)
    assert most <= (4 if executor == "serial" else in_flight), most
    eng.undeploy("delay")
    eng.undeploy("stateless")
    eng.push("s", batch(3000, 10))  # the next call frees what undeployed queries held
    if executor == "pipelined":
        eng.executor.drain()
        eng.push("s", batch(3010, 10))
    assert eng.decomposer.nbytes == 0 and not eng.decomposer.numbered[eng.catalog["s"].id]
    got = eng.results("delay")
    assert got.column("c").to_pylist() == [f"c{k}" for k in range(3000 - 25)]
    eng.close()


def test_an_operator_that_cannot_say_what_it_keeps_holds_its_rows_while_deployed():
    eng = Engine()
    eng.define_stream("s", SCHEMA)
    eng.deploy(Query.chain("blind", "s", Delay(5, report=False), compose={"s": ["c"]}))
    for i in range(20):
        eng.push("s", batch(i * 10, 10))
    table = eng.decomposer.tables[eng.catalog["s"].id]
    assert len(table.batches) == 20
    eng.end()
    assert eng.results("blind").column("c").to_pylist() == [f"c{k}" for k in range(200)]
    assert eng.decomposer.nbytes == 0


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_sink_gets_every_result_batch_in_order_and_nothing_accumulates(executor):
    got: list[pa.RecordBatch] = []
    eng = Engine(executor=executor)
    eng.define_stream("s", SCHEMA)
    result = eng.deploy(Query.chain("q", "s", Select(pc.equal(pc.bit_wise_and(pc.field("k"), 1), 0)),
                                    compose={"s": ["c"]}), on_output=got.append)
    for i in range(30):
        eng.push("s", batch(i * 7, 7))
    eng.end()
    assert result.batches == [] and result.rows_out == 105
    table = pa.Table.from_batches(got)
    assert table.column("k").to_pylist() == list(range(0, 210, 2))
    assert table.column("c").to_pylist() == [f"c{k}" for k in range(0, 210, 2)]
    assert eng.metrics()["queries"]["q"]["rows_out"] == 105
    eng.close()


def test_a_sink_that_raises_fails_its_query_only_and_says_which_callback():
    def fussy(b: pa.RecordBatch) -> None:
        if b.num_rows > 3:
            raise ValueError("too many rows")

    eng = Engine()
    eng.define_stream("s", SCHEMA)
    eng.deploy(Query.chain("fussy", "s", Select(pc.field("k") >= 0)), on_output=fussy)
    eng.deploy(Query.chain("all", "s", Select(pc.field("k") >= 0)))
    eng.push("s", batch(0, 2))
    with pytest.raises(StateError, match=r"query 'fussy' failed: its on_output callback .*fussy "
                                         r"raised ValueError: too many rows"):
        eng.push("s", batch(2, 5))
    eng.push("s", batch(7, 5))  # raised once; the other queries go on
    eng.end()
    assert eng.results("all").num_rows == 12


def test_late_rows_go_to_on_late_with_their_input_and_are_counted():
    from splice.ops.aggregate import Agg
    from splice.ops.window_aggregate import WindowAggregate

    schema = pa.schema([("t", pa.int64())])
    late: list[tuple[str, list[int]]] = []
    eng = Engine()
    eng.define_stream("e", schema, "t", max_out_of_orderness=0)
    result = eng.deploy(
        Query.chain("w", "e", WindowAggregate("t", size=10, aggregates=[Agg("n", "count")])),
        on_late=lambda name, b: late.append((name, b.column("t").to_pylist())))
    eng.push("e", pa.record_batch({"t": pa.array([1, 25], pa.int64())}))
    eng.push("e", pa.record_batch({"t": pa.array([3, 4, 30], pa.int64())}))
    eng.end()
    assert late == [("e", [3, 4])]
    assert result.late == {} and eng.late("w") == {}
    assert eng.metrics()["queries"]["w"]["late_rows"] == {"e": 2}
    assert eng.results("w").column("n").to_pylist() == [1, 1, 1]


def test_without_a_sink_the_buffer_is_bounded_and_says_so():
    eng = Engine(result_buffer_rows=10)
    eng.define_stream("s", SCHEMA)
    eng.deploy(Query.chain("big", "s", Select(pc.field("k") >= 0)))
    eng.deploy(Query.chain("small", "s", Select(pc.field("k") < 2)))
    eng.push("s", batch(0, 4))
    eng.push("s", batch(4, 4))
    with pytest.raises(StateError, match=r"query 'big' failed: it would buffer more than 10 rows "
                                         r".*on_output="):
        eng.push("s", batch(8, 4))
    eng.push("s", batch(12, 4))
    eng.end()
    assert eng.results("big", partial=True).column("k").to_pylist() == list(range(8))
    assert eng.results("small").column("k").to_pylist() == [0, 1]
    # taking batches out (as the checkpoint coordinator does) makes room again
    eng = Engine(result_buffer_rows=10)
    eng.define_stream("s", SCHEMA)
    q = eng.deploy(Query.chain("big", "s", Select(pc.field("k") >= 0)))
    for i in range(10):
        eng.push("s", batch(i * 4, 4))
        if q.rows >= 8:
            q.batches.clear()
    assert q.rows_out == 40 and q.error is None


def test_results_grow_without_rebuilding_and_follow_batches_taken_out():
    eng = Engine()
    eng.define_stream("s", SCHEMA)
    q = eng.deploy(Query.chain("q", "s", Select(pc.field("k") >= 0)))
    for i in range(300):
        eng.push("s", batch(i, 1))
        if i % 37 == 0:
            assert eng.results("q").column("k").to_pylist() == list(range(i + 1))
    table = eng.results("q")
    assert table.column("k").to_pylist() == list(range(300))
    assert table.column("k").num_chunks < 300  # combined as it grew
    q.batches.clear()
    eng.push("s", batch(300, 2))
    assert eng.results("q").column("k").to_pylist() == [300, 301]


def test_an_undeployed_query_stays_readable_until_forgotten():
    eng = Engine()
    eng.define_stream("s", SCHEMA)
    eng.deploy(Query.chain("q", "s", Select(pc.field("k") >= 0)))
    eng.push("s", batch(0, 3))
    with pytest.raises(PlanError, match="query 'q' is deployed: undeploy it"):
        eng.forget("q")
    eng.undeploy("q")
    assert eng.results("q").num_rows == 3
    eng.forget("q")
    with pytest.raises(PlanError, match="unknown query 'q'"):
        eng.results("q")
    # the name can be deployed again at once, also while the old one is on the path
    eng.deploy(Query.chain("q", "s", Select(pc.field("k") >= 0)))
    eng.undeploy("q")
    eng.deploy(Query.chain("q", "s", Select(pc.field("k") >= 0)))
    eng.push("s", batch(3, 2))
    eng.end()
    assert eng.results("q").column("k").to_pylist() == [3, 4]


def test_the_switch_interval_changes_only_when_asked_for():
    import sys

    before = sys.getswitchinterval()
    eng = Engine(executor="pipelined")
    assert sys.getswitchinterval() == before
    eng.close()
    eng = Engine(executor="pipelined", switch_interval=before / 2)
    assert sys.getswitchinterval() == pytest.approx(before / 2)
    eng.close()
    assert sys.getswitchinterval() == before
    with pytest.raises(PlanError, match="pipelined executor only"):
        Engine(switch_interval=0.001)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_undeployed_units_release_their_operators_also_after_a_failure(executor):
    import gc
    import weakref

    from tests.runtime.opkit import FailOn

    eng = Engine(executor=executor)
    eng.define_stream("s", SCHEMA)
    eng.deploy(Query.chain("held", "s", Delay(5), compose={"s": ["c"]}))
    eng.deploy(Query.chain("fragile", "s", FailOn("k", 1)), on_output=lambda b: None)
    eng.executor.drain()  # the units are loaded
    logic = next(u.loaded.logic for b in eng.topology.bricks for u in b.units
                 if u.loaded is not None and u.loaded.query == "held")
    gone = weakref.ref(logic)
    del logic
    with pytest.raises(StateError, match="query 'fragile' failed"):
        eng.push("s", batch(0, 3))
        eng.executor.drain()
        eng.push("s", batch(3, 0))
    eng.push("s", batch(3, 3))
    eng.undeploy("held")
    eng.undeploy("fragile")
    eng.executor.drain()
    eng.push("s", batch(6, 3))
    gc.collect()
    assert gone() is None
    assert eng._deployments == {} and eng._sinks == {}
    assert [s.name for s in eng.catalog] == ["s"]
    assert "fragile" not in eng.queries  # a sink's query is forgotten once it has left the path
    assert eng.results("held").column("c").to_pylist() == ["c0"]
    eng.close()
