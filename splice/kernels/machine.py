"""What the machine has: its physical memory, for refusing state that could never fit."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from splice.core.errors import PlanError

__all__ = ["machine_bytes", "allocate_within_memory"]

T = TypeVar("T")


def machine_bytes() -> int | None:
    """The machine's physical memory in bytes (``None`` where the system does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None


def allocate_within_memory(subject: str, need: int, what: str, allocate: Callable[[], T]) -> T:
    """``allocate()``, or a :class:`PlanError` when the ``need`` bytes it takes are more than the
    machine's memory or the allocation fails: "``subject`` needs about X GiB ``what``, more
    than this machine's Y GiB" (a window size a user can mistype by orders of magnitude would
    otherwise end in numpy's allocation traceback, or in the machine swapping)."""
    have = machine_bytes()
    too_large = f"{subject} needs about {need / 2**30:.1f} GiB {what}"
    if have is not None and need > have:
        raise PlanError(f"{too_large}, more than this machine's {have / 2**30:.1f} GiB")
    try:
        return allocate()
    except MemoryError as exc:
        raise PlanError(f"{too_large}: it could not be allocated") from exc
