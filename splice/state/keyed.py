"""Keyed state backends: fixed-width records keyed by fixed-width keys, in memory or in RocksDB.

A keyed state maps a key of ``key_words`` int64 words to a value of ``value_words`` int64 words
(float fields are stored as their IEEE bits). Operators read and write it a batch at a time:

* ``get(keys)`` with keys ``(m, key_words)`` returns ``(values (m, value_words), found (m,))``
  (zeros where not found);
* ``put(keys, values)`` inserts or overwrites those ``m`` keys;
* ``scan()`` returns every ``(keys, values)``, in no defined order;
* ``snapshot()`` returns a picklable handle from which ``open_keyed_state(..., state=handle)``
  rebuilds the same contents; ``memory_bytes()`` is what the backend holds in memory (for the
  state budget), ``disk_bytes()`` what it holds on disk.

Two backends (``StateBackendKind``):

* ``"memory"`` (:class:`MemoryKeyedState`, the default): an open-addressing hash table over the
  key words (the group-by's numba kernels) and a value matrix. A snapshot copies both: a
  checkpoint is always full.
* ``"rocksdb"`` (:class:`RocksDBKeyedState`, ``rocksdict``): the records live in a RocksDB
  database under ``directory/live``: in memory at most two memtables of ``write_buffer_bytes``
  (2 MB), a block cache of ``block_cache_bytes`` (4 MB) and the SST files' index and bloom
  filter blocks (about 1.5 bytes a key), the rest on disk, so the state may be larger than
  memory; ``memory_bytes()`` reports memtables, table readers and block cache.
  Keys and values are encoded for a whole batch at once (an ``(m, w)`` int64 matrix viewed as
  fixed-size binary); the only per-record Python is the
  list of ``bytes`` objects and one ``WriteBatch.put`` per record, which rocksdict's API
  requires. Writes skip the WAL: durability comes from snapshots.

  ``snapshot()`` flushes the memtable and takes a RocksDB checkpoint into
  ``directory/snapshots/snap-N``: SST files are immutable, so the checkpoint hard-links them,
  and the only new bytes are the SST files written since the previous snapshot (the records
  changed since then, plus whatever compaction rewrote): checkpoints are **incremental**. The
  handle names the snapshot directory and every file in it with its size; restoring checks
  them (RocksDB checks block checksums as it reads), links the snapshot's SST files into a
  fresh ``live`` directory, copies the small mutable files, and reopens. Whatever ``live``
  held beyond the snapshot (writes after it, before a crash) is discarded. The last
  ``keep_snapshots`` snapshot directories are kept (one more than a checkpoint store keeps).

>>> import numpy as np
>>> s = open_keyed_state("memory", key_words=1, value_words=2)
>>> s.put(np.array([[7], [9]]), np.array([[1, 2], [3, 4]]))
>>> values, found = s.get(np.array([[9], [8]]))
>>> values.tolist(), found.tolist()
([[3, 4], [0, 0]], [True, False])
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from splice.core.errors import PlanError, StateError
from splice.kernels import group_keys as K

__all__ = [
    "StateBackendKind",
    "KeyedState",
    "MemoryKeyedState",
    "RocksDBKeyedState",
    "open_keyed_state",
    "rows_to_bytes",
    "bytes_to_rows",
]

StateBackendKind = Literal["memory", "rocksdb"]

_EMPTY_BOOL = np.zeros(0, dtype=np.bool_)


class KeyedState(Protocol):
    """Batch-at-a-time keyed state (see the module docstring)."""

    key_words: int
    value_words: int

    def get(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def put(self, keys: np.ndarray, values: np.ndarray) -> None: ...

    def scan(self) -> tuple[np.ndarray, np.ndarray]: ...

    def snapshot(self) -> Any: ...

    def memory_bytes(self) -> int: ...

    def disk_bytes(self) -> int: ...

    def close(self) -> None: ...


def rows_to_bytes(rows: np.ndarray) -> list[bytes]:
    """Each row of an ``(m, w)`` int64 matrix as ``8 * w`` bytes (one vectorized conversion)."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    out: Any = rows.view(np.dtype((np.void, 8 * rows.shape[1]))).ravel().tolist()
    return out  # type: ignore[no-any-return]


_SIGN = np.uint64(1) << np.uint64(63)


def _ordered_keys(keys: np.ndarray) -> tuple[list[bytes], np.ndarray]:
    """``keys`` as RocksDB keys in ascending order, and that order (a permutation of the rows).

    A key is its words big-endian with the sign bit flipped, so byte order is numeric order;
    RocksDB reads and writes sorted runs of keys markedly faster than scattered ones.
    """
    order = np.lexsort(keys.T[::-1]) if keys.shape[1] > 1 else np.argsort(keys[:, 0], kind="stable")
    flipped = (keys[order].view(np.uint64) ^ _SIGN).astype(">u8")
    return rows_to_bytes(flipped.view(np.int64)), order


def _decode_keys(blobs: list[bytes], w: int) -> np.ndarray:
    if not blobs:
        return np.zeros((0, w), dtype=np.int64)
    be = np.frombuffer(b"".join(blobs), dtype=">u8").reshape(len(blobs), w)
    return (be.astype(np.uint64) ^ _SIGN).view(np.int64)


def bytes_to_rows(blobs: list[bytes], w: int) -> np.ndarray:
    """Inverse of :func:`rows_to_bytes`."""
    if not blobs:
        return np.zeros((0, w), dtype=np.int64)
    return np.frombuffer(b"".join(blobs), dtype=np.int64).reshape(len(blobs), w).copy()


def _check_shapes(keys: np.ndarray, values: np.ndarray | None, kw: int, vw: int) -> None:
    if keys.ndim != 2 or keys.shape[1] != kw:
        raise StateError(f"keyed state: keys must be (m, {kw}) int64, got shape {keys.shape}")
    if values is not None and (values.ndim != 2 or values.shape != (keys.shape[0], vw)):
        raise StateError(f"keyed state: values must be ({keys.shape[0]}, {vw}) int64, got {values.shape}")


class MemoryKeyedState:
    """Keyed state in memory: a hash table over the key words and a value matrix."""

    def __init__(self, key_words: int, value_words: int, state: Any = None) -> None:
        self.key_words = key_words
        self.value_words = value_words
        self.n = 0
        self.keys = np.zeros((16, key_words), dtype=np.int64)
        self.values = np.zeros((16, value_words), dtype=np.int64)
        self.slots = np.full(32, -1, dtype=np.int64)
        if state is not None:
            keys, values = state
            self.put(np.asarray(keys, dtype=np.int64), np.asarray(values, dtype=np.int64))

    def get(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        _check_shapes(keys, None, self.key_words, self.value_words)
        idx = K.lookup_rows(np.ascontiguousarray(keys, dtype=np.int64), self.slots, self.keys)
        found = idx >= 0
        values = self.values[np.where(found, idx, 0)] if self.n else np.zeros(
            (len(keys), self.value_words), dtype=np.int64)
        values[~found] = 0
        return values, found

    def put(self, keys: np.ndarray, values: np.ndarray) -> None:
        _check_shapes(keys, values, self.key_words, self.value_words)
        ids, self.slots, self.keys, n = K.assign_groups(
            np.ascontiguousarray(keys, dtype=np.int64), _EMPTY_BOOL, self.slots, self.keys, self.n)
        self.n = int(n)
        if len(self.values) < len(self.keys):
            grown = np.zeros((len(self.keys), self.value_words), dtype=np.int64)
            grown[: len(self.values)] = self.values
            self.values = grown
        self.values[ids] = values

    def scan(self) -> tuple[np.ndarray, np.ndarray]:
        return self.keys[: self.n].copy(), self.values[: self.n].copy()

    def snapshot(self) -> Any:
        return self.scan()

    def memory_bytes(self) -> int:
        return int(self.keys.nbytes + self.values.nbytes + self.slots.nbytes)

    def disk_bytes(self) -> int:
        return 0

    def close(self) -> None:
        return None


#: what a RocksDB database holds in memory: memtables, index/filter blocks, cached data blocks
_MEMORY_PROPERTIES = ("rocksdb.cur-size-all-mem-tables", "rocksdb.estimate-table-readers-mem",
                      "rocksdb.block-cache-usage")
_SNAPSHOTS = "snapshots"
_LIVE = "live"


class RocksDBKeyedState:
    """Keyed state in RocksDB with incremental snapshots (see the module docstring)."""

    def __init__(
        self,
        key_words: int,
        value_words: int,
        directory: str | Path | None = None,
        state: Any = None,
        write_buffer_bytes: int = 2 << 20,
        block_cache_bytes: int = 4 << 20,
        keep_snapshots: int = 4,
    ) -> None:
        try:
            import rocksdict
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise PlanError("the RocksDB state backend needs rocksdict: pip install 'splice[rocksdb]'") from exc
        if keep_snapshots < 1:
            raise PlanError(f"RocksDB keyed state: keep_snapshots must be >= 1, got {keep_snapshots}")
        self._rd = rocksdict
        self.key_words = key_words
        self.value_words = value_words
        self.keep_snapshots = keep_snapshots
        self._temporary = directory is None
        self.root = Path(tempfile.mkdtemp(prefix="splice-keyed-") if directory is None else directory)
        self.live = self.root / _LIVE
        self.snapshots = self.root / _SNAPSHOTS
        self.snapshots.mkdir(parents=True, exist_ok=True)
        self._lock = _lock_directory(self.root)
        if self.live.exists():  # writes past the last snapshot are never trusted
            shutil.rmtree(self.live)
        self.seq = 0
        self.files: dict[str, int] = {}
        #: bytes of SST files new in the latest snapshot (what an incremental checkpoint adds)
        self.last_snapshot_new_bytes = 0
        if state is not None:
            self._restore(state)
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_write_buffer_size(write_buffer_bytes)
        opts.set_max_write_buffer_number(2)
        table = rocksdict.BlockBasedOptions()
        table.set_block_cache(rocksdict.Cache(block_cache_bytes))
        # point lookups dominate: a bloom filter per SST file (10 bits a key, in memory with the
        # index) spares the lookup of an absent key its block reads, and LZ4 blocks are cheaper
        # to decode than the default Snappy and about as small; no compression at all would cost
        # a little less CPU but make every checkpoint much larger
        # (docs/lab/recovery.md, "Table options")
        table.set_bloom_filter(10, False)
        opts.set_compression_type(rocksdict.DBCompressionType.lz4())
        opts.set_block_based_table_factory(table)
        try:
            self.db: Any = rocksdict.Rdict(str(self.live), options=opts)
        except Exception as exc:  # rocksdict raises plain exceptions
            os.close(self._lock)
            raise StateError(f"keyed state: cannot open RocksDB in {str(self.live)!r}: {exc}") from exc
        wo: Any = rocksdict.WriteOptions()
        wo.disable_wal = True  # a property at run time (the type stubs say a method)
        self._wo = wo
        self._finalizer = weakref.finalize(self, _close_db, self.db, self.root if self._temporary else None,
                                           self._lock)

    def _restore(self, state: Any) -> None:
        try:
            if state["kind"] != "rocksdb" or (state["key_words"], state["value_words"]) != (
                    self.key_words, self.value_words):
                raise StateError(f"keyed state: snapshot of another layout ({state['kind']}, "
                                 f"{state['key_words']}x{state['value_words']} words)")
            src = Path(state["path"])
            files: dict[str, int] = dict(state["files"])
            self.seq = int(state["seq"])
        except (KeyError, TypeError) as exc:
            raise StateError(f"keyed state: snapshot handle unreadable ({exc})") from exc
        for name, size in files.items():
            p = src / name
            if not p.is_file() or p.stat().st_size != size:
                raise StateError(f"keyed state: RocksDB snapshot file {str(p)!r} is missing or has "
                                 f"the wrong size (expected {size} bytes)")
        self.live.mkdir(parents=True)
        for name in files:
            if name.endswith(".sst"):
                try:
                    os.link(src / name, self.live / name)
                    continue
                except OSError:
                    pass
            shutil.copy2(src / name, self.live / name)
        self.files = {n: s for n, s in files.items() if n.endswith(".sst")}

    def get(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        _check_shapes(keys, None, self.key_words, self.value_words)
        m = len(keys)
        if m == 0:
            return np.zeros((0, self.value_words), dtype=np.int64), np.zeros(0, dtype=bool)
        kb, order = _ordered_keys(keys)
        got = self.db.get(kb)
        hit = np.array([g is not None for g in got], dtype=np.bool_)
        values = np.zeros((m, self.value_words), dtype=np.int64)
        found = np.zeros(m, dtype=bool)
        if hit.any():
            rows = order[hit]
            values[rows] = bytes_to_rows([g for g in got if g is not None], self.value_words)
            found[rows] = True
        return values, found

    def put(self, keys: np.ndarray, values: np.ndarray) -> None:
        _check_shapes(keys, values, self.key_words, self.value_words)
        if len(keys) == 0:
            return
        batch = self._rd.WriteBatch(raw_mode=True)
        put = batch.put
        kb, order = _ordered_keys(keys)
        for k, v in zip(kb, rows_to_bytes(values[order]), strict=True):
            put(k, v)
        self.db.write(batch, self._wo)

    def scan(self) -> tuple[np.ndarray, np.ndarray]:
        # two passes in key order (nothing writes in between): no Python statement per record
        keys: list[bytes] = list(self.db.keys())
        values: list[bytes] = list(self.db.values())
        return _decode_keys(keys, self.key_words), bytes_to_rows(values, self.value_words)

    def snapshot(self) -> Any:
        self.db.flush()
        self.seq += 1
        target = self.snapshots / f"snap-{self.seq:09d}"
        if target.exists():  # left by a run that crashed after this point: superseded
            shutil.rmtree(target)
        self._rd.Checkpoint(self.db).create_checkpoint(str(target))
        files = {p.name: p.stat().st_size for p in target.iterdir() if p.is_file()}
        ssts = {n: s for n, s in files.items() if n.endswith(".sst")}
        self.last_snapshot_new_bytes = sum(s for n, s in ssts.items() if n not in self.files)
        self.files = ssts
        for old in self.snapshots.glob("snap-*"):
            try:
                n = int(old.name[5:])
            except ValueError:
                continue
            if n <= self.seq - self.keep_snapshots or n > self.seq:
                shutil.rmtree(old, ignore_errors=True)
        return {"kind": "rocksdb", "path": str(target.resolve()), "seq": self.seq, "files": files,
                "key_words": self.key_words, "value_words": self.value_words,
                "new_bytes": self.last_snapshot_new_bytes}

    def memory_bytes(self) -> int:
        return sum(int(self.db.property_int_value(p) or 0) for p in _MEMORY_PROPERTIES)

    def disk_bytes(self) -> int:
        return int(self.db.property_int_value("rocksdb.total-sst-files-size") or 0)

    def close(self) -> None:
        """Close the database (and remove it when it lives in a temporary directory)."""
        self._finalizer()


def _lock_directory(root: Path) -> int:
    """An exclusive lock on ``root`` held while the state is open: two operators (or two runs)
    given the same directory would otherwise wipe each other's live database."""
    import fcntl

    fd = os.open(root / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise StateError(f"keyed state: directory {str(root)!r} is in use by another open state "
                         "(each operator needs a directory of its own)") from exc
    return fd


def _close_db(db: Any, temporary_root: Path | None, lock: int) -> None:
    try:
        db.close()
    except Exception:  # noqa: BLE001 - closing twice is harmless
        pass
    os.close(lock)
    if temporary_root is not None:
        shutil.rmtree(temporary_root, ignore_errors=True)


def open_keyed_state(
    kind: StateBackendKind,
    key_words: int,
    value_words: int,
    directory: str | Path | None = None,
    state: Any = None,
) -> KeyedState:
    """A keyed state of backend ``kind`` (restored from ``state``, a snapshot handle, if given)."""
    if kind == "memory":
        return MemoryKeyedState(key_words, value_words, state)
    if kind == "rocksdb":
        return RocksDBKeyedState(key_words, value_words, directory, state)
    raise PlanError(f"unknown state backend {kind!r} (use 'memory' or 'rocksdb')")
