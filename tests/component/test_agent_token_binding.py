"""Agent tokens bound to agent ids (`agent=ID:TOKEN`, metadata.server.auth), over real HTTP:

- a bound token acting as another agent id (heartbeat, deregistration, group leases, an
  offset commit under a lease, a file commit's writer) is refused with 403
  CLUSTER_AUTHORIZATION_FAILED naming the id, and nothing changes in the tables;
- the same token acts for its own id; an unbound agent token and admin act for any id;
- refusals count in /metrics (`reason="agent_id"`); the service warns once at start-up
  when agent tokens are unbound.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from skiff.metadata.errors import CLUSTER_AUTHORIZATION_FAILED, MetadataError
from skiff.metadata.groups.lease_types import LeaseToken
from skiff.metadata.inspection import count_rows
from skiff.metadata.server.app import create_app
from skiff.metadata.server.auth import TokenConfigError, TokenTable
from skiff.metadata.service import MetadataService
from skiff.metadata.types import AgentInfo, BatchSpec, ChunkSpec, FileSpec, PartitionKey
from skiff.metadata.wire.credentials import MetadataCredentials
from skiff.metadata.wire.http_client import HttpMetadataClient

from tests.support.served_app import Served

BOUND = "bound-token-" + "b" * 24  # agent-1 only
TWO = "two-ids-token-" + "t" * 24  # agent-2 and agent-3
UNBOUND = "unbound-token-" + "u" * 24
ADMIN_T = "admin-token-" + "a" * 24
READER_T = "reader-token-" + "r" * 24
TOKENS_TEXT = f"agent=agent-1:{BOUND}\nagent=agent-2,agent=agent-3:{TWO}\nagent:{UNBOUND}\nadmin:{ADMIN_T}\n"
TOKENS_TEXT += f"reader:{READER_T}\n"


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


def _client(url: str, token: str) -> HttpMetadataClient:
    return HttpMetadataClient(url, credentials=MetadataCredentials(token=token))


async def _refused(coro: object, agent_id: str) -> None:
    with pytest.raises(MetadataError) as e:
        await coro  # type: ignore[misc]
    assert e.value.error_code == CLUSTER_AUTHORIZATION_FAILED, e.value
    assert repr(agent_id) in e.value.message and "\n" not in e.value.message, e.value.message
    assert "bound to agent id" in e.value.message


def test_a_bound_token_cannot_act_as_another_agent(served: Served, service: MetadataService) -> None:
    async def go() -> None:
        admin = _client(served.url(), ADMIN_T)
        bound = _client(served.url(), BOUND)
        try:
            topic = await admin.create_topic("t", 1, {})
            other = AgentInfo("agent-2", "127.0.0.1", 9094, None)
            await admin.heartbeat_agent(other)  # the victim, registered by an admin
            grant = await admin.acquire_group_lease("g", "agent-2", 60_000)
            assert grant.granted
            before = count_rows(service.engine)

            await _refused(bound.heartbeat_agent(AgentInfo("agent-2", "203.0.113.7", 9092, None)), "agent-2")
            await _refused(
                bound.heartbeat_agent(AgentInfo("attacker", "203.0.113.7", 9092, None)), "attacker"
            )
            await _refused(bound.deregister_agent(other), "agent-2")
            await _refused(bound.acquire_group_lease("g2", "agent-2", 60_000), "agent-2")
            await _refused(bound.renew_group_leases("agent-2", [("g", grant.epoch)], 60_000), "agent-2")
            await _refused(bound.release_group_leases("agent-2", [("g", grant.epoch)]), "agent-2")
            lease = LeaseToken("agent-2", grant.epoch)
            await _refused(bound.confirm_group_generation("g", lease, 60_000, "{}"), "agent-2")
            await _refused(bound.commit_offsets("g", [], lease), "agent-2")
            spec = ChunkSpec(topic.topic_id, 0, (BatchSpec(0, 70, 1, 1, 0),))
            await _refused(
                bound.commit_file(FileSpec("segments/forged", 70, 0, "agent-2"), [spec]), "agent-2"
            )
            await _refused(bound.commit_file(FileSpec("segments/anon", 70, 0, ""), [spec]), "")

            # nothing changed: the victim is still listed at its address, its lease still held
            assert count_rows(service.engine) == before
            assert [(a.agent_id, a.host, a.port) for a in await admin.live_agents()] == [
                ("agent-2", "127.0.0.1", 9094)
            ]
            (state,) = await admin.partition_states([PartitionKey(topic.topic_id, 0)])
            assert state.high_watermark == 0
            assert (await admin.acquire_group_lease("g", "agent-3", 60_000)).granted is False
        finally:
            await admin.close()
            await bound.close()

    asyncio.run(go())


def test_a_bound_token_acts_for_its_own_ids(served: Served, service: MetadataService) -> None:
    async def go() -> None:
        admin = _client(served.url(), ADMIN_T)
        bound = _client(served.url(), BOUND)
        two = _client(served.url(), TWO)
        try:
            topic = await admin.create_topic("t", 1, {})
            me = AgentInfo("agent-1", "127.0.0.1", 9092, None)
            await bound.heartbeat_agent(me)
            grant = await bound.acquire_group_lease("g", "agent-1", 60_000)
            assert grant.granted
            assert await bound.renew_group_leases("agent-1", [("g", grant.epoch)], 60_000) == ["g"]
            await bound.confirm_group_generation("g", LeaseToken("agent-1", grant.epoch), 60_000, "{}")
            spec = ChunkSpec(topic.topic_id, 0, (BatchSpec(0, 70, 1, 1, 0),))
            (result,) = await bound.commit_file(FileSpec("segments/mine", 70, 0, "agent-1"), [spec])
            assert result.batches[0].error_code == 0
            # a token bound to two ids acts as either
            for agent_id, port in (("agent-2", 9093), ("agent-3", 9095)):
                await two.heartbeat_agent(AgentInfo(agent_id, "127.0.0.1", port, None))
            await _refused(two.heartbeat_agent(AgentInfo("agent-1", "127.0.0.1", 9092, None)), "agent-1")
            assert [a.agent_id for a in await admin.live_agents()] == ["agent-1", "agent-2", "agent-3"]
            await bound.release_group_leases("agent-1", [("g", grant.epoch)])
            await bound.deregister_agent(me)
            assert [a.agent_id for a in await admin.live_agents()] == ["agent-2", "agent-3"]
        finally:
            for md in (admin, bound, two):
                await md.close()

    asyncio.run(go())


def test_unbound_agent_tokens_and_admin_act_for_any_id(served: Served) -> None:
    async def go() -> None:
        for i, token in enumerate((UNBOUND, ADMIN_T)):
            md = _client(served.url(), token)
            try:
                await md.heartbeat_agent(AgentInfo(f"any-{i}", "127.0.0.1", 9100 + i, None))
                assert (await md.acquire_group_lease(f"g{i}", f"any-{i}", 60_000)).granted
            finally:
                await md.close()
        md = _client(served.url(), READER_T)
        try:
            assert [a.agent_id for a in await md.live_agents()] == ["any-0", "any-1"]
        finally:
            await md.close()

    asyncio.run(go())


def test_refusals_are_counted_and_unbound_tokens_warned_about(
    served: Served, service: MetadataService, caplog: pytest.LogCaptureFixture
) -> None:
    r = httpx.post(
        f"{served.url()}/v1/agents/heartbeat",
        json={"agent": {"agent_id": "agent-9", "host": "127.0.0.1", "port": 9092}},
        headers={"authorization": f"Bearer {BOUND}"},
    )
    assert r.status_code == 403
    assert r.json()["error_code"] == CLUSTER_AUTHORIZATION_FAILED
    assert r.json()["message"] == (
        "POST /v1/agents/heartbeat: this token is bound to agent id agent-1 and may not act as agent id 'agent-9'"
    )
    metrics = httpx.get(f"{served.url()}/metrics", headers={"authorization": f"Bearer {READER_T}"}).text
    assert 'skiff_metadata_requests_refused_total{reason="agent_id"} 1' in metrics

    with caplog.at_level(logging.WARNING, logger="skiff.metadata.server.app"):
        create_app(service, tokens=TokenTable.parse(TOKENS_TEXT, "test"))
        create_app(service, tokens=TokenTable.parse(f"agent=a:{BOUND}\nadmin:{ADMIN_T}", "test"))
    unbound = [r.getMessage() for r in caplog.records if "not bound to an agent id" in r.getMessage()]
    assert len(unbound) == 1 and unbound[0].startswith("1 agent token(s)")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (f"agent=:{BOUND}", "ID must be"),
        (f"agent=a=b:{BOUND}", "ID must be"),
        (f"agent=a b:{BOUND}", "expected ROLE"),
        (f"agent=a-1:{BOUND}\nagent:{BOUND}", "line 2: a token is both bound"),
        (f"agnet=a-1:{BOUND}", "unknown role"),
    ],
)
def test_malformed_bindings_are_refused_without_echoing_the_token(text: str, fragment: str) -> None:
    with pytest.raises(TokenConfigError) as e:
        TokenTable.parse(text, "tokens")
    assert fragment in str(e.value) and BOUND not in str(e.value)


def test_binding_syntax() -> None:
    table = TokenTable.parse(
        f"agent=a-1,compactor:{BOUND}\nagent=a-2:{BOUND}\nagent:{UNBOUND}\nadmin:{ADMIN_T}", "t"
    )
    bound = table.caller_for(BOUND)
    assert bound is not None and bound.agent_ids == {"a-1", "a-2"}
    assert bound.roles == {"agent", "compactor"}
    assert bound.may_act_as("a-2") and not bound.may_act_as("a-3")
    unbound = table.caller_for(UNBOUND)
    assert unbound is not None and unbound.agent_ids is None and unbound.may_act_as("anything")
    assert table.roles_for(ADMIN_T) == {"admin"}
    assert table.unbound_agent_tokens() == 1
