"""Streams, schemas, control records, errors and the operator contract."""

from splice.core.errors import (
    InternalError,
    LateDataError,
    PlanError,
    SchemaError,
    SpliceError,
    StateError,
)
from splice.core.operator import InputSchemas, OperatorLogic, OperatorSpec
from splice.core.records import Barrier, Data, End, Install, Instruction, Uninstall, Watermark
from splice.core.stream import Stream, StreamCatalog

__all__ = [
    "Barrier",
    "Data",
    "End",
    "InputSchemas",
    "Install",
    "Instruction",
    "InternalError",
    "LateDataError",
    "OperatorLogic",
    "OperatorSpec",
    "PlanError",
    "SchemaError",
    "SpliceError",
    "StateError",
    "Stream",
    "StreamCatalog",
    "Uninstall",
    "Watermark",
]
