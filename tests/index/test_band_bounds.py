"""The mirrored probe range of a band join is exact for float keys (the pair matches whichever
side arrives first)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from splice.index._band_bounds import _max_key_search, band_bounds, band_low

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


@njit
def _compiled(x, lo_off, hi_off, mirrored):  # type: ignore[no-untyped-def]
    return band_bounds(x, lo_off, hi_off, mirrored)


@njit
def _searched(x, lo_off, hi_off):  # type: ignore[no-untyped-def]
    # the mirrored ends by the gallop-and-bisect search alone, no quick answer
    return -_max_key_search(-(x + lo_off), lo_off, -x), _max_key_search(x + hi_off, -hi_off, x)


@njit
def _low(x, lo_off, hi_off, mirrored):  # type: ignore[no-untyped-def]
    return band_low(x, lo_off, hi_off, mirrored)


def _matches(left: float, right: float, lower: float, upper: float) -> bool:
    return left + lower <= right <= left + upper


@given(x=finite, lower=finite, width=st.floats(0, 1e3))
def test_mirrored_bounds_are_the_exact_ends_of_the_matching_left_keys(x, lower, width):
    upper = lower + width
    a, b = _compiled(x, -upper, -lower, True)
    assert (a, b) == band_bounds(x, -upper, -lower, True)
    if a <= b:  # every left key in [a, b] matches the right key x, none just outside
        assert _matches(a, x, lower, upper) and _matches(b, x, lower, upper)
    below, above = math.nextafter(a, -math.inf), math.nextafter(b, math.inf)
    assert not _matches(below, x, lower, upper)
    assert not _matches(above, x, lower, upper)


def test_the_pair_that_rounding_split():
    # 1.1 - 1.0 rounds above 0.1, yet 0.1 + 1.0 == 1.1: the left key 0.1 matches the right 1.1
    assert 1.1 - 1.0 > 0.1 and 0.1 + 1.0 <= 1.1
    a, b = _compiled(1.1, -1.0, 1.0, True)
    assert a <= 0.1 <= b
    assert _compiled(1.1, -1.0, 1.0, False) == (1.1 - 1.0, 1.1 + 1.0)


def test_integer_keys_are_left_as_they_are():
    assert _compiled(np.int64(7), np.int64(-3), np.int64(2), True) == (4, 9)


any_float = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)
special = st.sampled_from([0.0, -0.0, 5e-324, -5e-324, 2.0**-1022, 1.7976931348623157e308,
                           -1.7976931348623157e308, math.inf, -math.inf, 0.1, 1.1, 1.0])


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@given(x=any_float | special, lo_off=any_float | special, hi_off=any_float | special)
def test_the_quick_answer_is_the_searched_one(x, lo_off, hi_off):
    # the bounds skip the search when the one-rounding estimate is already exact: same ends as
    # the search, and the lower end alone (band_low) is the same as the pair's
    a, b = _compiled(x, lo_off, hi_off, True)
    sa, sb = _searched(x, lo_off, hi_off)
    assert _same(a, sa) and _same(b, sb)
    assert _same(_low(x, lo_off, hi_off, True), a)
    assert _same(_low(x, lo_off, hi_off, False), x + lo_off)



def _listed(sides, keys, offs_lo, offs_hi, bounds):
    # range_split of one slice: per range, the listed tuples (checked here: the slice's left
    # arrivals)
    from splice.joins.band._band_kernels import BandArrivals, BandProbe, range_split

    n, t = len(keys), len(bounds) + 1
    counts = np.empty(t, np.int64)
    out_g = np.empty((t, max(n, 1)), np.int32)
    lefts = range_split(0, n, BandArrivals(sides, keys), BandProbe(offs_lo, offs_hi, False), bounds,
                        counts, out_g)
    assert lefts == int(np.count_nonzero(sides == 0))
    return [out_g[r, :counts[r]].tolist() for r in range(t)]


@settings(max_examples=300)
@given(xs=st.lists(st.tuples(st.integers(0, 1), any_float | special | finite), max_size=12),
       lo_off=finite | special, width=st.floats(0, 1e3) | special,
       bounds=st.lists(finite | special, max_size=4))
def test_key_ranges_list_every_tuple_whose_band_or_key_lies_in_them(xs, lo_off, width, bounds):
    # the key-range join joins in a range only the tuples range_split listed there: every tuple
    # whose key lies in the range or whose exact band (band_bounds, either side) reaches into it
    # must be listed, once, in arrival order
    hi_off = lo_off + width
    if not math.isfinite(hi_off):
        return
    xs = [(s, x) for s, x in xs if not math.isnan(x)]  # NaN keys are refused at the input
    bounds = sorted(b for b in bounds if not math.isnan(b))
    sides = np.array([s for s, _ in xs], np.int8)
    keys = np.array([x for _, x in xs], np.float64)
    offs_lo = np.array([lo_off, -hi_off])
    offs_hi = np.array([hi_off, -lo_off])
    listed = _listed(sides, keys, offs_lo, offs_hi, np.array(bounds, np.float64))
    ends = [-math.inf, *bounds, math.inf]
    for r in range(len(bounds) + 1):
        first, last = r == 0, r == len(bounds)
        kmin, kmax = ends[r], ends[r + 1]
        want = []
        for g, (s, x) in enumerate(xs):
            a, b = _compiled(x, offs_lo[s], offs_hi[s], s == 1)
            hit = a <= b and (last or a < kmax) and (first or b >= kmin)
            mine = (first or x >= kmin) and (last or x < kmax)
            if hit or mine:
                want.append(g)
        got = listed[r]
        assert got == sorted(set(got))
        assert set(want) <= set(got)


def test_integer_key_ranges_list_exactly():
    sides = np.zeros(6, np.int8)
    keys = np.array([0, 9, 10, 12, 19, 30], np.int64)
    listed = _listed(sides, keys, np.array([-2, -2], np.int64), np.array([2, 2], np.int64),
                     np.array([10, 20], np.int64))
    assert listed == [[0, 1, 2],  # keys 0 and 9; the band of 10 reaches 9
                      [1, 2, 3, 4],
                      [4, 5]]
