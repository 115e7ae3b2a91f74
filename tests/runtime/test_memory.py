"""Memory stays flat on a long stream: 20 M rows through a running windowed query whose output
goes to a sink (and, in one run, a composing query beside it); the peak resident set after the
first 10% of the rows is within 1.2x of the final peak. Each run is a process of its own, since
a peak is per process (``benchmarks/engine_memory.py`` does the work)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("variant", "executor"), [("sink", "serial"), ("compose", "pipelined")])
def test_peak_memory_after_a_tenth_of_the_stream_is_the_peak_at_its_end(variant, executor):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.engine_memory", "--variant", variant, "--executor",
         executor, "--rows", "20000000"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["rows"] == 20_000_000 and figures["late_rows"] > 0
    assert figures["ratio_final_vs_10pct"] <= 1.2, figures


def test_a_composing_top_k_keeps_only_the_rows_it_still_holds():
    # the composed column waits beside the path; top-k reports the least row id among the rows
    # it keeps, so the parse table stays about k rows however long the stream
    import numpy as np
    import pyarrow as pa

    from splice.ops.order import TopK
    from splice.runtime import Engine, Query

    schema = pa.schema([("v", pa.int64()), ("note", pa.string())])
    eng = Engine()
    eng.define_stream("s", schema)
    eng.deploy(Query.chain("top", "s", TopK([("v", "descending")], 10), compose={"s": ["note"]}))
    held = []
    for i in range(300):
        v = np.arange(i * 100, (i + 1) * 100)
        eng.push("s", pa.record_batch({"v": v, "note": [f"n{x}" for x in v]}, schema=schema))
        held.append(eng.metrics()["parse_table_bytes"])
    eng.end()
    got = eng.results("top")
    assert got.column("v").to_pylist() == list(range(29_999, 29_989, -1))
    assert got.column("note").to_pylist() == [f"n{x}" for x in range(29_999, 29_989, -1)]
    assert max(held[150:]) <= 2 * max(held[:20])  # flat, not growing with the stream


def test_take_hands_each_result_batch_over_once_and_keeps_none():
    import pyarrow as pa
    import pyarrow.compute as pc

    from splice.ops import Select
    from splice.runtime import Engine, Query

    schema = pa.schema([("v", pa.int64())])
    eng = Engine(result_buffer_rows=1_000)
    eng.define_stream("s", schema)
    eng.deploy(Query.chain("odd", "s", Select(pc.equal(pc.bit_wise_and(pc.field("v"), 1), 1))))
    seen = []
    for i in range(100):  # 50,000 result rows through a buffer of 1,000: drained as they come
        eng.push("s", pa.record_batch({"v": list(range(i * 1000, (i + 1) * 1000))}, schema=schema))
        seen += [x for b in eng.take("odd") for x in b.column("v").to_pylist()]
    eng.end()
    seen += [x for b in eng.take("odd") for x in b.column("v").to_pylist()]
    assert seen == list(range(1, 100_000, 2))
    assert list(eng.take("odd")) == [] and eng.results("odd").num_rows == 0
