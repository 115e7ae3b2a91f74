"""TPC-H Q3 as a plan deployed on the engine's data path (Diba Fig. 11).

Three source streams (customer, orders, lineitem) pass selections in the first brick; the
selected streams meet in a three-way window join (one stage per stream, orders indexed on
``o_custkey`` and ``o_orderkey``), whose results feed Aggregation-GroupBy and a top-10 order-by
in later bricks. :func:`q3_query` builds the :class:`~splice.runtime.Query`;
``splice tpch q3`` runs the same join through its fused kernel (:mod:`splice.workloads.tpch_q3`).
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc

from splice.core.plan import BindInputs, Node, Query
from splice.joins.multiway.multiway_join import MultiwayJoin
from splice.ops.aggregate import Agg, GroupBy
from splice.ops.order import TopK
from splice.ops.stateless import Select

__all__ = ["q3_query", "q3_join"]

DATE = pa.scalar(dt.date(1995, 3, 15), pa.date32())


def q3_join(customer: int, orders: int, lineitem: int, window: int | None = None,
            impl: str = "fast") -> MultiwayJoin:
    """The three-way join of Q3 over the (selected) customer, orders and lineitem streams."""
    return MultiwayJoin(
        streams=(customer, orders, lineitem),
        predicates=((customer, "c_custkey", orders, "o_custkey"),
                    (orders, "o_orderkey", lineitem, "l_orderkey")),
        window=window,
        impl=impl,  # type: ignore[arg-type]
    )


def q3_query(name: str = "q3", window: int | None = None, segment: str = "BUILDING") -> Query:
    """Q3 over source streams ``customer``, ``orders`` and ``lineitem``."""
    return Query(name, (
        Node("customer_building", Select(pc.field("c_mktsegment") == segment), ("customer",)),
        Node("orders_before", Select(pc.field("o_orderdate") < DATE), ("orders",)),
        Node("lineitem_after", Select(pc.field("l_shipdate") > DATE), ("lineitem",)),
        Node("join", BindInputs(q3_join, {"window": window}, ("customer", "orders", "lineitem")),
             ("customer_building", "orders_before", "lineitem_after")),
        Node("revenue", GroupBy(["l_orderkey", "o_orderdate", "o_shippriority"],
                                [Agg("revenue", "sum", "l_extendedprice * (1 - l_discount)")]),
             ("join",)),
        Node("top10", TopK([("revenue", "descending"), ("o_orderdate", "ascending")], 10),
             ("revenue",)),
    ))
