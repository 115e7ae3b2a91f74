"""Checkpoint stores: round trip, keep-K, corrupted and partial checkpoints, RocksDB increments
(the data-only format and tampering: ``test_safe_checkpoints.py``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from splice.core.errors import PlanError
from splice.runtime.checkpoint_store import LocalCheckpointStore, open_store
from splice.state.codec import decode_state, encode_state


def _state(i: int) -> dict:
    return {"q": {"join": {"left": [pa.record_batch({"k": np.arange(i + 3)})],
                           "table": pa.table({"s": ["a", None, "c"]}), "empty": pa.table({"x": pa.array([], pa.int8())}),
                           "arr": np.arange(i), "n": i, 2: (i, "x")}}}


def _eq(a: dict, b: dict) -> None:
    x, y = a["q"]["join"], b["q"]["join"]
    assert x["left"][0].equals(y["left"][0]) and x["table"].equals(y["table"]) and x["empty"].equals(y["empty"])
    assert np.array_equal(x["arr"], y["arr"]) and x["n"] == y["n"] and x[2] == y[2]


def test_codec_round_trip_keeps_arrow_objects_grouped_by_schema() -> None:
    t = pa.table({"k": [1, 2]})
    back = decode_state(encode_state({"a": t, "b": t, "s": _state(2)}))
    assert back["a"].equals(t) and back["b"].equals(t)
    _eq(back["s"], _state(2))
    files = encode_state({"a": t, "b": pa.table({"k": [3]})})
    assert sorted(files) == ["arrow-000.arrow", "state.arrow"]  # one IPC stream per schema
    assert sorted(encode_state(_state(2))) == ["arrays.arrow", "arrow-000.arrow", "arrow-001.arrow",
                                               "arrow-002.arrow", "state.arrow"]


@pytest.mark.parametrize("backend", ["local", "rocksdb"])
def test_round_trip_and_keep_last_k(tmp_path: Path, backend: str) -> None:
    if backend == "rocksdb":
        pytest.importorskip("rocksdict", reason="the rocksdb extra is not installed")
    store = open_store(tmp_path, backend, keep=2)  # type: ignore[arg-type]
    for i in range(1, 5):
        store.save(i, _state(i), {"position": i * 10})
    assert store.checkpoint_ids() == [3, 4]
    cp = store.load_latest()
    assert cp is not None and cp.checkpoint_id == 4 and cp.meta == {"position": 40}
    _eq(cp.state, _state(4))


def test_corrupted_file_falls_back_to_previous(tmp_path: Path) -> None:
    store = LocalCheckpointStore(tmp_path, keep=3)
    store.save(1, _state(1), {"p": 1})
    store.save(2, _state(2), {"p": 2})
    f = tmp_path / "checkpoints" / "chk-000000000002" / "arrow-000.arrow"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    again = LocalCheckpointStore(tmp_path, keep=3)
    cp = again.load_latest()
    assert cp is not None and cp.checkpoint_id == 1
    _eq(cp.state, _state(1))
    assert "checkpoint 2" in again.skipped[0] and "sha256" in again.skipped[0]


@pytest.mark.parametrize("damage", ["truncate", "no_manifest", "bad_manifest", "missing_file", "tmp_dir"])
def test_partial_checkpoint_is_ignored(tmp_path: Path, damage: str) -> None:
    store = LocalCheckpointStore(tmp_path, keep=3)
    store.save(1, _state(1), {"p": 1})
    store.save(2, _state(2), {"p": 2})
    d = tmp_path / "checkpoints" / "chk-000000000002"
    if damage == "truncate":
        f = d / "state.arrow"
        f.write_bytes(f.read_bytes()[:10])
    elif damage == "no_manifest":
        (d / "MANIFEST.json").unlink()
    elif damage == "bad_manifest":
        (d / "MANIFEST.json").write_text("{\"files\": ")
    elif damage == "missing_file":
        (d / "arrow-000.arrow").unlink()
    else:  # a crash while writing checkpoint 3: only its temporary directory exists
        shutil.copytree(d, tmp_path / "checkpoints" / "chk-000000000003.tmp")
        (tmp_path / "checkpoints" / "chk-000000000003.tmp" / "MANIFEST.json").unlink()
    cp = LocalCheckpointStore(tmp_path).load_latest()
    assert cp is not None
    assert cp.checkpoint_id == (2 if damage == "tmp_dir" else 1)


def test_no_intact_checkpoint_means_start_over(tmp_path: Path) -> None:
    store = LocalCheckpointStore(tmp_path)
    store.save(1, {"x": 1}, {})
    (tmp_path / "checkpoints" / "chk-000000000001" / "MANIFEST.json").write_text(json.dumps({"files": {}}))
    assert store.load_latest() is None and store.skipped


def test_rocksdb_checkpoints_are_incremental_and_verified(tmp_path: Path) -> None:
    pytest.importorskip("rocksdict", reason="the rocksdb extra is not installed")
    from splice.runtime.checkpoint_store import RocksDBCheckpointStore

    big = pa.table({"k": np.arange(100_000)})
    store = RocksDBCheckpointStore(tmp_path, keep=2)
    first = store.save(1, {"big": big, "small": 1}, {})
    second = store.save(2, {"big": big, "small": 2}, {})
    assert first > 800_000 and second < 10_000  # the unchanged table is not written again
    store.save(3, {"big": big, "small": 3}, {})
    cp = store.load_latest()
    assert cp is not None and cp.state["big"].equals(big) and cp.state["small"] == 3
    store.close()


def test_bad_options(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="keep"):
        LocalCheckpointStore(tmp_path, keep=0)
    with pytest.raises(PlanError, match="backend"):
        open_store(tmp_path, "s3")  # type: ignore[arg-type]
