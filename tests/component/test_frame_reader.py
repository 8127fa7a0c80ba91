"""The frame reader (agent.network.frame_reader) behind real loopback sockets, plaintext and
TLS (upgraded with StreamWriter.start_tls, as the agent's TLS listeners do): asyncio's
transports must hand it their bytes through get_buffer/buffer_updated in both cases, and
large bodies must be received in place."""

from __future__ import annotations

import asyncio
import hashlib
import ssl
import struct
from pathlib import Path

import pytest
from skiff.agent.network.frame_reader import FrameProtocol, FrameReader

from tests.support.tls import make_pki


async def _read_frame(frames: FrameReader) -> bytes | bytearray:
    while (size := frames.take_size()) is None:
        await frames.wait_more()
    body = frames.read_body(size)
    if not isinstance(body, (bytes, bytearray)):
        body = await body
    return body


def _payloads() -> list[bytes]:
    sizes = [0, 1, 100, 5000, 8191, 8192, 8193, 70_000, 1_000_000, 3, 250_000]
    return [bytes((i * 31 + j) % 253 for j in range(n)) for i, n in enumerate(sizes)]


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def _round_trip(server_tls: ssl.SSLContext | None, client_tls: ssl.SSLContext | None) -> None:
    loop = asyncio.get_running_loop()
    payloads = _payloads()
    got: list[bytes | bytearray] = []
    protocols: list[FrameProtocol] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if server_tls is not None:
            await writer.start_tls(server_tls)
        protocol = writer.transport.get_protocol()
        assert isinstance(protocol, FrameProtocol)
        protocols.append(protocol)
        for _ in payloads:
            body = await _read_frame(protocol.frames)
            got.append(body)
            writer.write(hashlib.sha256(body).digest())
        await writer.drain()
        writer.close()

    server = await loop.create_server(lambda: FrameProtocol(serve, loop), "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_tls, server_hostname="localhost" if client_tls else None
        )
        writer.write(b"".join(_frame(p) for p in payloads))  # all pipelined at once
        await writer.drain()
        digests = await asyncio.wait_for(reader.readexactly(32 * len(payloads)), 30)
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
    assert [bytes(b) for b in got] == payloads
    assert digests == b"".join(hashlib.sha256(p).digest() for p in payloads)
    # bodies larger than the read-ahead can only have been received in their own buffers
    assert all(isinstance(b, bytearray) for b, p in zip(got, payloads, strict=True) if len(p) > 262_144)


async def test_plaintext_socket_frames_of_every_size() -> None:
    await _round_trip(None, None)


@pytest.fixture(scope="module")
def tls_contexts(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    pki = make_pki(Path(tmp_path_factory.mktemp("pki")))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(str(pki.server_cert), str(pki.server_key))
    client = ssl.create_default_context(cafile=str(pki.ca))
    return server, client


async def test_tls_socket_frames_of_every_size(tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    server, client = tls_contexts
    await _round_trip(server, client)
