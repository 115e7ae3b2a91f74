"""Atomic loads, stores and fetch-add on int64 array cells, and a cycle counter, for numba kernels.

Executor threads run numba kernels compiled ``nogil`` and publish an operation's completion through
a shared ``int64`` array. A plain load in a spin loop may be hoisted by the compiler and never see the
other thread's store, so these intrinsics emit LLVM atomic instructions (acquire loads, release
stores, sequentially consistent read-modify-write) instead.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["atomic_load", "atomic_store", "atomic_add", "cycle_counter", "spin_pause", "yield_cpu"]


def _cell_pointer(context: Any, builder: Any, arrty: Any, arr: Any, idx: Any) -> Any:
    ary = context.make_array(arrty)(context, builder, arr)
    return cgutils.get_item_pointer(context, builder, arrty, ary, [idx], wraparound=False)


def _atomic_load(typingctx: Any, arr: Any, idx: Any) -> Any:
    """``arr[idx]`` read with acquire ordering (``arr``: 1-d int64)."""
    sig = types.int64(arr, idx)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ptr = _cell_pointer(context, builder, signature.args[0], args[0], args[1])
        return builder.load_atomic(ptr, "acquire", 8)

    return sig, codegen


def _atomic_store(typingctx: Any, arr: Any, idx: Any, value: Any) -> Any:
    """``arr[idx] = value`` with release ordering (``arr``: 1-d int64, ``value``: int64)."""
    sig = types.void(arr, idx, types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ptr = _cell_pointer(context, builder, signature.args[0], args[0], args[1])
        builder.store_atomic(args[2], ptr, "release", 8)
        return context.get_dummy_value()

    return sig, codegen


def _atomic_add(typingctx: Any, arr: Any, idx: Any, value: Any) -> Any:
    """Add ``value`` to ``arr[idx]`` atomically and return the previous value."""
    sig = types.int64(arr, idx, types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ptr = _cell_pointer(context, builder, signature.args[0], args[0], args[1])
        return builder.atomic_rmw("add", ptr, args[2], "seq_cst")

    return sig, codegen


def _cycle_counter(typingctx: Any) -> Any:
    """The CPU's cycle counter (``llvm.readcyclecounter``), for time spent waiting in kernels."""
    sig = types.int64()

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fnty = ir.FunctionType(ir.IntType(64), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.readcyclecounter")
        return builder.call(fn, [])

    return sig, codegen


def _spin_pause(typingctx: Any) -> Any:
    """A compiler barrier for spin loops (a sequentially consistent fence)."""
    sig = types.void()

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return sig, codegen


def _yield_cpu(typingctx: Any) -> Any:
    """``sched_yield()``: let another thread run while spinning (oversubscribed cores)."""
    sig = types.void()

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fnty = ir.FunctionType(ir.IntType(32), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "sched_yield")
        builder.call(fn, [])
        return context.get_dummy_value()

    return sig, codegen


atomic_load: Any = intrinsic(_atomic_load)
atomic_store: Any = intrinsic(_atomic_store)
atomic_add: Any = intrinsic(_atomic_add)
cycle_counter: Any = intrinsic(_cycle_counter)
spin_pause: Any = intrinsic(_spin_pause)
yield_cpu: Any = intrinsic(_yield_cpu)
