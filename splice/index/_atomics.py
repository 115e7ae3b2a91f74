"""Atomic operations on ``int64`` array slots for numba kernels run by several threads at once.

numba has no CPU atomics, so these intrinsics emit LLVM's ``cmpxchg`` and ``atomicrmw``
(sequentially consistent, hence also compiler barriers). They back the spin locks of the
parallel join: the PIM-Tree partition locks and the node pool's bump allocator.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from splice.index._jit import kernel

__all__ = ["sched_yield", "atomic_cas", "atomic_add", "atomic_load", "atomic_store", "spin_lock", "spin_unlock"]


def _slot(context, builder, aryty, ary, idx):
    arr = context.make_array(aryty)(context, builder, ary)
    return cgutils.get_item_pointer(context, builder, aryty, arr, [idx])


@intrinsic
def atomic_cas(typingctx, ary, idx, expected, new):  # type: ignore[no-untyped-def]
    """Compare-and-swap ``ary[idx]``: store ``new`` when it equals ``expected``; return the old."""
    sig = types.int64(ary, idx, expected, new)

    def codegen(context, builder, signature, args):
        a, i, e, n = args
        ptr = _slot(context, builder, signature.args[0], a, i)
        res = builder.cmpxchg(ptr, e, n, "seq_cst", "seq_cst")
        return builder.extract_value(res, 0)

    return sig, codegen


@intrinsic
def atomic_add(typingctx, ary, idx, value):  # type: ignore[no-untyped-def]
    """``ary[idx] += value`` atomically; return the old value."""
    sig = types.int64(ary, idx, value)

    def codegen(context, builder, signature, args):
        a, i, v = args
        ptr = _slot(context, builder, signature.args[0], a, i)
        return builder.atomic_rmw("add", ptr, v, "seq_cst")

    return sig, codegen


@intrinsic
def atomic_store(typingctx, ary, idx, value):  # type: ignore[no-untyped-def]
    """``ary[idx] = value`` atomically (an exchange); return the old value."""
    sig = types.int64(ary, idx, value)

    def codegen(context, builder, signature, args):
        a, i, v = args
        ptr = _slot(context, builder, signature.args[0], a, i)
        return builder.atomic_rmw("xchg", ptr, v, "seq_cst")

    return sig, codegen


@kernel(inline="always")
def atomic_load(ary, idx):
    """Read ``ary[idx]`` atomically (adds zero)."""
    return atomic_add(ary, idx, 0)


@intrinsic
def sched_yield(typingctx):  # type: ignore[no-untyped-def]
    """Give the core to another runnable thread (``sched_yield(2)``)."""
    sig = types.int32()

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(32), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "sched_yield")
        return builder.call(fn, [])

    return sig, codegen


@kernel(inline="always")
def spin_lock(locks, i):
    """Acquire spin lock ``locks[i]`` (0 free, 1 held); after a short spin, yield the core so a
    preempted holder can run (threads may outnumber free cores)."""
    spins = 0
    while atomic_cas(locks, i, 0, 1) != 0:
        spins += 1
        if spins >= 64:
            sched_yield()
            spins = 0


@kernel(inline="always")
def spin_unlock(locks, i):
    """Release spin lock ``locks[i]``."""
    atomic_store(locks, i, 0)
