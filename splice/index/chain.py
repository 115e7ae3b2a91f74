"""Chained index over a sliding window: B-chain and IB-chain.

The window is covered by a chain of ``chain_length`` links (subindexes), each taking
``ceil(w / (chain_length - 1))`` consecutive arrivals. New tuples go to the active (newest) link, a
B+-Tree; a link is disposed of as a whole once all its tuples have expired (coarse-grained
disposal, no per-tuple deletes). Searches visit every link and filter expired positions. In the
**B-chain** archived links stay B+-Trees; in the **IB-chain** a link is converted into an
immutable B+-Tree when it is archived, which makes the (more frequent) searches cheaper.

>>> import numpy as np
>>> ix = ChainedIndex(window=4, chain_length=3, immutable=True)
>>> ix.insert(np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
>>> ix.search(0.0, 10.0), ix.links
(array([2, 3, 4, 5]), 2)
"""

from __future__ import annotations

import numpy as np

from splice.index.window_index import WindowIndex

__all__ = ["ChainedIndex"]


class ChainedIndex(WindowIndex):
    """B-chain (``immutable=False``) or IB-chain (``immutable=True``) over a window of ``w``."""

    def __init__(
        self,
        window: int,
        chain_length: int = 2,
        immutable: bool = True,
        dtype: np.dtype | type = np.float64,
    ) -> None:
        super().__init__(
            "ibchain" if immutable else "bchain", window, dtype, chain_length=chain_length
        )
