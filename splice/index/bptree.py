"""The classic B+-Tree: explicit child references, incremental insert and delete.

Entries are ``(key, pos)`` pairs (pos: a window position, unique), kept in ``(key, pos)`` order in
leaves linked left to right; ``search(lo, hi)`` returns the positions of entries with
``lo <= key <= hi`` in key order. The nodes live in a preallocated pool (numba arrays, see
:mod:`splice.index._bptree`); the pool grows by 1.5x when an insert would run it dry.

>>> import numpy as np
>>> t = BPlusTree()
>>> t.insert(np.array([3.0, 1.0, 2.0]), np.array([0, 1, 2]))
>>> t.search(1.5, 3.0)
array([2, 0])
>>> t.delete(np.array([2.0]), np.array([2]))
1
>>> len(t), t.search(0.0, 9.0)
(2, array([1, 0]))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from splice.core.errors import PlanError
from splice.index._bptree import (
    P_CAP,
    T_HEIGHT,
    T_SIZE,
    bpt_delete_many,
    bpt_insert_many,
    bpt_search,
    new_pool,
)

__all__ = ["BPlusTree"]

_insert_many: Any = bpt_insert_many
_delete_many: Any = bpt_delete_many


class BPlusTree:
    """A B+-Tree over ``(key, pos)`` entries with ``int64`` or ``float64`` keys."""

    def __init__(self, dtype: np.dtype | type = np.float64, capacity: int = 64) -> None:
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.dtype(np.int64), np.dtype(np.float64)):
            raise PlanError(f"B+-Tree keys are int64 or float64, got {self.dtype}")
        self._pool = new_pool(capacity, 1, self.dtype)
        self._path = np.zeros(1024, np.int64)

    def _grow(self) -> None:
        old = self._pool
        cap = old[0].shape[0]
        new = list(new_pool(cap * 2, 1, self.dtype))
        for a, b in zip(old[:6], new[:6], strict=True):
            b[:cap] = a
        pmeta = old[6].copy()
        pmeta[P_CAP] = cap * 2
        self._pool = tuple(new[:6]) + (pmeta, old[7])

    def insert(self, keys: np.ndarray, positions: np.ndarray) -> None:
        """Insert the entries ``(keys[i], positions[i])``."""
        ks = np.ascontiguousarray(keys, self.dtype)
        ps = np.ascontiguousarray(positions, np.int64)
        done = 0
        while done < len(ks):
            done = _insert_many(*self._pool, 0, ks, ps, done, self._path)
            if done < len(ks):
                self._grow()

    def delete(self, keys: np.ndarray, positions: np.ndarray) -> int:
        """Delete the entries ``(keys[i], positions[i])``; return how many were present."""
        ks = np.ascontiguousarray(keys, self.dtype)
        ps = np.ascontiguousarray(positions, np.int64)
        return int(_delete_many(*self._pool, 0, ks, ps, self._path))

    def search(self, lo: float, hi: float, plo: int = -(2**63), phi: int = 2**63 - 1) -> np.ndarray:
        """Positions (within ``[plo, phi]``) of entries with ``lo <= key <= hi``, in key order."""
        keys, poss, child, cnt, nxt, prv, pmeta, tmeta = self._pool
        cap = 64
        while True:
            out = np.empty(cap, np.int64)
            n = bpt_search(keys, poss, child, cnt, nxt, tmeta, 0, self.dtype.type(lo),
                           self.dtype.type(hi), plo, phi, out, 0)
            if n >= 0:
                return out[:n].copy()
            cap *= 4

    def __len__(self) -> int:
        return int(self._pool[7][0, T_SIZE])

    @property
    def height(self) -> int:
        """Levels of the tree (1: the root is a leaf; 0: empty)."""
        return int(self._pool[7][0, T_HEIGHT])
