"""Group coordinator fencing (`agent.groups.fencing`): coordinators over a real metadata
service (SQLite), with injected clocks: metadata's clock, each agent's monotonic clock,
and the purgatories' manual clock (tests.unit.test_group_coordinator.ManualClock)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from skiff.agent.groups.consumer_model import TopicView
from skiff.agent.groups.consumer_requests import MemberRequest
from skiff.agent.groups.coordinator import GroupCoordinator
from skiff.agent.groups.embedded_protocol import decode_assignment, encode_assignment, encode_subscription
from skiff.agent.groups.fencing import GroupFence
from skiff.agent.groups.model import GroupState, JoinResult, LeaveRequest, SyncResult
from skiff.agent.groups.persistence import decode_group_state
from skiff.agent.groups.rebalance import DelayedHeartbeat
from skiff.agent.purgatory import DelayedOperation, DelayedOperationPurgatory
from skiff.agent.timing_wheel import SystemTimer
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import GroupOffset

from tests.component.fake_metadata import FlakyMetadataClient
from tests.unit.test_group_coordinator import ManualClock

E = ErrorCode
TTL = 10_000
SESSION = 10_000
REBALANCE = 30_000


class Ms:
    def __init__(self, now: float = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Agent:
    """One agent's coordinator + fence, with its own monotonic clock and routing answer."""

    def __init__(self, agent_id: str, metadata: FlakyMetadataClient, clock: ManualClock) -> None:
        self.mono = Ms()
        self.owner = True
        self.fence = GroupFence(
            metadata,
            agent_id,
            ttl_ms=TTL,
            renew_interval_ms=2_000,
            owns=lambda _g: self.owner,
            monotonic_ms=self.mono,
        )
        hb: DelayedOperationPurgatory[DelayedHeartbeat] = DelayedOperationPurgatory(
            "Heartbeat", timer=SystemTimer(now_ms=clock, sleep=clock.sleep)
        )
        rb: DelayedOperationPurgatory[DelayedOperation] = DelayedOperationPurgatory(
            "Rebalance", timer=SystemTimer(now_ms=clock, sleep=clock.sleep)
        )
        clock.purgatories += [hb, rb]
        self.gc = GroupCoordinator(
            initial_rebalance_delay_ms=0, heartbeat_purgatory=hb, rebalance_purgatory=rb, fence=self.fence
        )

    async def join(self, member_id: str = "", group: str = "g") -> JoinResult:
        code = await self.fence.ensure(group)
        if code != E.none:
            return JoinResult(code, member_id)
        fut = self.gc.join(
            group,
            member_id,
            None,
            "consumer",
            [("range", b"meta")],
            SESSION,
            REBALANCE,
            require_known_member_id=False,
        )
        return await asyncio.wait_for(fut, 5)

    def start_join(self, member_id: str = "", group: str = "g") -> asyncio.Future[JoinResult]:
        return asyncio.ensure_future(self.join(member_id, group))

    async def sync(
        self, generation: int, member_id: str, assignments: dict[str, bytes] | None = None, group: str = "g"
    ) -> SyncResult:
        code = await self.fence.ensure(group)
        if code != E.none:
            return SyncResult(code)
        fut = self.gc.sync(group, generation, member_id, None, list((assignments or {}).items()))
        return await asyncio.wait_for(fut, 5)

    def start_sync(
        self, generation: int, member_id: str, assignments: dict[str, bytes] | None = None
    ) -> asyncio.Future[SyncResult]:
        return asyncio.ensure_future(self.sync(generation, member_id, assignments))


class World:
    def __init__(self, tmp: Path) -> None:
        self.mclock = Ms()
        self.service = MetadataService.from_url(f"sqlite:///{tmp}/m.db", clock=lambda: int(self.mclock.now))
        self.service.create_topic("t", 2, {})
        self.metadata = FlakyMetadataClient(LocalMetadataClient(self.service))
        self.clock = ManualClock()

    def agent(self, agent_id: str) -> Agent:
        return Agent(agent_id, self.metadata, self.clock)

    def stored(self, group: str = "g") -> tuple[str, int, str | None]:
        with self.service.engine.connect() as conn:
            r = conn.exec_driver_sql(
                "SELECT holder, epoch, group_state FROM group_leases WHERE group_id = ?", (group,)
            ).one()
        return r[0], r[1], r[2]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    w = World(tmp_path)
    yield w
    await w.metadata.close()
    w.service.close()


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_a_generation_is_confirmed_in_metadata_before_members_learn_it(world: World) -> None:
    a = world.agent("A")
    r = await a.join()
    assert r.error == E.none and r.generation_id == 1
    holder, epoch, state = world.stored()
    assert (holder, epoch) == ("A", 1)
    stored = decode_group_state(state)
    assert (
        stored is not None
        and stored.generation_id == 1
        and [m.member_id for m in stored.members] == [r.member_id]
    )
    # metadata refuses the confirmation: the join is never answered with the generation
    world.metadata.down = True
    b_join = a.start_join()
    await settle()
    assert not b_join.done()  # the join phase waits for the old member
    follow = a.gc.join("g", r.member_id, None, "consumer", [("range", b"meta")], SESSION, REBALANCE)
    await settle()
    assert (await b_join).error == E.not_coordinator
    assert (await follow).error == E.not_coordinator
    assert "g" not in a.gc.groups and "g" not in a.fence.held
    world.metadata.down = False


async def test_a_second_agent_that_believes_it_coordinates_is_refused(world: World) -> None:
    a, b = world.agent("A"), world.agent("B")
    ra = await a.join()
    assert ra.error == E.none
    rb = await b.join()
    assert rb.error == E.not_coordinator and "g" not in b.gc.groups
    # offsets through B are refused too: it holds no lease
    assert await b.fence.ensure("g") == E.not_coordinator


async def test_the_leaders_assignment_is_stored_before_the_members_learn_it(world: World) -> None:
    a = world.agent("A")
    r = await a.join()
    world.metadata.down = True
    sync = a.start_sync(1, r.member_id, {r.member_id: b"p0"})
    await settle()
    # metadata cannot store it: the leader is never told its assignment, the group is dropped
    assert (await sync).error == E.not_coordinator
    assert "g" not in a.gc.groups and "g" not in a.fence.held
    world.metadata.down = False
    again = await a.join(r.member_id)  # re-acquired: generation 1 (stored at its join) goes on
    assert again.error == E.none and again.generation_id == 1
    assert (await a.sync(1, r.member_id, {r.member_id: b"p0"})).assignment == b"p0"
    stored = decode_group_state(world.stored()[2])
    assert stored is not None and stored.assigned and stored.generation_id == 1
    assert stored.leader_id == r.member_id
    assert [(m.member_id, m.protocols, m.assignment) for m in stored.members] == [
        (r.member_id, (("range", b"meta"),), b"p0")
    ]


async def test_routing_moves_the_group_release_lets_the_new_owner_in_at_once(world: World) -> None:
    a, b = world.agent("A"), world.agent("B")
    ra = await a.join()
    assert (await a.sync(1, ra.member_id, {ra.member_id: b"p0"})).error == E.none
    assert a.gc.heartbeat("g", 1, ra.member_id, None) == E.none
    a.owner = False  # A's view now routes the group to B
    assert await a.fence.ensure("g") == E.not_coordinator
    assert "g" not in a.gc.groups
    await a.fence.drain()  # the release runs in the background
    # B takes over at once, with the stored generation: Stable, same member and assignment
    assert await b.fence.ensure("g") == E.none
    assert world.stored()[:2] == ("B", 2)
    g = b.gc.groups["g"]
    assert (g.state, g.generation_id, g.leader_id) == (GroupState.STABLE, 1, ra.member_id)
    assert b.gc.heartbeat("g", 1, ra.member_id, None) == E.none
    assert (await b.sync(1, ra.member_id)).assignment == b"p0"
    desc = b.gc.describe("g")
    assert desc is not None and [m.assignment for m in desc.members] == [b"p0"]


async def test_takeover_after_expiry_keeps_the_generation_until_everyone_rejoined(world: World) -> None:
    a, b = world.agent("A"), world.agent("B")
    r1 = await a.join()
    assert r1.generation_id == 1
    m2 = a.start_join()
    m1b = a.start_join(r1.member_id)  # the leader rejoins for the second member
    r1, r2 = await m1b, await m2
    assert r1.generation_id == r2.generation_id == 2 and r1.leader == r1.member_id
    s2 = a.start_sync(2, r2.member_id)
    s1 = await a.sync(2, r1.member_id, {r1.member_id: b"p0", r2.member_id: b"p1"})
    assert (s1.assignment, (await s2).assignment) == (b"p0", b"p1")
    # A dies (no release). B cannot take the group before the lease lapses.
    assert (await b.join()).error == E.not_coordinator
    world.mclock.now += TTL + 1
    assert await b.fence.ensure("g") == E.none
    g = b.gc.groups["g"]
    assert g.state == GroupState.STABLE and g.generation_id == 2
    assert {m: g.members[m].assignment for m in g.members} == {r1.member_id: b"p0", r2.member_id: b"p1"}
    # the members go on in their generation: heartbeats, commits, a follower's rejoin
    assert b.gc.heartbeat("g", 2, r1.member_id, None) == E.none
    assert b.gc.validate_commit("g", 2, r2.member_id, None) == E.none
    again = await b.join(r2.member_id)
    assert (again.error, again.generation_id, g.state) == (E.none, 2, GroupState.STABLE)
    # a new member waits until both old members rejoined (their sessions restarted at the load)
    m3 = b.start_join()
    await settle()
    assert b.gc.heartbeat("g", 2, r1.member_id, None) == E.rebalance_in_progress
    o1 = b.start_join(r1.member_id)
    await settle()
    assert not m3.done() and not o1.done()
    o2 = b.start_join(r2.member_id)
    r3, n1, n2 = await m3, await o1, await o2
    assert r3.generation_id == n1.generation_id == n2.generation_id == 3
    assert json.loads(world.stored()[2] or "")["generation"] == 3


async def test_takeover_of_a_generation_whose_assignment_was_not_stored(world: World) -> None:
    a, b = world.agent("A"), world.agent("B")
    r1 = await a.join()
    m2 = a.start_join()
    r1, r2 = await a.start_join(r1.member_id), await m2
    assert r1.generation_id == 2
    # A dies before the leader's SyncGroup: generation 2 was stored without assignments
    world.mclock.now += TTL + 1
    assert await b.fence.ensure("g") == E.none
    g = b.gc.groups["g"]
    assert g.state == GroupState.COMPLETING_REBALANCE and g.generation_id == 2
    # members that lost their join answer get it again (the leader with every member's metadata)
    again = await b.join(r1.member_id)
    assert (again.generation_id, again.leader) == (2, r1.member_id)
    assert [(m.member_id, m.metadata) for m in again.members] == [
        (r1.member_id, b"meta"),
        (r2.member_id, b"meta"),
    ]
    s2 = b.start_sync(2, r2.member_id)
    await settle()
    assert not s2.done()
    s1 = await b.sync(2, r1.member_id, {r1.member_id: b"p0", r2.member_id: b"p1"})
    assert (s1.assignment, (await s2).assignment) == (b"p0", b"p1")
    assert g.state == GroupState.STABLE
    stored = decode_group_state(world.stored()[2])
    assert stored is not None and stored.assigned and stored.generation_id == 2


async def test_members_of_a_taken_over_generation_that_never_come_back_expire(world: World) -> None:
    a, b = world.agent("A"), world.agent("B")
    r1 = await a.join()
    await a.sync(1, r1.member_id, {r1.member_id: b"p0"})
    world.mclock.now += TTL + 1
    assert await b.fence.ensure("g") == E.none
    assert b.gc.groups["g"].state == GroupState.STABLE
    world.clock.advance(SESSION / 1000 + 0.1)  # no heartbeat reached B within a session
    await settle()
    assert "g" not in b.gc.groups  # the member expired; the group emptied and was forgotten
    await b.fence.drain()
    stored = decode_group_state(world.stored()[2])
    assert stored is not None and stored.members == () and stored.generation_id == 2


async def test_a_stale_coordinator_drops_its_group_when_renewal_finds_the_lease_lost(world: World) -> None:
    a, b = world.agent("A"), world.agent("B")
    ra = await a.join()
    world.mclock.now += TTL + 1
    assert await b.fence.ensure("g") == E.none  # B took over (A's lease lapsed in metadata)
    await a.fence.renew_once()
    assert "g" not in a.gc.groups and a.fence.lost == 1
    assert a.gc.heartbeat("g", 1, ra.member_id, None) == E.unknown_member_id
    assert await a.fence.ensure("g") == E.not_coordinator


async def test_a_lease_not_renewed_in_time_is_no_longer_trusted(world: World) -> None:
    a = world.agent("A")
    ra = await a.join()
    world.metadata.down = True
    await a.fence.renew_once()  # fails: the lease stays trusted until its deadline
    assert a.fence.valid("g") and "g" in a.gc.groups
    a.mono.now += TTL * 3 / 4  # three quarters of the TTL after the confirmation was sent
    assert not a.fence.valid("g") and a.fence.token("g") is None
    assert await a.fence.ensure("g") == E.coordinator_not_available
    assert "g" not in a.gc.groups
    world.metadata.down = False
    assert await a.fence.ensure("g") == E.none  # re-acquired, new epoch, generation 1 loaded
    assert world.stored()[:2] == ("A", 2)
    assert a.gc.groups["g"].state == GroupState.COMPLETING_REBALANCE  # no SyncGroup yet
    assert a.gc.heartbeat("g", 1, ra.member_id, None) == E.none


async def test_renewals_are_one_request_for_every_group(world: World) -> None:
    a = world.agent("A")
    for g in ("g1", "g2", "g3"):
        assert (await a.join(group=g)).error == E.none
    world.metadata.calls.clear()
    await a.fence.renew_once()
    assert world.metadata.calls == ["renew_group_leases"]
    assert sorted(a.fence.held) == ["g1", "g2", "g3"]


async def test_offset_commit_under_a_lost_lease_is_refused_in_metadata(world: World) -> None:
    a, b = world.agent("A"), world.agent("B")
    await a.join()
    token = a.fence.token("g")
    assert token is not None
    await world.metadata.commit_offsets("g", [GroupOffset("t", 0, 1, None, -1)], token)
    world.mclock.now += TTL + 1
    assert await b.fence.ensure("g") == E.none
    with pytest.raises(Exception) as e:
        await world.metadata.commit_offsets("g", [GroupOffset("t", 0, 2, None, -1)], token)
    assert getattr(e.value, "error_code", None) == E.not_coordinator


async def test_an_emptied_group_stores_its_state_and_releases(world: World) -> None:
    a, b = world.agent("A"), world.agent("B")
    ra = await a.join()
    assert a.gc.leave("g", [type("L", (), {"member_id": ra.member_id, "group_instance_id": None})()]) == [
        E.none
    ]  # type: ignore[list-item]
    await a.fence.drain()
    assert "g" not in a.gc.groups and "g" not in a.fence.held
    holder, _epoch, state = world.stored()
    stored = decode_group_state(state)
    assert stored is not None and stored.members == () and stored.generation_id == 2
    rb = await b.join()  # no wait for the lease to lapse, and the generation goes on
    assert rb.error == E.none and rb.generation_id == 3


async def test_a_static_member_replaced_without_a_rebalance_is_stored(world: World) -> None:
    a = world.agent("A")
    assert await a.fence.ensure("g") == E.none

    def join_static(member_id: str) -> asyncio.Future[JoinResult]:
        return a.gc.join("g", member_id, "i1", "consumer", [("range", b"meta")], SESSION, REBALANCE)

    r = await join_static("")
    assert r.error == E.none
    assert (await a.sync(1, r.member_id, {r.member_id: b"p0"})).assignment == b"p0"
    back = await join_static("")  # the same instance, restarted: a new member id, no rebalance
    assert back.error == E.none and back.generation_id == 1 and back.member_id != r.member_id
    await a.gc.drain()
    stored = decode_group_state(world.stored()[2])
    assert stored is not None and stored.assigned
    assert [(m.member_id, m.instance_id, m.assignment) for m in stored.members] == [
        (back.member_id, "i1", b"p0")
    ]


class GatedMetadata:
    """The fence's metadata client with `confirm_group_generation` held at `gate` (when
    set) and `release_group_leases` failing with `release_error` (when set)."""

    def __init__(self, inner: FlakyMetadataClient) -> None:
        self.inner = inner
        self.gate: asyncio.Event | None = None
        self.confirms_waiting = 0
        self.release_error: BaseException | None = None
        self.release_gate = asyncio.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def confirm_group_generation(self, *args: object) -> None:
        if self.gate is not None:
            self.confirms_waiting += 1
            await self.gate.wait()
        await self.inner.confirm_group_generation(*args)  # type: ignore[arg-type]

    async def release_group_leases(self, *args: object) -> None:
        if self.release_error is not None:
            await self.release_gate.wait()
            raise self.release_error
        await self.inner.release_group_leases(*args)  # type: ignore[arg-type]


async def test_a_store_queued_while_the_lease_was_taken_again_is_not_written(world: World) -> None:
    """The sequence behind a group flake (a member assigned, then never again): a store
    queued behind a slow one while the lease was lost (renewed late) and taken again
    wrote the dropped group's state under the new lease; a later takeover loaded it."""
    a = world.agent("A")
    gated = GatedMetadata(world.metadata)
    a.fence.metadata = gated  # type: ignore[assignment]
    ra = await a.join()
    assert (await a.sync(1, ra.member_id, {ra.member_id: b"p"})).error == E.none  # Stable, stored
    gated.gate = asyncio.Event()
    rb = a.start_join()  # a second member: a rebalance
    ra2 = a.start_join(ra.member_id)
    await settle()
    assert gated.confirms_waiting == 1  # generation 2, its store held in metadata
    b_id = next(m for m in a.gc.groups["g"].members if m != ra.member_id)
    assert a.gc.leave("g", [LeaveRequest(b_id)]) == [E.none]  # generation 3, its store queued
    await settle()
    assert a.gc.groups["g"].generation_id == 3 and gated.confirms_waiting == 1
    a.mono.now += TTL  # the lease is no longer trusted: the next request takes it again
    assert await a.fence.ensure("g") == E.none
    assert (await ra2).error == E.not_coordinator and (await rb).error == E.unknown_member_id  # b left
    assert a.gc.groups["g"].generation_id == 1  # taken over from what metadata holds
    gated.gate.set()
    await a.gc.drain()
    await settle()
    holder, epoch, state = world.stored()
    stored = decode_group_state(state)
    assert (holder, epoch) == ("A", 2)
    assert stored is not None and stored.generation_id == 1 and stored.assigned  # not generation 3
    back = await a.join(ra.member_id)  # and the member goes on from there
    assert back.error == E.none and back.generation_id == 2


async def test_an_acquisition_goes_on_after_a_release_that_failed(world: World) -> None:
    a = world.agent("A")
    gated = GatedMetadata(world.metadata)
    a.fence.metadata = gated  # type: ignore[assignment]
    assert await a.fence.ensure("g") == E.none
    gated.release_error = RuntimeError("a bug in the release")
    a.fence.lose("g", release=True)  # its release fails while an acquisition waits for it
    waiting = asyncio.ensure_future(a.fence.ensure("g"))
    await settle()
    assert not waiting.done()
    gated.release_gate.set()
    assert await waiting == E.none
    a.fence.lose("g", release=False)
    assert await a.fence.ensure("g") == E.none  # and none later either
    await a.fence.drain()
    assert "g" not in a.fence._releasing


async def test_a_mixed_group_is_taken_over_with_its_classic_members(world: World) -> None:
    """A classic group upgraded in place is stored with its classic members' metadata: the
    next coordinator serves their Heartbeat, JoinGroup and SyncGroup as the first one would."""
    a, b = world.agent("A"), world.agent("B")
    assert await a.fence.ensure("g") == E.none
    protocols = [("range", encode_subscription(("t",)))]
    r = await a.gc.join(
        "g", "", None, "consumer", protocols, SESSION, REBALANCE, require_known_member_id=False
    )
    given = encode_assignment({"t": frozenset({0, 1})})
    assert (await a.sync(r.generation_id, r.member_id, {r.member_id: given})).assignment == given
    view = TopicView({"t": (uuid.uuid4(), 2)}, frozenset({"t"}))
    joining = MemberRequest(
        "g", "c", 0, rebalance_timeout_ms=REBALANCE, subscribed_topic_names=("t",), owned={}
    )
    upgraded = a.gc.consumer_heartbeat(joining, view)
    assert upgraded.error == E.none and upgraded.group is not None
    assert await a.gc.consumer.flush(upgraded.group)

    a.owner = False  # routing moves the group to B
    assert await a.fence.ensure("g") == E.not_coordinator
    await a.fence.drain()
    assert await b.fence.ensure("g") == E.none
    member = b.gc.consumer.groups["g"].members[r.member_id]
    assert member.classic is not None and member.classic.protocols == tuple(protocols)
    assert b.gc.heartbeat("g", r.generation_id, r.member_id, None) == E.rebalance_in_progress
    rejoined = await b.gc.join("g", r.member_id, None, "consumer", protocols, SESSION, REBALANCE, view=view)
    assert rejoined.error == E.none and rejoined.generation_id == upgraded.member_epoch
    synced = await b.gc.sync("g", rejoined.generation_id, r.member_id, None, [])
    assert decode_assignment(synced.assignment) == {"t": frozenset({0})}  # one each with c


async def test_a_renewal_extends_each_lease_from_its_own_deadline(world: World) -> None:
    """A renewal answered after another group's store trusted that group longer: the other
    leases must not inherit its deadline (each is trusted from what metadata renewed for it)."""
    a = world.agent("A")
    assert await a.fence.ensure("g1") == E.none and await a.fence.ensure("g2") == E.none
    slow = asyncio.Event()
    renew = world.metadata.renew_group_leases

    async def held_renewal(*args: object) -> list[str]:
        await slow.wait()
        return await renew(*args)  # type: ignore[arg-type]

    a.fence.metadata = GatedMetadata(world.metadata)
    a.fence.metadata.renew_group_leases = held_renewal  # type: ignore[method-assign]
    sent = a.mono.now
    renewing = asyncio.ensure_future(a.fence.renew_once())
    await settle()
    a.mono.now += 1_000  # g2 stores a generation while the renewal is on its way
    assert await a.fence.confirm("g2", "{}")
    slow.set()
    await renewing
    trust = TTL - TTL // 4
    assert a.fence.held["g1"].deadline_ms == sent + trust
    assert a.fence.held["g2"].deadline_ms == sent + 1_000 + trust
