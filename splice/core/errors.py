"""Typed errors: every message names the stream, column, query or function at fault."""

from __future__ import annotations

__all__ = ["SpliceError", "PlanError", "SchemaError", "StateError", "InternalError", "LateDataError"]


class SpliceError(Exception):
    """Base class of every error splice raises on purpose."""


class PlanError(SpliceError):
    """A query, plan or operator configuration that cannot be deployed as given."""


class SchemaError(SpliceError):
    """A batch or expression whose columns or types do not match what a stream declares."""


class StateError(SpliceError):
    """Operator state that cannot be restored, or a state budget that was exceeded."""


class LateDataError(SpliceError):
    """A record behind the watermark where the policy is to fail rather than side-output."""


class InternalError(SpliceError):
    """A broken invariant inside splice: a bug, never the user's fault."""
