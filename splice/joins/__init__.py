"""Stream joins: hash window joins (HB-SJ and the fast join), multiway, band (IBWJ), interval and window joins.

``splice/joins/README.md`` says which join to use when.
"""

from splice.joins.band.band_join import BandJoin
from splice.joins.common.join_windows import CountWindow, TimeWindow
from splice.joins.hash.hash_window_join import HashWindowJoin
from splice.joins.multiway.multiway_join import MultiwayJoin
from splice.joins.temporal.interval_join import IntervalJoin
from splice.joins.temporal.window_join import WindowJoin

__all__ = [
    "BandJoin",
    "CountWindow",
    "HashWindowJoin",
    "IntervalJoin",
    "MultiwayJoin",
    "TimeWindow",
    "WindowJoin",
]
