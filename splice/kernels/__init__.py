"""The lowest layer above ``core``: how kernels are compiled and what they share.

``jit`` (the compile settings of hot kernels), ``prefetch`` and ``atomics`` (LLVM intrinsics
numba does not expose), ``raw_memory`` (loads and stores by address), ``pools`` (reusable
scratch arrays), ``workers`` (the thread team that runs a kernel on several threads) and
``machine`` (what the machine has). Nothing here knows about streams, operators or joins.
"""

__all__: list[str] = []
