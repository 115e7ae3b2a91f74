"""The exchange: every row reaches the subtask that owns its key group, exactly once, in order
per channel, with equal keys of different streams on the same subtask; checked against a
plain-Python reference of the key-group assignment on random batches (duplicates, nulls,
skew, empty batches, string keys)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.cluster.exchange import KEY_GROUPS, Exchange, ListChannel
from splice.cluster.stages import cut
from splice.core.plan import BindInputs, Node, Query
from splice.joins.temporal.interval_join import IntervalJoin
from splice.ops import Select


def _owner(group: int, targets: int) -> int:
    return group * targets // KEY_GROUPS


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=6), targets=st.integers(1, 7),
       keys=st.integers(1, 50), strings=st.booleans(), seed=st.integers(0, 1000))
def test_each_row_reaches_its_key_groups_subtask_once_in_order(sizes, targets, keys, strings, seed):
    rng = np.random.default_rng(seed)
    channels = [ListChannel() for _ in range(targets)]
    key_type = pa.string() if strings else pa.int64()
    ex = Exchange(channels, {"a": ["k"], "b": ["kk"]}, [key_type])
    sent = []
    for i, n in enumerate(sizes):
        raw = rng.zipf(1.5, n) % keys  # skewed
        k = pa.array([f"key-{v}" for v in raw] if strings else raw, key_type,
                     mask=rng.random(n) < 0.1)
        stream, col = ("a", "k") if i % 2 == 0 else ("b", "kk")
        batch = pa.record_batch({col: k, "row": np.arange(len(sent), len(sent) + n)})
        sent.extend((stream, v, r) for v, r in zip(k.to_pylist(), batch.column(1).to_pylist(),
                                                   strict=True))
        for t, _part, groups in ex.split(stream, batch):
            assert all(_owner(int(g), targets) == t for g in groups)
        ex.send_batch(stream, batch)
    ex.broadcast("end")
    where: dict[int, int] = {}
    owner_of_key: dict[object, int] = {}
    for t, ch in enumerate(channels):
        assert [m.seq for m in ch.messages] == list(range(len(ch.messages)))  # ordered
        assert ch.messages[-1].kind == "end"
        rows = [r for m in ch.messages if m.kind == "batch" for r in m.payload.column("row").to_pylist()]
        assert rows == sorted(rows)  # input order kept within a channel
        for m in ch.messages:
            if m.kind != "batch":
                continue
            col = "k" if m.stream == "a" else "kk"
            for v, r in zip(m.payload.column(col).to_pylist(), m.payload.column("row").to_pylist(),
                            strict=True):
                assert r not in where  # exactly once
                where[r] = t
                if v is not None:  # equal keys of either stream meet on one subtask
                    assert owner_of_key.setdefault(v, t) == t
    assert sorted(where) == [r for _, _, r in sent]


def test_the_plan_is_cut_at_its_keyed_operator():
    schema = pa.schema([("key", pa.int64()), ("ts", pa.int64()), ("x", pa.float64())])
    join = BindInputs(IntervalJoin, {"on": ["key"], "right_on": ["key"], "time": "ts",
                                     "right_time": "ts", "lower": -1, "upper": 1})
    q = Query("q", (Node("sel", Select(pc.field("x") > 0), ("l",)),
                    Node("join", join, ("sel", "r")),
                    Node("post", Select(pc.field("x") > 1), ("join",))))
    plan = cut(q, {"l": schema, "r": schema})
    # the stateless operator after the join needs no other partitioning: it stays in the stage
    assert [n.name for n in plan.keyed.nodes] == ["sel", "join", "post"]
    assert plan.keys == {"l": ["key"], "r": ["key"]} and plan.keyed_output == "post"
    assert plan.final is None


def test_a_plan_keyed_two_ways_is_cut_into_two_stages():
    from splice.ops import Agg, GroupBy, TopK

    a = pa.schema([("ak", pa.int64()), ("x", pa.int64())])
    b = pa.schema([("ak", pa.int64()), ("bk", pa.int64())])
    c = pa.schema([("bk", pa.int64()), ("y", pa.int64())])
    q = Query("q", (
        Node("j1", BindInputs(IntervalJoin, {"on": ["ak"], "right_on": ["ak"], "time": "x",
                                             "right_time": "bk", "lower": 0, "upper": 0}),
             ("a", "b")),
        Node("j2", BindInputs(IntervalJoin, {"on": ["bk"], "right_on": ["bk"], "time": "x",
                                             "right_time": "y", "lower": 0, "upper": 0}),
             ("j1", "c")),
        Node("agg", GroupBy(["bk"], [Agg("n", "count")]), ("j2",)),
        Node("top", TopK([("n", "descending")], 3), ("agg",))))
    plan = cut(q, {"a": a, "b": b, "c": c})
    assert [s.keys for s in plan.stages] == [{"a": ["ak"], "b": ["ak"]},
                                              {"j1": ["bk"], "c": ["bk"]}]
    assert [s.output for s in plan.stages] == ["j1", "agg"]  # the aggregation keeps bk's groups
    assert plan.final is not None and [n.name for n in plan.final.nodes] == ["top"]


def test_a_global_aggregate_after_the_stage_is_split_in_two_phases_only_when_exact():
    from splice.cluster.stages import pre_aggregate
    from splice.ops import Agg, GroupBy
    from splice.runtime import Engine

    schema = pa.schema([("key", pa.int64()), ("ts", pa.int64()), ("x", pa.int64()),
                        ("f", pa.float64())])
    join = BindInputs(IntervalJoin, {"on": ["key"], "right_on": ["key"], "time": "ts",
                                     "right_time": "ts", "lower": -1, "upper": 1})

    def plan_with(*aggs: Agg):
        q = Query("q", (Node("join", join, ("l", "r")), Node("total", GroupBy([], aggs), ("join",))))
        plan = cut(q, {"l": schema, "r": schema})
        probe = Engine()
        for s in ("l", "r"):
            probe.define_stream(s, schema)
        out = probe.deploy(plan.keyed).schema
        return plan, pre_aggregate(plan, out)

    before, after = plan_with(Agg("n", "count"), Agg("s", "sum", "x"), Agg("lo", "min", "f"))
    assert [n.name for n in after.keyed.nodes] == ["join", "total__partial"]
    assert after.keyed_output == "total__partial"
    assert after.final is not None and after.final.nodes[0].inputs == ("total__partial",)
    assert [(a.name, a.func, str(a.input)) for a in after.final.nodes[0].spec.aggregates] == [
        ("n", "sum", "n"), ("s", "sum", "s"), ("lo", "min", "lo")]
    for aggs in ((Agg("s", "sum", "f"),), (Agg("m", "avg", "x"),)):  # rounding; no merge
        before, after = plan_with(*aggs)
        assert after is before


def test_a_slice_crosses_with_its_own_rows_only():
    import pickle

    from splice.cluster.ray_runner import compact

    n = 200_000
    table = pa.table({"k": np.arange(n), "s": pa.array([str(i) for i in range(n)]),
                      "sv": pa.array([str(i) for i in range(n)]).cast(pa.string_view()),
                      "v": pa.array(np.where(np.arange(n) % 7 == 0, None, np.arange(n)))})
    whole = table.combine_chunks().to_batches()[0]
    part = whole.slice(1_000, 5_000)
    small = compact(part)
    assert small.equals(part)
    assert len(pickle.dumps(small, protocol=5)) < len(pickle.dumps(part, protocol=5)) / 10
    assert compact(whole) is whole  # nothing to cut: no copy


def test_view_columns_travel_through_the_exchange():
    n = 1_000
    batch = pa.record_batch({"key": np.arange(n) % 13,
                             "sv": pa.array([f"s{i}" for i in range(n)]).cast(pa.string_view()),
                             "bv": pa.array([b"b%d" % i for i in range(n)]).cast(pa.binary_view())})
    channels = [ListChannel() for _ in range(3)]
    Exchange(channels, {"s": ["key"]}, [pa.int64()]).send_batch("s", batch)
    parts = [m.payload for c in channels for m in c.messages]
    assert len(parts) == 3 and all(p.schema == batch.schema for p in parts)
    got = pa.Table.from_batches(parts)
    want = pa.Table.from_batches([batch])
    assert sorted(got.column("sv").to_pylist()) == sorted(want.column("sv").to_pylist())
    assert sorted(got.column("bv").to_pylist()) == sorted(want.column("bv").to_pylist())
