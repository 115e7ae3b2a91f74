"""The decorator of the index and band-join kernels: ``njit(cache=True, nogil=True)`` without NRT.

Hot kernels take many arrays; with numba's reference counting (NRT) every call increments and
decrements each array argument atomically, which cost more than the tree descent itself. These
kernels never allocate, so they are compiled without NRT (callees inherit that); the few that
must allocate stay plain ``njit``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from splice.kernels.numba_internals import NO_NRT

__all__ = ["kernel", "kernel_input"]


def kernel(**options: Any) -> Any:
    """``njit(cache=True, nogil=True, _nrt=False, **options)``."""
    flags: dict[str, Any] = {"cache": True, "nogil": True, **NO_NRT, **options}
    return njit(**flags)


def kernel_input(values: Any, dtype: Any) -> np.ndarray:
    """``values`` as a contiguous, read-only ``dtype`` array (no copy when it already is one).

    numba compiles a kernel once per argument type, and a read-only array (a view of an Arrow
    buffer) is another type than a writable one. The join kernels are the slowest of the project
    to compile (docs/lab/band-joins.md, "Compile time halved"), so the arrays they only read enter
    them read-only, whichever way they came, and each compiles once per key type.
    """
    array = np.ascontiguousarray(values, dtype)
    if array.flags.writeable:
        array = array.view()
        array.flags.writeable = False
    return array
