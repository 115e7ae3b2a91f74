"""Large scratch and result arrays from Arrow's memory pool instead of the C library's heap.

A join call of millions of tuples writes its matches into arrays of tens of megabytes. Made by
``np.empty``, each such array is a fresh ``mmap`` that glibc unmaps again when it is freed, and
NumPy asks the kernel for huge pages on it: the first write of every page is a fault, and where
the kernel compacts memory to find a huge page, the faults can cost more than the join's own
work (docs/lab/band-joins.md, "Fresh memory: result arrays from Arrow's pool"). Arrow's pool
(mimalloc or jemalloc) keeps freed memory for the next allocation, so a call's arrays are
pages the previous call already faulted in. Small arrays stay with ``np.empty``, which is
cheaper to call.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["POOL_MIN_BYTES", "empty", "grown", "room_for_rest"]

#: Arrays of at least this many bytes come from Arrow's memory pool.
POOL_MIN_BYTES = 1 << 20


def empty(n: int, dtype: np.dtype | type = np.int64) -> np.ndarray:
    """An uninitialized, writable array of ``n`` values (64-byte aligned from the pool)."""
    dt = np.dtype(dtype)
    nbytes = int(n) * dt.itemsize
    if nbytes < POOL_MIN_BYTES:
        return np.empty(n, dt)
    return np.frombuffer(pa.allocate_buffer(nbytes), dt)


def grown(a: np.ndarray, keep: int, n: int) -> np.ndarray:
    """A new array of ``n`` values whose first ``keep`` are ``a``'s."""
    out = empty(n, a.dtype)
    out[:keep] = a[:keep]
    return out


def room_for_rest(cap: int, rows: int, done: int, total: int) -> int:
    """The capacity to grow a call's full result arrays to: ``rows`` rows from its first
    ``done`` of ``total`` inputs, the rest expected at that rate (a tenth more), at least half
    again ``cap``. Doubling instead, a call of millions of inputs that overran its estimate by
    a little wrote into twice the memory it needed, every page of it fresh."""
    rest = (total - done) * rows / max(done, 1)
    return max(cap + cap // 2, rows + int(1.1 * rest) + 1024)
