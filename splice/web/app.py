"""The web page's server: a Starlette app over an :class:`~splice.web.service.EngineService`.

Routes:

* ``GET /``: the page (static HTML, JS and CSS shipped in the package, no other library);
* ``GET /api/topology``, ``/api/queries``, ``/api/queries/{name}``, ``/api/checkpoints``;
* ``GET /api/events``: server-sent events, one ``update`` event (topology, queries,
  checkpoints) at each sample or change;
* ``POST /api/queries`` (``{"sql": ..., "name": ...}``) deploys a SQL query online;
  ``DELETE /api/queries/{name}`` undeploys one. Both need the token printed at start, as
  ``Authorization: Bearer <token>`` (or ``?token=``); without it: 401;
* ``GET /metrics``: Prometheus's text format (:mod:`splice.web.prometheus`).
"""

from __future__ import annotations

import asyncio
import hmac
import json
from importlib.resources import files
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from splice.core.errors import SpliceError
from splice.web.prometheus import metrics_text
from splice.web.service import EngineService

__all__ = ["make_app"]


def _state(service: EngineService) -> dict[str, Any]:
    return {"topology": service.topology(), "queries": service.queries(),
            "checkpoints": service.checkpoints()}


def make_app(service: EngineService, token: str) -> Starlette:
    """The app serving ``service``; state-changing requests need ``token``."""

    def authorized(request: Request) -> bool:
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        given = given or request.query_params.get("token", "")
        return hmac.compare_digest(given.encode(), token.encode())

    def refuse() -> JSONResponse:
        return JSONResponse({"error": "a token is needed: Authorization: Bearer <token>"}, 401)

    async def index(request: Request) -> Response:
        page = files("splice.web").joinpath("static", "index.html").read_text()
        return Response(page, media_type="text/html")

    async def topology(request: Request) -> JSONResponse:
        return JSONResponse(service.topology())

    async def queries(request: Request) -> JSONResponse:
        if request.method == "POST":
            if not authorized(request):
                return refuse()
            try:
                body = await request.json()
                name = service.deploy(str(body["sql"]), body.get("name") or None)
            except (KeyError, TypeError, ValueError) as exc:
                return JSONResponse({"error": f"expected {{'sql': ..., 'name': ...}}: {exc}"}, 400)
            except SpliceError as exc:
                return JSONResponse({"error": str(exc)}, 400)
            return JSONResponse({"name": name}, 201)
        return JSONResponse(service.queries())

    async def query(request: Request) -> JSONResponse:
        name = request.path_params["name"]
        if request.method == "DELETE":
            if not authorized(request):
                return refuse()
            try:
                service.undeploy(name)
            except KeyError:
                return JSONResponse({"error": f"no query named {name!r} is deployed"}, 404)
            return JSONResponse({"undeployed": name})
        for q in service.queries():
            if q["name"] == name:
                return JSONResponse(q)
        return JSONResponse({"error": f"no query named {name!r} is deployed"}, 404)

    async def checkpoints(request: Request) -> JSONResponse:
        return JSONResponse(service.checkpoints())

    async def events(request: Request) -> StreamingResponse:
        async def stream() -> Any:
            version = -1
            while not await request.is_disconnected():
                version = await asyncio.to_thread(service.wait_change, version, 1.0)
                yield f"event: update\ndata: {json.dumps(_state(service))}\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    async def metrics(request: Request) -> Response:
        return Response(metrics_text(service), media_type="text/plain; version=0.0.4")

    static = StaticFiles(directory=str(files("splice.web").joinpath("static")))
    return Starlette(routes=[
        Route("/", index),
        Route("/api/topology", topology),
        Route("/api/queries", queries, methods=["GET", "POST"]),
        Route("/api/queries/{name}", query, methods=["GET", "DELETE"]),
        Route("/api/checkpoints", checkpoints),
        Route("/api/events", events),
        Route("/metrics", metrics),
        Mount("/static", static),
    ])
