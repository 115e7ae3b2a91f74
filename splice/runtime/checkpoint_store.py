"""Checkpoint stores: where a job's consistent state goes, and how the newest intact copy returns.

A checkpoint is ``(checkpoint_id, state, meta)``: ``state`` is data (the engine's
``{query: {unit key: operator state}}``), encoded by :mod:`splice.state.codec` (JSON, Arrow IPC
and ``.npy``, never a pickle); ``meta`` a JSON-able dict (source positions, sink epoch, the job's
fingerprint).

:class:`LocalCheckpointStore` (the default) keeps one directory per checkpoint::

    D/chk-000000000007/
        state.arrow          the JSON skeleton
        arrays.arrow         NumPy arrays as .npy images (when there are any)
        arrow-000.arrow ...  Arrow state, one IPC stream per schema
        MANIFEST.json        format, id, meta, and the sha256 and size of every file above

Saving writes into ``chk-....tmp``, fsyncs every file, writes the manifest to a temporary name,
fsyncs, renames it to ``MANIFEST.json`` and renames the directory into place (fsyncing the parent):
a crash at any point leaves either no checkpoint or a whole one. Loading walks checkpoints newest
first and returns the first whose manifest parses, is of this format (``_FORMAT``; a checkpoint of
format 1, whose state was pickled, is never loaded) and whose files all match their checksums and
decode; a corrupted, partial or refused checkpoint is reported in
:attr:`LocalCheckpointStore.skipped` and the previous one used. The last ``keep`` complete
checkpoints are kept.

:class:`RocksDBCheckpointStore` (``rocksdict``, the ``rocksdb`` extra) stores the same files as
content-addressed values: a file whose bytes did not change since an earlier checkpoint (a large
keyed state that a checkpoint interval left alone) is not written again, so checkpoints are
incremental at file granularity. Each checkpoint's manifest and new blobs go in one atomic write
batch.

>>> import tempfile, pyarrow as pa
>>> store = LocalCheckpointStore(tempfile.mkdtemp(), keep=2)
>>> _ = store.save(1, {"q": {"join": [pa.table({"k": [1, 2]})], 7: (1, 2)}}, {"positions": 4})
>>> cp = store.load_latest()
>>> cp.checkpoint_id, cp.meta["positions"], cp.state["q"]["join"][0].num_rows, cp.state["q"][7]
(1, 4, 2, (1, 2))
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from splice.core.errors import PlanError, StateError
from splice.state.codec import FORMAT as _FORMAT
from splice.state.codec import decode_state, encode_state, part_name_ok

__all__ = [
    "Checkpoint",
    "CheckpointStore",
    "LocalCheckpointStore",
    "RocksDBCheckpointStore",
    "BackendKind",
    "open_store",
    "write_atomic",
]

BackendKind = Literal["local", "rocksdb"]

_MANIFEST = "MANIFEST.json"


@dataclass(frozen=True)
class Checkpoint:
    """A restored checkpoint: its id, the state object and the metadata saved with it."""

    checkpoint_id: int
    state: Any
    meta: dict[str, Any]
    nbytes: int = 0


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durable(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    tmp = path.with_name(path.name + ".tmp")
    _write_durable(tmp, data)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _checked_manifest(checkpoint_id: int, manifest: Any) -> dict[str, tuple[str, int]]:
    """The files a parsed manifest lists, ``{name: (sha256, bytes)}``, once the manifest is
    known to be of this format, for this checkpoint, with only this format's file names."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise StateError(f"checkpoint {checkpoint_id}: manifest unreadable (no file list)")
    fmt = manifest.get("format")
    if fmt == 1:
        raise StateError(f"checkpoint {checkpoint_id}: written in format 1, which pickles operator "
                         "state; it is not loaded (unpickling a checkpoint can run code): resume "
                         "from a newer checkpoint or start the job over")
    if fmt != _FORMAT:
        raise StateError(f"checkpoint {checkpoint_id}: format {fmt!r} is not one this version "
                         f"reads ({_FORMAT})")
    if manifest.get("checkpoint_id") != checkpoint_id:
        raise StateError(f"checkpoint {checkpoint_id}: manifest names checkpoint {manifest.get('checkpoint_id')}")
    if not isinstance(manifest.get("meta"), dict):
        raise StateError(f"checkpoint {checkpoint_id}: manifest has no meta object")
    out: dict[str, tuple[str, int]] = {}
    for name, entry in manifest["files"].items():
        if not part_name_ok(name):
            raise StateError(f"checkpoint {checkpoint_id}: manifest lists {name!r}, which is not a "
                             f"file of format {_FORMAT}")
        try:
            digest, size = entry["sha256"], entry["bytes"]
        except (KeyError, TypeError):
            raise StateError(f"checkpoint {checkpoint_id}: manifest entry of {name!r} has no "
                             "sha256 and size") from None
        if type(digest) is not str or not re.fullmatch(r"[0-9a-f]{64}", digest) or type(size) is not int:
            raise StateError(f"checkpoint {checkpoint_id}: manifest entry of {name!r} is malformed")
        out[name] = (digest, size)
    return out


def _decoded(checkpoint_id: int, files: dict[str, bytes]) -> Any:
    try:
        return decode_state(files)
    except StateError as exc:
        raise StateError(f"checkpoint {checkpoint_id}: {exc}") from exc


class CheckpointStore(Protocol):
    """Where checkpoints are saved and restored from."""

    skipped: list[str]

    def save(self, checkpoint_id: int, state: Any, meta: dict[str, Any]) -> int:
        """Store checkpoint ``checkpoint_id`` durably; return the bytes written."""
        ...

    def load_latest(self) -> Checkpoint | None:
        """The newest intact checkpoint, or None when there is none."""
        ...

    def checkpoint_ids(self) -> list[int]:
        """Ids of the stored checkpoints (intact or not), ascending."""
        ...


def _newest_intact(ids: list[int], read: Callable[[int], Checkpoint],
                   skipped: list[str]) -> Checkpoint | None:
    """The newest checkpoint of ``ids`` that reads back intact; why each newer one did not goes
    to ``skipped``."""
    for cid in reversed(ids):
        try:
            return read(cid)
        except StateError as exc:
            skipped.append(str(exc))
    return None


@dataclass
class LocalCheckpointStore:
    """Checkpoints as directories of Arrow IPC files with an atomic, checksummed manifest."""

    directory: str | Path
    keep: int = 3
    skipped: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.keep < 1:
            raise PlanError(f"checkpoint store: keep must be >= 1, got {self.keep}")
        self.root = Path(self.directory) / "checkpoints"
        self.root.mkdir(parents=True, exist_ok=True)

    def _dir(self, checkpoint_id: int) -> Path:
        return self.root / f"chk-{checkpoint_id:012d}"

    def checkpoint_ids(self) -> list[int]:
        ids = []
        for p in self.root.iterdir():
            if p.name.startswith("chk-") and p.is_dir() and not p.name.endswith(".tmp"):
                try:
                    ids.append(int(p.name[4:]))
                except ValueError:
                    continue
        return sorted(ids)

    def save(self, checkpoint_id: int, state: Any, meta: dict[str, Any]) -> int:
        files = encode_state(state)
        final = self._dir(checkpoint_id)
        tmp = final.with_name(final.name + ".tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        entries = {}
        for name, data in files.items():
            _write_durable(tmp / name, data)
            entries[name] = {"sha256": _sha256(data), "bytes": len(data)}
        manifest = {"format": _FORMAT, "checkpoint_id": checkpoint_id, "meta": meta, "files": entries}
        write_atomic(tmp / _MANIFEST, json.dumps(manifest, sort_keys=True).encode())
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(self.root)
        self._prune()
        return sum(len(d) for d in files.values())

    def _prune(self) -> None:
        ids = self.checkpoint_ids()
        for cid in ids[:-self.keep]:
            shutil.rmtree(self._dir(cid), ignore_errors=True)
        for p in self.root.glob("chk-*.tmp"):
            shutil.rmtree(p, ignore_errors=True)

    def _read(self, checkpoint_id: int) -> Checkpoint:
        d = self._dir(checkpoint_id)
        try:
            manifest = json.loads((d / _MANIFEST).read_bytes())
        except (OSError, ValueError) as exc:
            raise StateError(f"checkpoint {checkpoint_id}: manifest missing or unreadable ({exc})") from exc
        entries = _checked_manifest(checkpoint_id, manifest)
        files: dict[str, bytes] = {}
        for name, (digest, size) in entries.items():
            try:
                data = (d / name).read_bytes()
            except OSError as exc:
                raise StateError(f"checkpoint {checkpoint_id}: file {name!r} missing ({exc})") from exc
            if len(data) != size or _sha256(data) != digest:
                raise StateError(f"checkpoint {checkpoint_id}: file {name!r} fails its sha256 checksum")
            files[name] = data
        return Checkpoint(checkpoint_id, _decoded(checkpoint_id, files), dict(manifest["meta"]),
                          sum(len(v) for v in files.values()))

    def load_latest(self) -> Checkpoint | None:
        return _newest_intact(self.checkpoint_ids(), self._read, self.skipped)


@dataclass
class RocksDBCheckpointStore:
    """Checkpoints in a RocksDB database (``rocksdict``), blobs content-addressed: incremental.

    Keys: ``blob/<sha256>`` -> file bytes (written once, shared by every checkpoint that holds the
    same bytes), ``manifest/<id>`` -> the JSON manifest. A checkpoint's new blobs and its manifest
    go in one write batch; pruning drops manifests beyond ``keep`` and blobs no kept manifest names.
    """

    directory: str | Path
    keep: int = 3
    skipped: list[str] = field(default_factory=list)
    written_bytes: int = 0

    def __post_init__(self) -> None:
        try:
            import rocksdict
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise PlanError("the RocksDB checkpoint backend needs rocksdict: pip install 'splice[rocksdb]'") from exc
        if self.keep < 1:
            raise PlanError(f"checkpoint store: keep must be >= 1, got {self.keep}")
        path = Path(self.directory) / "checkpoints.rocksdb"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._rd = rocksdict
        self.db = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True))

    def close(self) -> None:
        self.db.close()

    def checkpoint_ids(self) -> list[int]:
        ids = []
        it = self.db.iter()
        it.seek(b"manifest/")
        while it.valid():
            key = bytes(it.key())
            if not key.startswith(b"manifest/"):
                break
            ids.append(int(key[len(b"manifest/"):]))
            it.next()
        return sorted(ids)

    def save(self, checkpoint_id: int, state: Any, meta: dict[str, Any]) -> int:
        files = encode_state(state)
        batch = self._rd.WriteBatch(raw_mode=True)
        entries = {}
        written = 0
        for name, data in files.items():
            digest = _sha256(data)
            entries[name] = {"sha256": digest, "bytes": len(data)}
            key = f"blob/{digest}".encode()
            if self.db.get(key) is None:
                batch.put(key, data)
                written += len(data)
        manifest = {"format": _FORMAT, "checkpoint_id": checkpoint_id, "meta": meta, "files": entries}
        batch.put(f"manifest/{checkpoint_id:012d}".encode(), json.dumps(manifest, sort_keys=True).encode())
        wo = self._rd.WriteOptions()
        wo.sync = True
        self.db.write(batch, wo)
        self.written_bytes += written
        self._prune()
        return written

    def _manifest(self, checkpoint_id: int) -> dict[str, Any]:
        raw = self.db.get(f"manifest/{checkpoint_id:012d}".encode())
        if raw is None:
            raise StateError(f"checkpoint {checkpoint_id}: manifest missing")
        try:
            manifest = json.loads(bytes(raw))
        except ValueError as exc:
            raise StateError(f"checkpoint {checkpoint_id}: manifest unreadable ({exc})") from exc
        if not isinstance(manifest, dict):
            raise StateError(f"checkpoint {checkpoint_id}: manifest is not a JSON object")
        return manifest

    def _prune(self) -> None:
        ids = self.checkpoint_ids()
        if len(ids) <= self.keep:
            return
        live: set[str] = set()
        for cid in ids[-self.keep:]:
            live.update(e["sha256"] for e in self._manifest(cid)["files"].values())
        for cid in ids[:-self.keep]:
            for e in self._manifest(cid)["files"].values():
                if e["sha256"] not in live:
                    self.db.delete(f"blob/{e['sha256']}".encode())
            self.db.delete(f"manifest/{cid:012d}".encode())

    def _read(self, checkpoint_id: int) -> Checkpoint:
        manifest = self._manifest(checkpoint_id)
        entries = _checked_manifest(checkpoint_id, manifest)
        files: dict[str, bytes] = {}
        for name, (digest, _) in entries.items():
            raw = self.db.get(f"blob/{digest}".encode())
            if raw is None:
                raise StateError(f"checkpoint {checkpoint_id}: blob of {name!r} missing")
            data = bytes(raw)
            if _sha256(data) != digest:
                raise StateError(f"checkpoint {checkpoint_id}: file {name!r} fails its sha256 checksum")
            files[name] = data
        return Checkpoint(checkpoint_id, _decoded(checkpoint_id, files), dict(manifest["meta"]),
                          sum(len(v) for v in files.values()))

    def load_latest(self) -> Checkpoint | None:
        return _newest_intact(self.checkpoint_ids(), self._read, self.skipped)


def open_store(directory: str | Path, backend: BackendKind = "local", keep: int = 3) -> CheckpointStore:
    """The checkpoint store of kind ``backend`` under ``directory``."""
    if backend == "local":
        return LocalCheckpointStore(directory, keep)
    if backend == "rocksdb":
        return RocksDBCheckpointStore(directory, keep)
    raise PlanError(f"unknown checkpoint backend {backend!r} (use 'local' or 'rocksdb')")
