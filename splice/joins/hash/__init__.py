"""Equi-joins over sliding windows: the fast hash window join, Diba's HB-SJ, SplitJoin across
units, and drivers that run them over two whole tables."""

__all__: list[str] = []
