"""The collector keeps order and loses nothing, whatever each unit emits."""

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from splice.core.records import Data, End, Install, Instruction
from splice.runtime.brick import Brick
from splice.runtime.unit import UnitProgram
from tests.runtime.opkit import Repeat

SCHEMA = pa.schema([("x", pa.int64())])


@given(
    times=st.lists(st.integers(0, 3), min_size=1, max_size=4),
    sizes=st.lists(st.integers(0, 5), min_size=1, max_size=12),
    routed=st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_collector_keeps_each_units_output_contiguous_and_in_order(times, sizes, routed):
    brick = Brick(0, switch_id=100, unit_ids=[101 + i for i in range(len(times))])
    mask = 0
    for i, t in enumerate(times):
        logic = Repeat(t, tag=i).build({2: SCHEMA})
        brick.process(Install(101 + i, UnitProgram("q", logic, (2,), 10 + i, 20 + i, {2: None})))
        if routed[i]:
            mask |= 1 << i
    assert brick.process(Instruction(100, 2, mask)) == []

    out = []
    next_x = 0
    expected = []
    for n in sizes:
        batch = pa.record_batch({"x": pa.array(range(next_x, next_x + n), pa.int64())})
        next_x += n
        rec = Data(2, batch)
        out += brick.process(rec)
        expected.append(("in", 2, batch.column(0).to_pylist()))
        for i, t in enumerate(times):
            if routed[i] and n:
                expected += [("out", 10 + i, batch.column(0).to_pylist())] * t
    got = [("in" if r.stream_id == 2 else "out", r.stream_id, r.batch.column(0).to_pylist())
           for r in out]
    assert got == expected
    tail = brick.process(End())
    assert isinstance(tail[-1], End)
