"""One client connection of the agent's Kafka protocol server: framing, dispatch, ordered
pipelining, muting and response writing.

Per connection there are two tasks:

- the *reader* reads frames (`int32 size` + payload) from the connection's `FrameReader`
  (`agent.network.frame_reader`: the socket receives into a 256 KiB read-ahead, or a large
  body straight into its own buffer); size prefixes and whole small requests are cut
  from the read-ahead without an await each; only the rest of a body that is not there
  yet is awaited (with its deadline). A negative size, or one above
  `max_request_bytes`, closes the connection at once without reading the body (so a
  bogus size costs no memory). Before reading a body it waits for room for it in the
  connection's byte budget and in the agent's (see `agent.network.limits`: requests
  being handled plus responses not yet sent, by bytes; while there is no room the
  connection is *muted*: nothing more is read from it). Once the size has arrived, the
  body must arrive within `request_read_timeout_ms`, else the connection is closed (a
  client that sends a size and then trickles or stops cannot hold a descriptor for
  ever). It then parses the 8-byte header prefix, looks the API up in the handler
  registry and either answers at once (unsupported version), closes the connection
  (unknown API key, malformed header or body: logged, and only this connection is
  affected), or reserves the response bytes a Fetch asks for (muting again while they
  do not fit) and starts the handler as a task, and queues one slot per request.
  Requests of the APIs that change state run alone on their connection, in order
  (`agent.network.limits.runs_alone`); the others run concurrently. Besides the
  bytes, at most `max_inflight_requests` requests per connection are read and not yet
  answered: the reader takes a permit before reading each request and the writer
  returns it once the response is written.
- the *writer* takes slots in request order, awaits each one and writes its response,
  so responses leave in request order however the handlers interleave. Acks=0 produce
  (a handler returning None) occupies a slot but writes nothing. A response stays
  charged to the connection until the socket's buffer has drained below its high-water
  mark.

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

A response estimated to be large (`agent.protocol.sliced_encode`: thousands of entities) is
converted and encoded in slices that give the loop a turn in between, so one big answer does
not hold up every other connection.

Idle connections (no request in flight) are closed after `connections_max_idle_ms`.

Client quotas (agent.quota_cache): a response that carries a quota's throttle time is sent at
once, and the reader then starts no request of the connection (and reads no further) until
that time has passed (KIP-219); while some request-time quota exists, handlers' time on the loop is measured.

On SASL listeners (`agent.listeners`) a request other than ApiVersions, SaslHandshake and
SaslAuthenticate before authentication closes the connection, and a failed
SaslAuthenticate is answered and then the connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Coroutine
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from skiff.agent import zones
from skiff.agent.handlers import (
    ConnectionInfo,
    HandlerSpec,
    Request,
    error_of,
    produce,
    produce_inline,
    refusal_response,
)
from skiff.agent.handlers.api_versions import unsupported_version_response
from skiff.agent.network.frame_reader import FrameReader
from skiff.agent.network.limits import (
    REQUEST_OVERHEAD_BYTES,
    ByteBudget,
    response_reserve_bytes,
    runs_alone,
)
from skiff.agent.network.read_deadline import ReadDeadline
from skiff.agent.network.response_slots import CLOSE as _CLOSE
from skiff.agent.network.response_slots import Outcome as _Outcome
from skiff.agent.network.response_slots import Slot as _Slot
from skiff.agent.network.sasl import FAILED_AUTH_CLOSE_DELAY_S, PRE_AUTH_KEYS, PRE_AUTH_MAX_REQUEST_BYTES
from skiff.agent.protocol import (
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
from skiff.agent.protocol.produce_request import decode_produce_request
from skiff.agent.protocol.produce_response import encode_produce_response
from skiff.agent.protocol.sliced_encode import SLICED_ENCODE_MIN_ENTITIES, encode_cost, encode_response_sliced
from skiff.agent.quota_cache import Timed

if TYPE_CHECKING:
    from skiff.agent.network.server import AgentServer

log = logging.getLogger(__name__)

PRODUCE_KEY = 0
FETCH_KEY = 1

_COALESCE_BYTES = 64 * 1024  # ready responses written in one call, up to about this much
_READ_BURST_REQUESTS = 32  # requests one reader dispatches before it yields to the loop
_NO_IDLE_TIMEOUT_S = 365 * 86_400.0  # still a deadline, so that stop_reading can end the wait


class Connection:
    """One accepted connection: its reader and writer (see the module docstring)."""

    def __init__(
        self,
        server: AgentServer,
        info: ConnectionInfo,
        frames: FrameReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.server = server
        self.ctx = server.context
        self.config = server.context.config
        self.info = info
        self.frames = frames
        self.writer = writer
        self.queue: asyncio.Queue[_Slot | None] = asyncio.Queue()
        self.permits = asyncio.Semaphore(self.config.max_inflight_requests)
        self.budget = ByteBudget(self.config.connection_max_inflight_bytes)
        self.slots: set[_Slot] = set()  # read and not yet released
        self.muted = False
        self.loop = asyncio.get_running_loop()
        self.last_activity = self.loop.time()
        self.tasks: set[asyncio.Task[_Outcome]] = set()
        self.barrier: asyncio.Task[_Outcome] | None = None  # the running exclusive request
        self.closing = False
        self.deadline = ReadDeadline(self.loop)  # the reader's read deadlines

    async def run(self) -> None:
        writer_task = asyncio.create_task(self._write_loop())
        unyielded = 0  # requests read since this reader last let the loop run others
        try:
            while not self.closing:
                await self.permits.acquire()
                read = await self._read_frame()
                if read is None:
                    self.permits.release()
                    break
                # A client quota's throttle (KIP-219): the request read meanwhile waits, and
                # nothing more is read, until it has passed.
                while (mute_s := self.ctx.quotas.mute_remaining_s(self.info.connection_id)) > 0:
                    await self._throttled(mute_s)
                # Start the request: parsed, then its handler started at once when nothing
                # must be waited for (no coroutine), else by `_start`.
                frame, charge = read
                try:
                    prepared = self._prepare(frame)
                    if isinstance(prepared, asyncio.Future):
                        started: tuple[asyncio.Future[_Outcome], int] = (prepared, 0)
                    else:
                        started = self._start_now(*prepared) or await self._start(*prepared, charge)
                except BaseException:  # cancelled while waiting: give the agent's bytes back
                    self.server.request_budget.give(len(frame))
                    raise
                slot = _Slot(self, started[0], len(frame), charge + started[1])
                self.slots.add(slot)
                self.queue.put_nowait(slot)
                if slot.future.done() and not slot.future.cancelled() and slot.future.result().close:
                    break
                # Reads of already-buffered bytes never suspend: without this, one connection's
                # 512 KiB of buffered small requests (~2,500) would be parsed in one go, holding
                # the loop for tens of ms (timers late, other connections and the commit thread
                # waiting; see docs/benchmarks.md).
                unyielded += 1
                if unyielded >= _READ_BURST_REQUESTS:
                    unyielded = 0
                    await asyncio.sleep(0)
            self.queue.put_nowait(None)
            await writer_task
        finally:
            if not writer_task.done():
                writer_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await writer_task
            for t in self.tasks:
                t.cancel()
            for slot in self.slots:  # give back the agent-wide bytes at once
                slot.settle()
            self.deadline.close()

    # --- reading ----------------------------------------------------------------------------

    def _room(self, n: int, request_bytes: int, own: int = 0) -> bool:
        """Whether `n` more bytes fit the connection's budget and `request_bytes` the agent's."""
        return self.budget.fits(n, own) and (
            not request_bytes or self.server.request_budget.fits(request_bytes)
        )

    async def _wait_room(self, n: int, request_bytes: int, own: int = 0) -> None:
        """Mute until `n` more bytes fit the connection's budget and `request_bytes` the agent's."""
        budget, agent = self.budget, self.server.request_budget

        def room() -> bool:
            return budget.fits(n, own) and (not request_bytes or agent.fits(request_bytes))

        if room():
            return
        self.muted = True
        try:
            while not room():
                await budget.wait_room(n, own)
                if request_bytes:
                    await agent.wait_room(request_bytes)
        finally:
            self.muted = False

    async def _throttled(self, delay_s: float) -> None:
        """Muted for a client quota's throttle time (agent.quota_cache)."""
        self.muted = True
        try:
            await asyncio.sleep(delay_s)
        finally:
            self.muted = False

    async def _read_frame(self) -> tuple[bytes | bytearray, int] | None:
        """The next request's bytes and the bytes charged for them, or None when the
        connection should end. The charge is taken from both budgets."""
        try:
            size = await self._read_size_prefix()
            if size is None:
                log.info("closing idle connection %s (%s)", self.info.connection_id, self.info.peer)
                return None
            if size < 0:
                self._protocol_error(f"negative request size {size}")
                return None
            if size > self.config.max_request_bytes:
                self._protocol_error(
                    f"request size {size} exceeds max_request_bytes {self.config.max_request_bytes}"
                )
                return None
            if (
                size > PRE_AUTH_MAX_REQUEST_BYTES
                and self.info.sasl is not None
                and not self.info.sasl.authenticated
            ):
                self._protocol_error(f"{size}-byte request before SASL authentication")
                return None
            if size < MIN_REQUEST_HEADER_BYTES:
                self._protocol_error(f"request size {size} is smaller than a request header")
                return None
            if not self._room(size + REQUEST_OVERHEAD_BYTES, size):
                await self._wait_room(size + REQUEST_OVERHEAD_BYTES, size)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            return None
        charge = size + REQUEST_OVERHEAD_BYTES
        self.budget.take(charge)
        self.server.request_budget.take(size)
        read = False
        try:
            frame = self.frames.read_body(size)
            if not isinstance(frame, (bytes, bytearray)):  # not all here yet: with its deadline
                frame = await self.deadline.within(frame, self.config.request_read_timeout_ms / 1000.0)
            read = True
            return frame, charge
        except TimeoutError:
            self.server.request_read_timeouts += 1
            log.info(
                "closing connection %s (%s): %d-byte request not received within %d ms",
                self.info.connection_id,
                self.info.peer,
                size,
                self.config.request_read_timeout_ms,
            )
        except asyncio.IncompleteReadError as e:
            if e.partial:
                log.info("connection %s (%s) closed mid-request", self.info.connection_id, self.info.peer)
        except (ConnectionError, OSError):
            pass
        finally:
            if not read:  # also when cancelled: the agent-wide bytes must come back
                self.budget.give(charge)
                self.server.request_budget.give(size)
        return None

    async def _read_size_prefix(self) -> int | None:
        """The next request's size, or None once the connection has been idle too long.

        Idle means: nothing read and nothing in flight for `connections_max_idle_ms`.
        """
        if self.closing:
            return None
        frames = self.frames
        size = frames.take_size()
        if size is not None:  # the common case under load: already read ahead
            return size
        idle_s = self.config.connections_max_idle_ms / 1000.0
        loop = self.loop
        while True:
            # Cancelling a wait loses nothing: bytes are taken only by take_size.
            try:
                await self.deadline.within(frames.wait_more(), idle_s or _NO_IDLE_TIMEOUT_S)
            except TimeoutError:
                if not idle_s:
                    raise
                if self.closing or not self.slots and loop.time() - self.last_activity >= idle_s:
                    return None
                continue
            size = frames.take_size()
            if size is not None:
                return size

    def _protocol_error(self, reason: str) -> None:
        self.server.protocol_errors += 1
        log.warning("closing connection %s (%s): %s", self.info.connection_id, self.info.peer, reason)
        return None

    # --- dispatch ---------------------------------------------------------------------------

    def _done(self, outcome: _Outcome) -> asyncio.Future[_Outcome]:
        fut: asyncio.Future[_Outcome] = self.loop.create_future()
        fut.set_result(outcome)
        return fut

    def _prepare(self, frame: bytes | bytearray) -> asyncio.Future[_Outcome] | tuple[HandlerSpec, Request]:
        """Parse the request: its handler and the request, or its outcome when it is answered
        (or the connection closed) without a handler."""
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
            # A body received in place (a bytearray) is read through a read-only view (what
            # kio's reader accepts): produce records are then slices of it, not copies.
            view = frame if isinstance(frame, bytes) else memoryview(frame).toreadonly()
            header, offset = parse_request_header(view)
            if spec.handler is produce.handle:  # the hot path: one walk, no kio entities
                body = decode_produce_request(view, offset, api_version)
            else:
                body = decode_request_body(header, view, offset)
        except MalformedRequest as e:
            self._protocol_error(f"malformed {spec.name} v{api_version} request (correlation id {corr}): {e}")
            return self._done(_CLOSE)
        self.info.zone.saw_client_id(header.client_id)  # the client's zone (agent.zones)
        if api_key == PRODUCE_KEY:
            self.server.zone_traffic.count(zones.IN, self.info.zone.zone, len(frame))
        return spec, Request(header, body, self.info, self.server.registry)

    def _start_now(self, spec: HandlerSpec, request: Request) -> tuple[asyncio.Future[_Outcome], int] | None:
        """`_start` when nothing must be waited for (the common case; no coroutine), else
        None with nothing done."""
        if response_reserve_bytes(spec.api_key, request.body) or self.info.sasl is not None:
            return None
        barrier = self.barrier
        if barrier is not None:
            if not barrier.done():
                return None
            self.barrier = None
        alone = runs_alone(spec.api_key, spec.exclusive)
        if alone and self.tasks:
            return None
        return self._launch(spec, request, alone), 0

    async def _start(
        self, spec: HandlerSpec, request: Request, charge: int
    ) -> tuple[asyncio.Future[_Outcome], int]:
        """Start the request's handler once it may start: (its outcome, bytes reserved)."""
        api_key = spec.api_key
        # The response bytes this request asks for, reserved before its handler starts (one
        # larger than the whole budget waits until it runs alone on the connection).
        reserve = min(response_reserve_bytes(api_key, request.body), self.budget.limit)
        if reserve:
            await self._wait_room(reserve, 0, own=charge)
            self.budget.take(reserve)

        if self.barrier is not None:  # an exclusive request is running: wait for it
            await asyncio.wait([self.barrier])
            self.barrier = None
        sasl = self.info.sasl
        if sasl is not None and not sasl.allows(api_key):
            self._protocol_error(
                f"{spec.name} request before SASL authentication (or after the session ended)"
            )
            return self._done(_CLOSE), reserve
        alone = runs_alone(spec.api_key, spec.exclusive)
        if alone and self.tasks:
            await asyncio.wait(list(self.tasks))
        if sasl is not None and (not sasl.authenticated or api_key in PRE_AUTH_KEYS):
            task = asyncio.create_task(self._run_sasl(spec, request))
            self._track(task, alone)
            return task, reserve
        return self._launch(spec, request, alone), reserve

    def _launch(self, spec: HandlerSpec, request: Request, alone: bool) -> asyncio.Future[_Outcome]:
        """Run the handler: a task (the barrier if `alone`), or produce's synchronous path."""
        if spec.handler is produce.handle:
            # The hot path: most produce requests are handled without a task (see there).
            inline = produce_inline.start_inline(self.ctx, request, _Outcome, _CLOSE)
            if inline is not None:
                self.server.produce_inline += 1
                return inline
            coro, ticket = produce.begin(self.ctx, request)  # the append order is taken now
            task = asyncio.create_task(self._run_handler(spec, request, coro))
            task.add_done_callback(lambda _: _end_ticket(ticket, coro))
        else:
            run = self._run_fetch if spec.api_key == FETCH_KEY else self._run_handler
            task = asyncio.create_task(run(spec, request))
        self._track(task, alone)
        return task

    async def _run_fetch(self, spec: HandlerSpec, request: Request) -> _Outcome:
        """A Fetch, and its response's bytes counted by the client's zone (known by now: the
        handler read its rack_id). Counted here, before the writer takes the frame."""
        outcome = await self._run_handler(spec, request)
        if outcome.frame is not None:
            self.server.zone_traffic.count(zones.OUT, self.info.zone.zone, len(outcome.frame))
        return outcome

    def _track(self, task: asyncio.Task[_Outcome], alone: bool) -> None:
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        if alone:
            self.barrier = task

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

    async def _run_sasl(self, spec: HandlerSpec, request: Request) -> _Outcome:
        """A request before SASL authentication (or a re-authentication): closed after its
        answer if the SASL exchange failed (agent.sasl)."""
        outcome = await self._run_handler(spec, request)
        if self.info.sasl.close_requested:
            if outcome.frame is None:
                return _CLOSE
            # Answered, then closed a little later (Kafka's connection.failed.authentication.
            # delay.ms): closing right behind the answer makes some clients see the close
            # before the error, and retry as if the network had failed.
            asyncio.get_running_loop().call_later(FAILED_AUTH_CLOSE_DELAY_S, self._close_now)
        return outcome

    def _close_now(self) -> None:
        self.closing = True
        self.writer.close()

    async def _run_handler(
        self, spec: HandlerSpec, request: Request, started: Awaitable[Any] | None = None
    ) -> _Outcome:
        """Run the handler (or await `started`, its coroutine already made) and encode its answer."""
        key, version, corr = request.api_key, request.api_version, request.correlation_id
        try:
            # The declared cluster gate first (agent.handlers._access): a refused request never
            # reaches its handler. (`started` is produce's, which has no gate.)
            refused = None if started is not None else refusal_response(self.ctx, spec, request)
            if refused is not None:
                result = refused
            else:
                work = spec.handler(self.ctx, request) if started is None else started
                if self.ctx.quotas.timing(key):  # a request-time quota exists (agent.quota_cache)
                    result = await self._timed(request, work)
                else:
                    result = await work
        except asyncio.CancelledError:
            raise
        except Exception as e:  # boundary: a handler's failure: error answer
            # a handler's failure answers its request with an error; the connection goes on
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
            if key == PRODUCE_KEY and result.__version__ == 9:  # the hot path: kio's bytes, faster
                return _Outcome(encode_produce_response(corr, version, result))
            wire = type(result)
            if result.__version__ != version:
                target = response_schema(key, version)
                assert target is not None
                wire = target
            if encode_cost(result) > SLICED_ENCODE_MIN_ENTITIES:
                # A large answer (DescribeConfigs or Metadata for thousands of topics): its
                # conversion and encoding give other connections a turn between slices.
                frame, yields = await encode_response_sliced(corr, result, wire)
                self.server.responses_encoded_sliced += 1
                self.server.encode_slice_yields += yields
                return _Outcome(frame)
            return _Outcome(encode_response(corr, convert(result, wire)))
        except Exception:  # boundary: a response that cannot be encoded closes this connection only
            log.exception("cannot encode the %s v%d response (correlation id %d)", spec.name, version, corr)
            return _CLOSE

    async def _timed(self, request: Request, work: Awaitable[Any]) -> Any:
        """The handler's answer, its time on the loop recorded against the client's quota."""
        timed = Timed(work)
        result = await timed
        return self.ctx.quotas.after_request(request, timed.ns, result)

    # --- writing ----------------------------------------------------------------------------

    def _release(self, slot: _Slot) -> None:
        self.last_activity = self.loop.time()
        slot.release()
        self.slots.discard(slot)
        self.permits.release()

    async def _write_loop(self) -> None:
        broken = False
        ahead: list[_Slot | None] = []  # taken off the queue to look at, not handled yet
        frames: list[bytes | bytearray] = []
        frames_bytes = 0
        written: list[_Slot] = []  # slots whose frames are in `frames`
        while True:
            slot = ahead.pop() if ahead else await self.queue.get()
            if slot is None:
                return
            if broken:
                slot.future.cancel()
                self._release(slot)
                continue
            try:
                outcome = await slot.future
            except asyncio.CancelledError:
                if asyncio.current_task().cancelling():  # type: ignore[union-attr]
                    raise
                outcome = _CLOSE
            slot.settle()
            close = outcome.close
            if outcome.frame is not None:
                frames.append(outcome.frame)
                frames_bytes += len(outcome.frame)
                outcome.frame = None
            written.append(slot)
            del outcome
            # Responses that are already done go out together, in one write (one send call
            # instead of one per response: a commit answers thousands of produce requests).
            if not close and frames_bytes < _COALESCE_BYTES and not self.queue.empty():
                ahead.append(self.queue.get_nowait())
                if ahead[0] is not None and ahead[0].future.done():
                    continue
            try:
                if frames:
                    # The transport holds what the socket did not take; drop our references
                    # while the client drains it (the slots stay charged until then).
                    self.writer.writelines(frames)
                    frames.clear()
                    await self.writer.drain()
            except (ConnectionError, OSError) as e:
                log.info(
                    "connection %s (%s) lost while writing: %s", self.info.connection_id, self.info.peer, e
                )
                close = True
            frames.clear()
            frames_bytes = 0
            for done in written:
                self._release(done)
            written.clear()
            if close:
                # Stop the reader (it sees EOF) and cancel what is left; keep draining the
                # queue (and returning permits) so that a waiting reader can finish.
                broken = True
                self.closing = True
                self.writer.close()
                for t in list(self.tasks):
                    t.cancel()


def _end_ticket(ticket: produce.Ticket, coro: Coroutine[Any, Any, Any]) -> None:
    """A produce task is done: its ticket released and its coroutine closed, also when the
    task was cancelled before it ran (the coroutine would otherwise never be awaited)."""
    ticket.release()
    coro.close()
