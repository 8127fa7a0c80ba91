"""The metadata service with authentication on, over real HTTP (uvicorn on loopback):

- 401 without or with a bad token, 403 for a role the route does not admit, success for
  the roles it does, on representative routes, through `HttpMetadataClient`;
- every route of the app is covered: walking `app.routes`, each route answers 401 without
  a token (public ones aside), 403 to the roles it does not declare and lets the others
  through; a route added later without a declaration is admin-only;
- a fake agent registration without the agent role is refused and never listed;
- an unauthenticated request is refused before its body is read;
- /healthz and /readyz need no token; /readyz is 503 when the database does not answer;
- TLS: a client verifying with the CA file works, one without it is refused; with a
  client CA configured, a client without a certificate cannot connect (mTLS).
"""

from __future__ import annotations

import asyncio
import datetime
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from fastapi import FastAPI
from fastapi.routing import APIRoute
from skiff.metadata.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    SASL_AUTHENTICATION_FAILED,
    MetadataError,
    MetadataUnavailable,
)
from skiff.metadata.server.app import create_app, tls_settings
from skiff.metadata.server.auth import TokenTable, allowed_roles, iter_routes
from skiff.metadata.service import MetadataService
from skiff.metadata.types import AgentInfo, BatchSpec, ChunkSpec, FileSpec
from skiff.metadata.wire.credentials import MetadataCredentials
from skiff.metadata.wire.http_client import HttpMetadataClient
from skiff.metadata.wire.roles import ADMIN, AGENT, COMPACTOR, READER, ROLES, WRITER
from sqlalchemy import create_engine

from tests.support.served_app import Served

TOKENS = {role: f"{role}-token-{'x' * 24}" for role in sorted(ROLES)}
TOKENS_TEXT = "\n".join(f"{role}:{token}" for role, token in TOKENS.items())
# The console's login page and stylesheet are public too (metadata.server.console.login).
PUBLIC_PATHS = {"/healthz", "/readyz", "/console/login", "/console/logout", "/console/static/console.css"}
FASTAPI_DOC_PATHS = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}


@pytest.fixture
def service(tmp_path: Path) -> Iterator[MetadataService]:
    svc = MetadataService.from_url(f"sqlite:///{tmp_path}/m.db")
    yield svc
    svc.close()


@pytest.fixture
def app(service: MetadataService) -> FastAPI:
    return create_app(service, tokens=TokenTable.parse(TOKENS_TEXT, "test"))


@pytest.fixture
def served(app: FastAPI) -> Iterator[Served]:
    s = Served(app)
    yield s
    s.close()


def client(url: str, role: str | None, **creds: Any) -> HttpMetadataClient:
    token = TOKENS.get(role or "", role)
    return HttpMetadataClient(url, credentials=MetadataCredentials(token=token, **creds))


async def _outcome(coro: Any) -> int | str:
    """'ok', or the Kafka error code of a refusal."""
    try:
        await coro
    except MetadataError as e:
        return e.error_code
    return "ok"


# ------------------------------------------------------------------ per role, through the client


def test_roles_on_representative_routes(served: Served) -> None:
    async def go() -> None:
        clients = {
            role: client(served.url(), role) for role in [*sorted(ROLES), None, "not-a-token-xxxxxxxxxx"]
        }
        try:
            admin = clients[ADMIN]
            topic = await admin.create_topic("t", 1, {})
            agent_info = AgentInfo("agent-1", "127.0.0.1", 9092, None)
            calls = {
                "create_topic": lambda md: md.create_topic(f"t-{id(md)}", 1, {}),
                "commit_file": lambda md: md.commit_file(
                    FileSpec(f"segments/{id(md)}", 70, 0),
                    [ChunkSpec(topic.topic_id, 0, (BatchSpec(0, 70, 1, 1, 0),))],
                ),
                "heartbeat_agent": lambda md: md.heartbeat_agent(agent_info),
                "describe_topics": lambda md: md.describe_topics(["t"]),
                "live_agents": lambda md: md.live_agents(),
                "compaction_candidates": lambda md: md.compaction_candidates(),
                "claim_deletable_files": lambda md: md.claim_deletable_files("tok", 1, 60_000, 60_000),
                "fetch_offsets": lambda md: md.fetch_offsets("g", None),
                "commit_offsets": lambda md: md.commit_offsets("g", []),
                "bucket_url": lambda md: md.bucket_url(),
            }
            allowed = {
                "create_topic": {AGENT},
                "commit_file": {AGENT},
                "heartbeat_agent": {AGENT},
                "describe_topics": {AGENT, COMPACTOR, READER},
                "live_agents": {AGENT, COMPACTOR, READER},
                "compaction_candidates": {COMPACTOR},
                "claim_deletable_files": {COMPACTOR},
                "fetch_offsets": {AGENT, READER},
                "commit_offsets": {AGENT},
                "bucket_url": {AGENT, COMPACTOR, READER},
            }
            for name, call in calls.items():
                for who, md in clients.items():
                    got = await _outcome(call(md))
                    if who is None or who not in ROLES:
                        want: int | str = SASL_AUTHENTICATION_FAILED
                    elif who == ADMIN or who in allowed[name]:
                        want = "ok"
                    else:
                        want = CLUSTER_AUTHORIZATION_FAILED
                    assert got == want, (name, who, got)
        finally:
            for md in clients.values():
                await md.close()

    asyncio.run(go())


def test_refusals_are_clear_json(served: Served) -> None:
    url = served.url()
    none = httpx.post(f"{url}/v1/commit-file", json={})
    assert none.status_code == 401
    assert none.json()["error_code"] == SASL_AUTHENTICATION_FAILED
    assert "Authorization: Bearer" in none.json()["message"]
    assert none.headers["www-authenticate"].startswith("Bearer")
    bad = httpx.post(
        f"{url}/v1/commit-file", json={}, headers={"authorization": "Bearer wrong-token-xxxxxxxx"}
    )
    assert bad.status_code == 401 and bad.json()["message"] == "invalid bearer token"
    assert 'error="invalid_token"' in bad.headers["www-authenticate"]
    # HTTP basic auth (what schema registry clients send) carries a token as its password:
    basic = httpx.post(f"{url}/v1/commit-file", json={}, auth=("anyone", TOKENS[AGENT]))
    assert basic.status_code == 422  # authenticated as the agent; the empty body is refused
    basic_bad = httpx.post(f"{url}/v1/commit-file", json={}, auth=(TOKENS[AGENT], "wrong-password-xxxxx"))
    assert basic_bad.status_code == 401  # the token must be the password, not the user
    garbled = httpx.post(f"{url}/v1/commit-file", json={}, headers={"authorization": "Basic !!notbase64"})
    assert garbled.status_code == 401
    wrong_role = httpx.post(
        f"{url}/v1/commit-file", json={}, headers={"authorization": f"Bearer {TOKENS[READER]}"}
    )
    assert wrong_role.status_code == 403
    body = wrong_role.json()
    assert body["error_code"] == CLUSTER_AUTHORIZATION_FAILED
    assert body["message"] == "POST /v1/commit-file needs the role admin or agent; this token has reader"
    assert TOKENS[READER] not in wrong_role.text
    # a lower-case scheme and extra spaces are accepted (RFC 7235: the scheme is case-insensitive)
    ok = httpx.get(f"{url}/v1/topics", headers={"authorization": f"bearer   {TOKENS[READER]}"})
    assert ok.status_code == 200 and ok.json() == []
    # the API description is public; an unknown path is no way around authentication
    assert httpx.get(f"{url}/openapi.json").status_code == 200
    assert httpx.get(f"{url}/docs").status_code == 200
    assert httpx.get(f"{url}/v1/no-such-route").status_code == 401
    metrics = httpx.get(f"{url}/metrics", headers={"authorization": f"Bearer {TOKENS[READER]}"}).text
    assert 'skiff_metadata_requests_refused_total{reason="missing"} 2' in metrics
    assert 'skiff_metadata_requests_refused_total{reason="invalid"} 3' in metrics  # bad bearer, two bad basic
    assert 'skiff_metadata_requests_refused_total{reason="forbidden"} 1' in metrics


def test_unauthenticated_body_is_not_read(served: Served) -> None:
    """A request without a token is refused before its body: 401, not 413 or 422."""
    url = served.url()
    big = httpx.post(f"{url}/v1/commit-file", content=b"x" * (65 * 1024 * 1024))
    assert big.status_code == 401
    garbage = httpx.post(f"{url}/v1/topics/create", content=b"{not json")
    assert garbage.status_code == 401
    authed = httpx.post(
        f"{url}/v1/topics/create", content=b"{not json", headers={"authorization": f"Bearer {TOKENS[AGENT]}"}
    )
    assert authed.status_code == 422  # authenticated: the usual validation answer


# ------------------------------------------------------------------ every route


def _walk(app: FastAPI, url: str) -> list[tuple[str, str, set[str]]]:
    """(method, path, roles admitted) of every route, checked over HTTP."""
    seen = []
    with httpx.Client(base_url=url) as http:
        for path, route in iter_routes(app.routes):
            if not isinstance(route, APIRoute):
                # FastAPI's own API description is the only non-API route; anything else
                # would bypass the role check (dependencies run on APIRoutes only).
                assert path in FASTAPI_DOC_PATHS, f"route {path} is not an APIRoute"
                continue
            allowed = allowed_roles(route)
            for method in route.methods:
                anon = http.request(method, path, content=b"{}")
                if allowed is None:
                    assert path in PUBLIC_PATHS, f"{path} is public"
                    assert anon.status_code == 200, (path, anon.status_code)
                    seen.append((method, path, set(ROLES)))
                    continue
                assert anon.status_code == 401, (method, path, anon.status_code)
                admitted = set()
                for role, token in TOKENS.items():
                    r = http.request(
                        method, path, content=b"{}", headers={"authorization": f"Bearer {token}"}
                    )
                    if role in allowed:
                        assert r.status_code not in (401, 403), (method, path, role, r.text)
                        admitted.add(role)
                    else:
                        assert r.status_code == 403, (method, path, role, r.status_code)
                assert ADMIN in admitted
                seen.append((method, path, admitted))
    return seen


def test_every_route_declares_its_roles_and_is_enforced(app: FastAPI) -> None:
    @app.post("/v1/added-later")  # a route someone adds without declaring roles
    def added_later() -> dict[str, str]:
        return {"ok": "yes"}

    served = Served(app)
    try:
        seen = dict(((m, p), roles) for m, p, roles in _walk(app, served.url()))
    finally:
        served.close()
    assert seen[("POST", "/v1/added-later")] == {ADMIN}  # undeclared: admin only
    assert seen[("POST", "/v1/commit-file")] == {AGENT, ADMIN}
    assert seen[("POST", "/v1/agents/heartbeat")] == {AGENT, ADMIN}
    assert seen[("POST", "/v1/replace-chunks")] == {COMPACTOR, ADMIN}
    assert seen[("POST", "/v1/topics/describe")] == {AGENT, COMPACTOR, READER, ADMIN}
    assert seen[("GET", "/healthz")] == set(ROLES)
    # every admin-only route but the added one is an operator route (or a console action),
    # declared so on purpose
    declared_admin_only = [k for k, v in seen.items() if v == {ADMIN} and k[1] != "/v1/added-later"]
    registry_admin = {"/config", "/config/{subject}", "/mode", "/mode/{subject}", "/subjects/{subject}"}
    registry_admin |= {"/subjects/{subject}/versions/{version}"}
    assert declared_admin_only and all(
        path.startswith(("/v1/admin/", "/console/actions/", "/v1/schemas/delete-", "/v1/schemas/set-"))
        or (method in ("PUT", "DELETE") and path in registry_admin)
        for method, path in declared_admin_only
    )
    # the schema registry: reads for every role, registering for writers, changes for admin
    assert seen[("POST", "/subjects/{subject}/versions")] == {WRITER, ADMIN}
    assert seen[("POST", "/v1/schemas/register")] == {WRITER, ADMIN}
    assert seen[("GET", "/schemas/ids/{schema_id}")] == {AGENT, COMPACTOR, READER, WRITER, ADMIN}
    assert seen[("DELETE", "/subjects/{subject}")] == {ADMIN}
    assert seen[("POST", "/v1/acls/create")] == {AGENT, ADMIN}
    assert seen[("POST", "/v1/scram-users/upsert")] == {AGENT, ADMIN}
    assert seen[("POST", "/v1/txn/end")] == {AGENT, ADMIN}
    assert len(seen) >= 45


def test_routes_of_an_included_router_are_admin_only_unless_declared(service: MetadataService) -> None:
    from fastapi import APIRouter
    from skiff.metadata.server.auth import allow

    app = create_app(service, tokens=TokenTable.parse(TOKENS_TEXT, "test"))
    router = APIRouter()

    @router.post("/v1/test-only/undeclared")
    def users() -> list[str]:
        return []

    @router.post("/v1/test-only/reader", dependencies=[allow(READER)])
    def acls() -> list[str]:
        return []

    app.include_router(router)
    # a declaration given to include_router is not seen by the check: fails closed
    late = APIRouter()

    @late.post("/v1/late")
    def late_route() -> list[str]:
        return []

    app.include_router(late, dependencies=[allow(READER)])
    served = Served(app)
    try:
        with httpx.Client(base_url=served.url()) as http:

            def status(path: str, role: str) -> int:
                return http.post(path, headers={"authorization": f"Bearer {TOKENS[role]}"}).status_code

            assert [status("/v1/test-only/undeclared", r) for r in (AGENT, COMPACTOR, READER, ADMIN)] == [
                403,
                403,
                403,
                200,
            ]
            assert [status("/v1/test-only/reader", r) for r in (AGENT, COMPACTOR, READER, ADMIN)] == [
                403,
                403,
                200,
                200,
            ]
            assert http.post("/v1/test-only/undeclared").status_code == 401
            assert [status("/v1/late", r) for r in (AGENT, COMPACTOR, READER, ADMIN)] == [403, 403, 403, 200]
    finally:
        served.close()


# ------------------------------------------------------------------ fake agents


def test_fake_agent_registration_is_refused(served: Served) -> None:
    async def go() -> None:
        fake = AgentInfo("attacker", "203.0.113.9", 9092, None)
        for who, code in ((None, SASL_AUTHENTICATION_FAILED), (READER, CLUSTER_AUTHORIZATION_FAILED)):
            md = client(served.url(), who)
            try:
                assert await _outcome(md.heartbeat_agent(fake)) == code
            finally:
                await md.close()
        md = client(served.url(), COMPACTOR)
        try:
            assert await _outcome(md.heartbeat_agent(fake)) == CLUSTER_AUTHORIZATION_FAILED
            assert await md.live_agents() == []  # nothing was registered
        finally:
            await md.close()
        md = client(served.url(), AGENT)
        try:
            await md.heartbeat_agent(AgentInfo("real", "127.0.0.1", 9092, None))
            assert [a.agent_id for a in await md.live_agents()] == ["real"]
        finally:
            await md.close()

    asyncio.run(go())


# ------------------------------------------------------------------ health


def test_health_endpoints_need_no_token_and_readyz_follows_the_database(
    served: Served, service: MetadataService
) -> None:
    url = served.url()
    assert httpx.get(f"{url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{url}/readyz").json() == {"status": "ok"}
    # the database becomes unreachable (an engine on a port nothing listens on)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    working = service.engine
    service.engine = create_engine(
        f"postgresql+psycopg://skiff@127.0.0.1:{dead_port}/none", connect_args={"connect_timeout": 2}
    )
    try:
        r = httpx.get(f"{url}/readyz", timeout=30)
        assert r.status_code == 503
        assert r.json()["status"] == "unavailable" and "OperationalError" in r.json()["message"]
        assert httpx.get(f"{url}/healthz").status_code == 200  # alive all the same
    finally:
        service.engine.dispose()
        service.engine = working
    assert httpx.get(f"{url}/readyz").status_code == 200


def test_open_service_without_tokens(service: MetadataService) -> None:
    served = Served(create_app(service))
    try:
        assert httpx.get(f"{served.url()}/v1/topics").status_code == 200
        assert (
            httpx.post(
                f"{served.url()}/v1/agents/heartbeat",
                json={"agent": {"agent_id": "a", "host": "h", "port": 1}},
            ).status_code
            == 200
        )
    finally:
        served.close()


# ------------------------------------------------------------------ TLS


def _cert(
    subject: str, issuer_key: Any, issuer: x509.Name | None, *, ca: bool, san: bool = False
) -> tuple[Any, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        b = b.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        b = b.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    if san:
        import ipaddress

        b = b.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return key, b.sign(issuer_key or key, hashes.SHA256())


def _write(path: Path, key: Any, cert: x509.Certificate) -> tuple[str, str]:
    cert_path, key_path = path.with_suffix(".pem"), path.with_suffix(".key")
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return str(cert_path), str(key_path)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("pki")
    ca_key, ca = _cert("skiff test CA", None, None, ca=True)
    ca_path, _ = _write(d / "ca", ca_key, ca)
    server_key, server = _cert("skiff-metadata", ca_key, ca.subject, ca=False, san=True)
    server_cert, server_key_path = _write(d / "server", server_key, server)
    client_key, client_cert_obj = _cert("skiff-agent", ca_key, ca.subject, ca=False)
    client_cert, client_key_path = _write(d / "client", client_key, client_cert_obj)
    other_key, other = _cert("someone else's CA", None, None, ca=True)
    other_path, _ = _write(d / "other-ca", other_key, other)
    return {
        "ca": ca_path,
        "server_cert": server_cert,
        "server_key": server_key_path,
        "client_cert": client_cert,
        "client_key": client_key_path,
        "other_ca": other_path,
    }


def test_tls_with_token(app: FastAPI, pki: dict[str, str]) -> None:
    served = Served(app, **tls_settings(pki["server_cert"], pki["server_key"], None))
    try:

        async def go() -> None:
            md = client(served.url("https"), READER, ca_file=pki["ca"])
            try:
                assert await md.list_topics() == []
            finally:
                await md.close()
            for ca in (None, pki["other_ca"]):  # the system CAs / a foreign CA: not trusted
                md = client(served.url("https"), READER, ca_file=ca)
                try:
                    with pytest.raises(MetadataUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
                        await md.list_topics()
                finally:
                    await md.close()

        asyncio.run(go())
        with pytest.raises(httpx.RemoteProtocolError):  # plain HTTP to the TLS port
            httpx.get(f"{served.url()}/healthz")
    finally:
        served.close()


def test_mtls_requires_a_client_certificate(app: FastAPI, pki: dict[str, str]) -> None:
    served = Served(app, **tls_settings(pki["server_cert"], pki["server_key"], pki["ca"]))
    try:

        async def go() -> None:
            md = client(
                served.url("https"),
                READER,
                ca_file=pki["ca"],
                cert_file=pki["client_cert"],
                key_file=pki["client_key"],
            )
            try:
                assert await md.list_topics() == []
            finally:
                await md.close()
            md = client(served.url("https"), READER, ca_file=pki["ca"])
            try:
                with pytest.raises(MetadataUnavailable):
                    await md.list_topics()
            finally:
                await md.close()

        asyncio.run(go())
    finally:
        served.close()


def test_tls_settings_are_checked_up_front(pki: dict[str, str], tmp_path: Path) -> None:
    assert tls_settings(None, None, None) == {}
    with pytest.raises(ValueError, match="go together"):
        tls_settings(pki["server_cert"], None, None)
    with pytest.raises(ValueError, match="needs --tls-cert"):
        tls_settings(None, None, pki["ca"])
    with pytest.raises(ValueError, match="cannot load"):
        tls_settings(str(tmp_path / "missing.pem"), pki["server_key"], None)
    with pytest.raises(ValueError, match="cannot load"):
        tls_settings(pki["server_cert"], pki["client_key"], None)  # key of another certificate
    full = tls_settings(pki["server_cert"], pki["server_key"], pki["ca"])
    assert full["ssl_cert_reqs"] == ssl.CERT_REQUIRED and full["ssl_ca_certs"] == pki["ca"]
