"""The agent's Kafka protocol server: the asyncio listener, accepting and closing connections.

Accepting: a connection over `max_connections` in total or `max_connections_per_ip` from
its client address is closed at once and counted (`agent.network.limits`). Accepted
sockets get Kafka's buffer sizes (`socket_receive_buffer_bytes`, `socket_send_buffer_bytes`,
100 KiB): requests an overloaded agent has not read yet then wait in the client (where
librdkafka merges them into bigger batches) rather than in megabytes of kernel buffers.

Each accepted connection is served by `agent.connection.Connection` (framing, dispatch,
ordered pipelining, muting, response writing: see there), which reads its requests from the
connection's `agent.network.frame_reader.FrameProtocol` (received in place, one copy).

Listeners (`agent.listeners`): a server is one listener. On TLS listeners the handshake
is done first (`agent.network.tls`); SASL is the connection's (`agent.connection`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
from collections import Counter
from typing import Any

from skiff.agent.context import AgentContext
from skiff.agent.handlers import ConnectionInfo, HandlerRegistry, default_registry
from skiff.agent.network.connection import Connection
from skiff.agent.network.frame_reader import FrameProtocol
from skiff.agent.network.limits import ByteBudget, ConnectionLimiter
from skiff.agent.network.tls import ListenerSecurity
from skiff.agent.zones import ZoneTraffic

log = logging.getLogger(__name__)


class AgentServer:
    """A running Kafka listener. Create with `start_agent_server`."""

    def __init__(
        self,
        context: AgentContext,
        registry: HandlerRegistry,
        host: str | None,
        port: int,
        security: ListenerSecurity | None = None,
    ) -> None:
        self.context = context
        self.security = security  # None: PLAINTEXT, as before listeners
        self.registry = registry
        self._host = host
        self._requested_port = port
        self._server: asyncio.Server | None = None
        self._connections: dict[int, asyncio.Task[Any]] = {}
        self._open: dict[int, Connection] = {}
        self._ids = itertools.count(1)
        self._closing = False
        cfg = context.config
        self.limiter = ConnectionLimiter(cfg.resolved_max_connections(), cfg.max_connections_per_ip)
        self.request_budget = ByteBudget(cfg.queued_max_request_bytes)
        # counters for metrics and tests
        self.requests: Counter[str] = Counter()
        self.protocol_errors = 0
        self.connections_total = 0
        self.request_read_timeouts = 0
        self.produce_inline = 0  # produce requests handled without a task
        self.responses_encoded_sliced = 0  # large responses encoded in slices (agent.protocol.sliced_encode)
        self.encode_slice_yields = 0  # turns those encodings gave the event loop
        # produce and fetch bytes by the clients' zone against this agent's (agent.zones)
        self.zone_traffic = ZoneTraffic(cfg.zone)

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: FrameProtocol(self._on_connection, loop),
            self._host,
            self._requested_port,
            reuse_address=True,
        )

    @property
    def sockets(self) -> list[socket.socket]:
        return list(self._server.sockets) if self._server is not None else []

    @property
    def port(self) -> int:
        socks = self.sockets
        if not socks:
            raise RuntimeError("server is not listening")
        return int(socks[0].getsockname()[1])

    @property
    def host(self) -> str | None:
        return self._host

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    @property
    def connections_refused(self) -> Counter[str]:
        """Connections closed at accept, by the cap they hit."""
        return self.limiter.refused

    @property
    def muted_connections(self) -> int:
        """Connections whose reader waits for room in a byte budget."""
        return sum(1 for c in list(self._open.values()) if c.muted)

    @property
    def connection_held_bytes(self) -> int:
        """Bytes charged to all connections' budgets (requests in hand, unsent responses)."""
        return sum(c.budget.used for c in list(self._open.values()))

    def stop_reading(self) -> list[asyncio.Task[Any]]:
        """Graceful shutdown: accept no connection and read no further request; each
        connection then writes the answers to what it had read and closes. Returns the
        connections' tasks (done when they are)."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        for conn in list(self._open.values()):
            conn.closing = True
            conn.deadline.expire_now()
        return list(self._connections.values())

    async def close(self) -> None:
        """Stop listening and drop every connection (their in-flight handlers are cancelled)."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        tasks = list(self._connections.values())
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), timeout=5)

    async def __aenter__(self) -> AgentServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- one connection -------------------------------------------------------------------

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._closing:
            writer.close()
            return
        peer = writer.get_extra_info("peername")
        ip = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        if not self.limiter.admit(ip):
            writer.transport.abort()  # no lingering: the descriptor is what the cap protects
            return
        self._size_socket_buffers(writer)
        conn_id = next(self._ids)
        task = asyncio.current_task()
        assert task is not None
        self._connections[conn_id] = task
        self.connections_total += 1
        info = ConnectionInfo(conn_id, f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer))
        protocol = writer.transport.get_protocol()
        assert isinstance(protocol, FrameProtocol)
        conn = Connection(self, info, protocol.frames, writer)
        self._open[conn_id] = conn
        try:
            if self.security is None or await self.security.secure(writer, info):
                await conn.run()
        except asyncio.CancelledError:
            pass
        except Exception:  # boundary: a connection's top level: its failure is logged, the server goes on
            log.exception("connection %s (%s) failed", conn_id, info.peer)
        finally:
            self._connections.pop(conn_id, None)
            self._open.pop(conn_id, None)
            self.limiter.release(ip)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), timeout=1)

    def _size_socket_buffers(self, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        cfg = self.context.config
        if sock is None:
            return
        for option, size in (
            (socket.SO_RCVBUF, cfg.socket_receive_buffer_bytes),
            (socket.SO_SNDBUF, cfg.socket_send_buffer_bytes),
        ):
            if size > 0:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, option, size)


async def start_agent_server(
    context: AgentContext,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    registry: HandlerRegistry | None = None,
    advertise: bool = True,
) -> AgentServer:
    """Start listening; the returned server has `.port` and `async close()`.

    With `advertise` (the default), the live-agent view is told the bound port when the
    configuration did not fix one (port 0 in tests), so Metadata responses point clients
    at this listener.
    """
    server = AgentServer(context, registry or default_registry(), host, port)
    await server.start()
    if advertise:
        cfg = context.config
        me = context.agents.self_info
        adv_host = cfg.advertised_host or (me.host if host in ("0.0.0.0", "::", "") else host)
        context.agents.set_self_address(adv_host, cfg.resolved_advertised_port(server.port))
    return server
