"""Bad input at the edges: fail naming stream/column/reason, or route to the dead-letter sink, counted."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from splice.core.errors import PlanError, SchemaError
from splice.io.bad_input import (
    DeadLetterSink,
    EdgeValidator,
    read_csv_checked,
    read_json_lines_checked,
)

SCHEMA = pa.schema([("k", pa.int64()), ("t", pa.int64()), ("x", pa.float64())])


def _batch() -> pa.RecordBatch:
    return pa.record_batch({"k": [1, None, 3, 4, 5], "t": [1, 2, None, 4, 5],
                            "x": [0.5, 1.0, 2.0, float("inf"), float("nan")]}, schema=SCHEMA)


def test_fail_policy_names_stream_column_and_row() -> None:
    v = EdgeValidator("orders", SCHEMA, keys=["k"], time_column="t")
    with pytest.raises(SchemaError, match=r"stream 'orders': null key column k \(row 1"):
        v.check(_batch())


def test_dead_letter_routes_every_bad_row_once_with_its_reason() -> None:
    sink = DeadLetterSink()
    v = EdgeValidator("orders", SCHEMA, keys=["k"], time_column="t", policy="dead_letter", sink=sink)
    good = v.check(_batch())
    assert good.to_pydict() == {"k": [1], "t": [1], "x": [0.5]}
    assert sink.counts == {"null key column k": 1, "null time column t": 1,
                           "NaN or infinite value in column x": 2}
    assert sink.total + good.num_rows == 5  # nothing dropped silently
    assert sink.table().column("stream").to_pylist() == ["orders"] * 4


def test_schema_drift_missing_column_and_bad_values() -> None:
    sink = DeadLetterSink()
    v = EdgeValidator("s", SCHEMA, policy="dead_letter", sink=sink)
    assert v.check(pa.record_batch({"k": [1], "t": [2]})).num_rows == 0
    drift = pa.record_batch({"k": ["1", "x", "3"], "t": [1, 2, 3], "x": [1.0, 2.0, 3.0]})
    assert v.check(drift).to_pydict() == {"k": [1, 3], "t": [1, 3], "x": [1.0, 3.0]}
    assert sink.counts == {"schema drift: missing column(s) x": 1, "schema drift: column k value not int64": 1}
    with pytest.raises(SchemaError, match="schema drift"):
        EdgeValidator("s", SCHEMA).check(drift)


def test_empty_batch_and_bad_policy() -> None:
    assert EdgeValidator("s", SCHEMA).check(SCHEMA.empty_table()).num_rows == 0
    with pytest.raises(PlanError, match="policy"):
        EdgeValidator("s", SCHEMA, policy="drop")  # type: ignore[arg-type]


def test_malformed_csv_rows(tmp_path: Path) -> None:
    p = tmp_path / "in.csv"
    p.write_text("k,t\n1,2\n3,4,5\n6,7\n")
    with pytest.raises(SchemaError, match="malformed CSV"):
        read_csv_checked(p, "s")
    sink = DeadLetterSink(tmp_path / "dead.jsonl")
    t = read_csv_checked(p, "s", "dead_letter", sink)
    assert t.to_pydict() == {"k": [1, 6], "t": [2, 7]}
    sink.publish()
    assert sink.counts == {"malformed CSV row": 1} and "3,4,5" in (tmp_path / "dead.jsonl").read_text()


def test_malformed_json_lines(tmp_path: Path) -> None:
    p = tmp_path / "in.jsonl"
    p.write_text('{"k": 1, "t": 2, "x": 0.5}\n{"k": 2, "t": \n[1]\n{"k": 3, "t": 4, "x": 1.5}\n')
    with pytest.raises(SchemaError, match="line 2"):
        read_json_lines_checked(p, "s", SCHEMA)
    sink = DeadLetterSink()
    t = read_json_lines_checked(p, "s", SCHEMA, "dead_letter", sink)
    assert t.to_pydict() == {"k": [1, 3], "t": [2, 4], "x": [0.5, 1.5]}
    assert sink.counts == {"malformed JSON line": 2}


def test_join_command_routes_bad_rows_and_counts_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from splice.cli import main

    (tmp_path / "l.csv").write_text("k,ts,v\n1,1,0.5\n,2,0.1\n2,3,inf\n1,4,0.2,9\n")
    (tmp_path / "r.csv").write_text("k,ts,w\n1,2,1.0\n2,3,2.0\n")
    args = ["join", "--kind", "interval", "--left", str(tmp_path / "l.csv"), "--right", str(tmp_path / "r.csv"),
            "--on", "k", "--time", "ts", "--lower", "0", "--upper", "5", "--out", str(tmp_path / "o.parquet"),
            "--json"]
    assert main([*args, "--bad-input", "fail"]) == 2
    assert "malformed CSV" in capsys.readouterr().err
    dead = tmp_path / "dead.jsonl"
    assert main([*args, "--bad-input", "dead-letter", "--dead-letter", str(dead)]) == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]
    # the malformed row is bad input; a null key is not (it matches nothing) nor is an
    # infinite value (data like any other)
    assert metrics["dead_letter_rows"] == 1
    assert metrics["dead_letter_reasons"] == {"malformed CSV row": 1}
    assert len(dead.read_text().splitlines()) == 1
    assert metrics["output_rows"] == 2 and metrics["input_rows"] == 5


def test_join_command_passes_the_first_row_of_each_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    import pyarrow.parquet as pq

    from splice.cli import main

    (tmp_path / "l.csv").write_text("id,k,ts\n1,1,1\n2,1,2\n1,1,3\n3,2,4\n2,1,5\n")
    (tmp_path / "r.csv").write_text("id,k,ts\n1,1,2\n1,1,3\n")
    out = tmp_path / "o.parquet"
    args = ["join", "--kind", "interval", "--left", str(tmp_path / "l.csv"), "--right", str(tmp_path / "r.csv"),
            "--on", "k", "--time", "ts", "--lower", "-5", "--upper", "5", "--out", str(out), "--json",
            "--dedupe-on", "id"]
    assert main(args) == 2  # fail is the default policy
    assert "stream 'left'" in capsys.readouterr().err
    dead = tmp_path / "dead.jsonl"
    assert main([*args, "--bad-input", "dead-letter", "--dead-letter", str(dead)]) == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]
    assert metrics["dead_letter_reasons"] == {"duplicate": 3}
    lines = [json.loads(x) for x in dead.read_text().splitlines()]
    assert sorted((x["stream"], json.loads(x["record"])["ts"]) for x in lines) == [("left", 3), ("left", 5), ("right", 3)]
    # left ids 1, 2 (k=1, ts 1, 2) and 3 (k=2) join right id 1 (k=1, ts 2)
    assert sorted(pq.read_table(out).column("ts").to_pylist()) == [1, 2]


def test_rows_over_the_byte_limit_fail_or_are_dead_lettered() -> None:
    from splice.io.bad_input import row_bytes

    schema = pa.schema([("k", pa.int64()), ("s", pa.string())])
    batch = pa.record_batch({"k": [1, 2, 3], "s": ["a", "b" * 500, None]}, schema=schema)
    assert row_bytes(batch).tolist() == [8 + 1 + 4, 8 + 500 + 4, 8 + 0 + 4]
    with pytest.raises(SchemaError, match=r"stream 'docs': row over 100 bytes \(row 1 of the batch"):
        EdgeValidator("docs", schema, max_row_bytes=100).check(batch)
    sink = DeadLetterSink()
    good = EdgeValidator("docs", schema, policy="dead_letter", sink=sink, max_row_bytes=100).check(batch)
    assert good.column("k").to_pylist() == [1, 3] and sink.counts == {"row over 100 bytes": 1}
    with pytest.raises(PlanError, match="max_row_bytes must be >= 1"):
        EdgeValidator("docs", schema, max_row_bytes=0)


def test_dead_letter_file_is_written_whole_by_each_run(tmp_path: Path) -> None:
    path = tmp_path / "dl.jsonl"
    for _ in range(2):  # a rerun after a crash writes the same lines again, not twice
        sink = DeadLetterSink(path)
        sink.add("s", "reason", ['{"k": 1}', '{"k": 2}'])
        assert not path.exists() or len(path.read_text().splitlines()) == 2  # never partial
        sink.publish()
    assert len(path.read_text().splitlines()) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dl.jsonl"]  # no temporary left
