"""Join output batches assembled by one kernel and handed to Arrow through its C data interface.

A join's output batch is the arriving batch's columns (whole, or the rows of its pairs) beside
rows gathered from retained batches. Made of Arrow objects, it costs an ``Array`` and its
``Buffer`` objects per column and ``RecordBatch.from_arrays``, per-object work that for a few
hundred rows, when cold, is most of what a selective probe costs (docs/lab/time-joins.md,
"Output batches through Arrow's C data interface"). Here :func:`assemble` writes every
gathered column into one ``malloc`` allocation together with the ``ArrowArray`` structs that
describe the batch, and Arrow imports the whole batch in one call, taking ownership. The arriving
batch is exported (``RecordBatch._export_to_c``) into the same allocation, and its columns that
the output holds as they are are the exported children, referenced, not copied. The release
callback (:data:`RELEASE`, compiled C, no Python) releases that export and frees the allocation;
Arrow calls it when the last array of the batch goes away, in whatever thread.

Layout of one allocation, each part 8-byte aligned::

    exported arriving batch   ArrowArray (80 bytes; zeroed when there is none)
    the output                ArrowArray, its buffer list (1 pointer), children (n pointers)
    each gathered column      ArrowArray, its buffer list (3 pointers)
    each gathered column      validity bitmap (when a source has nulls), values or offsets,
                              characters

A gathered column reads *source rows* of six ``int64``::

    (code, rows, validity address or 0, validity bit offset, values address, characters address)

``code`` is ``w`` > 0 for values of ``w`` bytes (the values address is the column's first value),
``-w`` for variable-width values with ``w``-byte offsets (the address of the column's first
offset, and of the characters), 0 for a column gathered some other way. The *plan* has one row
per output column, ``(source, column, code)``: :data:`PASS` (the arriving batch's column as it
is), :data:`MINE` (its rows ``pi``, pair by pair), :data:`THEIRS` (the located retained rows) or
:data:`TIMES` (the given ``int64`` array).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import cfunc, njit, types

from splice.kernels.raw_memory import call_pointer, load, mem_alloc, mem_copy, mem_free, store

__all__ = ["PASS", "MINE", "THEIRS", "TIMES", "RELEASE", "BatchAssembler", "assemble"]

PASS, MINE, THEIRS, TIMES = 0, 1, 2, 3

# ArrowArray: byte offsets of its fields, and its size
_LENGTH, _NULLS, _OFFSET, _NBUF, _NCHILD, _BUFFERS, _CHILDREN, _DICT, _RELEASE, _PRIVATE = (
    0, 8, 16, 24, 32, 40, 48, 56, 64, 72)
_ARRAY = 80
_INT32_MAX = 2**31 - 1


@cfunc(types.void(types.int64), cache=True)
def _release(array: int) -> None:  # pragma: no cover - called by Arrow, from C
    """Release callback of every struct :func:`assemble` makes: the output's (``private_data``:
    the allocation) releases the exported arriving batch and frees the allocation; a child's
    (``private_data`` 0) only marks itself released."""
    block = load(array + _PRIVATE, 8)
    store(array + _RELEASE, 0, 8)
    if block != 0:
        inner = load(block + _RELEASE, 8)
        if inner != 0:
            call_pointer(inner, block)
        mem_free(block)


#: Address of the release callback, for :func:`assemble`.
RELEASE = int(_release.address or 0)


@njit(cache=True, nogil=True, inline="always")
def _up8(n: int) -> int:
    return (n + 7) & ~7


@njit(cache=True, nogil=True, inline="always")
def _struct(at: int, length: int, nulls: int, nbuf: int, nchild: int, buffers: int,
            children: int, release: int, private: int) -> None:
    store(at + _LENGTH, length, 8)
    store(at + _NULLS, nulls, 8)
    store(at + _OFFSET, 0, 8)
    store(at + _NBUF, nbuf, 8)
    store(at + _NCHILD, nchild, 8)
    store(at + _BUFFERS, buffers, 8)
    store(at + _CHILDREN, children, 8)
    store(at + _DICT, 0, 8)
    store(at + _RELEASE, release, 8)
    store(at + _PRIVATE, private, 8)


@njit(cache=True, nogil=True, inline="always")
def _offset_at(address: int, width: int, i: int) -> int:
    if width == 4:
        v = load(address + 4 * i, 4)
        return v - (1 << 32) if v >= 1 << 31 else v
    return load(address + 8 * i, 8)


@njit(cache=True, nogil=True)
def _gather(src: np.ndarray, which: np.ndarray, rows: np.ndarray, code: int, bits_at: int,
            values_at: int, chars_at: int) -> int:
    """Write row ``rows[j]`` of source row ``src[which[j]]`` as output row ``j``: the validity
    bitmap at ``bits_at`` (0: none), values or offsets at ``values_at``, characters at
    ``chars_at``. Returns the null count."""
    m = len(rows)
    nulls = 0
    if bits_at != 0:
        for b in range((m + 7) >> 3):
            store(bits_at + b, 0, 1)
        byte = 0
        for j in range(m):
            s = src[which[j]]
            valid = True
            if s[2] != 0:
                p = rows[j] + s[3]
                valid = (load(s[2] + (p >> 3), 1) >> (p & 7)) & 1 == 1
            if valid:
                byte |= 1 << (j & 7)
            else:
                nulls += 1
            if (j & 7) == 7 or j == m - 1:
                store(bits_at + (j >> 3), byte, 1)
                byte = 0
    if code == 8:
        for j in range(m):
            store(values_at + 8 * j, load(src[which[j], 4] + 8 * rows[j], 8), 8)
    elif code == 4:
        for j in range(m):
            store(values_at + 4 * j, load(src[which[j], 4] + 4 * rows[j], 4), 4)
    elif code == 2:
        for j in range(m):
            store(values_at + 2 * j, load(src[which[j], 4] + 2 * rows[j], 2), 2)
    elif code == 1:
        for j in range(m):
            store(values_at + j, load(src[which[j], 4] + rows[j], 1), 1)
    else:
        w = -code
        pos = 0
        for j in range(m):
            s = src[which[j]]
            a = _offset_at(s[4], w, rows[j])
            n = _offset_at(s[4], w, rows[j] + 1) - a
            if w == 4:
                store(values_at + 4 * j, pos, 4)
            else:
                store(values_at + 8 * j, pos, 8)
            mem_copy(chars_at + pos, s[5] + a, n)
            pos += n
        if w == 4:
            store(values_at + 4 * m, pos, 4)
        else:
            store(values_at + 8 * m, pos, 8)
    return nulls


@njit(cache=True, nogil=True)
def assemble(export: int, plan: np.ndarray, tabs: np.ndarray, rows: np.ndarray,
             inv: np.ndarray, cuts: np.ndarray, pi: np.ndarray, times: np.ndarray,
             release: int) -> int:
    """The output batch of ``len(pi)`` pairs as an ``ArrowArray`` address (of a struct array,
    one child per row of ``plan``), or 0 when a column cannot be gathered here (a source's code
    differs from the plan's, 32-bit offsets would overflow) or memory ran out.

    ``export``: address of the arriving batch's exported ``ArrowArray`` (0: none); it is moved
    into the allocation (or released, on 0). ``tabs[g, c]``: source row of column ``c`` of
    retained batch ``g``; pair ``j`` reads row ``rows[q]`` of batch ``g`` with
    ``q = inv[j]`` (``j`` when ``inv`` is empty) and ``cuts[g] <= q < cuts[g + 1]`` (``cuts``
    empty: one batch). ``pi[j]``: the pair's arriving row. ``times``: the :data:`TIMES` column.
    """
    m = len(pi)
    ncol = plan.shape[0]
    # the arriving batch's columns as source rows
    nmine = load(export + _NCHILD, 8) if export != 0 else 0
    mine = np.zeros((nmine, 6), dtype=np.int64)
    kids = load(export + _CHILDREN, 8) if export != 0 else 0
    for k in range(nmine):
        ch = load(kids + 8 * k, 8)
        nb = load(ch + _NBUF, 8)
        bufs = load(ch + _BUFFERS, 8)
        mine[k, 1] = load(ch + _LENGTH, 8)
        if nb > 0 and load(ch + _NULLS, 8) != 0:
            mine[k, 2] = load(bufs, 8)
        mine[k, 3] = load(ch + _OFFSET, 8)
        if nb > 1:
            mine[k, 4] = load(bufs + 8, 8)
        if nb > 2:
            mine[k, 5] = load(bufs + 16, 8)
    # pair j of a THEIRS column: retained batch t_which[j], row t_rows[j]
    t_which = np.zeros(m, dtype=np.int64)
    t_rows = rows
    if len(inv) or len(cuts) > 2:
        group = np.zeros(len(rows), dtype=np.int64)
        for g in range(len(cuts) - 1):
            group[cuts[g] : cuts[g + 1]] = g
        t_rows = np.empty(m, dtype=np.int64)
        for j in range(m):
            q = inv[j] if len(inv) else j
            t_which[j] = group[q]
            t_rows[j] = rows[q]
    m_which = np.zeros(m, dtype=np.int64)

    # sizes: every part, then one allocation
    ngather = 0
    for c in range(ncol):
        if plan[c, 0] != PASS:
            ngather += 1
    size = _ARRAY + _ARRAY + 8 + 8 * ncol + ngather * (_ARRAY + 24)
    has_bits = np.zeros(ncol, dtype=np.bool_)
    chars = np.zeros(ncol, dtype=np.int64)
    ok = True
    for c in range(ncol):
        src, col, code = plan[c, 0], plan[c, 1], plan[c, 2]
        if src == PASS:
            continue
        if src == TIMES:
            size += 8 * m
            continue
        if code == 0:
            ok = False
            break
        if src == MINE:
            if mine[col, 0] == 0:  # first use: from the array's offset to its first value
                mine[col, 0] = code
                mine[col, 4] += mine[col, 3] * (code if code > 0 else -code)
            has_bits[c] = mine[col, 2] != 0
            table = mine[col : col + 1]
            which, rr = m_which, pi
        else:
            for g in range(tabs.shape[0]):
                if tabs[g, col, 0] != code:
                    ok = False
                if tabs[g, col, 2] != 0:
                    has_bits[c] = True
            table = tabs[:, col]
            which, rr = t_which, t_rows
        if not ok:
            break
        if has_bits[c]:
            size += _up8((m + 7) >> 3)
        if code > 0:
            size += _up8(m * code)
        else:
            w = -code
            total = 0
            for j in range(m):
                s = table[which[j]]
                total += _offset_at(s[4], w, rr[j] + 1) - _offset_at(s[4], w, rr[j])
            if w == 4 and total > _INT32_MAX:
                ok = False
                break
            chars[c] = total
            size += _up8((m + 1) * w) + _up8(total)
    block = mem_alloc(size) if ok else 0
    if block == 0:
        if export != 0 and load(export + _RELEASE, 8) != 0:
            call_pointer(load(export + _RELEASE, 8), export)
        return 0

    # the exported batch, moved in (the spec's move: copy the struct, mark the source released)
    if export != 0:
        mem_copy(block, export, _ARRAY)
        store(export + _RELEASE, 0, 8)
    else:
        for i in range(_ARRAY // 8):
            store(block + 8 * i, 0, 8)
    out = block + _ARRAY
    out_buffers = out + _ARRAY
    children = out_buffers + 8
    _struct(out, m, 0, 1, ncol, out_buffers, children, release, block)
    store(out_buffers, 0, 8)
    at = children + 8 * ncol  # next column struct
    data = at + ngather * (_ARRAY + 24)  # next data part
    for c in range(ncol):
        src, col, code = plan[c, 0], plan[c, 1], plan[c, 2]
        if src == PASS:
            store(children + 8 * c, load(kids + 8 * col, 8), 8)
            continue
        buffers = at + _ARRAY
        store(children + 8 * c, at, 8)
        if src == TIMES:
            _struct(at, m, 0, 2, 0, buffers, 0, release, 0)
            store(buffers, 0, 8)
            store(buffers + 8, data, 8)
            mem_copy(data, times.ctypes.data, 8 * m)
            data += 8 * m
            at = buffers + 24
            continue
        bits_at = 0
        if has_bits[c]:
            bits_at = data
            data += _up8((m + 7) >> 3)
        values_at = data
        chars_at = 0
        if code > 0:
            data += _up8(m * code)
        else:
            chars_at = values_at + _up8((m + 1) * -code)
            data = chars_at + _up8(chars[c])
        if src == MINE:
            nulls = _gather(mine[col : col + 1], m_which, pi, code, bits_at, values_at, chars_at)
        else:
            nulls = _gather(tabs[:, col], t_which, t_rows, code, bits_at, values_at, chars_at)
        _struct(at, m, nulls, 2 if code > 0 else 3, 0, buffers, 0, release, 0)
        store(buffers, bits_at, 8)
        store(buffers + 8, values_at, 8)
        store(buffers + 16, chars_at, 8)
        at = buffers + 24
    return out


class BatchAssembler:
    """Output batches of one schema through :func:`assemble`; one per operator (it owns the
    struct the arriving batch is exported into, used within one call at a time)."""

    def __init__(self, schema: pa.Schema):
        self.schema = schema
        self._export = np.zeros(_ARRAY // 8, dtype=np.int64)
        self._export_at = int(self._export.ctypes.data)

    def build(self, batch: pa.RecordBatch, plan: np.ndarray, tabs: np.ndarray,
              rows: np.ndarray, inv: np.ndarray, cuts: np.ndarray, pi: np.ndarray,
              times: np.ndarray) -> pa.RecordBatch | None:
        """The output batch of the arriving ``batch``'s pairs (see :func:`assemble` for the
        other arguments), or ``None`` when it has to be made another way."""
        batch._export_to_c(self._export_at)
        address = assemble(self._export_at, plan, tabs, rows, inv, cuts, pi, times, RELEASE)
        if address == 0:
            return None
        return pa.RecordBatch._import_from_c(address, self.schema)
