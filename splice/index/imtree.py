"""IM-Tree and PIM-Tree: an insert-efficient ``T_I`` merged periodically into a search-efficient
``T_S``.

Every new tuple enters ``T_I`` (a B+-Tree). When ``T_I`` holds ``ceil(m * w)`` entries (``m`` =
merge ratio, ``0 < m <= 1``) it is merged into ``T_S`` (an immutable B+-Tree): one sorted merge
that also drops the expired entries of ``T_S``. Between merges, expired entries are filtered out of
search results by their window position. A search visits ``T_S`` and ``T_I``.

The **PIM-Tree** splits ``T_I`` into one B+-Tree per inner node of ``T_S`` at insertion depth
``D_I`` (root = depth 0): partition ``q`` takes the keys that a descent of ``T_S`` routes to node
``q``, so the partitions cover disjoint key ranges that follow the window's key distribution; they
are re-derived from the new ``T_S`` at every merge. Disjoint partitions are what lets the parallel
join lock one small tree per operation (:mod:`splice.joins.band.parallel_band`).

>>> import numpy as np
>>> ix = PIMTree(window=1000, merge_ratio=0.25, insertion_depth=1)
>>> ix.insert(np.arange(3000, dtype=np.float64) % 997)
>>> ix.search(10.0, 12.0), ix.merges > 0
(array([2004, 2005, 2006]), True)
"""

from __future__ import annotations

import numpy as np

from splice.index.window_index import WindowIndex

__all__ = ["IMTree", "PIMTree"]


class IMTree(WindowIndex):
    """IM-Tree over a sliding window of ``window`` keys (see the module docstring)."""

    def __init__(
        self, window: int, merge_ratio: float = 0.125, dtype: np.dtype | type = np.float64
    ) -> None:
        super().__init__("imtree", window, dtype, merge_ratio=merge_ratio)


class PIMTree(WindowIndex):
    """PIM-Tree over a sliding window of ``window`` keys (see the module docstring)."""

    def __init__(
        self,
        window: int,
        merge_ratio: float = 0.125,
        insertion_depth: int = 1,
        dtype: np.dtype | type = np.float64,
    ) -> None:
        super().__init__(
            "pimtree", window, dtype, merge_ratio=merge_ratio, insertion_depth=insertion_depth
        )
