"""The ``T_I`` filter never hides an entry: every partition holding a key in ``[lo, hi]`` answers
that it may hold one, whatever the keys (duplicates, infinities, int64 extremes, one value)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from splice.index._immutable import FANOUT
from splice.index._ti_filter import filter_add, filter_install, filter_may_hold, filter_words


@njit
def _add_all(bits, geo, shift, parts, keys, qs):  # type: ignore[no-untyped-def]
    for i in range(keys.shape[0]):
        filter_add(bits, geo, shift, qs[i], keys[i])


@njit
def _may(bits, geo, shift, q, lo, hi):  # type: ignore[no-untyped-def]
    return filter_may_hold(bits, geo, shift, q, lo, hi)


def _check(ts: np.ndarray, parts: int, inserted: np.ndarray, probes: list[tuple], words: int
           ) -> float:
    """Install a filter over the sorted ``ts`` cut into ``parts`` partitions, add ``inserted``
    (routed to the last partition starting at or below the key), check every probe; return the
    fraction of probes with no key that the filter let skip."""
    ts = np.sort(ts)
    starts = np.linspace(0, len(ts), parts, endpoint=False).astype(np.int64)
    inner = np.zeros(parts * FANOUT + FANOUT, ts.dtype)
    inner[: parts * FANOUT : FANOUT] = ts[starts]
    bits = np.zeros(words, np.int64)
    geo = np.zeros(2 * parts)
    shift = filter_install(bits, geo, parts, inner, 0, ts[0], ts[-1])
    assert (parts << shift) <= words * 64
    qs = np.clip(np.searchsorted(ts[starts], inserted, side="right") - 1, 0, parts - 1)
    _add_all(bits, geo, shift, parts, inserted, qs.astype(np.int64))
    skipped = empty = 0
    for lo, hi in probes:
        for q in range(parts):
            held = bool(((inserted >= lo) & (inserted <= hi) & (qs == q)).any())
            may = _may(bits, geo, shift, q, lo, hi)
            assert may or not held, (q, lo, hi)
            empty += not held
            skipped += not may
    return skipped / max(empty, 1)


floats = st.one_of(
    st.floats(-10, 10, allow_nan=False),
    st.sampled_from([0.0, -0.0, 1.0, np.inf, -np.inf, 5e-324, 1e308, -1e308]),
)
ints = st.one_of(st.integers(-50, 50), st.sampled_from([-(2**63), 2**63 - 1, 0, 2**53 + 1]))


def _cases(keys: st.SearchStrategy) -> dict[str, st.SearchStrategy]:
    # T_S keys, partitions, keys entered into T_I, probe bands, filter words
    return {"ts": st.lists(keys, min_size=1, max_size=80), "parts": st.integers(1, 6),
            "inserted": st.lists(keys, max_size=60),
            "probes": st.lists(st.tuples(keys, keys), min_size=1, max_size=20),
            "words": st.integers(1, 40)}


@settings(max_examples=150, deadline=None)
@given(**_cases(floats))
def test_float_keys_are_never_hidden(ts, parts, inserted, probes, words):
    probes = [(min(a, b), max(a, b)) for a, b in probes]
    _check(np.array(ts), parts, np.array(inserted, np.float64), probes, max(words, parts))


@settings(max_examples=150, deadline=None)
@given(**_cases(ints))
def test_int64_keys_are_never_hidden(ts, parts, inserted, probes, words):
    probes = [(np.int64(min(a, b)), np.int64(max(a, b))) for a, b in probes]
    _check(np.array(ts, np.int64), parts, np.array(inserted, np.int64), probes,
           max(words, parts))


def test_uniform_keys_skip_most_empty_partitions():
    # a window's worth of T_S keys, T_I at its merge threshold, narrow bands: the filter lets
    # most searches of partitions holding nothing in the band skip them
    rng = np.random.default_rng(0)
    ts, inserted = rng.random(1 << 14), rng.random(512)
    probes = [(x - 2e-5, x + 2e-5) for x in rng.random(200)]
    skipped = _check(ts, 16, inserted, probes, filter_words(512, 16))
    assert skipped > 0.85
