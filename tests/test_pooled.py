"""Result arrays from Arrow's memory pool: writable, aligned, grown with their prefix, sized for
the rest of a call."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

import splice.kernels.pools as pooled


def test_large_arrays_come_from_the_pool_small_ones_from_numpy():
    before = pa.total_allocated_bytes()
    big = pooled.empty(pooled.POOL_MIN_BYTES // 8)
    assert isinstance(big.base, pa.Buffer)
    assert pa.total_allocated_bytes() - before >= pooled.POOL_MIN_BYTES
    assert big.flags.writeable and big.ctypes.data % 64 == 0
    big[:] = 7
    small = pooled.empty(10, np.int32)
    assert small.dtype == np.int32 and small.flags.writeable and not isinstance(small.base,
                                                                                pa.Buffer)
    del big
    assert pa.total_allocated_bytes() == before


@given(st.integers(0, 300_000), st.data())
def test_grown_keeps_the_prefix(n, data):
    a = pooled.empty(n)
    a[:] = np.arange(n)
    keep = data.draw(st.integers(0, n))
    size = data.draw(st.integers(keep, 2 * n + 1))
    b = pooled.grown(a, keep, size)
    assert len(b) == size and b.flags.writeable
    assert np.array_equal(b[:keep], np.arange(keep))


@given(st.integers(1, 10**7), st.integers(0, 10**7), st.integers(0, 10**6), st.integers(0, 10**6))
def test_room_for_the_rest_of_a_call(cap, rows, done, more):
    total = done + more
    got = pooled.room_for_rest(cap, rows, done, total)
    assert got >= cap + cap // 2
    assert got >= rows + 1024
    if done:  # the rest at the rate so far fits
        assert got >= rows + more * rows / done
