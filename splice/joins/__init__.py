"""Stream joins: hash window joins (HB-SJ and the fast join), multiway, band (IBWJ), interval and window joins.

``splice/joins/README.md`` says which join to use when.
"""

from splice.joins.band_join import BandJoin
from splice.joins.hash_window_join import HashWindowJoin
from splice.joins.interval_join import IntervalJoin
from splice.joins.multiway import MultiwayJoin
from splice.joins.window import CountWindow, TimeWindow
from splice.joins.window_join import WindowJoin

__all__ = [
    "BandJoin",
    "CountWindow",
    "HashWindowJoin",
    "IntervalJoin",
    "MultiwayJoin",
    "TimeWindow",
    "WindowJoin",
]
