"""Benchmarks: one module per experiment, JSON lines out, each with a same-run baseline."""
