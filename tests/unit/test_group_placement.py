"""Where a group is coordinated (agent.groups.placement): with its lease holder whatever the
zones, else the rendezvous choice in the client's zone; the holder cache (TTLs, bound, metadata
out of reach); and the fence's check (agent.groups.fencing) agreeing with it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from kio.schema.errors import ErrorCode
from skiff.agent import routing
from skiff.agent.agent_registry import LiveAgents
from skiff.agent.groups.fencing import GroupFence
from skiff.agent.groups.placement import GroupPlacement, placement_families
from skiff.metadata.errors import MetadataUnavailable
from skiff.metadata.groups.lease_types import LeaseGrant
from skiff.metadata.types import AgentInfo

NOW = 1_000_000
ZONES = {"agent-0": "zone-a", "agent-1": "zone-a", "agent-2": "zone-b"}


class FakeLeases:
    """`group_lease_holders` and `acquire_group_lease` over a dict, counting calls."""

    def __init__(self, holders: dict[str, str] | None = None) -> None:
        self.holders = dict(holders or {})
        self.reads: list[list[str]] = []
        self.acquisitions: list[str] = []
        self.down = False

    async def group_lease_holders(self, group_ids: Sequence[str]) -> dict[str, str]:
        self.reads.append(list(group_ids))
        if self.down:
            raise MetadataUnavailable("metadata unreachable")
        return {g: self.holders[g] for g in group_ids if g in self.holders}

    async def acquire_group_lease(self, group_id: str, agent_id: str, ttl_ms: int) -> LeaseGrant:
        self.acquisitions.append(group_id)
        holder = self.holders.setdefault(group_id, agent_id)
        return LeaseGrant(group_id, holder == agent_id, holder, 1, NOW + ttl_ms)


def _view(me: str = "agent-0", ready: set[str] | None = None) -> LiveAgents:
    ready = set(ZONES) if ready is None else ready
    infos = {
        a: AgentInfo(a, "127.0.0.1", 9092 + i, z, last_heartbeat_ms=NOW, ready=a in ready)
        for i, (a, z) in enumerate(ZONES.items())
    }
    view = LiveAgents(infos[me], ttl_ms=10_000, wall_ms=lambda: NOW)
    view.update([i for a, i in infos.items() if a != me])
    return view


class Clock:
    def __init__(self) -> None:
        self.ms = 0.0

    def __call__(self) -> float:
        return self.ms


def _placement(leases: FakeLeases, view: LiveAgents | None = None, **kw: int) -> tuple[GroupPlacement, Clock]:
    clock = Clock()
    return GroupPlacement(leases, view or _view(), monotonic_ms=clock, **kw), clock  # type: ignore[arg-type]


def _zone_a_group() -> str:
    """A group whose zone-a choice is agent-1 (so agent-0 is not it)."""
    return next(
        f"g{i}" for i in range(100) if routing.group_owner(f"g{i}", ["agent-0", "agent-1"]) == "agent-1"
    )


def test_a_leased_group_stays_with_its_holder_whatever_the_clients_zone() -> None:
    async def run() -> None:
        placement, _ = _placement(FakeLeases({"g": "agent-0"}))
        for zone in ("zone-a", "zone-b", None, "zone-elsewhere"):
            b = await placement.choose("g", zone)
            assert b is not None and b.agent_id == "agent-0"

    asyncio.run(run())


def test_a_vacant_group_is_placed_in_the_clients_zone() -> None:
    async def run() -> None:
        placement, _ = _placement(FakeLeases())
        g = _zone_a_group()
        assert (await placement.choose(g, "zone-b")).agent_id == "agent-2"  # type: ignore[union-attr]
        assert (await placement.choose(g, "zone-a")).agent_id == "agent-1"  # type: ignore[union-attr]
        everyone = routing.group_owner(g, list(ZONES))
        assert (await placement.choose(g, None)).agent_id == everyone  # type: ignore[union-attr]
        assert (await placement.choose(g, "zone-c")).agent_id == everyone  # type: ignore[union-attr]

    asyncio.run(run())


def test_a_holder_gone_or_not_ready_gives_the_group_to_the_clients_zone() -> None:
    async def run() -> None:
        view = _view(ready={"agent-0", "agent-1"})  # agent-2 (zone-b) not ready
        placement, _ = _placement(FakeLeases({"g": "agent-2", "h": "agent-gone"}), view)
        for group in ("g", "h"):
            b = await placement.choose(group, "zone-b")  # zone-b has no ready agent: all of them
            assert b is not None and b.agent_id == routing.group_owner(group, ["agent-0", "agent-1"])

    asyncio.run(run())


def test_holders_are_cached_longer_than_vacancies_and_learnt_first_hand() -> None:
    async def run() -> None:
        leases = FakeLeases({"held": "agent-2"})
        placement, clock = _placement(leases, holder_ttl_ms=3_000, vacant_ttl_ms=1_000)
        await placement.choose_many(["held", "vacant"], "zone-a")
        assert leases.reads == [["held", "vacant"]]  # one read for both
        clock.ms = 999
        await placement.choose_many(["held", "vacant"], "zone-a")
        assert len(leases.reads) == 1
        clock.ms = 1_000  # the vacancy is stale, the holder is not
        await placement.choose_many(["held", "vacant"], "zone-a")
        assert leases.reads[1:] == [["vacant"]]
        placement.note("vacant", "agent-2")  # this agent was refused by agent-2
        assert (await placement.choose("vacant", "zone-a")).agent_id == "agent-2"  # type: ignore[union-attr]
        assert len(leases.reads) == 2 and placement.lookups == 2

    asyncio.run(run())


def test_the_cache_is_bounded_and_metadata_out_of_reach_keeps_the_last_known_holder() -> None:
    async def run() -> None:
        leases = FakeLeases({"g0": "agent-2"})
        placement, clock = _placement(leases, max_groups=3)
        await placement.choose_many([f"g{i}" for i in range(5)], None)
        assert len(placement._cache) == 3  # the oldest dropped
        placement.note("g0", "agent-2")
        clock.ms = 10_000  # everything stale
        leases.down = True
        assert (await placement.choose("g0", "zone-a")).agent_id == "agent-2"  # type: ignore[union-attr]
        g = _zone_a_group()
        assert (await placement.choose(g, "zone-a")).agent_id == "agent-1"  # type: ignore[union-attr]
        assert placement.cached(g) == (False, None)  # a failed read is not cached

    asyncio.run(run())


@pytest.mark.parametrize(("zone", "accepted"), [("zone-a", False), ("zone-b", True), (None, None)])
def test_the_fence_accepts_exactly_the_groups_placed_on_its_agent(
    zone: str | None, accepted: bool | None
) -> None:
    """agent-2's fence, for a vacant group whose zone-a choice is agent-1: a zone-b client's
    request is taken (lease acquired), a zone-a client's refused without asking metadata for
    the lease; a client of no zone gets the pre-zones rule (hashing over every agent)."""

    async def run() -> None:
        leases = FakeLeases()
        g = _zone_a_group()
        placement, _ = _placement(leases, _view("agent-2"))
        fence = GroupFence(leases, "agent-2", placement=placement)  # type: ignore[arg-type]
        expect = accepted if accepted is not None else routing.group_owner(g, list(ZONES)) == "agent-2"
        code = await fence.ensure(g, zone)
        assert code == (ErrorCode.none if expect else ErrorCode.not_coordinator)
        assert leases.acquisitions == ([g] if expect else [])
        if expect:  # held now: any client's request is served here, and others see it
            assert await fence.ensure(g, "zone-a") == ErrorCode.none
            other, _ = _placement(leases, _view("agent-0"))
            assert (await other.choose(g, "zone-a")).agent_id == "agent-2"  # type: ignore[union-attr]
            assert not await other.accepts(g, "zone-a")

    asyncio.run(run())


def test_a_refused_acquisition_teaches_the_holder() -> None:
    async def run() -> None:
        g = _zone_a_group()
        leases = FakeLeases({g: "agent-1"})
        placement, _ = _placement(leases, _view("agent-2"))
        placement.note(g, None)  # a stale "vacant": agent-2 believes it may take the group
        fence = GroupFence(leases, "agent-2", placement=placement)  # type: ignore[arg-type]
        assert await fence.ensure(g, "zone-b") == ErrorCode.not_coordinator
        assert placement.cached(g) == (True, "agent-1")
        assert (await placement.choose(g, "zone-b")).agent_id == "agent-1"  # type: ignore[union-attr]

    asyncio.run(run())


def test_answers_are_counted_by_zone() -> None:
    placement, _ = _placement(FakeLeases())
    view = placement.agents
    a, b = view.ready_agent("agent-0"), view.ready_agent("agent-2")
    assert a is not None and b is not None
    placement.count_answer("zone-a", a)
    placement.count_answer("zone-a", b)
    placement.count_answer(None, a)
    assert placement.answers == {"same": 1, "other": 1, "unknown": 1}
    family = next(iter(placement_families([placement])))
    assert {s.labels["client_zone"]: s.value for s in family.samples} == {"same": 1, "other": 1, "unknown": 1}
