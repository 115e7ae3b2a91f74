"""The mirrored probe range of a band join is exact for float keys (the pair matches whichever
side arrives first)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from numba import njit

from splice.index._band_bounds import _max_key_search, band_bounds, band_low, band_reaches

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


@njit
def _reaches(x, lo_off, hi_off, kmin, kmax, first, last):  # type: ignore[no-untyped-def]
    return band_reaches(x, lo_off, hi_off, kmin, kmax, first, last)


@given(x=any_float | special | finite, lo_off=any_float | special | finite,
       width=st.floats(0, 1e3) | special, kmin=finite | special, kmax=finite | special,
       first=st.booleans(), last=st.booleans(), mirrored=st.booleans())
def test_a_band_that_reaches_into_a_key_range_is_never_passed_over(x, lo_off, width, kmin, kmax,
                                                                   first, last, mirrored):
    # the key-range join skips a tuple when band_reaches says no: that must never drop a band
    # whose exact ends (band_bounds) reach into the range
    hi_off = lo_off + width
    a, b = _compiled(x, lo_off, hi_off, mirrored)
    exact = a <= b and (first or b >= kmin) and (last or a < kmax)
    if exact:
        assert _reaches(x, lo_off, hi_off, kmin, kmax, first, last)
        assert band_reaches(x, lo_off, hi_off, kmin, kmax, first, last)


def test_a_band_far_from_the_range_does_not_reach_it():
    assert not _reaches(0.5, -0.01, 0.01, 0.6, 0.7, False, False)
    assert not _reaches(0.8, -0.01, 0.01, 0.6, 0.7, False, False)
    assert _reaches(0.59, -0.01, 0.01, 0.6, 0.7, False, False)
    assert _reaches(0.8, -0.01, 0.01, 0.6, 0.7, False, True)
    i = np.int64
    assert not _reaches(i(10), i(-2), i(2), i(13), i(20), False, False)
    assert _reaches(i(10), i(-2), i(3), i(13), i(20), False, False)
    assert not _reaches(i(22), i(-2), i(2), i(13), i(20), False, False)
    assert _reaches(i(21), i(-2), i(2), i(13), i(20), False, False)
