"""The agent's Kafka protocol server: asyncio TCP, framing, dispatch, ordered pipelining.

Per connection there are two tasks:

- the *reader* reads frames (`int32 size` + payload). A negative size, or one above
  `max_request_bytes`, closes the connection at once without reading the body (so a
  bogus size costs no memory). It then parses the 8-byte header prefix, looks the API
  up in the handler registry and either answers at once (unsupported version), closes
  the connection (unknown API key, malformed header or body: logged, and only this
  connection is affected), or starts the handler as a task, and queues one slot per
  request. At most `max_inflight_requests` (64 by default) requests per connection are
  read and not yet answered: the reader takes a permit before reading each request and
  the writer returns it once the response is written, so a client that pipelines
  faster than it is served is pushed back through TCP. Request bytes held per connection
  are bounded the same way: a request whose body would take the connection's unanswered
  bytes above `max_request_bytes` waits (before its body is read) until earlier ones
  are answered, so one connection holds at most about one maximum-size request.
- the *writer* takes slots in request order, awaits each one and writes its response,
  so responses leave in request order however the handlers interleave. Acks=0 produce
  (a handler returning None) occupies a slot but writes nothing.

When a request requires closing the connection, the responses of the requests before
it are still written, then the transport is closed. When the client closes its side,
requests already read are answered first. If writing fails (the client is gone), the
remaining handlers are cancelled.

Unsupported versions: ApiVersions is answered in v0 format with UNSUPPORTED_VERSION
(KIP-511). Other APIs get their response schema at the requested version with the
top-level error code set to UNSUPPORTED_VERSION when kio knows that version and the
response has a top-level error code; otherwise the connection is closed (which is what
Kafka does for every unsupported non-ApiVersions request; clients that negotiate with
ApiVersions never send one).

Idle connections (no request in flight) are closed after `connections_max_idle_ms`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
from collections import Counter
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from agent.context import AgentContext
from agent.handlers import ConnectionInfo, HandlerRegistry, HandlerSpec, Request, default_registry, error_of
from agent.handlers.api_versions import unsupported_version_response
from agent.protocol import (
    API_VERSIONS_KEY,
    MIN_REQUEST_HEADER_BYTES,
    MalformedRequest,
    api_name,
    convert,
    decode_request_body,
    encode_response,
    error_response,
    parse_request_header,
    peek_header_prefix,
    response_schema,
)

log = logging.getLogger(__name__)

_STREAM_LIMIT = 256 * 1024  # StreamReader pauses the socket beyond twice this


@dataclass(frozen=True, slots=True)
class _Outcome:
    frame: bytes | bytearray | None  # the response to write, or None
    close: bool = False  # close the connection after this slot


_CLOSE = _Outcome(None, close=True)
_Slot = asyncio.Future[_Outcome]


class AgentServer:
    """A running Kafka listener. Create with `start_agent_server`."""

    def __init__(self, context: AgentContext, registry: HandlerRegistry, host: str, port: int) -> None:
        self.context = context
        self.registry = registry
        self._host = host
        self._requested_port = port
        self._server: asyncio.Server | None = None
        self._connections: dict[int, asyncio.Task[Any]] = {}
        self._ids = itertools.count(1)
        self._closing = False
        # counters for metrics and tests
        self.requests: Counter[str] = Counter()
        self.protocol_errors = 0
        self.connections_total = 0

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._on_connection, self._host, self._requested_port, limit=_STREAM_LIMIT, reuse_address=True
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
    def host(self) -> str:
        return self._host

    @property
    def connection_count(self) -> int:
        return len(self._connections)

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
        conn_id = next(self._ids)
        task = asyncio.current_task()
        assert task is not None
        self._connections[conn_id] = task
        self.connections_total += 1
        peer = writer.get_extra_info("peername")
        info = ConnectionInfo(conn_id, f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer))
        try:
            await _Connection(self, info, reader, writer).run()
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection %s (%s) failed", conn_id, info.peer)
        finally:
            self._connections.pop(conn_id, None)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), timeout=1)


class _Connection:
    def __init__(
        self,
        server: AgentServer,
        info: ConnectionInfo,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.server = server
        self.ctx = server.context
        self.config = server.context.config
        self.info = info
        self.reader = reader
        self.writer = writer
        self.queue: asyncio.Queue[tuple[_Slot, int] | None] = asyncio.Queue()
        self.permits = asyncio.Semaphore(self.config.max_inflight_requests)
        self.inflight = 0  # requests read and not yet answered
        self.inflight_bytes = 0  # their sizes
        self.bytes_freed = asyncio.Event()
        self.last_activity = asyncio.get_running_loop().time()
        self.tasks: set[asyncio.Task[_Outcome]] = set()
        self.barrier: asyncio.Task[_Outcome] | None = None  # the running exclusive request
        self.closing = False

    async def run(self) -> None:
        writer_task = asyncio.create_task(self._write_loop())
        try:
            while not self.closing:
                await self.permits.acquire()
                frame = await self._read_frame()
                if frame is None:
                    break
                self.inflight += 1
                self.inflight_bytes += len(frame)
                slot = await self._dispatch(frame)
                self.queue.put_nowait((slot, len(frame)))
                if slot.done() and not slot.cancelled() and slot.result().close:
                    break
            self.queue.put_nowait(None)
            await writer_task
        finally:
            if not writer_task.done():
                writer_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await writer_task
            for t in self.tasks:
                t.cancel()

    # --- reading ----------------------------------------------------------------------------

    async def _read_frame(self) -> bytes | None:
        """The next request's bytes, or None when the connection should end."""
        try:
            head = await self._read_size_prefix()
            if head is None:
                log.info("closing idle connection %s (%s)", self.info.connection_id, self.info.peer)
                return None
            size = int.from_bytes(head, "big", signed=True)
            if size < 0:
                self._protocol_error(f"negative request size {size}")
                return None
            if size > self.config.max_request_bytes:
                self._protocol_error(
                    f"request size {size} exceeds max_request_bytes {self.config.max_request_bytes}"
                )
                return None
            if size < MIN_REQUEST_HEADER_BYTES:
                self._protocol_error(f"request size {size} is smaller than a request header")
                return None
            while self.inflight_bytes and self.inflight_bytes + size > self.config.max_request_bytes:
                self.bytes_freed.clear()
                await self.bytes_freed.wait()
            return await self.reader.readexactly(size)
        except asyncio.IncompleteReadError as e:
            if e.partial:
                log.info("connection %s (%s) closed mid-request", self.info.connection_id, self.info.peer)
            return None
        except (ConnectionError, OSError):
            return None

    async def _read_size_prefix(self) -> bytes | None:
        """The next 4 bytes, or None once the connection has been idle too long.

        Idle means: nothing read and nothing in flight for `connections_max_idle_ms`.
        """
        idle_s = self.config.connections_max_idle_ms / 1000.0
        if not idle_s:
            return await self.reader.readexactly(4)
        loop = asyncio.get_running_loop()
        read = asyncio.ensure_future(self.reader.readexactly(4))
        try:
            while True:
                done, _ = await asyncio.wait({read}, timeout=idle_s)
                if done:
                    return read.result()
                if self.inflight == 0 and loop.time() - self.last_activity >= idle_s:
                    return None
        finally:
            if not read.done():
                read.cancel()
                with contextlib.suppress(
                    asyncio.CancelledError, asyncio.IncompleteReadError, ConnectionError
                ):
                    await read

    def _protocol_error(self, reason: str) -> None:
        self.server.protocol_errors += 1
        log.warning("closing connection %s (%s): %s", self.info.connection_id, self.info.peer, reason)
        return None

    # --- dispatch ---------------------------------------------------------------------------

    def _done(self, outcome: _Outcome) -> _Slot:
        fut: _Slot = asyncio.get_running_loop().create_future()
        fut.set_result(outcome)
        return fut

    async def _dispatch(self, frame: bytes) -> _Slot:
        try:
            api_key, api_version, corr = peek_header_prefix(frame)
        except MalformedRequest as e:
            self._protocol_error(str(e))
            return self._done(_CLOSE)
        spec = self.server.registry.get(api_key)
        if spec is None:
            self._protocol_error(f"unknown or unsupported api key {api_key} ({api_name(api_key) or '?'})")
            return self._done(_CLOSE)
        self.server.requests[spec.name] += 1
        if not spec.supports(api_version):
            return self._done(self._unsupported_version(spec, api_version, corr))
        try:
            header, offset = parse_request_header(frame)
            body = decode_request_body(header, frame, offset)
        except MalformedRequest as e:
            self._protocol_error(f"malformed {spec.name} v{api_version} request (correlation id {corr}): {e}")
            return self._done(_CLOSE)
        request = Request(header, body, self.info, self.server.registry)

        if self.barrier is not None:  # an exclusive request is running: wait for it
            await asyncio.wait([self.barrier])
            self.barrier = None
        if spec.exclusive and self.tasks:
            await asyncio.wait(list(self.tasks))
        task = asyncio.create_task(self._run_handler(spec, request))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        if spec.exclusive:
            self.barrier = task
        return task

    def _unsupported_version(self, spec: HandlerSpec, version: int, corr: int) -> _Outcome:
        if spec.api_key == API_VERSIONS_KEY:
            v0 = unsupported_version_response(self.server.registry)
            return _Outcome(encode_response(corr, v0, header_version=0))
        resp = error_response(spec.api_key, version, ErrorCode.unsupported_version)
        if resp is None:
            self._protocol_error(
                f"unsupported {spec.name} version {version} (supported {spec.min_version}-{spec.max_version})"
            )
            return _CLOSE
        log.info("unsupported %s version %d from %s", spec.name, version, self.info.peer)
        return _Outcome(encode_response(corr, resp))

    async def _run_handler(self, spec: HandlerSpec, request: Request) -> _Outcome:
        key, version, corr = request.api_key, request.api_version, request.correlation_id
        try:
            result = await spec.handler(self.ctx, request)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            code, message = error_of(e)
            if code == ErrorCode.unknown_server_error:
                log.exception("%s v%d handler failed (correlation id %d)", spec.name, version, corr)
            else:
                log.warning("%s v%d failed (correlation id %d): %s", spec.name, version, corr, message)
            resp = error_response(key, version, code)
            if resp is None:
                return _CLOSE
            return _Outcome(encode_response(corr, resp))
        if result is None:
            return _Outcome(None)
        try:
            if getattr(result, "__api_key__", None) != key:
                raise TypeError(f"handler returned {type(result).__name__}, not a {spec.name} response")
            if result.__version__ != version:
                target = response_schema(key, version)
                assert target is not None
                result = convert(result, target)
            return _Outcome(encode_response(corr, result))
        except Exception:
            log.exception("cannot encode the %s v%d response (correlation id %d)", spec.name, version, corr)
            return _CLOSE

    # --- writing ----------------------------------------------------------------------------

    def _release(self, size: int) -> None:
        self.last_activity = asyncio.get_running_loop().time()
        self.inflight -= 1
        self.inflight_bytes -= size
        self.permits.release()
        self.bytes_freed.set()

    async def _write_loop(self) -> None:
        broken = False
        while True:
            item = await self.queue.get()
            if item is None:
                return
            slot, size = item
            if broken:
                slot.cancel()
                self._release(size)
                continue
            try:
                outcome = await slot
            except asyncio.CancelledError:
                if asyncio.current_task().cancelling():  # type: ignore[union-attr]
                    raise
                outcome = _CLOSE
            try:
                if outcome.frame is not None:
                    self.writer.write(outcome.frame)
                    await self.writer.drain()
            except (ConnectionError, OSError) as e:
                log.info(
                    "connection %s (%s) lost while writing: %s", self.info.connection_id, self.info.peer, e
                )
                outcome = _CLOSE
            self._release(size)
            if outcome.close:
                # Stop the reader (it sees EOF) and cancel what is left; keep draining the
                # queue (and returning permits) so that a waiting reader can finish.
                broken = True
                self.closing = True
                self.writer.close()
                for t in list(self.tasks):
                    t.cancel()


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
