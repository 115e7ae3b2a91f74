"""The records that travel the data path: data batches and the control records in order with them.

Diba programs its switches with instructions that travel in the same path as tuples; splice does the
same with :class:`Instruction` (route a stream at a switch) and :class:`Install` / :class:`Uninstall`
(load or clear a processing unit). Watermarks, checkpoint barriers and END travel the same way, so a
control record takes effect exactly at its position among the data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

__all__ = [
    "Data",
    "Instruction",
    "Install",
    "Uninstall",
    "Watermark",
    "Barrier",
    "End",
    "Record",
    "Control",
]


@dataclass(frozen=True, slots=True)
class Data:
    """A batch of stream ``stream_id``; ``seq`` orders replicated sub-streams (synchronizer token)."""

    stream_id: int
    batch: pa.RecordBatch
    seq: int = -1


@dataclass(frozen=True, slots=True)
class Instruction:
    """Program switch ``block_id``: stream ``stream_id`` leaves on the ports in ``mask``.

    A mask of 0 removes the route. Switches that are not addressed pass the record on.
    """

    block_id: int
    stream_id: int
    mask: int


@dataclass(frozen=True, slots=True)
class Install:
    """Load processing unit ``block_id`` with ``program``: a query's operator logic, the stream
    ids it consumes and produces (see :class:`splice.runtime.unit.UnitProgram`)."""

    block_id: int
    program: Any = field(compare=False)


@dataclass(frozen=True, slots=True)
class Uninstall:
    """Clear processing unit ``block_id`` (its operator is dropped without flushing)."""

    block_id: int


@dataclass(frozen=True, slots=True)
class Watermark:
    """Event time of stream ``stream_id`` has reached ``time``: no later record has time <= it."""

    stream_id: int
    time: int


@dataclass(frozen=True, slots=True)
class Barrier:
    """Checkpoint barrier ``checkpoint_id``: operators snapshot their state as it passes."""

    checkpoint_id: int


@dataclass(frozen=True, slots=True)
class End:
    """End of all input: blocking operators flush, every query answers."""


Control = Instruction | Install | Uninstall | Watermark | Barrier | End
Record = Data | Control
