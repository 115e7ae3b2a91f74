"""Brute-force reference of windowed TPC-H Q3 as streams: Python rows, lists, nested loops.

Arrival: row i of a table of n rows at (i + 1/2) / n (ties customer, orders, lineitem), or the
tables one after another. Selections first; each stream's window holds its last ``w`` passed
tuples. An arriving tuple joins every pair of tuples in the other two windows that satisfies
both join predicates (a null key equals nothing); then its window expires its oldest (when full) and appends it. Revenue is
summed per order with Python decimals; top 10 by revenue desc, o_orderdate.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa

DATE = dt.date(1995, 3, 15)


def _eq(a: Any, b: Any) -> bool:
    return a is not None and b is not None and a == b


def q3_windowed(tables: dict[str, pa.Table], window: int, order: str = "interleaved") -> list[dict[str, Any]]:
    c = tables["customer"].select(["c_custkey", "c_mktsegment"]).to_pylist()
    o = tables["orders"].select(["o_orderkey", "o_custkey", "o_orderdate", "o_shippriority"]).to_pylist()
    li = tables["lineitem"].select(["l_orderkey", "l_extendedprice", "l_discount", "l_shipdate"]).to_pylist()
    rows = [c, o, li]
    if order == "interleaved":
        arrivals = sorted(((i + 0.5) / len(r), t, i) for t, r in enumerate(rows) for i in range(len(r)))
        seq = [(t, i) for _, t, i in arrivals]
    else:
        ts = (0, 1, 2) if order == "sequential" else (2, 1, 0)
        seq = [(t, i) for t in ts for i in range(len(rows[t]))]
    passes = [
        lambda r: r["c_mktsegment"] == "BUILDING",
        lambda r: r["o_orderdate"] < DATE,
        lambda r: r["l_shipdate"] > DATE,
    ]
    win: list[list[dict[str, Any]]] = [[], [], []]
    revenue: dict[int, Decimal] = {}
    info: dict[int, tuple[dt.date, int]] = {}

    def emit(cr: dict, orr: dict, lr: dict) -> None:
        k = orr["o_orderkey"]
        revenue[k] = revenue.get(k, Decimal(0)) + lr["l_extendedprice"] * (1 - lr["l_discount"])
        info[k] = (orr["o_orderdate"], orr["o_shippriority"])

    for t, i in seq:
        r = rows[t][i]
        if not passes[t](r):
            continue
        if t == 0:
            for orr in win[1]:
                if _eq(orr["o_custkey"], r["c_custkey"]):
                    for lr in win[2]:
                        if _eq(lr["l_orderkey"], orr["o_orderkey"]):
                            emit(r, orr, lr)
        elif t == 1:
            for cr in win[0]:
                if _eq(cr["c_custkey"], r["o_custkey"]):
                    for lr in win[2]:
                        if _eq(lr["l_orderkey"], r["o_orderkey"]):
                            emit(cr, r, lr)
        else:
            for orr in win[1]:
                if _eq(orr["o_orderkey"], r["l_orderkey"]):
                    for cr in win[0]:
                        if _eq(cr["c_custkey"], orr["o_custkey"]):
                            emit(cr, orr, r)
        if len(win[t]) == window:
            win[t].pop(0)
        win[t].append(r)
    top = sorted(revenue, key=lambda k: (-revenue[k], info[k][0]))[:10]
    return [{"l_orderkey": k, "revenue": revenue[k], "o_orderdate": info[k][0], "o_shippriority": info[k][1]}
            for k in top]
