"""TPC-H Q3 (shipping priority) as three streams joined over windows, as in Diba, §6.1.

The query::

    SELECT l_orderkey, sum(l_extendedprice * (1 - l_discount)) AS revenue, o_orderdate, o_shippriority
    FROM customer, orders, lineitem
    WHERE c_mktsegment = 'BUILDING' AND c_custkey = o_custkey AND l_orderkey = o_orderkey
      AND o_orderdate < DATE '1995-03-15' AND l_shipdate > DATE '1995-03-15'
    GROUP BY l_orderkey, o_orderdate, o_shippriority
    ORDER BY revenue DESC, o_orderdate LIMIT 10

**Arrival order.** Every row of customer, orders and lineitem becomes one tuple of its stream,
each table in its generation (row) order. ``order="interleaved"`` (default) merges the three in
proportion to their sizes: row ``i`` of a table of ``n`` rows arrives at position
``(i + 1/2) / n`` of the whole input (ties: customer, orders, lineitem), so at any point about
the same fraction of each table has arrived. ``"sequential"`` sends all of customer, then
orders, then lineitem; ``"reversed"`` lineitem, orders, customer.

**Plan** (Diba Fig. 11): the three selections, then the three-way join of Fig. 13(b): a
customer stage on ``c_custkey``, one orders stage indexed on ``o_custkey`` and ``o_orderkey``, a
lineitem stage on ``l_orderkey``, then Aggregation-GroupBy on the join results as they are
produced, and OrderBy/top-10 at END. With the fast stages (default) the selections become pass
masks over the raw tables (only the ten columns the query uses are read, as zero-copy views) and
one kernel walks the raw arrival, drops the tuples a selection rejects and joins and aggregates
the rest (:class:`splice.joins.multiway.multiway_join.Q3FastJoin`); no filtered copy or arrival array is
written. HB-SJ stages run on the filtered arrival (:func:`q3_filtered_arrival`,
:func:`splice.joins.multiway.multiway_join.q3_stream_join`). Both give the same answer and join-result count.

**Windows.** ``window=None`` (``--window unbounded``): every stage keeps its whole stream, so the
answer is exactly the SQL answer (DuckDB's, types included: ``revenue`` is
``decimal128(38, 4)``). ``window=N``: each stage keeps the last N tuples of its *filtered*
stream (count windows, Diba's semantics: a pair joins only if both are in their windows when the
later one arrives); the answer depends on the arrival order, as Diba notes.

``seconds`` covers the selections, the arrival order, the join, the aggregation and the top-10,
all on data already in memory.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from decimal import Decimal
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from splice.core.errors import PlanError, SchemaError
from splice.joins.hash._hash_kernels import merge_by_fraction, merge_filtered3
from splice.joins.multiway._q3_kernels import INTERLEAVED, REVERSED, SEQUENTIAL
from splice.joins.multiway.multiway_join import Q3FastJoin, q3_partitioned_join, q3_stream_join

__all__ = ["run_q3", "q3_arrival", "q3_filtered_arrival", "q3_sql", "Q3_SQL", "ORDERS", "q3_inputs", "q3_raw_inputs",
           "q3_fast_run", "q3_answer"]

ORDERS = ("interleaved", "sequential", "reversed")
SEGMENT = "BUILDING"
DATE = dt.date(1995, 3, 15)

Q3_SQL = """
SELECT l_orderkey, sum(l_extendedprice * (1 - l_discount)) AS revenue, o_orderdate, o_shippriority
FROM customer, orders, lineitem
WHERE c_mktsegment = 'BUILDING' AND c_custkey = o_custkey AND l_orderkey = o_orderkey
  AND o_orderdate < DATE '1995-03-15' AND l_shipdate > DATE '1995-03-15'
GROUP BY l_orderkey, o_orderdate, o_shippriority
ORDER BY revenue DESC, o_orderdate
LIMIT 10
"""

_COLUMNS = {
    "customer": ("c_custkey", "c_mktsegment"),
    "orders": ("o_orderkey", "o_custkey", "o_orderdate", "o_shippriority"),
    "lineitem": ("l_orderkey", "l_extendedprice", "l_discount", "l_shipdate"),
}


def q3_arrival(sizes: tuple[int, int, int], order: str = "interleaved") -> tuple[np.ndarray, np.ndarray]:
    """(stream 0/1/2 = customer/orders/lineitem, row) of every tuple, in arrival order."""
    if order not in ORDERS:
        raise PlanError(f"Q3 arrival order must be one of {', '.join(ORDERS)}, got {order!r}")
    if order == "interleaved":
        side, row = merge_by_fraction(np.array(sizes, np.int64))
        return side, row
    seq = (0, 1, 2) if order == "sequential" else (2, 1, 0)
    side = np.concatenate([np.full(sizes[t], t, np.int8) for t in seq])
    row = np.concatenate([np.arange(sizes[t], dtype=np.int64) for t in seq])
    return side, row


def _one_chunk(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    return col


def _decimal_words(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, int]:
    """(n, 2) int64 (low, high) words of a decimal128 column (a view, no copy), and its scale."""
    col = _one_chunk(col)
    if not pa.types.is_decimal(col.type) or col.type.byte_width != 16:
        raise SchemaError(f"Q3: expected a decimal128 column, got {col.type}")
    if col.null_count:
        raise SchemaError("Q3: decimal column with nulls")
    words = np.frombuffer(col.buffers()[1], dtype=np.int64).reshape(-1, 2)[col.offset: col.offset + len(col)]
    return words, col.type.scale


def _check_columns(tables: dict[str, pa.Table]) -> None:
    for name, cols in _COLUMNS.items():
        if name not in tables:
            raise PlanError(f"Q3: input stream {name!r} is missing (got {', '.join(sorted(tables))})")
        for c in cols:
            if c not in tables[name].schema.names:
                raise SchemaError(f"Q3: stream {name!r} lacks column {c!r}")


def _np(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    col = _one_chunk(col)
    if pa.types.is_date32(col.type):
        col = col.view(pa.int32())
    return col.to_numpy(zero_copy_only=False)


_KEYS = (("customer", "c_custkey"), ("orders", "o_orderkey"), ("orders", "o_custkey"), ("lineitem", "l_orderkey"))


def _join_keys(c: pa.Table, o: pa.Table, li: pa.Table) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...] | None]:
    """The four join key columns as int64 over raw rows (nulls read as 0), and their validity
    (None when no key is null). A tuple with a null key takes its window position and joins
    nothing."""
    tables = {"customer": c, "orders": o, "lineitem": li}
    keys: list[np.ndarray] = []
    valid: list[np.ndarray] = []
    for name, k in _KEYS:
        col = _one_chunk(tables[name].column(k))
        if not (pa.types.is_integer(col.type) or pa.types.is_date(col.type)):
            raise SchemaError(f"Q3: stream {name!r} join key {k!r} is {col.type}, expected an integer")
        if col.null_count:
            valid.append(np.asarray(col.is_valid().to_numpy(zero_copy_only=False), np.bool_))
            col = pc.fill_null(col, 0)
        else:
            valid.append(np.ones(0, np.bool_))
        keys.append(np.asarray(_np(col), np.int64))
    if not any(len(v) for v in valid):
        return tuple(keys), None
    sizes = (c.num_rows, o.num_rows, o.num_rows, li.num_rows)
    return tuple(keys), tuple(v if len(v) else np.ones(n, np.bool_) for v, n in zip(valid, sizes, strict=True))


def _null_keys(masks: Any, valid: tuple[np.ndarray, ...] | None) -> dict[str, int]:
    """Per stream, the tuples that pass the selection with a null join key."""
    if valid is None:
        return {"customer": 0, "orders": 0, "lineitem": 0}
    return {"customer": int(np.count_nonzero(masks[0] & ~valid[0])),
            "orders": int(np.count_nonzero(masks[1] & ~(valid[1] & valid[2]))),
            "lineitem": int(np.count_nonzero(masks[2] & ~valid[3]))}


def q3_inputs(tables: dict[str, pa.Table]) -> dict[str, Any]:
    """The selections and the decomposer: filtered key/value arrays and the pass masks (for
    joins over the filtered arrival, :func:`q3_filtered_arrival`)."""
    raw = q3_raw_inputs(tables)
    c_ok, o_ok, l_ok = raw["masks"]
    keys, valid = raw["keys"], raw["valid"]
    ep, dc, one = (w[l_ok] if isinstance(w, np.ndarray) else w for w in raw["words"])
    if not (np.array_equal(ep[:, 1], ep[:, 0] >> 63) and np.array_equal(dc[:, 1], dc[:, 0] >> 63)):
        raise SchemaError("Q3: l_extendedprice or l_discount beyond 63 bits")
    o_idx = np.flatnonzero(o_ok)
    return {
        **raw,
        "c_custkey": keys[0][c_ok],
        "o_orderkey": keys[1][o_idx],
        "o_custkey": keys[2][o_idx],
        "valid": None if valid is None else (valid[0][c_ok], valid[1][o_idx], valid[2][o_idx], valid[3][l_ok]),
        "o_rows": o_idx,
        "l_orderkey": keys[3][l_ok],
        # l_extendedprice * (1 - l_discount), unscaled at scale s_e + s_d
        "l_revenue": ep[:, 0] * (one - dc[:, 0]),
    }


def q3_filtered_arrival(masks: list[np.ndarray], order: str = "interleaved") -> tuple[np.ndarray, np.ndarray]:
    """:func:`q3_arrival` of the tables behind ``masks``, keeping the tuples the selections pass,
    numbered within their filtered stream (one pass, no full-size intermediate arrays)."""
    if order not in ORDERS:
        raise PlanError(f"Q3 arrival order must be one of {', '.join(ORDERS)}, got {order!r}")
    if order == "interleaved":
        side, row = merge_filtered3(*masks)
        return side, row
    seq = (0, 1, 2) if order == "sequential" else (2, 1, 0)
    counts = [int(masks[t].sum()) for t in seq]
    side = np.concatenate([np.full(c, t, np.int8) for t, c in zip(seq, counts, strict=True)])
    row = np.concatenate([np.arange(c, dtype=np.int64) for c in counts])
    return side, row


def q3_raw_inputs(tables: dict[str, pa.Table]) -> dict[str, Any]:
    """The selections as pass masks over raw rows, and the raw columns the join reads.

    Zero-copy NumPy views where Arrow allows; nothing is filtered or copied per row: the join
    kernel applies the masks as tuples arrive.
    """
    _check_columns(tables)
    c, o, li = tables["customer"], tables["orders"], tables["lineitem"]
    keys, valid = _join_keys(c, o, li)
    day = (DATE - dt.date(1970, 1, 1)).days
    c_ok = np.asarray(pc.fill_null(pc.equal(c.column("c_mktsegment"), SEGMENT), False).to_numpy(), np.bool_)
    od = o.column("o_orderdate")
    o_ok = _np(od) < day if od.null_count == 0 else np.asarray(
        pc.fill_null(pc.less(od, pa.scalar(DATE, pa.date32())), False).to_numpy(), np.bool_)
    sd = li.column("l_shipdate")
    if sd.null_count:
        raise SchemaError("Q3: stream 'lineitem' column 'l_shipdate' has nulls")
    ep, s_e = _decimal_words(li.column("l_extendedprice"))
    dc, s_d = _decimal_words(li.column("l_discount"))
    l_ok = _np(sd) > day
    return {
        "masks": (c_ok, o_ok, l_ok),
        "keys": keys,
        "valid": valid,
        "null_keys": _null_keys((c_ok, o_ok, l_ok), valid),
        "words": (ep, dc, 10**s_d),
        "sizes": (c.num_rows, o.num_rows, li.num_rows),
        "o_orderkey": keys[1],
        "o_orderdate": o.column("o_orderdate"),
        "o_shippriority": o.column("o_shippriority"),
        "o_rows": None,
        "scale": s_e + s_d,
    }


_MODES = {"interleaved": INTERLEAVED, "sequential": SEQUENTIAL, "reversed": REVERSED}


def q3_fast_run(tables: dict[str, pa.Table], window: int | None, order: str = "interleaved",
                table_size: int | None = None) -> tuple[dict[str, Any], Q3FastJoin]:
    """The inputs (:func:`q3_raw_inputs`) and a :class:`~splice.joins.multiway.multiway_join.Q3FastJoin` over
    them, not yet run: step it, checkpoint it, then :func:`q3_answer`."""
    if window is not None and window < 1:
        raise PlanError(f"Q3: --window must be 'unbounded' or >= 1, got {window}")
    if order not in ORDERS:
        raise PlanError(f"Q3 arrival order must be one of {', '.join(ORDERS)}, got {order!r}")
    _warm_up("fast")
    q = q3_raw_inputs(tables)
    return q, Q3FastJoin(_MODES[order], q["sizes"], q["masks"], q["keys"], q["valid"], q["words"], window,
                         table_size)


def run_q3(
    tables: dict[str, pa.Table],
    window: int | None,
    order: str = "interleaved",
    batch_size: int = 65_536,
    impl: Literal["fast", "hbsj"] = "fast",
    table_size: int | None = None,
    threads: int | None = None,
) -> tuple[pa.Table, dict[str, Any]]:
    """Q3 over ``tables`` streamed in ``order`` with count windows ``window`` (None: unbounded).

    Returns the answer (l_orderkey, revenue, o_orderdate, o_shippriority; top 10) and metrics:
    ``seconds``, ``join_results``, per stream input/passed counts, HB-SJ statistics when used.
    With ``impl="fast"`` one kernel walks the raw arrival, applies the selections and joins
    (:class:`splice.joins.multiway.multiway_join.Q3FastJoin`; ``batch_size`` raw tuples per call); HB-SJ stages
    join the filtered arrival (:func:`q3_filtered_arrival`) ``batch_size`` tuples per call.
    Unbounded fast stages run on ``threads`` threads (default: one per core), each joining a
    partition of the order keys (:func:`splice.joins.multiway.multiway_join.q3_partitioned_join`): with no
    expiry the partitions' results are exactly the single join's. A count window covers its
    whole stream, so windowed joins run on one thread.
    """
    if threads is None:
        threads = os.cpu_count() or 1
    if threads < 1:
        raise PlanError(f"Q3: threads must be >= 1, got {threads}")
    if window is not None and window < 1:
        raise PlanError(f"Q3: --window must be 'unbounded' or >= 1, got {window}")
    if batch_size < 1:
        raise PlanError(f"Q3: batch size must be >= 1, got {batch_size}")
    if order not in ORDERS:
        raise PlanError(f"Q3 arrival order must be one of {', '.join(ORDERS)}, got {order!r}")
    _check_columns(tables)
    _warm_up(impl)
    t0 = time.perf_counter()
    if impl == "fast" and window is None and threads > 1 and table_size is None:
        q = q3_raw_inputs(tables)
        t1 = time.perf_counter()
        rev, hit, results, fits = q3_partitioned_join(_MODES[order], q["sizes"], q["masks"], q["keys"], q["valid"],
                                                      q["words"], threads, batch_size)
        if not fits:
            raise SchemaError("Q3: l_extendedprice or l_discount beyond 63 bits")
        stats: dict[str, Any] = {"join_results": results, "threads": threads}
    elif impl == "fast":
        q, join = q3_fast_run(tables, window, order, table_size)
        t1 = time.perf_counter()
        join.run(batch_size)
        if not join.fits:
            raise SchemaError("Q3: l_extendedprice or l_discount beyond 63 bits")
        rev, hit = join.agg_rev, join.agg_hit
        stats = {"join_results": join.results, "threads": 1}
    else:
        q = q3_inputs(tables)
        sides, rows = q3_filtered_arrival(q["masks"], order)
        t1 = time.perf_counter()
        rev, hit, stats = q3_stream_join(sides, rows, q["c_custkey"], q["o_orderkey"], q["o_custkey"],
                                         q["l_orderkey"], q["l_revenue"], window, impl, table_size, batch_size,
                                         q["valid"])
    t2 = time.perf_counter()
    answer = q3_answer(q, rev, hit)
    seconds = time.perf_counter() - t0
    metrics: dict[str, Any] = {
        "seconds": seconds,
        "join_seconds": round(t2 - t1, 6),
        "window": "unbounded" if window is None else window,
        "order": order,
        "impl": impl,
        "passed": {n: int(np.count_nonzero(m)) for n, m in
                   zip(("customer", "orders", "lineitem"), q["masks"], strict=True)},
        "groups": int(np.count_nonzero(hit)),
        "null_keys": q["null_keys"],
        **stats,
    }
    return answer, metrics


_WARM: set[str] = set()


def _warm_up(impl: str) -> None:
    """Load (or compile) the numba kernels once per process, before the clock starts."""
    if impl in _WARM:
        return
    one = np.zeros(1, np.int64)
    merge_filtered3(np.ones(1, np.bool_), np.ones(1, np.bool_), np.ones(1, np.bool_))
    for w in (1, None):
        if impl == "hbsj" and w is None:
            continue
        if impl == "fast":  # read-only keys, as zero-copy views of Arrow buffers are
            ok = np.ones(1, np.bool_)
            words = np.zeros((1, 2), np.int64)
            key = np.zeros(1, np.int64)
            key.flags.writeable = False
            for mode in _MODES.values():
                Q3FastJoin(mode, (1, 1, 1), (ok, ok, ok), (key, key, key, key), None, (words, words, 1), w).run()
                if w is None:
                    q3_partitioned_join(mode, (1, 1, 1), (ok, ok, ok), (key, key, key, key), None,
                                        (words, words, 1), 2)
        q3_stream_join(np.array([0, 1, 2], np.int8), np.zeros(3, np.int64), one, one, one, one, one, w,
                       impl)  # type: ignore[arg-type]
    _WARM.add(impl)


def q3_answer(q: dict[str, Any], rev: np.ndarray, hit: np.ndarray) -> pa.Table:
    """The top 10 (l_orderkey, revenue, o_orderdate, o_shippriority) from the revenue per order."""
    idx = np.flatnonzero(hit)
    rows = idx if q["o_rows"] is None else q["o_rows"][idx]
    dates = _np(q["o_orderdate"])[rows]
    order = np.lexsort((dates, -rev[idx]))[:10]
    top = idx[order]
    scale = q["scale"]
    revenue = pa.array([Decimal(int(v)).scaleb(-scale) for v in rev[top]], pa.decimal128(38, scale))
    take = pa.array(top if q["o_rows"] is None else q["o_rows"][top])
    return pa.table({
        "l_orderkey": pa.array(q["o_orderkey"][top], pa.int64()),
        "revenue": revenue,
        "o_orderdate": q["o_orderdate"].take(take),
        "o_shippriority": q["o_shippriority"].take(take).combine_chunks(),
    })


def q3_sql(tables: dict[str, pa.Table]) -> pa.Table:
    """Q3 by DuckDB over the same in-memory Arrow tables (the oracle and the baseline)."""
    import duckdb

    con = duckdb.connect()
    for name in ("customer", "orders", "lineitem"):
        con.register(name, tables[name])
    result = con.sql(Q3_SQL).to_arrow_table()
    con.close()
    return result
