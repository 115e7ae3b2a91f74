"""Keyed state backends against a dict: batch get/put, scan, snapshot/restore, incremental
RocksDB snapshots, damaged snapshots detected, writes after a snapshot discarded on restore."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import PlanError, StateError
from splice.kernels import group_keys as K
from splice.state.keyed import (
    MemoryKeyedState,
    RocksDBKeyedState,
    bytes_to_rows,
    open_keyed_state,
    rows_to_bytes,
)
from tests.reference.group_keys import py_lookup_rows

KW, VW = 2, 3


def _dict_get(ref: dict[tuple[int, ...], tuple[int, ...]], keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    vals = np.zeros((len(keys), VW), dtype=np.int64)
    found = np.zeros(len(keys), dtype=bool)
    for i, k in enumerate(map(tuple, keys.tolist())):
        if k in ref:
            vals[i] = ref[k]
            found[i] = True
    return vals, found


@st.composite
def operations(draw: st.DrawFn) -> list[tuple[str, np.ndarray, np.ndarray]]:
    ops = []
    extreme = [np.iinfo(np.int64).min, -1, 0, 1, np.iinfo(np.int64).max]
    for _ in range(draw(st.integers(1, 8))):
        m = draw(st.integers(0, 30))
        seed = draw(st.integers(0, 2**16))
        rng = np.random.default_rng(seed)
        keys = rng.integers(-5, 5, (m, KW))
        if m and draw(st.booleans()):
            keys[0] = rng.choice(extreme, KW)
        # a put's keys are distinct (as the group-by writes them)
        keys = np.unique(keys, axis=0) if m else keys.reshape(0, KW)
        rng.shuffle(keys)
        vals = rng.integers(-(2**62), 2**62, (len(keys), VW))
        ops.append((draw(st.sampled_from(["put", "get", "snapshot"])), np.ascontiguousarray(keys), vals))
    return ops


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
@settings(max_examples=15, deadline=None)
@given(ops=operations(), restore_at=st.integers(0, 8))
def test_backend_equals_a_dict_and_restores_any_snapshot(kind: str, ops: list, restore_at: int) -> None:
    state = open_keyed_state(kind, KW, VW)  # type: ignore[arg-type]
    ref: dict[tuple[int, ...], tuple[int, ...]] = {}
    snaps: list[tuple[Any, dict]] = []
    try:
        for op, keys, vals in ops:
            if op == "put":
                state.put(keys, vals)
                ref.update(zip(map(tuple, keys.tolist()), map(tuple, vals.tolist()), strict=True))
            elif op == "get":
                got, found = state.get(keys)
                want, want_found = _dict_get(ref, keys)
                assert found.tolist() == want_found.tolist()
                assert got.tolist() == want.tolist()
            else:
                snaps.append((state.snapshot(), dict(ref)))
        keys, vals = state.scan()
        assert dict(zip(map(tuple, keys.tolist()), map(tuple, vals.tolist()), strict=True)) == ref
        if kind == "rocksdb" and len(snaps) > 4:  # it keeps its last 4 snapshots' directories
            with pytest.raises(StateError):
                open_keyed_state(kind, KW, VW, state=snaps[0][0])  # type: ignore[arg-type]
            snaps = snaps[-4:]
        if snaps:
            handle, at = snaps[min(restore_at, len(snaps) - 1)]
            restored = open_keyed_state(kind, KW, VW, state=handle)  # type: ignore[arg-type]
            try:
                keys, vals = restored.scan()
                assert dict(zip(map(tuple, keys.tolist()), map(tuple, vals.tolist()), strict=True)) == at
            finally:
                restored.close()
    finally:
        state.close()


def test_rows_bytes_round_trip_and_lookup_twin() -> None:
    rows = np.array([[1, -2], [np.iinfo(np.int64).min, 7]], dtype=np.int64)
    assert bytes_to_rows(rows_to_bytes(rows), 2).tolist() == rows.tolist()
    s = MemoryKeyedState(2, 1)
    s.put(rows, np.array([[5], [6]]))
    probe = np.array([[1, -2], [3, 3]], dtype=np.int64)
    table: dict[tuple[int, ...], int] = {(1, -2): 0, (int(rows[1, 0]), 7): 1}
    assert K.lookup_rows(probe, s.slots, s.keys).tolist() == py_lookup_rows(probe, table).tolist()


def test_rocksdb_snapshots_are_incremental(tmp_path: Path) -> None:
    n = 50_000
    s = RocksDBKeyedState(1, 4, tmp_path / "ks")
    keys = np.arange(n, dtype=np.int64).reshape(n, 1)
    s.put(keys, np.ones((n, 4), dtype=np.int64))
    full = s.snapshot()
    assert full["new_bytes"] > 0
    changed = keys[: n // 100]
    s.put(changed, np.full((len(changed), 4), 2, dtype=np.int64))
    inc = s.snapshot()
    # only the SST of the changed keys is new; the first snapshot's files are hard-linked
    assert 0 < inc["new_bytes"] < full["new_bytes"] / 10
    s.close()
    restored = RocksDBKeyedState(1, 4, tmp_path / "ks", state=inc)
    got, found = restored.get(keys[[0, n // 100, n - 1]])
    assert found.all() and got[:, 0].tolist() == [2, 1, 1]
    restored.close()


def test_rocksdb_restore_discards_writes_after_the_snapshot(tmp_path: Path) -> None:
    s = RocksDBKeyedState(1, 1, tmp_path)
    s.put(np.array([[1]]), np.array([[10]]))
    handle = s.snapshot()
    s.put(np.array([[1], [2]]), np.array([[11], [20]]))  # after the checkpoint: a crash loses it
    s.db.flush()
    s.close()
    again = RocksDBKeyedState(1, 1, tmp_path, state=handle)
    got, found = again.get(np.array([[1], [2]]))
    assert found.tolist() == [True, False] and got[0, 0] == 10
    again.close()


def test_rocksdb_damaged_snapshot_is_detected(tmp_path: Path) -> None:
    s = RocksDBKeyedState(1, 1, tmp_path / "a")
    s.put(np.array([[1]]), np.array([[10]]))
    handle = s.snapshot()
    s.close()
    sst = next(p for p in Path(handle["path"]).iterdir() if p.suffix == ".sst")
    sst.write_bytes(sst.read_bytes()[:-7])
    with pytest.raises(StateError, match="missing or has the wrong size"):
        RocksDBKeyedState(1, 1, tmp_path / "b", state=handle)
    shutil.rmtree(handle["path"])
    with pytest.raises(StateError, match="missing"):
        RocksDBKeyedState(1, 1, tmp_path / "c", state=handle)
    with pytest.raises(StateError, match="another layout"):
        RocksDBKeyedState(2, 1, tmp_path / "d", state=handle)


def test_bad_arguments_are_clear_errors() -> None:
    with pytest.raises(PlanError, match="unknown state backend"):
        open_keyed_state("redis", 1, 1)  # type: ignore[arg-type]
    s = MemoryKeyedState(2, 1)
    with pytest.raises(StateError, match=r"keys must be \(m, 2\)"):
        s.put(np.zeros((3, 1), dtype=np.int64), np.zeros((3, 1), dtype=np.int64))


def test_a_directory_in_use_is_refused_not_wiped(tmp_path: Path) -> None:
    a = RocksDBKeyedState(1, 1, tmp_path)
    a.put(np.array([[1]]), np.array([[2]]))
    with pytest.raises(StateError, match="in use by another open state"):
        RocksDBKeyedState(1, 1, tmp_path)
    values, found = a.get(np.array([[1]]))
    assert found[0] and values[0, 0] == 2
    a.close()
