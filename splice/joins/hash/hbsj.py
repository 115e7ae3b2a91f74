"""HB-SJ: Diba's hash-based stream join index over a sliding window (Diba, §5.2.2).

Per indexed attribute, two Murmur3 hash functions (``mmh3``-compatible MurmurHash3_x86_32 of
the key's 8 little-endian bytes, seeds :data:`SEED1` and :data:`SEED2`) address four storage
tables of ``table_size`` slots each: tables 0 and 1 at ``h1(k) mod ht``, tables 2 and 3 at
``h2(k) mod ht``. A new tuple is stored in the first of the four addressed slots that is free;
when all four are taken it goes to the **overflow buffer**, which probes search by nested loop.
An **ordered sliding window** records, for every window position, where its tuple is stored
(table 0..3 or overflow) and at which slot; before each insert the oldest tuple expires from
exactly that place. An unbounded window has no fixed size: the ordered window grows as tuples
arrive. Time windows use the count-window form as a ring that the watermark frees from its head
(:func:`~splice.joins.hash._hash_kernels.hb_time_sequence`), grown by :meth:`HBSJIndex.resized`.

A probe examines the four addressed slots and then the whole overflow buffer; its matches are
returned oldest first, so HB-SJ yields exactly the fast index's results in the same order.
:meth:`HBSJIndex.stats` gives per table inserts, overflow inserts, the overflow peak and the
number of overflow comparisons (Diba Figs. 14 and 17).

>>> import numpy as np
>>> ix = HBSJIndex(n_attrs=1, window=2, table_size=8)
>>> ix.insert(np.arange(3), np.array([[5, 5, 7]]), np.ones((1, 3), bool))
>>> ix.probe(0, np.array([5, 7]), np.array([True, True]))  # tuple 0 expired when 2 arrived
(array([0, 1]), array([1, 2]))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from splice.core.errors import PlanError
from splice.joins.hash._hash_kernels import (
    N_STATS,
    SEED1,
    SEED2,
    ST_OVF_CMP,
    ST_OVF_INS,
    ST_OVF_PEAK,
    ST_PROBES,
    HBSJIndexArrays,
    ProbeBuffers,
    RingPositions,
    drain,
    hb_probe,
    hb_update,
)
from splice.kernels.machine import allocate_within_memory

__all__ = ["HBSJIndex", "SEED1", "SEED2"]


class HBSJIndex:
    """One stream's window indexed by HB-SJ on ``n_attrs`` key attributes.

    ``window=w`` is a count window: the ordered sliding window has ``w`` positions and the oldest
    tuple expires before each insert. ``window=None`` is unbounded: positions are handed out
    densely and the window grows (tables of twice its size unless ``table_size`` is given;
    statistics counters carry over). ``pu``/``parts`` make it one PU's share of a SplitJoin: it
    stores the tuples whose sequence number is ``pu`` modulo ``parts`` (see
    :mod:`splice.joins.hash.splitjoin`), ``ceil(w / parts)`` positions of a count window.
    """

    kind = "hbsj"

    def __init__(
        self, n_attrs: int, window: int | None, table_size: int | None = None, pu: int = 0, parts: int = 1
    ) -> None:
        if window is not None and window < 1:
            raise PlanError(f"count window size must be >= 1, got {window}")
        if table_size is not None and table_size < 1:
            raise PlanError(f"HB-SJ table size must be >= 1, got {table_size}")
        self.n_attrs, self.window, self.pu, self.parts = n_attrs, window, pu, parts
        self._fixed_ht = table_size
        self.st = np.zeros((n_attrs, N_STATS), np.int64)
        cap = -(-window // parts) if window is not None else 1024
        allocate_within_memory(f"hbsj: a count window of {window} tuples", self._bytes(cap),
                               "for its ring and hash tables", lambda: self._alloc(cap))

    def _table_size(self, cap: int) -> int:
        if self._fixed_ht is not None:
            return self._fixed_ht
        if self.window is not None:
            return max(16, 1 << (2 * self.window - 1).bit_length())
        return max(16, 1 << (2 * cap - 1).bit_length())

    def _bytes(self, cap: int) -> int:
        # what _alloc allocates, and the two probe buffers of cap + 4 positions
        k = self.n_attrs
        return cap * (8 + k * (1 + 8 + 8 + 8)) + k * 4 * self._table_size(cap) * 16 + 16 * (cap + 4)

    def _alloc(self, cap: int) -> None:
        ht = self._table_size(cap)
        self.table_size = ht
        self.cap = cap
        k = self.n_attrs
        self.wseq = np.full(cap, -1, np.int64)
        self.wloc = np.full((k, cap), 5, np.int8)
        self.widx = np.zeros((k, cap), np.int64)
        self.tkey = np.zeros((k, 4, ht), np.int64)
        self.tseq = np.full((k, 4, ht), -1, np.int64)
        self.okey = np.zeros((k, cap), np.int64)
        self.oseq = np.zeros((k, cap), np.int64)
        self.oinfo = np.zeros((k, 2), np.int64)
        #: the same arrays as the kernels take them (rebuilt here, where they are reallocated;
        #: the statistics counters carry over)
        self.arrays = HBSJIndexArrays(self.wseq, self.wloc, self.widx, self.tkey, self.tseq,
                                      self.okey, self.oseq, self.oinfo, self.st)
        self.used = 0  # time windows: next dense position

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)

    def _positions(self, seqs: np.ndarray, expire: bool) -> RingPositions:
        p, cap, w = self.parts, self.cap, self.window
        own = seqs % p == self.pu
        if w is None:
            n_own = int(own.sum())
            if self.used + n_own > cap:
                self._grow(self.used + n_own)
            ins = np.full(len(seqs), -1, np.int64)
            ins[own] = self.used + np.arange(n_own)
            self.used += n_own
            return RingPositions(np.full(len(seqs), -1, np.int64), ins)
        ins = np.where(own, (seqs // p) % cap, -1)
        e = seqs - w
        if expire:
            exp = np.where((e >= 0) & (e % p == self.pu), (e // p) % cap, -1)
        else:
            exp = np.full(len(seqs), -1, np.int64)
        return RingPositions(exp, ins)

    def insert(self, seqs: np.ndarray, keys: np.ndarray, valid: np.ndarray, expire: bool = True) -> None:
        """Tuples ``seqs`` (keys ``keys[a, j]``, ``valid`` False = null) arrive in order: for each,
        the tuple ``w`` arrivals older expires (count windows), then it is stored (when this PU
        owns it)."""
        seqs = np.ascontiguousarray(seqs, dtype=np.int64)
        positions = self._positions(seqs, expire)
        hb_update(self.arrays, positions, seqs, np.ascontiguousarray(keys, np.int64),
                  np.ascontiguousarray(valid, np.bool_))

    def _live(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(seqs, keys, valid) of the stored tuples in arrival order, read from their places."""
        pos = np.flatnonzero(self.wseq >= 0)
        pos = pos[np.argsort(self.wseq[pos], kind="stable")]
        k = self.n_attrs
        keys = np.zeros((k, len(pos)), np.int64)
        valid = np.zeros((k, len(pos)), np.bool_)
        for a in range(k):
            loc = self.wloc[a, pos].astype(np.int64)
            idx = self.widx[a, pos]
            tab = loc < 4
            keys[a, tab] = self.tkey[a, loc[tab], idx[tab]]
            ovf = loc == 4
            keys[a, ovf] = self.okey[a, idx[ovf]]
            valid[a] = loc < 5
        return self.wseq[pos], keys, valid

    def _rebuild(self, seqs: np.ndarray, keys: np.ndarray, valid: np.ndarray, cap: int) -> None:
        counters = self.st.copy()
        self._alloc(cap)
        self.insert(seqs, keys, valid, expire=False)
        peak = counters[:, ST_OVF_PEAK]
        self.st[:] = counters
        self.st[:, ST_OVF_PEAK] = np.maximum(peak, self.oinfo[:, 1])

    def _grow(self, need: int) -> None:
        seqs, keys, valid = self._live()
        self._rebuild(seqs, keys, valid, max(2 * self.cap, 1 << max(0, need - 1).bit_length()))

    def resized(self, window: int) -> HBSJIndex:
        """A copy over a count window of ``window`` positions holding the same tuples (re-placed
        in arrival order) and counters: the command's time join grows its rings with it."""
        out = HBSJIndex(self.n_attrs, window, self._fixed_ht, self.pu, self.parts)
        out._rebuild_from(self, *self._live())
        return out

    def _rebuild_from(self, old: HBSJIndex, seqs: np.ndarray, keys: np.ndarray, valid: np.ndarray) -> None:
        self.insert(seqs, keys, valid, expire=False)
        self.st[:] = old.st
        self.st[:, ST_OVF_PEAK] = np.maximum(old.st[:, ST_OVF_PEAK], self.oinfo[:, 1])

    def probe(self, attr: int, keys: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(probe index, stored seq) of every match on attribute ``attr``, oldest match first."""
        keys = np.ascontiguousarray(keys, np.int64)
        scratch = ProbeBuffers(np.empty(self.cap + 4, np.int64), np.empty(self.cap + 4, np.int64))
        return drain(hb_probe, len(keys), self.cap + 4, self.arrays, attr, keys,
                     np.ascontiguousarray(valid, np.bool_), scratch)

    def live_seqs(self) -> np.ndarray:
        s = self.wseq[self.wseq >= 0]
        return np.sort(s)

    def stats(self) -> list[dict[str, Any]]:
        """Per attribute: inserts per table, overflow inserts, overflow peak/now, comparisons."""
        out = []
        for a in range(self.n_attrs):
            st = self.st[a]
            out.append({
                "table_inserts": [int(x) for x in st[:4]],
                "overflow_inserts": int(st[ST_OVF_INS]),
                "overflow_peak": int(st[ST_OVF_PEAK]),
                "overflow_now": int(self.oinfo[a, 1]),
                "overflow_comparisons": int(st[ST_OVF_CMP]),
                "probes": int(st[ST_PROBES]),
            })
        return out

    def set_counters(self, counters: np.ndarray) -> None:
        """Restore the statistics counters (placements themselves are rebuilt, not stored)."""
        self.st[:] = counters

    def counters(self) -> np.ndarray:
        return self.st.copy()
