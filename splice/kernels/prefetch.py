"""``prefetch(ary, i)``: ask the processor to start loading the cache line of ``ary[i]``.

A hint (``llvm.prefetch``, read, keep in all cache levels): it never faults, not even outside
the array, and changes no value. The joins use it to start the memory reads of a tuple's search
a few tuples before the search runs, so that misses overlap instead of following one another.
"""

from __future__ import annotations

from typing import Any

from numba import types

from splice.kernels.numba_internals import cgutils, intrinsic, ir

__all__ = ["prefetch"]


def _prefetch(typingctx: Any, ary: Any, idx: Any) -> Any:
    sig = types.void(ary, idx)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        arrty = signature.args[0]
        arr = context.make_array(arrty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, arrty, arr, [args[1]], wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        # read (0), high temporal locality (3), data cache (1)
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3),
                          ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


prefetch: Any = intrinsic(_prefetch)
