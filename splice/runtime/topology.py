"""The topology: global switches and bricks chained into one unidirectional path.

::

    GSwitch 0 ─► Brick 0 ─► GSwitch 1 ─► Brick 1 ─► ... ─► Brick n-1 ─► GSwitch n

Block ids (switches and units) are handed out in path order; every instruction names one.
"""

from __future__ import annotations

from collections.abc import Callable

from splice.core.errors import PlanError
from splice.core.records import Data, End, Instruction, Record, Watermark
from splice.runtime.brick import Brick
from splice.runtime.switch import ONWARD, TAP, GlobalSwitch
from splice.runtime.unit import UnitEvents

__all__ = ["Topology", "GlobalStage"]


class GlobalStage:
    """A global switch on the path: taps routed streams to the sinks, carries on what is needed."""

    def __init__(self, block_id: int, tap: Callable[[Record], None]):
        self.switch = GlobalSwitch(block_id)
        self._tap = tap
        self.dropped_batches = 0

    def process(self, rec: Record) -> list[Record]:
        if isinstance(rec, Instruction):
            if self.switch.accepts(rec):
                self.switch.program(rec)
                return []
            return [rec]
        if isinstance(rec, Data | Watermark):
            mask = self.switch.route(rec.stream_id)
            if mask & TAP:
                self._tap(rec)
            if mask & ONWARD:
                return [rec]
            if isinstance(rec, Data):
                self.dropped_batches += 1
            return []
        if isinstance(rec, End):
            self._tap(rec)
        return [rec]


class Topology:
    """``bricks`` bricks of ``units_per_brick`` processing units each."""

    def __init__(
        self,
        bricks: int = 4,
        units_per_brick: int = 4,
        tap: Callable[[Record], None] | None = None,
        events: UnitEvents | None = None,
    ):
        if bricks < 1 or units_per_brick < 1:
            raise PlanError(f"a topology needs >= 1 brick and >= 1 unit per brick, got {bricks}x{units_per_brick}")
        self.units_per_brick = units_per_brick
        self._tap = tap or (lambda rec: None)
        self._events = events
        self._next_block = 1
        self.gswitches: list[GlobalStage] = [GlobalStage(self._block(), self._tap)]
        self.bricks: list[Brick] = []
        self._stages: list[GlobalStage | Brick] = []
        for _ in range(bricks):
            self.grow()

    def _block(self) -> int:
        b = self._next_block
        self._next_block += 1
        return b

    def grow(self) -> Brick:
        """Append one brick (and the global switch after it) at the end of the path."""
        switch_id = self._block()
        units = [self._block() for _ in range(self.units_per_brick)]
        brick = Brick(len(self.bricks), switch_id, units, self._events)
        self.bricks.append(brick)
        self.gswitches.append(GlobalStage(self._block(), self._tap))
        self._stages = [self.gswitches[0]]
        for b, g in zip(self.bricks, self.gswitches[1:], strict=True):
            self._stages += [b, g]
        return brick

    def stages(self) -> list[GlobalStage | Brick]:
        """Path order: GSwitch 0, Brick 0, GSwitch 1, ..., GSwitch n."""
        return self._stages

    def describe(self) -> list[dict]:
        """Bricks, units and what each unit hosts (for the CLI and the web page)."""
        return [
            {
                "brick": b.index,
                "switch": b.switch.block_id,
                "routes": dict(b.switch.table),
                "units": [
                    {"block": u.block_id, "query": u.query, "rows_in": u.stats.rows_in,
                     "rows_out": u.stats.rows_out, "busy_s": round(u.stats.busy_seconds, 6)}
                    for u in b.units
                ],
            }
            for b in self.bricks
        ]
