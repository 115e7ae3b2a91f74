"""``splice join --kind window``: the window join of two files, streamed through the operator.

``run(left, right, args)`` joins rows of ``left`` and ``right`` with equal ``--on`` keys in the same
``--size`` window (hopping every ``--slide``, default ``--size``; windows aligned at 0) of
``--time``, ``--how`` inner/left/right/full. Arrival as for ``--kind interval``
(:mod:`splice.joins.interval_command`): nothing is late, so the output is exact.
"""

from __future__ import annotations

import argparse

import pyarrow as pa

from splice.core.errors import PlanError
from splice.joins.interval_command import LEFT_ID, RIGHT_ID, keys_of, stream_join
from splice.joins.window_join import WindowJoin

__all__ = ["run"]


def run(left: pa.Table, right: pa.Table, args: argparse.Namespace) -> pa.Table:
    """The window join of ``left`` and ``right`` as the command line describes it."""
    if args.size is None:
        raise PlanError("join --kind window: --size is required (window length in time units)")
    keys = keys_of(args)
    return stream_join(left, right, args, lambda delay: WindowJoin(
        left=LEFT_ID, right=RIGHT_ID, on=keys, time=args.time, size=args.size,
        slide=args.slide, how=args.how, out_of_orderness=delay))
