"""Processing units: one input, one output, hosting one operator of one query at a time.

A unit is loaded by an :class:`~splice.core.records.Install` record and cleared by
:class:`~splice.core.records.Uninstall`, both traveling the path in order with the data. It narrows
each incoming batch to the columns its operator reads (the path may carry more for other queries),
tags outputs with its output stream id, sends the late rows of each input to that input's late
stream, and forwards watermarks once they advance. An operator that raises fails its query alone:
the unit records the error, stops feeding the operator, and the rest of the path keeps running.

Watermarks. The unit keeps each input's watermark as the path delivers it and hands the operator
each input's *effective* watermark whenever it advances: the delivered one, raised for an input
with an idle timeout ``I`` to ``max(other inputs' watermarks) - I`` (see
:mod:`splice.core.time`). Its output watermark is the operator's :meth:`output_watermark`, or
the least effective input watermark.

Retirement. A unit reports its program retired (:attr:`UnitEvents.retired`) exactly when the
``Uninstall`` that clears it passes, also when its operator failed earlier: by then every record
before the ``Uninstall`` has left the unit, so the engine frees what the query held on the path
(its streams, sinks and parse-table rows) only once each of its units has reported.

Row retention. A unit tells, on request (:meth:`ProcessingUnit.retained_floor`), the least row
id (``__row_id``, numbered by the decomposer) that it may still emit from rows it keeps: none for
a stateless operator or one whose inputs carry no row ids; what the operator says for one that
implements ``retained_min(column) -> int | None`` (the least value of ``column`` among the input
rows it keeps and may still emit, ``None`` when it keeps none); otherwise it cannot tell, and the
decomposer keeps every row the query has seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from splice.core.operator import OperatorLogic
from splice.core.records import Barrier, Data, End, Install, Record, Uninstall, Watermark
from splice.core.time import MIN_TIME
from splice.runtime.decomposer import ROW_ID

__all__ = ["ProcessingUnit", "UnitStats", "UnitProgram", "UnitEvents", "WATERMARKS", "KEEPS_NONE"]

#: Suffix of the snapshot entry that holds a unit's watermark progress (next to its operator's).
WATERMARKS = "@watermarks"

#: :meth:`ProcessingUnit.retained_floor` of a unit that keeps no row it may still emit.
KEEPS_NONE = 2**63 - 1


@dataclass
class UnitStats:
    batches_in: int = 0
    rows_in: int = 0
    rows_out: int = 0
    busy_seconds: float = 0.0


@dataclass
class UnitEvents:
    """What units report to their engine: a query's failure, a snapshot, a retired program.

    ``retired(query, block, stats)`` comes once per installed program, when its ``Uninstall``
    passes the unit (also after a failure), from the thread that runs the unit."""

    error: Callable[[str, int, BaseException], None] | None = None
    snapshot: Callable[[int, str, str, Any], None] | None = None
    retired: Callable[[str, int, UnitStats], None] | None = None


@dataclass
class UnitProgram:
    """What an Install loads into a unit: query ``query``'s operator ``logic``, the input stream
    ids it consumes, the columns it reads of each (``None``: all), its output stream id, the late
    stream id of each input, each input's idle timeout (``None``: never idle), and ``key``, the
    operator's name within its query (where its snapshots are filed). ``stateless`` and
    ``row_ids`` (some input carries the decomposer's row ids) tell what it can retain."""

    query: str
    logic: OperatorLogic
    inputs: tuple[int, ...]
    output: int
    late: dict[int, int]
    columns: dict[int, list[str] | None]
    key: str = ""
    idle: dict[int, int | None] = field(default_factory=dict)
    #: each input's watermark as delivered by the path
    watermarks: dict[int, int] = field(default_factory=dict)
    #: each input's effective watermark as last handed to the operator
    effective: dict[int, int] = field(default_factory=dict)
    forwarded: int = MIN_TIME
    stateless: bool = False
    row_ids: bool = False

    def progress(self) -> dict[str, list[int] | int]:
        """The watermark progress a snapshot keeps, by input position (a restored plan's
        streams may get other ids)."""
        return {"delivered": [int(self.watermarks[s]) for s in self.inputs],
                "effective": [int(self.effective[s]) for s in self.inputs],
                "forwarded": int(self.forwarded)}

    def restore_progress(self, saved: Any) -> None:
        """Inverse of :meth:`progress` (ignored when it does not fit these inputs)."""
        if not isinstance(saved, dict) or len(saved.get("delivered", ())) != len(self.inputs):
            return
        self.watermarks = {s: int(t) for s, t in zip(self.inputs, saved["delivered"], strict=True)}
        self.effective = {s: int(t) for s, t in zip(self.inputs, saved["effective"], strict=True)}
        self.forwarded = int(saved["forwarded"])

    def effective_watermark(self, sid: int) -> int:
        """Input ``sid``'s delivered watermark, raised by its idle timeout against the others."""
        own = self.watermarks[sid]
        idle = self.idle.get(sid)
        if idle is None or len(self.inputs) < 2:
            return own
        ahead = max(self.watermarks[s] for s in self.inputs if s != sid)
        if ahead == MIN_TIME:
            return own
        return max(own, ahead - idle)


class ProcessingUnit:
    """PU ``block_id``: runs the installed operator on the records routed to it."""

    def __init__(self, block_id: int, events: UnitEvents | None = None):
        self.block_id = block_id
        self.loaded: UnitProgram | None = None
        self.stats = UnitStats()
        self.error: BaseException | None = None
        self.events = events or UnitEvents()
        self._failed: str | None = None  # the query whose operator failed here, until Uninstall

    @property
    def query(self) -> str | None:
        return self.loaded.query if self.loaded else None

    def install(self, rec: Install) -> None:
        self.loaded = rec.program
        if set(self.loaded.watermarks) != set(self.loaded.inputs):
            self.loaded.watermarks = {sid: MIN_TIME for sid in self.loaded.inputs}
        if set(self.loaded.effective) != set(self.loaded.inputs):
            self.loaded.effective = dict(self.loaded.watermarks)
        self.stats = UnitStats()
        self.error = None
        self._failed = None

    def uninstall(self, rec: Uninstall) -> None:
        """Drop the program (its operator's logic with it) and report it retired."""
        query = self.loaded.query if self.loaded is not None else self._failed
        self.loaded = None
        self._failed = None
        if query is not None and self.events.retired is not None:
            self.events.retired(query, self.block_id, self.stats)

    def _fail(self, exc: BaseException) -> list[Record]:
        assert self.loaded is not None
        self.error = exc
        self._failed = self.loaded.query
        if self.events.error is not None:
            self.events.error(self.loaded.query, self.block_id, exc)
        self.loaded = None  # the operator is fed no more; the query retires at its Uninstall
        return []

    def retained_floor(self) -> int | None:
        """The least row id this unit may still emit from rows it keeps (module docstring):
        :data:`KEEPS_NONE` when it keeps none, ``None`` when it cannot tell.

        Ask only between two records (the unit idle), as the executors' fences do."""
        ld = self.loaded
        if ld is None or ld.stateless or not ld.row_ids:
            return KEEPS_NONE
        report = getattr(ld.logic, "retained_min", None)
        if report is None:
            return None
        try:
            least = report(ROW_ID)
        except Exception:  # an operator that cannot say keeps everything
            return None
        return KEEPS_NONE if least is None else int(least)

    def _emit(self, batches: list[pa.RecordBatch], seq: int) -> list[Record]:
        assert self.loaded is not None
        out: list[Record] = []
        for b in batches:
            if isinstance(b, Data):  # a splitter addresses its sub-streams itself
                out.append(b)
            elif b.num_rows:
                self.stats.rows_out += b.num_rows
                out.append(Data(self.loaded.output, b, seq))
        for sid, b in self.loaded.logic.drain_late():
            if b.num_rows:
                out.append(Data(self.loaded.late[sid], b, seq))
        return out

    def _forward_watermark(self) -> list[Record]:
        ld = self.loaded
        assert ld is not None
        wm = ld.logic.output_watermark()
        if wm is None:
            wm = min(ld.effective.values()) if ld.effective else MIN_TIME
        if wm > ld.forwarded:
            ld.forwarded = wm
            return [Watermark(ld.output, wm)]
        return []

    def process(self, rec: Record) -> list[Record]:
        """Run ``rec`` through the installed operator; return the unit's output records."""
        ld = self.loaded
        if ld is None:
            return []
        started = time.perf_counter()
        try:
            if isinstance(rec, Data):
                cols = ld.columns.get(rec.stream_id)
                batch = rec.batch if cols is None else rec.batch.select(cols)
                self.stats.batches_in += 1
                self.stats.rows_in += batch.num_rows
                return self._emit(ld.logic.on_batch(rec.stream_id, batch), rec.seq)
            if isinstance(rec, Watermark):
                if rec.stream_id not in ld.watermarks or rec.time <= ld.watermarks[rec.stream_id]:
                    return []
                ld.watermarks[rec.stream_id] = rec.time
                out: list[Record] = []
                for sid in ld.inputs:
                    eff = ld.effective_watermark(sid)
                    if eff > ld.effective[sid]:
                        ld.effective[sid] = eff
                        out += self._emit(ld.logic.on_watermark(sid, eff), -1)
                return out + self._forward_watermark()
            if isinstance(rec, End):
                return self._emit(ld.logic.on_end(), -1)
            if isinstance(rec, Barrier):
                ld.logic.on_barrier(rec.checkpoint_id)
                if self.events.snapshot is not None:
                    self.events.snapshot(rec.checkpoint_id, ld.query, ld.key, ld.logic.snapshot())
                    self.events.snapshot(rec.checkpoint_id, ld.query, ld.key + WATERMARKS,
                                         ld.progress())
                return []
        except Exception as exc:  # an operator's failure fails its query, not the engine
            return self._fail(exc)
        finally:
            self.stats.busy_seconds += time.perf_counter() - started
        return []
