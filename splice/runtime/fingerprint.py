"""Job fingerprints: a checkpoint is resumed only by the job that wrote it.

A checkpoint's saved position is a batch index into the job's source; resumed by a job with
other inputs, another batch size or other operator parameters, it would silently give wrong
output. The coordinator therefore saves a fingerprint of the job with every checkpoint and
refuses to resume from a checkpoint whose fingerprint differs, naming what differs.

A fingerprint is JSON: the checkpoint format, the plan (each query as written, operators and
their parameters), the options that shape the stream (batch size and the like), and each
input's identity: its path, size and modification time, and a hash of its first and last
64 KiB (for Parquet, the footer: the schema and row groups).

>>> a = {"batch_size": 100, "inputs": {"left": {"size": 10}}}
>>> differences(a, {"batch_size": 50, "inputs": {"left": {"size": 12}}})
['batch_size: 100 then, 50 now', 'inputs.left.size: 10 then, 12 now']
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from splice.core.errors import StateError

__all__ = ["FINGERPRINT_FORMAT", "input_identity", "job_fingerprint", "differences",
           "refuse_another_job"]

#: the layout of checkpoints and sink parts this version writes; part of every fingerprint
FINGERPRINT_FORMAT = 2
_BLOCK = 64 << 10


def input_identity(path: str | Path) -> dict[str, Any]:
    """Path, size, modification time and a hash of the first and last 64 KiB of a file."""
    p = Path(path).resolve()
    st = p.stat()
    h = hashlib.sha256()
    with open(p, "rb") as f:
        h.update(f.read(_BLOCK))
        if st.st_size > _BLOCK:
            f.seek(max(_BLOCK, st.st_size - _BLOCK))
            h.update(f.read(_BLOCK))
    return {"path": str(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "head_tail_sha256": h.hexdigest()}


def job_fingerprint(queries: Sequence[Any], inputs: Mapping[str, str | Path] | None = None,
                    options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The fingerprint of a job of ``queries`` (their ``repr``: frozen specs with every
    parameter) over the files ``inputs`` (name -> path), with the stream-shaping ``options``."""
    return {
        "format": FINGERPRINT_FORMAT,
        "plan": {str(getattr(q, "name", i)): repr(q) for i, q in enumerate(queries)},
        "options": {k: _plain(v) for k, v in sorted((options or {}).items())},
        "inputs": {name: input_identity(p) for name, p in (inputs or {}).items()},
    }


def _plain(v: Any) -> Any:
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return repr(v)


def differences(then: Any, now: Any, at: str = "") -> list[str]:
    """What differs between two fingerprints, one line per leaf (``a.b.c: X then, Y now``)."""
    if isinstance(then, dict) and isinstance(now, dict):
        out = []
        for k in sorted(set(then) | set(now), key=str):
            where = f"{at}.{k}" if at else str(k)
            if k not in then:
                out.append(f"{where}: absent then, {_show(now[k])} now")
            elif k not in now:
                out.append(f"{where}: {_show(then[k])} then, absent now")
            else:
                out.extend(differences(then[k], now[k], where))
        return out
    if then != now:
        return [f"{at}: {_show(then)} then, {_show(now)} now"]
    return []


def _show(v: Any) -> str:
    text = str(v)
    return text if len(text) <= 80 else text[:77] + "..."


def refuse_another_job(directory: str | Path, then: Any, now: Any) -> None:
    """:class:`~splice.core.errors.StateError` naming what differs when the checkpoint in
    ``directory`` (fingerprint ``then``) belongs to another job than ``now``."""
    diff = differences(then, now)
    if diff:
        more = f"; and {len(diff) - 6} more" if len(diff) > 6 else ""
        raise StateError(f"checkpoint directory {str(directory)!r} holds another job's state: "
                         + "; ".join(diff[:6]) + more
                         + " (use another directory, or --restart to discard it)")
