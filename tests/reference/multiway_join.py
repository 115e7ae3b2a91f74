"""Nested-loop reference of the N-way count-window equi-join (Circular-MJ semantics).

Streams are numbered 0..N-1; a predicate ``(a, col_a, b, col_b)`` requires equal, non-null
values. An arriving tuple of stream X joins every combination of the tuples currently in the
other streams' windows that satisfies all predicates; then X's oldest tuple expires when its
window holds ``w`` tuples, and the new tuple is appended. Returns one tuple of per-stream
sequence numbers per result (as a multiset: order is not compared).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any


def multiway_count_join(
    n: int,
    predicates: Sequence[tuple[int, str, int, str]],
    arrivals: Sequence[tuple[int, Mapping[str, Any]]],
    window: int | None,
) -> list[tuple[int, ...]]:
    windows: list[list[tuple[int, Mapping[str, Any]]]] = [[] for _ in range(n)]
    count = [0] * n
    out = []
    for x, row in arrivals:
        seq = count[x]
        count[x] += 1
        others = [windows[i] if i != x else [(seq, row)] for i in range(n)]
        for combo in itertools.product(*others):
            ok = True
            for a, ca, b, cb in predicates:
                va, vb = combo[a][1][ca], combo[b][1][cb]
                if va is None or vb is None or va != vb:
                    ok = False
                    break
            if ok:
                out.append(tuple(c[0] for c in combo))
        if window is not None and len(windows[x]) == window:
            windows[x].pop(0)
        windows[x].append((seq, row))
    return out
