"""Shared mutable state: named tables of fixed-width numeric cells, with versions for windows.

A :class:`StateTable` declares ``keys`` (non-negative integers, preallocated and grown on demand)
and ``columns``; every cell holds one float64 (integers are exact up to 2**53). A cell is
addressed globally as ``table_index << 40 | key * len(columns) + column``, so one int64 names a
cell of any table and the TPG builder sorts them directly.

Object columns (``objects``, with ``object_initial`` making a key's first value) hold one Python
value per key, kept in a dict per column: the slow path of :mod:`splice.txn.objects`. The values
are data that snapshots and the checksum hold as JSON (dicts, lists, tuples, str, int, float, bool,
None; see :func:`~splice.state.codec.encode_value`): a table whose ``object_initial`` makes
anything else is refused when declared, a key holding anything else when the store is snapshotted.

Multi-version: while a batch executes, each write's result is a version of its cell, ordered by
timestamp along the cell's operation chain (the TPG keeps them; rollback recomputes them). After
the batch, committed versions of tables declared with ``history > 0`` are appended to a per-table
version log, kept for ``history`` timestamps, which window reads query.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from splice.core.errors import PlanError, StateError
from splice.state.codec import decode_value, encode_value, paused_gc
from splice.txn._kernels import gather_cells, scatter_cells, window_history

__all__ = ["StateTable", "StateStore", "CELL_SHIFT", "MAX_KEY"]

CELL_SHIFT = 40
_LOCAL_MASK = (1 << CELL_SHIFT) - 1
#: Largest key a table accepts (growth beyond it aborts the transaction).
MAX_KEY = 1 << 31


#: ``object_initial`` types whose values are JSON-like data
_DATA_TYPES = (list, dict, tuple, str, int, float, bool)


def _check_object_initial(table: str, init: Any) -> None:
    """Refuse, at declaration, an ``object_initial`` whose values no snapshot could hold."""
    if not callable(init):
        raise PlanError(f"table {table!r}: object_initial must be callable (e.g. list)")
    if isinstance(init, type):
        if init not in _DATA_TYPES:
            raise PlanError(f"table {table!r}: object_initial {init.__qualname__} makes values that "
                            "state cannot hold: object values must be JSON-like data (dict, list, "
                            "tuple, str, int, float, bool or None)")
        return
    try:
        first = init()
    except Exception as exc:
        raise PlanError(f"table {table!r}: object_initial() raised {type(exc).__name__}: {exc}") from exc
    try:
        encode_value(first, f"table {table!r}: object_initial()")
    except StateError as exc:
        raise PlanError(str(exc)) from None


@dataclass(frozen=True)
class StateTable:
    """Declaration of a shared table: ``keys`` preallocated, ``columns`` per key, ``initial`` value,
    and ``history``, the span of timestamps of versions retained for window reads (0: none);
    ``objects`` names Python-object columns, whose keys start as ``object_initial()`` (``None``
    without it; a picklable callable such as ``list`` or ``dict``). Object values are JSON-like
    data (dict, list, tuple, str, int, float, bool, None), what a checkpoint holds: an
    ``object_initial`` that makes anything else (``set``, a class of one's own) is refused here."""

    name: str
    keys: int
    columns: tuple[str, ...] = ("value",)
    initial: float = 0.0
    history: int = 0
    objects: tuple[str, ...] = ()
    object_initial: Callable[[], Any] | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise PlanError("a state table needs a name")
        if self.keys < 1 or self.keys > MAX_KEY:
            raise PlanError(f"table {self.name!r}: keys must be in 1..{MAX_KEY}, got {self.keys}")
        if not self.columns or len(set(self.columns)) != len(self.columns):
            raise PlanError(f"table {self.name!r}: columns must be distinct and non-empty")
        if len(set(self.objects)) != len(self.objects) or set(self.objects) & set(self.columns):
            raise PlanError(f"table {self.name!r}: object columns must be distinct from each other "
                            "and from the numeric columns")
        if self.object_initial is not None:
            _check_object_initial(self.name, self.object_initial)
        if self.history < 0:
            raise PlanError(f"table {self.name!r}: history must be >= 0")


class _VersionLog:
    """Committed versions (cell, ts, value) sorted by (cell, ts), with prefix sums."""

    def __init__(self) -> None:
        self.cell = np.zeros(0, np.int64)
        self.ts = np.zeros(0, np.int64)
        self.value = np.zeros(0, np.float64)
        self.csum = np.zeros(0, np.float64)

    def append(self, cell: np.ndarray, ts: np.ndarray, value: np.ndarray, keep_from: int) -> None:
        keep = self.ts >= keep_from
        c = np.concatenate([self.cell[keep], cell])
        t = np.concatenate([self.ts[keep], ts])
        v = np.concatenate([self.value[keep], value])
        o = np.lexsort((t, c))
        self.cell, self.ts, self.value = c[o], t[o], v[o]
        self.csum = np.cumsum(self.value)

    def nbytes(self) -> int:
        return int(self.cell.nbytes + self.ts.nbytes + self.value.nbytes + self.csum.nbytes)


class StateStore:
    """The tables' current values (``values[name]``: keys x columns) and their version logs."""

    def __init__(self, tables: Sequence[StateTable]) -> None:
        if not tables:
            raise PlanError("declare at least one state table")
        names = [t.name for t in tables]
        if len(set(names)) != len(names):
            raise PlanError(f"duplicate table names in {names}")
        self.tables = tuple(tables)
        self.index = {t.name: i for i, t in enumerate(self.tables)}
        self.caps = np.array([t.keys for t in self.tables], np.int64)
        self.ncols = np.array([len(t.columns) for t in self.tables], np.int64)
        self._layout()
        self.used = np.zeros(len(self.tables), np.int64)
        self.logs = [_VersionLog() for _ in self.tables]
        self.batch_stamp = 0
        #: object columns: objects[table][column][key] (keys never written are absent)
        self.objects: list[dict[str, dict[int, Any]]] = [{c: {} for c in t.objects}
                                                         for t in self.tables]
        self.has_objects = any(t.objects for t in self.tables)

    def _layout(self, old: list[np.ndarray] | None = None) -> None:
        """One flat float64 array holds every table (``offsets`` per table), so kernels address
        any cell as ``offsets[cell >> 40] + (cell & mask)``."""
        sizes = self.caps * self.ncols
        self.offsets = np.zeros(len(self.tables), np.int64)
        np.cumsum(sizes[:-1], out=self.offsets[1:])
        self.flat = np.empty(int(sizes.sum()), np.float64)
        self.values: list[np.ndarray] = []
        for ti, t in enumerate(self.tables):
            view = self.flat[self.offsets[ti]: self.offsets[ti] + sizes[ti]].reshape(-1, self.ncols[ti])
            view[:] = t.initial
            if old is not None:
                view[: old[ti].shape[0]] = old[ti]
            self.values.append(view)
        # scratch for the TPG builder's dense chain ids
        self.dense_slot = np.zeros(self.flat.shape[0], np.int64)
        self.stamp = np.zeros(self.flat.shape[0], np.int64)

    # ------------------------------------------------------------------ addressing
    def table_index(self, name: str) -> int:
        """Index of table ``name``; :class:`PlanError` when undeclared."""
        try:
            return self.index[name]
        except KeyError:
            raise PlanError(f"undeclared state table {name!r}; declared: {list(self.index)}") from None

    def column_index(self, table: int, column: str) -> int:
        cols = self.tables[table].columns
        if column not in cols:
            raise PlanError(f"table {self.tables[table].name!r} has no column {column!r}: {cols}")
        return cols.index(column)

    def cells(self, table: int, keys: npt.ArrayLike, column: int = 0) -> np.ndarray:
        """Global cell ids of ``keys`` (growing the table when a key is beyond its capacity)."""
        k = np.asarray(keys, dtype=np.int64)
        if k.size:
            lo, hi = int(k.min()), int(k.max())
            if lo < 0 or hi >= MAX_KEY:
                raise StateError(f"table {self.tables[table].name!r}: key out of range {lo}..{hi}")
            self.grow(table, hi + 1)
        ncols = len(self.tables[table].columns)
        return (np.int64(table) << CELL_SHIFT) | (k * ncols + column)

    def undeclared_keys(self, table: int, keys: np.ndarray) -> np.ndarray | None:
        """Where ``keys`` fall outside the declared table's ``0..keys-1`` (``None`` when none
        does): columnar builders refuse those transactions (``REASON_KEY``) instead of growing
        the table to whatever key an event names."""
        if keys.size == 0:
            return None
        declared = self.tables[table].keys
        if int(keys.min()) >= 0 and int(keys.max()) < declared:
            return None
        return (keys < 0) | (keys >= declared)

    def grow(self, table: int, keys: int) -> None:
        """Make room for keys ``< keys`` (new keys start at the table's initial value)."""
        if keys > self.caps[table]:
            old = [v.copy() for v in self.values]
            self.caps[table] = max(keys, 2 * int(self.caps[table]))
            self._layout(old)
        if keys > self.used[table]:
            self.used[table] = keys

    # ------------------------------------------------------------------ bulk access
    def gather(self, cells: np.ndarray) -> np.ndarray:
        """Current values of ``cells``."""
        return gather_cells(self.offsets, self.flat, np.ascontiguousarray(cells, np.int64))

    def scatter(self, cells: np.ndarray, values: np.ndarray) -> None:
        """Set ``cells`` to ``values`` (cells distinct)."""
        scatter_cells(self.offsets, self.flat, np.ascontiguousarray(cells, np.int64),
                      np.ascontiguousarray(values, np.float64))

    def next_stamp(self) -> int:
        """A fresh id for the dense-id scratch arrays."""
        self.batch_stamp += 1
        return self.batch_stamp

    def log_versions(self, cells: np.ndarray, ts: np.ndarray, values: np.ndarray, now: int) -> None:
        """Append committed versions of tables that keep history; drop versions older than it."""
        if cells.shape[0] == 0 or not any(t.history > 0 for t in self.tables):
            return
        tab = cells >> CELL_SHIFT
        for ti, table in enumerate(self.tables):
            if table.history <= 0:
                continue
            m = tab == ti
            self.logs[ti].append(cells[m], ts[m], values[m], now - table.history)

    def window_sums(self, cells: np.ndarray, from_ts: np.ndarray) -> np.ndarray:
        """Sum of logged versions of each cell with ts >= from_ts."""
        out = np.zeros(cells.shape[0], np.float64)
        tab = cells >> CELL_SHIFT
        for ti in np.unique(tab):
            log = self.logs[int(ti)]
            if log.cell.shape[0] == 0:
                continue
            m = tab == ti
            out[m] = window_history(log.cell, log.ts, log.csum, cells[m], from_ts[m])
        return out

    def get_object(self, table: int, column: str, key: int) -> Any:
        """The object in ``(table, column, key)`` (the table's initial object when never set)."""
        col = self.objects[table][column]
        if key in col:
            return col[key]
        init = self.tables[table].object_initial
        return init() if init is not None else None

    def set_object(self, table: int, column: str, key: int, value: Any) -> None:
        self.objects[table][column][key] = value

    def object_value(self, table: str, key: int, column: str | None = None) -> Any:
        """Current object of one key (for tests and post-processing)."""
        ti = self.table_index(table)
        cols = self.tables[ti].objects
        if not cols or (column is not None and column not in cols):
            raise PlanError(f"table {table!r} has no object column {column!r}: {cols}")
        return self.get_object(ti, column or cols[0], key)

    def snapshot(self) -> dict[str, Any]:
        """An immutable copy of every table: values, versions and the objects as JSON text.

        A key whose object is not JSON-like data raises :class:`StateError` naming the table,
        column and key (nothing is snapshotted then)."""
        return {
            "values": [v[: int(u)].copy() for v, u in zip(self.values, self.used, strict=True)],
            "used": self.used.copy(),
            "logs": [(lg.cell.copy(), lg.ts.copy(), lg.value.copy()) for lg in self.logs],
            "objects": self._objects_json() if self.has_objects else None,
        }

    def _objects_json(self) -> str:
        """``[{column: [[key, value], ...]} per table]`` as JSON (values through
        :func:`~splice.state.codec.encode_value`, so tuples stay tuples)."""
        with paused_gc():
            out = [{col: self._encoded(ti, col, list(self.objects[ti][col])) for col in t.objects}
                   for ti, t in enumerate(self.tables)]
            return json.dumps(out, separators=(",", ":"), allow_nan=False)

    def _encoded(self, ti: int, col: str, keys: list[int]) -> list[list[Any]]:
        """``[[key, encode_value(object)], ...]`` of ``keys``; :class:`StateError` naming the
        table, column and key of an object that is not data."""
        items = self.objects[ti][col]
        out = []
        for key in keys:
            try:
                out.append([key, encode_value(items[key])])
            except StateError as exc:
                raise StateError(f"{_where(self.tables[ti].name, col, key)}: {exc}") from None
        return out

    def _objects_from(self, text: Any) -> list[dict[str, dict[int, Any]]]:
        """Inverse of :meth:`_objects_json`; ``ValueError`` for anything it never writes."""
        if not isinstance(text, str):
            raise ValueError(f"the object columns are a {type(text).__name__}, not JSON text (pickled "
                             "objects of an older format are never loaded)")
        saved = json.loads(text, parse_constant=_not_json)
        if not isinstance(saved, list) or len(saved) != len(self.tables) or not all(
                isinstance(cols, dict) and sorted(cols) == sorted(t.objects)
                for cols, t in zip(saved, self.tables, strict=False)):
            raise ValueError("object columns differ from the declared tables")
        out: list[dict[str, dict[int, Any]]] = []
        for t, cols in zip(self.tables, saved, strict=True):
            per: dict[str, dict[int, Any]] = {}
            for col, items in cols.items():
                if not isinstance(items, list) or not all(
                        isinstance(kv, list) and len(kv) == 2 and type(kv[0]) is int for kv in items):
                    raise ValueError(f"table {t.name!r}, object column {col!r}: not [key, value] pairs")
                per[col] = {}
                for key, v in items:
                    try:
                        per[col][key] = decode_value(v)
                    except StateError as exc:
                        raise ValueError(f"{_where(t.name, col, key)}: {exc}") from None
            out.append(per)
        return out

    def restore(self, state: dict[str, Any]) -> None:
        """Load a :meth:`snapshot` into this (freshly declared) store."""
        try:
            if len(state["values"]) != len(self.tables):
                raise ValueError(f"the snapshot holds {len(state['values'])} tables, "
                                 f"{len(self.tables)} are declared")
            for ti, vals in enumerate(state["values"]):
                self.grow(ti, vals.shape[0])
                self.values[ti][: vals.shape[0]] = vals
            self.used[:] = state["used"]
            for log, (cell, ts, value) in zip(self.logs, state["logs"], strict=True):
                log.append(cell, ts, value, np.iinfo(np.int64).min)
            if state.get("objects") is not None:
                with paused_gc():
                    self.objects = self._objects_from(state["objects"])
        except (KeyError, TypeError, ValueError, RecursionError, StateError) as exc:
            raise StateError(f"cannot restore the state tables: {exc}") from exc

    def value(self, table: str, key: int, column: str | None = None) -> float:
        """Current value of one cell (for tests and post-processing)."""
        ti = self.table_index(table)
        ci = 0 if column is None else self.column_index(ti, column)
        vals = self.values[ti]
        return float(vals[key, ci]) if key < vals.shape[0] else self.tables[ti].initial

    def checksum(self) -> str:
        """A digest of every table's used cells and objects (as the JSON a snapshot holds, dict
        keys sorted): equal for any correct schedule of the same input, in any process."""
        h = hashlib.blake2b(digest_size=8)
        for ti, table in enumerate(self.tables):
            h.update(table.name.encode())
            h.update((self.values[ti][: int(self.used[ti])] + 0.0).tobytes())
            for col in table.objects:
                with paused_gc():
                    pairs = self._encoded(ti, col, sorted(self.objects[ti][col]))
                    text = json.dumps(pairs, sort_keys=True, separators=(",", ":"), allow_nan=False)
                h.update(text.encode())
        return h.hexdigest()

    def nbytes(self) -> int:
        """Bytes of the numeric cells and version logs, plus the objects' shallow sizes."""
        objs = sum(sys.getsizeof(v) for t in self.objects for col in t.values()
                   for v in col.values()) if self.has_objects else 0
        return int(self.flat.nbytes + sum(lg.nbytes() for lg in self.logs) + objs)


def _where(table: str, column: str, key: int) -> str:
    return f"table {table!r}, object column {column!r}, key {key}"


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
