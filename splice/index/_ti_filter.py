"""The ``T_I`` filter of the IM/PIM-Tree: a bitmap of the key buckets ``T_I`` holds entries in.

A probe of a large window finds its partners almost all in ``T_S``: ``T_I`` holds the last
``m * w`` arrivals at most (1/32 of the window at 2^20), so the probe's ``T_I`` partition
usually holds nothing in its band, and searching it costs a descent of a B+-Tree for nothing.
The filter answers first, from one word that stays cached.

Every ``T_I`` partition ``q`` (one, in an IM-Tree) owns ``S = 2**shift`` bits (at least a
word). A key ``k`` of partition ``q`` falls in bucket ``floor((k - low_q) * scale_q)``, clipped to
``[0, S)``, where ``low_q`` and ``scale_q = S / (high_q - low_q)`` come from the keys ``T_S`` had
at the last merge: the partition's first key and the next partition's (``T_S``'s last key for the
last one); so the buckets follow the keys' distribution down to the partitions and are equally
wide inside each. Inserting ``k`` sets its bucket's bit; a search of ``[lo, hi]`` in partition
``q`` reads the bits of ``bucket(lo) .. bucket(hi)``, and skips the partition when none is set.

The bucket is a non-decreasing function of the key (each floating-point step rounds
monotonically; a key outside the partition's keys is clipped to its first or last bucket; a
partition whose bounds are not finite or not increasing has one bucket, ``scale_q = 0``), so a
key in ``[lo, hi]`` has its bucket between theirs: the filter never hides an entry. Entries
stay flagged until the merge empties ``T_I``, which clears the bits; at ``8 * m * w`` bits in
all, at most one bucket in eight is set before a merge. Keys are compared as ``float64`` (an
``int64`` key rounds to the nearest double, also monotonically).
"""

from __future__ import annotations

import numpy as np

from splice.index._immutable import FANOUT
from splice.kernels.jit import kernel

__all__ = ["filter_words", "filter_install", "filter_add", "filter_may_hold", "BITS_PER_ENTRY"]

#: Filter bits per ``T_I`` entry at the merge threshold.
BITS_PER_ENTRY = 8


def filter_words(threshold: int, partitions: int) -> int:
    """64-bit words of the filter of a ``T_I`` merged at ``threshold`` entries, with up to
    ``partitions`` partitions: ``BITS_PER_ENTRY`` bits per entry (a power of two), at least one
    word per partition."""
    bits = 1 << max(6, int(BITS_PER_ENTRY * max(threshold, 1) - 1).bit_length())
    return max(bits // 64, max(partitions, 1))


@kernel(inline="always")
def _bucket(geo, shift, q, k):
    b = (np.float64(k) - geo[2 * q]) * geo[2 * q + 1]
    top = np.float64((1 << shift) - 1)
    if not b > 0.0:  # below the partition's first key, or NaN (an infinite key, scale 0)
        b = 0.0
    if b > top:
        b = top
    return (q << shift) + np.int64(b)


@kernel()
def filter_install(bits, geo, parts, inner, off, first, last):
    """Clear the filter and derive its buckets for ``parts`` partitions of a ``T_S`` whose keys
    run from ``first`` to ``last``; partition ``q > 0`` starts at key ``inner[off + q * FANOUT]``
    (the first entry of its node in the inner levels). ``bits`` holds a word per partition at
    least (:func:`filter_words` of the most partitions the tree can have). Returns the shift."""
    shift = 6
    per = (bits.shape[0] * 64) // max(parts, 1)
    while (2 << shift) <= per:
        shift += 1
    for i in range((parts << shift) >> 6):
        bits[i] = 0
    size = np.float64(1 << shift)
    for q in range(parts):
        low = np.float64(first) if q == 0 else np.float64(inner[off + q * FANOUT])
        high = np.float64(inner[off + (q + 1) * FANOUT]) if q + 1 < parts else np.float64(last)
        scale = 0.0
        if np.isfinite(low) and np.isfinite(high) and high > low:
            scale = size / (high - low)
            if not np.isfinite(scale):
                scale = 0.0
        geo[2 * q] = low if np.isfinite(low) else 0.0
        geo[2 * q + 1] = scale
    return shift


@kernel(inline="always")
def filter_add(bits, geo, shift, q, k):
    """Note an entry of key ``k`` in partition ``q``."""
    i = _bucket(geo, shift, q, k)
    bits[i >> 6] |= np.int64(1) << (i & 63)


@kernel(inline="always")
def filter_may_hold(bits, geo, shift, q, lo, hi):
    """Whether partition ``q`` may hold an entry with key in ``[lo, hi]``."""
    i0 = _bucket(geo, shift, q, lo)
    i1 = _bucket(geo, shift, q, hi)
    if i1 - i0 >= 64:  # a band wider than a word of buckets: search
        return True
    for i in range(i0, i1 + 1):
        if (bits[i >> 6] >> (i & 63)) & 1:
            return True
    return False
