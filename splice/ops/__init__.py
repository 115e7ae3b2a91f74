"""Relational operators: selection, projection, aggregation, ordering, windowed aggregation."""

from splice.ops.stateless import Project, Select

__all__ = ["Project", "Select"]
