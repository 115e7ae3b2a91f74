"""Obvious implementations of group-by, order-by, top-k and windowed aggregation: loops over rows.

Values are Python objects (``Decimal`` for decimals, so arithmetic is exact); each aggregate is
given as ``(name, func, fn)`` where ``fn(row) -> value`` computes its input from a row dict
(``None`` for ``count(*)``).
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

decimal.getcontext().prec = 80

RefAgg = tuple[str, str, Callable[[dict[str, Any]], Any] | None]


def _finish(func: str, vals: list[Any], rows: int, avg_via_sum: bool) -> Any:
    if func == "count":
        return rows if vals is None else len(vals)
    if not vals:
        return None
    if func == "sum":
        return sum(vals[1:], vals[0])
    if func == "min":
        return min(vals)
    if func == "max":
        return max(vals)
    # avg
    if isinstance(vals[0], float):
        return sum(vals[1:], vals[0]) / len(vals)
    total = sum(vals[1:], vals[0])
    if avg_via_sum:
        return float(total) / len(vals)
    return float(Fraction(total) / len(vals))


def group_by(
    rows: Sequence[dict[str, Any]],
    keys: Sequence[str],
    aggs: Sequence[RefAgg],
    avg_via_sum: Sequence[bool] | None = None,
) -> list[tuple[Any, ...]]:
    """One tuple per group (keys..., aggregates...), groups in first-seen order.

    A null key is a key like any other (SQL). ``avg_via_sum[i]`` says whether aggregate ``i``
    (an avg) is computed as DuckDB does when the query also sums the same input.
    """
    via = list(avg_via_sum or [False] * len(aggs))
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for row in rows:
        k = tuple(row[c] for c in keys)
        state = groups.get(k)
        if state is None:
            state = groups[k] = [0] + [[] for _ in aggs]
        state[0] += 1
        for i, (_, _, fn) in enumerate(aggs):
            if fn is None:
                continue
            v = fn(row)
            if v is not None:
                state[i + 1].append(v)
    if not keys and not groups:
        groups[()] = [0] + [[] for _ in aggs]
    out = []
    for k, state in groups.items():
        vals = []
        for i, (_, func, fn) in enumerate(aggs):
            if fn is None:
                vals.append(state[0])
            else:
                vals.append(_finish(func, state[i + 1], state[0], via[i]))
        out.append(k + tuple(vals))
    return out


def _sort_key(row: dict[str, Any], keys: Sequence[tuple[str, str]]) -> tuple[Any, ...]:
    parts = []
    for col, order in keys:
        v = row[col]
        if v is None:
            parts.append((1, 0))
        elif order == "descending":
            parts.append((0, _Desc(v)))
        else:
            parts.append((0, v))
    return tuple(parts)


class _Desc:
    def __init__(self, v: Any):
        self.v = v

    def __lt__(self, other: _Desc) -> bool:
        return bool(self.v > other.v)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.v == other.v


def order_by(rows: Sequence[dict[str, Any]], keys: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Stable sort by ``keys`` ((col, 'ascending'|'descending')), nulls last."""
    return sorted(rows, key=lambda r: _sort_key(r, keys))


def top_k(rows: Sequence[dict[str, Any]], keys: Sequence[tuple[str, str]], k: int) -> list[dict[str, Any]]:
    return order_by(rows, keys)[:k]


def window_aggregate(
    records: Sequence[tuple[str, Any]],
    time_column: str,
    size: int,
    slide: int,
    keys: Sequence[str],
    aggs: Sequence[RefAgg],
    lateness: int = 0,
) -> tuple[list[tuple[Any, ...]], list[dict[str, Any]]]:
    """Replay ``records`` — ("row", dict) or ("wm", W) or ("end", None) — one at a time.

    Returns the emitted rows (window_start, window_end, keys..., aggs...) in emission order and
    the late rows in arrival order.
    """
    wm: int | None = None
    windows: dict[int, list[dict[str, Any]]] = {}
    out: list[tuple[Any, ...]] = []
    late: list[dict[str, Any]] = []

    def closed(s: int) -> bool:
        return wm is not None and s + size - 1 + lateness <= wm

    def emit(starts: list[int]) -> None:
        for s in sorted(starts):
            for g in group_by(windows.pop(s), keys, aggs):
                out.append((s, s + size) + g)

    for kind, val in records:
        if kind == "row":
            t = val[time_column]
            last = (t // slide) * slide
            if closed(last):
                late.append(val)
                continue
            s = last
            while s + size > t:
                if not closed(s):
                    windows.setdefault(s, []).append(val)
                s -= slide
        elif kind == "wm":
            if wm is None or val > wm:
                wm = val
            emit([s for s in windows if closed(s)])
        else:
            emit(list(windows))
    return out, late


def as_decimal(v: Any) -> Any:
    return Decimal(v) if isinstance(v, int | str) else v
