"""Listeners, TLS and SASL on a real in-process agent over real sockets (raw Kafka wire with
kio types; real clients are in tests/e2e/test_security_clients.py). Metadata is real
(SQLite through LocalMetadataClient)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import socket
import ssl
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.static.primitive import i8, i32
from scramp import ScramClient
from skiff.agent.config import AgentConfig
from skiff.agent.runtime import RunningAgent, start_agent
from skiff.fileformat.objectstore.memory import AsyncMemoryStore
from skiff.metadata.security.scram_types import make_credential
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService

from tests.support.kafka_wire import KafkaWire, encode_request
from tests.support.tls import CLIENT_SUBJECT, Pki, make_pki


async def _settle_tasks() -> None:
    """Let the closed connections' handlers finish before the loop stops."""
    me = asyncio.current_task()
    rest = [t for t in asyncio.all_tasks() if t is not me]
    for t in rest:
        t.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


class Running:
    """One agent on a loop in a background thread, with its metadata service."""

    def __init__(self, tmp: Path, clock: Any = None, **config: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.service = MetadataService.from_url(f"sqlite:///{tmp}/md-{uuid.uuid4().hex}.db")
        self.metadata = LocalMetadataClient(self.service, owns_service=True)
        cfg = AgentConfig(agent_id="a1", host="127.0.0.1", port=0, **config)
        store = AsyncMemoryStore(f"sec-{uuid.uuid4().hex}")
        self.agent: RunningAgent = self.call(start_agent(cfg, self.metadata, store, clock=clock))

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def port(self, listener: str) -> int:
        names = [li.name for li in self.agent.config.resolved_listeners()]
        return self.agent.servers[names.index(listener)].port

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.port(listener)}"

    def add_user(self, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> None:
        self.service.upsert_scram_credential(make_credential(user, mechanism, password, iterations=4096))

    def principals(self, listener: str) -> list[str]:
        server = self.agent.servers[
            [li.name for li in self.agent.config.resolved_listeners()].index(listener)
        ]
        return [c.info.principal for c in list(server._open.values())]

    def close(self) -> None:
        self.call(self.agent.close())
        self.call(_settle_tasks())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()  # else collected open, with a ResourceWarning


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _tls_settings(pki: Pki, client_auth: str) -> dict[str, Any]:
    return {
        "ssl_certfile": str(pki.server_cert),
        "ssl_keyfile": str(pki.server_key),
        "ssl_cafile": str(pki.ca),
        "ssl_client_auth": client_auth,
    }


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Running]:
    r = Running(
        tmp_path_factory.mktemp("agent"),
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        listener_security_protocol_map="EXTERNAL:SASL_SSL",
        advertised_listeners="EXTERNAL://kafka.example.com:19094",
        **_tls_settings(pki, "requested"),
    )
    r.add_user("alice", "alice-secret", "SCRAM-SHA-512")
    r.add_user("alice", "alice-secret", "SCRAM-SHA-256")
    yield r
    r.close()


def client_tls(pki: Pki, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


def _metadata_request() -> MetadataRequest:
    return MetadataRequest(
        topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )


def _closed(wire: KafkaWire) -> bool:
    wire.sock.settimeout(10)
    try:
        return wire.sock.recv(1) == b""
    except (ConnectionError, ssl.SSLError):
        return True


def sasl_login(wire: KafkaWire, mechanism: str, user: str, password: str) -> Any:
    """Handshake + authenticate; the last SaslAuthenticate response."""
    hs = wire.request(SaslHandshakeRequest(mechanism=mechanism)).parse()
    assert hs.error_code == ErrorCode.none, hs
    if mechanism == "PLAIN":
        return wire.request(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode())).parse()
    client = ScramClient([mechanism], user, password)
    first = wire.request(SaslAuthenticateRequest(auth_bytes=client.get_client_first().encode())).parse()
    assert first.error_code == ErrorCode.none, first
    client.set_server_first(first.auth_bytes.decode())
    final = wire.request(SaslAuthenticateRequest(auth_bytes=client.get_client_final().encode())).parse()
    if final.error_code == ErrorCode.none:
        client.set_server_final(final.auth_bytes.decode())  # the server proved it knows the key
    return final


# --- listeners and their addresses ----------------------------------------------------------


def test_each_listener_answers_with_addresses_on_that_listener(agent: Running, pki: Pki) -> None:
    with KafkaWire(agent.bootstrap("PLAINTEXT")) as w:
        brokers = w.request(_metadata_request()).parse().brokers
        assert [(b.host, b.port) for b in brokers] == [("127.0.0.1", agent.port("PLAINTEXT"))]
    with KafkaWire(agent.bootstrap("SSL"), ssl_context=client_tls(pki)) as w:
        brokers = w.request(_metadata_request()).parse().brokers
        assert [(b.host, b.port) for b in brokers] == [("127.0.0.1", agent.port("SSL"))]
        coord = w.request(FindCoordinatorRequest(key="g", key_type=i8(0))).parse()
        assert (coord.host, coord.port) == ("127.0.0.1", agent.port("SSL"))
    with KafkaWire(agent.bootstrap("EXTERNAL"), ssl_context=client_tls(pki)) as w:
        assert sasl_login(w, "PLAIN", "alice", "alice-secret").error_code == ErrorCode.none
        brokers = w.request(_metadata_request()).parse().brokers
        assert [(b.host, b.port) for b in brokers] == [("kafka.example.com", 19094)]
    with KafkaWire(agent.bootstrap("SASL_PLAINTEXT")) as w:
        assert sasl_login(w, "SCRAM-SHA-256", "alice", "alice-secret").error_code == ErrorCode.none
        brokers = w.request(_metadata_request()).parse().brokers
        assert [(b.host, b.port) for b in brokers] == [("127.0.0.1", agent.port("SASL_PLAINTEXT"))]


def test_agent_registers_every_listener_with_metadata(agent: Running) -> None:
    (row,) = agent.service.live_agents()
    assert row.listeners == (
        ("PLAINTEXT", "127.0.0.1", agent.port("PLAINTEXT")),
        ("SASL_PLAINTEXT", "127.0.0.1", agent.port("SASL_PLAINTEXT")),
        ("SSL", "127.0.0.1", agent.port("SSL")),
        ("EXTERNAL", "kafka.example.com", 19094),
    )
    assert (row.host, row.port) == ("127.0.0.1", agent.port("PLAINTEXT"))


# --- SASL --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_right_credentials_authenticate(agent: Running, mechanism: str) -> None:
    with KafkaWire(agent.bootstrap("SASL_PLAINTEXT")) as w:
        resp = sasl_login(w, mechanism, "alice", "alice-secret")
        assert resp.error_code == ErrorCode.none
        assert w.request(_metadata_request()).parse().brokers
        assert "User:alice" in agent.principals("SASL_PLAINTEXT")


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("nobody", "alice-secret")])
def test_wrong_credentials_are_refused_then_closed(
    agent: Running, mechanism: str, user: str, password: str
) -> None:
    with KafkaWire(agent.bootstrap("SASL_PLAINTEXT")) as w:
        hs = w.request(SaslHandshakeRequest(mechanism=mechanism)).parse()
        assert hs.error_code == ErrorCode.none
        if mechanism == "PLAIN":
            resp = w.request(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode())).parse()
        else:
            client = ScramClient([mechanism], user, password)
            resp = w.request(SaslAuthenticateRequest(auth_bytes=client.get_client_first().encode())).parse()
            if resp.error_code == ErrorCode.none:  # a known user: the proof is what fails
                client.set_server_first(resp.auth_bytes.decode())
                resp = w.request(
                    SaslAuthenticateRequest(auth_bytes=client.get_client_final().encode())
                ).parse()
        assert resp.error_code == ErrorCode.sasl_authentication_failed
        assert resp.error_message and "Authentication failed" in resp.error_message
        assert _closed(w)


def test_requests_before_authentication_close_the_connection(agent: Running) -> None:
    with KafkaWire(agent.bootstrap("SASL_PLAINTEXT")) as w:
        versions = w.request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        ).parse()
        keys = {int(k.api_key) for k in versions.api_keys}
        assert {17, 36, 50, 51} <= keys
        w.send_only(_metadata_request())
        assert _closed(w)


def test_unsupported_mechanism_lists_the_enabled_ones(agent: Running) -> None:
    with KafkaWire(agent.bootstrap("SASL_PLAINTEXT")) as w:
        hs = w.request(SaslHandshakeRequest(mechanism="GSSAPI")).parse()
        assert hs.error_code == ErrorCode.unsupported_sasl_mechanism
        assert set(hs.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        assert _closed(w)


def test_sasl_handshake_on_a_plaintext_listener_is_illegal(agent: Running) -> None:
    with KafkaWire(agent.bootstrap("PLAINTEXT")) as w:
        assert (
            w.request(SaslHandshakeRequest(mechanism="PLAIN")).parse().error_code
            == ErrorCode.illegal_sasl_state
        )
        assert w.request(_metadata_request()).parse().brokers  # still served


def test_big_request_before_authentication_is_refused_unread(agent: Running) -> None:
    with KafkaWire(agent.bootstrap("SASL_PLAINTEXT")) as w:
        w.send_frame(struct.pack(">i", 1 << 20) + b"\0" * 64)  # a 1 MiB frame announced
        assert _closed(w)


# --- SCRAM admin APIs -------------------------------------------------------------------------


def test_alter_and_describe_user_scram_credentials(agent: Running) -> None:
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", b"bob-secret", salt, 4096)
    with KafkaWire(agent.bootstrap("PLAINTEXT")) as w:
        resp = w.request(
            AlterUserScramCredentialsRequest(
                deletions=(ScramCredentialDeletion(name="ghost", mechanism=i8(1)),),
                upsertions=(
                    ScramCredentialUpsertion(
                        name="bob", mechanism=i8(1), iterations=i32(4096), salt=salt, salted_password=salted
                    ),
                    ScramCredentialUpsertion(
                        name="weak", mechanism=i8(1), iterations=i32(100), salt=salt, salted_password=salted
                    ),
                    ScramCredentialUpsertion(
                        name="odd", mechanism=i8(9), iterations=i32(4096), salt=salt, salted_password=salted
                    ),
                ),
            )
        ).parse()
        codes = {r.user: r.error_code for r in resp.results}
        assert codes == {
            "ghost": ErrorCode.resource_not_found,
            "bob": ErrorCode.none,
            "weak": ErrorCode.unacceptable_credential,
            "odd": ErrorCode.unsupported_sasl_mechanism,
        }
        desc = w.request(
            DescribeUserScramCredentialsRequest(users=(UserName(name="bob"), UserName(name="weak")))
        ).parse()
        by_user = {r.user: r for r in desc.results}
        assert [(int(c.mechanism), int(c.iterations)) for c in by_user["bob"].credential_infos] == [(1, 4096)]
        assert by_user["weak"].error_code == ErrorCode.resource_not_found
        everyone = w.request(DescribeUserScramCredentialsRequest(users=None)).parse()
        assert {"alice", "bob"} <= {r.user for r in everyone.results}
    # the credential the admin API stored logs in (the salted password was derived by the client)
    with KafkaWire(agent.bootstrap("SASL_PLAINTEXT")) as w:
        assert sasl_login(w, "SCRAM-SHA-256", "bob", "bob-secret").error_code == ErrorCode.none
    with KafkaWire(agent.bootstrap("PLAINTEXT")) as w:
        resp = w.request(
            AlterUserScramCredentialsRequest(
                deletions=(
                    ScramCredentialDeletion(name="bob", mechanism=i8(1)),
                    ScramCredentialDeletion(name="bob", mechanism=i8(1)),
                ),
                upsertions=(),
            )
        ).parse()
        assert [(r.user, r.error_code) for r in resp.results] == [("bob", ErrorCode.duplicate_resource)]


# --- TLS ---------------------------------------------------------------------------------------


def test_verified_client_certificate_is_the_principal(agent: Running, pki: Pki) -> None:
    with KafkaWire(agent.bootstrap("SSL"), ssl_context=client_tls(pki, pki.client_cert, pki.client_key)) as w:
        assert w.request(_metadata_request()).parse().brokers
        assert f"User:{CLIENT_SUBJECT}" in agent.principals("SSL")
    with KafkaWire(agent.bootstrap("SSL"), ssl_context=client_tls(pki)) as w:  # requested: none sent
        assert w.request(_metadata_request()).parse().brokers
        assert agent.principals("SSL") == ["User:ANONYMOUS"]


async def _connections_done(server: Any) -> None:
    """Wait for the server's connection handlers to finish (they count and log failures
    after the client has seen the close)."""
    await asyncio.gather(*list(server._connections.values()), return_exceptions=True)


def test_plaintext_to_a_tls_listener_fails_cleanly(agent: Running, caplog: pytest.LogCaptureFixture) -> None:
    security = agent.agent.servers[2].security
    assert security is not None and security.listener.name == "SSL"
    before = security.tls_failures
    security._last_info_s = -1e9  # this test's first failure is the one logged at INFO
    caplog.set_level(logging.DEBUG, logger="skiff.agent")
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", agent.port("SSL")), timeout=10) as s:
            s.sendall(encode_request(_metadata_request(), correlation_id=1))
            data = b""
            try:
                while chunk := s.recv(4096):
                    data += chunk
            except ConnectionResetError:
                pass
            # closed, with at most a TLS alert record (content type 21), never a Kafka answer
            assert data == b"" or data[0] == 21
    agent.call(_connections_done(agent.agent.servers[2]))
    assert security.tls_failures == before + 5
    tls_logs = [r for r in caplog.records if "TLS handshake" in r.getMessage()]
    assert [r.levelno for r in tls_logs].count(logging.INFO) == 1
    assert all(r.levelno <= logging.INFO and r.exc_info is None for r in tls_logs)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_required_client_auth_refuses_missing_and_untrusted_certificates(tmp_path: Path, pki: Pki) -> None:
    r = Running(tmp_path, listeners="SSL://127.0.0.1:0", **_tls_settings(pki, "required"))
    try:
        for ctx in (client_tls(pki), client_tls(pki, pki.rogue_client_cert, pki.rogue_client_key)):
            # TLS 1.3: the refusal arrives with the first read
            with (
                pytest.raises((ssl.SSLError, ConnectionError)),
                KafkaWire(r.bootstrap("SSL"), ssl_context=ctx) as w,
            ):
                w.request(_metadata_request())
        with KafkaWire(r.bootstrap("SSL"), ssl_context=client_tls(pki, pki.client_cert, pki.client_key)) as w:
            assert w.request(_metadata_request()).parse().brokers
            assert r.principals("SSL") == [f"User:{CLIENT_SUBJECT}"]
    finally:
        r.close()


def test_silent_client_on_a_tls_listener_is_closed_after_the_handshake_timeout(
    tmp_path: Path, pki: Pki
) -> None:
    r = Running(
        tmp_path, listeners="SSL://127.0.0.1:0", ssl_handshake_timeout_ms=200, **_tls_settings(pki, "none")
    )
    try:
        with socket.create_connection(("127.0.0.1", r.port("SSL")), timeout=30) as s:
            assert s.recv(1) == b""  # nothing sent: closed by the agent, not by this 30 s timeout
        r.call(_connections_done(r.agent.servers[0]))
        assert r.agent.servers[0].security.tls_failures == 1  # type: ignore[union-attr]
    finally:
        r.close()


class SteppedClock:
    """Wall time as it is; monotonic time real plus what the test adds."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def wall_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic(self) -> float:
        return time.monotonic() + self.offset_s


def test_reauthentication_kip_368(tmp_path: Path) -> None:
    clock = SteppedClock()
    r = Running(
        tmp_path, clock=clock, listeners="SASL_PLAINTEXT://127.0.0.1:0", connections_max_reauth_ms=60_000
    )
    try:
        r.add_user("alice", "alice-secret")
        r.add_user("bob", "bob-secret")
        with KafkaWire(r.bootstrap("SASL_PLAINTEXT")) as w:
            first = sasl_login(w, "SCRAM-SHA-512", "alice", "alice-secret")
            assert first.session_lifetime.total_seconds() == 60
            assert w.request(_metadata_request()).parse().brokers
            clock.offset_s += 50  # re-authenticate before the session ends: it starts again
            again = sasl_login(w, "PLAIN", "alice", "alice-secret")
            assert again.error_code == ErrorCode.none and again.session_lifetime.total_seconds() == 60
            clock.offset_s += 50  # 100 s after the first login, 50 s after the second
            assert w.request(_metadata_request()).parse().brokers
            clock.offset_s += 11  # past the second session's end
            w.send_only(_metadata_request())
            assert _closed(w)
        with KafkaWire(r.bootstrap("SASL_PLAINTEXT")) as w:
            assert sasl_login(w, "SCRAM-SHA-512", "alice", "alice-secret").error_code == ErrorCode.none
            other = sasl_login(w, "SCRAM-SHA-512", "bob", "bob-secret")
            assert other.error_code == ErrorCode.sasl_authentication_failed
            assert other.error_message == "Cannot change principals during re-authentication"
            assert _closed(w)
    finally:
        r.close()


def test_without_reauthentication_a_second_handshake_is_illegal(agent: Running) -> None:
    with KafkaWire(agent.bootstrap("SASL_PLAINTEXT")) as w:
        first = sasl_login(w, "SCRAM-SHA-512", "alice", "alice-secret")
        assert first.session_lifetime.total_seconds() == 0  # sessions never end
        hs = w.request(SaslHandshakeRequest(mechanism="PLAIN")).parse()
        assert hs.error_code == ErrorCode.illegal_sasl_state
        assert w.request(_metadata_request()).parse().brokers
