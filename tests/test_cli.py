"""The command line contract: JSON rows, the metrics line, exact answers, clear errors."""

import json

import duckdb
import pytest

from splice.cli import build_parser, main
from splice.io.tpch import load_table
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
