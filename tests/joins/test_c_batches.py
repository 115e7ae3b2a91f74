"""Output batches assembled through Arrow's C data interface: against Arrow's ``take``, inside the
interval join against the same join building Arrow arrays, and the allocation's lifetime."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

import splice.joins.temporal.interval_join as interval_join
from splice.joins.common._c_batches import (
    MINE,
    PASS,
    RELEASE,
    THEIRS,
    TIMES,
    BatchAssembler,
    assemble,
)
from splice.joins.temporal._interval_kernels import locate
from splice.joins.temporal.interval_join import IntervalJoin, _column_plan, _ColumnView

L, R = 2, 3
TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.float64(), pa.timestamp("ms"),
         pa.string(), pa.large_string(), pa.binary()]


def _values(draw, t: pa.DataType, n: int, nulls: bool) -> pa.Array:
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t):
        raw = draw(st.lists(st.text(max_size=6), min_size=n, max_size=n))
        vals: list = [s.encode() if pa.types.is_binary(t) else s for s in raw]
    else:
        bits = t.bit_width if not pa.types.is_timestamp(t) else 64
        lim = 2 ** (min(bits, 32) - 1) - 1
        vals = draw(st.lists(st.integers(-lim, lim), min_size=n, max_size=n))
        if pa.types.is_floating(t):
            vals = [v / 3 for v in vals]
    if nulls:
        mask = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        vals = [None if m else v for v, m in zip(vals, mask, strict=True)]
    return pa.array(vals, t)


@st.composite
def _sliced_batch(draw, schema: pa.Schema, rows: int) -> pa.RecordBatch:
    """A batch of ``rows`` rows cut from a larger one (its arrays have an offset)."""
    skip = draw(st.integers(0, 9))
    cols = [_values(draw, f.type, rows + skip + 3, draw(st.booleans())) for f in schema]
    return pa.record_batch(cols, schema=schema).slice(skip, rows)


@st.composite
def _case(draw):
    mine_types = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=4))
    their_types = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=4))
    ms = pa.schema([(f"m{i}", t) for i, t in enumerate(mine_types)])
    ts = pa.schema([(f"t{i}", t) for i, t in enumerate(their_types)])
    n = draw(st.integers(1, 12))
    arriving = draw(_sliced_batch(ms, n))
    retained = [draw(_sliced_batch(ts, draw(st.integers(1, 10))))
                for _ in range(draw(st.integers(1, 3)))]
    m = draw(st.integers(1, 25))
    whole = draw(st.booleans())
    if whole:
        m = n
        pi = np.arange(n, dtype=np.int64)
    else:
        pi = np.array(draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m)),
                      dtype=np.int64)
    total = sum(b.num_rows for b in retained)
    rid = np.array(draw(st.lists(st.integers(0, total - 1), min_size=m, max_size=m)),
                   dtype=np.int64)
    times = np.array(draw(st.lists(st.integers(-10**6, 10**6), min_size=m, max_size=m)),
                     dtype=np.int64)
    mine_first = draw(st.booleans())
    with_times = draw(st.booleans())
    return ms, ts, arriving, retained, pi, rid, times, whole, mine_first, with_times


def _code(t: pa.DataType) -> int:
    kind, dtype = _column_plan(t)
    w = np.dtype(dtype).itemsize
    return w if kind == "fixed" else -w


@settings(max_examples=80)
@given(_case())
def test_assemble_equals_arrow_take(case):
    ms, ts, arriving, retained, pi, rid, times, whole, mine_first, with_times = case
    starts = np.cumsum([0] + [b.num_rows for b in retained[:-1]]).astype(np.int64)
    rows, inv, groups, cuts = locate(rid, starts)
    tabs = np.array([[_ColumnView(c, _column_plan(c.type)).source for c in retained[g].columns]
                     for g in groups.tolist()], dtype=np.int64)
    mine = [(PASS, c, 0) if whole else (MINE, c, _code(f.type)) for c, f in enumerate(ms)]
    theirs = [(THEIRS, c, _code(f.type)) for c, f in enumerate(ts)]
    if with_times:
        theirs[0] = (TIMES, 0, 8)
    plan = np.array(mine + theirs if mine_first else theirs + mine, dtype=np.int64)

    # the obvious way: Arrow's take over the arriving batch and over all retained rows
    every = pa.Table.from_batches(retained).combine_chunks()
    want_mine = [c.take(pa.array(pi)) for c in arriving.columns]
    want_theirs = [every.column(c).chunk(0).take(pa.array(rid)) for c in range(len(ts))]
    their_fields = list(ts)
    if with_times:
        want_theirs[0] = pa.array(times)
        their_fields[0] = pa.field("t0", pa.int64())
    arrays = want_mine + want_theirs if mine_first else want_theirs + want_mine
    fields = list(ms) + their_fields if mine_first else their_fields + list(ms)
    schema = pa.schema(fields)
    want = pa.RecordBatch.from_arrays(arrays, schema=schema)

    got = BatchAssembler(schema).build(arriving, plan, tabs, rows, inv, cuts, pi, times)
    assert got is not None
    got.validate(full=True)
    assert got.equals(want)
    for a, b in zip(got.columns, want.columns, strict=True):
        assert a.null_count == b.null_count


def test_assemble_refuses_a_source_of_another_type_and_releases_the_export():
    gc.collect()
    base = pa.total_allocated_bytes()
    batch = pa.record_batch({"a": pa.array(list(range(1000)), pa.int64())})
    retained = pa.array([1.5, 2.5], pa.float64())
    tabs = np.array([[_ColumnView(retained, _column_plan(retained.type)).source]], dtype=np.int64)
    plan = np.array([(PASS, 0, 0), (THEIRS, 0, 4)], dtype=np.int64)  # says 4-byte values
    export = np.zeros(10, dtype=np.int64)
    batch._export_to_c(export.ctypes.data)
    pi = np.arange(1000, dtype=np.int64)
    rows = np.zeros(1000, dtype=np.int64)
    empty = np.zeros(0, dtype=np.int64)
    assert assemble(export.ctypes.data, plan, tabs, rows, empty, empty, pi, empty, RELEASE) == 0
    assert export[8] == 0  # the export's release callback was called: it marks itself released
    del batch, retained, tabs
    gc.collect()
    assert pa.total_allocated_bytes() == base


# -- inside the interval join ------------------------------------------------------------------

@st.composite
def _join_streams(draw):
    """Pushes of a wide schema (the gathered types, a boolean and a dictionary, which Arrow
    gathers, nulls in every column), keys 0-3, times 0-30."""
    extra = draw(st.lists(st.sampled_from(TYPES + [pa.bool_(), pa.dictionary(pa.int8(),
                                                                             pa.string())]),
                          min_size=1, max_size=3))
    schema = pa.schema([("k", pa.int64()), ("ts", pa.int64())]
                       + [(f"c{i}", t) for i, t in enumerate(extra)])
    pushes = []
    for _ in range(draw(st.integers(1, 8))):
        n = draw(st.integers(1, 12))
        skip = draw(st.integers(0, 3))
        cols = [pa.array(draw(st.lists(st.integers(0, 3), min_size=n + skip, max_size=n + skip))),
                pa.array(sorted(draw(st.lists(st.integers(0, 30), min_size=n + skip,
                                              max_size=n + skip))))]
        for t in extra:
            if pa.types.is_boolean(t):
                cols.append(pa.array([None if i % 5 == 0 else i % 2 == 0
                                      for i in range(n + skip)], t))
            elif pa.types.is_dictionary(t):
                cols.append(pa.array([f"d{i % 3}" for i in range(n + skip)]).dictionary_encode()
                            .cast(t))
            else:
                cols.append(_values(draw, t, n + skip, True))
        batch = pa.record_batch(cols, schema=schema).slice(skip, n)
        pushes.append((draw(st.sampled_from([L, R])), batch))
    return schema, pushes


@settings(max_examples=40)
@given(_join_streams(), st.sampled_from(["inner", "left", "full"]), st.sampled_from([0, 4, 1024]))
def test_interval_join_outputs_equal_with_and_without_assembly(streams, how, threshold):
    schema, pushes = streams
    outs = []
    for assembled in (True, False):
        interval_join._C_BATCHES, saved = assembled, interval_join._C_BATCHES
        try:
            logic = IntervalJoin(left=L, right=R, on="k", time="ts", lower=-5, upper=5, how=how,
                                 index_threshold=threshold).build({L: schema, R: schema})
        finally:
            interval_join._C_BATCHES = saved
        assert (logic._assembler is not None) == assembled
        got = []
        for sid, batch in pushes:
            got.extend(logic.on_batch(sid, batch))
        got.extend(logic.on_end())
        outs.append(got)
    assert len(outs[0]) == len(outs[1])
    for a, b in zip(*outs, strict=True):
        a.validate(full=True)
        assert a.equals(b)


# -- the allocation's lifetime -----------------------------------------------------------------

def _pairs(n: int = 3000) -> tuple[pa.Schema, pa.RecordBatch, pa.RecordBatch]:
    schema = pa.schema([("k", pa.int64()), ("ts", pa.int64()), ("p", pa.string())])
    left = pa.record_batch([pa.array(range(n), pa.int64()), pa.array([5] * n, pa.int64()),
                            pa.array([f"left-{i}" for i in range(n)])], schema=schema)
    right = pa.record_batch([pa.array(range(0, n, 3), pa.int64()),
                             pa.array([6] * len(range(0, n, 3)), pa.int64()),
                             pa.array([f"right-{i}" for i in range(0, n, 3)])], schema=schema)
    return schema, left, right


def _join_once() -> pa.RecordBatch:
    schema, left, right = _pairs()
    logic = IntervalJoin(left=L, right=R, on="k", time="ts", lower=-5, upper=5).build(
        {L: schema, R: schema})
    logic.on_batch(L, left)
    (out,) = logic.on_batch(R, right)
    return out


def _check(out: pa.RecordBatch) -> None:
    out.validate(full=True)
    assert out.num_rows == 1000
    assert out.column("p").to_pylist() == [f"left-{i}" for i in range(0, 3000, 3)]
    assert out.column("p_right").to_pylist() == [f"right-{i}" for i in range(0, 3000, 3)]


def test_output_outlives_operator_and_inputs_and_frees_them():
    assert interval_join._C_BATCHES
    gc.collect()
    base = pa.total_allocated_bytes()
    out = _join_once()
    gc.collect()
    _check(out)  # the operator and the pushed batches are gone; the output still reads right
    held = pa.total_allocated_bytes()
    assert held > base  # the arriving batch's columns live on in the output, not copied
    col = out.column("k_right")
    del out
    gc.collect()
    assert col.to_pylist() == list(range(0, 3000, 3))  # one column keeps the whole batch
    del col
    gc.collect()
    assert pa.total_allocated_bytes() == base  # the release callback released the export


def test_outputs_released_in_another_thread():
    gc.collect()
    base = pa.total_allocated_bytes()
    outs = [_join_once() for _ in range(4)]
    box = [outs]
    del outs

    def drop() -> None:
        for o in box[0]:
            _check(o)
        box.clear()
        gc.collect()

    t = threading.Thread(target=drop)
    t.start()
    t.join()
    gc.collect()
    assert pa.total_allocated_bytes() == base


def test_outputs_alive_at_interpreter_exit():
    code = ("import tests.joins.test_c_batches as t\n"
            "KEEP = [t._join_once() for _ in range(3)]\n"
            "t._check(KEEP[0])\n"
            "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"

