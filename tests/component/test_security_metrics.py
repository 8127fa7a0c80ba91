"""TLS and SASL failures in the agent's Prometheus metrics, scraped over real HTTP from an
in-process agent with PLAINTEXT, SASL_PLAINTEXT, SSL and SASL_SSL listeners on real sockets
(raw Kafka wire with kio types; metadata real, SQLite through LocalMetadataClient):
plaintext sent to a TLS listener counts one `skiff_tls_handshake_failures_total` on that
listener; a wrong password counts one `skiff_failed_authentication_total` for that listener
and mechanism, a right one one `skiff_successful_authentication_total`."""

from __future__ import annotations

import asyncio
import ssl
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from skiff.agent.config import AgentConfig
from skiff.agent.metrics import serve_metrics
from skiff.agent.network.server import AgentServer
from skiff.agent.runtime import RunningAgent, start_agent
from skiff.fileformat.objectstore.memory import AsyncMemoryStore
from skiff.metadata.security.scram_types import make_credential
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService

from tests.component.test_listener_security import sasl_login
from tests.component.test_metrics import scrape
from tests.support.agents import free_port
from tests.support.kafka_wire import KafkaWire, encode_request
from tests.support.tls import Pki, make_pki

LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
Scrape = dict[tuple[str, tuple[tuple[str, str], ...]], float]  # (name, labels) -> value


class Agent:
    def __init__(self, running: RunningAgent, service: MetadataService, pki: Pki, metrics_port: int) -> None:
        self.running, self.service, self.pki, self.metrics_port = running, service, pki, metrics_port

    def server(self, listener: str) -> AgentServer:
        return self.running.servers[LISTENERS.index(listener)]

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.server(listener).port}"

    async def scrape(self) -> Scrape:
        return await asyncio.to_thread(scrape, self.metrics_port)

    async def connections_done(self, listener: str) -> None:
        """Wait for the listener's connections to finish (their failures are counted by then)."""
        tasks = list(self.server(listener)._connections.values())
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[Agent]:
    pki = make_pki(tmp_path / "pki")
    service = MetadataService.from_url(f"sqlite:///{tmp_path}/md.db")
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        service.upsert_scram_credential(make_credential("alice", mech, "alice-secret", iterations=4096))
    cfg = AgentConfig(
        agent_id="a1",
        host="127.0.0.1",
        port=0,
        listeners=",".join(f"{name}://127.0.0.1:0" for name in LISTENERS),
        ssl_certfile=str(pki.server_cert),
        ssl_keyfile=str(pki.server_key),
        ssl_cafile=str(pki.ca),
        ssl_client_auth="requested",
    )
    md = LocalMetadataClient(service, owns_service=True)
    running = await start_agent(cfg, md, AsyncMemoryStore(f"secmetrics-{uuid.uuid4().hex}"))
    try:
        port = free_port()
        endpoint = serve_metrics(running, "127.0.0.1", port)
        assert endpoint is not None
        try:
            yield Agent(running, service, pki, port)
        finally:
            endpoint.close()
    finally:
        await running.close()


def tls_failures(m: Scrape, listener: str) -> float:
    return m[("skiff_tls_handshake_failures_total", (("listener", listener),))]


def auth(m: Scrape, outcome: str, listener: str, mechanism: str) -> float:
    return m[(f"skiff_{outcome}_authentication_total", (("listener", listener), ("mechanism", mechanism)))]


async def test_plaintext_to_a_tls_listener_counts_a_handshake_failure(agent: Agent) -> None:
    before = await agent.scrape()
    assert [tls_failures(before, li) for li in ("SSL", "SASL_SSL")] == [0, 0]
    assert not any(
        name.startswith("skiff_tls_") and labels == (("listener", "PLAINTEXT"),) for name, labels in before
    )

    for listener in ("SSL", "SSL", "SASL_SSL"):
        reader, writer = await asyncio.open_connection("127.0.0.1", agent.server(listener).port)
        frame = encode_request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1"), correlation_id=1
        )
        writer.write(frame)
        await writer.drain()
        try:
            await asyncio.wait_for(reader.read(), 30)  # until the server closes
        except ConnectionError:
            pass
        writer.close()
        await agent.connections_done(listener)

    after = await agent.scrape()
    assert tls_failures(after, "SSL") == 2 and tls_failures(after, "SASL_SSL") == 1
    # a good TLS client is not a failure
    tls = ssl.create_default_context(cafile=str(agent.pki.ca))
    await asyncio.to_thread(_api_versions, agent.bootstrap("SSL"), tls)
    assert tls_failures(await agent.scrape(), "SSL") == 2


def _api_versions(bootstrap: str, tls: ssl.SSLContext) -> None:
    with KafkaWire(bootstrap, ssl_context=tls) as w:
        resp = w.request(ApiVersionsRequest(client_software_name="t", client_software_version="1")).parse()
        assert resp.error_code == ErrorCode.none


def _login(bootstrap: str, mechanism: str, password: str, tls: ssl.SSLContext | None = None) -> ErrorCode:
    with KafkaWire(bootstrap, ssl_context=tls) as w:
        return ErrorCode(sasl_login(w, mechanism, "alice", password).error_code)


async def test_wrong_and_right_passwords_count_per_listener_and_mechanism(agent: Agent) -> None:
    before = await agent.scrape()
    for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
        for mech in MECHANISMS:
            assert auth(before, "failed", listener, mech) == auth(before, "successful", listener, mech) == 0
    assert not any(
        dict(labels).get("listener") in ("PLAINTEXT", "SSL")
        for name, labels in before
        if "authentication" in name
    )

    tls = ssl.create_default_context(cafile=str(agent.pki.ca))
    sasl_plain, sasl_ssl = agent.bootstrap("SASL_PLAINTEXT"), agent.bootstrap("SASL_SSL")
    assert (
        await asyncio.to_thread(_login, sasl_plain, "SCRAM-SHA-512", "wrong")
        == ErrorCode.sasl_authentication_failed
    )
    assert (
        await asyncio.to_thread(_login, sasl_plain, "SCRAM-SHA-512", "wrong")
        == ErrorCode.sasl_authentication_failed
    )
    assert await asyncio.to_thread(_login, sasl_plain, "PLAIN", "alice-secret") == ErrorCode.none
    assert (
        await asyncio.to_thread(_login, sasl_ssl, "PLAIN", "wrong", tls)
        == ErrorCode.sasl_authentication_failed
    )
    assert await asyncio.to_thread(_login, sasl_ssl, "SCRAM-SHA-256", "alice-secret", tls) == ErrorCode.none

    after = await agent.scrape()
    got = {
        (outcome, listener, mech): auth(after, outcome, listener, mech)
        for outcome in ("failed", "successful")
        for listener in ("SASL_PLAINTEXT", "SASL_SSL")
        for mech in MECHANISMS
    }
    expected = dict.fromkeys(got, 0.0)
    expected[("failed", "SASL_PLAINTEXT", "SCRAM-SHA-512")] = 2
    expected[("successful", "SASL_PLAINTEXT", "PLAIN")] = 1
    expected[("failed", "SASL_SSL", "PLAIN")] = 1
    expected[("successful", "SASL_SSL", "SCRAM-SHA-256")] = 1
    assert got == expected
    assert tls_failures(after, "SASL_SSL") == 0
