"""Plain-Python references of the ordered merge (:mod:`splice.core.ordered_merge`)."""

from __future__ import annotations

from collections.abc import Sequence


def merge_sources_py(values: Sequence[Sequence[int]],
                     ties: Sequence[Sequence[int]] | None = None) -> list[tuple[int, int]]:
    """``(input, row)`` of every row, by ``(value, tie, input, row)``: one Python sort."""
    rows = [(v, ties[i][r] if ties is not None else 0, i, r)
            for i, vs in enumerate(values) for r, v in enumerate(vs)]
    return [(i, r) for _, _, i, r in sorted(rows)]


def batch_turns_py(batches: Sequence[Sequence[Sequence[int]]], by_rows: bool
                   ) -> list[tuple[int, int]]:
    """``(input, batch number)`` of every non-empty batch in the order of the turns: each input's
    batches (lists of order values) in their order, the next from the input whose next batch has
    the least value (``by_rows``: that has sent the fewest values), ties to the lower input."""
    queues = [[(n, b) for n, b in enumerate(bs) if b] for bs in batches]
    sent = [0] * len(queues)
    out: list[tuple[int, int]] = []
    while any(queues):
        def key(s: int) -> tuple[int, int]:
            return (sent[s] if by_rows else min(queues[s][0][1]), s)
        side = min((s for s in range(len(queues)) if queues[s]), key=key)
        n, b = queues[side].pop(0)
        sent[side] += len(b)
        out.append((side, n))
    return out
