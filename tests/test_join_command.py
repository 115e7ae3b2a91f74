"""``splice join`` on files whose rows are out of time order: the SQL answer, or every row
accounted for; the same job with and without checkpoints; bad rows named or dead-lettered."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from splice.cli import main

HOWS = ["inner", "left", "right", "full"]


def _disordered(rng: np.random.Generator, n: int, jitter: int, keys: int = 500) -> pa.Table:
    """Rows in id order with ``ts = sorted + uniform(-jitter, jitter)``, Zipf keys over
    ``keys``, 1% null keys (as a user's file would come)."""
    ts = np.sort(rng.integers(0, 3 * n, n)) + rng.integers(-jitter, jitter + 1, n)
    k = pa.array(rng.zipf(1.3, n) % keys, mask=rng.random(n) < 0.01)
    return pa.table({"id": np.arange(n), "k": k, "ts": ts, "p": rng.integers(0, 1000, n)})


def _files(tmp: Path, n: int, jitter: int, seed: int = 0, fmt: str = "parquet"
           ) -> tuple[Path, Path, pa.Table, pa.Table]:
    rng = np.random.default_rng(seed)
    left, right = _disordered(rng, n, jitter), _disordered(rng, n, jitter)
    paths = []
    for name, t in (("L", left), ("R", right)):
        p = tmp / f"{name}.{fmt}"
        if fmt == "csv":
            pacsv.write_csv(t, p)
        else:
            pq.write_table(t, p)
        paths.append(p)
    return paths[0], paths[1], left, right


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]


def _rows(t: pa.Table) -> Counter:
    return Counter(zip(*(c.to_pylist() for c in t.columns), strict=True))


def _sql(query: str, **tables: pa.Table) -> pa.Table:
    con = duckdb.connect()
    for name, t in tables.items():
        con.register(name, t)
    return con.sql(query).to_arrow_table()


SQL = {
    "interval": "SELECT l.*, r.* FROM l {how} JOIN r ON l.k = r.k "
                "AND r.ts BETWEEN l.ts - 37 AND l.ts + 23",
    "window": "SELECT l.*, r.* FROM l {how} JOIN r ON l.k = r.k "
              "AND floor(l.ts / 50) = floor(r.ts / 50)",  # windows aligned at 0, negative too
}
OPTS = {"interval": ["--lower", "-37", "--upper", "23"], "window": ["--size", "50"]}


@pytest.mark.parametrize("kind", ["interval", "window"])
@pytest.mark.parametrize("how", HOWS)
def test_disordered_files_give_the_sql_answer(tmp_path, capsys, kind, how):
    lp, rp, left, right = _files(tmp_path, 3_000, 20)
    out = tmp_path / "o.parquet"
    m = _run(capsys, ["join", "--kind", kind, "--left", str(lp), "--right", str(rp), "--on", "k",
                      "--time", "ts", "--how", how, "--out", str(out), "--batch-size", "700",
                      "--json", *OPTS[kind]])
    want = _sql(SQL[kind].format(how=how.upper()), l=left, r=right)
    got = pq.read_table(out)
    assert _rows(got) == _rows(want)
    assert m["output_rows"] == want.num_rows and m["late_rows"] == {"left": 0, "right": 0}


@pytest.mark.parametrize("kind", ["interval", "window"])
def test_shuffled_csv_files_give_the_sql_answer(tmp_path, capsys, kind):
    rng = np.random.default_rng(5)
    lp, rp, left, right = _files(tmp_path, 2_000, 5, seed=1)
    for p, t in ((lp, left), (rp, right)):  # rows in no order at all
        shuffled = t.take(pa.array(rng.permutation(t.num_rows)))
        pacsv.write_csv(shuffled, p.with_suffix(".csv"))
    out = tmp_path / "o.csv"
    _run(capsys, ["join", "--kind", kind, "--left", str(lp.with_suffix(".csv")), "--right",
                  str(rp.with_suffix(".csv")), "--on", "k", "--time", "ts", "--how", "full",
                  "--out", str(out), "--json", *OPTS[kind]])
    want = _sql(SQL[kind].format(how="FULL"), l=left, r=right)
    assert _rows(pacsv.read_csv(out)) == _rows(want)


@pytest.mark.parametrize("kind", ["interval", "window"])
@pytest.mark.parametrize("how", ["inner", "full"])
def test_streamed_as_read_every_row_is_accounted_for(tmp_path, capsys, kind, how):
    # disorder up to 60 against a declared bound of 5: some rows are late; each is in the late
    # output once, counted, and the output is SQL's answer over the rows that were not late
    lp, rp, left, right = _files(tmp_path, 3_000, 60, seed=2)
    out, late_out = tmp_path / "o.parquet", tmp_path / "late.parquet"
    m = _run(capsys, ["join", "--kind", kind, "--left", str(lp), "--right", str(rp), "--on", "k",
                      "--time", "ts", "--how", how, "--out", str(out), "--json",
                      "--max-out-of-orderness", "5", "--batch-size", "100",
                      "--late-output", str(late_out), *OPTS[kind]])
    late = pq.read_table(late_out)
    assert late.column_names[0] == "input"
    late_ids = {side: set(late.filter(pa.compute.equal(late["input"], side))
                          .column("id" if side == "left" else "id_right").to_pylist())
                for side in ("left", "right")}
    assert m["late_rows"] == {side: len(ids) for side, ids in late_ids.items()}
    assert m["late_rows"]["left"] > 0 and m["late_rows"]["right"] > 0
    assert late.num_rows == sum(m["late_rows"].values())  # each late row once
    kept = {side: t.filter(pa.array([i not in late_ids[side] for i in t.column("id").to_pylist()]))
            for side, t in (("left", left), ("right", right))}
    want = _sql(SQL[kind].format(how=how.upper()), l=kept["left"], r=kept["right"])
    assert _rows(pq.read_table(out)) == _rows(want)


def test_within_the_bound_nothing_is_late(tmp_path, capsys):
    lp, rp, left, right = _files(tmp_path, 2_000, 10, seed=3)
    out = tmp_path / "o.parquet"
    m = _run(capsys, ["join", "--kind", "interval", "--left", str(lp), "--right", str(rp), "--on",
                      "k", "--time", "ts", "--how", "left", "--out", str(out), "--json",
                      "--max-out-of-orderness", "20", *OPTS["interval"]])
    assert m["late_rows"] == {"left": 0, "right": 0}
    want = _sql(SQL["interval"].format(how="LEFT"), l=left, r=right)
    assert _rows(pq.read_table(out)) == _rows(want)


def test_checkpointed_full_interval_join_of_two_times_300k_rows(tmp_path, capsys):
    # 0.05 s checkpoints through the same job: the output equals the unchecked command's
    rng = np.random.default_rng(4)
    tables = []
    for name in ("L", "R"):
        n = 300_000
        ts = np.sort(rng.integers(0, n, n)) + rng.integers(-10, 11, n)
        t = pa.table({"k": rng.integers(0, 3_000, n), "ts": ts, "p": rng.integers(0, 1000, n)})
        pq.write_table(t, tmp_path / f"{name}.parquet")
        tables.append(t)
    base = ["join", "--kind", "interval", "--left", str(tmp_path / "L.parquet"), "--right",
            str(tmp_path / "R.parquet"), "--on", "k", "--time", "ts", "--lower", "-10",
            "--upper", "10", "--how", "full", "--json"]
    plain = _run(capsys, [*base, "--out", str(tmp_path / "plain.parquet")])
    ck = _run(capsys, [*base, "--out", str(tmp_path / "ck.parquet"), "--checkpoint-dir",
                       str(tmp_path / "ck"), "--checkpoint-interval", "0.05"])
    assert ck["checkpoints"] >= 1
    assert pq.read_table(tmp_path / "ck.parquet").equals(pq.read_table(tmp_path / "plain.parquet"))
    want = _sql("SELECT count(*) AS n FROM l FULL JOIN r ON l.k = r.k "
                "AND r.ts BETWEEN l.ts - 10 AND l.ts + 10", l=tables[0], r=tables[1])
    assert plain["output_rows"] == want.column("n")[0].as_py()


def _bad_csv(tmp_path: Path) -> tuple[Path, Path]:
    good = "id,k,ts,p\n" + "".join(f"{i},{i % 7},{i * 3},{i}\n" for i in range(200))
    bad = good + "200,1,abc,5\n201,2\n" + "".join(f"{i},{i % 7},{i * 3},{i}\n" for i in range(202, 260))
    (tmp_path / "L.csv").write_text(bad)
    (tmp_path / "R.csv").write_text(good)
    return tmp_path / "L.csv", tmp_path / "R.csv"


def test_bad_rows_fail_with_one_clear_line_or_are_dead_lettered(tmp_path, capsys):
    lp, rp = _bad_csv(tmp_path)
    argv = ["join", "--kind", "interval", "--left", str(lp), "--right", str(rp), "--on", "k",
            "--time", "ts", "--lower", "-3", "--upper", "3", "--out", str(tmp_path / "o.parquet"),
            "--json"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("splice: error: ") and "Traceback" not in err
    assert "'left'" in err and "L.csv" in err
    dead = tmp_path / "dead.jsonl"
    m = _run(capsys, [*argv, "--bad-input", "dead-letter", "--dead-letter", str(dead)])
    letters = [json.loads(line) for line in dead.read_text().splitlines()]
    assert m["dead_letter_rows"] == 2 == len(letters)
    assert {d["stream"] for d in letters} == {"left"}
    assert m["input_rows"] == 258 + 200  # every other row was read and joined


def test_inputs_larger_than_the_memory_budget_are_sorted_on_disk(tmp_path, capsys):
    # a 20 KB budget: each input is sorted in runs on disk and merged, same answer
    lp, rp, left, right = _files(tmp_path, 4_000, 30, seed=6)
    out = tmp_path / "o.parquet"
    _run(capsys, ["join", "--kind", "interval", "--left", str(lp), "--right", str(rp), "--on", "k",
                  "--time", "ts", "--how", "full", "--out", str(out), "--memory-budget", "20000",
                  "--batch-size", "1000", "--json", *OPTS["interval"]])
    want = _sql(SQL["interval"].format(how="FULL"), l=left, r=right)
    assert _rows(pq.read_table(out)) == _rows(want)
