"""The ordered merge of several inputs, ties going to the lower input: by rows and by batches.

Semantics. Inputs ``0 .. k-1`` each hold rows with an order value ``v``. The merged order lists
every row once, by ``(v, input, row)``: ascending value, equal values from the lower input first
and, within one input, in its own row order. Every place that merges ordered inputs uses this one
rule: the two inputs of a join (:mod:`splice.io.arrival`, the arrival merge inside a join), the
sorted runs of an input ordered on disk (:mod:`splice.io.time_order`), a parallel join's
per-unit matches.

* :func:`merge_order` and :func:`merge_sources` give the merged order of whole value arrays. It is
  the stable sort of the inputs laid end to end, so it is defined whether or not each input is in
  order; when they are, it is their merge, and the adaptive stable sort NumPy uses for it finds
  each input's run and merges the runs (about linear in the rows for a few inputs). With ``ties``,
  rows of equal value go by a second order value first, then by input and row.
* :func:`batch_turns` is the same rule at the granularity of batches, for a path that carries whole
  batches of one input: the next batch always comes from the input whose next batch starts
  earliest (ties: the lower input), so the inputs advance together; with no order column, from
  the input that has sent the fewest rows, which is the same rule with each row's order value its
  input's running row count.

>>> import numpy as np
>>> merge_sources([np.array([1, 5, 9]), np.array([1, 6])])   # (input, row), ties left first
(array([0, 1, 0, 1, 0]), array([0, 0, 1, 1, 2]))
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from splice.core.errors import PlanError
from splice.core.time import time_values

__all__ = ["merge_order", "merge_sources", "batch_turns"]


def _laid_end_to_end(arrays: Sequence[np.ndarray]) -> np.ndarray:
    if len(arrays) == 1:
        return np.asarray(arrays[0])
    return np.concatenate([np.asarray(a) for a in arrays])


def merge_order(values: Sequence[np.ndarray], ties: Sequence[np.ndarray] | None = None
                ) -> np.ndarray:
    """The merged order of the inputs' rows (see the module doc) as indexes into the inputs laid
    end to end (``np.concatenate(values)``): ordered by value, then by ``ties`` (one more value
    per row, each input given one array as long as its values) when given, then by input, then
    by row. A plain stable sort, so inputs out of order are ordered too."""
    if len(values) == 0:
        return np.zeros(0, np.intp)
    joined = _laid_end_to_end(values)
    if ties is None:
        return np.argsort(joined, kind="stable")
    if len(ties) != len(values) or any(len(t) != len(v) for t, v in zip(ties, values, strict=True)):
        raise PlanError("an ordered merge's ties need one array per input, as long as its values")
    # lexsort is stable and its last key is the primary one: equal (value, tie) keep input order
    return np.lexsort((_laid_end_to_end(ties), joined))


def merge_sources(values: Sequence[np.ndarray], ties: Sequence[np.ndarray] | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``(input, row)`` of every row of the merged order (:func:`merge_order`): ``input[i]`` is
    the input the ``i``-th row comes from and ``row[i]`` its row there. With every input in
    order the merge keeps each input's rows in their own order, so ``np.flatnonzero(input == s)``
    are then input ``s``'s places."""
    order = merge_order(values, ties)
    lengths = np.array([len(v) for v in values], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    inputs = np.repeat(np.arange(len(values)), lengths)[order]
    return inputs, order - starts[inputs]


def batch_turns(inputs: Sequence[Iterable[pa.RecordBatch]],
                order: str | Sequence[str] | None = None,
                names: Sequence[str] | None = None) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The batches of every input as ``(input, batch)``, each input's in its own order, the next
    always from the input whose next batch starts earliest (its least value in column ``order``,
    as :func:`~splice.core.time.time_values` reads it, or in its own column when ``order`` names
    one per input; ties: the lower input), or, with ``order``
    ``None``, from the input that has sent the fewest rows (ties: the lower input). Batches
    without rows have no place in the order and are dropped. ``names`` name the inputs in errors
    (default: their numbers). Each input's next batch is read before the turn is taken, so a
    batch without the column fails before any batch after it is given."""
    labels = [str(n) for n in names] if names is not None else [str(i) for i in range(len(inputs))]
    if len(labels) != len(inputs):
        raise PlanError(f"batch turns: {len(labels)} names for {len(inputs)} inputs")
    columns: list[str] | None = None
    if order is not None:
        columns = [order] * len(inputs) if isinstance(order, str) else list(order)
        if len(columns) != len(inputs):
            raise PlanError(f"batch turns: {len(columns)} order columns for {len(inputs)} inputs")
    its = [iter(batches) for batches in inputs]
    heads: list[pa.RecordBatch | None] = [None] * len(its)
    keys = [0] * len(its)  # the start of each input's next batch, or the rows it has sent

    def pull(s: int) -> None:
        heads[s] = next((b for b in its[s] if b.num_rows), None)
        head = heads[s]
        if head is not None and columns is not None:
            keys[s] = int(np.min(time_values(head, columns[s], labels[s])))

    for s in range(len(its)):
        pull(s)
    while True:
        live = [s for s, h in enumerate(heads) if h is not None]
        if not live:
            return
        side = min(live, key=lambda s: (keys[s], s))
        batch = heads[side]
        assert batch is not None
        yield side, batch
        if columns is None:
            keys[side] += batch.num_rows
        pull(side)
