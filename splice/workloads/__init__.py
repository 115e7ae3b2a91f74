"""Workloads: TPC-H queries as streams, and the transactional applications."""

__all__: list[str] = []
