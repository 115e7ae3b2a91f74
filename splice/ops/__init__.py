"""Relational operators: selection, projection, aggregation, ordering, windowed aggregation."""

from splice.ops.stateless import Project, Select

__all__ = ["Project", "Select"]
from splice.ops.aggregate import Agg, GroupBy  # noqa: E402
from splice.ops.arithmetic import col, lit  # noqa: E402
from splice.ops.order import OrderBy, TopK  # noqa: E402
from splice.ops.window_aggregate import WindowAggregate  # noqa: E402

__all__ += ["Agg", "GroupBy", "OrderBy", "TopK", "WindowAggregate", "col", "lit"]
