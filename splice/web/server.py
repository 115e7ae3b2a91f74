"""Serve the web page of an engine from a background thread (uvicorn), on the address given
only (loopback by default), with a fresh token for the requests that change state."""

from __future__ import annotations

import secrets
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from splice.core.errors import PlanError
from splice.web.app import make_app
from splice.web.service import EngineService

__all__ = ["WebServer", "start_server"]


@dataclass
class WebServer:
    """A running page: its address, token, service, and how to stop it."""

    host: str
    port: int
    token: str
    service: EngineService
    _server: Any
    _thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self.service.stop()


def start_server(service: EngineService, host: str = "127.0.0.1", port: int = 8080,
                 token: str | None = None, announce: bool = True) -> WebServer:
    """Start serving ``service`` at ``host:port`` (port 0: any free port); print the address and
    the token unless ``announce`` is false."""
    import uvicorn

    token = token or secrets.token_urlsafe(16)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        raise PlanError(f"web page: cannot listen on {host}:{port}: {exc}") from exc
    port = sock.getsockname()[1]
    config = uvicorn.Config(make_app(service, token), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                              name="splice-web", daemon=True)
    service.start()
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    web = WebServer(host, port, token, service, server, thread)
    if announce:
        print(f"splice: web page at {web.url} (token {token}: {web.url}?token={token})",
              file=sys.stderr, flush=True)
    return web
