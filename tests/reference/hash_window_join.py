"""Nested-loop references for the windowed equi-joins: tuple at a time, lists, no indexes.

An arrival is ``(side, key)``: ``key`` is any value compared with ``==`` (an int, a string, a
tuple of several columns' values), or None for a null key (:func:`tuple_key` makes a
multi-column key None when any of its parts is null). The count-window join processes each
arrival as: compare with every tuple of the opposite window (oldest first), expire the oldest of
its own window when it holds ``w`` tuples, append. Output: ``(left seq, right seq)`` pairs in
output order, where ``seq`` numbers each side's tuples in arrival order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def tuple_key(parts: Sequence[Any]) -> tuple | None:
    """The key of a row with several key columns: None (never matches) when any part is null."""
    return None if any(p is None for p in parts) else tuple(parts)


def count_window_join(arrivals: Sequence[tuple[int, Any]], w: int) -> list[tuple[int, int]]:
    windows: list[list[tuple[int, Any]]] = [[], []]
    count = [0, 0]
    out = []
    for side, key in arrivals:
        seq = count[side]
        count[side] += 1
        for s, k in windows[1 - side]:
            if key is not None and k is not None and k == key:
                out.append((seq, s) if side == 0 else (s, seq))
        win = windows[side]
        if len(win) == w:
            win.pop(0)
        win.append((seq, key))
    return out


def time_window_join(
    events: Sequence[tuple[str, int, Any, int]], length: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """``events``: ("row", side, key, time) or ("wm", side, time, 0).

    A row with time <= its stream's watermark is late (returned as (side, seq)); otherwise it
    matches every stored opposite row with equal key and ``|dt| <= length``, then is stored.
    """
    stored: list[list[tuple[int, Any, int]]] = [[], []]
    wm = [None, None]
    count = [0, 0]
    out: list[tuple[int, int]] = []
    late: list[tuple[int, int]] = []
    for kind, side, a, b in events:
        if kind == "wm":
            if wm[side] is None or a > wm[side]:
                wm[side] = a
            continue
        key, t = a, b
        seq = count[side]
        count[side] += 1
        if wm[side] is not None and t <= wm[side]:
            late.append((side, seq))
            continue
        for s, k, ts in stored[1 - side]:
            if key is not None and k is not None and k == key and abs(t - ts) <= length:
                out.append((seq, s) if side == 0 else (s, seq))
        stored[side].append((seq, key, t))
    return out, late


def merged_order(left: Sequence[int] | None, right: Sequence[int] | None,
                 n: tuple[int, int] = (0, 0)) -> list[tuple[int, int]]:
    """Two inputs merged into one arrival order: ``(side, row)`` sorted by ``(value, side,
    row)``, so ties go left first. ``left``/``right`` are each input's order values (``None``
    for both: each row's own position, the ``n`` rows of each input)."""
    values = [list(range(n[0])), list(range(n[1]))] if left is None or right is None else [left, right]
    return [(s, i) for _, s, i in sorted((v, s, i) for s in (0, 1) for i, v in enumerate(values[s]))]
