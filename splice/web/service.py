"""What the web page shows of a running engine, and the two things it may change.

:class:`EngineService` reads an :class:`~splice.runtime.engine.Engine` (the engine itself, or the
one a checkpoint coordinator is running): the data path (global switches, bricks, units and the
units each query holds), each query with its SQL or plan, its rates, watermark, late rows and
state, and the job's checkpoints. A sampler thread takes a snapshot every ``interval`` seconds
and turns counters into rates. :meth:`deploy` and :meth:`undeploy` change the path online, at a
position in the stream, as :meth:`Engine.sql` and :meth:`Engine.undeploy` do.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from splice.core.errors import PlanError
from splice.core.time import MIN_TIME
from splice.runtime.engine import Engine

__all__ = ["EngineService"]

#: one colour per query, in deployment order, on the page and in the API
PALETTE = ["#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6",
           "#9a6324", "#469990", "#800000"]


class EngineService:
    """The page's view of an engine (module docstring). ``engine`` is an Engine, or a function
    returning the one running now (``None`` before it starts); ``checkpoints`` a function
    returning the coordinator's :class:`~splice.runtime.checkpoint.CheckpointStats`, if any."""

    def __init__(self, engine: Engine | Callable[[], Engine | None],
                 checkpoints: Callable[[], Any] | None = None, interval: float = 0.5) -> None:
        self._engine = engine if callable(engine) and not isinstance(engine, Engine) else (
            lambda: engine)
        self._checkpoints = checkpoints
        self.interval = interval
        self.sql: dict[str, str] = {}
        self.colors: dict[str, str] = {}
        self._last: dict[str, Any] | None = None
        self.snapshot: dict[str, Any] = {"time": time.time(), "queries": {}, "units": {}}
        self.version = 0
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the engine ---------------------------------------------------------------------------
    def engine(self) -> Engine | None:
        return self._engine()  # type: ignore[no-any-return, operator]

    def _color(self, name: str) -> str:
        if name not in self.colors:
            self.colors[name] = PALETTE[len(self.colors) % len(PALETTE)]
        return self.colors[name]

    def topology(self) -> dict[str, Any]:
        """Switches, bricks and units in path order, and each query's route (its units)."""
        eng = self.engine()
        if eng is None:
            return {"switches": [], "bricks": [], "queries": {}}
        fill = self._queue_fill(eng)
        bricks = []
        for b in eng.topology.describe():
            units = []
            for i, u in enumerate(b["units"]):
                units.append({**u, "unit": i, "queue_fill": fill.get(b["brick"], 0.0),
                              "color": self._color(u["query"]) if u["query"] else None})
            bricks.append({"brick": b["brick"], "switch": b["switch"], "units": units})
        switches = [g.switch.block_id for g in eng.topology.gswitches]
        queries = {name: {"units": [list(bu) for bu in dep.units], "color": self._color(name)}
                   for name, dep in list(eng.assigner.deployed.items())}
        return {"switches": switches, "bricks": bricks, "queries": queries}

    @staticmethod
    def _queue_fill(eng: Engine) -> dict[int, float]:
        queues = getattr(eng.executor, "_queues", None) or []
        size = getattr(eng.executor, "queue_size", 0) or 1
        return {i: q.qsize() / size for i, q in enumerate(queues)}

    def _sources_of(self, eng: Engine, name: str) -> list[str]:
        dep = eng.assigner.deployed.get(name)
        if dep is None:
            return []
        return [eng.catalog.by_id(sid).name for sid in dep.source_columns]

    def queries(self) -> list[dict[str, Any]]:
        eng = self.engine()
        if eng is None:
            return []
        snap = self.snapshot["queries"]
        watermarks = self._watermarks(eng)
        state = eng.state_bytes()
        out = []
        for name, q in list(eng.queries.items()):
            if name not in eng.assigner.deployed:
                continue
            sources = self._sources_of(eng, name)
            marks = [watermarks[s] for s in sources if s in watermarks]
            wm = min((m[0] for m in marks), default=None)
            lag = max((m[1] for m in marks), default=None)
            rates = snap.get(name, {})
            out.append({
                "name": name, "color": self._color(name), "sql": self.sql.get(name),
                "plan": [node.name for node in eng.assigner.deployed[name].query.nodes],
                "sources": sources, "rows_in": eng.stats(name)[0],
                "rows_out": q.rows_out, "rows_in_per_s": rates.get("rows_in_per_s", 0.0),
                "rows_out_per_s": rates.get("rows_out_per_s", 0.0), "watermark": wm,
                "watermark_lag": lag, "late_rows": sum(q.late_rows.values()),
                "dead_letter_rows": eng.dead_letters.total,
                "state_bytes": sum(state.get(name, {}).values()),
                "units": [list(bu) for bu in eng.assigner.deployed[name].units],
                "failed": None if q.error is None else str(q.error)})
        return out

    @staticmethod
    def _watermarks(eng: Engine) -> dict[str, tuple[int, int]]:
        """Per source stream with a watermark: (watermark, largest time seen minus it)."""
        out = {}
        for sid, gen in list(eng._watermarks.items()):
            current = gen.current()
            if current == MIN_TIME:
                continue
            out[eng.catalog.by_id(sid).name] = (int(current), int(gen.max_time) - int(current))
        return out

    def checkpoints(self) -> dict[str, Any]:
        stats = self._checkpoints() if self._checkpoints is not None else None
        if stats is None:
            return {"enabled": False, "count": 0}
        last = len(stats.checkpoint_seconds) - 1
        return {"enabled": True, "count": stats.checkpoints, "resumed_from": stats.resumed_from,
                "last_seconds": stats.checkpoint_seconds[last] if last >= 0 else None,
                "last_bytes": stats.checkpoint_bytes[last] if last >= 0 else None,
                "failures": stats.failures, "last_failure": stats.last_failure}

    # -- changes ------------------------------------------------------------------------------
    def deploy(self, sql: str, name: str | None = None) -> str:
        eng = self.engine()
        if eng is None:
            raise PlanError("the engine has not started yet")
        if name is not None and name in eng.assigner.deployed:
            raise PlanError(f"a query named {name!r} is already deployed")
        result = eng.sql(sql, name)
        self.sql[result.name] = sql
        self._color(result.name)
        self._notify()
        return result.name

    def undeploy(self, name: str) -> None:
        eng = self.engine()
        if eng is None or name not in eng.assigner.deployed:
            raise KeyError(name)
        eng.undeploy(name)
        self._notify()

    # -- sampling -----------------------------------------------------------------------------
    def sample(self) -> dict[str, Any]:
        """Take a snapshot now: rates since the last one."""
        eng = self.engine()
        now = time.time()
        queries: dict[str, dict[str, float]] = {}
        counters: dict[str, tuple[int, int]] = {}
        if eng is not None:
            for name, q in list(eng.queries.items()):
                if name in eng.assigner.deployed:
                    counters[name] = (eng.stats(name)[0], q.rows_out)
        last = self._last
        for name, (rin, rout) in counters.items():
            if last is not None and name in last["counters"]:
                dt = max(now - last["time"], 1e-9)
                pin, pout = last["counters"][name]
                queries[name] = {"rows_in_per_s": (rin - pin) / dt, "rows_out_per_s": (rout - pout) / dt}
            else:
                queries[name] = {"rows_in_per_s": 0.0, "rows_out_per_s": 0.0}
        self._last = {"time": now, "counters": counters}
        self.snapshot = {"time": now, "queries": queries}
        self._notify()
        return self.snapshot

    def _notify(self) -> None:
        with self._changed:
            self.version += 1
            self._changed.notify_all()

    def wait_change(self, version: int, timeout: float) -> int:
        """Block until the version moves past ``version`` (or ``timeout``); the version now."""
        with self._changed:
            self._changed.wait_for(lambda: self.version > version, timeout)
            return self.version

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.wait(self.interval):
                try:
                    self.sample()
                except Exception:  # the engine may be between runs; the next sample retries
                    continue

        self._thread = threading.Thread(target=loop, name="splice-web-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._notify()
        if self._thread is not None:
            self._thread.join(5)
