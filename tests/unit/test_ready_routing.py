"""LiveAgents and readiness (agent.agent_registry): agents that are not ready keep their node
id but lead no partition, coordinate no group or transaction and are not listed as brokers
by others; an agent that is not ready still lists itself and points at the ready ones; with
no agent ready partitions have no leader (NO_LEADER) and groups no coordinator."""

from __future__ import annotations

import asyncio
import uuid

from skiff.agent import routing
from skiff.agent.agent_registry import NO_LEADER, AgentRegistry, LiveAgents
from skiff.metadata.types import AgentInfo

TOPIC = uuid.UUID("8d3c4a2e-0f5b-4c1e-9a77-1e2f3a4b5c6d")
NOW = 1_000_000


def _view(agent_id: str = "agent-a") -> LiveAgents:
    return LiveAgents(AgentInfo(agent_id, "10.0.0.1", 9092), ttl_ms=10_000, wall_ms=lambda: NOW)


def _other(agent_id: str, ready: bool) -> AgentInfo:
    return AgentInfo(agent_id, "10.0.0.2", 9092, last_heartbeat_ms=NOW, ready=ready)


def test_others_that_are_not_ready_lead_nothing_and_keep_their_node_id() -> None:
    view = _view()
    view.update([_other("agent-b", True), _other("agent-c", True)])
    ids_before = {b.agent_id: b.node_id for b in view.brokers()}
    view.update([_other("agent-b", True), _other("agent-c", False)])
    assert {b.agent_id for b in view.brokers()} == {"agent-a", "agent-b"}
    assert view.agent_ids() == ("agent-a", "agent-b")
    by_node = {b.node_id: b.agent_id for b in view.brokers()}
    leaders = [by_node[n] for n in view.leaders_for_topic(TOPIC, 100)]
    assert leaders == [routing.partition_owner(TOPIC, p, ["agent-a", "agent-b"]) for p in range(100)]
    groups = [view.coordinator_for_group(f"g{i}") for i in range(50)]
    assert {g.agent_id for g in groups if g is not None} == {"agent-a", "agent-b"}
    assert all(b.node_id == ids_before[b.agent_id] for b in view.brokers())


def test_this_agent_not_ready_points_at_the_ready_ones() -> None:
    view = _view()
    view.update([_other("agent-b", True)])
    version = view.version
    view.set_self_ready(False)
    assert view.version == version + 1 and not view.self_ready
    assert {b.agent_id for b in view.brokers()} == {"agent-a", "agent-b"}  # it still answers
    b = view.broker(view.leader_for(TOPIC, 0))
    assert b is not None and b.agent_id == "agent-b"
    assert set(view.leaders_for_topic(TOPIC, 50)) == {b.node_id}
    assert all(not view.coordinates_group(f"g{i}") for i in range(50))
    assert view.controller_id == b.node_id
    view.set_self_ready(True)
    assert view.self_node_id in view.leaders_for_topic(TOPIC, 50)


def test_no_ready_agent_means_no_leader_and_no_coordinator() -> None:
    view = _view()
    view.update([_other("agent-b", False)])
    view.set_self_ready(False)
    assert view.leaders_for_topic(TOPIC, 3) == (NO_LEADER,) * 3
    assert view.coordinator_for_group("g") is None and not view.coordinates_group("g")
    assert view.controller_id == view.self_node_id  # admin requests need metadata only
    assert [b.agent_id for b in view.brokers()] == ["agent-a"]


async def test_a_readiness_change_is_heartbeated_at_once() -> None:
    """wake() beats now, not at the next interval (an hour here), carrying `ready`."""

    class Metadata:
        def __init__(self) -> None:
            self.beats: asyncio.Queue[AgentInfo] = asyncio.Queue()

        async def heartbeat_agent(self, info: AgentInfo) -> None:
            self.beats.put_nowait(info)

        async def live_agents(self) -> list[AgentInfo]:
            return []

    view = _view()
    md = Metadata()
    registry = AgentRegistry(md, view, interval_ms=3_600_000)  # type: ignore[arg-type]
    await registry.start()
    try:
        assert (await md.beats.get()).ready
        view.set_self_ready(False)
        registry.wake()
        info = await asyncio.wait_for(md.beats.get(), 30)  # a bound on a hang, not a timing
        assert info.ready is False and info.agent_id == "agent-a"
    finally:
        await registry.close(deregister=False)
