"""Allocator tuning for batch-at-a-time kernels.

Every batch allocates a few dozen arrays of ops-count length. glibc serves allocations above
128 KiB with fresh ``mmap`` pages and returns them on free, so each batch pays a page fault per
4 KiB touched, which at the rates the kernels reach costs more than the kernels themselves.
:func:`keep_freed_memory` raises the mmap and trim thresholds so freed blocks stay in the heap
and are reused. It is process-wide, so the engine never calls it on its own: the ``splice txn``
command and the benchmarks do.
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["keep_freed_memory"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_freed_memory(limit_bytes: int = 1 << 30) -> bool:
    """Serve allocations below ``limit_bytes`` from the heap and keep freed memory for reuse.

    Returns False where the C library has no ``mallopt`` (not glibc); nothing changes then.
    """
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, limit_bytes) == 1
    return bool(ok and mallopt(_M_TRIM_THRESHOLD, limit_bytes) == 1)
