"""Everything splice takes from numba and llvmlite beyond ``njit``: one place to check on upgrade.

splice's kernels rely on parts of numba that are not its stable interface: the private ``_nrt``
compile flag (kernels that never allocate skip reference counting, which cost more than a tree
descent), ``intrinsic`` and ``overload`` with llvmlite's IR builder (prefetch, atomics, raw
memory, bit casts that numba does not offer), ``cgutils``, the dispatcher class, and the
unsafe ``trailing_zeros`` (one instruction where a loop would scan bits), and the on-disk cache's
index loader. They are imported here and nowhere else (a test checks it), and the test of this module compiles each of
them; ``TESTED`` is the numba range that test has passed on, and ``pyproject.toml`` pins it.
On a numba outside the range, importing splice warns, and the test fails loudly.
"""

from __future__ import annotations

import pickle
import warnings
from typing import Any

import numba
from llvmlite import ir
from numba import types
from numba.core import caching, cgutils
from numba.core.registry import CPUDispatcher as Dispatcher
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic, overload

__all__ = ["TESTED", "NO_NRT", "Dispatcher", "cgutils", "intrinsic", "ir", "overload",
           "trailing_zeros", "float_bits", "bits_float", "numba_version", "supported",
           "stale_index_is_a_miss"]

#: numba versions the kernels were tested on: at least the first, below the second
TESTED = ((0, 61), (0, 69))
#: the compile flag of kernels that never allocate: no reference counting of their arguments
NO_NRT: dict[str, Any] = {"_nrt": False}


def numba_version() -> tuple[int, int]:
    """The installed numba's (major, minor)."""
    major, minor = numba.__version__.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def supported() -> bool:
    """Whether the installed numba lies in :data:`TESTED`."""
    return TESTED[0] <= numba_version() < TESTED[1]


if not supported():
    warnings.warn(f"splice's kernels were tested with numba {TESTED[0][0]}.{TESTED[0][1]} up to "
                  f"below {TESTED[1][0]}.{TESTED[1][1]}; numba {numba.__version__} may change the "
                  "internals they use (see splice/kernels/numba_internals.py)",
                  RuntimeWarning, stacklevel=2)


@intrinsic
def float_bits(typingctx, v):  # type: ignore[no-untyped-def]
    """The bit pattern of a float64 as an int64 (a bit cast, no conversion)."""
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


@intrinsic
def bits_float(typingctx, v):  # type: ignore[no-untyped-def]
    """The float64 of an int64 bit pattern (a bit cast)."""
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


_load_index = caching.IndexDataCacheFile._load_index


def stale_index_is_a_miss(self: Any) -> dict[Any, Any]:
    """numba's cache index, or none when it cannot be read back.

    The index pickles the argument types of each compiled kernel, named tuple classes by their
    module and name. After an upgrade that renames or removes such a class, unpickling an old
    index raises before numba compares its source stamp, and the kernel would fail instead of
    compiling again. Read that way, an index that cannot be unpickled is what it is: stale."""
    try:
        return _load_index(self)
    except (AttributeError, ImportError, pickle.UnpicklingError, EOFError, TypeError, ValueError):
        return {}


caching.IndexDataCacheFile._load_index = stale_index_is_a_miss  # type: ignore[method-assign]
