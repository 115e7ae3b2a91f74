"""SQL planned onto splice's operators, checked row for row against DuckDB on the same files.

Windows are written for DuckDB as ``floor(ts / size) * size``; inputs are disordered within and
beyond the declared bound, and every input row is accounted for: in the answer, or late.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.cli.sql import run_statements
from splice.core.errors import PlanError
from tests.reference.multiway_join import multiway_count_join

COLS = "key BIGINT, ts BIGINT, payload BIGINT"


def _stream(n: int, keys: int, jitter: int, seed: int, nulls: bool = False) -> pa.Table:
    rng = np.random.default_rng(seed)
    ts = np.arange(n, dtype=np.int64) * 2 + rng.integers(-jitter, jitter + 1, n)
    payload = pa.array(rng.integers(-50, 1000, n))
    if nulls and n:
        mask = rng.random(n) < 0.1
        payload = pa.array(rng.integers(-50, 1000, n), mask=mask)
    return pa.table({"key": pa.array(rng.integers(0, keys, n)), "ts": pa.array(ts), "payload": payload})


def _write(tmp: Path, name: str, table: pa.Table, fmt: str = "csv") -> str:
    path = tmp / f"{name}.{fmt}"
    if fmt == "csv":
        pcsv.write_csv(table, path)
    else:
        pq.write_table(table, path)
    return str(path)


def _rows(table: pa.Table) -> list[tuple]:
    rows = list(zip(*[c.to_pylist() for c in table.columns], strict=True))
    return sorted(rows, key=lambda r: tuple((v is None, v) for v in r))


def _duck(sql: str, **tables: pa.Table) -> pa.Table:
    con = duckdb.connect()
    for name, t in tables.items():
        con.register(name, t)
    got = con.sql(sql).arrow()
    return got.read_all() if isinstance(got, pa.RecordBatchReader) else got


def _same(got: pa.Table, want: pa.Table) -> None:
    assert got.num_columns == want.num_columns
    g, w = _rows(got), _rows(want)
    assert len(g) == len(w)
    for a, b in zip(g, w, strict=True):
        for x, y in zip(a, b, strict=True):
            if isinstance(x, float) or isinstance(y, float):
                assert x == pytest.approx(y, rel=1e-9, abs=1e-9)
            else:
                assert x == y


def _ddl(name: str, path: str, delay: int | None) -> str:
    wm = f", WATERMARK FOR ts AS ts - {delay}" if delay is not None else ""
    return f"CREATE TABLE {name} ({COLS}{wm}) WITH (connector = 'file', path = '{path}');\n"


def _met_watermarks(ts: np.ndarray, batch: int, delay: int | None) -> np.ndarray:
    """The watermark each row of one file-ordered source meets: the newest time of the batches
    before its own, less ``delay + 1`` (none without a delay)."""
    wm = np.full(len(ts), np.iinfo(np.int64).min // 2, dtype=np.int64)
    if delay is not None and len(ts):
        starts = np.arange(0, len(ts), batch)
        newest = np.maximum.accumulate(np.maximum.reduceat(ts, starts))
        for i, start in enumerate(starts[1:], start=1):
            wm[start:start + batch] = newest[i - 1] - delay - 1
    return wm


def _on_time(table: pa.Table, late: pa.Table | None) -> pa.Table:
    """``table`` without the rows reported late (matched on all their values, with counts)."""
    if late is None or late.num_rows == 0:
        return table
    from collections import Counter

    drop = Counter(tuple(r.values()) for r in late.select(table.column_names).to_pylist())
    keep = []
    for i, r in enumerate(table.to_pylist()):
        k = tuple(r.values())
        if drop[k]:
            drop[k] -= 1
        else:
            keep.append(i)
    assert sum(drop.values()) == 0, "a late row is not an input row"
    return table.take(pa.array(keep, pa.int64()))

#: each example plans and runs a whole job: fewer examples than the operator-level tests
_JOBS = settings(max_examples=25)


# -- stateless ---------------------------------------------------------------------------------

_COMPARE = st.sampled_from(["<", "<=", ">", ">=", "=", "<>"])
_ATOM = st.one_of(
    st.builds(lambda c, op, v: f"{c} {op} {v}", st.sampled_from(["key", "payload", "ts"]), _COMPARE,
              st.integers(-10, 600)),
    st.builds(lambda lo, hi: f"payload BETWEEN {lo} AND {lo + hi}", st.integers(-50, 500),
              st.integers(0, 300)),
    st.builds(lambda vs: f"key IN ({', '.join(map(str, vs))})", st.lists(st.integers(0, 9), min_size=1,
                                                                         max_size=4)),
    st.just("payload IS NULL"),
    st.just("payload IS NOT NULL"),
    st.builds(lambda m: f"payload % {m} = 0", st.integers(2, 7)),
)
_PREDICATE = st.recursive(
    _ATOM,
    lambda inner: st.one_of(
        st.builds(lambda a, b: f"({a}) AND ({b})", inner, inner),
        st.builds(lambda a, b: f"({a}) OR ({b})", inner, inner),
        st.builds(lambda a: f"NOT ({a})", inner),
    ),
    max_leaves=4,
)


@_JOBS
@given(pred=_PREDICATE, seed=st.integers(0, 10_000), n=st.integers(0, 300),
       batch=st.sampled_from([7, 64, 65_536]))
def test_where_and_projections_match_duckdb(tmp_path_factory, pred, seed, n, batch):
    tmp = tmp_path_factory.mktemp("sel")
    t = _stream(n, 10, 5, seed, nulls=True)
    path = _write(tmp, "t", t, "parquet")
    select = (f"SELECT key, payload * 2 + 1 AS p2, CASE WHEN payload > 500 THEN 'hi' WHEN payload "
              f"IS NULL THEN 'none' ELSE 'lo' END AS band, CAST(ts AS DOUBLE) / 4 AS q, "
              f"coalesce(payload, -1) AS c, abs(payload - 100) AS a FROM t WHERE {pred}")
    run = run_statements(select, tables=[f"t={path}"], batch_size=batch)
    _same(run.results["query"], _duck(select, t=t))


def test_sql_over_parquet_reads_the_files_schema(tmp_path):
    t = _stream(100, 5, 0, 1)
    path = _write(tmp_path, "t", t, "parquet")
    text = (f"CREATE TABLE t WITH (connector = 'file', path = '{path}', format = 'parquet');\n"
            "SELECT key, ts FROM t WHERE key = 3")
    run = run_statements(text)
    _same(run.results["query"], _duck("SELECT key, ts FROM t WHERE key = 3", t=t))


# -- windows -----------------------------------------------------------------------------------

@_JOBS
@given(seed=st.integers(0, 10_000), n=st.integers(0, 400), jitter=st.integers(0, 40),
       size=st.sampled_from([10, 25, 100]), hop=st.booleans(), batch=st.sampled_from([16, 100, 65_536]),
       delay=st.sampled_from([None, 0, 5, 40]))
def test_window_aggregates_match_duckdb(tmp_path_factory, seed, n, jitter, size, hop, batch, delay):
    tmp = tmp_path_factory.mktemp("win")
    t = _stream(n, 7, jitter, seed, nulls=True)
    path = _write(tmp, "l", t)
    slide = size // 2 if hop else size
    tvf = f"HOP(l, ts, {slide}, {size})" if hop else f"TUMBLE(l, ts, {size})"
    text = _ddl("l", path, delay) + (
        f"SELECT key, window_start, window_end, count(*) AS n, sum(payload) AS s, "
        f"min(payload) AS lo, max(payload) AS hi FROM {tvf} GROUP BY key, window_start, window_end")
    run = run_statements(text, batch_size=batch)
    late = run.late["query"].get("l")
    ts = t.column("ts").to_numpy()
    wm = _met_watermarks(ts, batch, delay)
    # a row counts in each of its windows still open when it arrives; with none open it is late
    last_start = (ts // slide) * slide
    is_late = last_start + size - 1 <= wm
    assert (late.num_rows if late is not None else 0) == int(is_late.sum())
    if late is not None and late.num_rows:
        assert sorted(late.column("ts").to_pylist()) == sorted(ts[is_late].tolist())
    want = _duck(
        f"WITH w AS (SELECT *, {slide} * unnest(range(CAST(floor((ts - {size}) / {slide}) AS BIGINT) + 1, "
        f"CAST(floor(ts / {slide}) AS BIGINT) + 1)) AS ws FROM l) "
        f"SELECT key, ws, ws + {size}, count(*), sum(payload), min(payload), max(payload) FROM w "
        f"WHERE ws + {size} - 1 > wm GROUP BY key, ws", l=t.append_column("wm", pa.array(wm)))
    _same(run.results["query"], want)


def test_flink_window_syntax_and_intervals(tmp_path):
    ts = pa.array(np.arange(0, 10_000, 37, dtype=np.int64) * 1000, pa.timestamp("ms"))
    t = pa.table({"k": pa.array(np.arange(len(ts)) % 3), "ts": ts})
    path = _write(tmp_path, "e", t, "parquet")
    text = (f"CREATE TABLE e (k BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '2' SECOND) "
            f"WITH (connector = 'file', path = '{path}');\n"
            "SELECT k, window_start, count(*) AS n FROM TABLE(TUMBLE(TABLE e, DESCRIPTOR(ts), "
            "INTERVAL '1' MINUTE)) GROUP BY k, window_start, window_end")
    run = run_statements(text)
    want = _duck("SELECT k, time_bucket(INTERVAL 1 MINUTE, ts) AS ws, count(*) FROM e GROUP BY k, ws", e=t)
    got = run.results["query"]
    _same(got.set_column(1, "window_start", got.column(1).cast(pa.timestamp("us"))),
          want.set_column(1, "ws", want.column(1).cast(pa.timestamp("us"))))


# -- joins -------------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["INNER", "LEFT", "RIGHT", "FULL"])
@_JOBS
@given(seed=st.integers(0, 10_000), n=st.integers(0, 250), jitter=st.integers(0, 30),
       lo=st.integers(0, 20), hi=st.integers(0, 20), batch=st.sampled_from([13, 128, 65_536]),
       delay=st.sampled_from([None, 3, 60]))
def test_interval_joins_match_duckdb(tmp_path_factory, how, seed, n, jitter, lo, hi, batch, delay):
    tmp = tmp_path_factory.mktemp("ij")
    left, right = _stream(n, 6, jitter, seed), _stream(n + 3, 6, jitter, seed + 1)
    text = (_ddl("l", _write(tmp, "l", left), delay) + _ddl("r", _write(tmp, "r", right), delay)
            + f"SELECT l.key, l.ts, l.payload, r.ts AS rts, r.payload AS rp FROM l {how} JOIN r "
              f"ON l.key = r.key AND r.ts BETWEEN l.ts - {lo} AND l.ts + {hi}")
    run = run_statements(text, batch_size=batch)
    late = run.late["query"]
    lt, rt = _on_time(left, late.get("l")), _on_time(right, late.get("r"))
    if delay is None:
        assert lt.num_rows == left.num_rows and rt.num_rows == right.num_rows
    want = _duck(f"SELECT l.key, l.ts, l.payload, r.ts, r.payload FROM l {how} JOIN r ON l.key = r.key "
                 f"AND r.ts BETWEEN l.ts - {lo} AND l.ts + {hi}", l=lt, r=rt)
    _same(run.results["query"], want)


def test_interval_join_exclusive_bounds_and_other_names(tmp_path):
    left, right = _stream(300, 5, 10, 3), _stream(300, 5, 10, 4)
    right = right.rename_columns(["k", "t", "v"])
    text = (f"CREATE TABLE a ({COLS}) WITH (connector = 'file', path = '{_write(tmp_path, 'a', left)}');\n"
            f"CREATE TABLE b (k BIGINT, t BIGINT, v BIGINT) WITH (connector = 'file', "
            f"path = '{_write(tmp_path, 'b', right)}');\n"
            "SELECT a.key, a.ts, b.t FROM a JOIN b ON b.k = a.key AND a.ts > b.t - 4 AND a.ts <= b.t + 7")
    run = run_statements(text)
    want = _duck("SELECT a.key, a.ts, b.t FROM a JOIN b ON b.k = a.key AND a.ts > b.t - 4 AND "
                 "a.ts <= b.t + 7", a=left, b=right)
    _same(run.results["query"], want)


@pytest.mark.parametrize("how", ["INNER", "LEFT"])
@_JOBS
@given(seed=st.integers(0, 10_000), n=st.integers(0, 250), jitter=st.integers(0, 30),
       size=st.sampled_from([10, 50]), delay=st.sampled_from([None, 4, 100]))
def test_window_joins_match_duckdb(tmp_path_factory, how, seed, n, jitter, size, delay):
    tmp = tmp_path_factory.mktemp("wj")
    left, right = _stream(n, 5, jitter, seed), _stream(n, 5, jitter, seed + 7)
    text = (_ddl("l", _write(tmp, "l", left), delay) + _ddl("r", _write(tmp, "r", right), delay)
            + f"SELECT a.key, a.window_start, a.payload, b.payload AS rp FROM TUMBLE(l, ts, {size}) a "
              f"{how} JOIN TUMBLE(r, ts, {size}) b ON a.key = b.key AND a.window_start = b.window_start")
    run = run_statements(text, batch_size=64)
    late = run.late["query"]
    lt, rt = _on_time(left, late.get("l")), _on_time(right, late.get("r"))
    want = _duck(f"SELECT l.key, floor(l.ts / {size}) * {size}, l.payload, r.payload FROM l {how} JOIN r "
                 f"ON l.key = r.key AND floor(l.ts / {size}) = floor(r.ts / {size})", l=lt, r=rt)
    _same(run.results["query"], want.set_column(1, "ws", want.column(1).cast(pa.int64())))


# -- aggregates and order ----------------------------------------------------------------------

@_JOBS
@given(seed=st.integers(0, 10_000), n=st.integers(0, 400), k=st.integers(1, 12))
def test_group_by_and_top_k_match_duckdb(tmp_path_factory, seed, n, k):
    tmp = tmp_path_factory.mktemp("gb")
    t = _stream(n, 9, 5, seed, nulls=True)
    path = _write(tmp, "t", t, "parquet")
    q = ("SELECT key, count(*) AS n, count(payload) AS np, sum(payload) AS s, avg(payload) AS a, "
         "min(ts) AS first FROM t WHERE payload > 10 GROUP BY key")
    run = run_statements(q, tables=[f"t={path}"], batch_size=50)
    _same(run.results["query"], _duck(q, t=t))
    top = f"SELECT key, ts, payload FROM t ORDER BY ts DESC, key, payload LIMIT {k}"
    got = run_statements(top, tables=[f"t={path}"], batch_size=50).results["query"]
    want = _duck(top, t=t)
    assert got.num_rows == want.num_rows
    assert list(zip(*[c.to_pylist() for c in got.columns], strict=False)) == list(zip(*[c.to_pylist() for c in want.columns], strict=False))
    distinct = "SELECT key, count(DISTINCT payload) AS d FROM t GROUP BY key"
    _same(run_statements(distinct, tables=[f"t={path}"]).results["query"], _duck(distinct, t=t))
    glob = "SELECT count(*) AS n, sum(payload * 2) AS s FROM t"
    _same(run_statements(glob, tables=[f"t={path}"]).results["query"], _duck(glob, t=t))


def test_a_tumbling_window_table_reads_like_a_table(tmp_path):
    t = _stream(300, 4, 8, 2)
    path = _write(tmp_path, "l", t)
    q = "SELECT key, ts, window_start, window_end FROM TUMBLE(l, ts, 20) WHERE payload > 100"
    run = run_statements(_ddl("l", path, None) + q)
    want = _duck("SELECT key, ts, CAST(floor(ts / 20) * 20 AS BIGINT), CAST(floor(ts / 20) * 20 + 20 "
                 "AS BIGINT) FROM l WHERE payload > 100", l=t)
    _same(run.results["query"], want)


def test_insert_into_a_file_table(tmp_path):
    t = _stream(500, 4, 3, 9)
    src = _write(tmp_path, "l", t)
    out = tmp_path / "out.parquet"
    text = (_ddl("l", src, None)
            + f"CREATE TABLE o WITH (connector = 'file', path = '{out}', format = 'parquet');\n"
            "INSERT INTO o SELECT key, window_start, count(*) AS n FROM TUMBLE(l, ts, 50) "
            "GROUP BY key, window_start, window_end")
    run_statements(text)
    want = _duck("SELECT key, CAST(floor(ts / 50) * 50 AS BIGINT), count(*) FROM l "
                 "GROUP BY ALL", l=t)
    _same(pq.read_table(out), want)


# -- EXPLAIN and errors ------------------------------------------------------------------------

def test_explain_names_operators_places_and_reasons(tmp_path):
    path = _write(tmp_path, "l", _stream(10, 2, 0, 1))
    text = (_ddl("l", path, 20) + _ddl("r", path, 20)
            + "EXPLAIN SELECT l.key FROM l JOIN r ON l.key = r.key AND r.ts BETWEEN l.ts - 1 AND l.ts + 1")
    lines = run_statements(text).explained
    text_all = "\n".join(lines)
    assert "IntervalJoin (inner)" in text_all and "brick 0 unit 0" in text_all
    assert "time band bound the state" in text_all
    assert "watermark trails by 21" in text_all


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT * FROM nope", "table 'nope' is not defined"),
    ("SELECT l.key FROM l LEFT JOIN r ON l.key = r.key AND l.payload > r.payload", "would change which rows pad"),
    ("SELECT l.key FROM l JOIN r ON l.ts < r.ts", "needs an equality of keys"),
    ("SELECT l.key FROM l JOIN r ON abs(l.payload - r.payload) <= 3", "count windows"),
    ("SELECT * FROM HOP(l, ts, 5, 10)", "must GROUP BY window_start"),
    ("SELECT key FROM l UNION ALL SELECT key FROM r", "Union is not supported"),
    ("SELECT key FROM l LIMIT 3", "LIMIT without ORDER BY"),
    ("SELECT a.key FROM SESSION(l, ts, 5) a JOIN SESSION(r, ts, 5) b ON a.key = b.key AND "
     "a.window_start = b.window_start", "SESSION windows"),
    ("SELECT stddev(payload) FROM l", "stddev"),
])
def test_unplannable_sql_names_the_construct(tmp_path, sql, message):
    path = _write(tmp_path, "l", _stream(10, 2, 0, 1))
    with pytest.raises(PlanError, match=message):
        run_statements(_ddl("l", path, None) + _ddl("r", path, None) + sql)


@_JOBS
@given(seed=st.integers(0, 10_000), n=st.integers(0, 200), keys=st.integers(1, 30),
       batch=st.sampled_from([9, 100, 65_536]))
def test_equi_joins_of_finite_tables_match_duckdb(tmp_path_factory, seed, n, keys, batch):
    tmp = tmp_path_factory.mktemp("eq")
    left, right = _stream(n, keys, 10, seed, nulls=True), _stream(n // 2 + 1, keys, 10, seed + 3)
    q = ("SELECT l.key, l.payload, r.payload AS rp FROM l JOIN r ON l.key = r.key "
         "AND l.payload > r.payload")
    run = run_statements(q, tables=[f"l={_write(tmp, 'l', left, 'parquet')}",
                                    f"r={_write(tmp, 'r', right, 'parquet')}"], batch_size=batch)
    _same(run.results["query"], _duck(q, l=left, r=right))


def _band_reference(left: pa.Table, right: pa.Table, lo: int, hi: int, w: int) -> list[tuple]:
    """Count-window band join in arrival order L0, R0, L1, R1, ... (each input's row count,
    ties left first): an arrival pairs with the other input's last ``w`` rows."""
    from collections import deque

    lrows = list(zip(*[c.to_pylist() for c in left.columns], strict=True))
    rrows = list(zip(*[c.to_pylist() for c in right.columns], strict=True))
    order = sorted([(i, 0) for i in range(len(lrows))] + [(j, 1) for j in range(len(rrows))])
    wl: deque = deque(maxlen=w)
    wr: deque = deque(maxlen=w)
    out = []
    for i, side in order:
        if side == 0:
            a = lrows[i]
            out += [a + b for b in wr if lo <= b[0] - a[0] <= hi]
            wl.append(a)
        else:
            b = rrows[i]
            out += [a + b for a in wl if lo <= b[0] - a[0] <= hi]
            wr.append(b)
    return out


@_JOBS
@given(seed=st.integers(0, 10_000), n=st.integers(0, 150), w=st.integers(1, 40),
       e=st.integers(0, 30), form=st.sampled_from(["abs", "between"]))
def test_band_joins_over_count_windows_match_a_reference(tmp_path_factory, seed, n, w, e, form):
    tmp = tmp_path_factory.mktemp("band")
    rng = np.random.default_rng(seed)
    left = pa.table({"x": rng.integers(0, 200, n), "a": np.arange(n)})
    right = pa.table({"y": rng.integers(0, 200, n + 5), "b": np.arange(n + 5)})
    cond = f"abs(l.x - r.y) <= {e}" if form == "abs" else f"r.y BETWEEN l.x - {e} AND l.x + {e // 2}"
    q = f"SELECT /*+ WINDOW({w}) */ l.x, l.a, r.y, r.b FROM l JOIN r ON {cond}"
    run = run_statements(q, tables=[f"l={_write(tmp, 'l', left, 'parquet')}",
                                    f"r={_write(tmp, 'r', right, 'parquet')}"])
    hi = e if form == "abs" else e // 2
    want = _band_reference(left, right, -e, hi, w)
    assert _rows(run.results["query"]) == sorted(want, key=lambda r: tuple((v is None, v) for v in r))


_CHAINS = {
    # the second join's condition, and the multiway predicates (input, column, input, column)
    "b.k = c.k": [(0, "k", 1, "k"), (1, "k", 2, "k")],
    "a.k = c.k": [(0, "k", 1, "k"), (0, "k", 2, "k")],
    "a.j = c.j AND b.k = c.k": [(0, "k", 1, "k"), (0, "j", 2, "j"), (1, "k", 2, "k")],
}


@_JOBS
@given(seed=st.integers(0, 10_000), sizes=st.lists(st.integers(0, 12), min_size=1, max_size=12),
       w=st.integers(1, 12), keys=st.integers(1, 6), chain=st.sampled_from(sorted(_CHAINS)),
       impl=st.sampled_from(["fast", "hbsj"]))
def test_streams_sharing_a_key_join_in_one_multiway_join(seed, sizes, w, keys, chain, impl):
    """Three streams joined on keys over count windows are one multiway join: each input keeps
    its last w rows (not the last w pairs of the join below), matched against a nested-loop
    reference over the same interleaving of batches, with null keys that never match."""
    from splice.runtime.engine import Engine

    rng = np.random.default_rng(seed)
    schema = pa.schema([("k", pa.int64()), ("j", pa.int64()), ("v", pa.int64())])
    eng = Engine()
    for name in "abc":
        eng.define_stream(name, schema)
    eng.sql(f"SELECT /*+ WINDOW({w}) JOIN_IMPL({impl}) */ a.v, b.v AS bv, c.v AS cv "
            f"FROM a JOIN b ON a.k = b.k JOIN c ON {chain}", name="q")
    arrivals: list[tuple[int, dict]] = []
    serial = 0
    for n in sizes:
        side = int(rng.integers(0, 3))
        k = rng.integers(0, keys, n)
        batch = pa.record_batch({
            "k": pa.array(k, mask=rng.random(n) < 0.1), "j": rng.integers(0, keys, n),
            "v": np.arange(serial, serial + n)}, schema=schema)
        serial += n
        eng.push("abc"[side], batch)
        arrivals += [(side, row) for row in batch.to_pylist()]
    eng.end()
    got = eng.results("q")
    eng.close()
    want = multiway_count_join(3, _CHAINS[chain], arrivals, w)
    values = [[row["v"] for s, row in arrivals if s == side] for side in range(3)]
    assert _rows(got) == sorted(tuple(values[i][seq] for i, seq in enumerate(r)) for r in want)


def test_explain_names_the_multiway_join_and_its_implementation(tmp_path):
    t = _stream(20, 3, 0, 1)
    tables = [f"{n}={_write(tmp_path, n, t, 'parquet')}" for n in "abc"]
    run = run_statements("EXPLAIN SELECT /*+ WINDOW(8) JOIN_IMPL(hbsj) */ a.key, c.ts FROM a "
                         "JOIN b ON a.key = b.key JOIN c ON b.key = c.key", tables=tables)
    joins = [line for line in run.explained if "hash join" in line]
    assert len(joins) == 1 and "multiway hash join (inner, hbsj)" in joins[0], run.explained
    with pytest.raises(PlanError, match="JOIN_IMPL"):
        run_statements("SELECT /*+ WINDOW(8) JOIN_IMPL(nested) */ a.key FROM a "
                       "JOIN b ON a.key = b.key", tables=tables)


@pytest.mark.parametrize("how", ["LEFT", "RIGHT", "FULL"])
@_JOBS
@given(seed=st.integers(0, 10_000), n=st.integers(0, 150), keys=st.integers(1, 20))
def test_outer_joins_of_finite_tables_match_duckdb(tmp_path_factory, how, seed, n, keys):
    tmp = tmp_path_factory.mktemp("outer")
    left, right = _stream(n, keys, 10, seed, nulls=True), _stream(n // 2 + 1, keys + 3, 10, seed + 5)
    q = f"SELECT l.key, l.payload, r.key AS rk, r.payload AS rp FROM l {how} JOIN r ON l.key = r.key"
    run = run_statements(q, tables=[f"l={_write(tmp, 'l', left, 'parquet')}",
                                    f"r={_write(tmp, 'r', right, 'parquet')}"])
    _same(run.results["query"], _duck(q, l=left, r=right))


def test_a_join_of_unbounded_streams_needs_a_bound():
    from splice.runtime.engine import Engine

    t = _stream(10, 2, 0, 1)
    eng = Engine()
    eng.define_stream("l", t.schema, "ts", max_out_of_orderness=5)
    eng.define_stream("r", t.schema, "ts", max_out_of_orderness=5)
    for cond in ("", " AND r.ts >= l.ts"):  # a time bound one way only bounds nothing
        with pytest.raises(PlanError, match="needs a bound on its state"):
            eng.sql(f"SELECT l.key FROM l JOIN r ON l.key = r.key{cond}")
    eng.sql("SELECT /*+ WINDOW(4) */ l.key, r.ts FROM l JOIN r ON l.key = r.key", name="windowed")
    eng.push("l", t)
    eng.push("r", t)
    eng.end()
    assert eng.results("windowed").num_rows > 0
    eng.close()


def test_engine_sql_deploys_on_a_running_engine():
    from splice.runtime.engine import Engine

    t = _stream(2000, 5, 20, 5)
    with_schema = t.schema
    eng = Engine()
    eng.define_stream("l", with_schema, "ts", max_out_of_orderness=40)
    first = t.slice(0, 1000)
    eng.push("l", first)  # before the query: not seen by it
    eng.sql("SELECT key, window_start, count(*) AS n FROM TUMBLE(l, ts, 100) "
            "GROUP BY key, window_start, window_end", name="counts")
    rest = t.slice(1000)
    for b in rest.to_batches(max_chunksize=128):
        eng.push("l", b)
    eng.end()
    got = eng.results("counts")
    late = eng.late("counts").get("l")
    want = _duck("SELECT key, CAST(floor(ts / 100) * 100 AS BIGINT), count(*) FROM l GROUP BY ALL",
                 l=_on_time(rest, late))
    _same(got, want)
    eng.close()


@_JOBS
@given(seed=st.integers(0, 10_000), n=st.integers(0, 300), keys=st.integers(1, 12),
       batch=st.integers(1, 80), delay=st.integers(0, 30))
def test_group_by_over_a_stream_is_a_changelog_that_replays_to_the_answer(seed, n, keys, batch, delay):
    from collections import Counter

    from splice.runtime.engine import Engine

    t = _stream(n, keys, 15, seed, nulls=True)
    eng = Engine()
    eng.define_stream("l", t.schema, "ts", max_out_of_orderness=delay)
    eng.sql("SELECT key, count(*) AS n, sum(payload) AS s, max(payload) AS hi FROM l "
            "WHERE ts % 5 <> 0 GROUP BY key", name="agg")
    answer: Counter = Counter()
    emissions = 0

    def replay(b: pa.RecordBatch) -> None:
        nonlocal emissions
        emissions += 1
        for row in zip(*[c.to_pylist() for c in b.columns], strict=True):
            if row[0] == "+":
                answer[row[1:]] += 1
            else:
                assert answer[row[1:]] > 0, "a retraction of a row never added"
                answer[row[1:]] -= 1

    for b in t.to_batches(max_chunksize=batch):
        eng.push("l", b)
        for out in eng.take("agg"):
            replay(out)
    eng.end()
    for out in eng.take("agg"):
        replay(out)
    assert eng.late("agg").get("l") is None or eng.late("agg")["l"].num_rows == 0
    got = sorted((k for k, c in answer.items() for _ in range(c)),
                 key=lambda r: tuple((v is None, v) for v in r))
    want = _rows(_duck("SELECT key, count(*), sum(payload), max(payload) FROM l WHERE ts % 5 <> 0 "
                       "GROUP BY key", l=t))
    assert [tuple(int(v) if v is not None else None for v in r) for r in got] == \
        [tuple(int(v) if v is not None else None for v in r) for r in want]
    eng.close()


@_JOBS
@given(seed=st.integers(0, 10_000), n=st.integers(0, 300), jitter=st.integers(0, 30),
       gap=st.integers(1, 12), batch=st.sampled_from([16, 100, 65_536]),
       delay=st.sampled_from([None, 0, 8, 40]))
def test_session_windows_match_duckdb(tmp_path_factory, seed, n, jitter, gap, batch, delay):
    tmp = tmp_path_factory.mktemp("session")
    t = _stream(n, 4, jitter, seed, nulls=True)
    text = _ddl("l", _write(tmp, "l", t), delay) + (
        f"SELECT key, window_start, window_end, count(*) AS n, sum(payload) AS s "
        f"FROM SESSION(l, ts, {gap}) GROUP BY key, window_start, window_end")
    run = run_statements(text, batch_size=batch)
    late = run.late["query"].get("l")
    ts = t.column("ts").to_numpy()
    wm = _met_watermarks(ts, batch, delay)
    is_late = ts <= wm  # a row at or behind the watermark it meets is late
    assert (late.num_rows if late is not None else 0) == int(is_late.sum())
    on_time = t.append_column("rid", pa.array(np.arange(n))).filter(pa.array(~is_late))
    want = _duck(  # rid orders equal times the same way in both windows
        f"WITH o AS (SELECT *, CASE WHEN ts - lag(ts) OVER (PARTITION BY key ORDER BY ts, rid) < {gap} "
        f"THEN 0 ELSE 1 END AS fresh FROM l), s AS (SELECT *, sum(fresh) OVER (PARTITION BY key "
        f"ORDER BY ts, rid ROWS UNBOUNDED PRECEDING) AS sid FROM o) SELECT key, min(ts), "
        f"max(ts) + {gap}, count(*), sum(payload) FROM s GROUP BY key, sid", l=on_time)
    _same(run.results["query"], want)


@_JOBS
@given(seed=st.integers(0, 10_000), n=st.integers(0, 200), ttl=st.integers(0, 25),
       batch=st.integers(1, 64), delay=st.sampled_from([1, 4, 12]))
def test_state_ttl_bounds_a_join_of_streams_by_event_time(seed, n, ttl, batch, delay):
    from splice.runtime.engine import Engine

    left, right = _stream(n, 5, 6, seed), _stream(n, 5, 6, seed + 1)
    eng = Engine()
    for name in ("l", "r"):  # disorder of up to 6: within the bound of 12, beyond 1 and 4
        eng.define_stream(name, left.schema, "ts", max_out_of_orderness=delay)
    eng.sql(f"SET state_ttl = '{ttl}'; SELECT l.key, l.ts, r.ts AS rts FROM l JOIN r "
            "ON l.key = r.key", name="j")
    lb, rb = left.to_batches(max_chunksize=batch), right.to_batches(max_chunksize=batch)
    for i in range(max(len(lb), len(rb))):
        if i < len(lb):
            eng.push("l", lb[i])
        if i < len(rb):
            eng.push("r", rb[i])
    eng.end()
    late = eng.late("j")
    kept = {}
    for name, t in (("l", left), ("r", right)):  # a row at or behind its own watermark is late
        ts = t.column("ts").to_numpy()
        is_late = ts <= _met_watermarks(ts, batch, delay)
        got = late.get(name)
        assert (got.num_rows if got is not None else 0) == int(is_late.sum())
        kept[name] = _on_time(t, got)
        assert kept[name].num_rows == int((~is_late).sum())
    want = _duck(f"SELECT l.key, l.ts, r.ts FROM l JOIN r ON l.key = r.key AND abs(l.ts - r.ts) <= {ttl}",
                 l=kept["l"], r=kept["r"])
    _same(eng.results("j"), want)
    eng.close()


def test_the_engine_is_a_context_manager_reached_from_the_package():
    import splice

    t = _stream(50, 3, 0, 2)
    with splice.Engine() as eng:
        eng.define_stream("l", t.schema, "ts", max_out_of_orderness=0)
        eng.sql("SELECT key, count(*) AS n FROM TUMBLE(l, ts, 10) GROUP BY key, window_start, "
                "window_end", name="counts")
        eng.push("l", t)
        eng.end()
        got = eng.results("counts")
    want = _duck("SELECT key, count(*) FROM l GROUP BY key, floor(ts / 10)", l=t)
    _same(got, want)
    assert eng.results("counts").num_rows == got.num_rows  # still readable once closed
