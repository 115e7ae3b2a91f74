"""The numba internals splice's kernels use: each compiles and does what the kernels assume.

splice imports numba's non-public parts (``intrinsic``, ``overload``, ``cgutils``, the ``_nrt``
flag, the dispatcher class, ``trailing_zeros``) through ``splice.kernels.numba_internals`` alone;
these tests pin that and exercise every one, so an upgrade that changes them fails here rather
than deep inside a join.
"""

from __future__ import annotations

import ast
import math
import threading
from pathlib import Path

import numpy as np
import pytest
from numba import njit

import splice
from splice.kernels import numba_internals as ni
from splice.kernels.atomics import (
    atomic_add,
    atomic_cas,
    atomic_load_acquire,
    atomic_or,
    atomic_store_release,
    atomic_xchg,
    spin_lock,
    spin_unlock,
)
from splice.kernels.jit import kernel
from splice.kernels.prefetch import prefetch
from splice.kernels.raw_memory import load, mem_alloc, mem_copy, mem_free, store

_PACKAGE = Path(splice.__file__).parent
_INTERNAL = ("numba.core", "numba.extending", "numba.cpython", "numba.np", "numba.misc", "llvmlite")


def _imported_modules(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


def test_installed_numba_is_in_the_tested_range() -> None:
    assert ni.supported(), f"numba {ni.numba_version()} is outside {ni.TESTED}"


def test_only_the_internals_module_imports_numba_internals() -> None:
    offenders = {}
    for path in _PACKAGE.rglob("*.py"):
        if path.name == "numba_internals.py":
            continue
        bad = [m for m in _imported_modules(path) if m.startswith(_INTERNAL)]
        if bad:
            offenders[str(path.relative_to(_PACKAGE))] = bad
    assert offenders == {}


def test_nrt_flag_absent_outside_the_internals_module() -> None:
    # the private flag is spelled once; kernels spread NO_NRT
    spelled = [str(p.relative_to(_PACKAGE)) for p in _PACKAGE.rglob("*.py")
               if p.name != "numba_internals.py" and '"_nrt"' in p.read_text()]
    assert spelled == []


def test_kernel_without_reference_counting_compiles_and_runs() -> None:
    @kernel()
    def total(a):  # type: ignore[no-untyped-def]
        s = 0
        for i in range(a.shape[0]):
            s += a[i]
        return s

    a = np.arange(1000, dtype=np.int64)
    assert total(a) == a.sum()
    assert isinstance(total, ni.Dispatcher)
    assert total.targetoptions.get("_nrt") is False


def test_float_bits_roundtrip_and_matches_numpy_view() -> None:
    @njit
    def roundtrip(xs, bits, back):  # type: ignore[no-untyped-def]
        for i in range(xs.shape[0]):
            bits[i] = ni.float_bits(xs[i])
            back[i] = ni.bits_float(bits[i])

    xs = np.array([0.0, -0.0, 1.5, -2.25, math.inf, -math.inf, 5e-324, 1.7976931348623157e308])
    bits = np.empty(len(xs), np.int64)
    back = np.empty(len(xs))
    roundtrip(xs, bits, back)
    assert (bits == xs.view(np.int64)).all()
    assert (back.view(np.int64) == xs.view(np.int64)).all()


def test_trailing_zeros() -> None:
    @njit
    def tz(v):  # type: ignore[no-untyped-def]
        return ni.trailing_zeros(v)

    for shift in (0, 1, 7, 31, 62):
        assert tz(np.uint64(1) << np.uint64(shift)) == shift
    assert tz(np.uint64(0b101000)) == 3


def test_prefetch_compiles_and_leaves_data_alone() -> None:
    @njit
    def touch(a):  # type: ignore[no-untyped-def]
        s = 0
        for i in range(a.shape[0]):
            if i + 8 < a.shape[0]:
                prefetch(a, i + 8)
            s += a[i]
        return s

    a = np.arange(100, dtype=np.int64)
    assert touch(a) == a.sum()


def test_atomics_single_thread_semantics() -> None:
    @njit
    def run(a):  # type: ignore[no-untyped-def]
        old_add = atomic_add(a, 0, 5)
        old_or = atomic_or(a, 1, 6)
        old_xchg = atomic_xchg(a, 2, 9)
        failed = atomic_cas(a, 3, 1, 2)  # a[3] is 0: no swap, returns 0
        swapped = atomic_cas(a, 3, 0, 7)  # swap, returns 0
        atomic_store_release(a, 4, 11)
        return old_add, old_or, old_xchg, failed, swapped, atomic_load_acquire(a, 4)

    a = np.array([1, 1, 3, 0, 0], dtype=np.int64)
    assert run(a) == (1, 1, 3, 0, 0, 11)
    assert a.tolist() == [6, 7, 9, 7, 11]


def test_atomic_add_and_spin_lock_across_threads() -> None:
    @njit(nogil=True)
    def work(counter, locks, plain, n):  # type: ignore[no-untyped-def]
        for _ in range(n):
            atomic_add(counter, 0, 1)
            spin_lock(locks, 0)
            plain[0] += 1
            spin_unlock(locks, 0)

    counter = np.zeros(1, np.int64)
    locks = np.zeros(1, np.int64)
    plain = np.zeros(1, np.int64)
    work(counter, locks, plain, 1)  # compile before the threads start
    counter[0] = plain[0] = 0
    n, threads = 200_000, 4
    ts = [threading.Thread(target=work, args=(counter, locks, plain, n)) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert counter[0] == n * threads
    assert plain[0] == n * threads
    assert locks[0] == 0


@pytest.mark.parametrize("width", [1, 2, 4, 8])
def test_raw_memory_store_load_copy_free(width: int) -> None:
    @njit
    def run(value):  # type: ignore[no-untyped-def]
        a = mem_alloc(64)
        b = mem_alloc(64)
        if a == 0 or b == 0:
            return -1, -1
        if width == 1:
            store(a, value, 1)
            mem_copy(b, a, 1)
            out = load(b, 1)
        elif width == 2:
            store(a, value, 2)
            mem_copy(b, a, 2)
            out = load(b, 2)
        elif width == 4:
            store(a, value, 4)
            mem_copy(b, a, 4)
            out = load(b, 4)
        else:
            store(a, value, 8)
            mem_copy(b, a, 8)
            out = load(b, 8)
        mem_free(a)
        mem_free(b)
        return out, 0

    value = -0x0123456789ABCDEF
    expected = value & ((1 << (8 * width)) - 1)
    if width == 8:
        expected = value
    assert run(value) == (expected, 0)


_CACHED_MODULE = '''
from typing import NamedTuple

import numpy as np
from numba import njit

import splice.kernels.numba_internals  # noqa: F401  (the cache's index loader)


class {name}(NamedTuple):
    a: np.ndarray


@njit(cache=True)
def total(x):
    return x.a.sum()


print(total({name}(np.arange(5))))
'''


def test_a_renamed_named_tuple_recompiles_instead_of_failing(tmp_path: Path) -> None:
    """numba's cache index pickles a kernel's named tuple argument types by name; after the
    class is renamed (an upgrade), the old index must read as stale and the kernel compile."""
    import subprocess
    import sys

    module = tmp_path / "cached_kernel.py"
    runner = tmp_path / "runner.py"
    runner.write_text("import cached_kernel\n")  # imported, as splice's kernels are
    env = {"PYTHONPATH": f"{tmp_path}:{Path(splice.__file__).parents[1]}", "PATH": "/usr/bin:/bin"}
    for name in ("Before", "After"):
        module.write_text(_CACHED_MODULE.format(name=name))
        got = subprocess.run([sys.executable, str(runner)], capture_output=True, text=True,
                             cwd=tmp_path, env=env, timeout=120)
        assert got.returncode == 0, got.stderr
        assert got.stdout.strip() == "10"
    assert list((tmp_path / "__pycache__").glob("cached_kernel.total-*.nbi"))
