"""splice's hash functions, in one place: what every table, index and key code hashes with.

Three jobs, one family of parts:

* **Slots of int64 codes** (the group table, the hash joins' fast index, the interval join's key
  index): Fibonacci hashing, ``code * GOLDEN`` modulo 2**64, whose top bits spread consecutive
  codes evenly (Knuth, *The Art of Computer Programming* vol. 3, §6.4). :func:`hash_words`
  folds a row of several int64 words into one such code.
* **Independent seeded hashes** (HB-SJ's two addressing functions, Diba §5.2.2):
  MurmurHash3_x86_32 of the code's 8 bytes, :func:`murmur3_32`, equal to ``mmh3.hash``.
* **Codes of variable-length values and of several columns** (the joins' key codes):
  :func:`hash_bytes` (FNV-1a over the bytes, then MurmurHash3's 64-bit finalizer :func:`fmix64`)
  and :func:`combine_codes`.

The jitted functions that allocate nothing compile without reference counting; all inline into
the kernels that call them. ``tests/reference/key_codec.py`` holds the plain-Python reference of :func:`hash_bytes`;
:func:`murmur3_32` is checked against ``mmh3``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit

from splice.kernels.jit import kernel

__all__ = [
    "GOLDEN",
    "GOLDEN_I64",
    "M32",
    "combine_codes",
    "fmix64",
    "hash_bytes",
    "hash_words",
    "murmur3_32",
]

#: 2**64 / golden ratio: the Fibonacci hashing multiplier
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
#: :data:`GOLDEN` as a signed int64 (kernels that hash in int64 arithmetic)
GOLDEN_I64 = -7046029254386353131
M32 = 0xFFFFFFFF
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_WORDS_SEED = np.int64(0x2545F4914F6CDD1D)


@kernel()
def hash_words(keys: np.ndarray, i: int) -> np.int64:
    """One int64 code of row ``i`` of the int64 word matrix ``keys`` (Fibonacci steps per word,
    each followed by a shift that brings the high bits down)."""
    h = _WORDS_SEED
    for c in range(keys.shape[1]):
        h = (h ^ keys[i, c]) * np.int64(GOLDEN_I64)
        h ^= h >> 29
    return h


@kernel()
def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & M32


@kernel()
def _mix_block(h: int, k: int) -> int:
    k = (k * 0xCC9E2D51) & M32
    k = _rotl32(k, 15)
    k = (k * 0x1B873593) & M32
    h ^= k
    h = _rotl32(h, 13)
    return (h * 5 + 0xE6546B64) & M32


@kernel()
def murmur3_32(key: int, seed: int) -> int:
    """MurmurHash3_x86_32 of the 8 little-endian bytes of int64 ``key`` (= ``mmh3.hash``,
    unsigned). Integer arithmetic is int64 and masked, so ``murmur3_32.py_func`` computes the
    same in plain Python."""
    h = seed & M32
    h = _mix_block(h, key & M32)
    h = _mix_block(h, (key >> 32) & M32)
    h ^= 8
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & M32
    h ^= h >> 16
    return h


@kernel()
def fmix64(h: np.uint64) -> np.uint64:
    """MurmurHash3's 64-bit finalizer: every input bit affects every output bit."""
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


@njit(cache=True, nogil=True)
def hash_bytes(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """``out[i] = fmix64(fnv1a(data[offsets[i]:offsets[i+1]]))`` as ``uint64``."""
    n = len(offsets) - 1
    out = np.empty(n, dtype=np.uint64)
    for i in range(n):
        h = _FNV_OFFSET
        for k in range(offsets[i], offsets[i + 1]):
            h ^= np.uint64(data[k])
            h *= _FNV_PRIME
        out[i] = fmix64(h)
    return out


def combine_codes(codes: Sequence[np.ndarray]) -> np.ndarray:
    """One uint64 code per row from the uint64 codes of several columns (in order; one column
    comes back as it is)."""
    if len(codes) == 1:
        return codes[0]
    h = codes[0] * GOLDEN
    for c in codes[1:]:
        h = (h ^ (c + GOLDEN + (h << np.uint64(6)) + (h >> np.uint64(2)))) * GOLDEN
    return h
