"""Reference for the index structures: a sorted Python list of ``(key, pos)`` entries."""

from __future__ import annotations

import bisect


class SortedListIndex:
    """Insert, delete and range search over ``(key, pos)`` entries, kept sorted by ``bisect``."""

    def __init__(self) -> None:
        self.entries: list[tuple[float, int]] = []

    def insert(self, key: float, pos: int) -> None:
        bisect.insort(self.entries, (key, pos))

    def delete(self, key: float, pos: int) -> bool:
        i = bisect.bisect_left(self.entries, (key, pos))
        if i < len(self.entries) and self.entries[i] == (key, pos):
            del self.entries[i]
            return True
        return False

    def search(self, lo: float, hi: float) -> list[int]:
        """Positions of entries with ``lo <= key <= hi``, in key order."""
        return [p for k, p in self.entries if lo <= k <= hi]


class SlidingWindowReference:
    """The last ``w`` keys of a stream by arrival position; search returns positions ascending."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.keys: list[float] = []

    def insert(self, key: float) -> None:
        self.keys.append(key)

    def search(self, lo: float, hi: float) -> list[int]:
        start = max(0, len(self.keys) - self.window)
        return [p for p in range(start, len(self.keys)) if lo <= self.keys[p] <= hi]
