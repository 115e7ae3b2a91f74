"""The two join inputs' arrival order: by ``arrival``, else ``time`` (ties left first), else
row ``i`` of the left just before row ``i`` of the right; and its runs of one side as batches."""

from __future__ import annotations

import pyarrow as pa

from splice.io.arrival import arrival_positions, interleave
from tests.reference.ordered_merge import merge_sources_py

LEFT = pa.table({"t": [3, 1, 1, 7], "a": [0, 2, 4, 6], "x": ["l0", "l1", "l2", "l3"]})
RIGHT = pa.table({"t": [1, 3, 9], "a": [1, 3, 5], "x": ["r0", "r1", "r2"]})


def _pairs(left: pa.Table, right: pa.Table, **order: str) -> list[tuple[int, int]]:
    sides, rows = arrival_positions(left, right, **order)
    assert sides.dtype.name == "int8"
    return list(zip(sides.tolist(), rows.tolist(), strict=True))


def test_arrival_orders() -> None:
    by_time = [LEFT.column("t").to_pylist(), RIGHT.column("t").to_pylist()]
    assert _pairs(LEFT, RIGHT, time="t") == merge_sources_py(by_time)
    assert _pairs(LEFT, RIGHT, time="t")[:3] == [(0, 1), (0, 2), (1, 0)]  # ties left first
    assert _pairs(LEFT, RIGHT, arrival="a", time="t") == [
        (0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (0, 3)]
    assert _pairs(LEFT, RIGHT) == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (0, 3)]
    assert _pairs(LEFT.slice(0, 0), RIGHT, time="t") == [(1, 0), (1, 1), (1, 2)]


def test_interleave_cuts_runs_of_one_side() -> None:
    runs = interleave(LEFT, RIGHT, time="t", batch_size=1)
    assert [(s, b.column("x").to_pylist()) for s, b in runs] == [
        (0, ["l1"]), (0, ["l2"]), (1, ["r0"]), (0, ["l0"]), (1, ["r1"]), (0, ["l3"]), (1, ["r2"])]
    runs = interleave(LEFT, RIGHT, time="t")
    assert [(s, b.column("x").to_pylist()) for s, b in runs] == [
        (0, ["l1", "l2"]), (1, ["r0"]), (0, ["l0"]), (1, ["r1"]), (0, ["l3"]), (1, ["r2"])]
