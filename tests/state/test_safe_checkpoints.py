"""Checkpoints hold data, never code: the encoding round-trips every supported type exactly,
refuses everything else naming where it sits, and a tampered checkpoint runs nothing.

The reference for the round trip is the value itself: decoding must give back an equal value of
exactly the same types (a tuple stays a tuple, an int key an int key, a NumPy dtype its dtype).
The tamper tests write what an attacker would (a pickle whose loading creates a file), update the
manifest's checksums so that only the format stands in the way, and check that loading refuses
the checkpoint and that the file was never created.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import math
import pickle
from collections import OrderedDict, defaultdict, namedtuple
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from splice.core.errors import StateError
from splice.runtime.checkpoint_store import LocalCheckpointStore, RocksDBCheckpointStore, open_store
from splice.state.codec import decode_state, decode_value, encode_state, encode_value

# -- the reference: equality of value and type, all the way down -----------------------------


def same(a: Any, b: Any) -> bool:
    """Equal values of identical types (NaN equal to NaN; arrays and scalars bit for bit)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, Decimal):
        return str(a) == str(b)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, (pa.Table, pa.RecordBatch)):
        return a.schema.equals(b.schema, check_metadata=True) and a.equals(b)
    if isinstance(a, (pa.Array, pa.ChunkedArray)):
        return a.type == b.type and a.equals(b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return len(a) == len(b) and all(same(ka, kb) and same(a[ka], b[kb])
                                        for ka, kb in zip(a, b, strict=True))
    return bool(a == b)


# -- every supported type ------------------------------------------------------------------

DTYPES = ["bool", "int8", "uint16", "int64", "uint64", "float16", "float32", "float64",
          "complex128", "datetime64[ns]", "timedelta64[s]", "<U3", "|S2", ">i4"]

numpy_arrays = st.sampled_from(DTYPES).flatmap(
    lambda d: hnp.arrays(np.dtype(d), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)))
numpy_scalars = st.sampled_from(DTYPES).flatmap(lambda d: hnp.from_dtype(np.dtype(d))).map(
    lambda v: np.asarray(v)[()])


@st.composite
def arrow_objects(draw: Any) -> Any:
    n = draw(st.integers(0, 4))
    ints = draw(st.lists(st.none() | st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n))
    strs = draw(st.lists(st.none() | st.text(max_size=5), min_size=n, max_size=n))
    batch = pa.record_batch({"i": pa.array(ints, pa.int64()), "s": pa.array(strs, pa.string())})
    kind = draw(st.sampled_from(["table", "batch", "array", "chunked", "dictionary"]))
    if kind == "table":
        return pa.Table.from_batches([batch, batch.slice(0, n // 2)])
    if kind == "batch":
        return batch
    if kind == "array":
        return batch.column(1)
    if kind == "chunked":
        return pa.chunked_array([batch.column(0), batch.column(0).slice(1)], pa.int64())
    return pa.record_batch({"d": pa.array(strs, pa.string()).dictionary_encode()})


leaves = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
          | st.text(max_size=8) | st.binary(max_size=8)
          | st.decimals(allow_nan=True, allow_infinity=True).filter(lambda d: not d.is_snan())
          | numpy_scalars | numpy_arrays | arrow_objects())
hashable = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=4)
                        | st.floats(allow_nan=False) | st.sampled_from(["$", "v"]),
                        lambda inner: st.tuples(inner, inner), max_leaves=4)


def containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return (st.lists(inner, max_size=4) | st.lists(inner, max_size=4).map(tuple)
            | st.dictionaries(st.text(max_size=4) | st.sampled_from(["$", "v"]), inner, max_size=4)
            | st.dictionaries(st.integers(0, 2**70), inner, max_size=4)
            | st.dictionaries(hashable, inner, max_size=4))


states = st.recursive(leaves, containers, max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(state=states)
def test_every_supported_type_round_trips_exactly(state: Any) -> None:
    back = decode_state(encode_state(state))
    assert same(back, state), (back, state)


@settings(max_examples=200, deadline=None)
@given(state=st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=6)
                          | st.floats(allow_nan=True, allow_infinity=True), containers,
                          max_leaves=25))
def test_plain_values_round_trip_without_parts(state: Any) -> None:
    files = encode_state(state)
    assert sorted(files) == ["state.arrow"]  # dicts, lists, tuples, scalars: JSON alone
    assert same(decode_state(files), state)



json_like = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=6)
                         | st.floats(allow_nan=True, allow_infinity=True), containers, max_leaves=25)


def _skeleton_text(files: dict[str, bytes]) -> str:
    table = pa.ipc.open_stream(pa.BufferReader(files["state.arrow"])).read_all()
    return str(table.column("skeleton")[0].as_py())


@settings(max_examples=300, deadline=None)
@given(value=json_like)
def test_values_round_trip_as_the_skeleton_holds_them(value: Any) -> None:
    """``encode_value`` (the transactional tables' objects) writes exactly the JSON that the
    checkpoint skeleton holds for the same value, and ``decode_value`` reads it back."""
    node = encode_value(value)
    text = json.dumps(node, separators=(",", ":"), allow_nan=False)
    assert text == _skeleton_text(encode_state(value))
    assert same(decode_value(json.loads(text)), value)

# -- everything else is refused, naming its place ---------------------------------------------


@dataclasses.dataclass
class Point:
    x: int


Pair = namedtuple("Pair", "a b")

UNSUPPORTED = {
    "set": {1, 2},
    "frozenset": frozenset([1]),
    "test_safe_checkpoints.Point": Point(1),
    "function": lambda: 1,
    "object": object(),
    "bytearray": bytearray(b"x"),
    "complex": 1j,
    "collections.OrderedDict": OrderedDict(a=1),
    "collections.defaultdict": defaultdict(list),
    "test_safe_checkpoints.Pair": Pair(1, 2),
    "NumPy array of dtype object": np.array([None, 1], dtype=object),
    "NumPy array of dtype [('a', '<i4')]": np.zeros(2, dtype=[("a", "<i4")]),
    "numpy.ma.MaskedArray": np.ma.masked_array([1, 2]),
}


@st.composite
def placed(draw: Any) -> tuple[Any, str, str]:
    """An unsupported value inside random containers, its path and its type's name."""
    name = draw(st.sampled_from(sorted(UNSUPPORTED)))
    value: Any = UNSUPPORTED[name]
    steps = draw(st.lists(st.sampled_from(["dict", "intdict", "list", "tuple"]), max_size=5))
    path = ""
    for kind in steps:
        if kind == "dict":
            key: Any = draw(st.text(min_size=1, max_size=4).filter(lambda k: k != "other"))
            value, path = {key: value, "other": 1}, f"[{key!r}]{path}"
        elif kind == "intdict":
            key = draw(st.integers(0, 9))
            value, path = {key: value}, f"[{key!r}]{path}"
        else:
            i = draw(st.integers(0, 2))
            items = [0] * i + [value]
            value = items if kind == "list" else tuple(items)
            path = f"[{i}]{path}"
    return value, f"state{path}", name


@settings(max_examples=150, deadline=None)
@given(case=placed())
def test_unsupported_values_are_refused_naming_their_path(case: tuple[Any, str, str]) -> None:
    state, path, name = case
    with pytest.raises(StateError) as err:
        encode_state(state)
    msg = str(err.value)
    assert msg.startswith(f"checkpoint: {path} is a {name.replace('test_safe_checkpoints', __name__)}"), msg
    assert "cannot hold" in msg


VALUE_UNSUPPORTED = {**{k: v for k, v in UNSUPPORTED.items() if not k[0].isupper()},
                     "decimal.Decimal": Decimal(1), "bytes": b"x", "numpy.int64": np.int64(1),
                     "numpy.ndarray": np.arange(2), "pyarrow.lib.Int64Array": pa.array([1])}


@settings(max_examples=150, deadline=None)
@given(case=placed(), name=st.sampled_from(sorted(VALUE_UNSUPPORTED)))
def test_values_that_are_not_json_like_are_refused_naming_their_path(case: tuple[Any, str, str],
                                                                      name: str) -> None:
    state, path, placed_name = case
    # put this test's own unsupported value where the strategy put its one
    value = _replace(state, UNSUPPORTED[placed_name], VALUE_UNSUPPORTED[name])
    with pytest.raises(StateError) as err:
        encode_value(value, "books")
    want = f"books: value{path[len('state'):]} is a {name.replace('test_safe_checkpoints', __name__)};"
    assert str(err.value).startswith(want), str(err.value)


def _replace(x: Any, old: Any, new: Any) -> Any:
    if x is old:
        return new
    if type(x) is list:
        return [_replace(v, old, new) for v in x]
    if type(x) is tuple:
        return tuple(_replace(v, old, new) for v in x)
    if type(x) is dict:
        return {k: _replace(v, old, new) for k, v in x.items()}
    return x


@pytest.mark.parametrize("node,message", [
    ({"$": "tuple", "v": 1}, r"books: value is a 'tuple' node holding a int, not a list"),
    ([{"$": "dict", "v": [[[1], 2]]}], r"books: value\[0\] is a dict with an unhashable key \[1\]"),
    ({"a": {"$": "ndarray", "v": 0}}, r"books: value\['a'\] is a 'ndarray' node, which a plain value"),
    ({"$": "int", "v": "g"}, r"books: value is an int tag holding 'g'"),
])
def test_malformed_value_nodes_are_refused(node: Any, message: str) -> None:
    with pytest.raises(StateError, match=message):
        decode_value(node, "books")

def test_refusals_read_well() -> None:
    with pytest.raises(StateError, match=r"state\['q'\]\['join'\]\['sides'\]\[0\] is a set"):
        encode_state({"q": {"join": {"sides": [{1, 2}]}}})
    with pytest.raises(StateError, match=r"state\['q'\] is a dict with a key \(1, frozenset\(\)\)"):
        encode_state({"q": {(1, frozenset()): 1}})
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(StateError, match=r"state\['q'\]\[0\] is a reference back .* \(a cycle\)"):
        encode_state({"q": loop})
    with pytest.raises(StateError, match=r"books: value\[0\] is a set; a value must be JSON-like"):
        encode_value([{1}], "books")
    with pytest.raises(StateError, match=r"books: value\['a'\] is a numpy.ndarray"):
        encode_value({"a": np.arange(2)}, "books")


def test_shared_values_are_copied_not_shared() -> None:
    inner = [1, 2]
    t = pa.table({"k": [1]})
    back = decode_state(encode_state({"a": inner, "b": inner, "t": (t, t)}))
    assert back["a"] == back["b"] == inner and back["a"] is not back["b"]
    assert back["t"][0].equals(t) and back["t"][1].equals(t)


def test_dictionary_columns_with_different_dictionaries_share_a_part() -> None:
    a = pa.record_batch({"d": pa.array(["x", "y"]).dictionary_encode()})
    b = pa.record_batch({"d": pa.array(["z"]).dictionary_encode()})
    files = encode_state([a, b])
    assert sorted(files) == ["arrow-000.arrow", "state.arrow"]
    back = decode_state(files)
    assert back[0].equals(a) and back[1].equals(b)


def test_restored_arrays_are_writable_copies() -> None:
    back = decode_state(encode_state({"a": np.arange(4)}))
    back["a"][0] = 7  # operators update restored arrays in place
    assert back["a"].tolist() == [7, 1, 2, 3]


# -- tampering ---------------------------------------------------------------------------------


class _CreatesFile:
    """Pickled, its loading calls ``open(path, "w")``: what a tampered checkpoint would run."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


def _evil(path: Path) -> bytes:
    return pickle.dumps({"q": _CreatesFile(path)}, protocol=pickle.HIGHEST_PROTOCOL)


def _format1_state(payload: bytes) -> bytes:
    """``state.arrow`` as format 1 wrote it: the pickled skeleton in a one-row binary column of
    an Arrow IPC file."""
    schema = pa.schema([("skeleton", pa.large_binary())])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema) as w:
        w.write_batch(pa.record_batch([pa.array([payload], pa.large_binary())], schema=schema))
    return sink.getvalue().to_pybytes()


def _npy_object_array(payload: Any) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.array([payload, None], dtype=object), allow_pickle=True)
    return buf.getvalue()


def _stream(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _tampered(kind: str, target: Path) -> tuple[dict[str, bytes], int]:
    """A checkpoint's files as an attacker rewrote them, and the manifest format they claim."""
    good = encode_state({"q": {"arr": np.arange(3), "t": pa.table({"k": [1]})}})
    if kind == "pickle_in_state":  # the old layout of state.arrow, holding the payload
        return {**good, "state.arrow": _format1_state(_evil(target))}, 2
    if kind == "raw_pickle_in_state":
        return {**good, "state.arrow": _evil(target)}, 2
    if kind == "format_1":  # a whole checkpoint as the pickling version wrote it
        return {"state.arrow": _format1_state(_evil(target))}, 1
    if kind == "object_npy":  # arrays.arrow holding an object array (pickled elements)
        npy = _npy_object_array(_CreatesFile(target))
        schema = pa.schema([("npy", pa.large_binary())])
        return {**good, "arrays.arrow": _stream(pa.record_batch([pa.array([npy], pa.large_binary())],
                                                                 schema=schema))}, 2
    if kind == "extension_type":  # a part whose field claims pickled Python extension type
        field = pa.field("k", pa.int64(), metadata={
            b"ARROW:extension:name": b"arrow.py_extension_type",
            b"ARROW:extension:metadata": pickle.dumps(_CreatesFile(target))})
        part = pa.record_batch([pa.array([1])], schema=pa.schema([field]))
        return {**good, "arrow-000.arrow": _stream(part)}, 2
    if kind == "pickle_extra_file":  # a file the format does not have, next to the real ones
        return {**good, "state.pkl": _evil(target)}, 2
    raise AssertionError(kind)


TAMPERS = ["pickle_in_state", "raw_pickle_in_state", "format_1", "object_npy", "extension_type",
           "pickle_extra_file"]


def _manifest(cid: int, files: dict[str, bytes], fmt: int) -> dict[str, Any]:
    return {"format": fmt, "checkpoint_id": cid, "meta": {"p": cid},
            "files": {n: {"sha256": hashlib.sha256(d).hexdigest(), "bytes": len(d)}
                      for n, d in files.items()}}


def _plant(store: Any, tmp_path: Path, cid: int, files: dict[str, bytes], fmt: int) -> None:
    """Write checkpoint ``cid`` as ``files``, its manifest's checksums matching them."""
    manifest = json.dumps(_manifest(cid, files, fmt)).encode()
    if isinstance(store, LocalCheckpointStore):
        d = tmp_path / "checkpoints" / f"chk-{cid:012d}"
        d.mkdir(parents=True, exist_ok=True)
        for old in d.iterdir():
            old.unlink()
        for name, data in files.items():
            (d / name).write_bytes(data)
        (d / "MANIFEST.json").write_bytes(manifest)
    else:
        for data in files.values():
            store.db[f"blob/{hashlib.sha256(data).hexdigest()}".encode()] = data
        store.db[f"manifest/{cid:012d}".encode()] = manifest


@pytest.mark.parametrize("backend", ["local", "rocksdb"])
@pytest.mark.parametrize("kind", TAMPERS)
def test_a_tampered_checkpoint_runs_nothing(tmp_path: Path, backend: str, kind: str) -> None:
    if backend == "rocksdb":
        pytest.importorskip("rocksdict", reason="the rocksdb extra is not installed")
    target = tmp_path / "pwned"
    store = open_store(tmp_path, backend, keep=3)  # type: ignore[arg-type]
    store.save(1, {"q": {"n": 1}}, {"p": 1})
    store.save(2, {"q": {"n": 2}}, {"p": 2})
    files, fmt = _tampered(kind, target)
    _plant(store, tmp_path, 2, files, fmt)
    cp = store.load_latest()
    assert not target.exists(), f"{kind}: loading ran the payload"
    if kind == "extension_type":  # Arrow reads the field as its storage type: plain data
        assert cp is not None and cp.checkpoint_id == 2 and not target.exists()
        return
    assert cp is not None and cp.checkpoint_id == 1 and cp.state == {"q": {"n": 1}}
    reason = store.skipped[0]
    assert reason.startswith("checkpoint 2: "), reason
    expected = {"pickle_in_state": "format 1 (a pickled skeleton), which is never loaded",
                "raw_pickle_in_state": "state.arrow is not an Arrow IPC stream",
                "format_1": "written in format 1, which pickles operator state; it is not loaded",
                "object_npy": "not a plain .npy image",
                "pickle_extra_file": "'state.pkl', which is not a file of format 2"}[kind]
    assert expected in reason, reason
    with pytest.raises(StateError):
        decode_state(files)
    assert not target.exists()
    if isinstance(store, RocksDBCheckpointStore):
        store.close()


def test_decode_state_refuses_old_files_without_a_manifest(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    with pytest.raises(StateError, match="format 1 .* never loaded: unpickling can run code"):
        decode_state({"state.arrow": _format1_state(_evil(target))})
    assert not target.exists()


def _skeleton(node: Any) -> bytes:
    schema = pa.schema([("skeleton", pa.large_string())], metadata={"splice.checkpoint.format": "2"})
    return _stream(pa.record_batch([pa.array([json.dumps(node)], pa.large_string())], schema=schema))


@pytest.mark.parametrize("node,message", [
    ({"$": "table", "v": [3, 0, 1]}, r"refers to Arrow part 3 \(arrow-003.arrow\), which the checkpoint does not hold"),
    ({"$": "batch", "v": [0, 5]}, r"refers to batches 5..5 of arrow-000.arrow, which holds 1"),
    ({"$": "ndarray", "v": 0}, r"refers to NumPy array 0, but arrays.arrow holds 0"),
    ({"$": "ndarray", "v": "x"}, r"is a 'ndarray' node holding 'x', not an index"),
    ({"a": [{"$": "pickle", "v": "gASV"}]}, r"state\['a'\]\[0\] has the unknown tag 'pickle'"),
    ({"$": "tuple", "v": [1], "x": 2}, r"is a tagged node with keys"),
    ({"$": "dict", "v": [[[1], 2]]}, r"is a dict with an unhashable key \[1\]"),
    ({"$": "dict", "v": [[1]]}, r"is a dict whose items are not \[key, value\] pairs"),
    ({"$": "float", "v": "1e5"}, r"is a float tag holding '1e5'"),
    ({"$": "int", "v": "zz"}, r"is an int tag holding 'zz'"),
    ({"$": "scalar", "v": ["O", "00"]}, r"is a NumPy scalar of dtype object"),
    ({"$": "scalar", "v": ["<i8", "00"]}, r"is a NumPy scalar of dtype int64 holding 1 bytes"),
    ({"$": "bytes", "v": "!!"}, r"is a bytes tag that is not base64"),
    ({"$": "decimal", "v": "one"}, r"is a decimal tag holding 'one'"),
    ({"$": "array", "v": [0, 0]}, r"refers to Arrow data of 2 columns as one array"),
])
def test_a_skeleton_that_refers_to_what_is_not_there_fails_clearly(node: Any, message: str) -> None:
    part = _stream(pa.record_batch({"a": [1], "b": [2]}))
    with pytest.raises(StateError, match=message):
        decode_state({"state.arrow": _skeleton(node), "arrow-000.arrow": part})


def test_malformed_parts_fail_clearly() -> None:
    files = encode_state({"a": np.arange(3), "t": pa.table({"k": [1]})})
    with pytest.raises(StateError, match="state.arrow .* is missing"):
        decode_state({k: v for k, v in files.items() if k != "state.arrow"})
    with pytest.raises(StateError, match="arrow-000.arrow is not an Arrow IPC stream"):
        decode_state({**files, "arrow-000.arrow": b"garbage"})
    with pytest.raises(StateError, match="arrays.arrow is not a column of .npy images"):
        decode_state({**files, "arrays.arrow": _stream(pa.record_batch({"npy": [1]}))})
    with pytest.raises(StateError, match="not a plain .npy image"):
        schema = pa.schema([("npy", pa.large_binary())])
        decode_state({**files, "arrays.arrow": _stream(pa.record_batch(
            [pa.array([b"\x93NUMPY nonsense"], pa.large_binary())], schema=schema))})
    with pytest.raises(StateError, match="does not hold JSON"):
        decode_state({**files, "state.arrow": _stream(pa.record_batch(
            [pa.array(["{nope"], pa.large_string())], schema=pa.schema(
                [("skeleton", pa.large_string())], metadata={"splice.checkpoint.format": "2"})))})
    with pytest.raises(StateError, match="does not hold JSON"):
        decode_state({**files, "state.arrow": _skeleton(float("nan"))})  # NaN is not JSON
    with pytest.raises(StateError, match="is not a skeleton of format 2"):
        decode_state({**files, "state.arrow": _stream(pa.record_batch({"skeleton": ["{}"]}))})


@pytest.mark.parametrize("backend", ["local", "rocksdb"])
@pytest.mark.parametrize("damage", ["path_escape", "bad_digest", "no_meta", "format_3"])
def test_a_manifest_that_names_what_is_not_there_is_refused(tmp_path: Path, backend: str,
                                                            damage: str) -> None:
    if backend == "rocksdb":
        pytest.importorskip("rocksdict", reason="the rocksdb extra is not installed")
    store: Any = open_store(tmp_path, backend, keep=3)  # type: ignore[arg-type]
    store.save(1, {"n": 1}, {})
    files = encode_state({"n": 2})
    manifest = _manifest(2, files, 2)
    if damage == "path_escape":
        manifest["files"]["../../outside"] = manifest["files"]["state.arrow"]
    elif damage == "bad_digest":
        manifest["files"]["state.arrow"]["sha256"] = "../x"
    elif damage == "no_meta":
        del manifest["meta"]
    else:
        manifest["format"] = 3
    _plant(store, tmp_path, 2, files, 2)
    raw = json.dumps(manifest).encode()
    if isinstance(store, LocalCheckpointStore):
        (tmp_path / "checkpoints" / "chk-000000000002" / "MANIFEST.json").write_bytes(raw)
    else:
        store.db[b"manifest/000000000002"] = raw
    cp = store.load_latest()
    assert cp is not None and cp.checkpoint_id == 1
    expected = {"path_escape": "'../../outside', which is not a file of format 2",
                "bad_digest": "manifest entry of 'state.arrow' is malformed",
                "no_meta": "manifest has no meta object",
                "format_3": "format 3 is not one this version reads (2)"}[damage]
    assert expected in store.skipped[0], store.skipped
    if isinstance(store, RocksDBCheckpointStore):
        store.close()


# -- every store, with state as operators make it ---------------------------------------------


def _operator_like_state() -> dict[str, Any]:
    return {"q": {
        "join": {"version": 2, "sides": [{"batches": [(pa.record_batch({"k": [1, 2]}), None)],
                                          "threshold": np.int64(-5), "late_rows": 0}],
                 "late": [(2, pa.record_batch({"k": [3]}))]},
        "group": {"groups": {"n_groups": 2, "gkeys": np.arange(2), "coders": [(pa.array(["a", "b"]),)],
                             "arrays": {"sum": np.array([1.5, 2.5])}, "others": {}}, "done": False},
        "multi": {"stages": {2: {"first": 0, "live": np.arange(1)}, 3: {"first": 4, "live": np.arange(0)}}},
        "order@watermarks": {"delivered": [1, 2], "effective": [1, 2], "forwarded": -(2**63)},
        "txn": {"objects": json.dumps([{"o": [[1, ["a", 1]]]}]), "pending": [Decimal("1.10"), b"\x00"]},
    }}


@pytest.mark.parametrize("backend", ["local", "rocksdb"])
def test_every_store_round_trips_operator_state(tmp_path: Path, backend: str) -> None:
    if backend == "rocksdb":
        pytest.importorskip("rocksdict", reason="the rocksdb extra is not installed")
    store = open_store(tmp_path, backend, keep=2)  # type: ignore[arg-type]
    state = _operator_like_state()
    store.save(1, state, {"position": 7, "sources": {"s": {"rows_in": 3}}})
    again = open_store(tmp_path, backend, keep=2) if backend == "local" else store  # type: ignore[arg-type]
    cp = again.load_latest()
    assert cp is not None and cp.meta == {"position": 7, "sources": {"s": {"rows_in": 3}}}
    assert same(cp.state, state)
    if isinstance(store, RocksDBCheckpointStore):
        store.close()


def test_the_manifest_declares_the_data_only_format(tmp_path: Path) -> None:
    store = LocalCheckpointStore(tmp_path)
    store.save(1, _operator_like_state(), {})
    d = tmp_path / "checkpoints" / "chk-000000000001"
    manifest = json.loads((d / "MANIFEST.json").read_text())
    assert manifest["format"] == 2
    assert sorted(manifest["files"]) == sorted(p.name for p in d.iterdir() if p.name != "MANIFEST.json")
    for name in manifest["files"]:
        assert (d / name).read_bytes()[:1] != b"\x80"  # no file is a pickle
    skeleton = pa.ipc.open_stream(pa.BufferReader((d / "state.arrow").read_bytes())).read_all()
    text = skeleton.column("skeleton")[0].as_py()
    assert json.loads(text)["q"]["order@watermarks"]["forwarded"] == -(2**63)
    assert base64.b64decode(json.loads(text)["q"]["txn"]["pending"][1]["v"]) == b"\x00"
