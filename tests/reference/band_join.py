"""Reference for the band join: the nested-loop window join (NLWJ), tuple at a time."""

from __future__ import annotations

import math


def _matchable(x: float | None) -> bool:
    """A null, NaN or infinite key never matches (it still takes its window position)."""
    return x is not None and math.isfinite(x)


def nested_loop_band_join(
    sides: list[int],
    keys: list[float],
    windows: tuple[int, int],
    lower: float,
    upper: float,
    self_join: bool = False,
) -> list[tuple[int, int]]:
    """``(g, partner position)`` pairs in arrival order, partners oldest first.

    A left key x and a right key y match when ``x + lower <= y <= x + upper``, computed as
    written (for float keys too), whichever of the two arrives first: a tuple of side 0 (key x)
    matches window tuples y of side 1 with it, a tuple of side 1 (key y) matches side-0 tuples x
    with it. Self-join: every tuple is side 0 and matches the earlier tuples b of its window with
    ``x + lower <= b <= x + upper``. A key that is None, NaN or infinite matches nothing.
    """
    seen: list[list[float]] = [[], []]
    out: list[tuple[int, int]] = []
    for g, (s, x) in enumerate(zip(sides, keys, strict=True)):
        if not _matchable(x):
            seen[0 if self_join else s].append(x)
            continue
        if self_join:
            s = 0
            other = seen[0]
            w = windows[0]
        else:
            other = seen[1 - s]
            w = windows[1 - s]
        for pos in range(max(0, len(other) - w), len(other)):
            y = other[pos]
            if not _matchable(y):
                continue
            left, right = (x, y) if s == 0 else (y, x)
            if left + lower <= right <= left + upper:
                out.append((g, pos))
        seen[s].append(x)
    return out


def nested_loop_band_time_join(
    sides: list[int],
    keys: list[float],
    times: list[int],
    length: int,
    lower: float,
    upper: float,
    self_join: bool = False,
) -> list[tuple[int, int]]:
    """Time windows: ``(g, partner position)`` pairs in arrival order, partners oldest first.

    Tuple ``g`` pairs with every earlier tuple of the other stream (its own for a self-join)
    whose key satisfies the band predicate as in :func:`nested_loop_band_join` and whose time
    differs from ``g``'s by at most ``length``. Positions count each stream's tuples. A key that
    is None, NaN or infinite matches nothing.
    """
    seen: list[list[tuple[float, int]]] = [[], []]
    out: list[tuple[int, int]] = []
    for g, (s, x, t) in enumerate(zip(sides, keys, times, strict=True)):
        if self_join:
            s = 0
        other = seen[0] if self_join else seen[1 - s]
        for pos, (y, ty) in enumerate(other):
            if not (_matchable(x) and _matchable(y)):
                continue
            d = (y - x) if s == 0 else (x - y)
            if lower <= d <= upper and abs(t - ty) <= length:
                out.append((g, pos))
        seen[s].append((x, t))
    return out


def window_band_join(
    sides: list[int],
    keys: list[float],
    windows: tuple[int, int],
    lower: float,
    upper: float,
    self_join: bool = False,
) -> list[tuple[int, int]]:
    """:func:`nested_loop_band_join` comparing each tuple's window in one NumPy expression: the
    same pairs in the same order, fast enough for windows of thousands of tuples."""
    import numpy as np

    streams = [0] * len(sides) if self_join else list(sides)
    by_stream = [np.asarray([k for s, k in zip(streams, keys, strict=True) if s == t],
                            dtype=np.float64) for t in (0, 1)]
    count = [0, 0]
    out: list[tuple[int, int]] = []
    for g, (s, x) in enumerate(zip(streams, keys, strict=True)):
        o = s if self_join else 1 - s
        first = max(0, count[o] - windows[o])
        y = by_stream[o][first : count[o]]
        if s == 0:
            ok = (x + lower <= y) & (y <= x + upper)
        else:
            ok = (y + lower <= x) & (x <= y + upper)
        out += [(g, first + int(i)) for i in np.flatnonzero(ok)]
        count[s] += 1
    return out
