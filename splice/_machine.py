"""What the machine has: its physical memory, for refusing state that could never fit."""

from __future__ import annotations

import os

__all__ = ["machine_bytes"]


def machine_bytes() -> int | None:
    """The machine's physical memory in bytes (``None`` where the system does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None
