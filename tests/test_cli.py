"""The command line contract: JSON rows, the metrics line, exact answers, clear errors."""

import json

import duckdb
import pytest

from splice.cli import build_parser, main
from splice.io.tpch_data import load_table
from splice.workloads import tpch_queries


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tpch")
    load_table("lineitem", 0.01, d)
    return d


def _run(capsys, argv):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out.strip().splitlines(), out.err


def test_tpch_q1_json_equals_duckdb(capsys, data_dir):
    code, lines, _ = _run(capsys, ["tpch", "q1", "--sf", "0.01", "--data-dir", str(data_dir),
                                   "--batch-size", "4096", "--json"])
    assert code == 0
    rows = [json.loads(x) for x in lines[:-1]]
    metrics = json.loads(lines[-1])["metrics"]
    assert metrics["input_rows"] == 60_175 and metrics["output_rows"] == len(rows) == 4
    assert {"seconds", "load_seconds", "rows_per_s"} <= metrics.keys()
    con = duckdb.connect()
    con.register("lineitem", load_table("lineitem", 0.01, data_dir))
    want = con.sql(tpch_queries.Q1_SQL.format(delta=90)).fetchall()
    got = [tuple(r.values()) for r in rows]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert list(g[:6]) == [str(v) for v in w[:6]]  # keys and exact decimal sums
        assert g[6:9] == pytest.approx(w[6:9], rel=1e-12)  # averages (double)
        assert g[9] == w[9]


def test_tpch_q6_json_equals_duckdb(capsys, data_dir):
    code, lines, _ = _run(capsys, ["tpch", "q6", "--sf", "0.01", "--data-dir", str(data_dir), "--json"])
    assert code == 0
    con = duckdb.connect()
    con.register("lineitem", load_table("lineitem", 0.01, data_dir))
    (want,), = con.sql(tpch_queries.Q6_SQL.format(date="1994-01-01", discount="0.06", quantity=24)).fetchall()
    assert json.loads(lines[0]) == {"revenue": str(want)}


def test_cli_errors_are_one_clear_line(capsys, data_dir):
    code, _, err = _run(capsys, ["tpch", "q1", "--sf", "0.01", "--data-dir", str(data_dir),
                                 "--window", "5"])
    assert code == 2 and "--window applies to q3 only" in err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["tpch", "q1", "--batch-size", "0"])


def test_every_cli_option_is_documented():
    doc = open("docs/cli.md").read()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():
        assert f"splice {name}" in doc
        for action in p._actions:
            for opt in action.option_strings:
                if opt not in ("-h", "--help"):
                    assert opt in doc, f"docs/cli.md does not mention {name} {opt}"


def test_hash_join_count_windows_longer_than_memory(capsys, tmp_path):
    # the fast join's rings grow with what the streams hold: a 5e9-tuple window over three rows
    # joins them; HB-SJ sizes its tables by the window and is refused with the estimate
    import pyarrow as pa
    import pyarrow.parquet as pq

    left, right, out = tmp_path / "l.parquet", tmp_path / "r.parquet", tmp_path / "o.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), left)
    pq.write_table(pa.table({"x": [2, 3, 4]}), right)
    argv = ["join", "--kind", "hash", "--left", str(left), "--right", str(right), "--on", "x",
            "--window", "5000000000", "--out", str(out)]
    code, _, _ = _run(capsys, argv)
    assert code == 0
    assert pq.read_table(out).to_pydict() == {"x": [2, 3], "x_right": [2, 3]}
    code, _, err = _run(capsys, [*argv, "--impl", "hbsj"])
    assert code == 2
    assert "hbsj: a count window of 5000000000 tuples needs about" in err


def test_tpch_from_a_data_dir_in_any_row_order_gives_the_same_answer(capsys, data_dir, tmp_path):
    # the queries' answers do not depend on the order of the rows in the files
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    lineitem = load_table("lineitem", 0.01, data_dir)
    shuffled = lineitem.take(pa.array(np.random.default_rng(0).permutation(lineitem.num_rows)))
    target = tmp_path / "tpch" / "sf0.01"
    target.mkdir(parents=True)
    pq.write_table(shuffled, target / "lineitem.parquet")
    for query in ("q1", "q6"):
        answers = []
        for d in (data_dir, tmp_path):
            code, lines, err = _run(capsys, ["tpch", query, "--sf", "0.01", "--data-dir", str(d),
                                             "--json"])
            assert code == 0, err
            answers.append(lines[:-1])
        assert answers[0] == answers[1] and answers[0]
