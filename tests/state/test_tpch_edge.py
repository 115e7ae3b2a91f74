"""``splice tpch`` checks the tables it reads from ``--data-dir`` at the edge: null ids, schema
drift, duplicates (``--dedupe-on``) and oversized rows (``--max-row-bytes``) fail clearly or are
dead-lettered with their reason and counted; the answer is the clean rows' answer. Also
``--state-backend rocksdb`` on Q1, through SIGKILL and resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from splice.cli import main
from splice.io.tpch_data import SCHEMAS, load_table, tpch_dir

ROOT = Path(__file__).resolve().parents[2]
SF = 0.01


@pytest.fixture(scope="module")
def lineitem(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    return load_table("lineitem", SF, tmp_path_factory.mktemp("clean")).cast(SCHEMAS["lineitem"])


def _write(root: Path, table: pa.Table) -> Path:
    d = tpch_dir(SF, root)
    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, d / "lineitem.parquet")
    return root


def _tampered(t: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(input with 5 duplicates, a null id and a huge row; the rows that should pass)."""
    n = t.num_rows
    keys = t.column("l_orderkey").to_pylist()
    keys[10] = None
    comments = t.column("l_comment").to_pylist()
    comments[20] = "z" * 5_000
    bad = t.set_column(0, "l_orderkey", pa.array(keys, pa.int64()))
    bad = bad.set_column(bad.schema.get_field_index("l_comment"), "l_comment", pa.array(comments, pa.string()))
    bad = pa.concat_tables([bad, bad.slice(0, 5)])
    clean = t.filter(pa.array(~np.isin(np.arange(n), [10, 20])))
    return bad, clean


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[list[dict], dict]:
    assert main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    return [json.loads(x) for x in lines[:-1]], json.loads(lines[-1])["metrics"]


EDGE = ["--dedupe-on", "l_orderkey,l_linenumber", "--max-row-bytes", "2000"]


def test_dead_letter_routes_each_bad_row_once_and_the_answer_is_the_clean_rows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], lineitem: pa.Table) -> None:
    bad, clean = _tampered(lineitem)
    dl = tmp_path / "dead.jsonl"
    base = ["tpch", "q1", "--sf", str(SF), "--batch-size", "4096", "--json"]
    got, metrics = _run(capsys, [*base, "--data-dir", str(_write(tmp_path / "bad", bad)), *EDGE,
                                 "--bad-input", "dead-letter", "--dead-letter", str(dl)])
    want, _ = _run(capsys, [*base, "--data-dir", str(_write(tmp_path / "clean", clean))])
    assert got == want
    assert metrics["dead_letter_reasons"] == {"null key column l_orderkey": 1, "row over 2000 bytes": 1,
                                              "duplicate": 5}
    assert metrics["dead_letter_rows"] + metrics["input_rows"] == bad.num_rows  # none dropped silently
    lines = [json.loads(x) for x in dl.read_text().splitlines()]
    assert len(lines) == 7 and {x["stream"] for x in lines} == {"lineitem"}
    # a second run rewrites the dead-letter file: no repeated lines
    _run(capsys, [*base, "--data-dir", str(tmp_path / "bad"), *EDGE, "--bad-input", "dead-letter",
                  "--dead-letter", str(dl)])
    assert len(dl.read_text().splitlines()) == 7


def test_fail_policy_names_stream_column_and_row(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  lineitem: pa.Table) -> None:
    bad, _ = _tampered(lineitem)
    argv = ["tpch", "q1", "--sf", str(SF), "--data-dir", str(_write(tmp_path, bad)), "--batch-size", "4096"]
    assert main([*argv, "--bad-input", "fail"]) == 2
    assert "stream 'lineitem': null key column l_orderkey (row 10 of the batch" in capsys.readouterr().err
    clean_ids = bad.filter(pc.is_valid(bad.column("l_orderkey")))
    _write(tmp_path, clean_ids.filter(pc.less(pc.binary_length(clean_ids.column("l_comment")), 1000)))
    assert main([*argv, "--dedupe-on", "l_orderkey,l_linenumber"]) == 2
    err = capsys.readouterr().err
    assert "stream 'lineitem': duplicate record: id (l_orderkey, l_linenumber) seen before" in err


def test_schema_drift_is_dead_lettered(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       lineitem: pa.Table) -> None:
    t = lineitem.slice(0, 50)
    qty = [str(v) for v in t.column("l_quantity").to_pylist()]
    qty[3] = "three"
    drift = t.set_column(t.schema.get_field_index("l_quantity"), "l_quantity", pa.array(qty))
    _, metrics = _run(capsys, ["tpch", "q1", "--sf", str(SF), "--data-dir", str(_write(tmp_path, drift)),
                               "--bad-input", "dead-letter", "--json"])
    assert metrics["dead_letter_reasons"] == {"schema drift: column l_quantity value not decimal128(15, 2)": 1}
    assert metrics["input_rows"] == 49


def test_state_backend_where_nothing_uses_it_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tpch", "q6", "--sf", str(SF), "--state-backend", "rocksdb"]) == 2
    assert "applies to q1's group-by and to --dedupe-on" in capsys.readouterr().err


def test_q1_on_rocksdb_resumes_after_sigkill_to_the_plain_answer(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], lineitem: pa.Table) -> None:
    root = _write(tmp_path / "data", lineitem)
    argv = ["tpch", "q1", "--sf", str(SF), "--data-dir", str(root), "--batch-size", "2048", "--json"]
    base = [sys.executable, "-m", "splice.cli", *argv]
    env = {k: v for k, v in os.environ.items() if k != "SPLICE_FAULT"}

    def run(extra: list[str], fault: str | None = None) -> subprocess.CompletedProcess[str]:
        e = dict(env, SPLICE_FAULT=fault) if fault else env
        return subprocess.run(base + extra, cwd=ROOT, env=e, capture_output=True, text=True, timeout=120)

    assert main(argv) == 0
    want = capsys.readouterr().out.strip().splitlines()[:-1]
    ck = ["--state-backend", "rocksdb", "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-interval", "0.001"]
    assert run(ck, "batch:9").returncode == -9
    done = run(ck)
    lines = done.stdout.strip().splitlines()
    assert json.loads(lines[-1])["metrics"]["resumed_from"] is not None
    assert lines[:-1] == want
