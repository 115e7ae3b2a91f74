"""Window join: equi-key pairs that fall in the same tumbling or hopping event-time window.

Semantics (Flink's window join, with outer joins). Windows are aligned at 0: window ``k`` covers
``[k * slide, k * slide + size)``; tumbling windows have ``slide = size``, hopping windows
``slide < size`` (a row belongs to every window that covers its time). For each window ``k``::

    L ⋈_k R = { (l, r) : key(l) = key(r), key(l) not null, l.ts ∈ window k, r.ts ∈ window k }

and the output is the union over windows (a pair sharing two hopping windows is emitted twice,
once per window). ``how`` = ``left``/``right``/``full`` also emits, per window, every row of the
outer side(s) that matched nothing in that window, null-padded. Output columns are the left
input's, then the right input's (a taken right name gets ``_right``).

Emission. Window ``k`` *closes* when the join's watermark ``W = min(W_left, W_right)`` reaches its
last instant, ``k * slide + size - 1``; its result is emitted then: its pairs ordered by left row,
then right row (arrival order), then its padded left rows, then its padded right rows (each in
arrival order). When one watermark closes several windows, their results follow one another in
window order, each whole. A row is assigned to the windows covering its time that are still
open when it arrives; a row whose windows have all closed is *late*: counted per stream and sent
to :meth:`drain_late`. A row is freed when its last window closes.

Algorithm. Rows are buffered per side as Arrow batches with their times, key codes and first open
window (found with the late rows in one compiled pass over an arriving batch,
:func:`~splice.joins.temporal._window_kernels.arrival_windows`); at a close, the rows of the closing windows
are expanded to ``(row, window)`` pairs (by :func:`~splice.joins.temporal._window_kernels.expand_windows`,
one compiled pass per retained batch, which stops at the first row of a time-ordered batch whose
windows are all still open) and matched on ``(window, key code)`` window by window, each window's
right rows in a hash table of their own (:func:`~splice.joins.temporal._window_kernels.window_pairs`), which
yields the pairs in emission order; non-exact codes are checked for real key equality. A close of
many windows is expanded and matched in groups of windows (``_GROUP_PAIRS``), a time-ordered
batch read from the group's first row. Freeing the closed rows of a time-ordered batch that
keeps at least half of them is a zero-copy slice, counted in the state bytes with its parent's
buffers whole; a smaller remainder is copied. Watermarks (taken from the path), null keys (they
match nothing; counted in ``null_keys``; an outer side pads them when their windows close) and
``state_budget`` behave as in :class:`~splice.joins.temporal.interval_join.IntervalJoin`.

>>> import pyarrow as pa
>>> from splice.testing import OperatorHarness
>>> s = pa.schema([("k", pa.int64()), ("ts", pa.int64())])
>>> h = OperatorHarness(WindowJoin(left=2, right=3, on="k", time="ts", size=10), {2: s, 3: s})
>>> _ = h.push(2, pa.record_batch({"k": [1, 1], "ts": [3, 12]}, schema=s))
>>> _ = h.push(3, pa.record_batch({"k": [1], "ts": [9]}, schema=s))
>>> h.end().to_pylist()
[{'k': 1, 'ts': 3, 'k_right': 1, 'ts_right': 9}]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from splice.core.errors import PlanError, StateError
from splice.core.operator import InputSchemas, OperatorLogic, OperatorSpec
from splice.core.row_checks import RowCheck
from splice.core.time import MIN_TIME, time_values
from splice.joins.common.key_codec import KeyCodec, keys_equal
from splice.joins.common.output_schema import check_pair_join
from splice.joins.temporal._interval_kernels import time_range
from splice.joins.temporal._window_kernels import arrival_windows, expand_windows, window_pairs
from splice.joins.temporal.interval_join import (
    MAX_TIME,
    JoinType,
    TwoSidedJoinLogic,
    check_time_join_inputs,
    concat_batches,
    conform,
    join_output_schema,
    time_checks,
)

__all__ = ["WindowJoin"]

_MIN = int(MIN_TIME)
_BATCH_OVERHEAD = 48
#: ``(row, window)`` pairs of both sides that a large close matches at once, about; a close of
#: up to four times as many is matched whole (see ``WindowJoinLogic._groups``).
_GROUP_PAIRS = 65_536


@dataclass(frozen=True)
class WindowJoin(OperatorSpec):
    """Spec of the window join (see the module docstring); ``slide`` defaults to ``size``."""

    left: int
    right: int
    on: str | Sequence[str]
    time: str
    size: int
    slide: int | None = None
    how: JoinType = "inner"
    right_on: str | Sequence[str] | None = None
    right_time: str | None = None
    state_budget: int | None = None
    name: str = field(default="window_join")

    def __post_init__(self) -> None:
        check_pair_join(self)
        if self.slide is None:
            object.__setattr__(self, "slide", self.size)
        assert self.slide is not None
        if self.size < 1 or self.slide < 1:
            raise PlanError(f"{self.name}: window size and slide must be >= 1, "
                            f"got size={self.size}, slide={self.slide}")
        if self.slide > self.size:
            raise PlanError(f"{self.name}: slide {self.slide} > size {self.size} would leave gaps "
                            "between windows")
        if self.state_budget is not None and self.state_budget <= 0:
            raise PlanError(f"{self.name}: state_budget must be > 0 bytes, got {self.state_budget}")

    @property
    def time_columns(self) -> tuple[str, str]:
        return self.time, self.right_time or self.time

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        ls, rs = check_time_join_inputs(self, inputs)
        return join_output_schema(ls, rs, self.how, self.name)

    def input_checks(self, inputs: InputSchemas) -> Mapping[int, Sequence[RowCheck]]:
        return time_checks(self)

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        logic = WindowJoinLogic(self, inputs, self.output_schema(inputs))
        if state is not None:
            logic.restore(state)
        return logic


def _by_window(windows: np.ndarray, valid: np.ndarray | None) -> np.ndarray | None:
    """The pairs with a valid key (``valid`` ``None``: every key is), ordered by window, pairs
    of one window in their order; ``None`` for all of them as they are (the pairs of one
    time-ordered batch, or of several whose windows do not interleave)."""
    if valid is None or valid.all():
        if len(windows) < 2 or not (windows[1:] < windows[:-1]).any():
            return None
        return np.argsort(windows, kind="stable")
    sel = np.flatnonzero(valid)
    w = windows[sel]
    if len(w) > 1 and (w[1:] < w[:-1]).any():
        sel = sel[np.argsort(w, kind="stable")]
    return sel


def _window_major(parts: list[pa.RecordBatch], windows: list[np.ndarray]
                  ) -> list[pa.RecordBatch]:
    """``parts`` (the matched pairs, then the padded left rows, then the padded right rows of
    a close, each ordered by window) as one window's output after another: per window its pairs,
    its padded left rows, its padded right rows. As they are when that is already so (one
    closing window, or the windows of the parts do not interleave)."""
    w = np.concatenate(windows)
    if not (w[1:] < w[:-1]).any():
        return parts
    whole = pa.concat_batches(parts)
    return [whole.take(pa.array(np.argsort(w, kind="stable")))]


class _WBuffered:
    """One retained batch of one side: payload, times, key codes, valid keys, first open window
    per row, and the times' cached range and order.

    ``nbytes`` counts every buffer held. A batch in time order that keeps at least half its rows
    when freed becomes a zero-copy slice, which holds its parent's buffers whole and counts them
    so; a smaller remainder is copied, so that a long-lived slice never pins a large parent.
    """

    __slots__ = ("batch", "times", "codes", "valid", "k_open", "min_time", "max_time",
                 "ordered", "nbytes")

    def __init__(self, batch: pa.RecordBatch, times: np.ndarray, codes: np.ndarray,
                 valid: np.ndarray | None, k_open: np.ndarray, held: int = -1):
        self.batch = batch
        self.times = times
        self.codes = codes
        self.valid = valid
        self.k_open = k_open
        self.min_time, self.max_time, self.ordered = time_range(times)
        self.nbytes = held if held >= 0 else (
            batch.nbytes + times.nbytes + codes.nbytes + k_open.nbytes
            + (valid.nbytes if valid is not None else 0) + _BATCH_OVERHEAD)

    def after(self, threshold: int) -> _WBuffered:
        """The rows with ``time > threshold`` (some, not all)."""
        valid = self.valid
        if self.ordered:
            n = len(self.times)
            i = int(np.searchsorted(self.times, threshold, side="right"))
            if 2 * (n - i) >= n:
                return _WBuffered(self.batch.slice(i), self.times[i:], self.codes[i:],
                                  None if valid is None else valid[i:], self.k_open[i:],
                                  self.nbytes)
            rows = np.arange(i, n)
            return _WBuffered(self.batch.take(pa.array(rows)), self.times[i:].copy(),
                              self.codes[i:].copy(), None if valid is None else valid[i:].copy(),
                              self.k_open[i:].copy())
        m = self.times > threshold
        return _WBuffered(self.batch.filter(pa.array(m)), self.times[m], self.codes[m],
                          None if valid is None else valid[m], self.k_open[m])


class _WSide:
    def __init__(self, label: str, sid: int, schema: pa.Schema, keys: Sequence[str], time: str,
                 outer: bool, codec: KeyCodec):
        self.label = label
        self.sid = sid
        self.stream = f"{label} (stream {sid})"
        self.schema = schema
        self.keys = list(keys)
        self.time = time
        self.outer = outer
        self.codec = codec
        self.batches: list[_WBuffered] = []
        self.n_rows = 0
        self.nbytes = 0
        self.wm_delivered = _MIN
        self.late_rows = 0
        self.null_keys = 0

    def free(self, threshold: int) -> None:
        """Free rows with ``time <= threshold`` (their last window closed)."""
        keep = []
        for b in self.batches:
            if b.max_time <= threshold:
                self.n_rows -= len(b.times)
                self.nbytes -= b.nbytes
            elif b.min_time <= threshold:
                nb = b.after(threshold)
                self.n_rows -= len(b.times) - len(nb.times)
                self.nbytes += nb.nbytes - b.nbytes
                keep.append(nb)
            else:
                keep.append(b)
        self.batches = keep

    def retained(self) -> pa.Table:
        return pa.Table.from_batches([b.batch for b in self.batches], schema=self.schema)


class WindowJoinLogic(TwoSidedJoinLogic):
    """Runtime of :class:`WindowJoin`; built by ``WindowJoin.build``."""

    def __init__(self, spec: WindowJoin, inputs: InputSchemas, schema: pa.Schema):
        self.spec = spec
        self.schema = schema
        ls, rs = inputs[spec.left], inputs[spec.right]
        assert isinstance(spec.on, tuple) and isinstance(spec.right_on, tuple)
        assert spec.slide is not None
        self.size, self.slide = int(spec.size), int(spec.slide)
        lt, rt = spec.time_columns
        codec = KeyCodec([ls.field(c).type for c in spec.on])
        self.exact = codec.exact
        self.L = _WSide("left", spec.left, ls, spec.on, lt, spec.how in ("left", "full"), codec)
        self.R = _WSide("right", spec.right, rs, spec.right_on, rt, spec.how in ("right", "full"),
                        KeyCodec([rs.field(c).type for c in spec.right_on]))
        self.closed = _MIN  # every window k <= closed has been emitted
        self._late: list[tuple[int, pa.RecordBatch]] = []
        self._nl = len(ls.names)

    # -- windows and watermarks ----------------------------------------------------------------

    def _last_closed(self, w: int) -> int:
        """Largest window index whose last instant ``k*slide + size - 1`` is ``<= w``."""
        if w == _MIN:
            return _MIN
        return (w - self.size + 1) // self.slide

    def _combined(self) -> int:
        return min(self.L.wm_delivered, self.R.wm_delivered)

    def output_watermark(self) -> int | None:
        w = self._combined()
        return None if w == _MIN else w

    # -- the data path -----------------------------------------------------------------------

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        s, o = self._sides(stream_id)
        batch = conform(batch, s.schema, s.stream, self.spec.name)
        n = batch.num_rows
        if n == 0:
            return []
        t = time_values(batch, s.time, s.stream)
        codes, valid = s.codec.encode([batch.column(c) for c in s.keys])
        if valid is not None:
            s.null_keys += n - int(np.count_nonzero(valid))
        # the windows the join's watermark has closed: late rows, first open windows
        late, k_open = arrival_windows(t, self.size, self.slide,
                                       max(self.closed, self._last_closed(self._combined())))
        if late.any():
            self._late.append((s.sid, batch.filter(pa.array(late))))
            s.late_rows += int(np.count_nonzero(late))
            keep = ~late
            batch, t, codes, k_open = (batch.filter(pa.array(keep)), t[keep], codes[keep],
                                       k_open[keep])
            valid = None if valid is None else valid[keep]
        if len(t):
            if not s.outer and valid is not None:  # null keys of an inner side never show up
                if not valid.all():
                    batch, t, codes, k_open = (batch.filter(pa.array(valid)), t[valid],
                                               codes[valid], k_open[valid])
                valid = None
            if len(t):
                buf = _WBuffered(batch, t, codes, valid, k_open)
                budget = self.spec.state_budget
                if budget is not None and self.L.nbytes + self.R.nbytes + buf.nbytes > budget:
                    raise StateError(
                        f"{self.spec.name}: state would reach "
                        f"{self.L.nbytes + self.R.nbytes + buf.nbytes} bytes with {len(t)} more "
                        f"rows of stream {s.stream}, over the budget of {budget} bytes; watermark "
                        f"of {o.stream} is {o.wm_delivered} (an input that never advances holds "
                        "every window open: give its source a watermark strategy with an idle "
                        "timeout)")
                s.batches.append(buf)
                s.n_rows += len(t)
                s.nbytes += buf.nbytes
        return self._close(self._last_closed(self._combined()))

    def on_watermark(self, stream_id: int, time: int) -> list[pa.RecordBatch]:
        s, _ = self._sides(stream_id)
        if time > s.wm_delivered:
            s.wm_delivered = int(time)
        return self._close(self._last_closed(self._combined()))

    def on_end(self) -> list[pa.RecordBatch]:
        return self._close(MAX_TIME // self.slide)

    def _involved(self, s: _WSide, lo_k: int, hi_k: int) -> tuple[list[_WBuffered], list[int]]:
        """The batches of ``s`` that may hold a row in windows ``lo_k..hi_k`` (by their cached
        time range), and where each starts among their rows."""
        batches, offsets = [], []
        offset = 0
        for b in s.batches:
            if b.max_time // self.slide < lo_k or (b.min_time - self.size) // self.slide >= hi_k:
                continue  # its windows all lie before lo_k, or all after hi_k
            batches.append(b)
            offsets.append(offset)
            offset += len(b.times)
        return batches, offsets

    def _expand(self, batches: list[_WBuffered], offsets: list[int], lo_k: int, hi_k: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """Rows of ``batches`` in windows ``lo_k..hi_k`` as (row, window) pairs: per pair the
        row's position among those batches' rows, its window, its key code and whether its key
        is valid (``None``: every key is). A time-ordered batch is read from its first row in
        window ``lo_k``."""
        pos, ks, cs = [], [], []
        vs: list[np.ndarray | None] = []
        nulls = False  # a batch with null keys among them
        for b, offset in zip(batches, offsets, strict=True):
            k_open, times, codes = b.k_open, b.times, b.codes
            start = 0
            if b.ordered and lo_k != _MIN:
                start = int(np.searchsorted(times, lo_k * self.slide))  # t // slide >= lo_k
                if start:
                    k_open, times, codes = k_open[start:], times[start:], codes[start:]
            buf, cap, m = expand_windows(k_open, times, codes, self.slide, lo_k, hi_k,
                                         offset + start, b.ordered)
            if m == 0:
                continue
            pos.append(buf[:m])
            ks.append(buf[cap : cap + m])
            cs.append(buf[2 * cap : 2 * cap + m])
            if b.valid is not None:
                nulls = True
                vs.append(b.valid[buf[:m] - offset])
            else:
                vs.append(None)
        if not pos:
            e = np.zeros(0, dtype=np.int64)
            return e, e, e, None
        valid = (None if not nulls else
                 np.concatenate([np.ones(len(p), bool) if v is None else v
                                 for p, v in zip(pos, vs, strict=True)]))
        if len(pos) == 1:
            return pos[0], ks[0], cs[0], valid
        return np.concatenate(pos), np.concatenate(ks), np.concatenate(cs), valid

    def _groups(self, batches: list[_WBuffered], lo_k: int, hi_k: int) -> list[tuple[int, int]]:
        """Windows ``lo_k..hi_k`` in groups of about :data:`_GROUP_PAIRS` ``(row, window)``
        pairs: a close of many windows then matches group after group, each group's arrays small
        enough to stay cached and to be reused from the heap instead of mapped afresh. One group
        when the close is at most four groups' worth (a group costs a few dozen calls) or a
        batch is not in time order (it would be read whole for every group)."""
        rows = sum(len(b.times) for b in batches)
        per_row = -(-self.size // self.slide)  # windows of a row, at most
        if rows * per_row <= 4 * _GROUP_PAIRS or not all(b.ordered for b in batches):
            return [(lo_k, hi_k)]
        first = max(lo_k, min(int(b.k_open[0]) for b in batches))
        last = min(hi_k, max(b.max_time // self.slide for b in batches))
        if last <= first:
            return [(lo_k, hi_k)]
        width = max(1, _GROUP_PAIRS * (last - first + 1) // (rows * per_row))
        return [(k, min(k + width - 1, last)) for k in range(first, last + 1, width)]

    def _close_group(self, ltab: pa.RecordBatch | None,
                     lexp: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None],
                     rtab: pa.RecordBatch | None,
                     rexp: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]
                     ) -> list[pa.RecordBatch]:
        """The output of the windows whose expanded rows are ``lexp`` and ``rexp`` (see
        :meth:`_expand`; positions among the rows of ``ltab`` and ``rtab``), window by window."""
        lpos, lk, lc, lv = lexp
        rpos, rk, rc, rv = rexp
        out: list[pa.RecordBatch] = []
        li = ri = np.zeros(0, dtype=np.int64)
        wins: list[np.ndarray] = []  # the window of each row of each batch in out
        if len(lpos) and len(rpos):
            lsel, rsel = _by_window(lk, lv), _by_window(rk, rv)
            # match on (window, code), window by window: pairs in emission order
            buf, cap, k = window_pairs(lk if lsel is None else lk[lsel],
                                       lc if lsel is None else lc[lsel],
                                       rk if rsel is None else rk[rsel],
                                       rc if rsel is None else rc[rsel])
            li, ri = buf[:k], buf[cap : cap + k]
            if lsel is not None:
                li = lsel[li]
            if rsel is not None:
                ri = rsel[ri]
            if len(li) and not self.exact:
                assert ltab is not None and rtab is not None
                ok = keys_equal([ltab.column(c).take(pa.array(lpos[li])) for c in self.L.keys],
                                [rtab.column(c).take(pa.array(rpos[ri])) for c in self.R.keys])
                li, ri = li[ok], ri[ok]
            if len(li):
                assert ltab is not None and rtab is not None
                arrays = (ltab.take(pa.array(lpos[li])).columns
                          + rtab.take(pa.array(rpos[ri])).columns)
                out.append(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
                wins.append(lk[li])
        for side, tab, pos, ks, matched_idx in ((self.L, ltab, lpos, lk, li),
                                                (self.R, rtab, rpos, rk, ri)):
            if side.outer and tab is not None and len(pos):
                hit = np.zeros(len(pos), bool)
                hit[matched_idx] = True
                miss = np.flatnonzero(~hit)
                if len(miss):
                    miss = miss[np.lexsort((pos[miss], ks[miss]))]
                    rows = tab.take(pa.array(pos[miss]))
                    n = rows.num_rows
                    nulls = [pa.nulls(n, f.type) for f in self.schema]
                    arrays = (rows.columns + nulls[self._nl:] if side is self.L
                              else nulls[: self._nl] + rows.columns)
                    out.append(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
                    wins.append(ks[miss])
        if len(out) > 1:
            out = _window_major(out, wins)
        return out

    def _close(self, upto: int) -> list[pa.RecordBatch]:
        """Emit windows ``closed+1 .. upto`` and free rows whose last window is among them."""
        if upto == _MIN or (self.closed != _MIN and upto <= self.closed):
            return []
        lo_k = _MIN if self.closed == _MIN else self.closed + 1
        lb, loff = self._involved(self.L, lo_k, upto)
        rb, roff = self._involved(self.R, lo_k, upto)
        out: list[pa.RecordBatch] = []
        if lb or rb:
            ltab = concat_batches([b.batch for b in lb], self.L.schema) if lb else None
            rtab = concat_batches([b.batch for b in rb], self.R.schema) if rb else None
            for g_lo, g_hi in self._groups(lb + rb, lo_k, upto):
                out.extend(self._close_group(ltab, self._expand(lb, loff, g_lo, g_hi),
                                             rtab, self._expand(rb, roff, g_lo, g_hi)))
        self.closed = upto
        # a row's last window is floor(t / slide): free rows with t < (upto + 1) * slide
        thr = MAX_TIME if upto >= MAX_TIME // self.slide else (upto + 1) * self.slide - 1
        self.L.free(thr)
        self.R.free(thr)
        return out

    def snapshot(self) -> Any:
        sides = []
        for s in (self.L, self.R):
            sides.append({"batches": [(b.batch, b.k_open.copy()) for b in s.batches],
                          "wm_delivered": s.wm_delivered, "late_rows": s.late_rows,
                          "null_keys": s.null_keys})
        return {"version": 2, "closed": self.closed, "sides": sides, "late": list(self._late)}

    def restore(self, state: Any) -> None:
        if not isinstance(state, dict) or state.get("version") != 2:
            raise StateError(f"{self.spec.name}: cannot restore state of an unknown format")
        self.closed = state["closed"]
        for s, snap in zip((self.L, self.R), state["sides"], strict=True):
            s.wm_delivered = snap["wm_delivered"]
            s.late_rows, s.null_keys = snap["late_rows"], snap["null_keys"]
            for batch, k_open in snap["batches"]:
                batch = conform(batch, s.schema, s.stream, self.spec.name)
                t = time_values(batch, s.time, s.stream)
                codes, valid = s.codec.encode([batch.column(c) for c in s.keys])
                buf = _WBuffered(batch, t, codes, valid, np.array(k_open, dtype=np.int64))
                s.batches.append(buf)
                s.n_rows += len(t)
                s.nbytes += buf.nbytes
        self._late = list(state["late"])
