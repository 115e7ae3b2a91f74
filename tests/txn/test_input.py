"""``splice txn --input``: file events equal generated ones; bad rows fail clearly or are
dead-lettered with their reason and counted, never dropped silently."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from splice.cli import main
from splice.core.errors import SchemaError
from splice.io.bad_input import DeadLetterSink
from splice.workloads.txn_apps import TxnWorkload, events_from_file, make_app


def _metrics(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]


@pytest.mark.parametrize("app", ["sl", "tp", "sej"])
def test_file_events_equal_the_generated_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             app: str) -> None:
    w = TxnWorkload(events=2000, keys=50, skew=0.8, abort_ratio=0.1, punctuation=300, seed=3)
    events = make_app(app, w).events
    path = tmp_path / f"{app}.parquet"
    pq.write_table(pa.table({k: v for k, v in events.items()}), path)
    common = ["txn", app, "--keys", "50", "--punctuation", "300", "--json", "--threads", "2"]
    want = _metrics(capsys, common + ["--events", "2000", "--skew", "0.8", "--abort-ratio", "0.1",
                                      "--seed", "3", "--scheduler", "serial"])
    got = _metrics(capsys, common + ["--input", str(path)])
    assert (got["state_checksum"], got["committed"], got["input_rows"]) == (
        want["state_checksum"], want["committed"], 2000)


GOOD = "deposit,src,dst,amount,ts\ntrue,1,2,10,1\nfalse,1,2,5,2\n"
BAD_ROWS = [
    ("true,,2,3,3", "src", "null key column src"),
    ("true,1,,3,3", "dst", "null key column dst"),
    ("false,3,4,nan,3", "amount", "column amount: null value"),  # CSV reads "nan" as null
    ("false,3,4,inf,3", "amount", "NaN or infinite value in column amount"),
    ("false,3,4,abc,3", "amount", "schema drift: column amount value not double"),
    ("maybe,3,4,1,3", "deposit", "schema drift: column deposit value not bool"),
    ("true,1.5,2,3,3", "src", "schema drift: column src value not int64"),
    ("true,100,2,3,3", "src", "column src: id out of range 0..99"),
    ("true,1,-4,3,3", "dst", "column dst: id out of range 0..99"),
    ("true,1,2,3,2", "ts", "column ts: timestamp not after the previous event's"),
    ("true,1,2,,3", "amount", "column amount: null value"),
]


@pytest.mark.parametrize("row,column,reason", BAD_ROWS, ids=[r[2] for r in BAD_ROWS])
def test_bad_rows_fail_naming_stream_column_and_problem(tmp_path: Path, row: str, column: str,
                                                        reason: str) -> None:
    path = tmp_path / "sl.csv"
    path.write_text(GOOD + row + "\ntrue,0,1,4,9\n")
    with pytest.raises(SchemaError) as err:
        events_from_file("sl", str(path), 100)
    msg = str(err.value)
    assert "stream 'sl'" in msg and column in msg
    sink = DeadLetterSink()
    ev = events_from_file("sl", str(path), 100, "dead_letter", sink)
    assert sink.counts == {reason: 1}
    assert ev["ts"].tolist() == [1, 2, 9] and ev["amount"].tolist() == [10.0, 5.0, 4.0]


def test_nan_and_inf_amounts_in_parquet(tmp_path: Path) -> None:
    path = tmp_path / "sl.parquet"
    pq.write_table(pa.table({"deposit": [True, False, True], "src": [1, 2, 3], "dst": [2, 3, 4],
                             "amount": [1.0, float("nan"), float("-inf")]}), path)
    with pytest.raises(SchemaError, match="stream 'sl'.*NaN or infinite value in column amount"):
        events_from_file("sl", str(path), 10)
    sink = DeadLetterSink()
    assert events_from_file("sl", str(path), 10, "dead_letter", sink)["src"].tolist() == [1]
    assert sink.counts == {"NaN or infinite value in column amount": 2}


def test_dead_letter_command_counts_every_bad_row(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sl.csv"
    path.write_text(GOOD + "\n".join(r for r, _, _ in BAD_ROWS[:9]) + "\ntrue,0,1,4,9\n"
                    + "1,2\n")  # and a malformed CSV row
    dl = tmp_path / "dead.jsonl"
    m = _metrics(capsys, ["txn", "sl", "--input", str(path), "--keys", "100", "--json",
                          "--bad-input", "dead-letter", "--dead-letter", str(dl)])
    assert m["input_rows"] == 3 and m["committed"] + m["aborted"] == 3
    assert m["dead_letter_rows"] == 10 and sum(m["dead_letter_reasons"].values()) == 10
    lines = [json.loads(x) for x in dl.read_text().splitlines()]
    assert len(lines) == 10 and {x["stream"] for x in lines} == {"sl"}
    assert all(x["reason"] and x["record"] for x in lines)
    assert main(["txn", "sl", "--input", str(path), "--keys", "100"]) == 2
    err = capsys.readouterr().err
    assert "stream 'sl'" in err and "error" in err


@pytest.mark.parametrize("argv,problem", [
    (["txn", "gs", "--input", "x.csv"], "--input is supported for"),
    (["txn", "sl", "--bad-input", "fail"], "apply to --input"),
    (["txn", "sl", "--input", "{csv}", "--dead-letter", "d.jsonl"], "--dead-letter needs"),
    (["txn", "sl", "--input", "{missing}"], "does not exist"),
    (["txn", "sl", "--input", "{csv}", "--checkpoint-dir", "{tmp}"], "not --input"),
])
def test_input_option_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                             problem: str) -> None:
    csv = tmp_path / "sl.csv"
    pacsv.write_csv(pa.table({"deposit": [True], "src": [1], "dst": [2], "amount": [1.0]}), csv)
    subs = {"{csv}": str(csv), "{missing}": str(tmp_path / "nope.csv"), "{tmp}": str(tmp_path / "cp")}
    assert main([subs.get(a, a) for a in argv]) == 2
    assert problem in capsys.readouterr().err


def test_sej_window_reads_equal_a_nested_loop_window_join() -> None:
    """Each event's probe equals the sum of the opposite stream's volumes for its stock with
    timestamps in [ts - window, ts): the hash window join, computed by nested loops."""
    from splice.txn import TxnEngine
    from splice.workloads.txn_apps import run_app

    w = TxnWorkload(events=1500, keys=12, skew=1.0, window=90, punctuation=128, seed=7)
    app = make_app("sej", w)
    ev = app.events
    probes: list[np.ndarray] = []
    app.post = lambda events, lo, hi, batch, res: probes.append(res)
    eng = TxnEngine(app.tables, threads=2, scheduler="auto")
    out = run_app(app, eng, w.punctuation)
    eng.close()
    assert out["committed"] == w.events
    # each batch's ops: one insert and one probe per event; the probe is the WINDOW_READ op
    got = []
    for lo in range(0, w.events, w.punctuation):
        hi = min(lo + w.punctuation, w.events)
        b = app.build(TxnEngine(app.tables), ev, lo, hi)
        res = probes[lo // w.punctuation]
        from splice.txn.ops import WINDOW_READ
        m = b.op_kind == WINDOW_READ
        order = np.argsort(b.op_txn[m], kind="stable")
        got += res[m][order].tolist()
    ts, stock, vol, traded = ev["ts"], ev["stock"], ev["volume"], ev["traded"]
    want = []
    for i in range(w.events):
        sel = (stock == stock[i]) & (traded != traded[i]) & (ts >= ts[i] - w.window) & (ts < ts[i])
        want.append(float(vol[sel].sum()))
    assert got == want
