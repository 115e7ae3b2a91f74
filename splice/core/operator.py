"""The operator contract every processing unit hosts.

An operator comes in two parts, as in bytewax: a frozen, picklable **spec** that validates its
configuration once and knows its output schema, and the mutable **logic** that ``spec.build``
returns and the data path drives::

    spec = Select("l_discount > 0.05")            # validated, picklable
    logic = spec.build({stream_id: schema})       # runtime state lives here
    out = logic.on_batch(stream_id, batch)        # -> list of output batches
    out += logic.on_watermark(stream_id, t)
    out += logic.on_end()
    state = logic.snapshot(); logic2 = spec.build(inputs, state)

Multi-input operators (joins) receive every input on their single input port, in arrival order,
told apart by ``stream_id``. Outputs are plain batches: the processing unit tags them with the
query's output stream id. Rows an operator refuses as late go to ``drain_late()``, never dropped.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from splice.core.row_checks import RowCheck

__all__ = ["OperatorSpec", "OperatorLogic", "InputSchemas"]

#: Input stream id -> Arrow schema of that input.
InputSchemas = Mapping[int, pa.Schema]


class OperatorLogic(ABC):
    """Runtime half of an operator: consumes batches and control calls, emits batches."""

    @abstractmethod
    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """Process one batch of input ``stream_id``; return the batches it produces now."""

    def on_watermark(self, stream_id: int, time: int) -> list[pa.RecordBatch]:
        """Event time of ``stream_id`` reached ``time``; return what that completes."""
        return []

    def on_end(self) -> list[pa.RecordBatch]:
        """All input has arrived: flush what is buffered."""
        return []

    def on_barrier(self, checkpoint_id: int) -> None:
        """A checkpoint barrier passed; stateful operators may prepare a snapshot."""
        return None

    def snapshot(self) -> Any:
        """An immutable, picklable copy of the operator's state (``None`` when stateless)."""
        return None

    def drain_late(self) -> list[tuple[int, pa.RecordBatch]]:
        """Rows refused as late since the last call (the late side output), each batch with
        the id of the input stream it came on."""
        return []

    def output_watermark(self) -> int | None:
        """Event time this operator's output has reached, forwarded downstream after outputs."""
        return None

    def state_bytes(self) -> int:
        """Bytes of state this operator holds (cached totals, O(1))."""
        return 0

    def retained_min(self, column: str) -> int | None:
        """The least value of ``column`` (the composer's row ids) among the input rows this
        operator still keeps and may emit, ``None`` when it keeps none; the engine frees the
        composed columns of older rows. Raises ``NotImplementedError`` when the operator
        cannot tell (the engine then keeps every row since the query was deployed)."""
        raise NotImplementedError

    def metrics(self) -> dict[str, Any]:
        """Figures worth reporting, JSON-able (e.g. ``null_keys``: rows whose key matched
        nothing)."""
        return {}


class OperatorSpec(ABC):
    """Frozen description of an operator: validated once, picklable, builds its logic."""

    #: A name for messages and plans.
    name: str = "operator"

    @abstractmethod
    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        """The schema of the output stream, or :class:`~splice.core.errors.SchemaError`."""

    @abstractmethod
    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        """Return the runtime logic, restored from ``state`` when given."""

    def columns_used(self, inputs: InputSchemas) -> Mapping[int, set[str]] | None:
        """Columns of each input this operator reads; ``None`` means all of them."""
        return None

    def input_checks(self, inputs: InputSchemas) -> Mapping[int, Sequence[RowCheck]]:
        """Per input, the conditions its rows must meet (:mod:`splice.core.row_checks`): the
        engine checks them where rows enter, under the source's bad-input policy."""
        return {}

    @property
    def stateless(self) -> bool:
        """True when every output row derives from exactly one input row of the same batch."""
        return False

    @property
    def blocking(self) -> bool:
        """True when output comes only at END (group-by over unbounded input, order-by)."""
        return False
