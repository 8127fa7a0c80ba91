"""The connection's frame reader (agent.network.frame_reader) driven as a transport drives a
BufferedProtocol: bytes copied into what `get_buffer` hands out, then `buffer_updated`.
Real sockets, plain and TLS, are in tests/component/test_frame_reader.py."""

from __future__ import annotations

import asyncio
import struct

import pytest
from skiff.agent.network.frame_reader import FrameReader


class Transport:
    """What the reader asks of its transport: pausing and resuming reads."""

    def __init__(self) -> None:
        self.paused = False
        self.pauses = 0
        self.resumes = 0

    def pause(self) -> None:
        assert not self.paused
        self.paused = True
        self.pauses += 1

    def resume(self) -> None:
        assert self.paused
        self.paused = False
        self.resumes += 1


def _reader(
    transport: Transport, ahead_bytes: int = 64 * 1024, direct_min_bytes: int = 8 * 1024
) -> FrameReader:
    return FrameReader(
        asyncio.get_running_loop(), transport.pause, transport.resume, ahead_bytes, direct_min_bytes
    )


def deliver(reader: FrameReader, data: bytes, transport: Transport | None = None) -> int:
    """Receive `data` as a socket would (as much as each buffer takes); the bytes taken
    (fewer than given when the reader paused the transport)."""
    done = 0
    while done < len(data):
        if transport is not None and transport.paused:
            break
        buf = reader.get_buffer(-1)
        assert len(buf), "get_buffer handed out an empty buffer"
        n = min(len(buf), len(data) - done)
        buf[:n] = data[done : done + n]
        reader.buffer_updated(n)
        done += n
    return done


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def read_frame(reader: FrameReader) -> bytes:
    """One frame as the connection reads it: size prefix, then the body."""
    while (size := reader.take_size()) is None:
        await reader.wait_more()
    body = reader.read_body(size)
    if not isinstance(body, (bytes, bytearray)):
        body = await body
    return bytes(body)


def _payloads() -> list[bytes]:
    # small (from the read-ahead), just under and over the in-place threshold, and large
    sizes = [1, 8, 100, 1000, 8 * 1024 - 1, 8 * 1024, 8 * 1024 + 1, 40_000, 200_000]
    return [bytes((i * 7 + j) % 251 for j in range(n)) for i, n in enumerate(sizes)]


async def test_many_frames_in_one_receive_come_out_whole_and_in_order() -> None:
    t = Transport()
    reader = _reader(t)
    small = [bytes([i]) * (i + 1) for i in range(200)]
    deliver(reader, b"".join(_frame(p) for p in small))
    assert reader.receives == 1
    for p in small:
        size = reader.take_size()
        assert size == len(p)
        assert reader.read_body(size) == p  # no await: already read ahead
    assert reader.buffered == 0


async def feed(reader: FrameReader, t: Transport, data: bytes, step: int | None = None) -> None:
    """Deliver `data` in receives of at most `step` bytes, giving the consumer a turn after
    each and while the transport is paused (as the event loop would)."""
    pos = 0
    while pos < len(data):
        end = len(data) if step is None else pos + step
        pos += deliver(reader, data[pos:end], t)
        await asyncio.sleep(0)


async def _consume(reader: FrameReader, count: int) -> list[bytes]:
    return [await read_frame(reader) for _ in range(count)]


async def test_frames_split_at_every_byte_boundary() -> None:
    payloads = [b"x" * 30, b"", b"abc" * 2000, b"y" * 9000]
    stream = b"".join(_frame(p) for p in payloads)
    for cut in range(len(stream) + 1):
        t = Transport()
        reader = _reader(t, ahead_bytes=16 * 1024, direct_min_bytes=4 * 1024)
        task = asyncio.ensure_future(_consume(reader, len(payloads)))
        await feed(reader, t, stream[:cut])
        await feed(reader, t, stream[cut:])
        assert await asyncio.wait_for(task, 5) == payloads, cut


async def test_large_bodies_are_received_in_place() -> None:
    t = Transport()
    reader = _reader(t)
    payload = bytes(range(256)) * 1000  # 256,000 bytes
    stream = _frame(payload)
    deliver(reader, stream[:1000])
    size = reader.take_size()
    assert size == len(payload)
    pending = reader.read_body(size)
    assert not isinstance(pending, (bytes, bytearray))
    body_task = asyncio.ensure_future(pending)
    await asyncio.sleep(0)
    # the rest lands in the body's own buffer: one receive
    buf = reader.get_buffer(-1)
    assert len(buf) == len(payload) - 996
    buf[:] = stream[1000:]
    reader.buffer_updated(len(buf))
    body = await body_task
    assert isinstance(body, bytearray) and body == payload
    # afterwards the read-ahead takes over again
    deliver(reader, _frame(b"next"))
    assert await read_frame(reader) == b"next"


@pytest.mark.parametrize("step", [1, 7, 1000, 4096, 65_536, 300_000])
async def test_mixed_frames_in_receives_of_any_size(step: int) -> None:
    t = Transport()
    reader = _reader(t)
    payloads = _payloads() * 2
    task = asyncio.ensure_future(_consume(reader, len(payloads)))
    await feed(reader, t, b"".join(_frame(p) for p in payloads), step)
    assert await asyncio.wait_for(task, 5) == payloads


async def test_a_full_read_ahead_pauses_the_transport_until_bytes_are_taken() -> None:
    t = Transport()
    reader = _reader(t, ahead_bytes=16 * 1024, direct_min_bytes=4 * 1024)
    frames = [_frame(bytes([i % 256]) * 96) for i in range(400)]  # 100 bytes each, 40,000 in all
    stream = b"".join(frames)
    taken = deliver(reader, stream, t)
    assert taken == 16 * 1024 and t.paused and t.pauses == 1  # nothing more is received
    first = [reader.read_body(reader.take_size() or 0) for _ in range(80)]  # 8,000 bytes
    assert first == [bytes([i]) * 96 for i in range(80)] and t.paused
    assert reader.take_size() == 96 and reader.read_body(96) == bytes([80]) * 96
    assert t.paused and t.resumes == 0
    for _ in range(2):  # once half of the read-ahead is free, reading resumes
        assert reader.take_size() == 96 and reader.read_body(96)
    assert not t.paused and t.resumes == 1
    taken += deliver(reader, stream[taken:], t)
    assert t.paused and t.pauses == 2
    out = [f[4:] for f in frames[:83]]
    while len(out) < len(frames):
        if (size := reader.take_size()) is None:
            taken += deliver(reader, stream[taken:], t)
            continue
        body = reader.read_body(size)
        if not isinstance(body, (bytes, bytearray)):
            taken += deliver(reader, stream[taken:], t)
            body = await body
        out.append(bytes(body))
    assert out == [f[4:] for f in frames]
    assert t.pauses == t.resumes or t.pauses == t.resumes + 1


async def test_a_peer_that_stops_mid_frame_ends_the_read_with_the_partial_bytes() -> None:
    for payload in (b"z" * 100, b"z" * 50_000):  # from the read-ahead, and in place
        t = Transport()
        reader = _reader(t)
        deliver(reader, _frame(payload)[:60])
        size = reader.take_size()
        assert size == len(payload)
        body = reader.read_body(size)
        assert not isinstance(body, (bytes, bytearray))
        task = asyncio.ensure_future(body)
        await asyncio.sleep(0)
        reader.feed_eof()
        with pytest.raises(asyncio.IncompleteReadError) as e:
            await task
        assert e.value.partial == payload[:56]


async def test_end_of_stream_before_a_size_prefix_and_a_lost_connection() -> None:
    t = Transport()
    reader = _reader(t)
    deliver(reader, b"\x00\x00")
    waiting = asyncio.ensure_future(reader.wait_more())
    await asyncio.sleep(0)
    reader.feed_eof()
    with pytest.raises(asyncio.IncompleteReadError) as e:
        await waiting
    assert e.value.partial == b"\x00\x00"
    lost = _reader(Transport())
    waiting = asyncio.ensure_future(lost.wait_more())
    await asyncio.sleep(0)
    lost.feed_eof(ConnectionResetError("reset"))
    with pytest.raises(ConnectionResetError):
        await waiting


async def test_a_cancelled_wait_loses_no_bytes() -> None:
    t = Transport()
    reader = _reader(t)
    waiting = asyncio.ensure_future(reader.wait_more())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    deliver(reader, _frame(b"after"))
    assert await read_frame(reader) == b"after"


async def test_a_negative_size_prefix_is_read_as_it_is_sent() -> None:
    t = Transport()
    reader = _reader(t)
    deliver(reader, struct.pack(">i", -5) + struct.pack(">i", 2**31 - 1))
    assert reader.take_size() == -5
    assert reader.take_size() == 2**31 - 1  # the connection refuses it: no body is allocated
    assert reader.buffered == 0


async def test_direct_min_bytes_must_fit_the_read_ahead_twice() -> None:
    with pytest.raises(ValueError):
        FrameReader(asyncio.get_running_loop(), lambda: None, lambda: None, 16 * 1024, 9 * 1024)


async def test_asked_for_room_when_full_it_grows_rather_than_hand_out_nothing() -> None:
    # a TLS transport may deliver bytes it decrypted before the pause reached it
    t = Transport()
    reader = _reader(t, ahead_bytes=16 * 1024, direct_min_bytes=4 * 1024)
    frames = [_frame(bytes([i]) * 96) for i in range(200)]
    stream = b"".join(frames)
    assert deliver(reader, stream, t) == 16 * 1024 and t.paused
    assert deliver(reader, stream[16 * 1024 :]) == len(stream) - 16 * 1024  # ignoring the pause
    assert [await read_frame(reader) for _ in frames] == [f[4:] for f in frames]
    assert not t.paused


async def test_a_connection_waiting_for_its_next_request_holds_no_read_ahead() -> None:
    t = Transport()
    reader = _reader(t)
    assert reader.read_ahead_bytes == 0  # none before the first receive
    deliver(reader, _frame(b"one"))
    assert reader.read_ahead_bytes == 64 * 1024
    assert await read_frame(reader) == b"one"
    waiting = asyncio.ensure_future(read_frame(reader))
    await asyncio.sleep(0)
    assert reader.read_ahead_bytes == 0  # given back (to a bounded pool) while it waits
    deliver(reader, _frame(b"two"))
    assert await waiting == b"two"
