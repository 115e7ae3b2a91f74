"""Test harness shipped with splice: drive operators and engines, and the operator contract suite."""

from splice.testing.contract import assert_same_rows, check_operator, rows_of
from splice.testing.engine_harness import EngineHarness
from splice.testing.harness import OperatorHarness, concat, rebatch, run_operator

__all__ = [
    "EngineHarness",
    "OperatorHarness",
    "assert_same_rows",
    "check_operator",
    "concat",
    "rebatch",
    "rows_of",
    "run_operator",
]
