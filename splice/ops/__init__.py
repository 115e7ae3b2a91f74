"""Relational operators: selection, projection, aggregation, ordering, windowed aggregation."""

from splice.ops.aggregate import Agg, GroupBy
from splice.ops.arithmetic import col, lit
from splice.ops.order import OrderBy, TopK
from splice.ops.stateless import Project, Select
from splice.ops.window_aggregate import WindowAggregate

__all__ = ["Agg", "GroupBy", "OrderBy", "Project", "Select", "TopK", "WindowAggregate", "col", "lit"]
