"""Raw memory for numba kernels: addresses as ``int64``, loads and stores of 1 to 8 bytes,
``malloc``/``free``/``memcpy`` from the C library, and calls through a function pointer.

What builds Arrow arrays through Arrow's C data interface needs them: the structs it hands over
hold pointers, the memory it fills is released by a C callback, and the arrays it reads come as
pointers into another library's buffers. ``malloc`` and ``free`` are resolved by name when the
compiled code is loaded, so kernels using them can be cached (an address baked into the code
could not).
"""

from __future__ import annotations

from typing import Any

from numba import types

from splice.kernels.numba_internals import cgutils, intrinsic, ir

__all__ = ["mem_alloc", "mem_free", "mem_copy", "call_pointer", "load", "store"]

_I8P = ir.IntType(8).as_pointer()
_I64 = ir.IntType(64)


def _mem_alloc(typingctx: Any, nbytes: Any) -> Any:
    """``malloc(nbytes)`` as an address (0 when the allocation failed)."""
    sig = types.int64(types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I8P, [_I64]),
                                            "malloc")
        return builder.ptrtoint(builder.call(fn, [args[0]]), _I64)

    return sig, codegen


def _mem_free(typingctx: Any, address: Any) -> Any:
    """``free`` the memory at ``address`` (from :func:`mem_alloc`)."""
    sig = types.void(types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fn = cgutils.get_or_insert_function(builder.module,
                                            ir.FunctionType(ir.VoidType(), [_I8P]), "free")
        builder.call(fn, [builder.inttoptr(args[0], _I8P)])
        return context.get_dummy_value()

    return sig, codegen


def _mem_copy(typingctx: Any, dst: Any, src: Any, nbytes: Any) -> Any:
    """Copy ``nbytes`` bytes from address ``src`` to address ``dst`` (not overlapping)."""
    sig = types.void(types.int64, types.int64, types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        d, s, n = args
        cgutils.raw_memcpy(builder, builder.inttoptr(d, _I8P), builder.inttoptr(s, _I8P), n, 1)
        return context.get_dummy_value()

    return sig, codegen


def _call_pointer(typingctx: Any, function: Any, argument: Any) -> Any:
    """Call the C function ``void f(void *)`` at address ``function`` with pointer
    ``argument``."""
    sig = types.void(types.int64, types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fnty = ir.FunctionType(ir.VoidType(), [_I8P])
        fn = builder.inttoptr(args[0], fnty.as_pointer())
        builder.call(fn, [builder.inttoptr(args[1], _I8P)])
        return context.get_dummy_value()

    return sig, codegen


def _load(typingctx: Any, address: Any, width: Any) -> Any:
    """The unsigned integer of ``width`` bytes (a literal 1, 2, 4 or 8) at ``address``, widened
    to ``int64`` (8 bytes: the bits as they are)."""
    if not isinstance(width, types.IntegerLiteral) or width.literal_value not in (1, 2, 4, 8):
        return None
    bits = 8 * width.literal_value
    sig = types.int64(types.int64, width)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ty = ir.IntType(bits)
        v = builder.load(builder.inttoptr(args[0], ty.as_pointer()))
        return v if bits == 64 else builder.zext(v, _I64)

    return sig, codegen


def _store(typingctx: Any, address: Any, value: Any, width: Any) -> Any:
    """Store the low ``width`` bytes (a literal 1, 2, 4 or 8) of ``value`` at ``address``."""
    if not isinstance(width, types.IntegerLiteral) or width.literal_value not in (1, 2, 4, 8):
        return None
    bits = 8 * width.literal_value
    sig = types.void(types.int64, types.int64, width)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ty = ir.IntType(bits)
        v = args[1] if bits == 64 else builder.trunc(args[1], ty)
        builder.store(v, builder.inttoptr(args[0], ty.as_pointer()))
        return context.get_dummy_value()

    return sig, codegen


mem_alloc: Any = intrinsic(_mem_alloc)
mem_free: Any = intrinsic(_mem_free)
mem_copy: Any = intrinsic(_mem_copy)
call_pointer: Any = intrinsic(_call_pointer)
load: Any = intrinsic(_load)
store: Any = intrinsic(_store)
