"""The decorator of the index and band-join kernels: ``njit(cache=True, nogil=True)`` without NRT.

Hot kernels take many arrays; with numba's reference counting (NRT) every call increments and
decrements each array argument atomically, which cost more than the tree descent itself. These
kernels never allocate, so they are compiled without NRT (callees inherit that); the few that
must allocate stay plain ``njit``.
"""

from __future__ import annotations

from typing import Any

from numba import njit

__all__ = ["kernel"]


def kernel(**options: Any) -> Any:
    """``njit(cache=True, nogil=True, _nrt=False, **options)``."""
    flags: dict[str, Any] = {"cache": True, "nogil": True, "_nrt": False, **options}
    return njit(**flags)
