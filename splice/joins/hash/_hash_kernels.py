"""Numba kernels of the hash window joins: the fast chained window index and HB-SJ.

Every kernel is ``@njit(cache=True, nogil=True)`` and written so that its ``py_func`` (the plain
Python twin) computes the same thing on NumPy arrays; the tests run both. Integer arithmetic is
done in ``int64`` and masked, which wraps identically in numba and is exact in Python.

Kernels that do not allocate are compiled without numba's reference counting (``_nrt=False``):
with it, every call of a helper taking many arrays increments and decrements each of them
atomically, which cost more than the hash probes themselves. Scratch buffers come from the
caller.

Two index layouts, both over one stream's sliding window, with ``K`` indexed attributes sharing
one ordered window (the Q3 orders stage indexes ``o_custkey`` and ``o_orderkey`` together):

**Fast index** (``fx_*``): a ring of ``cap`` window positions; per attribute a bucket array of
FIFO chains threaded through the ring (``head``/``tail`` per bucket, ``nxt`` per position).
A chain lists its tuples in arrival order, so the window's oldest tuple is always at the head of
its chain: expiry and insert are O(1), a probe walks one chain and yields matches oldest first.

**HB-SJ** (``hb_*``, Diba section 5.2.2): per attribute four storage tables of ``ht`` slots,
tables 0 and 1 addressed by Murmur3 with seed ``SEED1``, tables 2 and 3 with ``SEED2``; a tuple
goes to the first table whose addressed slot is free, else to the overflow buffer (a FIFO ring,
searched by nested loop). The ordered sliding window records, per position, where the tuple was
stored (``wloc``: table 0..3, 4 = overflow, 5 = not indexed because its key is null) and at which
slot (``widx``). Per attribute statistics (``stats``): inserts into tables 0..3, into overflow,
overflow peak size, overflow comparisons, probes.

Arrays that travel together reach the kernels as named tuples (numba types them field by field,
reads their fields as cheaply as separate arguments and caches kernels over them): one index's
arrays (:class:`FastIndexArrays`, :class:`HBSJIndexArrays`), the arrival sequence
(:class:`HashArrivals`), the ring positions to expire and fill (:class:`RingPositions`), scratch
buffers, and the time join's settings and watermarks. Each kernel reads the fields into locals
before its loop.
"""

from __future__ import annotations

from typing import Any, Generic, NamedTuple, TypeVar

import numpy as np
from numba import njit

from splice.kernels.hashing import GOLDEN_I64, murmur3_32
from splice.kernels.numba_internals import NO_NRT

__all__ = [
    "SEED1",
    "SEED2",
    "FastIndexArrays",
    "HBSJIndexArrays",
    "HashArrivals",
    "RingPositions",
    "InsertBuffer",
    "ProbeBuffers",
    "TimeJoinParams",
    "TimeProgress",
    "TimeRings",
    "HBSJTimeWindows",
    "Q3Stages",
    "Q3KeyColumns",
    "OrderRevenue",
    "fx_bucket",
    "drain",
    "fx_update",
    "fx_probe",
    "fx_join_sequence",
    "fx_time_ring_sequence",
    "fx_ring_relink",
    "hb_time_sequence",
    "NO_TIME",
    "ring_positions",
    "first_by_position",
    "hb_update",
    "hb_probe",
    "hb_join_sequence",
    "ST_OVF_INS",
    "ST_OVF_PEAK",
    "ST_OVF_CMP",
    "ST_PROBES",
    "N_STATS",
]

#: ``njit(cache=True, nogil=True)`` without reference counting, for kernels that never allocate.
_NO_NRT: dict[str, Any] = {"cache": True, "nogil": True, **NO_NRT}
_no_nrt: Any = njit(**_NO_NRT)

SEED1 = 0
SEED2 = 0x9747B28C
#: The fast index's multiplier: Fibonacci hashing's, as a signed int64.
FX_MULT = GOLDEN_I64

ST_OVF_INS = 4
ST_OVF_PEAK = 5
ST_OVF_CMP = 6
ST_PROBES = 7
N_STATS = 8

LOC_OVF = 4
LOC_NONE = 5


# --------------------------------------------------------------------------------------------
# what the kernels take
# --------------------------------------------------------------------------------------------


class FastIndexArrays(NamedTuple):
    """One stream's fast index: a ring of ``cap`` window positions and, per indexed attribute,
    FIFO bucket chains threaded through it (see the module doc)."""

    #: (cap,) int64: the sequence number stored at each position, -1 when empty
    ring: np.ndarray
    #: (n_attrs, cap) int64: each position's key code per attribute
    keys: np.ndarray
    #: (n_attrs, cap) bool: whether that key is not null (a null key is on no chain)
    valid: np.ndarray
    #: (n_attrs, cap) int64: the next (younger) position on the chain, -1 at its tail
    nxt: np.ndarray
    #: (n_attrs, buckets) int64: each chain's oldest position, -1 when empty
    head: np.ndarray
    #: (n_attrs, buckets) int64: each chain's youngest position, -1 when empty
    tail: np.ndarray
    #: 64 - log2(buckets): Fibonacci hashing keeps the top bits (:func:`fx_bucket`)
    shift: int


class HBSJIndexArrays(NamedTuple):
    """One stream's HB-SJ index (Diba section 5.2.2): the ordered sliding window of ``cap``
    positions, per attribute four storage tables of ``ht`` slots, the overflow buffer and the
    statistics (see the module doc)."""

    #: (cap,) int64: the sequence number at each window position, -1 when empty
    wseq: np.ndarray
    #: (n_attrs, cap) int8: where that tuple is stored: table 0..3, 4 = overflow, 5 = nowhere
    wloc: np.ndarray
    #: (n_attrs, cap) int64: at which table slot or overflow slot
    widx: np.ndarray
    #: (n_attrs, 4, ht) int64: the tables' keys
    tkey: np.ndarray
    #: (n_attrs, 4, ht) int64: the tables' sequence numbers, -1 for a free slot
    tseq: np.ndarray
    #: (n_attrs, cap) int64: the overflow buffer's keys (a FIFO ring)
    okey: np.ndarray
    #: (n_attrs, cap) int64: the overflow buffer's sequence numbers
    oseq: np.ndarray
    #: (n_attrs, 2) int64: the overflow ring's head slot and tuple count
    oinfo: np.ndarray
    #: (n_attrs, N_STATS) int64: the statistics counters (``ST_*``)
    stats: np.ndarray


class HashArrivals(NamedTuple):
    """A mixed arrival sequence of two streams, in arrival order."""

    #: int8: the stream of each tuple (0 = left, 1 = right)
    sides: np.ndarray
    #: int64: each tuple's sequence number on its own stream
    seqs: np.ndarray
    #: int64: each tuple's key code
    keys: np.ndarray
    #: bool: whether the key is not null
    valid: np.ndarray


class RingPositions(NamedTuple):
    """Per arriving tuple, the ring position of a count window that expires before it is stored
    and the one it is stored at; -1 where this PU does nothing (:func:`ring_positions`)."""

    expire: np.ndarray
    insert: np.ndarray


class InsertBuffer(NamedTuple):
    """One arriving tuple's keys and their validity shaped ``(n_attrs, 1)``, the column layout
    the inserts take: the sequence kernels store a single tuple through them."""

    keys: np.ndarray
    valid: np.ndarray


class ProbeBuffers(NamedTuple):
    """Scratch of an HB-SJ probe, each at least the window's positions + 4 long."""

    #: one probe's matches, oldest first
    matches: np.ndarray
    #: room to merge the table matches with the overflow matches
    merge: np.ndarray


class TimeJoinParams(NamedTuple):
    """The settings of a two-way time-window join over one PU's share."""

    #: the window length: tuples match when their times are at most this far apart
    length: int
    #: each stream arrives in nondecreasing time (its watermark trails its largest time by one)
    time_sorted: bool
    #: this PU, and the number of PUs (SplitJoin: the PU stores the tuples ``s % parts == pu``)
    pu: int
    parts: int


class TimeProgress(NamedTuple):
    """Per stream (index 0 left, 1 right) what the time joins know of its event times."""

    #: int64: the watermark: no later tuple of that stream has a time ``<=`` it
    watermark: np.ndarray
    #: bool: whether its tuples have all come in nondecreasing time so far
    in_order: np.ndarray
    #: int64: its largest time so far
    newest: np.ndarray


class TimeRings(NamedTuple):
    """The fast time join's rings: per stream (first index) ``C`` slots, a power of two, with
    chains per bucket linking tuples newest first by sequence number
    (:func:`fx_time_ring_sequence`)."""

    #: (2, C) int64: the sequence number in each slot, -1 when empty
    seq: np.ndarray
    #: (2, C) int64: its key code
    key: np.ndarray
    #: (2, C) bool: whether the key is not null
    valid: np.ndarray
    #: (2, C) int64: its event time
    time: np.ndarray
    #: (2, C) int64: the sequence number of the next older tuple on its chain, -1 at the end
    nxt: np.ndarray
    #: (2, buckets) int64: the sequence number of each chain's newest tuple, -1 when empty
    head: np.ndarray
    #: 64 - log2(buckets) (:func:`fx_bucket`)
    shift: int


class HBSJTimeWindows(NamedTuple):
    """What HB-SJ's time join keeps besides the two indexes (:func:`hb_time_sequence`)."""

    #: (2, C) int64: the event time at each window position, per stream
    time: np.ndarray
    #: (2,) int64: per stream, the position count of its oldest stored tuple
    oldest: np.ndarray
    #: (2,) int64: per stream, the watermark as the kernel sees it
    watermark: np.ndarray


def ring_positions(seqs: np.ndarray, window: int | None, cap: int, pu: int, parts: int,
                   expire: bool = True) -> RingPositions:
    """Vectorized ring positions of a count window (no division inside the kernels).

    Tuple ``s`` is stored by PU ``s % parts`` at position ``(s // parts) % cap``; when it
    arrives, tuple ``s - window`` expires from its PU. Returns (expire position, insert
    position) per tuple, -1 where this PU does nothing.
    """
    seqs = np.asarray(seqs, np.int64)
    if parts == 1:
        ins = seqs % cap
    else:
        ins = np.where(seqs % parts == pu, (seqs // parts) % cap, -1)
    if window is None or not expire:
        return RingPositions(np.full(len(seqs), -1, np.int64), ins)
    e = seqs - window
    if parts == 1:
        exp = np.where(e >= 0, e % cap, -1)
    else:
        exp = np.where((e >= 0) & (e % parts == pu), (e // parts) % cap, -1)
    return RingPositions(exp, ins)


# --------------------------------------------------------------------------------------------
# fast index
# --------------------------------------------------------------------------------------------


@_no_nrt
def fx_bucket(key: int, shift: int) -> int:
    """Bucket of ``key`` among ``2 ** (64 - shift)`` buckets: Fibonacci hashing, the top bits of
    ``key * FX_MULT`` modulo 2**64 (consecutive keys spread evenly)."""
    return ((key * FX_MULT) >> shift) & ((1 << (64 - shift)) - 1)


@_no_nrt
def _fx_expire(pos, index):  # type: ignore[no-untyped-def]
    """Free ring position ``pos`` of ``index`` (:class:`FastIndexArrays`): its tuple, the oldest
    of its chains, leaves their heads."""
    ring_seq = index.ring
    keys = index.keys
    valid = index.valid
    nxt = index.nxt
    head = index.head
    tail = index.tail
    shift = index.shift
    for a in range(keys.shape[0]):
        if valid[a, pos]:
            b = fx_bucket(keys[a, pos], shift)
            if head[a, b] != pos:
                raise RuntimeError("fast index: expired tuple is not the oldest of its chain")
            head[a, b] = nxt[a, pos]
            if head[a, b] == -1:
                tail[a, b] = -1
    ring_seq[pos] = -1


@njit(inline="always", **_NO_NRT)
def chain_append(a, b, pos, nxt, head, tail):  # type: ignore[no-untyped-def]
    """Append ring position ``pos`` to the chain of bucket ``b`` on attribute ``a`` (chains run
    oldest first: ``head`` to ``tail`` through ``nxt``)."""
    nxt[a, pos] = -1
    t = tail[a, b]
    if t == -1:
        head[a, b] = pos
    else:
        nxt[a, t] = pos
    tail[a, b] = pos


@_no_nrt
def _fx_insert(pos, seq, kcol, vcol, j, index):  # type: ignore[no-untyped-def]
    """Store tuple ``seq`` (keys ``kcol[:, j]``, validity ``vcol[:, j]``) at ring position
    ``pos`` of ``index`` (:class:`FastIndexArrays`), at the tail of its chains."""
    ring_seq = index.ring
    keys = index.keys
    valid = index.valid
    nxt = index.nxt
    head = index.head
    tail = index.tail
    shift = index.shift
    ring_seq[pos] = seq
    for a in range(keys.shape[0]):
        ok = vcol[a, j]
        valid[a, pos] = ok
        nxt[a, pos] = -1
        if ok:
            k = kcol[a, j]
            keys[a, pos] = k
            chain_append(a, fx_bucket(k, shift), pos, nxt, head, tail)


@_no_nrt
def fx_update(index, positions, seqs, new_keys, new_valid):  # type: ignore[no-untyped-def]
    """For each new tuple j: expire the ring position ``positions.expire[j]`` of ``index``
    (:class:`FastIndexArrays`; when >= 0), then store tuple j (``seqs[j]``, keys
    ``new_keys[:, j]``) at ``positions.insert[j]`` (when >= 0)."""
    expire_pos = positions.expire
    insert_pos = positions.insert
    for j in range(seqs.shape[0]):
        e = expire_pos[j]
        if e >= 0:
            _fx_expire(e, index)
        p = insert_pos[j]
        if p >= 0:
            _fx_insert(p, seqs[j], new_keys, new_valid, j, index)


def drain(kernel, n_items: int, bound: int, *args):  # type: ignore[no-untyped-def]
    """Run a resumable output kernel to the end: ``kernel(*args, start, out_i, out_s)`` fills
    the buffers from item ``start`` on and returns ``(written, next start)``; it stops before an
    item that might not fit (at most ``bound`` outputs per item). Buffers are never grown inside
    a kernel (reassigning arrays in a numba loop costs reference counting on every access)."""
    size = max(bound + 16, 2 * n_items + 16)
    parts_i, parts_s = [], []
    start = 0
    while True:
        out_i = np.empty(size, np.int64)
        out_s = np.empty(size, np.int64)
        n, start = kernel(*args, start, out_i, out_s)
        parts_i.append(out_i[:n])
        parts_s.append(out_s[:n])
        if start >= n_items:
            break
    if len(parts_i) == 1:
        return parts_i[0], parts_s[0]
    return np.concatenate(parts_i), np.concatenate(parts_s)


@_no_nrt
def fx_probe(index, attr, pkeys, pvalid, start, out_i, out_s):  # type: ignore[no-untyped-def]
    """(probe index, stored seq) with equal key on attribute ``attr`` of ``index``
    (:class:`FastIndexArrays`), per probe oldest first, from probe ``start`` on while the
    buffers have room (resumable: see :func:`drain`)."""
    ring_seq = index.ring
    keys = index.keys
    nxt = index.nxt
    head = index.head
    shift = index.shift
    bound = ring_seq.shape[0]
    n = 0
    for i in range(start, pkeys.shape[0]):
        if n + bound > out_i.shape[0]:
            return n, i
        if not pvalid[i]:
            continue
        k = pkeys[i]
        p = head[attr, fx_bucket(k, shift)]
        while p != -1:
            if keys[attr, p] == k:
                out_i[n] = i
                out_s[n] = ring_seq[p]
                n += 1
            p = nxt[attr, p]
    return n, pkeys.shape[0]


@_no_nrt
def fx_join_sequence(arrivals, positions, left, right, insert_buf, start, out_i, out_s):  # type: ignore[no-untyped-def]
    """Two-way count-window join over a mixed arrival sequence.

    Tuple i of side ``arrivals.sides[i]`` (0 = left, 1 = right) with per-side sequence number
    ``arrivals.seqs[i]`` probes the other side's window, then the ring position
    ``positions.expire[i]`` of its own side expires (the tuple ``w`` arrivals older, when this PU
    stores it), then tuple i is stored at ``positions.insert[i]`` (when this PU owns it;
    positions are computed outside, vectorized: see :func:`ring_positions`). ``left`` and
    ``right`` are the windows' :class:`FastIndexArrays` (one bucket count), ``insert_buf`` an
    :class:`InsertBuffer` of one attribute. Writes (arrival index, matched seq on the other
    side), in arrival order, oldest match first; resumable from ``start`` (see :func:`drain`).
    """
    sides = arrivals.sides
    seqs = arrivals.seqs
    pkeys = arrivals.keys
    pvalid = arrivals.valid
    expire_pos = positions.expire
    insert_pos = positions.insert
    l_ring = left.ring
    l_keys = left.keys
    l_nxt = left.nxt
    l_head = left.head
    r_ring = right.ring
    r_keys = right.keys
    r_nxt = right.nxt
    r_head = right.head
    shift = left.shift
    kbuf = insert_buf.keys
    vbuf = insert_buf.valid
    bound = max(l_ring.shape[0], r_ring.shape[0])
    n = 0
    for i in range(start, sides.shape[0]):
        if n + bound > out_i.shape[0]:
            return n, i
        is_left = sides[i] == 0
        k = pkeys[i]
        ok = pvalid[i]
        if ok:
            if is_left:
                p = r_head[0, fx_bucket(k, shift)]
                while p != -1:
                    if r_keys[0, p] == k:
                        out_i[n] = i
                        out_s[n] = r_ring[p]
                        n += 1
                    p = r_nxt[0, p]
            else:
                p = l_head[0, fx_bucket(k, shift)]
                while p != -1:
                    if l_keys[0, p] == k:
                        out_i[n] = i
                        out_s[n] = l_ring[p]
                        n += 1
                    p = l_nxt[0, p]
        s = seqs[i]
        e = expire_pos[i]
        p = insert_pos[i]
        kbuf[0, 0] = k
        vbuf[0, 0] = ok
        if is_left:
            if e >= 0:
                _fx_expire(e, left)
            if p >= 0:
                _fx_insert(p, s, kbuf, vbuf, 0, left)
        else:
            if e >= 0:
                _fx_expire(e, right)
            if p >= 0:
                _fx_insert(p, s, kbuf, vbuf, 0, right)
    return n, sides.shape[0]


# --------------------------------------------------------------------------------------------
# HB-SJ
# --------------------------------------------------------------------------------------------


@_no_nrt
def _hb_addr(h: int, ht: int) -> int:
    """Slot of 32-bit hash ``h`` in a table of ``ht`` slots (a mask when ``ht`` is a power of 2)."""
    if ht & (ht - 1) == 0:
        return h & (ht - 1)
    return h % ht


@_no_nrt
def _hb_expire(pos, index):  # type: ignore[no-untyped-def]
    """Free window position ``pos`` of ``index`` (:class:`HBSJIndexArrays`): its tuple leaves
    its table slot or the head of the overflow buffer."""
    wseq = index.wseq
    wloc = index.wloc
    widx = index.widx
    tseq = index.tseq
    oinfo = index.oinfo
    cap = wseq.shape[0]
    for a in range(wloc.shape[0]):
        loc = wloc[a, pos]
        if loc < LOC_OVF:
            tseq[a, loc, widx[a, pos]] = -1
        elif loc == LOC_OVF:
            # The overflow buffer is a FIFO: the window's oldest overflowed tuple is its head.
            if oinfo[a, 0] != widx[a, pos]:
                raise RuntimeError("HB-SJ: expired tuple is not the oldest of the overflow buffer")
            oinfo[a, 0] = (oinfo[a, 0] + 1) % cap
            oinfo[a, 1] -= 1
        wloc[a, pos] = LOC_NONE
    wseq[pos] = -1


@_no_nrt
def _hb_insert(pos, seq, kcol, vcol, j, index):  # type: ignore[no-untyped-def]
    """Store tuple ``seq`` (keys ``kcol[:, j]``, validity ``vcol[:, j]``) at window position
    ``pos`` of ``index`` (:class:`HBSJIndexArrays`): per attribute in the first free addressed
    table slot, else in the overflow buffer."""
    wseq = index.wseq
    wloc = index.wloc
    widx = index.widx
    tkey = index.tkey
    tseq = index.tseq
    okey = index.okey
    oseq = index.oseq
    oinfo = index.oinfo
    stats = index.stats
    cap = wseq.shape[0]
    ht = tkey.shape[2]
    wseq[pos] = seq
    for a in range(wloc.shape[0]):
        if not vcol[a, j]:
            wloc[a, pos] = LOC_NONE
            continue
        k = kcol[a, j]
        h1 = _hb_addr(murmur3_32(k, SEED1), ht)
        h2 = _hb_addr(murmur3_32(k, SEED2), ht)
        placed = False
        for t in range(4):
            idx = h1 if t < 2 else h2
            if tseq[a, t, idx] == -1:
                tseq[a, t, idx] = seq
                tkey[a, t, idx] = k
                wloc[a, pos] = t
                widx[a, pos] = idx
                stats[a, t] += 1
                placed = True
                break
        if not placed:
            slot = (oinfo[a, 0] + oinfo[a, 1]) % cap
            okey[a, slot] = k
            oseq[a, slot] = seq
            oinfo[a, 1] += 1
            wloc[a, pos] = LOC_OVF
            widx[a, pos] = slot
            stats[a, ST_OVF_INS] += 1
            if oinfo[a, 1] > stats[a, ST_OVF_PEAK]:
                stats[a, ST_OVF_PEAK] = oinfo[a, 1]


@_no_nrt
def hb_update(index, positions, seqs, new_keys, new_valid):  # type: ignore[no-untyped-def]
    """HB-SJ expire-oldest-before-insert for each new tuple on ``index``
    (:class:`HBSJIndexArrays`; see :func:`fx_update`)."""
    expire_pos = positions.expire
    insert_pos = positions.insert
    for j in range(seqs.shape[0]):
        e = expire_pos[j]
        if e >= 0:
            _hb_expire(e, index)
        p = insert_pos[j]
        if p >= 0:
            _hb_insert(p, seqs[j], new_keys, new_valid, j, index)


@_no_nrt
def _hb_probe_one(k, a, index, scratch):  # type: ignore[no-untyped-def]
    """Matches of ``k`` on attribute ``a`` of ``index`` (:class:`HBSJIndexArrays`) into
    ``scratch.matches`` (:class:`ProbeBuffers`) oldest first; returns their number."""
    tkey = index.tkey
    tseq = index.tseq
    okey = index.okey
    oseq = index.oseq
    oinfo = index.oinfo
    stats = index.stats
    buf = scratch.matches
    tmp = scratch.merge
    ht = tkey.shape[2]
    cap = okey.shape[1]
    h1 = _hb_addr(murmur3_32(k, SEED1), ht)
    h2 = _hb_addr(murmur3_32(k, SEED2), ht)
    stats[a, ST_PROBES] += 1
    n = 0
    # The four tables, examined "in parallel": at most four matches, sorted by insertion sort.
    for t in range(4):
        idx = h1 if t < 2 else h2
        s = tseq[a, t, idx]
        if s != -1 and tkey[a, t, idx] == k:
            j = n
            while j > 0 and buf[j - 1] > s:
                buf[j] = buf[j - 1]
                j -= 1
            buf[j] = s
            n += 1
    ntab = n
    # The overflow buffer, by nested loop, in arrival order.
    head = oinfo[a, 0]
    cnt = oinfo[a, 1]
    stats[a, ST_OVF_CMP] += cnt
    # two contiguous runs of the ring: head .. cap-1, then 0 .. (wrapped part)
    end1 = min(cap, head + cnt)
    for slot in range(head, end1):
        if okey[a, slot] == k:
            buf[n] = oseq[a, slot]
            n += 1
    for slot in range(0, head + cnt - end1):
        if okey[a, slot] == k:
            buf[n] = oseq[a, slot]
            n += 1
    if ntab and n > ntab:
        # merge the (sorted) table matches with the (sorted) overflow matches
        for z in range(n):
            tmp[z] = buf[z]
        i1 = 0
        i2 = ntab
        o = 0
        while i1 < ntab or i2 < n:
            if i2 >= n or (i1 < ntab and tmp[i1] < tmp[i2]):
                buf[o] = tmp[i1]
                i1 += 1
            else:
                buf[o] = tmp[i2]
                i2 += 1
            o += 1
    return n


@_no_nrt
def hb_probe(index, attr, pkeys, pvalid, scratch, start, out_i, out_s):  # type: ignore[no-untyped-def]
    """(probe index, stored seq) with equal key on attribute ``attr`` of ``index``
    (:class:`HBSJIndexArrays`), per probe oldest first; resumable from ``start`` (see
    :func:`drain`). ``scratch``: :class:`ProbeBuffers` of ``cap + 4``."""
    buf = scratch.matches
    bound = index.okey.shape[1] + 4
    n = 0
    for i in range(start, pkeys.shape[0]):
        if n + bound > out_i.shape[0]:
            return n, i
        if not pvalid[i]:
            continue
        c = _hb_probe_one(pkeys[i], attr, index, scratch)
        for q in range(c):
            out_i[n] = i
            out_s[n] = buf[q]
            n += 1
    return n, pkeys.shape[0]


@_no_nrt
def hb_join_sequence(arrivals, positions, left, right, scratch, insert_buf, start, out_i, out_s):  # type: ignore[no-untyped-def]
    """HB-SJ two-way count-window join over a mixed arrival sequence (see
    :func:`fx_join_sequence`): ``left``/``right`` are :class:`HBSJIndexArrays`, ``scratch`` the
    :class:`ProbeBuffers` of the larger window."""
    sides = arrivals.sides
    seqs = arrivals.seqs
    pkeys = arrivals.keys
    pvalid = arrivals.valid
    expire_pos = positions.expire
    insert_pos = positions.insert
    buf = scratch.matches
    kbuf = insert_buf.keys
    vbuf = insert_buf.valid
    bound = max(left.wseq.shape[0], right.wseq.shape[0]) + 4
    n = 0
    for i in range(start, sides.shape[0]):
        if n + bound > out_i.shape[0]:
            return n, i
        is_left = sides[i] == 0
        k = pkeys[i]
        ok = pvalid[i]
        if ok:
            if is_left:
                c = _hb_probe_one(k, 0, right, scratch)
            else:
                c = _hb_probe_one(k, 0, left, scratch)
            for q in range(c):
                out_i[n] = i
                out_s[n] = buf[q]
                n += 1
        s = seqs[i]
        e = expire_pos[i]
        p = insert_pos[i]
        kbuf[0, 0] = k
        vbuf[0, 0] = ok
        if is_left:
            if e >= 0:
                _hb_expire(e, left)
            if p >= 0:
                _hb_insert(p, s, kbuf, vbuf, 0, left)
        else:
            if e >= 0:
                _hb_expire(e, right)
            if p >= 0:
                _hb_insert(p, s, kbuf, vbuf, 0, right)
    return n, sides.shape[0]


# --------------------------------------------------------------------------------------------
# TPC-H Q3 three-way join (Diba Fig. 13(b)): customer | orders (o_custkey, o_orderkey) | lineitem
# --------------------------------------------------------------------------------------------


_Stage = TypeVar("_Stage")


class Q3Stages(NamedTuple, Generic[_Stage]):
    """One thing per Q3 stage: customer (on c_custkey), orders (on o_custkey and o_orderkey),
    lineitem (on l_orderkey)."""

    customer: _Stage
    orders: _Stage
    lineitem: _Stage


class Q3KeyColumns(NamedTuple):
    """Q3's join key columns (int64 key codes, by row of their table) and their validity (a
    tuple with a null key takes its window position and joins nothing)."""

    c_custkey: np.ndarray
    o_orderkey: np.ndarray
    o_custkey: np.ndarray
    l_orderkey: np.ndarray
    c_custkey_valid: np.ndarray
    o_orderkey_valid: np.ndarray
    o_custkey_valid: np.ndarray
    l_orderkey_valid: np.ndarray


class OrderRevenue(NamedTuple):
    """Q3's aggregation, by orders row: the revenue summed over its join results, and whether
    it has any."""

    revenue: np.ndarray
    hit: np.ndarray


@_no_nrt
def q3_hbsj_sequence(sides, rows, windows, keys, l_rev, stages, agg, scratch, insert_bufs):  # type: ignore[no-untyped-def]
    """Q3's three-way count-window join over HB-SJ stages and its revenue aggregation.

    Tuple i is row ``rows[i]`` (its sequence number) of customer (``sides[i] == 0``), orders (1)
    or lineitem (2). Stages (Diba Fig. 13(b)), each a :class:`HBSJIndexArrays` of ``stages``
    over the last ``windows`` tuples of its stream: customer indexed on c_custkey; orders on
    o_custkey (attribute 0) and o_orderkey (attribute 1), two HB-SJ instances sharing one
    ordered sliding window; lineitem on l_orderkey. An arriving customer probes orders on
    o_custkey, then lineitem; an order probes customer, then lineitem; a lineitem probes orders
    on o_orderkey, then customer. Every result (c, o, l) adds ``l_rev[l]`` to
    ``agg.revenue[o]`` (:class:`OrderRevenue`). Then the stage of the tuple's own stream expires
    its oldest tuple and stores the new one. ``keys``: :class:`Q3KeyColumns`. Scratch: per stage
    :class:`ProbeBuffers` of its window + 4 (they may share ``merge``) and an
    :class:`InsertBuffer` of its attributes. Returns the number of join results.
    """
    window_c = windows.customer
    window_o = windows.orders
    window_l = windows.lineitem
    c_key = keys.c_custkey
    o_okey = keys.o_orderkey
    o_ckey = keys.o_custkey
    l_okey = keys.l_orderkey
    c_val = keys.c_custkey_valid
    oo_val = keys.o_orderkey_valid
    oc_val = keys.o_custkey_valid
    l_val = keys.l_orderkey_valid
    cust = stages.customer
    ords = stages.orders
    line = stages.lineitem
    c_wseq = cust.wseq
    o_wseq = ords.wseq
    l_wseq = line.wseq
    agg_rev = agg.revenue
    agg_hit = agg.hit
    probe_c = scratch.customer
    probe_o = scratch.orders
    probe_l = scratch.lineitem
    buf_o = probe_o.matches
    buf_l = probe_l.matches
    kc = insert_bufs.customer.keys
    v1 = insert_bufs.customer.valid
    ko = insert_bufs.orders.keys
    v2 = insert_bufs.orders.valid
    kl = insert_bufs.lineitem.keys
    vl = insert_bufs.lineitem.valid
    results = 0
    for i in range(sides.shape[0]):
        side = sides[i]
        r = rows[i]
        if side == 0:
            no = 0
            if c_val[r]:
                no = _hb_probe_one(c_key[r], 0, ords, probe_o)
            for q in range(no):
                o = buf_o[q]
                if not oo_val[o]:
                    continue
                nl = _hb_probe_one(o_okey[o], 0, line, probe_l)
                if nl:
                    tot = 0
                    for z in range(nl):
                        tot += l_rev[buf_l[z]]
                    agg_rev[o] += tot
                    agg_hit[o] = True
                    results += nl
            kc[0, 0] = c_key[r]
            v1[0, 0] = c_val[r]
            p = r % c_wseq.shape[0]
            if r >= window_c:
                _hb_expire(p, cust)
            _hb_insert(p, r, kc, v1, 0, cust)
        elif side == 1:
            nc = 0
            if oc_val[r] and oo_val[r]:
                nc = _hb_probe_one(o_ckey[r], 0, cust, probe_c)
            if nc:
                nl = _hb_probe_one(o_okey[r], 0, line, probe_l)
                if nl:
                    tot = 0
                    for z in range(nl):
                        tot += l_rev[buf_l[z]]
                    agg_rev[r] += nc * tot
                    agg_hit[r] = True
                    results += nc * nl
            ko[0, 0] = o_ckey[r]
            ko[1, 0] = o_okey[r]
            v2[0, 0] = oc_val[r]
            v2[1, 0] = oo_val[r]
            p = r % o_wseq.shape[0]
            if r >= window_o:
                _hb_expire(p, ords)
            _hb_insert(p, r, ko, v2, 0, ords)
        else:
            no = 0
            if l_val[r]:
                no = _hb_probe_one(l_okey[r], 1, ords, probe_o)
            for q in range(no):
                o = buf_o[q]
                if not oc_val[o]:
                    continue
                nc = _hb_probe_one(o_ckey[o], 0, cust, probe_c)
                if nc:
                    agg_rev[o] += nc * l_rev[r]
                    agg_hit[o] = True
                    results += nc
            kl[0, 0] = l_okey[r]
            vl[0, 0] = l_val[r]
            p = r % l_wseq.shape[0]
            if r >= window_l:
                _hb_expire(p, line)
            _hb_insert(p, r, kl, vl, 0, line)
    return results


@njit(cache=True, nogil=True)
def merge_by_fraction(sizes):  # type: ignore[no-untyped-def]
    """Interleave tables of ``sizes`` rows in proportion: row i of table t arrives at
    ``(i + 0.5) / sizes[t]`` (ties: lower table first). Returns (table, row) per arrival."""
    n = 0
    for t in range(sizes.shape[0]):
        n += sizes[t]
    side = np.empty(n, np.int8)
    row = np.empty(n, np.int64)
    nxt = np.zeros(sizes.shape[0], np.int64)
    for j in range(n):
        best = -1
        # compare (i_t + 0.5) / n_t exactly: (2 i_t + 1) * n_u  vs  (2 i_u + 1) * n_t
        for t in range(sizes.shape[0]):
            if nxt[t] < sizes[t]:
                if best == -1 or (2 * nxt[t] + 1) * sizes[best] < (2 * nxt[best] + 1) * sizes[t]:
                    best = t
        side[j] = best
        row[j] = nxt[best]
        nxt[best] += 1
    return side, row


@njit(cache=True, nogil=True, inline="always")
def first_by_position(has0, has1, has2, i0, i1, i2, n0, n1, n2):  # type: ignore[no-untyped-def]
    """Which of three tables (of ``n0``, ``n1``, ``n2`` rows) sends the next tuple when row ``i``
    of a table of ``n`` rows arrives at ``(i + 1/2) / n`` and ties go to the lower table;
    ``has*``: whether that table still has a candidate (row ``i*``). -1 when none has."""
    best = -1
    if has0:
        best = 0
    if has1 and (best == -1 or (2 * i1 + 1) * n0 < (2 * i0 + 1) * n1):
        best = 1
    if has2:
        if best == -1:
            best = 2
        elif best == 0 and (2 * i2 + 1) * n0 < (2 * i0 + 1) * n2:
            best = 2
        elif best == 1 and (2 * i2 + 1) * n1 < (2 * i1 + 1) * n2:
            best = 2
    return best


@njit(cache=True, nogil=True)
def merge_filtered3(m0, m1, m2):  # type: ignore[no-untyped-def]
    """:func:`merge_by_fraction` of three tables keeping only rows whose mask is set; rows are
    renumbered within each table's kept rows (their sequence numbers after the selection)."""
    n0, n1, n2 = m0.shape[0], m1.shape[0], m2.shape[0]
    kept = 0
    for i in range(n0):
        kept += m0[i]
    for i in range(n1):
        kept += m1[i]
    for i in range(n2):
        kept += m2[i]
    side = np.empty(kept, np.int8)
    row = np.empty(kept, np.int64)
    i0 = i1 = i2 = 0
    k0 = k1 = k2 = 0
    j = 0
    while i0 < n0 or i1 < n1 or i2 < n2:
        best = first_by_position(i0 < n0, i1 < n1, i2 < n2, i0, i1, i2, n0, n1, n2)
        if best == 0:
            if m0[i0]:
                side[j] = 0
                row[j] = k0
                k0 += 1
                j += 1
            i0 += 1
        elif best == 1:
            if m1[i1]:
                side[j] = 1
                row[j] = k1
                k1 += 1
                j += 1
            i1 += 1
        else:
            if m2[i2]:
                side[j] = 2
                row[j] = k2
                k2 += 1
                j += 1
            i2 += 1
    return side, row


#: The time rings' "no watermark yet" (far below any event time, safe to subtract a window from).
NO_TIME = -(1 << 62)


@_no_nrt
def fx_time_ring_sequence(arrivals, times, params, rings, progress, start, out_i, out_s):  # type: ignore[no-untyped-def]
    """Two-way time-window join over a mixed arrival sequence in which nothing is late, with the
    retained tuples of each side in a ring that the watermarks free.

    Tuple i of side ``me = sides[i]`` (:class:`HashArrivals`; sequence number ``s = seqs[i]`` on
    that side, event time ``times[i]``) matches every retained tuple of the other side with an
    equal key and ``|dt| <= length``; then it is stored at ring slot ``(s // parts) & (C - 1)``
    of its side when this PU owns it (``s % parts == pu``: SplitJoin,
    :mod:`splice.joins.hash.splitjoin`; ``length``, ``pu``, ``parts`` and ``time_sorted`` come in
    ``params``, :class:`TimeJoinParams`). Per side and bucket, chains of ``rings``
    (:class:`TimeRings`: ``head[side, b]``, ``nxt[side, slot]``) link tuples newest first by
    their *sequence number*; a link whose slot now holds another tuple has been overwritten, and
    so has everything older on the chain (slots are reused in arrival order), so a walk stops
    there.

    ``wm[side]`` (:class:`TimeProgress`, ``progress``) is the side's watermark: no later tuple of
    that side has a time ``<= wm``. A stored tuple with time ``<= wm[other] - length`` can never
    match again and its slot is reused; a slot still holding a tuple that can match stops the
    kernel with ``grow = 1``: the caller doubles the ring (:func:`fx_ring_relink`) and resumes.
    Tuples with a null key never match and are reused at once. ``in_order[side]`` says whether
    that side's tuples have all come in nondecreasing time so far (``newest[side]``: its largest
    time); while the other side's have, a walk stops at the first tuple older than ``times[i] -
    length`` (older ones are older still). ``time_sorted`` promises that each side arrives in
    nondecreasing time: its watermark then also follows its largest time minus one. Writes
    (arrival index, matched seq), per arrival oldest match first; returns ``(written, next
    start, grow)`` (resumable, see :func:`drain`).
    """
    sides = arrivals.sides
    seqs = arrivals.seqs
    pkeys = arrivals.keys
    pvalid = arrivals.valid
    length = params.length
    time_sorted = params.time_sorted
    pu = params.pu
    parts = params.parts
    rseq = rings.seq
    rkey = rings.key
    rval = rings.valid
    rtime = rings.time
    rnxt = rings.nxt
    head = rings.head
    shift = rings.shift
    wm = progress.watermark
    in_order = progress.in_order
    newest = progress.newest
    cap = rseq.shape[1]
    mask = cap - 1
    n = 0
    for i in range(start, sides.shape[0]):
        if n + cap > out_i.shape[0]:
            return n, i, 0
        me = sides[i]
        other = 1 - me
        s = seqs[i]
        own = parts == 1 or s % parts == pu
        pos = (s // parts) & mask
        if own and rseq[me, pos] >= 0 and rval[me, pos]:
            if rtime[me, pos] > wm[other] - length:
                return n, i, 1
        k = pkeys[i]
        t = times[i]
        ok = pvalid[i]
        if ok:
            first = n
            q = head[other, fx_bucket(k, shift)]
            while q >= 0:
                p = (q // parts) & mask
                if rseq[other, p] != q:
                    break
                ts = rtime[other, p]
                if in_order[other] and ts < t - length:
                    break
                if rkey[other, p] == k and abs(t - ts) <= length:
                    out_i[n] = i
                    out_s[n] = q
                    n += 1
                q = rnxt[other, p]
            # newest first -> oldest first
            lo = first
            hi = n - 1
            while lo < hi:
                tmp = out_s[lo]
                out_s[lo] = out_s[hi]
                out_s[hi] = tmp
                lo += 1
                hi -= 1
        if own:
            rseq[me, pos] = s
            rkey[me, pos] = k
            rval[me, pos] = ok
            rtime[me, pos] = t
            if ok:
                b = fx_bucket(k, shift)
                rnxt[me, pos] = head[me, b]
                head[me, b] = s
        if t < newest[me]:
            in_order[me] = False
        else:
            newest[me] = t
        if time_sorted and t - 1 > wm[me]:
            wm[me] = t - 1
    return n, sides.shape[0], 0


@_no_nrt
def fx_ring_relink(rseq, rkey, rval, rnxt, head, shift, order):  # type: ignore[no-untyped-def]
    """Rebuild the chains of one side of :func:`fx_time_ring_sequence`'s ring (after it grew):
    ``order`` lists the occupied slots by ascending sequence number; ``head`` is all -1."""
    for j in range(order.shape[0]):
        p = order[j]
        if rval[p]:
            b = fx_bucket(rkey[p], shift)
            rnxt[p] = head[b]
            head[b] = rseq[p]


@_no_nrt
def hb_time_sequence(  # type: ignore[no-untyped-def]
    arrivals, times, params, left, right, windows, scratch, insert_buf, start, out_i, out_s,
):
    """HB-SJ two-way time-window join over a mixed arrival sequence in which nothing is late,
    expiring by watermark from the head of each ordered sliding window.

    Each side's ordered window (``left``/``right``, :class:`HBSJIndexArrays`) is a ring of ``C``
    positions: this PU's tuple ``s`` (``s % parts == pu``, :class:`TimeJoinParams`) at ``(s //
    parts) & (C - 1)``; ``windows`` (:class:`HBSJTimeWindows`) holds ``rtime``, its event time,
    ``lo[side]``, the position count (``s // parts``) of the oldest tuple still stored, and
    ``wm``, each side's watermark (with ``time_sorted`` arrival it also follows the side's
    largest time minus one, as in :func:`fx_time_ring_sequence`). Before a tuple of side ``me``
    is stored, the oldest tuples of ``me`` with time ``<= wm[other] - length`` expire from their
    table slot or the overflow buffer, oldest first, exactly as HB-SJ expires before each insert
    (empty positions, left by a restore, are passed over). A tuple then probes the other side's
    tables and overflow buffer (``scratch``: :class:`ProbeBuffers`) and keeps the matches with
    ``|dt| <= length``, oldest first. A ring still full of live tuples stops the kernel with
    ``grow = 1``: the caller doubles the rings and resumes. Returns ``(written, next start,
    grow)``; resumable (see :func:`drain`).
    """
    sides = arrivals.sides
    seqs = arrivals.seqs
    pkeys = arrivals.keys
    pvalid = arrivals.valid
    length = params.length
    time_sorted = params.time_sorted
    pu = params.pu
    parts = params.parts
    l_wseq = left.wseq
    r_wseq = right.wseq
    rtime = windows.time
    lo = windows.oldest
    wm = windows.watermark
    buf = scratch.matches
    kbuf = insert_buf.keys
    vbuf = insert_buf.valid
    cap = l_wseq.shape[0]
    mask = cap - 1
    bound = cap + 4
    n = 0
    for i in range(start, sides.shape[0]):
        if n + bound > out_i.shape[0]:
            return n, i, 0
        me = sides[i]
        other = 1 - me
        s = seqs[i]
        own = parts == 1 or s % parts == pu
        j = s // parts
        if own:
            thr = wm[other] - length
            while lo[me] < j:
                p = lo[me] & mask
                held = l_wseq[p] >= 0 if me == 0 else r_wseq[p] >= 0
                if held:
                    if rtime[me, p] > thr:
                        break
                    if me == 0:
                        _hb_expire(p, left)
                    else:
                        _hb_expire(p, right)
                lo[me] += 1
            if j - lo[me] >= cap:
                return n, i, 1
        k = pkeys[i]
        t = times[i]
        ok = pvalid[i]
        if ok:
            if me == 0:
                c = _hb_probe_one(k, 0, right, scratch)
            else:
                c = _hb_probe_one(k, 0, left, scratch)
            for q in range(c):
                m = buf[q]
                if abs(t - rtime[other, (m // parts) & mask]) <= length:
                    out_i[n] = i
                    out_s[n] = m
                    n += 1
        if own:
            p = j & mask
            kbuf[0, 0] = k
            vbuf[0, 0] = ok
            if me == 0:
                _hb_insert(p, s, kbuf, vbuf, 0, left)
            else:
                _hb_insert(p, s, kbuf, vbuf, 0, right)
            rtime[me, p] = t
        if time_sorted and t - 1 > wm[me]:
            wm[me] = t - 1
    return n, sides.shape[0], 0
