"""SCRAM credentials in metadata (metadata.security.scram_users) on SQLite and PostgreSQL, through
the service, the in-process client and the HTTP client over real TCP; agent rows with
listeners, and rows from before migration 0005 (no listeners) still readable."""

from __future__ import annotations

import asyncio

import pytest
from skiff.metadata.db import upgrade_to_head
from skiff.metadata.errors import MetadataError
from skiff.metadata.security.scram_types import (
    ScramCredential,
    ScramCredentialInfo,
    make_credential,
    password_matches,
)
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import AgentInfo
from skiff.metadata.wire.http_client import HttpMetadataClient
from sqlalchemy import create_engine, text

from tests.component.test_metadata_http import ServerThread


async def _flow(md: LocalMetadataClient | HttpMetadataClient) -> None:
    alice256 = make_credential("alice", "SCRAM-SHA-256", "pw1", iterations=4096)
    alice512 = make_credential("alice", "SCRAM-SHA-512", "pw1", iterations=8192)
    await md.upsert_scram_credential(alice256)
    await md.upsert_scram_credential(alice512)
    await md.upsert_scram_credential(make_credential("bob,=x", "SCRAM-SHA-512", "pw2", iterations=4096))
    assert await md.describe_scram_users(None) == [
        ScramCredentialInfo("alice", "SCRAM-SHA-256", 4096),
        ScramCredentialInfo("alice", "SCRAM-SHA-512", 8192),
        ScramCredentialInfo("bob,=x", "SCRAM-SHA-512", 4096),
    ]
    assert await md.describe_scram_users(["bob,=x", "nobody"]) == [
        ScramCredentialInfo("bob,=x", "SCRAM-SHA-512", 4096)
    ]
    assert await md.describe_scram_users([]) == []
    assert await md.scram_credentials("alice") == [alice256, alice512]  # bytes survive the trip
    assert await md.scram_credentials("nobody") == []
    # a new password replaces the credential
    await md.upsert_scram_credential(make_credential("alice", "SCRAM-SHA-256", "pw2", iterations=4096))
    (new256, _) = await md.scram_credentials("alice")
    assert password_matches(new256, "pw2") and not password_matches(new256, "pw1")
    await md.delete_scram_credential("alice", "SCRAM-SHA-256")
    assert [c.mechanism for c in await md.scram_credentials("alice")] == ["SCRAM-SHA-512"]
    with pytest.raises(MetadataError) as e:
        await md.delete_scram_credential("alice", "SCRAM-SHA-256")
    assert e.value.error_code == 91  # RESOURCE_NOT_FOUND
    with pytest.raises(MetadataError) as e:
        await md.delete_scram_credential("alice", "SCRAM-MD5")
    assert e.value.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
    weak = ScramCredential("w", "SCRAM-SHA-256", b"salt", 10, alice256.stored_key, alice256.server_key)
    with pytest.raises(MetadataError) as e:
        await md.upsert_scram_credential(weak)
    assert e.value.error_code == 93  # UNACCEPTABLE_CREDENTIAL
    short = ScramCredential("w", "SCRAM-SHA-512", b"salt", 4096, alice256.stored_key, alice256.server_key)
    with pytest.raises(MetadataError) as e:
        await md.upsert_scram_credential(short)  # SHA-256-sized keys for SHA-512
    assert e.value.error_code == 93


def test_scram_users_in_process(db_url: str) -> None:
    md = LocalMetadataClient(MetadataService.from_url(db_url), owns_service=True)

    async def go() -> None:
        try:
            await _flow(md)
        finally:
            await md.close()

    asyncio.run(go())


def test_scram_users_over_http(db_url: str) -> None:
    svc = MetadataService.from_url(db_url)
    try:
        with ServerThread(svc) as url:

            async def go() -> None:
                md = HttpMetadataClient(url, timeout_s=30)
                try:
                    await _flow(md)
                finally:
                    await md.close()

            asyncio.run(go())
    finally:
        svc.close()


def test_scram_routes_refuse_malformed_input(db_url: str) -> None:
    import httpx

    svc = MetadataService.from_url(db_url)
    try:
        with ServerThread(svc) as url:
            good = {"user": "u", "mechanism": "SCRAM-SHA-256", "salt": "c2FsdA==", "iterations": 4096}
            for body in (
                {**good, "stored_key": "not base64!", "server_key": "AA=="},
                {**good, "stored_key": "AA==", "server_key": "AA==", "extra": 1},
                {"user": "", "mechanism": "SCRAM-SHA-256"},
            ):
                r = httpx.post(f"{url}/v1/scram-users/upsert", json=body)
                assert 400 <= r.status_code < 500 and isinstance(r.json()["error_code"], int), r.text
            r = httpx.post(f"{url}/v1/scram-users/describe", json={"users": ["x"] * 10_001})
            assert 400 <= r.status_code < 500
    finally:
        svc.close()


def test_agent_listeners_are_stored_and_rows_without_them_stay_readable(db_url: str) -> None:
    svc = MetadataService.from_url(db_url)
    try:
        listeners = (("PLAINTEXT", "10.0.0.1", 9092), ("SASL_SSL", "kafka.example.com", 9094))
        svc.heartbeat_agent(AgentInfo("a1", "10.0.0.1", 9092, "z1", listeners=listeners))
        # a row as written before migration 0005 (and by agents that know no listeners)
        with svc.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO agents (agent_id, host, port, zone, last_heartbeat_ms) "
                    "VALUES ('old', '10.0.0.2', 9092, NULL, :now)"
                ),
                {"now": svc.clock()},
            )
        by_id = {a.agent_id: a for a in svc.live_agents()}
        assert by_id["a1"].listeners == listeners
        assert (by_id["old"].host, by_id["old"].port, by_id["old"].listeners) == ("10.0.0.2", 9092, ())
    finally:
        svc.close()


def test_migration_0005_keeps_existing_agent_rows(tmp_path: pytest.TempPathFactory) -> None:
    """Upgrade a database at revision 0004 holding an agent row: the row survives, listener-less."""
    from alembic import command
    from skiff.metadata.db import _alembic_config

    url = f"sqlite:///{tmp_path}/old.db"
    engine = create_engine(url)
    with engine.begin() as conn:
        command.upgrade(_alembic_config(conn), "0004")
        conn.execute(
            text("INSERT INTO agents (agent_id, host, port, last_heartbeat_ms) VALUES ('a', 'h', 1, 0)")
        )
    upgrade_to_head(engine)
    with engine.connect() as conn:
        row = conn.execute(text("SELECT agent_id, host, port, listeners FROM agents")).one()
        assert tuple(row) == ("a", "h", 1, None)
        assert conn.execute(text("SELECT count(*) FROM scram_credentials")).scalar() == 0
    engine.dispose()
