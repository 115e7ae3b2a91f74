"""The Ray side of a distributed query: subtask actors and the ordered channels to them.

A :class:`Subtask` is a Ray actor running an :class:`~splice.runtime.engine.Engine` with one
keyed stage of a query (:mod:`splice.cluster.stages`). A :class:`RayChannel` carries messages to
one subtask as actor calls, which Ray runs in the order one caller sends them; each message is
numbered so the subtask checks the order; at most ``max_in_flight`` calls per channel are
outstanding (backpressure), and Arrow batches travel through Ray's object store (zero-copy reads
on one node). What a subtask produces comes back with the call's reply.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from splice.cluster.exchange import Message
from splice.core.errors import StateError
from splice.core.plan import Query
from splice.runtime.engine import Engine
from splice.runtime.remote import RemoteStream

__all__ = ["Subtask", "SubtaskReply", "RayChannel", "compact", "start_ray"]

#: what a subtask's call returns: result batches, late batches with their input, the query's
#: output watermark (None before its first), and the state snapshot taken at a barrier
SubtaskReply = tuple[list[pa.RecordBatch], list[tuple[str, pa.RecordBatch]], int | None,
                     dict[str, Any] | None]


class Subtask:
    """One subtask of a keyed stage: an Engine whose source streams get explicit watermarks.

    :meth:`receive` takes messages in sequence order and returns what they produced
    (:data:`SubtaskReply`). At a barrier ``(number, inline)`` the state goes back in the reply
    when ``inline``, else to ``store`` (a directory every worker reaches), its path back."""

    def __init__(self, index: int, streams: Sequence[RemoteStream], query: Query,
                 state: dict[str, Any] | None = None, die_at: int | None = None,
                 stage: int = 0, store: str | None = None) -> None:
        self.index = index
        self.stage = stage
        self.store = store
        self.name = query.name
        self.engine = Engine()
        for s in streams:
            self.engine.define_stream(s.name, s.schema, s.time_column)
        if state is not None and "path" in state:
            state = _read_state(Path(state["path"]))
        self.late: list[tuple[str, pa.RecordBatch]] = []
        self.result = self.engine.deploy(query, None if state is None else state["query"],
                                         on_late=lambda label, b: self.late.append((label, b)))
        self.next_seq = 0
        self.rows_in = 0
        #: tests: the process exits when this many messages have arrived (a worker that dies)
        self.die_at = die_at

    def receive(self, messages: list[Message]) -> SubtaskReply:
        """Apply ``messages`` (at most one barrier among them) and return what they produced."""
        snapshot = None
        out: list[pa.RecordBatch] = []
        for m in messages:
            if m.seq != self.next_seq:
                raise StateError(f"subtask {self.index}: message {m.seq} arrived, expected "
                                 f"{self.next_seq}: the channel lost its order")
            self.next_seq += 1
            if self.die_at is not None and self.next_seq >= self.die_at:
                os._exit(1)
            if m.kind == "batch":
                self.engine.push(m.stream, m.payload)
                self.rows_in += m.payload.num_rows
            elif m.kind == "watermark":
                self.engine.watermark(m.stream, int(m.payload))
            elif m.kind == "barrier":
                # what came before the barrier goes out with it, the state after it is saved
                out.extend(self.engine.take(self.name))
                number, inline = m.payload
                snapshot = {"query": self.engine.snapshot()[self.name]}
                if self.store is not None and not inline:
                    path = (Path(self.store) / f"checkpoint-{int(number):06d}"
                            / f"stage{self.stage}-subtask{self.index}")
                    _write_state(path, snapshot)
                    snapshot = {"path": str(path)}  # type: ignore[dict-item]
            elif m.kind == "end":
                self.engine.end()
        out.extend(self.engine.take(self.name))
        late, self.late = self.late, []
        return ([compact(b) for b in out], [(label, compact(b)) for label, b in late],
                self.result.watermark, snapshot)

    def ping(self) -> int:
        return self.index


def compact(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with buffers of its own rows only. A slice of a larger batch (a file's table cut
    into batches, an operator's output) pickles with its parent's whole buffers: a 65,536-row
    slice of a 6 M-row table would cross as the 6 M rows."""
    if batch.get_total_buffer_size() <= batch.nbytes + 4096:
        return batch
    sink = pa.BufferOutputStream()  # Arrow IPC writes a slice's own ranges, of every type
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return pa.ipc.open_stream(sink.getvalue()).read_next_batch()


def _write_state(path: Path, state: Any) -> None:
    """``state`` as the snapshot codec's files in directory ``path``, renamed into place whole."""
    from splice.state.codec import encode_state

    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for name, data in encode_state(state).items():
        (tmp / name).write_bytes(data)
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)


def _read_state(path: Path) -> Any:
    from splice.state.codec import decode_state

    if not path.is_dir():
        raise StateError(f"scale-out: the checkpoint state {str(path)!r} is not there: the "
                         "checkpoint directory must be one every worker reaches")
    return decode_state({p.name: p.read_bytes() for p in path.iterdir()})


class RayChannel:
    """The channel to one subtask actor (module docstring); replies go to ``on_reply``."""

    def __init__(self, actor: Any, on_reply: Callable[[int, SubtaskReply], None], index: int,
                 max_in_flight: int = 4, call_rows: int = 65_536) -> None:
        self.actor = actor
        self.on_reply = on_reply
        self.index = index
        self.max_in_flight = max_in_flight
        #: rows gathered before a call: the parts of several batches share one call
        self.call_rows = call_rows
        self.pending: list[Message] = []
        self.pending_rows = 0
        self.in_flight: list[Any] = []
        self.calls = 0
        self.wait_seconds = 0.0

    def send(self, message: Message) -> None:
        self.pending.append(message)
        if message.kind == "batch":
            self.pending_rows += message.payload.num_rows
        if message.kind == "barrier" or self.pending_rows >= self.call_rows:
            self._call()

    def _call(self) -> None:
        import ray

        if not self.pending:
            return
        messages = [Message(m.seq, m.kind, m.stream, compact(m.payload)) if m.kind == "batch" else m
                    for m in self.pending]
        self.in_flight.append(self.actor.receive.remote(messages))
        self.pending = []
        self.pending_rows = 0
        self.calls += 1
        while len(self.in_flight) > self.max_in_flight:  # the oldest reply first: in order
            t0 = time.perf_counter()
            reply = ray.get(self.in_flight.pop(0))
            self.wait_seconds += time.perf_counter() - t0
            self.on_reply(self.index, reply)

    def flush(self) -> None:
        import ray

        self._call()
        while self.in_flight:
            self.on_reply(self.index, ray.get(self.in_flight.pop(0)))


def start_ray(workers: int, address: str | None) -> None:
    """Start a local Ray for ``workers`` (no dashboard), or join the cluster at ``address``;
    nothing when Ray is running already."""
    import ray

    if ray.is_initialized():
        return
    if address is not None:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(num_cpus=max(workers, 1), include_dashboard=False, log_to_driver=False,
                 configure_logging=False)


