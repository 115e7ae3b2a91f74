"""Atomic operations on ``int64`` array cells for numba kernels run by several threads at once.

numba has no CPU atomics, so these intrinsics emit LLVM's atomic instructions. Two families, as
their users need them:

* sequentially consistent read-modify-writes (``atomic_cas``, ``atomic_add``, ``atomic_xchg``,
  ``atomic_or``, ``atomic_load_seq_cst``) for the band join's spin locks, edge tuple and node-pool allocator,
  which rely on a store not passing a later load;
* acquire loads and release stores (``atomic_load_acquire``, ``atomic_store_release``) for the
  transaction executors, which publish an operation's state for other threads to see.

Plus ``sched_yield`` (give the core away while spinning), ``cycle_counter`` (time spent waiting)
and the ``spin_lock``/``spin_unlock`` pair built on them.
"""

from __future__ import annotations

from typing import Any

from numba import njit, types

from splice.kernels.numba_internals import NO_NRT, cgutils, intrinsic, ir

__all__ = [
    "atomic_add",
    "atomic_or",
    "atomic_cas",
    "atomic_cas_acquire",
    "atomic_load_acquire",
    "atomic_load_seq_cst",
    "atomic_store_release",
    "atomic_xchg",
    "cycle_counter",
    "sched_yield",
    "spin_lock",
    "spin_unlock",
]


def _cell(context: Any, builder: Any, arrty: Any, arr: Any, idx: Any) -> Any:
    ary = context.make_array(arrty)(context, builder, arr)
    return cgutils.get_item_pointer(context, builder, arrty, ary, [idx], wraparound=False)


def _cas(ordering: str, failure: str) -> Any:
    def typer(typingctx: Any, ary: Any, idx: Any, expected: Any, new: Any) -> Any:
        """Compare-and-swap ``ary[idx]``: store ``new`` when it equals ``expected``; return the
        old value."""
        sig = types.int64(ary, idx, expected, new)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            a, i, e, n = args
            res = builder.cmpxchg(_cell(context, builder, signature.args[0], a, i), e, n,
                                  ordering, failure)
            return builder.extract_value(res, 0)

        return sig, codegen

    return typer


def _rmw(op: str) -> Any:
    def typer(typingctx: Any, ary: Any, idx: Any, value: Any) -> Any:
        sig = types.int64(ary, idx, types.int64)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            ptr = _cell(context, builder, signature.args[0], args[0], args[1])
            return builder.atomic_rmw(op, ptr, args[2], "seq_cst")

        return sig, codegen

    typer.__name__ = f"atomic_{op}"
    return typer


def _atomic_load_seq_cst(typingctx: Any, ary: Any, idx: Any) -> Any:
    """``ary[idx]`` read as a sequentially consistent read-modify-write (adds zero)."""
    sig = types.int64(ary, idx)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ptr = _cell(context, builder, signature.args[0], args[0], args[1])
        return builder.atomic_rmw("add", ptr, ir.Constant(ir.IntType(64), 0), "seq_cst")

    return sig, codegen


def _atomic_load_acquire(typingctx: Any, ary: Any, idx: Any) -> Any:
    """``ary[idx]`` read with acquire ordering."""
    sig = types.int64(ary, idx)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ptr = _cell(context, builder, signature.args[0], args[0], args[1])
        return builder.load_atomic(ptr, "acquire", 8)

    return sig, codegen


def _atomic_store_release(typingctx: Any, ary: Any, idx: Any, value: Any) -> Any:
    """``ary[idx] = value`` with release ordering."""
    sig = types.void(ary, idx, types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ptr = _cell(context, builder, signature.args[0], args[0], args[1])
        builder.store_atomic(args[2], ptr, "release", 8)
        return context.get_dummy_value()

    return sig, codegen


def _sched_yield(typingctx: Any) -> Any:
    """Give the core to another runnable thread (``sched_yield(2)``); threads may outnumber cores."""
    sig = types.int32()

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fnty = ir.FunctionType(ir.IntType(32), [])
        return builder.call(cgutils.get_or_insert_function(builder.module, fnty, "sched_yield"), [])

    return sig, codegen


def _cycle_counter(typingctx: Any) -> Any:
    """The CPU's cycle counter (``llvm.readcyclecounter``), for time spent waiting in kernels."""
    sig = types.int64()

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fnty = ir.FunctionType(ir.IntType(64), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.readcyclecounter")
        return builder.call(fn, [])

    return sig, codegen


#: ``ary[idx] += value`` atomically; returns the old value.
atomic_add: Any = intrinsic(_rmw("add"))
#: ``ary[idx] = value`` atomically as an exchange; returns the old value.
atomic_xchg: Any = intrinsic(_rmw("xchg"))
#: ``ary[idx] |= value`` atomically; returns the old value.
atomic_or: Any = intrinsic(_rmw("or"))
atomic_cas: Any = intrinsic(_cas("seq_cst", "seq_cst"))
#: compare-and-swap with acquire ordering (a lock's acquisition: the critical section's reads and
#: writes stay after it, and the compiler may keep earlier values in registers across it).
atomic_cas_acquire: Any = intrinsic(_cas("acquire", "monotonic"))
atomic_load_seq_cst: Any = intrinsic(_atomic_load_seq_cst)
atomic_load_acquire: Any = intrinsic(_atomic_load_acquire)
atomic_store_release: Any = intrinsic(_atomic_store_release)
sched_yield: Any = intrinsic(_sched_yield)
cycle_counter: Any = intrinsic(_cycle_counter)

# kernels that never allocate compile without reference counting (see splice/kernels/jit.py)
_INLINE: dict[str, Any] = {"cache": True, "nogil": True, "inline": "always", **NO_NRT}


@njit(**_INLINE)
def spin_lock(locks: Any, i: Any) -> None:
    """Acquire spin lock ``locks[i]`` (0 free, 1 held); after a short spin, yield the core so a
    preempted holder can run."""
    spins = 0
    while atomic_cas(locks, i, 0, 1) != 0:
        spins += 1
        if spins >= 64:
            sched_yield()
            spins = 0


@njit(**_INLINE)
def spin_unlock(locks: Any, i: Any) -> None:
    """Release spin lock ``locks[i]`` (a release store: the critical section's reads and writes
    stay before it; a plain store on x86, where an exchange would be a full barrier)."""
    atomic_store_release(locks, i, 0)
