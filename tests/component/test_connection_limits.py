"""Deadlines on half-sent requests and connection caps over real TCP with raw sockets (issue
11 item 3): a client that sends a size and then one byte (or trickles) is closed once the
per-frame read deadline passes; `max_connections` and `max_connections_per_ip` refuse the
next connection, the Prometheus metrics count it, and the other clients are still served."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import urllib.request
import uuid
from pathlib import Path

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from prometheus_client.parser import text_string_to_metric_families
from skiff.agent.config import AgentConfig
from skiff.agent.metrics import serve_metrics
from skiff.agent.runtime import start_agent
from skiff.fileformat.objectstore import open_async_store
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService

from tests.component.fake_metadata import AgentHarness, connect, is_closed, roundtrip
from tests.support.agents import free_port

API_VERSIONS = ApiVersionsRequest(client_software_name="skiff-test", client_software_version="1.0")


def _served(sock: socket.socket) -> bool:
    return bool(roundtrip(sock, API_VERSIONS).error_code == ErrorCode.none)


def test_a_request_whose_body_stops_after_one_byte_is_closed_at_the_deadline(tmp_path: Path) -> None:
    h = AgentHarness(tmp_path, request_read_timeout_ms=200).start()
    try:
        with connect(h.bootstrap) as loris, connect(h.bootstrap) as other:
            loris.sendall(struct.pack(">i", 100) + b"\x00")  # a 100-byte request: 1 byte, then nothing
            assert _served(other)
            assert is_closed(loris, timeout=30)
            assert _served(other)
        assert h.agent.server.request_read_timeouts == 1
    finally:
        h.stop()


def test_a_trickling_request_is_closed_at_the_deadline(tmp_path: Path) -> None:
    """One byte at a time keeps a connection active, so only a deadline on the whole frame
    (not an idle timeout) ends it."""
    h = AgentHarness(tmp_path, request_read_timeout_ms=300).start()
    stop = threading.Event()
    try:
        with connect(h.bootstrap) as loris, connect(h.bootstrap) as other:
            loris.sendall(struct.pack(">i", 1_000_000))

            def trickle() -> None:  # the client's pace, not a synchronisation
                try:
                    while not stop.wait(0.02):
                        loris.send(b"\x00")
                except OSError:
                    pass  # closed by the agent

            sender = threading.Thread(target=trickle)
            sender.start()
            try:
                assert is_closed(loris, timeout=30)
            finally:
                stop.set()
                sender.join(10)
            assert _served(other)
        assert h.agent.server.request_read_timeouts == 1
    finally:
        h.stop()


def _connect_from(ip: str, port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(ip, 0))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _refused_counts(metrics_port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    return {
        s.labels["reason"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "skiff_connections_refused_total"
    }


async def test_connection_caps_refuse_the_next_connection_and_count_it(tmp_path: Path) -> None:
    service = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = LocalMetadataClient(service, owns_service=True)
    cfg = AgentConfig.from_env(
        {}, agent_id="caps", host="127.0.0.1", port=0, max_connections=3, max_connections_per_ip=2
    )
    running = await start_agent(cfg, md, open_async_store(f"memory://caps-{uuid.uuid4().hex}"))
    metrics_port = free_port()
    serve_metrics(running, "127.0.0.1", metrics_port)
    port = running.port

    def clients() -> None:
        kept = [_connect_from("127.0.0.1", port) for _ in range(2)]
        try:
            assert all(_served(s) for s in kept)  # both accepted (and counted) by now
            with _connect_from("127.0.0.1", port) as third:  # a third from one address
                assert is_closed(third)
            assert _refused_counts(metrics_port) == {"max_connections": 0, "max_connections_per_ip": 1}
            kept.append(_connect_from("127.0.0.2", port))  # another address: accepted
            assert _served(kept[-1])
            with _connect_from("127.0.0.3", port) as fourth:  # a fourth in all
                assert is_closed(fourth)
            assert _refused_counts(metrics_port) == {"max_connections": 1, "max_connections_per_ip": 1}
            assert all(_served(s) for s in kept)  # the others are still served
        finally:
            for s in kept:
                s.close()

    try:
        await asyncio.to_thread(clients)
    finally:
        await running.close()
