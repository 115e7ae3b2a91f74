"""Plain-Python references of splice's hash functions (:mod:`splice.kernels.hashing`), in Python
integers masked to 64 bits."""

from __future__ import annotations

import numpy as np

_M64 = (1 << 64) - 1
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_GOLDEN = 0x9E3779B97F4A7C15


def _fmix64_py(h: int) -> int:
    """Reference of ``fmix64``."""
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & _M64
    h ^= h >> 33
    return h


def hash_bytes_py(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Reference of ``hash_bytes``."""
    out = []
    for i in range(len(offsets) - 1):
        h = _FNV_OFFSET
        for b in data[offsets[i] : offsets[i + 1]].tolist():
            h ^= int(b)
            h = (h * _FNV_PRIME) & _M64
        out.append(_fmix64_py(h))
    return np.array(out, dtype=np.uint64)


def _signed(h: int) -> int:
    return h - (1 << 64) if h >> 63 else h


def hash_words_py(keys: np.ndarray, i: int) -> int:
    """Reference of ``hash_words``: Fibonacci steps over the row's words, int64 wrapping."""
    h = 0x2545F4914F6CDD1D
    for w in keys[i].tolist():
        h = ((h ^ (w & _M64)) * _GOLDEN) & _M64
        h ^= _signed(h) >> 29 & _M64  # an arithmetic shift of the signed value
    return _signed(h)


def combine_codes_py(codes: list[np.ndarray]) -> np.ndarray:
    """Reference of ``combine_codes``."""
    cols = [c.astype(np.uint64).tolist() for c in codes]
    if len(cols) == 1:
        return np.array(cols[0], np.uint64)
    out = []
    for row in zip(*cols, strict=True):
        h = (row[0] * _GOLDEN) & _M64
        for c in row[1:]:
            h = ((h ^ ((c + _GOLDEN + (h << 6) + (h >> 2)) & _M64)) * _GOLDEN) & _M64
        out.append(h)
    return np.array(out, np.uint64)
