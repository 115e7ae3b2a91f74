"""Sliding-window indexes: one class over the numba state shared by every structure.

A :class:`WindowIndex` indexes the last ``w`` keys of one stream, by arrival position
``0, 1, 2, ...``: ``insert(keys)`` appends (the oldest entries expire), ``search(lo, hi)`` returns
the positions in the window whose key is in ``[lo, hi]``, ascending. ``kind`` picks the structure:

* ``"nlwj"`` — no index: a linear scan of the window (the nested-loop baseline);
* ``"bptree"`` — a classic B+-Tree; each insert deletes the expired entry;
* ``"bchain"`` / ``"ibchain"`` — a chained index of ``chain_length`` links of
  ``ceil(w / (chain_length - 1))`` entries; whole links are dropped once expired; in the IB-chain,
  archived links are converted into immutable B+-Trees;
* ``"imtree"`` — IM-Tree: ``T_I`` (B+-Tree) takes inserts; when it holds ``ceil(m * w)`` entries it
  is merged into ``T_S`` (immutable B+-Tree) and expired entries are dropped;
* ``"pimtree"`` — PIM-Tree: as the IM-Tree, with ``T_I`` split into one B+-Tree per node of
  ``T_S`` at ``insertion_depth`` (disjoint key ranges, re-derived at every merge).

>>> import numpy as np
>>> ix = WindowIndex("pimtree", window=4, merge_ratio=0.5)
>>> ix.insert(np.array([5.0, 1.0, 3.0, 5.0, 2.0, 5.0]))
>>> ix.search(4.0, 6.0)   # window = positions 2..5
array([3, 5])
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import numpy as np

from splice.core.errors import PlanError
from splice.index._bptree import P_BUMP, P_CAP, P_NFREE, new_pool, pool_bytes
from splice.index._immutable import FANOUT, LEAF_SIZE, MAX_LEVELS, ibt_levels, inner_capacity
from splice.index._ti_filter import filter_words
from splice.index._window import (
    BCHAIN,
    BPTREE,
    CHAIN_PREFETCH_MIN_WINDOW,
    IBCHAIN,
    IMTREE,
    INSERT_PREFETCH_MIN_WINDOW,
    M_CCNT,
    M_CLEN,
    M_DEPTH,
    M_FSHIFT,
    M_KIND,
    M_LCAP,
    M_MERGES,
    M_NEXT,
    M_NPART,
    M_POOLMIN,
    M_THRESH,
    M_TISIZE,
    M_W,
    META_LEN,
    NLWJ,
    PIMTREE,
    POOL_FIELDS,
    PREFETCH_MIN_WINDOW,
    IndexState,
    idx_insert_many,
    idx_search_many,
)
from splice.kernels.machine import allocate_within_memory

__all__ = ["WindowIndex", "IndexKind", "INDEX_KINDS", "default_merge_ratio", "max_insertion_depth",
           "key_dtype_ok"]

IndexKind = Literal["nlwj", "bptree", "bchain", "ibchain", "imtree", "pimtree"]
INDEX_KINDS: tuple[str, ...] = get_args(IndexKind)
_KIND_CODE = {
    "nlwj": NLWJ,
    "bptree": BPTREE,
    "bchain": BCHAIN,
    "ibchain": IBCHAIN,
    "imtree": IMTREE,
    "pimtree": PIMTREE,
}


def default_merge_ratio(window: int) -> float:
    """The IM/PIM-Tree merge ratio for a window of ``window`` entries when none is given: 1/8 up
    to 2^13 entries, 1/16 up to 2^19, 1/32 above.

    A large window's ``T_I`` at 1/8 outgrows the caches, and its searches and inserts miss more
    than the extra merges cost; as in the PIM-Tree paper, whose best ratio fell from 1/8 at 2^16 to 1/16 at
    2^23, the ratio falls as the window grows (measured with ``benchmarks.band_ratio``:
    docs/lab/band-joins.md, "The merge ratio by window size").
    """
    if window <= 1 << 13:
        return 0.125
    if window <= 1 << 19:
        return 0.0625
    return 0.03125


def max_insertion_depth(window: int) -> int:
    """Deepest inner level (root = 0) of ``T_S`` holding a full window of ``window`` entries."""
    return max(ibt_levels(window) - 1, 0)


def key_dtype_ok(dtype: np.dtype) -> bool:
    """Keys are ``int64`` or ``float64`` (callers convert other numeric types)."""
    return np.dtype(dtype) in (np.dtype(np.int64), np.dtype(np.float64))


class WindowIndex:
    """Index of a count-based sliding window of ``window`` keys (see the module docstring).

    ``ts_slack`` adds room to ``T_S``, ``ring_slack`` to the window's key ring (kept by NLWJ and
    the B+-Tree only) and ``pool_slack`` entries to the node pool, for joins that keep entries
    beyond ``w`` (the parallel join keeps what in-flight probes still need, and cannot grow the
    pool while threads insert).
    """

    def __init__(
        self,
        kind: IndexKind = "pimtree",
        window: int = 1024,
        dtype: np.dtype | type = np.float64,
        merge_ratio: float = 0.5,
        insertion_depth: int = 2,
        chain_length: int = 2,
        ts_slack: int = 0,
        ring_slack: int = 0,
        pool_slack: int = 0,
    ) -> None:
        if kind not in _KIND_CODE:
            raise PlanError(f"unknown index {kind!r} (choose one of {', '.join(INDEX_KINDS)})")
        if int(window) < 1:
            raise PlanError(f"window must be >= 1, got {window}")
        if not 0.0 < float(merge_ratio) <= 1.0:
            raise PlanError(f"merge ratio must be in (0, 1], got {merge_ratio}")
        if int(chain_length) < 2:
            raise PlanError(f"chain length must be >= 2, got {chain_length}")
        if not 0 <= int(insertion_depth) < MAX_LEVELS:
            raise PlanError(f"insertion depth must be in [0, {MAX_LEVELS}), got {insertion_depth}")
        dt = np.dtype(dtype)
        if not key_dtype_ok(dt):
            raise PlanError(f"index keys are int64 or float64, got {dt}")
        self.kind: IndexKind = kind
        self.window = w = int(window)
        self.dtype = dt
        code = _KIND_CODE[kind]
        if code in (IMTREE, PIMTREE, IBCHAIN) and w + max(int(ts_slack), 0) >= 1 << 32:
            raise PlanError(f"{kind}: window must be below 2^32 tuples (it stores positions as "
                            f"4-byte offsets), got {w}")
        thresh = max(1, math.ceil(float(merge_ratio) * w))
        link = math.ceil(w / (int(chain_length) - 1))
        if code in (IMTREE, PIMTREE):
            slots, cap = 1, w + int(ts_slack)
            trees = math.ceil(math.ceil(cap / LEAF_SIZE) / FANOUT) + 1 if code == PIMTREE else 1
            pool = thresh // 16 + 4 * trees + 64
        elif code in (BCHAIN, IBCHAIN):
            slots, cap, trees = int(chain_length) + 1, link, int(chain_length) + 1
            pool = (w if code == BCHAIN else link) // 16 + 4 * trees + 64
        else:
            slots, cap, trees = 1, 1, 1
            pool = w // 16 + 64 if code == BPTREE else 8
        pool += int(pool_slack) // 8
        icap = inner_capacity(cap)
        meta = np.zeros(META_LEN, np.int64)
        meta[M_KIND] = code
        meta[M_W] = w
        meta[M_THRESH] = thresh
        meta[M_DEPTH] = int(insertion_depth)
        meta[M_NPART] = 1
        meta[M_CLEN] = int(chain_length)
        meta[M_LCAP] = link
        meta[M_POOLMIN] = 4 * 16 + 8
        # the T_I filter: bits by the merge threshold, a word per partition at least; until the
        # first merge one partition of one bucket (scale 0)
        fparts = trees if code in (IMTREE, PIMTREE) else 1
        words = filter_words(thresh, fparts) if code in (IMTREE, PIMTREE) else 1
        meta[M_FSHIFT] = max(6, (words * 64).bit_length() - 1)
        # T_S's keys and positions: two rows in an IM/PIM-Tree (a merge writes the row T_S does
        # not use); rows of T_S and links have one slot more than they hold, merge_into's scratch
        rows = 2 if code in (IMTREE, PIMTREE) else slots
        ring = w + int(ring_slack) if code in (NLWJ, BPTREE) else 1
        i64 = np.dtype(np.int64)
        # shape and type of the arrays after the pool (meta is allocated above)
        rest: dict[str, tuple[tuple[int, ...], np.dtype]] = {
            "ibt_keys": ((rows, cap + 1), dt),
            "ibt_offs": ((rows, cap + 1), np.dtype(np.uint32)),
            "ibt_inner": ((slots, icap), dt),
            "ibt_loff": ((slots, MAX_LEVELS), i64),
            "ibt_lcnt": ((slots, MAX_LEVELS), i64),
            "ibt_meta": ((slots, 2), i64),
            "ring": ((ring,), dt),
            "path": ((1024,), i64),
            "link_first": ((slots,), i64),
            "filter_bits": ((words,), i64),
            "filter_geo": ((2 * fparts,), np.dtype(np.float64)),
        }
        need = pool_bytes(pool, dt) + sum(int(np.prod(shape)) * t.itemsize
                                          for shape, t in rest.values())

        def allocate() -> IndexState:
            arrays = dict(zip(POOL_FIELDS, new_pool(pool, trees, dt), strict=True))
            arrays.update((name, np.zeros(shape, t)) for name, (shape, t) in rest.items())
            return IndexState(meta=meta, **arrays)

        #: the arrays the kernels take (:class:`~splice.index._window.IndexState`)
        self.state: IndexState = allocate_within_memory(
            f"{kind}: a window of {w} tuples", need, "of index memory", allocate)

    # -- internals -----------------------------------------------------------------------------
    def grow_pool(self) -> None:
        """Make the node pool 1.5x larger (the kernels stop and ask when it runs low)."""
        st = self.state
        cap = st.keys.shape[0]
        new = max(cap + cap // 2, cap + 64)
        grown: dict[str, np.ndarray] = {}
        for name, fresh in zip(POOL_FIELDS[:6], new_pool(new, st.tmeta.shape[0], self.dtype),
                               strict=False):
            fresh[:cap] = getattr(st, name)
            grown[name] = fresh
        pmeta = st.pmeta.copy()
        pmeta[P_CAP] = new
        # new node arrays and counters; the trees' table and the other arrays stay
        self.state = st._replace(pmeta=pmeta, **grown)

    @property
    def meta(self) -> np.ndarray:
        return self.state.meta

    # -- API -----------------------------------------------------------------------------------
    def insert(self, keys: np.ndarray) -> None:
        """Append ``keys`` to the window in order (positions ``len(self)...``)."""
        keys = np.ascontiguousarray(keys, dtype=self.dtype)
        if self.dtype.kind == "f" and np.isnan(keys).any():
            raise PlanError("index keys must not be NaN")
        done = 0
        while done < len(keys):
            done = idx_insert_many(self.state, keys, done)
            if done < len(keys):
                self.grow_pool()

    def search(
        self, lo: float, hi: float, plo: int | None = None, phi: int | None = None
    ) -> np.ndarray:
        """Positions in the window (or in ``[plo, phi]``) whose key is in ``[lo, hi]``, ascending."""
        nxt = int(self.meta[M_NEXT])
        plo = max(0, nxt - self.window) if plo is None else plo
        phi = nxt - 1 if phi is None else phi
        los = np.array([lo], self.dtype)
        his = np.array([hi], self.dtype)
        cap = 64
        while True:
            out_i = np.empty(cap, np.int64)
            out_p = np.empty(cap, np.int64)
            _, n, full = idx_search_many(self.state, los, his, plo, phi, out_i, out_p, 0, 0)
            if not full:
                return out_p[:n].copy()
            cap *= 4

    def __len__(self) -> int:
        """Arrivals so far (the next position)."""
        return int(self.meta[M_NEXT])

    @property
    def prefetch_pays(self) -> bool:
        """Whether searches of this window read immutable trees large enough to miss the
        caches (``T_S`` of an IM/PIM-Tree in windows of ``PREFETCH_MIN_WINDOW`` tuples and
        more, the archived links of an IB-chain from ``CHAIN_PREFETCH_MIN_WINDOW``): then the
        joins prefetch their leaves."""
        if self.kind == "ibchain":
            return self.window >= CHAIN_PREFETCH_MIN_WINDOW
        return self.kind in ("imtree", "pimtree") and self.window >= PREFETCH_MIN_WINDOW

    @property
    def insert_prefetch_pays(self) -> bool:
        """Whether the joins also load the ``T_I`` node of each insert ahead (IM/PIM-Tree
        windows of ``INSERT_PREFETCH_MIN_WINDOW`` tuples and more, see
        :func:`~splice.index._window.insert_prefetch`)."""
        return self.kind in ("imtree", "pimtree") and self.window >= INSERT_PREFETCH_MIN_WINDOW

    @property
    def merges(self) -> int:
        """IM/PIM-Tree merges so far."""
        return int(self.meta[M_MERGES])

    @property
    def partitions(self) -> int:
        """PIM-Tree: B+-Trees in ``T_I`` now."""
        return int(self.meta[M_NPART])

    @property
    def links(self) -> int:
        """Chains: links alive now."""
        return int(self.meta[M_CCNT])

    @property
    def ti_size(self) -> int:
        """IM/PIM-Tree: entries in ``T_I``."""
        return int(self.meta[M_TISIZE])

    def nbytes(self) -> int:
        """Bytes held by the structure's arrays (allocated capacity)."""
        return int(sum(a.nbytes for a in self.state))

    def used_bytes(self) -> int:
        """Bytes of the node pool in use plus ``T_S``/links and the window ring."""
        st = self.state
        row = st.keys.itemsize * st.keys.shape[1] + st.poss.itemsize * st.poss.shape[1]
        row += st.child.itemsize * st.child.shape[1] + 12
        used_nodes = int(st.pmeta[P_BUMP]) - int(st.pmeta[P_NFREE])
        rest = sum(getattr(st, name).nbytes for name in IndexState._fields
                   if name not in POOL_FIELDS)
        return used_nodes * row + rest



