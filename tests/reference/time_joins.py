"""Nested-loop references of the interval join and the window join, one row at a time.

They follow the semantics of :mod:`splice.joins.temporal.interval_join` and
:mod:`splice.joins.temporal.window_join` literally: each row arrives alone, is late when its time is at or
behind the watermark the path delivered, is compared with every retained row of the other side, and
after each row every retained row that can no longer match (interval join) or whose windows have
closed (window join) leaves. Slow and obvious on purpose.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from splice.core.records import Data, End, Watermark

MIN = -(2**63)


@dataclass
class _Row:
    values: tuple
    key: tuple | None
    t: int
    seq: int
    matched: bool = False
    windows: list[int] = field(default_factory=list)


@dataclass
class _RefSide:
    sid: int
    keys: Sequence[str]
    time: str
    outer: bool
    names: list[str] = field(default_factory=list)
    rows: list[_Row] = field(default_factory=list)
    delivered: int = MIN
    late: list[tuple] = field(default_factory=list)


class _Base:
    def __init__(self, left: int, right: int, on: Sequence[str], time: str, how: str,
                 right_on: Sequence[str] | None, right_time: str | None,
                 names: tuple[Sequence[str], Sequence[str]]):
        self.L = _RefSide(left, list(on), time, how in ("left", "full"), list(names[0]))
        self.R = _RefSide(right, list(right_on or on), right_time or time, how in ("right", "full"),
                       list(names[1]))
        self.out: list[tuple] = []
        self.seq = 0

    def eff(self, s: _RefSide) -> int:
        """The side's watermark: the one the path delivered."""
        return s.delivered

    def side(self, sid: int) -> _RefSide:
        return self.L if sid == self.L.sid else self.R

    def pad(self, s: _RefSide, row: _Row) -> None:
        if s is self.L:
            self.out.append(row.values + (None,) * len(self.R.names))
        else:
            self.out.append((None,) * len(self.L.names) + row.values)

    def run(self, records: Sequence[Any]) -> list[tuple]:
        for r in records:
            if isinstance(r, Data):
                self.push(r.stream_id, r.batch)
            elif isinstance(r, Watermark):
                self.watermark(r.stream_id, r.time)
            elif isinstance(r, End):
                self.end()
        return self.out

    def rows(self, s: _RefSide, batch: pa.RecordBatch) -> list[_Row]:
        d = batch.to_pylist()
        out = []
        for r in d:
            key = tuple(r[k] for k in s.keys)
            self.seq += 1
            out.append(_Row(tuple(r[n] for n in s.names), None if None in key else key,
                            int(r[s.time]), self.seq))
        return out

    def watermark(self, sid: int, t: int) -> None:
        s = self.side(sid)
        s.delivered = max(s.delivered, t)
        self.cleanup()

    def push(self, sid: int, batch: pa.RecordBatch) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        raise NotImplementedError

    def end(self) -> None:
        raise NotImplementedError

    def retained(self, sid: int) -> list[tuple]:
        return [r.values for r in self.side(sid).rows]


class IntervalJoinRef(_Base):
    """``(l, r)`` with equal non-null keys and ``l.ts + lo <= r.ts <= l.ts + hi``."""

    def __init__(self, left: int, right: int, on: Sequence[str], time: str, lo: int, hi: int,
                 how: str = "inner", right_on: Sequence[str] | None = None,
                 right_time: str | None = None,
                 names: tuple[Sequence[str], Sequence[str]] = ((), ())):
        super().__init__(left, right, on, time, how, right_on, right_time, names)
        self.lo, self.hi = lo, hi

    def _hi(self, s: _RefSide) -> int:
        return self.hi if s is self.L else -self.lo

    def push(self, sid: int, batch: pa.RecordBatch) -> None:
        s = self.side(sid)
        o = self.R if s is self.L else self.L
        for row in self.rows(s, batch):
            if row.t <= self.eff(s):
                s.late.append(row.values)
                continue
            for other in o.rows:
                if row.key is None or row.key != other.key:
                    continue
                lt, rt = (row.t, other.t) if s is self.L else (other.t, row.t)
                if lt + self.lo <= rt <= lt + self.hi:
                    row.matched = other.matched = True
                    pair = (row.values + other.values if s is self.L
                            else other.values + row.values)
                    self.out.append(pair)
            if row.key is None or row.t <= self.eff(o) - self._hi(s):
                if s.outer and not row.matched:
                    self.pad(s, row)
            else:
                s.rows.append(row)
            self.cleanup()

    def cleanup(self) -> None:
        for s, o in ((self.L, self.R), (self.R, self.L)):
            thr = self.eff(o) - self._hi(s)
            keep = []
            for r in s.rows:
                if r.t <= thr:
                    if s.outer and not r.matched:
                        self.pad(s, r)
                else:
                    keep.append(r)
            s.rows = keep

    def end(self) -> None:
        for s in (self.L, self.R):
            for r in s.rows:
                if s.outer and not r.matched:
                    self.pad(s, r)
            s.rows = []


class WindowJoinRef(_Base):
    """Per window ``[k*slide, k*slide+size)``: pairs of equal non-null keys; outer rows padded."""

    def __init__(self, left: int, right: int, on: Sequence[str], time: str, size: int,
                 slide: int | None = None, how: str = "inner",
                 right_on: Sequence[str] | None = None, right_time: str | None = None,
                 names: tuple[Sequence[str], Sequence[str]] = ((), ())):
        super().__init__(left, right, on, time, how, right_on, right_time, names)
        self.size, self.slide = size, slide or size
        self.closed: int | None = None

    def _closed_by(self, w: int) -> int | None:
        return None if w == MIN else (w - self.size + 1) // self.slide

    def push(self, sid: int, batch: pa.RecordBatch) -> None:
        s = self.side(sid)
        for row in self.rows(s, batch):
            last = row.t // self.slide
            first = (row.t - self.size) // self.slide + 1
            if self.closed is not None:
                first = max(first, self.closed + 1)
            if first > last:
                s.late.append(row.values)
            elif row.key is not None or s.outer:
                row.windows = list(range(first, last + 1))
                s.rows.append(row)
            self.cleanup()

    def cleanup(self) -> None:
        w = min(self.eff(self.L), self.eff(self.R))
        c = self._closed_by(w)
        if c is not None and (self.closed is None or c > self.closed):
            self._emit(c)

    def _emit(self, upto: int) -> None:
        lo = None if self.closed is None else self.closed + 1
        wins = sorted({k for s in (self.L, self.R) for r in s.rows for k in r.windows
                       if k <= upto and (lo is None or k >= lo)})
        for k in wins:
            ls = [r for r in self.L.rows if k in r.windows]
            rs = [r for r in self.R.rows if k in r.windows]
            lm = [False] * len(ls)
            rm = [False] * len(rs)
            for i, lr in enumerate(ls):
                for j, rr in enumerate(rs):
                    if lr.key is not None and lr.key == rr.key:
                        self.out.append(lr.values + rr.values)
                        lm[i] = rm[j] = True
            if self.L.outer:
                for i, lr in enumerate(ls):
                    if not lm[i]:
                        self.pad(self.L, lr)
            if self.R.outer:
                for j, rr in enumerate(rs):
                    if not rm[j]:
                        self.pad(self.R, rr)
        self.closed = upto
        for s in (self.L, self.R):
            s.rows = [r for r in s.rows if r.t // self.slide > upto]

    def end(self) -> None:
        self._emit(2**62)
