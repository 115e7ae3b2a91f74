"""The key range a band-join probe searches, exact for float keys.

A left tuple with key ``x`` and a right tuple with key ``y`` match when
``x + lower <= y <= x + upper``, computed in the keys' type as written (the form of Flink's
interval join). A left arrival searches the right window for ``[x + lower, x + upper]``, which is
that predicate. A right arrival searches the left window for the ``x`` that satisfy it. In
``float64``, ``y - upper`` and ``y - lower`` can be one unit in the last place off those
bounds, so the pair would match or not depending on which tuple came first. ``band_bounds``
moves the mirrored bounds to the exact ends of the set, one ulp at a time (a step or two at
most). Integer keys are exact as they are.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types

from splice.kernels.jit import kernel
from splice.kernels.numba_internals import bits_float, float_bits, overload

__all__ = ["band_bounds", "band_low", "band_cover"]


@kernel(inline="always")
def _next_up(b):  # type: ignore[no-untyped-def]
    # the next float64 above a finite b (np.nextafter(b, inf) without the library call): one
    # more in the bit pattern above zero, one less below (b + 0.0 turns -0.0 into +0.0)
    u = float_bits(b + 0.0)
    return bits_float(u + 1 - 2 * (u < 0))


@kernel()
def _max_key(b, lower, x):  # type: ignore[no-untyped-def]
    # the largest k with fl(k + lower) <= x: b itself when the estimate is exact already (the
    # common case, one rounding off at most), else _max_key_search. A NaN fails both tests
    if b + lower <= x and not (_next_up(b) + lower <= x):
        return b
    return _max_key_search(b, lower, x)


@kernel()
def _max_key_search(b, lower, x):  # type: ignore[no-untyped-def]
    # the largest k with fl(k + lower) <= x, from an estimate b near it (monotone in k): gallop
    # away from b by doubling steps until the predicate flips, then bisect (exact, at most a few
    # thousand steps even across the subnormals; usually a handful)
    if not (np.isfinite(b) and np.isfinite(x) and np.isfinite(lower)):
        return b
    d = np.nextafter(b, np.inf) - b
    if b + lower <= x:
        lo = b
        hi = b + d
        while hi + lower <= x and hi < np.inf:
            lo = hi
            d *= 2.0
            hi = b + d
    else:
        hi = b
        lo = b - d
        while not (lo + lower <= x) and lo > -np.inf:
            hi = lo
            d *= 2.0
            lo = b - d
        if not (lo + lower <= x):
            return lo
    while True:
        mid = lo * 0.5 + hi * 0.5
        if mid <= lo or mid >= hi:
            return lo
        if mid + lower <= x:
            lo = mid
        else:
            hi = mid


@kernel(inline="always")
def _mirrored_low(x, lo_off):  # type: ignore[no-untyped-def]
    # the lower end of _mirrored_exact alone (what a prefetch needs)
    return -_max_key(-(x + lo_off), lo_off, -x)


@kernel(inline="always")
def _mirrored_exact(x, lo_off, hi_off):  # type: ignore[no-untyped-def]
    # the ends of {k : k + lower <= x <= k + upper} (upper = -lo_off, lower = -hi_off), from
    # their one-rounding estimates x + lo_off and x + hi_off; the lower end by symmetry
    # (negation is exact and rounding symmetric): min{k : k + upper >= x} is
    # -max{j : j - upper <= -x}
    return _mirrored_low(x, lo_off), _max_key(x + hi_off, -hi_off, x)


def band_bounds(x: Any, lo_off: Any, hi_off: Any, mirrored: bool) -> tuple[Any, Any]:
    """Partner keys ``[a, b]`` of a probe with key ``x``: ``x + lo_off .. x + hi_off``. With
    ``mirrored`` (a right arrival: ``lo_off = -upper``, ``hi_off = -lower``), for float keys the
    exact ends of ``{k : k + lower <= x <= k + upper}``."""
    if mirrored and isinstance(x, (float, np.floating)):
        return _mirrored_exact(float(x), float(lo_off), float(hi_off))  # type: ignore[no-any-return]
    return x + lo_off, x + hi_off


@overload(band_bounds, inline="always")
def _band_bounds(x, lo_off, hi_off, mirrored):  # type: ignore[no-untyped-def]
    if isinstance(x, types.Integer):
        def exact(x, lo_off, hi_off, mirrored):  # type: ignore[no-untyped-def]
            return x + lo_off, x + hi_off
        return exact

    def nudged(x, lo_off, hi_off, mirrored):  # type: ignore[no-untyped-def]
        if mirrored:
            return _mirrored_exact(x, lo_off, hi_off)
        return x + lo_off, x + hi_off
    return nudged


def band_low(x: Any, lo_off: Any, hi_off: Any, mirrored: bool) -> Any:
    """The lower end of :func:`band_bounds` alone: where a search of the band starts (what a
    prefetch ahead of the search needs), without computing the upper end."""
    return band_bounds(x, lo_off, hi_off, mirrored)[0]


@overload(band_low, inline="always")
def _band_low(x, lo_off, hi_off, mirrored):  # type: ignore[no-untyped-def]
    if isinstance(x, types.Integer):
        def exact(x, lo_off, hi_off, mirrored):  # type: ignore[no-untyped-def]
            return x + lo_off
        return exact

    def nudged(x, lo_off, hi_off, mirrored):  # type: ignore[no-untyped-def]
        if mirrored:
            return _mirrored_low(x, lo_off)
        return x + lo_off
    return nudged


#: Relative slack of :func:`band_cover` for float keys: the exact ends of a mirrored band are an
#: ulp or two (at most 2**-51 of ``|x| + |offset|``) from ``x + offset``; four times that.
_COVER_SLACK = 2.0**-49
#: ... and its absolute part, for sums among the subnormals (about 2,000 of their ulps).
_COVER_TINY = 1e-320


def band_cover(x: Any, lo_off: Any, hi_off: Any) -> tuple[Any, Any]:
    """Ends ``[a, b]`` of an interval holding the band of :func:`band_bounds` for either side
    (mirrored or not), without computing its exact ends: ``x + lo_off`` and ``x + hi_off``
    widened by a few ulps. Exact for integer keys. For an infinite key an end may be NaN
    (callers treat a NaN end as reaching everywhere it could)."""
    if isinstance(x, (float, np.floating)):
        slack = (abs(x) + abs(lo_off) + abs(hi_off)) * _COVER_SLACK + _COVER_TINY
        return x + lo_off - slack, x + hi_off + slack
    return x + lo_off, x + hi_off


@overload(band_cover, inline="always")
def _band_cover(x, lo_off, hi_off):  # type: ignore[no-untyped-def]
    if isinstance(x, types.Integer):
        def exact(x, lo_off, hi_off):  # type: ignore[no-untyped-def]
            return x + lo_off, x + hi_off
        return exact

    def widened(x, lo_off, hi_off):  # type: ignore[no-untyped-def]
        slack = (abs(x) + abs(lo_off) + abs(hi_off)) * _COVER_SLACK + _COVER_TINY
        return x + lo_off - slack, x + hi_off + slack
    return widened
