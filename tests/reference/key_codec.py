"""Plain-Python reference of the join key codec's byte hash (:mod:`splice.joins.common.key_codec`):
FNV-1a, then murmur3's 64-bit finalizer, in Python integers masked to 64 bits."""

from __future__ import annotations

import numpy as np

_M64 = (1 << 64) - 1
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3


def _fmix64_py(h: int) -> int:
    """Reference of ``_fmix64``."""
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
