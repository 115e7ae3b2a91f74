"""Switches: routing tables from stream id to a mask of output ports, programmed in-band.

A switch changes its table only when an :class:`~splice.core.records.Instruction` addressed to its
block id passes through it, so a route takes effect exactly at the instruction's position among
the data. Instructions addressed to other blocks pass on untouched.
"""

from __future__ import annotations

from splice.core.records import Instruction

__all__ = ["Switch", "LocalSwitch", "GlobalSwitch", "ONWARD", "TAP"]

#: Global switch ports: carry the stream on to the next brick, and/or tap it to the sinks.
ONWARD = 0b01
TAP = 0b10


class Switch:
    """A routing table ``stream id -> port mask`` owned by block ``block_id``."""

    def __init__(self, block_id: int, ports: int):
        self.block_id = block_id
        self.ports = ports
        self.table: dict[int, int] = {}

    def accepts(self, instruction: Instruction) -> bool:
        return instruction.block_id == self.block_id

    def program(self, instruction: Instruction) -> None:
        """Apply ``instruction``: set the stream's mask, or remove the route when it is 0."""
        if instruction.mask >> self.ports:
            raise ValueError(
                f"block {self.block_id}: mask {instruction.mask:#b} addresses ports beyond {self.ports}"
            )
        if instruction.mask:
            self.table[instruction.stream_id] = instruction.mask
        else:
            self.table.pop(instruction.stream_id, None)

    def route(self, stream_id: int) -> int:
        return self.table.get(stream_id, 0)


class LocalSwitch(Switch):
    """A brick's LSwitch: one port per processing unit of the brick (bit i = PU i)."""


class GlobalSwitch(Switch):
    """A GSwitch between bricks: port ONWARD to the next brick, port TAP to the result sinks."""

    def __init__(self, block_id: int):
        super().__init__(block_id, 2)
