"""The snapshot codec: operator state as data files, never code.

Checkpoints hold data, never code: loading one parses JSON, Arrow IPC and ``.npy`` images and
nothing else, so a checkpoint directory that someone else could write cannot make a resumed job
run their code (pickle would: its files name the functions that rebuild them).
:func:`encode_state` turns ``state`` into files:

* ``state.arrow``: the skeleton, JSON text in a one-row ``skeleton`` column. Dicts, lists, str,
  int, float, bool and None are themselves; what JSON lacks is a tagged object
  ``{"$": tag, "v": ...}``: ``tuple``, ``dict`` (keys that are not all strings, such as stream
  ids, as ``[key, value]`` pairs), ``int`` (beyond 64 bits, hex), ``float`` (nan, inf, -inf),
  ``decimal``, ``bytes`` (base64), ``scalar`` (a NumPy scalar: dtype and bytes), and references
  to the parts below: ``ndarray``, ``table``, ``batch``, ``array``, ``chunked``;
* ``arrays.arrow``: NumPy arrays (numeric, bool, datetime and fixed-width string dtypes; never
  object), one ``.npy`` image per row, read back with ``allow_pickle=False``;
* ``arrow-NNN.arrow``: Arrow tables, record batches and arrays, one IPC stream per distinct
  schema holding the batches of every object of that schema.

:func:`decode_state` restores the same Python types (a tuple stays a tuple, an int key an int
key). Anything else in ``state`` (a set, a dataclass, a function) is refused with a
:class:`~splice.core.errors.StateError` naming where it sits (``state['q']['join']['sides'][0]``);
a file that does not decode as this format (a pickle, a skeleton naming a part that is not there)
is refused the same way, before anything in it is used.
"""

from __future__ import annotations

import base64
import gc
import io
import json
import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from decimal import Decimal, InvalidOperation
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa

from splice.core.errors import StateError

__all__ = [
    "FORMAT",
    "encode_state",
    "decode_state",
    "encode_value",
    "decode_value",
    "paused_gc",
    "part_name_ok",
]

_STATE = "state.arrow"
_ARRAYS = "arrays.arrow"
_PART = re.compile(r"arrow-(\d{3,9})\.arrow")
#: 1: the skeleton pickled (never loaded now); 2: data only (JSON, Arrow IPC, .npy)
FORMAT = _FORMAT = 2

_SKELETON = pa.schema([("skeleton", pa.large_string())],
                      metadata={"splice.checkpoint.format": str(_FORMAT)})
_NPY = pa.schema([("npy", pa.large_binary())])
_TAG = "$"
_I64 = (-(1 << 63), (1 << 63) - 1)
#: NumPy dtype kinds a checkpoint holds: bool, integers, floats, complex, datetimes, timedeltas,
#: fixed-width bytes and strings (all stored without pickle; object and structured ones are not)
_NUMPY_KINDS = frozenset("biufcmMSU")
_SCALARS = frozenset({str, int, float, bool, type(None)})
_DATA_ONLY = ("state must be data: dict, list, tuple, str, int, float, bool, None, Decimal, bytes, "
              "NumPy arrays and scalars of numeric, bool, datetime or string dtype, Arrow tables, "
              "record batches and arrays")
_VALUES_ONLY = ("a value must be JSON-like data: dict, list, tuple, str, int, float, bool or None")



# -- the data-only encoding -----------------------------------------------------------------


class _Refused(Exception):
    """A value (encoding) or node (decoding) that the format does not allow; ``path`` collects
    the keys from the offending value up to the root, innermost first."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what
        self.path: list[Any] = []


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while encoding or decoding: the walks build many small
    containers, none in a cycle, and each few hundred of them would otherwise start a collection
    that scans every object of the process: next to a large state, those collections cost more
    than the walk itself (docs/lab/recovery.md, "The state codec")."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _where(root: str, path: list[Any]) -> str:
    return root + "".join(f"[{k!r}]" for k in reversed(path))


def _numpy_ok(dtype: np.dtype) -> bool:
    return dtype.kind in _NUMPY_KINDS and dtype.fields is None and dtype.subdtype is None


class _Encoder:
    """``state`` -> a JSON-able skeleton, collecting NumPy arrays and Arrow batches as parts.

    With ``parts=False`` only the JSON-like types are accepted (dict, list, tuple, str, int,
    float, bool, None): what :func:`encode_value` holds inline.
    """

    def __init__(self, parts: bool) -> None:
        self.parts = parts
        self.open: set[int] = set()  # containers being encoded: a cycle refers back to one
        if parts:
            self.group_of: dict[bytes, int] = {}
            self.schemas: list[pa.Schema] = []
            self.batches: list[list[pa.RecordBatch]] = []
            self.arrays: list[bytes] = []

    def node(self, x: Any) -> Any:
        t = type(x)
        if t is str or t is bool or x is None:
            return x
        if t is int:
            return x if _I64[0] <= x <= _I64[1] else {_TAG: "int", "v": format(x, "x")}
        if t is float:
            return x if math.isfinite(x) else {_TAG: "float", "v": repr(x)}
        if t is list:
            return self.sequence(x)
        if t is dict:
            return self.mapping(x)
        if t is tuple:
            kinds = set(map(type, x))
            if kinds <= _SCALARS and _plain(x, kinds):
                return {_TAG: "tuple", "v": list(x)}
            return {_TAG: "tuple", "v": self.items(x)}
        if self.parts:
            return self.part(x)
        raise _Refused(f"a {_type_name(x)}")

    def sequence(self, x: list[Any]) -> Any:
        kinds = set(map(type, x))
        if kinds <= _SCALARS and _plain(x, kinds):
            return x  # a list of JSON scalars is its own skeleton
        return self.items(x)

    def items(self, x: list[Any] | tuple[Any, ...]) -> list[Any]:
        if id(x) in self.open:
            raise _Refused("a reference back to a container that holds it (a cycle)")
        self.open.add(id(x))
        out = []
        for i, v in enumerate(x):
            try:
                out.append(self.node(v))
            except _Refused as exc:
                exc.path.append(i)
                raise
        self.open.discard(id(x))
        return out

    def mapping(self, x: dict[Any, Any]) -> Any:
        if id(x) in self.open:
            raise _Refused("a reference back to a container that holds it (a cycle)")
        self.open.add(id(x))
        if set(map(type, x)) <= {str} and _TAG not in x:
            out: Any = {}
            for k, v in x.items():
                try:
                    out[k] = self.node(v)
                except _Refused as exc:
                    exc.path.append(k)
                    raise
        else:  # keys that JSON cannot hold as they are (stream ids): [key, value] pairs
            pairs = []
            for k, v in x.items():
                try:
                    key = self.node(k)
                except _Refused as exc:
                    raise _Refused(f"a dict with a key {k!r} that is {exc.what}") from None
                try:
                    pairs.append([key, self.node(v)])
                except _Refused as exc:
                    exc.path.append(k)
                    raise
            out = {_TAG: "dict", "v": pairs}
        self.open.discard(id(x))
        return out

    def part(self, x: Any) -> Any:
        t = type(x)
        if t is np.ndarray:
            if not _numpy_ok(x.dtype):
                raise _Refused(f"a NumPy array of dtype {x.dtype}")
            buf = io.BytesIO()
            np.lib.format.write_array(buf, x, allow_pickle=False)
            self.arrays.append(buf.getvalue())
            return {_TAG: "ndarray", "v": len(self.arrays) - 1}
        if isinstance(x, np.generic):
            if not _numpy_ok(x.dtype):
                raise _Refused(f"a NumPy scalar of dtype {x.dtype}")
            data = x.tobytes() if x.dtype.itemsize else b""
            return {_TAG: "scalar", "v": [x.dtype.str, data.hex()]}
        if t is Decimal:
            return {_TAG: "decimal", "v": str(x)}
        if t is bytes:
            return {_TAG: "bytes", "v": base64.b64encode(x).decode("ascii")}
        if t is pa.RecordBatch:
            return {_TAG: "batch", "v": self.arrow(x.schema, [x])}
        if t is pa.Table:
            batches = x.to_batches()
            return {_TAG: "table", "v": [*self.arrow(x.schema, batches), len(batches)]}
        if isinstance(x, pa.Array):
            batch = pa.RecordBatch.from_arrays([x], names=["array"])
            return {_TAG: "array", "v": self.arrow(batch.schema, [batch])}
        if t is pa.ChunkedArray:
            table = pa.table([x], names=["array"])
            batches = table.to_batches()
            return {_TAG: "chunked", "v": [*self.arrow(table.schema, batches), len(batches)]}
        raise _Refused(f"a {_type_name(x)}")

    def arrow(self, schema: pa.Schema, batches: list[pa.RecordBatch]) -> list[int]:
        """Add ``batches`` to the part of ``schema``: [part, index of the first]."""
        key = schema.serialize().to_pybytes()
        g = self.group_of.get(key)
        if g is None:
            g = self.group_of[key] = len(self.schemas)
            self.schemas.append(schema)
            self.batches.append([])
        start = len(self.batches[g])
        self.batches[g].extend(batches)
        return [g, start]


def _type_name(x: Any) -> str:
    t = type(x)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _plain(x: list[Any] | tuple[Any, ...], kinds: set[type]) -> bool:
    """Whether a sequence of JSON scalars needs no tags: ints within 64 bits, floats finite."""
    if int not in kinds and float not in kinds:
        return True
    if len(kinds) == 1 and len(x) > 8:  # long and uniform: C-speed passes
        if int in kinds:
            return bool(min(x) >= _I64[0] and max(x) <= _I64[1])
        return all(map(math.isfinite, x))
    for v in x:
        t = type(v)
        if (t is int and not _I64[0] <= v <= _I64[1]) or (t is float and not math.isfinite(v)):
            return False
    return True


class _Decoder:
    """A skeleton -> the state, resolving references into ``arrays`` (.npy images) and ``parts``
    (per-schema Arrow batches); every node is checked, a malformed one is :class:`_Refused`."""

    def __init__(self, arrays: pa.Array | None, parts: dict[int, tuple[pa.Schema, list[pa.RecordBatch]]],
                 inline: bool = False) -> None:
        self.arrays = arrays
        self.parts = parts
        self.inline = inline  # only what encode_value makes

    def value(self, n: Any) -> Any:
        t = type(n)
        if t is list:
            return self.sequence(n)
        if t is dict:
            tag = n.get(_TAG)
            if tag is None:
                return self.mapping(n)
            if len(n) != 2 or "v" not in n:
                raise _Refused(f"is a tagged node with keys {sorted(n)} (expected '$' and 'v')")
            return self.tagged(tag, n["v"])
        return n  # str, int, float, bool, None: what json.loads makes of scalars

    def sequence(self, n: list[Any]) -> list[Any]:
        if not set(map(type, n)) & {list, dict}:
            return n
        out = []
        for i, v in enumerate(n):
            try:
                out.append(self.value(v))
            except _Refused as exc:
                exc.path.append(i)
                raise
        return out

    def mapping(self, n: dict[str, Any]) -> dict[Any, Any]:
        if not set(map(type, n.values())) & {list, dict}:
            return n
        out = {}
        for k, v in n.items():
            try:
                out[k] = self.value(v)
            except _Refused as exc:
                exc.path.append(k)
                raise
        return out

    def tagged(self, tag: Any, v: Any) -> Any:  # noqa: C901 - one branch per tag
        if tag == "tuple":
            return tuple(self.sequence(_expect(v, list, "tuple")))
        if tag == "dict":
            out: dict[Any, Any] = {}
            for pair in _expect(v, list, "dict"):
                if type(pair) is not list or len(pair) != 2:
                    raise _Refused("is a dict whose items are not [key, value] pairs")
                key = self.value(pair[0])
                try:
                    val = self.value(pair[1])
                except _Refused as exc:
                    exc.path.append(key)
                    raise
                try:
                    out[key] = val
                except TypeError:
                    raise _Refused(f"is a dict with an unhashable key {key!r}") from None
            return out
        if tag == "int":
            try:
                return int(_expect(v, str, "int"), 16)
            except ValueError:
                raise _Refused(f"is an int tag holding {v!r}, not hex digits") from None
        if tag == "float":
            if v not in ("nan", "inf", "-inf"):
                raise _Refused(f"is a float tag holding {v!r} (expected nan, inf or -inf)")
            return float(v)
        if self.inline:
            raise _Refused(f"is a {tag!r} node, which a plain value cannot hold")
        return self.part(tag, v)

    def part(self, tag: Any, v: Any) -> Any:
        if tag == "decimal":
            try:
                return Decimal(_expect(v, str, "decimal"))
            except InvalidOperation:
                raise _Refused(f"is a decimal tag holding {v!r}") from None
        if tag == "bytes":
            try:
                return base64.b64decode(_expect(v, str, "bytes"), validate=True)
            except ValueError:
                raise _Refused("is a bytes tag that is not base64") from None
        if tag == "scalar":
            return _scalar(v)
        if tag == "ndarray":
            return self.ndarray(_index(v, "ndarray"))
        if tag in ("table", "chunked"):
            refs = _ints(v, 3, tag)
            schema, batches = self.arrow(refs[0], refs[1], refs[2])
            table = pa.Table.from_batches(batches, schema=schema)
            return table if tag == "table" else _single_column(table).column(0)
        if tag in ("batch", "array"):
            refs = _ints(v, 2, tag)
            batch = self.arrow(refs[0], refs[1], 1)[1][0]
            return batch if tag == "batch" else _single_column(batch).column(0)
        raise _Refused(f"has the unknown tag {tag!r}")

    def ndarray(self, i: int) -> np.ndarray:
        if self.arrays is None or i >= len(self.arrays):
            held = 0 if self.arrays is None else len(self.arrays)
            raise _Refused(f"refers to NumPy array {i}, but {_ARRAYS} holds {held}")
        try:
            arr = np.lib.format.read_array(io.BytesIO(self.arrays[i].as_buffer()), allow_pickle=False)
        except (ValueError, OSError, EOFError, SyntaxError) as exc:
            raise _Refused(f"refers to NumPy array {i}, which is not a plain .npy image ({exc})") from None
        if not _numpy_ok(arr.dtype):
            raise _Refused(f"refers to NumPy array {i} of dtype {arr.dtype}, which a checkpoint cannot hold")
        return arr

    def arrow(self, part: int, start: int, count: int) -> tuple[pa.Schema, list[pa.RecordBatch]]:
        if part not in self.parts:
            raise _Refused(f"refers to Arrow part {part} ({_part_name(part)}), which the checkpoint "
                           "does not hold")
        schema, batches = self.parts[part]
        if start + count > len(batches):
            raise _Refused(f"refers to batches {start}..{start + count - 1} of {_part_name(part)}, "
                           f"which holds {len(batches)}")
        return schema, batches[start:start + count]


def _expect(v: Any, t: type, tag: str) -> Any:
    if type(v) is not t:
        raise _Refused(f"is a {tag!r} node holding a {type(v).__name__}, not a {t.__name__}")
    return v


def _index(v: Any, tag: str) -> int:
    if type(v) is not int or v < 0:
        raise _Refused(f"is a {tag!r} node holding {v!r}, not an index")
    return v


def _ints(v: Any, n: int, tag: str) -> list[int]:
    if type(v) is not list or len(v) != n or any(type(x) is not int or x < 0 for x in v):
        raise _Refused(f"is a {tag!r} node holding {v!r}, not {n} indexes")
    return v


def _single_column(x: pa.Table | pa.RecordBatch) -> pa.Table | pa.RecordBatch:
    if x.num_columns != 1:
        raise _Refused(f"refers to Arrow data of {x.num_columns} columns as one array")
    return x


def _scalar(v: Any) -> Any:
    if type(v) is not list or len(v) != 2 or not all(type(x) is str for x in v):
        raise _Refused(f"is a 'scalar' node holding {v!r}, not [dtype, hex]")
    try:
        dtype = np.dtype(v[0])
        data = bytes.fromhex(v[1])
    except (TypeError, ValueError) as exc:
        raise _Refused(f"is a NumPy scalar that does not parse ({exc})") from None
    if not _numpy_ok(dtype):
        raise _Refused(f"is a NumPy scalar of dtype {dtype}, which a checkpoint cannot hold")
    if dtype.itemsize == 0:
        return dtype.type()
    if len(data) != dtype.itemsize:
        raise _Refused(f"is a NumPy scalar of dtype {dtype} holding {len(data)} bytes")
    return np.frombuffer(data, dtype)[0]


def _part_name(i: int) -> str:
    return f"arrow-{i:03d}.arrow"


def _ipc_bytes(schema: pa.Schema, batches: list[pa.RecordBatch]) -> bytes:
    """An Arrow IPC stream (the stream format, unlike the file format, lets batches of one
    dictionary-typed schema carry different dictionaries)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        for b in batches:
            writer.write_batch(b)
    return sink.getvalue().to_pybytes()


def _read_ipc(name: str, data: bytes) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    try:
        reader = pa.ipc.open_stream(pa.BufferReader(data))
        return reader.schema, list(reader)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise StateError(f"checkpoint: {name} is not an Arrow IPC stream ({exc})") from None


def _refuse_skeleton(exc: _Refused) -> NoReturn:
    raise StateError(f"checkpoint: the skeleton's node {_where('state', exc.path)} {exc.what}") from None


def encode_state(state: Any) -> dict[str, bytes]:
    """``state`` as files: ``state.arrow`` (the JSON skeleton), ``arrays.arrow`` (NumPy arrays,
    when there are any) and ``arrow-NNN.arrow`` (Arrow data, one IPC stream per schema).

    A value the format cannot hold raises :class:`StateError` naming its place in ``state``.

    >>> import numpy as np
    >>> sorted(encode_state({1: (np.arange(3), "x")}))
    ['arrays.arrow', 'state.arrow']
    >>> encode_state({"q": {"join": {"sides": [{1, 2}]}}})
    Traceback (most recent call last):
    ...
    splice.core.errors.StateError: checkpoint: state['q']['join']['sides'][0] is a set, ...
    """
    enc = _Encoder(parts=True)
    try:
        with paused_gc():
            root = enc.node(state)
            text = json.dumps(root, separators=(",", ":"), allow_nan=False)
    except _Refused as exc:
        raise StateError(f"checkpoint: {_where('state', exc.path)} is {exc.what}, which a "
                         f"checkpoint cannot hold ({_DATA_ONLY})") from None
    skeleton = pa.record_batch([pa.array([text], pa.large_string())], schema=_SKELETON)
    files = {_STATE: _ipc_bytes(_SKELETON, [skeleton])}
    if enc.arrays:
        files[_ARRAYS] = _ipc_bytes(_NPY, [pa.record_batch([pa.array(enc.arrays, pa.large_binary())],
                                                           schema=_NPY)])
    for i, (schema, batches) in enumerate(zip(enc.schemas, enc.batches, strict=True)):
        files[_part_name(i)] = _ipc_bytes(schema, batches)
    return files


def part_name_ok(name: str) -> bool:
    """Whether ``name`` is a file a checkpoint of this format may hold (manifests naming others,
    ``../`` paths among them, are refused before anything is read)."""
    return name in (_STATE, _ARRAYS) or _PART.fullmatch(name) is not None


def decode_state(files: Mapping[str, bytes]) -> Any:
    """Inverse of :func:`encode_state`: :class:`StateError` for anything that is not exactly
    this format (no file is unpickled or evaluated, whatever it holds)."""
    unknown = sorted(n for n in files if not part_name_ok(n))
    if unknown:
        raise StateError(f"checkpoint: unknown files {unknown} (this format holds {_STATE}, "
                         f"{_ARRAYS} and arrow-NNN.arrow)")
    if _STATE not in files:
        raise StateError(f"checkpoint: {_STATE} (the skeleton) is missing")
    data = files[_STATE]
    if data[:6] == b"ARROW1":
        raise StateError(f"checkpoint: {_STATE} is of format 1 (a pickled skeleton), which is "
                         "never loaded: unpickling can run code")
    schema, batches = _read_ipc(_STATE, data)
    if not schema.equals(_SKELETON, check_metadata=True) or len(batches) != 1 or batches[0].num_rows != 1:
        raise StateError(f"checkpoint: {_STATE} is not a skeleton of format {_FORMAT} "
                         f"(schema {schema.to_string(show_schema_metadata=False)!r}, {len(batches)} batches)")
    arrays = None
    if _ARRAYS in files:
        aschema, abatches = _read_ipc(_ARRAYS, files[_ARRAYS])
        if not aschema.equals(_NPY) or len(abatches) != 1:
            raise StateError(f"checkpoint: {_ARRAYS} is not a column of .npy images")
        arrays = abatches[0].column(0)
    parts = {int(_PART.fullmatch(n).group(1)): _read_ipc(n, d)  # type: ignore[union-attr]
             for n, d in files.items() if _PART.fullmatch(n)}
    try:
        with paused_gc():
            root = json.loads(batches[0].column(0)[0].as_py(), parse_constant=_no_constant)
    except (ValueError, TypeError, RecursionError) as exc:
        raise StateError(f"checkpoint: {_STATE} does not hold JSON ({exc})") from None
    try:
        with paused_gc():
            return _Decoder(arrays, parts).value(root)
    except _Refused as exc:
        _refuse_skeleton(exc)
    except RecursionError:
        raise StateError("checkpoint: the skeleton is nested too deeply to decode") from None
    except (pa.ArrowException, ValueError, TypeError) as exc:  # Arrow parts that do not fit
        raise StateError(f"checkpoint: the state cannot be decoded ({exc})") from None


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def encode_value(value: Any, where: str | None = None) -> Any:
    """``value`` as JSON-able data: dicts, lists, tuples, str, int, float, bool and None, with
    tuples, big ints, non-finite floats and non-string keys tagged as in the skeleton; anything
    else raises :class:`StateError` naming the path inside it (after ``where``, when given).

    >>> encode_value({"book": [(1, 2.5)], 3: float("nan")})
    {'$': 'dict', 'v': [['book', [{'$': 'tuple', 'v': [1, 2.5]}]], [3, {'$': 'float', 'v': 'nan'}]]}
    >>> decode_value(encode_value({"book": [(1, 2.5)]}))
    {'book': [(1, 2.5)]}
    """
    try:
        return _value_node(value)
    except (_Refused, RecursionError):
        pass  # the encoder that keeps the path says what and where
    try:
        _Encoder(parts=False).node(value)
        raise AssertionError("unreachable: both encoders accept the same values")
    except _Refused as exc:
        msg = f"{_where('value', exc.path)} is {exc.what}; {_VALUES_ONLY}"
    except RecursionError:
        msg = "the value is nested too deeply"
    raise StateError(msg if where is None else f"{where}: {msg}")


def decode_value(node: Any, where: str | None = None) -> Any:
    """Inverse of :func:`encode_value` (:class:`StateError` for a node it never makes)."""
    try:
        return _node_value(node)
    except (_Refused, TypeError, ValueError, RecursionError):
        pass  # the decoder that keeps the path says what and where
    try:
        return _Decoder(None, {}, inline=True).value(node)
    except _Refused as exc:
        msg = f"{_where('value', exc.path)} {exc.what}"
    except RecursionError:
        msg = "the value is nested too deeply to decode"
    raise StateError(msg if where is None else f"{where}: {msg}")


# :func:`encode_value` and :func:`decode_value` run once per object of a transactional table:
# these twins of the encoder and decoder above do the same for the JSON-like types without
# keeping a path, so with less work per object (a refusal is explained by rerunning the
# path-keeping ones; figures: docs/lab/recovery.md, "The state codec")

def _value_node(x: Any) -> Any:
    t = type(x)
    if t is str or t is bool or x is None:
        return x
    if t is int:
        return x if _I64[0] <= x <= _I64[1] else {_TAG: "int", "v": format(x, "x")}
    if t is float:
        return x if math.isfinite(x) else {_TAG: "float", "v": repr(x)}
    if t is list or t is tuple:
        kinds = set(map(type, x))
        out = x if kinds <= _SCALARS and _plain(x, kinds) else [_value_node(v) for v in x]
        return out if t is list else {_TAG: "tuple", "v": list(out)}
    if t is dict:
        if set(map(type, x)) <= {str} and _TAG not in x:
            return {k: _value_node(v) for k, v in x.items()}
        return {_TAG: "dict", "v": [[_value_node(k), _value_node(v)] for k, v in x.items()]}
    raise _Refused(t.__name__)


_NESTED = frozenset({list, dict})


def _node_value(n: Any) -> Any:
    t = type(n)
    if t is list:
        return n if not set(map(type, n)) & _NESTED else [_node_value(v) for v in n]
    if t is dict:
        tag = n.get(_TAG)
        if tag is None:
            return n if not set(map(type, n.values())) & _NESTED else {
                k: _node_value(v) for k, v in n.items()}
        v = n["v"]
        if len(n) == 2 and type(v) is list:
            if tag == "tuple":
                return tuple(_node_value(v))
            if tag == "dict":
                return {_node_value(k): _node_value(x) for k, x in v}
        raise _Refused(str(tag))  # the int and float tags, and anything malformed: the slow way
    return n


