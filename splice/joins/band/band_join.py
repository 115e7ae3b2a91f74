"""Index-based window join (IBWJ) for band predicates over count-based sliding windows.

Semantics. Tuples of the left stream R and the right stream S arrive in one order on the data
path; ``W_R`` is the last ``w_R`` tuples of R, ``W_S`` the last ``w_S`` of S. An arriving r does::

    emit { (r, s) : s in W_S, lower <= s.x - r.x <= upper }  ->  insert r into W_R (expire oldest)

and an arriving s emits ``{ (r, s) : r in W_R, lower <= s.x - r.x <= upper }`` symmetrically. The
band join ``|r.x - s.x| <= eps`` is ``lower = -eps, upper = eps``. A **self-join** of one stream
pairs each arriving tuple ``a`` with the earlier tuples ``b`` of its window (the last ``w``
before ``a``) with ``lower <= b.x - a.x <= upper``; its rows are ``a``'s columns then ``b``'s.

**Time windows** (``window=TimeWindow(D, column)``): partners within ``D`` of the arriving
tuple's event time instead of the last ``w`` arrivals, evicted by watermark; a tuple at or
before its stream's watermark goes to the late side output (:mod:`splice.joins.band.band_time`).

Output rows list the left input's columns then the right input's (a right column whose name is
taken gets the suffix ``_right``), ordered by the arrival of the later tuple, then by the arrival
of its partner — the same for every index and thread count, however the input is batched.

Keys: any numeric Arrow type. Integer keys (``int8`` .. ``int64``, ``uint8`` .. ``uint32``,
``uint64`` up to 2**63 - 1; a larger ``uint64`` is a SchemaError naming the stream and column)
are joined as ``int64`` with the bounds rounded inward (``ceil(lower)``, ``floor(upper)``),
exactly; when either side is floating point or decimal, both are joined as ``float64``. A null or
NaN key never matches and is counted (``stats()[side]["null_keys"]``); so does an infinite key
(counted as ``infinite_keys``): the band around an infinity holds no number, and
``inf - inf`` is NaN. Such a tuple still takes its place in its window (a count window's last
``w`` tuples include it): it is indexed under a stand-in key far from any real one, and a pair it
forms is dropped before it is emitted.

Arrival order. ``order=None``: the data path's, batch by batch. ``order`` a column both inputs
carry, or :data:`~splice.joins.common.join_windows.POSITION`: the join merges its two inputs into that order
itself, ties left first (:class:`~splice.joins.common.join_windows.ArrivalMerge`; each input nondecreasing in
the column), and joins each merged prefix in one call of its core, whatever batches the path
cuts. With a time window and ``order`` its time column, each input's watermark also trails its
largest time by one, retiring the other input's tuples as the join goes: a long prefix goes
through the core in slices of :data:`TIME_SLICE` tuples, retiring between them, so a probe meets
about one window of candidates.

Algorithm. Each window is indexed (``index``): ``nlwj`` scans it (nested loops, the baseline),
``bptree``, ``bchain``/``ibchain``, ``imtree``, ``pimtree`` are the structures of
:mod:`splice.index`. A probe is one range search ``[x + lower, x + upper]`` restricted to the
window's positions; the partners are sorted by position. The loop over a batch is one numba call
(:func:`splice.joins.band._band_kernels.join_run`). ``threads > 1`` runs the parallel IBWJ of
:mod:`splice.joins.band.parallel_band` (same output, same order).

State: per side the retained rows (:class:`~splice.joins.common.join_windows.RowStore`), the next arrival
number, the rows waiting for their place in the arrival order, watermarks and counts; the indexes
are derived and rebuilt on restore.

>>> import pyarrow as pa
>>> from splice.testing import OperatorHarness
>>> spec = BandJoin(left=2, right=3, on="x", eps=1.0, window=2, index="pimtree")
>>> h = OperatorHarness(spec, {2: pa.schema([("x", pa.int64())]), 3: pa.schema([("x", pa.int64())])})
>>> _ = h.push(2, pa.record_batch({"x": [1, 5, 9]}))     # W_R = {5, 9}
>>> h.push(3, pa.record_batch({"x": [4, 10]})).to_pydict()
{'x': [5, 9], 'x_right': [4, 10]}
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import splice.kernels.pools as pooled
from splice.core.errors import PlanError, SchemaError, StateError
from splice.core.operator import InputSchemas, OperatorLogic, OperatorSpec
from splice.core.time import MIN_TIME, is_temporal, time_values
from splice.index._window import M_NEXT, M_W, new_descents
from splice.index.window_index import (
    INDEX_KINDS,
    IndexKind,
    WindowIndex,
    default_merge_ratio,
    max_insertion_depth,
)
from splice.joins.band._band_kernels import (
    LOW_LEFT_POOL,
    LOW_RIGHT_POOL,
    OUT_FULL,
    BandArrivals,
    BandProbe,
    Matches,
    join_run,
    join_seq_run,
)
from splice.joins.common.join_windows import (
    POSITION,
    ArrivalMerge,
    Release,
    RowStore,
    TimeWindow,
    conform,
)
from splice.joins.common.output_schema import pair_output_schema
from splice.kernels.jit import kernel_input

__all__ = [
    "BandJoin",
    "BandCore",
    "BandKeys",
    "POSITION",
    "MergeMode",
    "ParallelMode",
    "band_bounds",
    "key_dtype",
    "key_values",
    "probe_offsets",
]

MergeMode = Literal["nonblocking", "blocking"]
ParallelMode = Literal["auto", "task_queue", "key_range", "round_robin"]


def band_bounds(
    eps: float | None, lower: float | None = None, upper: float | None = None
) -> tuple[float, float]:
    """``(lower, upper)`` of the predicate ``lower <= s.x - r.x <= upper``; PlanError if invalid."""
    if eps is not None:
        if lower is not None or upper is not None:
            raise PlanError("band join: give either eps or lower/upper, not both")
        eps = float(eps)
        if math.isnan(eps) or eps < 0:
            raise PlanError(f"band join: eps must be >= 0, got {eps}")
        return -eps, eps
    if lower is None or upper is None:
        raise PlanError("band join: give eps (|r.x - s.x| <= eps) or both lower and upper")
    lo, hi = float(lower), float(upper)
    if math.isnan(lo) or math.isnan(hi) or lo > hi:
        raise PlanError(f"band join: need lower <= upper, got lower={lower}, upper={upper}")
    return lo, hi


def _is_float_key(t: pa.DataType) -> bool:
    return pa.types.is_floating(t) or pa.types.is_decimal(t)


def key_dtype(types: list[pa.DataType], names: list[tuple[str, str]]) -> np.dtype:
    """``float64`` when any key type is floating point or decimal, else ``int64``."""
    for t, (stream, col) in zip(types, names, strict=True):
        if not (pa.types.is_integer(t) or _is_float_key(t)):
            raise SchemaError(
                f"stream {stream!r}: band join key column {col!r} has type {t}, expected a "
                "numeric type"
            )
    return np.dtype(np.float64) if any(_is_float_key(t) for t in types) else np.dtype(np.int64)


class BandKeys(NamedTuple):
    """A key column as the band join's index takes it."""

    #: the keys, contiguous ``int64`` or ``float64``; a stand-in where a key cannot match
    values: np.ndarray
    #: which keys can match (``None``: all of them)
    ok: np.ndarray | None
    #: null or NaN keys
    nulls: int
    #: infinite keys
    infinite: int


#: Stand-ins for keys that never match, by stream (left, right): far from any real key, so that
#: probes rarely reach them; a pair they form anyway is dropped before it is emitted.
_STAND_IN = {np.dtype(np.int64): (1 << 61, -(1 << 61)), np.dtype(np.float64): (1e300, -1e300)}


def key_values(
    column: pa.Array | pa.ChunkedArray, dtype: np.dtype, stream: str, name: str, side: int = 0
) -> BandKeys:
    """The key column as a contiguous ``dtype`` array and which of its keys can match.

    Null, NaN and infinite keys never match: they hold the stand-in of stream ``side`` (0 left,
    1 right). A ``uint64`` key above 2**63 - 1 is a SchemaError naming the stream and column.
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    exact = dtype == np.int64
    if exact and pa.types.is_uint64(column.type) and len(column) \
            and (pc.max(column).as_py() or 0) > 2**63 - 1:
        raise SchemaError(f"stream {stream!r}: band join key column {name!r} (uint64) exceeds int64")
    cast = column.cast(pa.int64() if exact else pa.float64())
    bad: np.ndarray | None = None
    nulls = cast.null_count
    if nulls:
        bad = cast.is_null().to_numpy(zero_copy_only=False)
        cast = pc.fill_null(cast, 0)
    values = np.ascontiguousarray(cast.to_numpy(zero_copy_only=False), dtype)
    infinite = 0
    if not exact and len(values):
        nan, inf = np.isnan(values), np.isinf(values)
        n_nan, infinite = int(nan.sum()), int(inf.sum())
        if n_nan or infinite:
            nulls += n_nan
            bad = nan | inf if bad is None else bad | nan | inf
    if bad is None:
        return BandKeys(values, None, 0, 0)
    values = values.copy()
    values[bad] = _STAND_IN[np.dtype(dtype)][side]
    return BandKeys(values, ~bad, int(nulls), int(infinite))


def probe_offsets(
    lower: float, upper: float, dtype: np.dtype, self_join: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Key offsets of a probe by side: partners of ``x`` from side ``s`` have keys in
    ``[x + lo[s], x + hi[s]]`` (bounds rounded inward for integer keys)."""
    if dtype == np.int64:
        lo_v: float = math.ceil(lower)
        hi_v: float = math.floor(upper)
    else:
        lo_v, hi_v = lower, upper
    lo = np.array([lo_v, -hi_v if not self_join else lo_v], dtype)
    hi = np.array([hi_v, -lo_v if not self_join else hi_v], dtype)
    return lo, hi


def _prefetch_level(indexes: list[WindowIndex]) -> int:
    """The join loops' ``prefetch`` for these windows (see :class:`BandCore`)."""
    if any(ix.insert_prefetch_pays for ix in indexes):
        return 2
    return int(any(ix.prefetch_pays for ix in indexes))


class BandCore:
    """The single-threaded IBWJ over both windows: ``run(sides, keys)`` joins a sequence.

    ``sides[g]`` is 0 (left) or 1 (right); results are ``(g, partner position)`` arrays, ordered
    by ``g`` then partner. Positions count each stream's arrivals from 0 across calls.
    ``prefetch``: 1 — the join loop starts loading each tuple's immutable leaves a few tuples
    ahead, when a window's immutable trees are large enough to miss the caches
    (:attr:`~splice.index.window_index.WindowIndex.prefetch_pays`); 2 — also the ``T_I`` node of
    each insert, in larger IM/PIM-Tree windows
    (:attr:`~splice.index.window_index.WindowIndex.insert_prefetch_pays`); 0 — neither.
    """

    def __init__(
        self,
        index: IndexKind,
        windows: tuple[int, int],
        dtype: np.dtype,
        lower: float,
        upper: float,
        self_join: bool = False,
        merge_ratio: float = 0.125,
        insertion_depth: int = 1,
        chain_length: int = 2,
    ) -> None:
        self.self_join = self_join
        self.dtype = np.dtype(dtype)
        self.offs_lo, self.offs_hi = probe_offsets(lower, upper, self.dtype, self_join)
        self.band = BandProbe(self.offs_lo, self.offs_hi, self_join)
        self.index = index
        self.opts: dict[str, Any] = dict(
            merge_ratio=merge_ratio, insertion_depth=insertion_depth, chain_length=chain_length
        )
        self.indexes = [WindowIndex(index, windows[0], self.dtype, **self.opts)]
        if not self_join:
            self.indexes.append(WindowIndex(index, windows[1], self.dtype, **self.opts))
        self.prefetch = _prefetch_level(self.indexes)
        self._rate = 2.0  # the most output rows per input tuple of a call so far
        self._descents = new_descents(chain_length if index == "ibchain" else 0)

    def start_at(self, positions: tuple[int, int]) -> None:
        """Continue numbering each stream's arrivals from ``positions`` (an empty core only)."""
        for ix, p in zip(self.indexes, positions, strict=False):
            ix.meta[M_NEXT] = p

    # -- time windows (:class:`~splice.joins.band.band_time.TimeBandCore`; as the key-range join) ----

    def next_position(self, s: int) -> int:
        """Position of stream ``s``'s next arrival."""
        return int(self.indexes[s].meta[M_NEXT])

    def capacity(self, s: int) -> int:
        """Entries stream ``s``'s index is sized for."""
        return int(self.indexes[s].window)

    def set_span(self, s: int, span: int) -> None:
        """Probe (and, an IM/PIM-Tree, keep at merges) the last ``span`` positions of stream ``s``."""
        self.indexes[s].meta[M_W] = int(span)

    def reindex(self, s: int, first: int, keys: np.ndarray, capacity: int) -> None:
        """Index stream ``s``'s tuples at positions ``first, first + 1, ...`` (``keys``) afresh,
        sized for ``capacity`` entries (prefetching as that size asks)."""
        ix = WindowIndex(self.index, capacity, self.dtype, **self.opts)
        ix.meta[M_NEXT] = first
        ix.insert(keys)
        self.indexes[s] = ix
        self.prefetch = _prefetch_level(self.indexes)

    def run(self, sides: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Join the tuples ``(sides[g], keys[g])`` in order; return ``(g, partner position)``."""
        sides = np.ascontiguousarray(sides, np.int8)
        keys = kernel_input(keys, self.dtype)
        n = len(keys)
        left = self.indexes[0]
        right = self.indexes[-1]
        single = bool(n) and (sides == sides[0]).all()
        # room for this call's rows at the highest rate seen (a buffer kept at the largest
        # call's size cost every small call more than its join: megabytes allocated and freed)
        cap = 1024 + int(self._rate * n)
        out_g = pooled.empty(cap)
        out_p = pooled.empty(cap)
        seq = BandArrivals(sides, keys)
        g, m = 0, 0
        while True:
            if single:
                side = int(sides[0])
                own = left if side == 0 or self.self_join else right
                other = left if side == 1 or self.self_join else right
                g, m, status = join_run(keys, g, self.offs_lo[side], self.offs_hi[side],
                                        other.state, own.state, self.self_join,
                                        side == 1 and not self.self_join, out_g, out_p, m,
                                        int(self.prefetch), self._descents)
                low = own
            else:
                g, m, status = join_seq_run(seq, g, self.band, left.state, right.state,
                                            Matches(out_g, out_p), m, int(self.prefetch),
                                            self._descents)
                low = left if status == LOW_LEFT_POOL else right
            if status == 0:
                break
            if status == OUT_FULL:
                cap = pooled.room_for_rest(cap, m, g, n)
                out_g = pooled.grown(out_g, m, cap)
                out_p = pooled.grown(out_p, m, cap)
            elif status in (1, LOW_RIGHT_POOL):
                low.grow_pool()
        if n:
            self._rate = max(self._rate, m / n)
        return out_g[:m], out_p[:m]

    def nbytes(self) -> int:
        return sum(ix.used_bytes() for ix in self.indexes)


def _windows(window: int | tuple[int, int] | TimeWindow) -> tuple[int, int]:
    if isinstance(window, TimeWindow):
        raise PlanError("band join: a time window has no count sizes")
    if isinstance(window, tuple | list):
        if len(window) != 2:
            raise PlanError(f"band join: window is w or (w_left, w_right), got {window!r}")
        wl, wr = window
    else:
        wl = wr = window
    for w in (wl, wr):
        if isinstance(w, bool) or not isinstance(w, int | np.integer) or w < 1:
            raise PlanError(f"band join: window sizes must be integers >= 1, got {window!r}")
    return int(wl), int(wr)


@dataclass(frozen=True)
class BandJoin(OperatorSpec):
    """IBWJ of streams ``left`` and ``right`` (``right=None``: self-join of ``left``) on ``on``.

    ``eps`` or ``lower``/``upper`` give the predicate (module docstring); ``window`` is ``w`` or
    ``(w_left, w_right)`` (count windows), or a :class:`~splice.joins.common.join_windows.TimeWindow`
    ``(D, column)``: partners within ``D`` of the arriving tuple's event time, evicted by
    watermark, late tuples to the late side output (:mod:`splice.joins.band.band_time`; on several
    threads by key ranges of an IM/PIM-Tree);
    ``index`` one of ``nlwj bptree bchain ibchain imtree pimtree``.
    IM/PIM-Tree: ``merge_ratio`` m in (0, 1] (``None``: by window size,
    :func:`~splice.index.default_merge_ratio`; 1/8 for time windows); PIM-Tree: ``insertion_depth`` D_I (``None``: the
    smaller of 2 and the deepest level of a full window's ``T_S``; the task-queue join, whose
    threads share one index, takes that deepest level). Chains: ``chain_length`` >= 2.
    ``threads`` >= 1, ``task_size`` tuples per task and ``merge`` mode of the task-queue join;
    ``parallel``: ``key_range`` (each thread indexes one key range of both windows, IM/PIM-Tree
    only), ``task_queue`` (the PIM-Tree paper's join over one shared index, IM/PIM-Tree only),
    ``round_robin`` (the partitioned baseline, any index) or ``auto`` (key ranges where they
    apply, else round robin).
    ``order``: ``None`` joins in the data path's order, batch by batch; a column both inputs
    carry (nondecreasing on each input), or :data:`~splice.joins.common.join_windows.POSITION`, makes the
    join merge the two inputs into that order itself, ties left first (two inputs only).
    """

    left: int
    right: int | None
    on: str | tuple[str, str]
    eps: float | None = None
    lower: float | None = None
    upper: float | None = None
    window: int | tuple[int, int] | TimeWindow = 1024
    index: IndexKind = "pimtree"
    merge_ratio: float | None = None
    insertion_depth: int | None = None
    chain_length: int = 2
    threads: int = 1
    task_size: int = 64
    merge: MergeMode = "nonblocking"
    parallel: ParallelMode = "auto"
    order: str | None = None

    name = "band_join"

    def __post_init__(self) -> None:
        band_bounds(self.eps, self.lower, self.upper)
        if isinstance(self.window, TimeWindow):
            if int(self.threads) > 1 and (self.index not in ("imtree", "pimtree")
                                          or self.parallel not in ("auto", "key_range")):
                raise PlanError(
                    "band join: time windows join on several threads by key ranges of an "
                    f"imtree or pimtree (parallel='key_range'), not index {self.index!r} with "
                    f"parallel={self.parallel!r}; use threads=1"
                )
            windows = (1 << 20, 1 << 20)  # a time window's T_S may reach any depth
        else:
            windows = _windows(self.window)
        if self.index not in INDEX_KINDS:
            raise PlanError(
                f"band join: unknown index {self.index!r} (choose one of {', '.join(INDEX_KINDS)})"
            )
        if self.merge_ratio is not None and not 0.0 < float(self.merge_ratio) <= 1.0:
            raise PlanError(f"band join: merge ratio must be in (0, 1], got {self.merge_ratio}")
        if int(self.chain_length) < 2:
            raise PlanError(f"band join: chain length must be >= 2, got {self.chain_length}")
        if int(self.threads) < 1:
            raise PlanError(f"band join: threads must be >= 1, got {self.threads}")
        if int(self.task_size) < 1:
            raise PlanError(f"band join: task size must be >= 1, got {self.task_size}")
        if self.merge not in get_args(MergeMode):
            raise PlanError(f"band join: merge must be 'nonblocking' or 'blocking', got {self.merge!r}")
        self._resolve_parallel()
        if self.insertion_depth is not None:
            deepest = max_insertion_depth(max(windows))
            if not 0 <= int(self.insertion_depth) <= deepest:
                raise PlanError(
                    f"band join: insertion depth {self.insertion_depth} is beyond the depth of "
                    f"T_S for a full window of {max(windows)} (0 .. {deepest})"
                )
        if self.right is not None and self.right == self.left:
            raise PlanError("band join: left and right are the same stream; use right=None")
        if self.order is not None:
            if not isinstance(self.order, str) or not self.order:
                raise PlanError(f"band join: order must name a column both inputs carry, or be "
                                f"POSITION, got {self.order!r}")
            if self.right is None:
                raise PlanError("band join: order merges two inputs; a self-join has one "
                                "(use order=None)")

    # -- planning ------------------------------------------------------------------------------
    @property
    def self_join(self) -> bool:
        return self.right is None

    @property
    def windows(self) -> tuple[int, int]:
        return _windows(self.window)

    @property
    def time_window(self) -> TimeWindow | None:
        return self.window if isinstance(self.window, TimeWindow) else None

    @property
    def ratio(self) -> float:
        """The IM/PIM-Tree merge ratio in use: ``merge_ratio``, else the one for the larger
        window (1/8 for a time window, whose size is not known in advance)."""
        if self.merge_ratio is not None:
            return float(self.merge_ratio)
        if self.time_window is not None:
            return 0.125
        return default_merge_ratio(max(self.windows))

    @property
    def bounds(self) -> tuple[float, float]:
        return band_bounds(self.eps, self.lower, self.upper)

    @property
    def parallel_mode(self) -> str:
        """The parallel join that ``threads > 1`` runs: ``parallel``, with ``auto`` resolved to
        ``key_range`` on IM/PIM-Tree windows (the fastest measured) and ``round_robin`` else."""
        return self._resolve_parallel()

    def _resolve_parallel(self) -> str:
        if self.parallel not in get_args(ParallelMode):
            raise PlanError(f"band join: unknown parallel mode {self.parallel!r}")
        tree = self.index in ("imtree", "pimtree")
        if self.parallel == "auto":
            return "key_range" if tree else "round_robin"
        if self.parallel in ("task_queue", "key_range") and self.threads > 1 and not tree:
            kind = "task-queue" if self.parallel == "task_queue" else "key-range"
            raise PlanError(
                f"band join: the {kind} parallel join needs index imtree or pimtree, "
                f"not {self.index!r} (use parallel='round_robin')"
            )
        return self.parallel

    @property
    def depth(self) -> int:
        mode = self.parallel_mode
        if self.insertion_depth is not None:
            return int(self.insertion_depth)
        if self.time_window is not None:
            return 1
        deepest = max_insertion_depth(max(self.windows))
        # threads sharing one index: the most partitions, so that they rarely meet on one lock
        return deepest if self.threads > 1 and mode == "task_queue" else min(2, deepest)

    def _columns(self) -> tuple[str, str]:
        if isinstance(self.on, str):
            if "," in self.on:
                raise PlanError(f"band join takes one key column per side, got {self.on!r}")
            return self.on, self.on
        return self.on[0], self.on[1]

    def _schemas(self, inputs: InputSchemas) -> tuple[pa.Schema, pa.Schema]:
        ids = [self.left] if self.right is None else [self.left, self.right]
        for sid in ids:
            if sid not in inputs:
                raise PlanError(f"band join: input stream {sid} is not among {sorted(inputs)}")
        ls = inputs[self.left]
        rs = inputs[self.right] if self.right is not None else ls
        lc, rc = self._columns()
        for schema, col, sid in ((ls, lc, self.left), (rs, rc, self.right or self.left)):
            if col not in schema.names:
                raise SchemaError(
                    f"stream {sid}: band join key column {col!r} is missing "
                    f"(columns: {', '.join(schema.names)})"
                )
            tw = self.time_window
            if tw is not None and tw.column not in schema.names:
                raise SchemaError(
                    f"stream {sid}: band join time column {tw.column!r} is missing "
                    f"(columns: {', '.join(schema.names)})"
                )
            if self.order is not None and self.order != POSITION:
                if self.order not in schema.names:
                    raise SchemaError(
                        f"stream {sid}: band join order column {self.order!r} is missing "
                        f"(columns: {', '.join(schema.names)})"
                    )
                if not is_temporal(schema.field(self.order).type):
                    raise SchemaError(
                        f"stream {sid}: band join order column {self.order!r} has type "
                        f"{schema.field(self.order).type}, expected timestamp, date or integer"
                    )
        return ls, rs

    def key_dtype(self, inputs: InputSchemas) -> np.dtype:
        ls, rs = self._schemas(inputs)
        lc, rc = self._columns()
        return key_dtype(
            [ls.field(lc).type, rs.field(rc).type],
            [(str(self.left), lc), (str(self.right or self.left), rc)],
        )

    def output_schema(self, inputs: InputSchemas) -> pa.Schema:
        ls, rs = self._schemas(inputs)
        self.key_dtype(inputs)
        return pair_output_schema(ls, rs)[0]

    def columns_used(self, inputs: InputSchemas) -> dict[int, set[str]] | None:
        return None

    def make_core(self, dtype: np.dtype) -> Any:
        """The join engine: :class:`BandCore`, or the parallel join for ``threads > 1``."""
        lower, upper = self.bounds
        tw = self.time_window
        if tw is not None:
            from splice.joins.band.band_time import TimeBandCore

            return TimeBandCore(self.index, dtype, lower, upper, tw.length, self.self_join,
                                self.ratio, self.depth, self.chain_length, self.threads)
        if self.threads > 1:
            from splice.joins.band.parallel_band import make_parallel

            return make_parallel(self, dtype)
        return BandCore(self.index, self.windows, dtype, lower, upper, self.self_join,
                        self.ratio, self.depth, self.chain_length)

    def build(self, inputs: InputSchemas, state: Any = None) -> OperatorLogic:
        return BandJoinLogic(self, inputs, state)


#: Tuples of a release that a time window ordered by its time column joins in one core call
#: (between calls its inputs' times retire what is a window behind them).
TIME_SLICE = 1 << 15


class BandJoinLogic(OperatorLogic):
    """Runtime of :class:`BandJoin`: row stores per side, the join core, the arrival merge."""

    def __init__(self, spec: BandJoin, inputs: InputSchemas, state: Any = None) -> None:
        self.spec = spec
        ls, rs = spec._schemas(inputs)
        self.schemas = (ls, rs)
        self.out_schema, _ = pair_output_schema(ls, rs)
        self.cols = spec._columns()
        self.dtype = spec.key_dtype(inputs)
        self.windows = spec.windows if spec.time_window is None else (0, 0)
        n = 1 if spec.self_join else 2
        self.ids = (spec.left,) if spec.right is None else (spec.left, spec.right)
        self.rows = [RowStore(ls)] if spec.self_join else [RowStore(ls), RowStore(rs)]
        self.core = spec.make_core(self.dtype)
        self.time = spec.time_window
        #: each input's watermark as the path delivered it, and as the join has applied it
        self.watermarks = [MIN_TIME] * n
        self.applied = [MIN_TIME] * n
        #: watermarks not yet applied: (rows accepted before it, time), per input
        self.pending: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        self.accepted = [0] * n
        self.late = [0] * n
        self.nulls = [0] * n
        self.infinite = [0] * n
        #: whether a key that cannot match may be in a window (pairs are then checked)
        self.unmatchable = False
        self._late: list[tuple[int, pa.RecordBatch]] = []
        self.merge = (ArrivalMerge(spec.order, (spec.left, spec.right), (ls, rs), spec.name)
                      if spec.order is not None and spec.right is not None else None)
        #: time windows ordered by their time column: each input's largest time joined so far
        self.sorted_time = self.merge is not None and self.time is not None and spec.order == self.time.column
        self._newest = [MIN_TIME] * n
        if state is not None:
            self._restore(state)

    def _side(self, stream_id: int) -> int:
        if stream_id == self.spec.left:
            return 0
        if self.spec.right is not None and stream_id == self.spec.right:
            return 1
        raise PlanError(f"band join: unexpected input stream {stream_id}")

    def _keys(self, rows: pa.RecordBatch | pa.Table, s: int) -> BandKeys:
        return key_values(rows.column(self.cols[s]), self.dtype, str(self.ids[s]), self.cols[s], s)

    # -- data ---------------------------------------------------------------------------------

    def on_batch(self, stream_id: int, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        side = self._side(stream_id)
        if batch.num_rows == 0:
            return []
        batch = conform(batch, self.schemas[side], self.spec.name, stream_id)
        if self.time is not None:
            times = time_values(batch, self.time.column, str(stream_id))
            late = times <= self.watermarks[side]
            if late.any():  # the late side output: joined with nothing, never dropped silently
                self._late.append((stream_id, batch.filter(pa.array(late))))
                self.late[side] += int(late.sum())
                batch = batch.filter(pa.array(~late))
                if batch.num_rows == 0:
                    return []
        if self.merge is None:
            self.accepted[side] += batch.num_rows
            out = self._join(Release.single(side, batch))
            self._apply_watermarks()
            return out
        self.merge.add(side, batch)
        self.accepted[side] += batch.num_rows
        return self._release()

    def _release(self, final: bool = False) -> list[pa.RecordBatch]:
        assert self.merge is not None
        rel = self.merge.release(final)
        out = self._join(rel) if rel is not None else []
        self._apply_watermarks()
        return out

    def _join(self, rel: Release) -> list[pa.RecordBatch]:
        """Join the released rows in their order: one core call; the output batches."""
        n = len(rel)
        keys = np.empty(n, self.dtype)
        seqs = np.empty(n, np.int64)
        times = np.empty(n, np.int64) if self.time is not None else None
        for s in range(len(self.rows)):
            rows = rel.rows[s]
            if rows is None or rows.num_rows == 0:
                continue
            pos = rel.positions[s]
            k = self._keys(rows, s)
            keys[pos] = k.values
            if k.ok is not None:
                self.unmatchable = True
                self.nulls[s] += k.nulls
                self.infinite[s] += k.infinite
            seqs[pos] = self.rows[s].append(rows) + np.arange(rows.num_rows, dtype=np.int64)
            if times is not None:
                assert self.time is not None
                t = time_values(rows, self.time.column, str(self.ids[s]))
                times[pos] = t
                self._newest[s] = max(self._newest[s], int(t[-1]) if self.sorted_time else MIN_TIME)
        if times is None:
            g, partner = self.core.run(rel.sides, keys)
        elif self.sorted_time and n > TIME_SLICE:
            g, partner = self._run_time_slices(rel.sides, keys, times)
        else:
            g, partner = self.core.run(rel.sides, keys, times)
        out: list[pa.RecordBatch] = []
        if len(g):
            if self.spec.self_join:  # the arriving tuple, then its earlier partner
                left, right = self.rows[0].take(seqs[g]), self.rows[0].take(partner)
            else:
                from_left = rel.sides[g] == 0
                left = self.rows[0].take(np.where(from_left, seqs[g], partner))
                right = self.rows[1].take(np.where(from_left, partner, seqs[g]))
            if self.unmatchable:
                ok = self._matchable(left, 0) & self._matchable(right, 1)
                if not ok.all():
                    m = pa.array(ok)
                    left, right = left.filter(m), right.filter(m)
            if left.num_rows:
                t = pa.Table.from_arrays(left.columns + right.columns, schema=self.out_schema)
                out = [b for b in t.combine_chunks().to_batches() if b.num_rows]
        if self.time is None:
            for s, store in enumerate(self.rows):
                store.evict_before(store.end - self.windows[s])
        return out

    def _run_time_slices(self, sides: np.ndarray, keys: np.ndarray, times: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
        """A long release of a time window ordered by its time column, in slices of
        :data:`TIME_SLICE` tuples: between slices each input's times so far retire the other's
        tuples a window behind them from the core (its rows leave after the release), so a
        probe's range search meets about one window of candidates, however long the release."""
        assert self.time is not None
        gs, ps = [], []
        for a in range(0, len(sides), TIME_SLICE):
            b = min(len(sides), a + TIME_SLICE)
            g, p = self.core.run(sides[a:b], keys[a:b], times[a:b])
            gs.append(g + a)
            ps.append(p)
            if b < len(sides):
                for s in range(len(self.rows)):
                    mine = times[a:b][sides[a:b] == s]
                    if len(mine):  # this input's later tuples come at or after its newest time
                        upto = max(int(mine[-1]) - 1, self.applied[s]) - self.time.length
                        self.core.evict(1 - s, max(upto, int(MIN_TIME)))
        return np.concatenate(gs), np.concatenate(ps)

    def _matchable(self, rows: pa.Table, s: int) -> np.ndarray:
        """Which of ``rows`` (of input ``s``; the left input's for a self-join) have a key that
        can match."""
        col = 0 if self.spec.self_join else s
        ok = self._keys(rows, col).ok
        return np.ones(rows.num_rows, np.bool_) if ok is None else ok

    # -- time ---------------------------------------------------------------------------------

    def on_watermark(self, stream_id: int, time: int) -> list[pa.RecordBatch]:
        side = self._side(stream_id)
        if self.time is None or time <= self.watermarks[side]:
            return []
        self.watermarks[side] = int(time)
        # applied once every row accepted before it has been joined
        self.pending[side].append((self.accepted[side], int(time)))
        out: list[pa.RecordBatch] = []
        if self.sorted_time and self.merge is not None:
            # later rows of this input are after `time`: rows of the other up to it have their place
            self.merge.advance(side, int(time) + 1 if time < np.iinfo(np.int64).max else int(time))
            out = self._release()
        self._apply_watermarks()
        return out

    def _apply_watermarks(self) -> None:
        """Retire what the watermarks allow: later tuples of a stream have times > its watermark
        W, so the other's tuples at or before ``W - D`` can never match again."""
        if self.time is None:
            return
        for s, store in enumerate(self.rows):
            w = self.applied[s]
            while self.pending[s] and self.pending[s][0][0] <= store.end:
                w = max(w, self.pending[s].pop(0)[1])
            if self.sorted_time and self._newest[s] > MIN_TIME:
                w = max(w, self._newest[s] - 1)  # this input arrives in time order
            if w > self.applied[s]:
                self.applied[s] = w
                self._evict(s)

    def _evict(self, s: int) -> None:
        assert self.time is not None
        other = 0 if self.spec.self_join else 1 - s
        first = self.core.evict(other, max(self.applied[s] - self.time.length, int(MIN_TIME)))
        self.rows[other].evict_before(first)

    def on_end(self) -> list[pa.RecordBatch]:
        if self.merge is None:
            return []
        return self._release(final=True)

    def drain_late(self) -> list[tuple[int, pa.RecordBatch]]:
        out, self._late = self._late, []
        return out

    # -- state --------------------------------------------------------------------------------

    def metrics(self) -> dict[str, Any]:
        """``null_keys`` (null, NaN or infinite: they never match) and ``late_rows``."""
        return {"null_keys": int(sum(self.nulls) + sum(self.infinite)),
                "late_rows": int(sum(self.late))}

    def stats(self) -> dict[str, Any]:
        """Per input: null or NaN keys, infinite keys (neither ever matches), late rows, and
        rows waiting for their place in the arrival order."""
        names = ("left", "right")
        return {names[s]: {"null_keys": self.nulls[s], "infinite_keys": self.infinite[s],
                           "late": self.late[s],
                           "waiting": self.merge.pending(s) if self.merge is not None else 0}
                for s in range(len(self.rows))}

    def snapshot(self) -> Any:
        tables = []
        for s, store in enumerate(self.rows):
            start = store.start if self.time is not None else store.end - self.windows[s]
            tables.append(store.rows_from(start))
        return {"rows": tables, "next": [store.end for store in self.rows],
                "watermarks": list(self.watermarks), "applied": list(self.applied),
                "pending": [list(p) for p in self.pending], "accepted": list(self.accepted),
                "late": list(self.late), "nulls": list(self.nulls), "infinite": list(self.infinite),
                "newest": list(self._newest),
                "merge": self.merge.snapshot() if self.merge is not None else None}

    def _restore(self, state: Any) -> None:
        try:
            tables, nexts = state["rows"], state["next"]
            self.watermarks = [int(t) for t in state["watermarks"]]
            self.applied = [int(t) for t in state["applied"]]
            self.pending = [[(int(c), int(t)) for c, t in p] for p in state["pending"]]
            self.accepted = [int(n) for n in state["accepted"]]
            self.late = [int(n) for n in state["late"]]
            self.nulls = [int(n) for n in state["nulls"]]
            self.infinite = [int(n) for n in state["infinite"]]
            self._newest = [int(t) for t in state["newest"]]
            merge = state["merge"]
        except (TypeError, KeyError, ValueError) as exc:
            raise StateError(f"band join: unreadable snapshot {type(state).__name__}") from exc
        starts = []
        for s, (table, nxt) in enumerate(zip(tables, nexts, strict=True)):
            first = int(nxt) - table.num_rows
            self.rows[s] = RowStore(self.schemas[s], first)
            for b in table.select(self.schemas[s].names).to_batches():
                self.rows[s].append(b)
            starts.append(first)
        self.core.start_at(tuple(starts))
        for s, table in enumerate(tables):
            if table.num_rows:  # rebuilds the windows
                k = self._keys(table, s)
                self.unmatchable |= k.ok is not None
                sides = np.full(len(k.values), s, np.int8)
                if self.time is not None:
                    self.core.run(sides, k.values, time_values(table, self.time.column, str(self.ids[s])))
                else:
                    self.core.run(sides, k.values)
        if self.time is not None:
            for s in range(len(self.rows)):
                if self.applied[s] > MIN_TIME:
                    self._evict(s)
        if self.merge is not None:
            if merge is None:
                raise StateError("band join: snapshot has no arrival-order state")
            self.merge.restore(merge)

    def state_bytes(self) -> int:
        waiting = self.merge.nbytes() if self.merge is not None else 0
        return sum(r.nbytes() for r in self.rows) + int(self.core.nbytes()) + waiting
