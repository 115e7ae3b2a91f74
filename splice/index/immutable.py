"""The immutable B+-Tree: built in bulk, nodes in breadth-first array order, implicit children.

Entries sit sorted in leaf blocks of ``LEAF_SIZE``; inner levels store only keys, ``FANOUT`` per
node, and the children of node ``j``'s entry ``c`` are node ``j*FANOUT + c`` of the level below,
so no references are stored and a lookup is ``levels`` short binary searches plus a leaf scan.
It is never updated in place: IM/PIM-Tree merges and IB-chain archiving build a new one.

>>> import numpy as np
>>> t = ImmutableBPlusTree(np.array([4.0, 1.0, 3.0]), np.array([0, 1, 2]))
>>> t.search(2.0, 5.0)
array([2, 0])
"""

from __future__ import annotations

import numpy as np

from splice.core.errors import PlanError
from splice.index._immutable import (
    FANOUT,
    LEAF_SIZE,
    MAX_LEVELS,
    ibt_build,
    ibt_search,
    inner_capacity,
)

__all__ = ["ImmutableBPlusTree", "FANOUT", "LEAF_SIZE"]


class ImmutableBPlusTree:
    """A search-only B+-Tree over ``(key, pos)`` entries, built once from unsorted input."""

    def __init__(self, keys: np.ndarray, positions: np.ndarray) -> None:
        ks = np.asarray(keys)
        if ks.dtype.kind in "iu":
            ks = ks.astype(np.int64)
        elif ks.dtype.kind == "f":
            ks = ks.astype(np.float64)
        else:
            raise PlanError(f"immutable B+-Tree keys must be numeric, got {ks.dtype}")
        ps = np.asarray(positions, np.int64)
        order = np.lexsort((ps, ks))
        self.keys = np.ascontiguousarray(ks[order])
        self.positions = np.ascontiguousarray(ps[order])
        n = len(self.keys)
        self.inner = np.zeros(inner_capacity(n), self.keys.dtype)
        self.loff = np.zeros(MAX_LEVELS, np.int64)
        self.lcnt = np.zeros(MAX_LEVELS, np.int64)
        self.levels = int(ibt_build(self.keys, n, self.inner, self.loff, self.lcnt))

    def search(self, lo: float, hi: float, plo: int = -(2**63), phi: int = 2**63 - 1) -> np.ndarray:
        """Positions (within ``[plo, phi]``) of entries with ``lo <= key <= hi``, in key order."""
        cap = 64
        t = self.keys.dtype.type
        while True:
            out = np.empty(cap, np.int64)
            n = ibt_search(self.keys, self.positions, 0, len(self.keys), self.inner, self.loff,
                           self.levels, t(lo), t(hi), plo, phi, out, 0)
            if n >= 0:
                return out[:n].copy()
            cap *= 4

    def __len__(self) -> int:
        return len(self.keys)
