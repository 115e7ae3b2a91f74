"""The ordered merge against plain-Python references: duplicates, empty inputs, skewed sizes,
many inputs, inputs out of order, ties; and the batch turns of the two join paths."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from splice.core.errors import PlanError, SchemaError
from splice.core.ordered_merge import batch_turns, merge_order, merge_sources
from tests.reference.ordered_merge import batch_turns_py, merge_sources_py

# small value ranges make many duplicates; sizes from 0 to 60 make empty and skewed inputs
VALUES = st.lists(st.integers(-5, 5) | st.integers(-(2**62), 2**62), max_size=60)
SORTED_INPUTS = st.lists(VALUES.map(sorted), max_size=12)
ANY_INPUTS = st.lists(VALUES, max_size=12)


def _arrays(inputs: list[list[int]]) -> list[np.ndarray]:
    return [np.array(v, dtype=np.int64) for v in inputs]


def _pairs(inputs: np.ndarray, rows: np.ndarray) -> list[tuple[int, int]]:
    return list(zip(inputs.tolist(), rows.tolist(), strict=True))


@given(SORTED_INPUTS)
def test_merge_of_sorted_inputs_is_the_sort_by_value_input_row(inputs: list[list[int]]) -> None:
    got = merge_sources(_arrays(inputs))
    assert _pairs(*got) == merge_sources_py(inputs)


@given(ANY_INPUTS)
def test_inputs_out_of_order_are_sorted_stably(inputs: list[list[int]]) -> None:
    arrays = _arrays(inputs)
    assert _pairs(*merge_sources(arrays)) == merge_sources_py(inputs)
    if inputs:
        joined = np.concatenate(arrays)
        assert np.array_equal(merge_order(arrays), np.argsort(joined, kind="stable"))


@st.composite
def inputs_with_ties(draw: st.DrawFn) -> tuple[list[list[int]], list[list[int]]]:
    k = draw(st.integers(1, 8))
    values: list[list[int]] = []
    ties: list[list[int]] = []
    for _ in range(k):
        pairs = sorted(draw(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 6)), max_size=40)))
        values.append([v for v, _ in pairs])
        ties.append([t for _, t in pairs])
    return values, ties


@given(inputs_with_ties())
def test_equal_values_go_by_the_ties_then_input_and_row(
        case: tuple[list[list[int]], list[list[int]]]) -> None:
    values, ties = case
    got = merge_sources(_arrays(values), _arrays(ties))
    assert _pairs(*got) == merge_sources_py(values, ties)


def test_merge_edges() -> None:
    assert merge_order([]).tolist() == []
    empty = np.zeros(0, np.int64)
    inputs, rows = merge_sources([empty, np.array([3, 3]), empty, np.array([3])])
    assert inputs.tolist() == [1, 1, 3] and rows.tolist() == [0, 1, 0]
    # a merge keeps each input's rows in their order: its places are where it occurs
    inputs, _ = merge_sources([np.array([1, 4, 4]), np.array([0, 4, 9])])
    assert np.flatnonzero(inputs == 0).tolist() == [1, 2, 3]
    assert np.flatnonzero(inputs == 1).tolist() == [0, 4, 5]


# -- batch turns ------------------------------------------------------------------------------


@st.composite
def batched_inputs(draw: st.DrawFn, in_order: bool) -> list[list[list[int]]]:
    """Inputs as lists of batches (some empty) of order values."""
    inputs: list[list[list[int]]] = []
    for _ in range(draw(st.integers(0, 6))):
        values = draw(st.lists(st.integers(0, 20), max_size=50))
        if in_order:
            values.sort()
        cuts = sorted(draw(st.lists(st.integers(0, len(values)), max_size=6)))
        bounds = [0, *cuts, len(values)]
        inputs.append([values[a:b] for a, b in zip(bounds, bounds[1:], strict=False)])
    return inputs


def _batches(inp: list[list[int]]) -> list[pa.RecordBatch]:
    return [pa.record_batch({"t": pa.array(b, pa.int64())}) for b in inp]


def _turns(inputs: list[list[list[int]]], order: str | None) -> list[tuple[int, list[int]]]:
    return [(s, b.column("t").to_pylist())
            for s, b in batch_turns([_batches(inp) for inp in inputs], order)]


def _expected(inputs: list[list[list[int]]], by_rows: bool) -> list[tuple[int, list[int]]]:
    return [(s, inputs[s][n]) for s, n in batch_turns_py(inputs, by_rows)]


@given(batched_inputs(in_order=False), st.booleans())
def test_batch_turns_follow_the_earliest_next_batch(inputs: list[list[list[int]]],
                                                    by_rows: bool) -> None:
    assert _turns(inputs, None if by_rows else "t") == _expected(inputs, by_rows)


@given(batched_inputs(in_order=True))
def test_turns_of_ordered_inputs_sort_batches_by_start_then_input(
        inputs: list[list[list[int]]]) -> None:
    """With each input in order, the turns list the batches by (first value, input, batch)."""
    keyed = sorted((b[0], s, n) for s, inp in enumerate(inputs) for n, b in enumerate(inp) if b)
    assert _turns(inputs, "t") == [(s, inputs[s][n]) for _, s, n in keyed]


def test_turns_without_a_column_are_the_position_order() -> None:
    """By rows sent: a batch's turn is the position of its first row, ties to the lower input,
    which is the order value ``POSITION`` gives each row."""
    inputs = [[[0] * 3, [0] * 3], [[0] * 2, [0] * 5], [[0] * 6]]
    got = [(s, len(b)) for s, b in _turns_raw(inputs)]
    assert got == [(0, 3), (1, 2), (2, 6), (1, 5), (0, 3)]


def _turns_raw(inputs: list[list[list[int]]]) -> list[tuple[int, list[int]]]:
    return [(s, b.column("t").to_pylist())
            for s, b in batch_turns([_batches(inp) for inp in inputs])]


def test_batch_turns_name_the_input_without_the_column() -> None:
    good = [pa.record_batch({"t": [1]})]
    bad = [pa.record_batch({"u": [1]})]
    with pytest.raises(SchemaError, match="'right'"):
        list(batch_turns([good, bad], "t", names=["left", "right"]))


@given(batched_inputs(in_order=True))
def test_turns_read_each_inputs_own_order_column(inputs: list[list[list[int]]]) -> None:
    """Inputs whose times sit in columns of different names take the same turns as inputs that
    share one name."""
    renamed = [[b.rename_columns([f"t{s}"]) for b in _batches(inp)] for s, inp in enumerate(inputs)]
    got = [(s, b.column(0).to_pylist())
           for s, b in batch_turns(renamed, [f"t{s}" for s in range(len(inputs))])]
    assert got == _turns(inputs, "t")
    with pytest.raises(PlanError, match="order columns for"):
        list(batch_turns(renamed, ["t0"] * (len(inputs) + 1)))
