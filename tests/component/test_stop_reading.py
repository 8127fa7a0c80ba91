"""AgentServer.stop_reading (graceful shutdown): idle connections close at once, with or
without an idle timeout configured; a connection keeps being served until then; a request
whose size prefix is in but whose body is not is dropped (the client retries it); new
connections are refused."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from tests.component.fake_metadata import AgentHarness, connect, is_closed, roundtrip

API_VERSIONS = ApiVersionsRequest(client_software_name="skiff-test", client_software_version="1.0")


@pytest.mark.parametrize("idle_ms", [600_000, 0])
def test_stop_reading_closes_idle_and_half_read_connections_and_refuses_new_ones(
    tmp_path: Path, idle_ms: int
) -> None:
    h = AgentHarness(tmp_path, connections_max_idle_ms=idle_ms).start()
    try:
        bootstrap = h.bootstrap
        with connect(bootstrap) as idle, connect(bootstrap) as half:
            assert roundtrip(idle, API_VERSIONS).error_code == ErrorCode.none
            half.sendall(struct.pack(">i", 100) + b"\x00")  # a request's size, one byte of it
            server = h.agent.server

            async def stop() -> int:
                tasks = server.stop_reading()
                for t in tasks:
                    await t
                return len(tasks)

            assert h.call(stop()) == 2
            assert is_closed(idle) and is_closed(half)
            with pytest.raises(OSError):
                connect(bootstrap, timeout=2).recv(1)
    finally:
        h.stop()
