"""The agent's HTTP endpoint (agent.metrics): /healthz, /readyz and /metrics served from
a real in-process agent; at most MAX_HTTP_THREADS connections are handled at once (more
are closed at accept), and the endpoint serves again once they go."""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from skiff.agent.config import AgentConfig
from skiff.agent.http_endpoint import MAX_HTTP_THREADS
from skiff.agent.runtime import start_agent
from skiff.fileformat.objectstore import open_async_store
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService

from tests.component.fake_metadata import is_closed
from tests.support.agents import free_port


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


async def test_health_paths_and_the_thread_bound(tmp_path: Path) -> None:
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = LocalMetadataClient(service, owns_service=True)
    cfg = AgentConfig.from_env({}, agent_id="health", host="127.0.0.1", port=0)
    running = await start_agent(cfg, md, open_async_store(f"memory://health-{uuid.uuid4().hex}"))
    port = free_port()
    running.serve_health("127.0.0.1", port)
    assert running.http is not None and running.readiness is not None
    server = running.http._server

    def clients() -> None:
        assert get(port, "/healthz") == (200, "ok\n")
        assert get(port, "/readyz") == (200, "ready\n")
        status, metrics = get(port, "/metrics")
        assert status == 200 and "skiff_produce_buffered_bytes" in metrics
        assert get(port, "/nothing")[0] == 404

        # connections that never send a request hold every handler thread ...
        hogs = [socket.create_connection(("127.0.0.1", port)) for _ in range(MAX_HTTP_THREADS)]
        deadline = time.monotonic() + 30
        while server._slots._value > 0 and time.monotonic() < deadline:  # wait until all are accepted
            time.sleep(0.01)
        # ... so one more is closed at accept, without a thread
        with socket.create_connection(("127.0.0.1", port)) as extra:
            assert is_closed(extra, timeout=10)
        assert server.refused >= 1
        for s in hogs:
            s.close()
        deadline = time.monotonic() + 30
        while server._slots._value < MAX_HTTP_THREADS and time.monotonic() < deadline:
            time.sleep(0.01)
        assert get(port, "/healthz") == (200, "ok\n")

    try:
        await asyncio.to_thread(clients)
        running.readiness.draining = True
        assert await asyncio.to_thread(get, port, "/readyz") == (503, "not ready: draining\n")
    finally:
        await running.close()
