"""TPC-H queries as chains of operator specs over a ``lineitem`` stream.

Each function returns the specs of a plan, in order (the output of one feeds the next):

* :func:`q1` — pricing summary report: ``Select(l_shipdate <= date '1998-09-02')`` →
  ``GroupBy(l_returnflag, l_linestatus)`` with TPC-H's eight aggregates → ``OrderBy``;
* :func:`q6` — forecasting revenue change: a ``Select`` with the usual filter → a global
  ``sum(l_extendedprice * l_discount)``;
* :func:`shipmode_revenue` — a streaming query for the demo: revenue per ship mode in tumbling
  (or hopping) windows of ``l_shipdate``.

The answers equal DuckDB's for the same SQL (``Q1_SQL``, ``Q6_SQL``): same decimal types
(``decimal(38, s)`` sums), ``avg`` as double, same row order.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

from splice.core.operator import OperatorSpec
from splice.ops.aggregate import Agg, GroupBy
from splice.ops.order import OrderBy
from splice.ops.stateless import Select
from splice.ops.window_aggregate import WindowAggregate

__all__ = ["q1", "q6", "shipmode_revenue", "Q1_SQL", "Q6_SQL"]

Q1_SQL = """
select l_returnflag, l_linestatus,
       sum(l_quantity) as sum_qty,
       sum(l_extendedprice) as sum_base_price,
       sum(l_extendedprice * (1 - l_discount)) as sum_disc_price,
       sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) as sum_charge,
       avg(l_quantity) as avg_qty,
       avg(l_extendedprice) as avg_price,
       avg(l_discount) as avg_disc,
       count(*) as count_order
from lineitem
where l_shipdate <= date '1998-12-01' - interval '{delta}' day
group by l_returnflag, l_linestatus
order by l_returnflag, l_linestatus
"""

Q6_SQL = """
select sum(l_extendedprice * l_discount) as revenue
from lineitem
where l_shipdate >= date '{date}'
  and l_shipdate < date '{date}' + interval '1' year
  and l_discount between {discount} - 0.01 and {discount} + 0.01
  and l_quantity < {quantity}
"""


def q1_predicate(delta: int = 90) -> pc.Expression:
    """``l_shipdate <= date '1998-12-01' - delta days``."""
    cutoff = dt.date(1998, 12, 1) - dt.timedelta(days=delta)
    return pc.field("l_shipdate") <= pc.scalar(pa.scalar(cutoff, type=pa.date32()))


def q1_group_by(state_backend: str = "memory", state_dir: str | None = None) -> GroupBy:
    """Q1's aggregation step alone (input: lineitem rows that passed the date filter).

    ``state_backend``/``state_dir``: where its per-group accumulators live (see
    :class:`~splice.ops.aggregate.GroupBy`)."""
    disc_price = "l_extendedprice * (1 - l_discount)"
    return GroupBy(
        keys=["l_returnflag", "l_linestatus"],
        aggregates=[
            Agg("sum_qty", "sum", "l_quantity"),
            Agg("sum_base_price", "sum", "l_extendedprice"),
            Agg("sum_disc_price", "sum", disc_price),
            Agg("sum_charge", "sum", f"{disc_price} * (1 + l_tax)"),
            Agg("avg_qty", "avg", "l_quantity"),
            Agg("avg_price", "avg", "l_extendedprice"),
            Agg("avg_disc", "avg", "l_discount"),
            Agg("count_order", "count"),
        ],
        name="q1_group_by",
        state_backend=state_backend,
        state_dir=state_dir,
    )


def q1(delta: int = 90, pushdown: bool = False, state_backend: str = "memory",
       state_dir: str | None = None) -> list[OperatorSpec]:
    """TPC-H Q1 (``DELTA`` days, 90 by default) as Select → GroupBy → OrderBy.

    With ``pushdown`` the selection becomes the GroupBy's ``where`` (GroupBy → OrderBy): the
    same answer without materializing the filtered batch, which is most of Select's cost.
    ``state_backend``/``state_dir`` place the GroupBy's per-group state (memory or RocksDB).
    """
    order = OrderBy(["l_returnflag", "l_linestatus"], name="q1_order_by")
    g = q1_group_by(state_backend, state_dir)
    if pushdown:
        return [GroupBy(g.keys, g.aggregates, where=q1_predicate(delta), name=g.name,
                        state_backend=state_backend, state_dir=state_dir), order]
    return [Select(q1_predicate(delta)), g, order]


def q6_predicate(
    date: str = "1994-01-01", discount: str = "0.06", quantity: int = 24
) -> pc.Expression:
    """Q6's filter; the discount bounds are exact decimals, as in SQL."""
    start = dt.date.fromisoformat(date)
    end = start.replace(year=start.year + 1)
    d = Decimal(discount)
    dec = pa.decimal128(15, 2)
    ship = pc.field("l_shipdate")
    disc = pc.field("l_discount")
    return (
        (ship >= pc.scalar(pa.scalar(start, type=pa.date32())))
        & (ship < pc.scalar(pa.scalar(end, type=pa.date32())))
        & (disc >= pc.scalar(pa.scalar(d - Decimal("0.01"), type=dec)))
        & (disc <= pc.scalar(pa.scalar(d + Decimal("0.01"), type=dec)))
        & (pc.field("l_quantity") < pc.scalar(pa.scalar(Decimal(quantity), type=dec)))
    )


def q6(
    date: str = "1994-01-01", discount: str = "0.06", quantity: int = 24, pushdown: bool = False
) -> list[OperatorSpec]:
    """TPC-H Q6 as Select → global GroupBy(sum(l_extendedprice * l_discount)).

    With ``pushdown`` the selection is the GroupBy's ``where`` (one operator).
    """
    pred = q6_predicate(date, discount, quantity)
    revenue = [Agg("revenue", "sum", "l_extendedprice * l_discount")]
    if pushdown:
        return [GroupBy(keys=[], aggregates=revenue, where=pred, name="q6_sum")]
    return [Select(pred), GroupBy(keys=[], aggregates=revenue, name="q6_sum")]


def shipmode_revenue(days: int = 365, slide: int | None = None) -> list[OperatorSpec]:
    """Revenue and line count per ship mode in windows of ``days`` of ``l_shipdate``.

    Tumbling by default; ``slide`` makes them hopping. Windows are aligned at day 0 (1970-01-01)
    and close when the ``l_shipdate`` watermark passes their end.
    """
    return [
        WindowAggregate(
            time_column="l_shipdate",
            size=days,
            slide=slide,
            keys=["l_shipmode"],
            aggregates=[
                Agg("revenue", "sum", "l_extendedprice * (1 - l_discount)"),
                Agg("lines", "count"),
            ],
            name="shipmode_revenue",
        )
    ]
