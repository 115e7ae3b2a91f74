"""The key index of the interval join (above 1,024 retained rows).

**Key index** (the hybrid of "Delegate joins to DataFusion's hash join", above 1,024 retained rows): the retained rows of one side in a
chained hash table over their codes and time buckets
(:func:`~splice.joins.temporal._interval_kernels.index_probe`). A chain holds the rows of one key whose
times fall in one bucket of ``2**shift`` time units, at least the band's width, so a probe reads
at most two chains (the buckets its band ``[t + lo, t + hi]`` touches) and touches nothing else:
not the rows of other keys, nor the rows of its key far from its time. Row ids grow in arrival
order and chains link entries in insertion order, so the probe merges its two chains into
batch/row order. The index is derived, never checkpointed: arrival appends to it, watermark
retirement compacts it, restore rebuilds it.
"""

from __future__ import annotations

import numpy as np

from splice.core.errors import InternalError, StateError
from splice.joins.temporal._interval_kernels import (
    band_shift,
    index_insert,
    new_table,
    probe_pairs,
)

__all__ = ["KeyIndex"]


class KeyIndex:
    """Retained rows of one side in a chained hash table over key codes and time buckets; see
    the module docstring.

    Entries (row id, and the pair (time, next) side by side) sit in arrays with spare capacity,
    appended on arrival and linked into the chain of their (code, bucket), so a chain lists rows
    in arrival order; retirement compacts the surviving entries and relinks them. The probe
    reads no codes (see :func:`~splice.joins.temporal._interval_kernels.index_probe`), so the index keeps
    the code arrays it is given by reference, in entry order, and reads them only to rebuild:
    the side's retained batches hold those arrays anyway. The table has at least 1.2 slots per
    entry of capacity. ``nbytes`` (entry and table capacity, and the codes the index made itself
    when it rebuilt) is a cached total, so budget checks are O(1).
    """

    __slots__ = ("_codes", "link", "_rowid", "_base", "n", "table", "nbytes", "shift")

    def __init__(self, codes: np.ndarray, times: np.ndarray, row_ids: np.ndarray | int,
                 band: tuple[int, int] = (0, 2**63 - 1), codes_owned: bool = False):
        """``codes``: kept by reference, not copied (the caller does not change them; with
        ``codes_owned`` the index counts them in ``nbytes``: an array made for it alone).
        ``row_ids``: the rows' ids, or the first id of consecutive ones (one whole batch: no
        id array is written until retirement or a gap needs one). ``band`` = the ``(lo, hi)``
        the index will be probed with: chains are per key and time bucket of
        ``2**band_shift(lo, hi)`` (one bucket, a chain per key, by default)."""
        self.shift = band_shift(*band)
        self._rebuild(codes, times, row_ids, codes_owned)

    def _rebuild(self, codes: np.ndarray, times: np.ndarray, row_ids: np.ndarray | int,
                 codes_owned: bool) -> None:
        n = len(codes)
        cap = max(64, n + n // 4)  # room for arrivals before the next rebuild
        if cap >= 2**31:
            raise StateError(f"key index: {n} rows, more than one index holds (2**31)")
        self._codes = [codes]
        self.link = np.empty((cap, 2), dtype=np.int64)
        self.link[:n, 0] = times
        if isinstance(row_ids, (int, np.integer)):
            self._rowid: np.ndarray | None = None  # entry e has id _base + e
            self._base = int(row_ids)
        else:
            self._rowid = np.empty(cap, dtype=np.int64)
            self._rowid[:n] = row_ids
            self._base = 0
        self.n = n
        # 1.2 slots a row of capacity (1.5 a row held now), not two: the table is written
        # whole when built, and a smaller one leaves more of the caches to the probes. Slots
        # hold distinct codes, so the load stays at most 5/6, and a slot is always free.
        self.table = new_table(cap * 3 // 5 + 1)
        index_insert(self.table, codes, self.link, 0, self.shift)
        self.nbytes = (3 * 8 * cap + self.table.nbytes  # ids counted as if written
                       + (codes.nbytes if codes_owned else 0))

    @property
    def capacity(self) -> int:
        """Entries the arrays hold before the next insert rebuilds them."""
        return len(self.link)

    @property
    def e_code(self) -> np.ndarray:
        """Code of each entry ``0 .. n-1`` (one array made from the pieces the index holds)."""
        if len(self._codes) > 1:
            self._codes = [np.concatenate(self._codes)]
        return self._codes[0]

    @property
    def e_time(self) -> np.ndarray:
        return self.link[:, 0]

    @property
    def e_rowid(self) -> np.ndarray:
        """Row id of each entry slot (made from the first id while the ids are consecutive)."""
        if self._rowid is None:
            return np.arange(self._base, self._base + self.capacity, dtype=np.int64)
        return self._rowid

    def __len__(self) -> int:
        return self.n

    @property
    def row_ids(self) -> np.ndarray:
        return self.e_rowid[: self.n]

    def insert(self, codes: np.ndarray, times: np.ndarray, row_ids: np.ndarray | int) -> None:
        """Append rows whose ids are all larger than every indexed id (an arrival); ``codes``
        kept by reference and ``row_ids`` as for the constructor."""
        n, m = self.n, len(codes)
        consecutive = (self._rowid is None and isinstance(row_ids, (int, np.integer))
                       and int(row_ids) == self._base + n)
        if not consecutive and self._rowid is None:
            self._rowid = self.e_rowid  # a gap: write the ids from now on
            self._base = 0
        if n + m > self.capacity:
            ids: np.ndarray | int
            if consecutive:
                ids = self._base
            else:
                new = (np.arange(int(row_ids), int(row_ids) + m, dtype=np.int64)
                       if isinstance(row_ids, (int, np.integer)) else row_ids)
                ids = np.concatenate([self.row_ids, new])
            self._rebuild(np.concatenate(self._codes + [codes]),
                          np.concatenate([self.link[:n, 0], times]), ids, True)
            return
        self._codes.append(codes)
        self.link[n : n + m, 0] = times
        if self._rowid is not None:
            self._rowid[n : n + m] = (np.arange(int(row_ids), int(row_ids) + m)
                                      if isinstance(row_ids, (int, np.integer)) else row_ids)
        index_insert(self.table, codes, self.link, n, self.shift)
        self.n = n + m

    def retire(self, threshold: int) -> None:
        """Drop every row with ``time <= threshold`` (arrival order within chains is kept)."""
        n = self.n
        times = self.link[:n, 0]
        keep = times > threshold
        if keep.all():
            return
        self._rebuild(self.e_code[keep], times[keep], self.row_ids[keep], True)

    def probe(
        self, codes: np.ndarray, times: np.ndarray, lo: int, hi: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Pairs ``(probe row, row id)`` with equal codes and ``times[i]+lo <= t <= times[i]+hi``.

        Ordered by probe row, then row id (arrival order).
        """
        pi, rid, _, _ = self.probe_times(codes, times, lo, hi)
        return pi, rid

    def probe_times(
        self, codes: np.ndarray, times: np.ndarray, lo: int, hi: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """:meth:`probe`'s pairs, per pair the indexed row's time (read from the index entry the
        probe visits, not from the payload), and whether the probe rows are exactly
        ``0 .. len(codes)-1`` (each probe matched one row: the probe side is output as it is)."""
        if self.shift < 63 and hi - lo + 1 > 1 << self.shift:
            raise InternalError(f"key index of time buckets 2**{self.shift} probed with a band "
                                f"[{lo}, {hi}] wider than a bucket")
        buf, cap, k, in_order = probe_pairs(self.table, self.link, codes, times,
                                            lo, hi, self.shift)
        pi, pe, pt = buf[:k], buf[cap : cap + k], buf[2 * cap : 2 * cap + k]
        if self._rowid is None:
            return pi, pe + self._base if self._base else pe, pt, in_order
        return pi, self._rowid[pe], pt, in_order
