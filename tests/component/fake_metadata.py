"""Test harness for the agent's protocol server: real metadata (SQLite), agents on a loop thread.

- `FlakyMetadataClient` wraps a real `MetadataClient` and can be switched to raise
  `MetadataUnavailable` (or to block) on every call, to test how handlers degrade.
- `AgentHarness` runs, on one background event-loop thread, a `MetadataService` over a
  SQLite file, a `LocalMetadataClient` on it, and one or more agents (`AgentContext` +
  `start_agent_server` on 127.0.0.1, port 0 + `AgentRegistry`). Blocking clients
  (confluent-kafka, kafka-python, kcat, raw sockets) run in the test's own thread;
  `harness.call(coro)` runs a coroutine on the agents' loop.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from skiff.agent.agent_registry import AgentRegistry
from skiff.agent.config import AgentConfig
from skiff.agent.context import AgentContext
from skiff.agent.handlers import HandlerRegistry
from skiff.agent.network.server import AgentServer, start_agent_server
from skiff.agent.protocol import decode_response, encode_request, response_schema
from skiff.agent.runtime import build_agent_context, close_parts
from skiff.fileformat.objectstore.memory import AsyncMemoryStore
from skiff.metadata.errors import MetadataUnavailable
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.wire.codec import Operation
from skiff.metadata.wire.operations import MetadataClient, OperationForwarder

T = TypeVar("T")


class FlakyMetadataClient(OperationForwarder):
    """A MetadataClient that forwards every operation to `inner` unless `down` is set (then
    each call raises `MetadataUnavailable`); `calls` records the operations called."""

    def __init__(self, inner: MetadataClient) -> None:
        self.inner = inner
        self.down = False
        self.calls: list[str] = []

    def _forward(self, op: Operation) -> Callable[..., Awaitable[Any]]:
        name = op.name

        async def forward(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            if self.down:
                raise MetadataUnavailable(f"{name}: metadata is down (test)")
            return await getattr(self.inner, name)(*args, **kwargs)

        return forward

    async def close(self) -> None:
        await self.inner.close()


class RunningAgent:
    def __init__(self, ctx: AgentContext, server: AgentServer, registry: AgentRegistry) -> None:
        self.ctx = ctx
        self.server = server
        self.registry = registry

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    @property
    def node_id(self) -> int:
        return self.ctx.agents.self_node_id


class AgentHarness:
    def __init__(self, data_dir: Path, **config: Any) -> None:
        self.data_dir = data_dir
        self.config_overrides = config
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="agent-loop", daemon=True)
        self.agents: list[RunningAgent] = []
        self.service: MetadataService | None = None
        self.metadata: FlakyMetadataClient | None = None

    # --- running things on the agents' loop ---------------------------------------------

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result(timeout)

    def start(self, agents: int = 1, registry: HandlerRegistry | None = None) -> AgentHarness:
        self._thread.start()
        self.service = MetadataService.from_url(
            f"sqlite:///{self.data_dir}/metadata.db", sqlite_synchronous="OFF"
        )
        self.metadata = FlakyMetadataClient(LocalMetadataClient(self.service, owns_service=True))
        for i in range(agents):
            self.add_agent(str(i + 1), registry=registry)
        return self

    def add_agent(
        self, agent_id: str, registry: HandlerRegistry | None = None, **config: Any
    ) -> RunningAgent:
        assert self.metadata is not None
        merged = {
            "agent_id": agent_id,
            "host": "127.0.0.1",
            "port": 0,
            "heartbeat_interval_ms": 200,
            "agent_ttl_ms": 5000,
            **self.config_overrides,
            **config,
        }
        cfg = AgentConfig(**merged)

        async def go() -> RunningAgent:
            assert self.metadata is not None
            # every part of a real agent; the bucket is in memory (these agents serve admin
            # and group requests), only the group coordinator runs in the background
            store = AsyncMemoryStore(f"harness-{uuid.uuid4().hex}")
            ctx = build_agent_context(cfg, self.metadata, store)
            await ctx.acls.start()  # ACLs loaded (a no-op unless authorizer_enabled)
            ctx.parts.groups.start()
            server = await start_agent_server(ctx, "127.0.0.1", 0, registry=registry)
            membership = AgentRegistry(self.metadata, ctx.agents, cfg.heartbeat_interval_ms)
            await membership.start()
            return RunningAgent(ctx, server, membership)

        agent = self.call(go())
        self.agents.append(agent)
        return agent

    def refresh_all(self) -> None:
        """One heartbeat round for every agent, twice (so each one sees all the others)."""
        for _ in range(2):
            for a in self.agents:
                self.call(a.registry.beat_once())

    @property
    def agent(self) -> RunningAgent:
        return self.agents[0]

    @property
    def bootstrap(self) -> str:
        return self.agents[0].bootstrap

    def stop(self) -> None:
        async def go() -> None:
            for a in self.agents:
                await a.registry.close()
                await a.server.close()
                await close_parts(a.ctx.parts)
                await a.ctx.acls.close()
            if self.metadata is not None:
                await self.metadata.close()

        try:
            if self._thread.is_alive():
                self.call(go())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()


# --- raw wire helpers -----------------------------------------------------------------------


def connect(bootstrap: str, timeout: float = 10.0) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    return recv_exactly(sock, size)


def is_closed(sock: socket.socket, timeout: float = 5.0) -> bool:
    """True if the peer closes the connection (EOF or reset) within `timeout` without sending data."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def roundtrip(sock: socket.socket, body: Any, correlation_id: int = 1, client_id: str | None = "test") -> Any:
    """Send one kio request and return the parsed response of the same version."""
    sock.sendall(encode_request(body, correlation_id, client_id=client_id))
    frame = recv_frame(sock)
    cls = response_schema(int(body.__api_key__), int(body.__version__))
    assert cls is not None
    corr, response = decode_response(frame, cls)
    assert corr == correlation_id
    return response


def request_once(bootstrap: str, body: Any) -> Any:
    with connect(bootstrap) as sock:
        return roundtrip(sock, body)
