"""SplitJoin across processing units (Diba section 5.4): every PU probes, each PU stores a share.

With ``P`` PUs, tuple number ``n`` of a stream is stored by PU ``n mod P`` only, and expires
there when tuple ``n + w`` of the same stream arrives (every PU sees every tuple, so each knows
the global count). The union of the PUs' sub-windows is therefore exactly the count window
``n - w + 1 .. n``, every PU probes each arriving tuple against its sub-window, and the merged
matches (ordered by arrival, then by matched tuple) are identical to the single-PU join's.

The PUs run their numba kernels on threads (the kernels release the GIL).

>>> import numpy as np
>>> from splice.joins.hash.hash_window_join import FastIndex
>>> ix = SplitIndex(lambda pu, parts: FastIndex(1, 4, pu=pu, parts=parts), parts=3)
>>> ix.insert(np.arange(6), np.array([[1, 1, 2, 1, 1, 1]]), np.ones((1, 6), bool))
>>> ix.probe(0, np.array([1]), np.array([True]))[1]  # window holds tuples 2..5
array([3, 4, 5])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from splice.core.ordered_merge import merge_order
from splice.kernels.team import ThreadTeam

__all__ = ["SplitIndex", "HashIndex", "merge_matches"]


class HashIndex(Protocol):
    """What a join stage needs from a window index (fast index, HB-SJ, SplitJoin)."""

    kind: str

    def insert(self, seqs: np.ndarray, keys: np.ndarray, valid: np.ndarray, expire: bool = True) -> None: ...

    def probe(self, attr: int, keys: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def live_seqs(self) -> np.ndarray: ...

    def stats(self) -> list[dict[str, Any]]: ...

    def counters(self) -> np.ndarray: ...

    def set_counters(self, counters: np.ndarray) -> None: ...


def merge_matches(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Merge per-PU (probe index, seq) lists, each in that order, into one ordered by probe
    index, then seq (:func:`~splice.core.ordered_merge.merge_order` with the seqs as ties; a
    seq is stored by one PU only, so no two rows tie on both)."""
    probes, seqs = [p[0] for p in parts], [p[1] for p in parts]
    order = merge_order(probes, ties=seqs)
    return np.concatenate(probes)[order], np.concatenate(seqs)[order]


class SplitIndex:
    """``parts`` sub-window indexes built by ``make(pu, parts)``, probed and updated together."""

    def __init__(self, make: Callable[[int, int], HashIndex], parts: int) -> None:
        self.parts = parts
        self.pus = [make(pu, parts) for pu in range(parts)]
        self.kind = self.pus[0].kind
        self._team: ThreadTeam | None = None

    def _map(self, fn: Callable[[HashIndex], Any]) -> list[Any]:
        if self.parts == 1:
            return [fn(self.pus[0])]
        if self._team is None:
            self._team = ThreadTeam(self.parts, "splitjoin-pu")
        return self._team.run(lambda pu: fn(self.pus[pu]))

    def insert(self, seqs: np.ndarray, keys: np.ndarray, valid: np.ndarray, expire: bool = True) -> None:
        self._map(lambda ix: ix.insert(seqs, keys, valid, expire))

    def probe(self, attr: int, keys: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return merge_matches(self._map(lambda ix: ix.probe(attr, keys, valid)))

    def live_seqs(self) -> np.ndarray:
        return np.sort(np.concatenate([ix.live_seqs() for ix in self.pus]))

    def stats(self) -> list[dict[str, Any]]:
        """Per attribute, the PUs' statistics summed (``per_pu`` keeps each PU's)."""
        per = [ix.stats() for ix in self.pus]
        out: list[dict[str, Any]] = []
        for a in range(len(per[0])):
            total: dict[str, Any] = {}
            for k, v in per[0][a].items():
                if isinstance(v, list):
                    total[k] = [sum(p[a][k][j] for p in per) for j in range(len(v))]
                else:
                    total[k] = sum(p[a][k] for p in per)
            total["per_pu"] = [p[a] for p in per]
            out.append(total)
        return out

    def counters(self) -> np.ndarray:
        return np.stack([ix.counters() for ix in self.pus])

    def set_counters(self, counters: np.ndarray) -> None:
        for ix, c in zip(self.pus, counters, strict=True):
            ix.set_counters(c)

    def close(self) -> None:
        if self._team is not None:
            self._team.close()
            self._team = None
