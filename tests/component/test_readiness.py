"""Readiness tells the truth (agent.health, agent.agent_registry), with real agents
(`start_agent`) over one metadata service: an agent whose bucket cannot be written answers
/readyz 503 naming the cause, heartbeats as not ready, leads no partition and coordinates no
group in anyone's Metadata/FindCoordinator answers (its own included: it points clients at
the healthy agent); when the bucket recovers it is ready again and leads its share. Alone
and not ready, partitions have no leader (LEADER_NOT_AVAILABLE) and groups no coordinator.
A ready agent whose probe fails once (fewer times in a row than readiness_failure_threshold)
stays ready and keeps its partitions.

The probes and heartbeats are driven by the test (`monitor.probe()`, `registry.beat_once()`);
the agents' own loops run every minute, so they never race the assertions.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName
from kio.static.primitive import i8
from skiff.agent import routing
from skiff.agent.config import AgentConfig
from skiff.agent.runtime import RunningAgent, start_agent
from skiff.fileformat.objectstore import open_async_store
from skiff.fileformat.objectstore.errors import StorageError
from skiff.fileformat.objectstore.memory import AsyncMemoryStore
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService

from tests.component.fake_metadata import request_once
from tests.support.agents import free_port

PARTITIONS = 24


class UnwritableStore(AsyncMemoryStore):
    """A memory store whose PUTs fail as S3's do for a bucket that does not exist."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.broken = True

    async def put(self, key: str, data: Any) -> None:
        if self.broken:
            raise StorageError("NoSuchBucket: The specified bucket does not exist", key=key)
        await super().put(key, data)


def _config(agent_id: str) -> AgentConfig:
    return AgentConfig.from_env(
        {},
        agent_id=agent_id,
        host="127.0.0.1",
        port=0,
        heartbeat_interval_ms=60_000,
        agent_ttl_ms=120_000,
        readiness_probe_interval_ms=60_000,
    )


def _http(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


async def _leaders(agent: RunningAgent, topic: str) -> list[tuple[int, int]]:
    """(error code, leader id) of every partition, from a Metadata request to `agent`."""
    req = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    resp = await asyncio.to_thread(request_once, agent.bootstrap, req)
    (t,) = resp.topics
    assert t.error_code == ErrorCode.none
    return [
        (int(p.error_code), int(p.leader_id)) for p in sorted(t.partitions, key=lambda p: p.partition_index)
    ]


async def _coordinators(agent: RunningAgent, groups: list[str]) -> list[tuple[int, int]]:
    out = []
    for g in groups:
        resp = await asyncio.to_thread(
            request_once, agent.bootstrap, FindCoordinatorRequest(key=g, key_type=i8(0))
        )
        out.append((int(resp.error_code), int(resp.node_id)))
    return out


@pytest.fixture
def md(tmp_path: Path) -> LocalMetadataClient:
    return LocalMetadataClient(MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}"), owns_service=True)


async def test_an_agent_that_cannot_write_its_bucket_leads_nothing_until_it_can(
    md: LocalMetadataClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="skiff.agent.health")
    good = await start_agent(_config("good"), md, open_async_store(f"memory://good-{uuid.uuid4().hex}"))
    store = UnwritableStore(f"bad-{uuid.uuid4().hex}")
    bad = await start_agent(_config("bad"), md, store)
    port = free_port()
    bad.serve_health("127.0.0.1", port)
    try:
        await good.registry.beat_once()  # good now sees bad (not ready)
        listed = {a.agent_id: a.ready for a in await md.live_agents()}
        assert listed == {"good": True, "bad": False}  # registered, not ready
        assert good.context.agents.agent_ids() == bad.context.agents.agent_ids() == ("good",)

        status, body = await asyncio.to_thread(_http, port, "/readyz")
        assert status == 503, body
        assert body.startswith(
            f"not ready: bucket {store.url}: PUT _skiff/readiness/bad failed: StorageError: NoSuchBucket"
        )
        errors = [
            r.getMessage()
            for r in caplog.records
            if r.levelno == logging.ERROR and r.name == "skiff.agent.health"
        ]
        assert errors == ["agent bad not ready: " + body.removeprefix("not ready: ").strip()]
        metrics = (await asyncio.to_thread(_http, port, "/metrics"))[1]
        assert "skiff_agent_ready 0.0" in metrics
        assert 'skiff_readiness_probe_failures_total{dependency="bucket"} 1.0' in metrics

        topic = await md.create_topic(f"t-{uuid.uuid4().hex[:8]}", PARTITIONS, {})
        good_id = good.context.agents.self_node_id
        bad_id = bad.context.agents.self_node_id
        for asked in (good, bad):  # the agent that is not ready answers too, naming the good one
            assert await _leaders(asked, topic.name) == [(0, good_id)] * PARTITIONS
        groups = [f"g{i}" for i in range(16)]
        for asked in (good, bad):
            assert await _coordinators(asked, groups) == [(0, good_id)] * len(groups)
        assert not any(bad.context.parts.transactions.coordinates(f"tx{i}") for i in range(16))

        # the bucket recovers: ready again at the next probe, and leads its share again
        store.broken = False
        assert (await bad.readiness.monitor.probe()).ready  # type: ignore[union-attr]
        await bad.registry.beat_once()
        await good.registry.beat_once()
        assert {a.agent_id: a.ready for a in await md.live_agents()} == {"good": True, "bad": True}
        assert await asyncio.to_thread(_http, port, "/readyz") == (200, "ready\n")
        owners = [routing.partition_owner(topic.topic_id, p, ["bad", "good"]) for p in range(PARTITIONS)]
        assert "bad" in owners and "good" in owners
        expected = [(0, bad_id if o == "bad" else good_id) for o in owners]
        for asked in (good, bad):
            assert await _leaders(asked, topic.name) == expected
        assert {n for _, n in await _coordinators(good, groups)} == {good_id, bad_id}
        infos = [
            r.getMessage()
            for r in caplog.records
            if r.levelno == logging.INFO and r.name == "skiff.agent.health"
        ]
        assert len(infos) == 1 and infos[0].startswith("agent bad ready again after ")
        assert "skiff_agent_ready 1.0" in (await asyncio.to_thread(_http, port, "/metrics"))[1]
    finally:
        await bad.close()
        await good.close()


async def test_alone_and_not_ready_there_is_no_leader_and_no_coordinator(md: LocalMetadataClient) -> None:
    agent = await start_agent(_config("alone"), md, UnwritableStore(f"alone-{uuid.uuid4().hex}"))
    try:
        topic = await md.create_topic(f"t-{uuid.uuid4().hex[:8]}", 3, {})
        leader_not_available = int(ErrorCode.leader_not_available)
        assert await _leaders(agent, topic.name) == [(leader_not_available, -1)] * 3
        assert await _coordinators(agent, ["g"]) == [(int(ErrorCode.coordinator_not_available), -1)]
    finally:
        await agent.close()


async def test_a_file_bucket_that_cannot_be_written_is_not_ready(
    md: LocalMetadataClient, tmp_path: Path
) -> None:
    root = tmp_path / "bucket"
    store = open_async_store(f"file://{root}")  # opening checks the directory ...
    root.rmdir()  # ... which then goes (a volume unmounted) and a file takes its place
    root.write_bytes(b"a file where the bucket directory should be")
    agent = await start_agent(_config("file"), md, store)
    try:
        assert agent.readiness is not None
        v = agent.readiness.check()
        assert not v.ready and v.reason.startswith(f"bucket {store.url}: PUT _skiff/readiness/file failed"), v
        assert [a.ready for a in await md.live_agents()] == [False]
    finally:
        await agent.close()


async def test_one_failed_probe_moves_no_partition_three_in_a_row_do(md: LocalMetadataClient) -> None:
    """readiness_failure_threshold (3 by default): a probe failing once, as a PUT in a store's
    latency tail does, leaves the agent ready, heartbeating ready and leading its share; three
    in a row turn it not ready, and its partitions go to the other agent."""
    good = await start_agent(_config("steady"), md, open_async_store(f"memory://steady-{uuid.uuid4().hex}"))
    store = UnwritableStore(f"blip-{uuid.uuid4().hex}")
    store.broken = False
    blip = await start_agent(_config("blip"), md, store)
    try:
        assert blip.readiness is not None and blip.readiness.monitor.failure_threshold == 3
        await good.registry.beat_once()
        topic = await md.create_topic(f"t-{uuid.uuid4().hex[:8]}", PARTITIONS, {})
        shared = await _leaders(good, topic.name)
        blip_id = blip.context.agents.self_node_id
        assert (0, blip_id) in shared  # it leads its share

        store.broken = True
        for n in (1, 2):
            verdict = await blip.readiness.monitor.probe()
            assert verdict.ready and f"{n} of 3 probes in a row failed" in verdict.reason, verdict
            await blip.registry.beat_once()
            await good.registry.beat_once()
            assert {a.agent_id: a.ready for a in await md.live_agents()} == {"steady": True, "blip": True}
            assert await _leaders(good, topic.name) == shared
            assert await _leaders(blip, topic.name) == shared
        assert not (await blip.readiness.monitor.probe()).ready  # the third in a row
        await blip.registry.beat_once()
        await good.registry.beat_once()
        assert {a.agent_id: a.ready for a in await md.live_agents()} == {"steady": True, "blip": False}
        good_id = good.context.agents.self_node_id
        assert await _leaders(good, topic.name) == [(0, good_id)] * PARTITIONS
    finally:
        await blip.close()
        await good.close()
