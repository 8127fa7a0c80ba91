"""Receiving one connection's request bytes with one copy: the kernel's.

asyncio's StreamReader copied every request three times (from the socket into its buffer,
out of it by `readexactly`, and the join of what had been read ahead with the rest).
`FrameProtocol` is a `BufferedProtocol`: the transport receives (`recv_into`) straight into
memory that `FrameReader.get_buffer` hands out, so a request body arrives where it will be
parsed from.

Algorithm. The reader has two places to receive into:

- the *read-ahead*: one fixed `ahead_bytes` buffer (256 KiB) holding bytes received and not
  yet taken, between `_start` and `_end`. Size prefixes and whole small requests are taken
  from it without an await (`take_size`, `take`: a copy of just those bytes, made while it
  is still in the cache). When its free tail is short, the unread bytes are moved to its
  front (at most one partial request: cheap). When it is full of unread bytes, the
  transport is paused (`pause_reading`: TCP then pushes back on the client), and resumed
  as soon as the consumer takes some: a muted connection (one whose reader waits for room
  in a byte budget, `agent.network.connection`) thus holds at most `ahead_bytes` here.
- a *frame buffer*: `read_body(n)` for a body the read-ahead does not hold whole and which
  is at least `direct_min_bytes` (128 KiB) allocates the body's own `bytearray(n)`, copies the
  part already read ahead into it, and points `get_buffer` at the rest of it until it is
  full; the body is received in place and handed to the parser as it is (no copy). Only
  the consumer decides to read a body (after its size has been checked against every
  bound), so no memory is ever taken for a request that was not admitted. A smaller
  missing body is awaited in the read-ahead (it fits there by construction), which keeps
  pipelined small requests at one receive for many of them.

End of stream (`feed_eof`) and a lost connection wake a waiting consumer with
`asyncio.IncompleteReadError` (the bytes of the partial request) or the connection's error,
as `StreamReader.readexactly` did. A consumer cancelled while waiting (a read deadline)
loses nothing: bytes are taken only when a call returns; a cancelled `read_body` leaves
its frame buffer, and the bytes already in it are dropped with the connection.

TLS: asyncio 3.11's SSL transport also feeds a BufferedProtocol through
`get_buffer`/`buffer_updated` (it decrypts into the buffer handed out), so TLS listeners
use the same path (tests/component/test_frame_reader.py runs both).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Awaitable, Callable
from typing import Any

# asyncio's StreamReader received up to 256 KiB per call: so does the read-ahead. Smaller
# receives cost more system calls and, over loopback, more window-update ACKs sent from
# the agent's recv (measured with 64 KiB and 8 KiB below: 2.8x the recv calls of
# StreamReader and 17x the epoll_ctl calls at keyed 1 KiB records, docs/benchmarks.md).
AHEAD_BYTES = 256 * 1024
# A body of this size or more that the read-ahead does not hold whole is received straight
# into its own buffer; smaller ones wait in the read-ahead (a copy out, but many of them
# arrive in one receive).
DIRECT_MIN_BYTES = 128 * 1024
_MIN_FREE_BYTES = 4 * 1024  # compact the read-ahead when its free tail is shorter
# Bodies taken from the read-ahead as a bytearray from this size: a view of a keyed request
# of ~100 tiny batches costs more than copying them (keyed 100-byte records: ~4 KB requests)
_BYTEARRAY_MIN_BYTES = 32 * 1024
_I32 = struct.Struct(">i")
# Read-aheads of connections gone idle, for the next connection that receives (no malloc,
# no zeroing of 256 KiB per request of a client that sends one request at a time); bounded.
_POOL_BUFFERS = 32
_POOL: list[tuple[bytearray, memoryview]] = []
_EMPTY = bytearray()
_NO_BUFFER = (_EMPTY, memoryview(_EMPTY))


def _take_pooled(size: int) -> tuple[bytearray, memoryview]:
    if _POOL and len(_POOL[-1][0]) == size:
        with contextlib.suppress(IndexError):  # another thread's loop took it meanwhile
            return _POOL.pop()
    buf = bytearray(size)
    return buf, memoryview(buf)


class FrameReader:
    """A connection's received bytes: the transport's side (`get_buffer`, `buffer_updated`,
    `feed_eof`) and the consumer's (`take_size`, `take`, `wait_more`, `read_body`)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        pause: Callable[[], None],
        resume: Callable[[], None],
        ahead_bytes: int = AHEAD_BYTES,
        direct_min_bytes: int = DIRECT_MIN_BYTES,
    ) -> None:
        if direct_min_bytes > ahead_bytes // 2:
            raise ValueError("direct_min_bytes must be at most half of ahead_bytes")
        self._loop = loop
        self._pause = pause
        self._resume = resume
        self._ahead_bytes = ahead_bytes
        # No read-ahead while nothing is unread (`_release`): an idle connection holds none.
        self._buf, self._view = _NO_BUFFER
        self._start = 0  # first unread byte of the read-ahead
        self._end = 0  # end of the received bytes
        self._direct_min_bytes = direct_min_bytes
        self._frame: bytearray | None = None  # the body being received in place
        self._frame_pos = 0
        self._waiter: asyncio.Future[None] | None = None
        self._eof = False
        self._exc: BaseException | None = None
        self._paused = False
        self.receives = 0  # buffer_updated calls (tests, benches)

    # --- the transport's side -----------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        frame = self._frame
        if frame is not None:
            return memoryview(frame)[self._frame_pos :]
        if not self._buf:
            self._buf, self._view = _take_pooled(self._ahead_bytes)
        if len(self._buf) - self._end < _MIN_FREE_BYTES:
            self._compact()
            if self._end == len(self._buf):
                self._grow()
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        self.receives += 1
        frame = self._frame
        if frame is not None:
            self._frame_pos += nbytes
            if self._frame_pos == len(frame):
                self._frame = None  # whole: what arrives next goes to the read-ahead
                self._wake()
            return
        self._end += nbytes
        if self._end - self._start == len(self._buf) and not self._paused:
            self._paused = True  # full of unread bytes: TCP pushes back until some are taken
            self._pause()
        self._wake()

    def feed_eof(self, exc: BaseException | None = None) -> None:
        """The stream ended (`exc`: the connection was lost with that error)."""
        self._eof = True
        if exc is not None and self._exc is None:
            self._exc = exc
        self._wake()

    # --- the consumer's side ------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Bytes read ahead and not yet taken."""
        return self._end - self._start

    @property
    def read_ahead_bytes(self) -> int:
        """The read-ahead's size: 0 while the connection waits with nothing unread."""
        return len(self._buf)

    def take_size(self) -> int | None:
        """The next int32 (a size prefix) if it has been read ahead, else None."""
        start = self._start
        if self._end - start < 4:
            return None
        self._start = start + 4
        size: int = _I32.unpack_from(self._buf, start)[0]
        self._consumed()
        return size

    def take(self, n: int) -> bytes | bytearray | None:
        """The next `n` bytes if they have been read ahead (no await), else None: bytes, or
        from `_BYTEARRAY_MIN_BYTES` a bytearray, which the connection parses through a view
        so that produce records are slices of it rather than copies."""
        start = self._start
        end = start + n
        if end > self._end:
            return None
        self._start = end
        data = (
            self._view[start:end].tobytes() if n < _BYTEARRAY_MIN_BYTES else bytearray(self._view[start:end])
        )
        self._consumed()
        return data

    async def wait_more(self) -> None:
        """Until more bytes have been read ahead; IncompleteReadError at end of stream."""
        have = self._end - self._start
        if not have:
            self._release()  # the connection waits for its next request: hold no buffer meanwhile
        while self._end - self._start == have:
            if self._eof:
                self._raise_ended(self._view[self._start : self._end].tobytes())
            await self._wait()

    def read_body(self, n: int) -> bytes | bytearray | Awaitable[bytes | bytearray]:
        """The next `n` bytes: at once (bytes) when read ahead, else an awaitable of them
        (bytes, or the bytearray they were received into). IncompleteReadError if the
        stream ends first."""
        data = self.take(n)
        if data is not None:
            return data
        if n < self._direct_min_bytes:
            return self._read_ahead_body(n)
        return self._read_in_place(n)

    async def _read_ahead_body(self, n: int) -> bytes | bytearray:
        if self._start + n > len(self._buf):
            self._compact()
        while (data := self.take(n)) is None:
            if self._eof:
                self._raise_ended(self._view[self._start : self._end].tobytes())
            await self._wait()
        return data

    async def _read_in_place(self, n: int) -> bytearray:
        frame = bytearray(n)
        have = self._end - self._start
        frame[:have] = self._view[self._start : self._end]
        self._start = self._end = 0
        self._frame, self._frame_pos = frame, have
        self._consumed()
        try:
            while self._frame is frame:  # buffer_updated lets go of it once it is whole
                if self._eof:
                    self._raise_ended(bytes(frame[: self._frame_pos]))
                await self._wait()
        finally:
            self._frame = None
        return frame

    # --- internals ----------------------------------------------------------------------

    def _raise_ended(self, partial: bytes) -> None:
        """The stream has ended: the connection's error, or IncompleteReadError with the
        bytes of the partial request (copied only now: a wait checks the flag alone)."""
        if self._exc is not None:
            raise self._exc
        raise asyncio.IncompleteReadError(partial, None)

    async def _wait(self) -> None:
        waiter = self._loop.create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _compact(self) -> None:
        """Move the unread bytes to the front of the read-ahead."""
        start, end = self._start, self._end
        if start:
            self._view[: end - start] = self._view[start:end]
            self._start, self._end = 0, end - start

    def _grow(self) -> None:
        """Full, and still asked for room: bytes the transport had already taken before the
        pause reached it (TLS during its upgrade: see FrameProtocol). Never an empty buffer:
        a TLS transport would read it as the end of the stream."""
        grown = bytearray(2 * len(self._buf))
        grown[: self._end] = self._view[: self._end]
        self._buf, self._view = grown, memoryview(grown)

    def _release(self) -> None:
        buf, view = self._buf, self._view
        if buf:
            self._buf, self._view = _NO_BUFFER
            self._start = self._end = 0
            if len(buf) == self._ahead_bytes and len(_POOL) < _POOL_BUFFERS:
                _POOL.append((buf, view))

    def _consumed(self) -> None:
        if self._start == self._end:
            self._start = self._end = 0  # empty: receive from the front again, no move
        # Resumed only once half of the read-ahead is free: resuming at the first byte taken
        # would have the next receive take a few hundred bytes, then pause again.
        if self._paused and 2 * (self._end - self._start) <= len(self._buf):
            self._paused = False
            self._resume()


class FrameProtocol(asyncio.StreamReaderProtocol, asyncio.BufferedProtocol):
    """A StreamReaderProtocol (the StreamWriter, drain, TLS upgrade and close are asyncio's)
    whose received bytes go to a `FrameReader` (`frames`) instead of a StreamReader."""

    def __init__(
        self,
        client_connected_cb: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        super().__init__(asyncio.StreamReader(loop=loop), client_connected_cb, loop=loop)
        self.frames = FrameReader(loop, self._pause_reading, self._resume_reading)
        self._pause_wanted = False
        self._paused_transport: asyncio.Transport | None = None

    def _current_transport(self) -> asyncio.Transport | None:
        # StreamReaderProtocol keeps the connection's transport in `_transport`, and swaps it
        # for the TLS one when StreamWriter.start_tls upgrades the connection.
        transport: asyncio.Transport | None = getattr(self, "_transport", None)
        return transport

    def _pause_reading(self) -> None:
        self._pause_wanted = True
        transport = self._current_transport()
        # Fed by another protocol (TLS between its handshake and start_tls's return, when
        # `_transport` is still the socket's): pausing the socket under the TLS layer would
        # stall it; the pause waits for the TLS transport (`_replace_writer`).
        if transport is not None and transport.get_protocol() is self:
            transport.pause_reading()
            self._paused_transport = transport

    def _resume_reading(self) -> None:
        self._pause_wanted = False
        transport, self._paused_transport = self._paused_transport, None
        if transport is not None and not transport.is_closing():
            transport.resume_reading()

    def _replace_writer(self, writer: asyncio.StreamWriter) -> None:
        super()._replace_writer(writer)  # type: ignore[misc]
        if self._pause_wanted and self._paused_transport is None:
            self._pause_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.frames.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.frames.buffer_updated(nbytes)

    def eof_received(self) -> bool:
        self.frames.feed_eof()
        return bool(super().eof_received())

    def connection_lost(self, exc: Exception | None) -> None:
        self.frames.feed_eof(exc)
        super().connection_lost(exc)
