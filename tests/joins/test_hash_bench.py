"""The hash join benchmark on a tiny workload: it asserts its implementations agree, prints the
figures docs/benchmarks.md reports, and draws the table-size sweep (Diba Figs. 14, 17) as a PNG;
the engine case drives the operators over whole batches against the whole-sequence path."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks import hash_join as bench  # noqa: E402


def test_benchmark_runs_and_plots_the_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bench, "OUT", tmp_path)
    assert bench.main(["--tuples", "6000", "--nl-tuples", "3000", "--min-exp", "4", "--max-exp", "6",
                       "--keys-tuples", "3000", "--multiway-tuples", "30000", "--engine-rows", "70000",
                       "--cases", "two_way,ht_sweep,keys,multiway_keys,engine"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    two = {(r["impl"], r["window"]): r for r in rows if r["bench"] == "two_way"}
    assert set(two) == {(i, w) for i in ("fast", "hbsj", "nested_loop") for w in (16, 64)}
    for w in (16, 64):  # same tuples: fast and HB-SJ give the same number of results
        assert two[("fast", w)]["output_rows"] == two[("hbsj", w)]["output_rows"] > 0
    sweep = [r for r in rows if r["bench"] == "ht_sweep"]
    assert [r["table_size"] for r in sweep] == [1 << e for e in range(5, 12)]
    ovf = [r["overflow_inserts"] for r in sweep]
    assert ovf[0] > ovf[-1] and all(r["tuples_per_s"] > 0 for r in sweep)
    png = tmp_path / "hash_join_ht_sweep.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    keys = [r for r in rows if r["bench"] == "keys"]
    assert {r["keys"] for r in keys} == {"int64", "string", "int32+string"}
    assert len({(r["window"], r["output_rows"]) for r in keys}) == 2  # each window: one answer
    engine = {(r["join"], r["path"]): r for r in rows if r["bench"] == "engine"}
    joins = ("count 1024", "time 2048", "band pimtree 1024")
    assert set(engine) == {(j, p) for j in joins for p in ("operator", "whole_sequence")}
    for j in joins:  # the operator over whole batches (two per input) gives the baseline's rows
        assert engine[(j, "operator")]["output_rows"] == engine[(j, "whole_sequence")]["output_rows"] > 0
    multi = {r["keys"]: r for r in rows if r["bench"] == "multiway_keys"}
    assert set(multi) == {"int64", "string"} and multi["int64"]["output_rows"] == multi["string"]["output_rows"] > 0


def test_nested_loop_baseline_equals_the_reference() -> None:
    """The benchmark's baseline is itself the nested-loop semantics (both streams interleaved)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from reference.hash_window_join import count_window_join

    rng = np.random.default_rng(4)
    sides = rng.integers(0, 2, 400).astype(np.int8)
    keys = rng.integers(0, 6, 400)
    for w in (1, 3, 17):
        ai, ms = bench.nested_loop_join(sides, keys, w)
        seq = np.cumsum(sides == 0) - 1, np.cumsum(sides == 1) - 1
        got = [(int(seq[0][i]), int(m)) if sides[i] == 0 else (int(m), int(seq[1][i]))
               for i, m in zip(ai.tolist(), ms.tolist(), strict=True)]
        assert got == count_window_join(list(zip(sides.tolist(), keys.tolist(), strict=True)), w)
