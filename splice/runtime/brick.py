"""Topology bricks: a local switch, processing units, a bypass and a collector.

For every record that reaches a brick::

    record ──► LSwitch ──► PU 0 ─┐
                 │    └──► PU 1 ─┤
                 └── bypass ─────┴──► Collector ──► record, PU 0's output, PU 1's output, ...

The bypass carries every record onward; the collector emits it first and then each unit's output
for that record, unit by unit, so each unit's output for one input stays contiguous and the path
stays ordered. Data goes to the units in the switch's mask for its stream id; watermarks go to
the units that consume their stream; END and barriers go to every loaded unit. Records addressed
to this brick's switch or units (Instruction, Install, Uninstall) are applied here and consumed.
"""

from __future__ import annotations

from collections.abc import Sequence

from splice.core.records import (
    Barrier,
    Data,
    End,
    Install,
    Instruction,
    Record,
    Uninstall,
    Watermark,
)
from splice.runtime.switch import LocalSwitch
from splice.runtime.unit import ProcessingUnit, UnitEvents

__all__ = ["Brick", "collect"]


def collect(record: Record | None, outputs: Sequence[list[Record]]) -> list[Record]:
    """The collector: the bypassed record, then each unit's output contiguously, in unit order."""
    merged: list[Record] = [] if record is None else [record]
    for out in outputs:
        merged.extend(out)
    return merged


class Brick:
    """Brick ``index`` with switch block id ``switch_id`` and ``units`` processing units."""

    def __init__(
        self,
        index: int,
        switch_id: int,
        unit_ids: Sequence[int],
        events: UnitEvents | None = None,
    ):
        self.index = index
        self.switch = LocalSwitch(switch_id, len(unit_ids))
        self.units = [ProcessingUnit(b, events) for b in unit_ids]
        self._unit_by_block = {u.block_id: i for i, u in enumerate(self.units)}

    def owns(self, block_id: int) -> bool:
        return block_id == self.switch.block_id or block_id in self._unit_by_block

    def apply(self, rec: Instruction | Install | Uninstall) -> None:
        """Apply a record addressed to this brick's switch or one of its units."""
        if isinstance(rec, Instruction):
            self.switch.program(rec)
        elif isinstance(rec, Install):
            self.units[self._unit_by_block[rec.block_id]].install(rec)
        else:
            self.units[self._unit_by_block[rec.block_id]].uninstall(rec)

    def targets(self, rec: Record) -> list[int]:
        """Indexes of the units ``rec`` is delivered to (empty for records passing by)."""
        if isinstance(rec, Data):
            mask = self.switch.route(rec.stream_id)
            return [i for i in range(len(self.units)) if mask >> i & 1]
        if isinstance(rec, Watermark):
            return [
                i for i, u in enumerate(self.units)
                if u.loaded is not None and rec.stream_id in u.loaded.inputs
            ]
        if isinstance(rec, End | Barrier):
            return [i for i, u in enumerate(self.units) if u.loaded is not None]
        return []

    def process(self, rec: Record) -> list[Record]:
        """Serial step: route ``rec``, run the units it reaches, collect in order."""
        if isinstance(rec, Instruction | Install | Uninstall):
            if self.owns(rec.block_id):
                self.apply(rec)
                return []
            return [rec]
        outs = [self.units[i].process(rec) for i in self.targets(rec)]
        if isinstance(rec, End):  # units flush before END passes on
            return collect(None, outs) + [rec]
        return collect(rec, outs)
