"""An ASGI app (the metadata service's) served by uvicorn in a thread on 127.0.0.1, for tests
that need real HTTP (sync clients, TLS, the token middleware end to end)."""

from __future__ import annotations

import socket
import threading
from typing import Any

import uvicorn
from fastapi import FastAPI


class Served:
    """uvicorn serving `app` in a thread on a socket bound and listening before it starts
    (connections wait in the backlog: no polling for readiness)."""

    def __init__(self, app: FastAPI, **uvicorn_kwargs: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", **uvicorn_kwargs))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()
