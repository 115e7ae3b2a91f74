"""Input files read right: every row either returned (with its column's type) or bad, and a bad
row fails naming the input, file, row, column and value, or is dead-lettered with its reason."""

from __future__ import annotations

import io
import json
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import PlanError, SchemaError
from splice.io.bad_input import DeadLetterSink
from splice.io.files import iter_input, read_input, read_table

BATCH_SIZES = [1, 2, 7, 49, 50, 51, 100]


def _clean(n: int) -> pa.Table:
    i = np.arange(n, dtype=np.int64)
    return pa.table({"k": i % 97, "ts": i * 3, "v": (i % 13) * 0.5})


@pytest.fixture(scope="module")
def big_csv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Table]:
    """150,000 rows (about 2 MiB: the reader's first block is clean, so ``ts`` is an integer
    column by its first rows); data row 120,000 has ``ts`` = ``abc``, data row 140,000 has too
    few fields."""
    table = _clean(150_000)
    buf = io.BytesIO()
    pacsv.write_csv(table, buf)
    lines = buf.getvalue().decode().split("\n")
    lines[120_000] = "5,abc,1"  # line 0 is the header: line i is data row i
    lines[140_000] = "6,7"
    path = tmp_path_factory.mktemp("csv") / "L.csv"
    path.write_text("\n".join(lines))
    keep = np.ones(150_000, bool)
    keep[[119_999, 139_999]] = False
    return path, table.filter(pa.array(keep))


def test_csv_bad_rows_fail_naming_input_file_row_column_and_value(big_csv: tuple[Path, pa.Table]) -> None:
    path, _ = big_csv
    with pytest.raises(SchemaError) as info:
        read_input(path, "left")
    msg = str(info.value)
    assert msg.startswith(f"input 'left' ({path}), data row 120000: column 'ts': 'abc' is not a valid int64")
    assert "--bad-input dead-letter" in msg
    short = path.with_name("short.csv")
    short.write_text("k,ts,v\n1,2,0.5\n3,4\n")
    with pytest.raises(SchemaError, match=r"input 'right' \(.*short.csv\), data row 2: malformed CSV row: "
                                          r"expected 3 fields, got 2: '3,4'"):
        read_input(short, "right")


def test_csv_dead_letters_exactly_the_bad_rows(big_csv: tuple[Path, pa.Table]) -> None:
    path, want = big_csv
    sink = DeadLetterSink()
    got = read_input(path, "left", policy="dead_letter", sink=sink)
    assert got.schema.field("ts").type == pa.int64()
    assert got.equals(want)
    assert sink.counts == {"column ts: not a valid int64": 1, "malformed CSV row": 1}
    assert sink.table().to_pylist() == [
        {"stream": "left", "reason": "column ts: not a valid int64", "record": "5,abc,1"},
        {"stream": "left", "reason": "malformed CSV row", "record": "6,7"}]


@pytest.mark.parametrize("batch_size", [49, 65_536])
def test_iter_input_streams_the_same_rows(big_csv: tuple[Path, pa.Table], batch_size: int) -> None:
    path, want = big_csv
    sink = DeadLetterSink()
    schema, batches = iter_input(path, "left", batch_size=batch_size, policy="dead_letter", sink=sink)
    out = list(batches)
    assert all(b.num_rows == batch_size for b in out[:-1]) and 0 < out[-1].num_rows <= batch_size
    assert pa.Table.from_batches(out, schema).equals(want)
    assert sink.counts == {"column ts: not a valid int64": 1, "malformed CSV row": 1}
    with pytest.raises(SchemaError, match="data row 120000: column 'ts'"):
        list(iter_input(path, "left", batch_size=batch_size)[1])


def test_clean_csv_reads_as_arrow_does(tmp_path: Path) -> None:
    table = _clean(1_000)
    path = tmp_path / "c.csv"
    pacsv.write_csv(table, path)
    assert read_input(path, "c").equals(pacsv.read_csv(path))
    assert read_table(path).equals(table)


def test_declared_schema_is_used_as_given(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("k,ts,v,extra\n1,2,0.5,x\n3,4,1.5,y\n5,oops,2.5,z\n")
    schema = pa.schema([("v", pa.float32()), ("ts", pa.int32()), ("k", pa.float64())])
    sink = DeadLetterSink()
    got = read_input(path, "d", schema=schema, policy="dead_letter", sink=sink)
    assert got.schema == schema
    assert got.to_pydict() == {"v": [0.5, 1.5], "ts": [2, 4], "k": [1.0, 3.0]}
    assert sink.counts == {"column ts: not a valid int32": 1}
    assert sink.table().column("record").to_pylist() == ["5,oops,2.5,z"]
    with pytest.raises(SchemaError, match=r"input 'd' .*: column 'w' is missing \(schema drift"):
        read_input(path, "d", schema=pa.schema([("w", pa.int64())]))


def test_values_that_do_not_parse_as_their_type(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("id,at,flag\n1,2024-01-01 00:00:00,true\n2,2024-13-45,false\n3,2024-01-02,maybe\n"
                    '4,"2024-01-03",1\n')
    schema = pa.schema([("id", pa.int64()), ("at", pa.timestamp("s")), ("flag", pa.bool_())])
    with pytest.raises(SchemaError, match=r"data row 2: column 'at': '2024-13-45' is not a valid timestamp\[s\]"):
        read_input(path, "t", schema=schema)
    sink = DeadLetterSink()
    got = read_input(path, "t", schema=schema, policy="dead_letter", sink=sink)
    assert got.column("id").to_pylist() == [1, 4]
    assert sink.counts == {"column at: not a valid timestamp[s]": 1, "column flag: not a valid bool": 1}


def test_null_time_is_a_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "n.csv"
    path.write_text("k,ts\n1,10\n2,\n3,30\n")
    assert read_input(path, "n").column("ts").null_count == 1  # no time column: nulls are values
    with pytest.raises(SchemaError, match=r"input 'n' .*, data row 2: time column 'ts' is null"):
        read_input(path, "n", time_column="ts")
    sink = DeadLetterSink()
    got = read_input(path, "n", time_column="ts", policy="dead_letter", sink=sink)
    assert got.to_pydict() == {"k": [1, 3], "ts": [10, 30]}
    assert sink.table().to_pylist() == [{"stream": "n", "reason": "null time column ts", "record": "2,"}]
    with pytest.raises(SchemaError, match="time column 'when' is missing"):
        read_input(path, "n", time_column="when")


def test_csv_positions_count_data_rows(tmp_path: Path) -> None:
    # blank lines are not rows; a quoted field with a newline is one row
    path = tmp_path / "p.csv"
    path.write_text('k,s\n1,a\n\n2,"x\ny"\n3,b,c\nzz,d\n')
    sink = DeadLetterSink()
    got = read_input(path, "p", schema=pa.schema([("k", pa.int64()), ("s", pa.string())]),
                     policy="dead_letter", sink=sink)
    assert got.to_pydict() == {"k": [1, 2], "s": ["a", "x\ny"]}
    assert sink.table().column("record").to_pylist() == ["3,b,c", "zz,d"]
    with pytest.raises(SchemaError, match="data row 3: malformed CSV row"):
        read_input(path, "p")


def test_parquet_null_times_and_schema_drift(tmp_path: Path) -> None:
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"k": [1, 2, 3], "ts": pa.array([10, None, 30], pa.int64()),
                             "s": pa.array(["a", "b", "c"], pa.string_view())}), path)
    got = read_input(path, "p")
    assert got.schema.field("s").type == pa.string() and got.schema.metadata is None
    with pytest.raises(SchemaError, match=r"input 'p' .*, row 2: time column 'ts' is null"):
        read_input(path, "p", time_column="ts")
    sink = DeadLetterSink()
    assert read_input(path, "p", time_column="ts", policy="dead_letter", sink=sink).column("k").to_pylist() == [1, 3]
    assert [json.loads(r) for r in sink.table().column("record").to_pylist()] == [{"k": 2, "ts": None, "s": "b"}]
    with pytest.raises(SchemaError, match=r"column 'ts' is int64 in the file, declared int32 \(schema drift\)"):
        read_input(path, "p", schema=pa.schema([("ts", pa.int32())]))
    with pytest.raises(SchemaError, match=r"column 'x' is missing \(schema drift"):
        read_input(path, "p", schema=pa.schema([("x", pa.int64())]))
    declared = pa.schema([("ts", pa.int64()), ("k", pa.int64())])
    assert read_input(path, "p", schema=declared).schema == declared
    schema, batches = iter_input(path, "p", batch_size=1, time_column="ts", policy="dead_letter",
                                 sink=DeadLetterSink())
    assert [b.num_rows for b in batches] == [1, 1]
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(SchemaError, match="not a readable Parquet file"):
        read_input(bad, "bad")


def test_json_lines_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_text('{"k": 1, "ts": 10}\n{"k": 2, "ts": \n\n[1]\n{"k": "x", "ts": 40}\n{"k": 5, "ts": null}\n'
                    '{"k": 6, "ts": 60, "other": true}\n')
    schema = pa.schema([("k", pa.int64()), ("ts", pa.int64())])
    with pytest.raises(SchemaError, match=r"input 'j' \(.*j.jsonl\), line 2: malformed JSON line"):
        read_input(path, "j", schema=schema)
    sink = DeadLetterSink()
    got = read_input(path, "j", schema=schema, time_column="ts", policy="dead_letter", sink=sink)
    assert got.to_pydict() == {"k": [1, 6], "ts": [10, 60]}
    assert sink.counts == {"malformed JSON line": 2, "column k: not a valid int64": 1, "null time column ts": 1}
    assert sink.table().column("record").to_pylist() == ['{"k": 2, "ts": ', "[1]", '{"k": "x", "ts": 40}',
                                                         '{"k": 5, "ts": null}']
    one = path.with_name("one.jsonl")
    one.write_text('{"k": 1, "ts": 10}\n\n{"k": "x", "ts": 40}\n')
    with pytest.raises(SchemaError, match=r"line 3: column 'k': '\"x\"' is not a valid int64"):
        read_input(one, "j", schema=schema)
    _, batches = iter_input(path, "j", batch_size=1, schema=schema, time_column="ts", policy="dead_letter",
                            sink=DeadLetterSink())
    assert pa.Table.from_batches(list(batches)).equals(got)


def test_json_lines_types_without_a_schema(tmp_path: Path) -> None:
    path = tmp_path / "j.ndjson"
    path.write_text('{"k": 1, "ts": 10}\n{"k": 2, "ts": 20}\n{"k": 3, "ts": "late"}\n')
    with pytest.raises(SchemaError, match=r"line 3: column 'ts': '\"late\"' is not a valid int64"):
        read_input(path, "j")
    sink = DeadLetterSink()
    assert read_input(path, "j", policy="dead_letter", sink=sink).to_pydict() == {"k": [1, 2], "ts": [10, 20]}
    path.write_text('{"k": 1, "ts": 10}\n{"k": 2, "ts": 2.5}\n')  # clean: Arrow's own inference
    assert read_input(path, "j").schema.field("ts").type == pa.float64()


def test_files_and_policies_that_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match=r"input 'x' \(.*nope.csv\): the file does not exist"):
        read_input(tmp_path / "nope.csv", "x")
    (tmp_path / "a.txt").write_text("k\n1\n")
    with pytest.raises(PlanError, match=r"input 'x' .*: unknown format '.txt'"):
        read_input(tmp_path / "a.txt", "x")
    (tmp_path / "a.csv").write_text("k\n1\n")
    with pytest.raises(PlanError, match="needs a dead-letter sink"):
        read_input(tmp_path / "a.csv", "x", policy="dead_letter")
    with pytest.raises(PlanError, match="bad-input policy"):
        read_input(tmp_path / "a.csv", "x", policy="drop")  # type: ignore[arg-type]
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(SchemaError, match="input 'x'"):
        read_input(tmp_path / "empty.csv", "x")
    (tmp_path / "latin.csv").write_bytes(b"k,s\n1,caf\xe9\n2,ok\n")
    sink = DeadLetterSink()
    assert read_input(tmp_path / "latin.csv", "x").column("s").type == pa.binary()  # Arrow's inference
    text = pa.schema([("k", pa.int64()), ("s", pa.string())])
    assert read_input(tmp_path / "latin.csv", "x", schema=text, policy="dead_letter", sink=sink).to_pydict() == \
        {"k": [2], "s": ["ok"]}
    assert sink.counts == {"column s: not valid UTF-8": 1}


# -- the error path converts exactly as Arrow's CSV reader does --------------------------------

TOKENS = ["1", " 1", "1 ", "+1", "-1", "1.5", "1e3", "abc", "", "NA", "nan", "NaN", "N/A", "null", "inf",
          "-inf", "true", "True", "TRUE", "tRuE", "0", "yes", "2024-01-01", " 2024-01-01", "2024-01-01 00:00:00",
          "2024-01-01T00:00:00Z", "2024-13-45", "2024-01-01T00:00:00.123", "12:30:00", "128", "-129", "256",
          "9223372036854775808", "1.23", "1.234", 'a"b', "a,b"]
TYPES = [pa.int64(), pa.int8(), pa.uint8(), pa.float64(), pa.float32(), pa.bool_(), pa.timestamp("s"),
         pa.timestamp("ms"), pa.timestamp("s", "UTC"), pa.date32(), pa.time32("s"), pa.decimal128(10, 2),
         pa.string()]


def _arrow_value(token: str, typ: pa.DataType) -> tuple[bool, object]:
    """The reference: Arrow's CSV reader on the one value."""
    data = ("x\n" + '"' + token.replace('"', '""') + '"\n').encode()
    try:
        t = pacsv.read_csv(io.BytesIO(data), convert_options=pacsv.ConvertOptions(column_types={"x": typ}))
    except pa.ArrowInvalid:
        return False, None
    return True, t.column(0)[0].as_py()


@settings(max_examples=40)
@given(tokens=st.lists(st.sampled_from(TOKENS) | st.text(alphabet="0123456789.-+e: TZabc", max_size=8),
                       min_size=1, max_size=30),
       typ=st.sampled_from(TYPES))
def test_error_path_converts_as_the_csv_reader(tokens: list[str], typ: pa.DataType) -> None:
    tokens = [*tokens, "@@@"]  # at least one bad value, unless strings: the error path runs
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "v.csv"
        path.write_text("x\n" + "".join('"' + t.replace('"', '""') + '"\n' for t in tokens))
        sink = DeadLetterSink()
        got = read_input(path, "v", schema=pa.schema([("x", typ)]), policy="dead_letter", sink=sink)
    ref = [_arrow_value(t, typ) for t in tokens]
    assert got.column("x").to_pylist() == [v for ok, v in ref if ok]
    assert sink.total == sum(not ok for ok, _ in ref)


# -- random tables, corrupted at random places -------------------------------------------------

def _table(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    alphabet = np.array(list("ab ,\"xyz"))
    strings = ["".join(rng.choice(alphabet, size=int(rng.integers(1, 6)))) for _ in range(n)]
    ints = rng.integers(-1000, 1000, n)
    return pa.table({
        "id": pa.array(np.arange(n), pa.int64()),
        "ts": pa.array(rng.integers(0, 10**12, n), pa.int64()).cast(pa.timestamp("ms")),
        "i": pa.array(ints, pa.int64(), mask=rng.random(n) < 0.1),
        "x": pa.array(rng.normal(size=n) * 1e3, pa.float64()),
        "s": pa.array(strings, pa.string()),
    })


REASONS = {"short": "malformed CSV row", "long": "malformed CSV row", "int": "column i: not a valid int64",
           "time": "column ts: not a valid timestamp[ms]", "null": "null time column ts"}


def _corrupt_csv_line(line: str, how: str) -> str:
    fields = line.split(",", 4)  # id, ts, i, x, "s..." (s last: it may hold commas)
    if how == "short":
        return ",".join(fields[:3])
    if how == "long":
        return line + ",9"
    if how == "int":
        return ",".join([fields[0], fields[1], "abc", *fields[3:]])
    if how == "time":
        return ",".join([fields[0], "2024-13-45 00:00:00", *fields[2:]])
    return ",".join([fields[0], "", *fields[2:]])  # null time


@settings(max_examples=25)
@given(n=st.integers(1, 300), seed=st.integers(0, 2**16),
       bad=st.lists(st.tuples(st.integers(0, 299), st.sampled_from(["short", "long", "int", "time", "null"])),
                    max_size=12))
def test_random_corruption_every_row_accounted_for(n: int, seed: int, bad: list[tuple[int, str]]) -> None:
    table = _table(n, seed)
    corrupt = {i: how for i, how in bad if i < n}
    keep = np.ones(n, bool)
    keep[list(corrupt)] = False
    want = table.filter(pa.array(keep))
    with tempfile.TemporaryDirectory() as d:
        buf = io.BytesIO()
        pacsv.write_csv(table, buf)
        lines = buf.getvalue().decode().split("\n")
        for i, how in corrupt.items():
            lines[i + 1] = _corrupt_csv_line(lines[i + 1], how)
        csv_path = Path(d) / "t.csv"
        csv_path.write_text("\n".join(lines))
        for batch_size in (None, 7):
            sink = DeadLetterSink()
            if batch_size is None:
                got = read_input(csv_path, "t", schema=table.schema, time_column="ts", policy="dead_letter",
                                 sink=sink)
            else:
                schema, batches = iter_input(csv_path, "t", batch_size=batch_size, schema=table.schema,
                                             time_column="ts", policy="dead_letter", sink=sink)
                got = pa.Table.from_batches(list(batches), schema)
            assert got.num_rows + sink.total == n
            assert got.equals(want)
            assert sink.counts == dict(Counter(REASONS[how] for how in corrupt.values()))
        # Parquet: the same table with null times at the corrupted rows
        ts = table.column("ts").to_numpy().astype("datetime64[ms]")
        nulled = table.set_column(1, "ts", pa.array(ts, pa.timestamp("ms"), mask=~keep))
        pq_path = Path(d) / "t.parquet"
        pq.write_table(nulled, pq_path, row_group_size=50)
        sink = DeadLetterSink()
        got = read_input(pq_path, "t", time_column="ts", policy="dead_letter", sink=sink)
        assert got.equals(want) and sink.total == len(corrupt)
        _, batches = iter_input(pq_path, "t", batch_size=13, time_column="ts", policy="dead_letter",
                                sink=DeadLetterSink())
        assert pa.Table.from_batches(list(batches), want.schema).equals(want)
        # JSON lines: one line per row, the corrupted ones broken
        rows = [json.dumps({**r, "ts": r["ts"].isoformat(timespec="milliseconds")}) for r in table.to_pylist()]
        for i, how in corrupt.items():
            rows[i] = rows[i][:-3] if how in ("short", "long") else json.dumps(
                {**json.loads(rows[i]), "i": "abc"} if how == "int" else {**json.loads(rows[i]), "ts": None})
        jl_path = Path(d) / "t.jsonl"
        jl_path.write_text("\n".join(rows) + "\n")
        sink = DeadLetterSink()
        got = read_input(jl_path, "t", schema=table.schema, time_column="ts", policy="dead_letter", sink=sink)
        assert got.equals(want) and sink.total == len(corrupt)


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
def test_iter_input_batches_are_exact(tmp_path: Path, batch_size: int) -> None:
    table = _table(230, 1)
    path = tmp_path / "t.csv"
    pacsv.write_csv(table, path)
    schema, batches = iter_input(path, "t", batch_size=batch_size, schema=table.schema)
    out = list(batches)
    assert [b.num_rows for b in out] == [min(batch_size, 230 - i) for i in range(0, 230, batch_size)]
    assert pa.Table.from_batches(out, schema).equals(table)
