"""Stream joins: hash window joins (HB-SJ and the fast join), multiway, band (IBWJ), interval and window joins.

``splice/joins/README.md`` says which join to use when. Each name is imported on first use, so
that a job loads the compiled kernels of the joins it runs and no others.
"""

from importlib import import_module
from typing import Any

#: public name -> the module that defines it
_HOMES = {
    "BandJoin": "splice.joins.band.band_join",
    "CountWindow": "splice.joins.common.join_windows",
    "TimeWindow": "splice.joins.common.join_windows",
    "HashWindowJoin": "splice.joins.hash.hash_window_join",
    "MultiwayJoin": "splice.joins.multiway.multiway_join",
    "IntervalJoin": "splice.joins.temporal.interval_join",
    "WindowJoin": "splice.joins.temporal.window_join",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'splice.joins' has no attribute {name!r}")
    return getattr(import_module(home), name)
