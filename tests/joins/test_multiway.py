"""Multiway count-window join against the nested-loop reference; the Q3 kernel against both."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import PlanError, SchemaError
from splice.core.records import Data
from splice.joins.multiway.multiway_join import MultiwayJoin, plan_probe_order, q3_stream_join
from splice.testing import OperatorHarness, check_operator, rows_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reference.multiway_join import multiway_count_join  # noqa: E402

C, ORD, LI = 2, 3, 4
SCHEMAS = {
    C: pa.schema([("ck", pa.int64()), ("id", pa.int64())]),
    ORD: pa.schema([("ok", pa.int64()), ("ck", pa.int64()), ("id", pa.int64())]),
    LI: pa.schema([("ok", pa.int64()), ("id", pa.int64())]),
}
Q3_PREDICATES = ((C, "ck", ORD, "ck"), (ORD, "ok", LI, "ok"))
SPLITS = [1, 2, 7, 49, 50, 51, 100]
key = st.one_of(st.none(), st.integers(0, 4))
arrival = st.one_of(
    st.tuples(st.just(0), st.fixed_dictionaries({"ck": key})),
    st.tuples(st.just(1), st.fixed_dictionaries({"ok": key, "ck": key})),
    st.tuples(st.just(2), st.fixed_dictionaries({"ok": key})),
)


def to_records(arrivals: list, split: int) -> list[Data]:
    sids = (C, ORD, LI)
    recs: list[Data] = []
    i = 0
    while i < len(arrivals):
        j = i
        while j < len(arrivals) and arrivals[j][0] == arrivals[i][0] and j - i < split:
            j += 1
        sid = sids[arrivals[i][0]]
        cols = {n: pa.array([a[1].get(n) if n != "id" else k for k, a in enumerate(arrivals[i:j], i)],
                            pa.int64()) for n in SCHEMAS[sid].names}
        recs.append(Data(sid, pa.record_batch(cols, schema=SCHEMAS[sid])))
        i = j
    return recs


def expected(arrivals: list, window: int | None, predicates=((0, "ck", 1, "ck"), (1, "ok", 2, "ok"))) -> list[tuple]:
    res = multiway_count_join(3, predicates, arrivals, window)
    ids = [[i for i, a in enumerate(arrivals) if a[0] == s] for s in range(3)]
    return sorted(tuple(ids[s][q] for s, q in enumerate(r)) for r in res)


def got_ids(table: pa.Table) -> list[tuple]:
    return sorted(zip(table.column("id").to_pylist(), table.column("id_right").to_pylist(),
                      table.column("id_right_right").to_pylist(), strict=True))


@settings(max_examples=40)
@given(arrivals=st.lists(arrival, max_size=80), window=st.one_of(st.none(), st.integers(1, 64)),
       split=st.sampled_from(SPLITS), impl=st.sampled_from(["fast", "hbsj"]))
def test_three_way_equals_nested_loop(arrivals, window, split, impl) -> None:
    if impl == "hbsj" and window is None:
        impl = "fast"
    spec = MultiwayJoin((C, ORD, LI), Q3_PREDICATES, window, impl=impl, table_size=2 if impl == "hbsj" else None)
    got = OperatorHarness(spec, SCHEMAS).run(to_records(arrivals, split))
    assert got.schema.names == ["ck", "id", "ok", "ck_right", "id_right", "ok_right", "id_right_right"]
    assert got_ids(got) == expected(arrivals, window)


@settings(max_examples=25)
@given(arrivals=st.lists(arrival, max_size=80), window=st.integers(1, 64), split=st.sampled_from(SPLITS))
def test_cyclic_predicates_filter(arrivals, window, split) -> None:
    """A triangle of predicates: the third one filters after two probes."""
    preds = ((C, "ck", ORD, "ck"), (ORD, "ok", LI, "ok"), (C, "ck", LI, "ok"))
    spec = MultiwayJoin((C, ORD, LI), preds, window)
    got = OperatorHarness(spec, SCHEMAS).run(to_records(arrivals, split))
    assert got_ids(got) == expected(arrivals, window, ((0, "ck", 1, "ck"), (1, "ok", 2, "ok"), (0, "ck", 2, "ok")))


@settings(max_examples=25)
@given(arrivals=st.lists(arrival.filter(lambda a: all(v is not None for v in a[1].values())), max_size=120),
       window=st.one_of(st.none(), st.integers(1, 64)), impl=st.sampled_from(["fast", "hbsj"]),
       batch=st.sampled_from([1, 7, 50, 4096]))
def test_q3_kernel_equals_generic_operator(arrivals, window, impl, batch) -> None:
    if impl == "hbsj" and window is None:
        window = 64
    sides = np.array([a[0] for a in arrivals], np.int8)
    rows = np.zeros(len(arrivals), np.int64)
    cols: dict[str, list[int]] = {"c": [], "ook": [], "ock": [], "lok": []}
    for i, (s, d) in enumerate(arrivals):
        rows[i] = [len(cols["c"]), len(cols["ook"]), len(cols["lok"])][s]
        if s == 0:
            cols["c"].append(d["ck"])
        elif s == 1:
            cols["ook"].append(d["ok"])
            cols["ock"].append(d["ck"])
        else:
            cols["lok"].append(d["ok"])
    rev_of_l = np.arange(len(cols["lok"]), dtype=np.int64) * 10 + 1
    rev, hit, stats = q3_stream_join(sides, rows, np.array(cols["c"], np.int64), np.array(cols["ook"], np.int64),
                                     np.array(cols["ock"], np.int64), np.array(cols["lok"], np.int64), rev_of_l,
                                     window, impl, 2 if impl == "hbsj" else None, batch)
    res = multiway_count_join(3, ((0, "ck", 1, "ck"), (1, "ok", 2, "ok")), arrivals, window)
    want = np.zeros(len(cols["ook"]), np.int64)
    for _, o, li in res:
        want[o] += rev_of_l[li]
    assert stats["join_results"] == len(res)
    assert np.array_equal(rev, want)
    assert hit.sum() == len({o for _, o, _ in res})


def test_operator_contract() -> None:
    rng = np.random.default_rng(5)
    arr = []
    for _ in range(50):
        s = int(rng.integers(0, 3))
        d = {"ck": int(rng.integers(0, 3))} if s == 0 else (
            {"ok": int(rng.integers(0, 3)), "ck": int(rng.integers(0, 3))} if s == 1 else {"ok": int(rng.integers(0, 3))})
        arr.append((s, d))
    spec = MultiwayJoin((C, ORD, LI), Q3_PREDICATES, 6)
    got = check_operator(spec, SCHEMAS, to_records(arr, 5))
    assert got_ids(got) == expected(arr, 6)


def test_probe_plan_q3() -> None:
    # a lineitem probes orders on o_orderkey, then customer; an order probes customer then lineitem
    assert [(s[0], s[1]) for s in plan_probe_order((C, ORD, LI), Q3_PREDICATES, LI)] == [(ORD, "ok"), (C, "ck")]
    assert [(s[0], s[1]) for s in plan_probe_order((C, ORD, LI), Q3_PREDICATES, ORD)] == [(C, "ck"), (LI, "ok")]
    spec = MultiwayJoin((C, ORD, LI), Q3_PREDICATES, 4)
    assert spec.attrs[ORD] == ("ck", "ok")  # one orders stage, indexed on both


def test_bad_plans() -> None:
    with pytest.raises(PlanError, match="unknown stream id 9"):
        MultiwayJoin((C, ORD), ((C, "ck", 9, "ck"),), 4)
    with pytest.raises(PlanError, match="not connected"):
        MultiwayJoin((C, ORD, LI), ((C, "ck", ORD, "ck"),), 4)
    with pytest.raises(PlanError, match=">= 1"):
        MultiwayJoin((C, ORD), ((C, "ck", ORD, "ck"),), 0)
    bad = {**SCHEMAS, ORD: pa.schema([("ok", pa.int64()), ("ck", pa.string()), ("id", pa.int64())])}
    with pytest.raises(SchemaError, match="stream 3"):
        MultiwayJoin((C, ORD, LI), Q3_PREDICATES, 4).output_schema(bad)
    h = OperatorHarness(MultiwayJoin((C, ORD, LI), Q3_PREDICATES, 4), SCHEMAS)
    with pytest.raises(PlanError, match="unknown stream id 8"):
        h.push(8, pa.record_batch({"ck": [1], "id": [0]}))
    assert rows_of(h.push(C, pa.record_batch({"ck": [1], "id": [0]}, schema=SCHEMAS[C]))) == []
