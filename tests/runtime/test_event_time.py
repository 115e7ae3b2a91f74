"""Event time on the engine: disordered sources, watermarks from the path, nothing lost.

Each time-based operator runs on the engine over sources whose rows arrive out of order. The
sources declare bounded out-of-orderness ``D``; rows are disordered by at most ``D`` (then the
answer must equal SQL's over every row, and nothing is late) or by more (then every row is
accounted for: it is in the late side output exactly when the watermarks the sources emitted
say it is late, counted, and the output equals SQL's over the rows that were not late).
DuckDB is the oracle.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from splice.core.errors import SchemaError
from splice.core.time import WatermarkStrategy
from splice.joins.band.band_join import BandJoin
from splice.joins.common.join_windows import TimeWindow
from splice.joins.hash.hash_window_join import HashWindowJoin
from splice.joins.temporal.interval_join import IntervalJoin
from splice.joins.temporal.window_join import WindowJoin
from splice.ops.aggregate import Agg
from splice.ops.window_aggregate import WindowAggregate
from splice.runtime import BindInputs, Engine, Node, Query

SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("ts", pa.int64()), ("v", pa.int64())])
MIN = -(2**63)


def _stream(rng: np.random.Generator, n: int, first_id: int, span: int, disorder: int
            ) -> pa.Table:
    """``n`` rows with times over ``[0, span)``, arriving in the order of ``ts + U(0, disorder)``:
    each row is at most ``disorder`` behind any row that arrived before it."""
    ts = np.sort(rng.integers(0, span, n))
    keys = pa.array(rng.integers(0, 6, n), mask=rng.random(n) < 0.05)
    arrival = np.argsort(ts + rng.integers(0, disorder + 1, n), kind="stable")
    t = pa.table({"id": np.arange(first_id, first_id + n), "k": keys, "ts": ts,
                  "v": rng.integers(0, 100, n)}, schema=SCHEMA)
    return t.take(pa.array(arrival))


def _batches(rng: np.random.Generator, table: pa.Table) -> list[pa.RecordBatch]:
    out, start = [], 0
    while start < table.num_rows:
        size = int(rng.choice([1, 2, 7, 49, 50, 51, 100]))
        out.extend(table.slice(start, size).combine_chunks().to_batches())
        start += size
    return out


class Feed:
    """Pushes the streams' batches in a random interleaving and records, for every row, the
    watermarks in force when it arrived (those the engine emitted after earlier batches)."""

    def __init__(self, seed: int, tables: dict[str, pa.Table], delay: int):
        rng = np.random.default_rng(seed)
        self.queue = {name: _batches(rng, t) for name, t in tables.items()}
        self.order: list[str] = []
        left = {n: len(b) for n, b in self.queue.items()}
        while any(left.values()):
            name = str(rng.choice([n for n, c in left.items() if c]))
            self.order.append(name)
            left[name] -= 1
        self.delay = delay
        #: per stream, the watermarks of every stream at each of its rows' arrival
        self.seen: dict[str, list[dict[str, int]]] = {n: [] for n in tables}

    def run(self, eng: Engine) -> None:
        maxes = {n: MIN for n in self.queue}
        pos = {n: 0 for n in self.queue}
        for name in self.order:
            batch = self.queue[name][pos[name]]
            pos[name] += 1
            marks = {n: (m - self.delay - 1 if m != MIN else MIN) for n, m in maxes.items()}
            self.seen[name].extend([marks] * batch.num_rows)
            eng.push(name, batch)
            maxes[name] = max(maxes[name], int(pa.compute.max(batch.column("ts")).as_py()))
        eng.end()


def _engine(tables: dict[str, pa.Table], delay: int, query: Query) -> Engine:
    eng = Engine()
    for name in tables:
        eng.define_stream(name, SCHEMA, "ts", watermark=WatermarkStrategy(delay))
    eng.deploy(query)
    return eng


def _late_ids(tables: dict[str, pa.Table], feed: Feed,
              is_late: Callable[[str, int, dict[str, int]], bool]) -> dict[str, set[int]]:
    """Per stream, the ids of the rows the semantics call late (``is_late(stream, ts, marks)``),
    rows taken in arrival order."""
    out: dict[str, set[int]] = {}
    for name, t in tables.items():
        arrived = pa.concat_tables([pa.Table.from_batches([b]) for b in feed.queue[name]]) \
            if feed.queue[name] else t.slice(0, 0)
        ids = arrived.column("id").to_pylist()
        ts = arrived.column("ts").to_pylist()
        out[name] = {i for i, t_, m in zip(ids, ts, feed.seen[name], strict=True)
                     if is_late(name, t_, m)}
    return out


def _rows(t: pa.Table) -> Counter:
    return Counter(zip(*(c.to_pylist() for c in t.columns), strict=True))


def _check_accounting(eng: Engine, query: str, tables: dict[str, pa.Table],
                      want_late: dict[str, set[int]]) -> dict[str, pa.Table]:
    """Every late row is in the late output exactly once, with the count in the metrics; the
    rows that were not late are returned for the oracle."""
    late = eng.late(query)
    counted = eng.metrics()["queries"][query]["late_rows"]
    kept = {}
    for name, t in tables.items():
        got = late.get(name, SCHEMA.empty_table()).column("id").to_pylist()
        assert sorted(got) == sorted(want_late[name]), f"late rows of {name}"
        assert counted.get(name, 0) == len(got)
        mask = pa.array([i not in want_late[name] for i in t.column("id").to_pylist()], pa.bool_())
        kept[name] = t.filter(mask)
    return kept


def _sql(query: str, **tables: pa.Table) -> pa.Table:
    con = duckdb.connect()
    for name, t in tables.items():
        con.register(name, t)
    return con.sql(query).to_arrow_table()


case = st.tuples(st.integers(0, 2**31), st.sampled_from([0, 3, 25]), st.booleans(),
                 st.integers(0, 120), st.integers(0, 120))
FAST = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


def _tables(seed: int, delay: int, beyond: bool, nl: int, nr: int) -> dict[str, pa.Table]:
    rng = np.random.default_rng(seed)
    disorder = delay + (40 if beyond else 0)
    return {"l": _stream(rng, nl, 0, 300, disorder), "r": _stream(rng, nr, 10_000, 300, disorder)}


def _check(c: tuple, query: Query, is_late: Callable[[str, int, dict[str, int]], bool],
           sql: str, inputs: tuple[str, ...] = ("l", "r")) -> None:
    """Run ``query`` on the case's sources: nothing late within the bound, each late row
    accounted for beyond it, and the output SQL's over the rows that were not late."""
    seed, delay, beyond, nl, nr = c
    tables = {k: v for k, v in _tables(seed, delay, beyond, nl, nr).items() if k in inputs}
    eng = _engine(tables, delay, query)
    feed = Feed(seed, tables, delay)
    feed.run(eng)
    want_late = _late_ids(tables, feed, is_late)
    if not beyond:
        assert not any(want_late.values())
    kept = _check_accounting(eng, query.name, tables, want_late)
    assert _rows(eng.results(query.name)) == _rows(_sql(sql, **kept))


def _join(factory: Any, **params: Any) -> Query:
    return Query("j", (Node("join", BindInputs(factory, params), ("l", "r")),))


def _behind_own(name: str, t: int, m: dict[str, int]) -> bool:
    """Late for an operator that judges each input by its own watermark."""
    return t <= m[name]


def _window_closed(size: int, *inputs: str) -> Callable[[str, int, dict[str, int]], bool]:
    """Late for a tumbling window of ``size`` closed by the least watermark of ``inputs``."""

    def late(name: str, t: int, m: dict[str, int]) -> bool:
        w = min(m[i] for i in inputs)
        return w != MIN and (t // size) * size + size - 1 <= w

    return late


@FAST
@given(case, st.sampled_from(["inner", "left", "right", "full"]))
def test_interval_join_on_disordered_sources(c, how):
    _check(c, _join(IntervalJoin, on="k", time="ts", lower=-7, upper=4, how=how), _behind_own,
           f"SELECT l.*, r.* FROM l {how.upper()} JOIN r ON l.k = r.k "
           "AND r.ts BETWEEN l.ts - 7 AND l.ts + 4")


@FAST
@given(case, st.sampled_from(["inner", "full"]))
def test_window_join_on_disordered_sources(c, how):
    _check(c, _join(WindowJoin, on="k", time="ts", size=20, how=how), _window_closed(20, "l", "r"),
           f"SELECT l.*, r.* FROM l {how.upper()} JOIN r ON l.k = r.k AND l.ts // 20 = r.ts // 20")


@FAST
@given(case)
def test_window_aggregate_on_a_disordered_source(c):
    spec = WindowAggregate("ts", 25, keys=["k"], aggregates=[Agg("n", "count"),
                                                              Agg("s", "sum", "v")])
    _check(c, Query.chain("a", "l", spec), _window_closed(25, "l"),
           "SELECT ts // 25 * 25 AS window_start, ts // 25 * 25 + 25 AS window_end, k, "
           "count(*) AS n, sum(v) AS s FROM l GROUP BY ALL", inputs=("l",))


@FAST
@given(case, st.sampled_from(["fast", "hbsj"]))
def test_hash_join_over_a_time_window_on_disordered_sources(c, impl):
    _check(c, _join(HashWindowJoin, on="k", window=TimeWindow(9, "ts"), impl=impl), _behind_own,
           "SELECT l.*, r.* FROM l JOIN r ON l.k = r.k AND abs(l.ts - r.ts) <= 9")


@FAST
@given(case, st.sampled_from(["pimtree", "bptree"]))
def test_band_join_over_a_time_window_on_disordered_sources(c, index):
    _check(c, _join(BandJoin, on="v", eps=3, window=TimeWindow(12, "ts"), index=index),
           _behind_own,
           "SELECT l.*, r.* FROM l JOIN r ON abs(l.v - r.v) <= 3 AND abs(l.ts - r.ts) <= 12")


def test_an_idle_input_is_moved_along_and_its_late_rows_are_kept():
    # right stops at time 100 while left goes on to 5,000: with an idle timeout of 200 the join
    # retires left rows 200 behind left's watermark; right's rows that come later behind are late
    schema = SCHEMA
    for idle in (None, 200):
        eng = Engine()
        for name in ("l", "r"):
            eng.define_stream(name, schema, "ts", watermark=WatermarkStrategy(0, idle))
        spec = BindInputs(IntervalJoin, {"on": "k", "time": "ts", "lower": -5, "upper": 5})
        eng.deploy(Query("j", (Node("join", spec, ("l", "r")),)))
        eng.push("r", pa.record_batch({"id": [0], "k": [1], "ts": [100], "v": [0]}, schema=schema))
        for i in range(50):
            ts = np.arange(i * 100, (i + 1) * 100)
            eng.push("l", pa.record_batch({"id": ts + 1000, "k": ts % 3, "ts": ts, "v": ts},
                                          schema=schema))
        held = eng.state_bytes()["j"]["join"]
        eng.push("r", pa.record_batch({"id": [1, 2], "k": [1, 1], "ts": [4_000, 4_900], "v": [0, 0]},
                                      schema=schema))
        eng.end()
        late = eng.late("j")
        if idle is None:
            assert held > 100_000 and not late  # left rows wait for right to advance
        else:
            assert held < 20_000
            # left's watermark is 4,998, so right's is held at 4,798: 4,000 is late, 4,900 not
            assert late["r"].column("id").to_pylist() == [1]
            assert eng.metrics()["queries"]["j"]["late_rows"] == {"r": 1}


def test_bad_rows_fail_or_go_to_the_dead_letters_and_the_other_queries_go_on():
    batch = pa.record_batch({"id": [1, 2, 3], "k": [1, 1, 2], "ts": pa.array([5, None, 7], pa.int64()),
                             "v": [1, 2, 3]}, schema=SCHEMA)
    eng = Engine()
    eng.define_stream("l", SCHEMA, "ts", watermark=WatermarkStrategy(0))
    eng.deploy(Query.chain("a", "l", WindowAggregate("ts", 10, aggregates=[Agg("n", "count")])))
    with pytest.raises(SchemaError, match=r"stream 'l', row 2: null event time in column 'ts'"):
        eng.push("l", batch)
    assert eng.rows_in["l"] == 0  # refused whole: nothing of it entered
    eng = Engine()
    eng.define_stream("l", SCHEMA, "ts", watermark=WatermarkStrategy(0), bad_input="dead_letter")
    eng.deploy(Query.chain("a", "l", WindowAggregate("ts", 10, aggregates=[Agg("n", "count")])))
    eng.push("l", batch)
    eng.end()
    assert eng.results("a").column("n").to_pylist() == [2]
    assert eng.metrics()["dead_letter_rows"] == 1
    assert eng.dead_letters.table().column("stream").to_pylist() == ["l"]


def test_a_decimal_beyond_64_bits_is_bad_input_for_an_aggregate():
    from decimal import Decimal

    schema = pa.schema([("ts", pa.int64()), ("x", pa.decimal128(38, 2))])
    big = pa.record_batch({"ts": [1, 2], "x": pa.array([Decimal("1.00"), Decimal("1e30")],
                                                     pa.decimal128(38, 2))}, schema=schema)
    eng = Engine()
    eng.define_stream("s", schema, "ts", watermark=WatermarkStrategy(0))
    eng.deploy(Query.chain("a", "s", WindowAggregate("ts", 10, aggregates=[Agg("t", "sum", "x")])))
    with pytest.raises(SchemaError, match=r"row 2: decimal in column 'x' beyond 64 bits"):
        eng.push("s", big)
    eng.push("s", big.slice(0, 1))
    eng.end()
    assert eng.results("a").column("t").to_pylist() == [Decimal("1.00")]
