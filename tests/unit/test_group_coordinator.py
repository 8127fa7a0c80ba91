"""The classic group protocol state machine (`agent.groups.coordinator`) on a manual clock:
its purgatories run on `SystemTimer`s reading a `ManualClock`, driven by `advance()`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from skiff.agent.groups.coordinator import GroupCoordinator
from skiff.agent.groups.model import GroupState, JoinResult, LeaveRequest, subscription_topics
from skiff.agent.groups.rebalance import DelayedHeartbeat
from skiff.agent.purgatory import DelayedOperation, DelayedOperationPurgatory
from skiff.agent.timing_wheel import SystemTimer

SESSION = 10_000
REBALANCE = 30_000
E = ErrorCode


class ManualClock:
    """Integer milliseconds; `advance()` moves it bucket by bucket and expires what is due."""

    def __init__(self, now: int = 1_000) -> None:
        self.now = now
        self.purgatories: list[DelayedOperationPurgatory] = []  # type: ignore[type-arg]

    def __call__(self) -> int:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += round(seconds * 1000)

    def advance(self, seconds: float) -> None:
        end = self.now + round(seconds * 1000)
        while True:
            heads = [p.timer.next_expiration_ms() for p in self.purgatories]
            due = [h for h in heads if h is not None and h <= end]
            if not due:
                break
            self.now = max(self.now, min(due))
            for p in self.purgatories:
                p.advance_clock()
        self.now = end
        for p in self.purgatories:
            p.advance_clock()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def make(clock: ManualClock, delay_ms: int = 0, **kw: int) -> GroupCoordinator:
    heartbeats: DelayedOperationPurgatory[DelayedHeartbeat] = DelayedOperationPurgatory(
        "Heartbeat", timer=SystemTimer(now_ms=clock, sleep=clock.sleep)
    )
    rebalances: DelayedOperationPurgatory[DelayedOperation] = DelayedOperationPurgatory(
        "Rebalance", timer=SystemTimer(now_ms=clock, sleep=clock.sleep)
    )
    clock.purgatories = [heartbeats, rebalances]
    return GroupCoordinator(
        initial_rebalance_delay_ms=delay_ms,
        heartbeat_purgatory=heartbeats,
        rebalance_purgatory=rebalances,
        **kw,
    )


def join(
    gc: GroupCoordinator,
    member_id: str = "",
    protocols: list[tuple[str, bytes]] | None = None,
    instance: str | None = None,
    group: str = "g",
    require_known: bool = True,
) -> asyncio.Future[JoinResult]:
    return gc.join(
        group,
        member_id,
        instance,
        "consumer",
        protocols or [("range", b"meta")],
        SESSION,
        REBALANCE,
        client_id="c",
        require_known_member_id=require_known,
    )


async def new_member(gc: GroupCoordinator, **kw: object) -> tuple[str, asyncio.Future[JoinResult]]:
    """MEMBER_ID_REQUIRED, then the real join; returns (member id, join future)."""
    first = join(gc, **kw)  # type: ignore[arg-type]
    r = first.result()
    assert r.error == E.member_id_required and r.member_id
    return r.member_id, join(gc, r.member_id, **kw)  # type: ignore[arg-type]


async def stable_pair(gc: GroupCoordinator) -> tuple[str, str, int]:
    a, fa = await new_member(gc)
    ra = fa.result()  # alone: the join completes at once
    assert ra.error == E.none and ra.leader == a and ra.generation_id == 1
    b, fb = await new_member(gc)
    assert not fb.done()
    assert gc.heartbeat("g", 1, a, None) == E.rebalance_in_progress
    fa2 = join(gc, a)
    ra2, rb = fa2.result(), fb.result()
    assert ra2.generation_id == rb.generation_id == 2
    assert ra2.leader == a and {m.member_id for m in ra2.members} == {a, b} and rb.members == ()
    sb = gc.sync("g", 2, b, None, [])
    assert not sb.done()
    sa = gc.sync("g", 2, a, None, [(a, b"A"), (b, b"B")])
    assert sa.result().assignment == b"A" and sb.result().assignment == b"B"
    assert gc.groups["g"].state == GroupState.STABLE
    return a, b, 2


async def test_member_id_required_then_join_and_sync(clock: ManualClock) -> None:
    gc = make(clock)
    a, fut = await new_member(gc)
    r = fut.result()
    assert (r.error, r.member_id, r.leader, r.generation_id, r.protocol_name) == (E.none, a, a, 1, "range")
    assert r.members[0].metadata == b"meta"
    assert gc.groups["g"].state == GroupState.COMPLETING_REBALANCE
    s = gc.sync("g", 1, a, None, [(a, b"assignment")]).result()
    assert s.error == E.none and s.assignment == b"assignment"
    assert gc.heartbeat("g", 1, a, None) == E.none
    assert gc.heartbeat("g", 0, a, None) == E.illegal_generation
    assert gc.heartbeat("g", 1, "nobody", None) == E.unknown_member_id


async def test_old_clients_get_a_member_id_at_once(clock: ManualClock) -> None:
    gc = make(clock)
    r = join(gc, require_known=False).result()
    assert r.error == E.none and r.member_id and r.leader == r.member_id


async def test_two_members_rebalance_and_leave(clock: ManualClock) -> None:
    gc = make(clock)
    a, b, gen = await stable_pair(gc)
    assert gc.leave("g", [LeaveRequest(b)]) == [E.none]
    assert gc.groups["g"].state == GroupState.PREPARING_REBALANCE
    assert gc.heartbeat("g", gen, a, None) == E.rebalance_in_progress
    r = join(gc, a).result()
    assert r.generation_id == gen + 1 and [m.member_id for m in r.members] == [a]
    assert gc.leave("g", [LeaveRequest(a)]) == [E.none]
    assert "g" not in gc.groups  # Empty with nobody in it: forgotten (offsets live in metadata)
    assert gc.leave("g", [LeaveRequest("ghost")]) == [E.unknown_member_id]


async def test_rebalance_timeout_drops_members_that_do_not_rejoin(clock: ManualClock) -> None:
    gc = make(clock)
    a, b, gen = await stable_pair(gc)
    c, fc = await new_member(gc)
    fa = join(gc, a)
    assert not fc.done() and not fa.done()  # b has not rejoined
    for _ in range(9):  # b stays alive (heartbeats) but does not rejoin
        clock.advance(3)
        assert gc.heartbeat("g", gen, b, None) == E.rebalance_in_progress
    assert not fa.done()
    clock.advance(3.1)
    ra, rc = fa.result(), fc.result()
    assert ra.generation_id == rc.generation_id == gen + 1
    assert {m.member_id for m in ra.members} == {a, c}
    assert b not in gc.groups["g"].members
    assert gc.heartbeat("g", gen + 1, b, None) == E.unknown_member_id


async def test_session_expiry_removes_member_and_rebalances(clock: ManualClock) -> None:
    gc = make(clock)
    a, b, gen = await stable_pair(gc)
    for _ in range(4):  # a heartbeats, b goes silent
        clock.advance(3)
        gc.heartbeat("g", gen, a, None)
    assert b not in gc.groups["g"].members
    assert gc.groups["g"].state == GroupState.PREPARING_REBALANCE
    r = join(gc, a).result()
    assert r.generation_id == gen + 1 and [m.member_id for m in r.members] == [a]


async def test_followers_wait_for_leader_sync_and_rebalance_interrupts(clock: ManualClock) -> None:
    gc = make(clock)
    a, b, gen = await stable_pair(gc)
    # b changes its metadata: the group prepares a rebalance; a sync in that state is refused
    fb = join(gc, b, protocols=[("range", b"other")])
    assert gc.groups["g"].state == GroupState.PREPARING_REBALANCE
    assert gc.sync("g", gen, a, None, []).result().error == E.rebalance_in_progress
    fa = join(gc, a)
    assert fa.result().generation_id == fb.result().generation_id == gen + 1
    sb = gc.sync("g", gen + 1, b, None, [])
    # a new member arrives before the leader syncs: b is told to rejoin
    c, fc = await new_member(gc)
    assert sb.result().error == E.rebalance_in_progress
    assert gc.sync("g", gen, a, None, []).result().error == E.illegal_generation


async def test_sync_timeout_removes_members_that_never_sync(clock: ManualClock) -> None:
    gc = make(clock)
    a, fa = await new_member(gc)
    assert fa.result().error == E.none  # ... and the leader never sends SyncGroup
    clock.advance(REBALANCE / 1000 + 0.1)
    assert "g" not in gc.groups  # a was removed, the group went Empty and was forgotten
    assert gc.heartbeat("g", 1, a, None) == E.unknown_member_id


async def test_protocol_selection_by_vote_and_inconsistent_protocol(clock: ManualClock) -> None:
    gc = make(clock)
    a, fa = await new_member(gc, protocols=[("range", b"ra"), ("roundrobin", b"rr-a")])
    fa.result()
    b, fb = await new_member(gc, protocols=[("roundrobin", b"rr-b"), ("range", b"rb")])
    c, fc = await new_member(gc, protocols=[("roundrobin", b"rr-c")])
    fa = join(gc, a, protocols=[("range", b"ra"), ("roundrobin", b"rr-a")])
    r = fa.result()
    assert r.protocol_name == "roundrobin"
    assert {m.member_id: m.metadata for m in r.members} == {a: b"rr-a", b: b"rr-b", c: b"rr-c"}
    bad = join(gc, protocols=[("sticky", b"")]).result()
    assert bad.error == E.inconsistent_group_protocol
    other_type = gc.join("g", "", None, "connect", [("roundrobin", b"")], SESSION, REBALANCE)
    assert other_type.result().error == E.inconsistent_group_protocol


async def test_static_member_rejoin_replaces_id_without_rebalance(clock: ManualClock) -> None:
    gc = make(clock)
    fa = join(gc, instance="i-a")  # static members get their id at once
    ra = fa.result()
    a = ra.member_id
    assert ra.error == E.none and ra.leader == a
    fb = join(gc, instance="i-b")
    b = fb.result().member_id if fb.done() else ""
    assert not fb.done()
    fa2 = join(gc, a, instance="i-a")
    b = fb.result().member_id
    gen = fa2.result().generation_id
    sb = gc.sync("g", gen, b, "i-b", [])
    gc.sync("g", gen, a, "i-a", [(a, b"A"), (b, b"B")])
    assert sb.result().assignment == b"B"

    # b restarts: same instance id, no member id, same metadata -> new id, same generation
    rb2 = join(gc, instance="i-b").result()
    assert rb2.error == E.none and rb2.member_id != b and rb2.generation_id == gen
    assert gc.groups["g"].state == GroupState.STABLE
    assert gc.sync("g", gen, rb2.member_id, "i-b", []).result().assignment == b"B"
    # the old id is fenced
    assert gc.heartbeat("g", gen, b, "i-b") == E.fenced_instance_id
    assert gc.sync("g", gen, b, "i-b", []).result().error == E.fenced_instance_id
    assert gc.validate_commit("g", gen, b, "i-b") == E.fenced_instance_id
    # the leader restarts: it gets the member list but need not assign
    ra2 = join(gc, instance="i-a").result()
    assert ra2.leader == ra2.member_id and ra2.skip_assignment and len(ra2.members) == 2
    # leaving by instance id
    assert gc.leave("g", [LeaveRequest("", "i-b")]) == [E.none]
    assert gc.groups["g"].state == GroupState.PREPARING_REBALANCE


async def test_initial_rebalance_delay_collects_members(clock: ManualClock) -> None:
    gc = make(clock, delay_ms=300)
    a, fa = await new_member(gc)
    clock.advance(0.2)
    b, fb = await new_member(gc)
    clock.advance(0.2)  # the delay is re-armed because b arrived
    assert not fa.done()
    clock.advance(0.3)
    assert fa.result().generation_id == fb.result().generation_id == 1
    assert len(fa.result().members) == 2


async def test_pending_member_that_never_joins_expires(clock: ManualClock) -> None:
    gc = make(clock)
    a, b, gen = await stable_pair(gc)
    ghost = join(gc).result().member_id  # MEMBER_ID_REQUIRED, never comes back
    assert ghost in gc.groups["g"].pending
    fa, fb = join(gc, a), join(gc, b)  # a rejoins (leader), b rejoins
    assert not fa.done()  # the pending member holds the join phase
    clock.advance(SESSION / 1000 + 0.1)
    assert fa.result().generation_id == gen + 1 and fb.result().error == E.none


async def test_commit_validation(clock: ManualClock) -> None:
    gc = make(clock)
    assert gc.validate_commit("nobody", -1, "", None) == E.none  # simple commit
    assert gc.validate_commit("nobody", 3, "m", None) == E.illegal_generation
    a, b, gen = await stable_pair(gc)
    assert gc.validate_commit("g", gen, a, None) == E.none
    assert gc.validate_commit("g", gen - 1, a, None) == E.illegal_generation
    assert gc.validate_commit("g", gen, "x", None) == E.unknown_member_id
    assert gc.validate_commit("g", -1, "", None) == E.none
    c, fc = await new_member(gc)
    join(gc, a)
    join(gc, b)
    assert fc.done() and gc.groups["g"].state == GroupState.COMPLETING_REBALANCE
    assert gc.validate_commit("g", gen + 1, a, None) == E.rebalance_in_progress


async def test_describe_list_delete(clock: ManualClock) -> None:
    gc = make(clock)
    a, b, gen = await stable_pair(gc)
    d = gc.describe("g")
    assert d is not None
    assert (d.state, d.protocol_type, d.protocol_name) == ("Stable", "consumer", "range")
    assert {m.member_id: m.assignment for m in d.members} == {a: b"A", b: b"B"}
    assert gc.describe("missing") is None  # the handler asks metadata: Empty or Dead
    assert [g.group_id for g in gc.list_groups()] == ["g"]
    assert gc.delete("g") == E.non_empty_group
    gc.leave("g", [LeaveRequest(a), LeaveRequest(b)])
    assert "g" not in gc.groups and gc.is_empty("g") and gc.delete("g") == E.none
    ghost = join(gc).result().member_id  # an Empty group holding only a pending member id
    assert gc.groups["g"].state == GroupState.EMPTY and gc.is_empty("g")
    assert gc.delete("g") == E.none and "g" not in gc.groups
    assert gc.heartbeat_purgatory.delayed == 0  # the pending id's expiry went with it
    assert join(gc, ghost).result().error == E.unknown_member_id


async def test_invalid_session_timeout_and_unknown_member(clock: ManualClock) -> None:
    gc = make(clock)
    r = gc.join("g", "", None, "consumer", [("range", b"")], 10, REBALANCE).result()
    assert r.error == E.invalid_session_timeout
    assert join(gc, "made-up").result().error == E.unknown_member_id


async def test_close_answers_waiters(clock: ManualClock) -> None:
    gc = make(clock)
    a, b, gen = await stable_pair(gc)
    c, fc = await new_member(gc)
    await gc.close()
    assert fc.result().error == E.not_coordinator


# ---------------------------------------------------------------------- timing, on the purgatories


async def sync_all(gc: GroupCoordinator, gen: int, leader: str, others: list[str]) -> None:
    followers = [gc.sync("g", gen, m, None, []) for m in others]
    assignments = [(m, m.encode()) for m in [leader, *others]]
    assert gc.sync("g", gen, leader, None, assignments).result().error == E.none
    assert all(f.result().error == E.none for f in followers)
    assert gc.groups["g"].state == GroupState.STABLE


async def test_session_expiry_removes_exactly_the_silent_member(clock: ManualClock) -> None:
    gc = make(clock)
    a, b, gen = await stable_pair(gc)
    c, fc = await new_member(gc)
    fa, fb = join(gc, a), join(gc, b)
    gen = fc.result().generation_id
    assert fa.result().generation_id == fb.result().generation_id == gen
    await sync_all(gc, gen, a, [b, c])  # every session runs from here
    for _ in range(3):  # a and c heartbeat, b is silent
        clock.advance(3)
        assert gc.heartbeat("g", gen, a, None) == gc.heartbeat("g", gen, c, None) == E.none
    clock.advance(0.999)  # 1 ms before b's session ends
    assert set(gc.groups["g"].members) == {a, b, c} and gc.groups["g"].state == GroupState.STABLE
    clock.advance(0.001)
    assert set(gc.groups["g"].members) == {a, c}
    assert gc.groups["g"].state == GroupState.PREPARING_REBALANCE
    assert gc.heartbeat("g", gen, b, None) == E.unknown_member_id
    assert gc.heartbeat("g", gen, a, None) == E.rebalance_in_progress


async def test_a_heartbeat_just_before_expiry_postpones_it(clock: ManualClock) -> None:
    gc = make(clock)
    a, b, gen = await stable_pair(gc)
    for _ in range(3):
        clock.advance(3)
        gc.heartbeat("g", gen, a, None)
    clock.advance(0.999)
    assert gc.heartbeat("g", gen, b, None) == E.none  # at session - 1 ms
    clock.advance(0.001)  # b's first session would have ended here
    assert b in gc.groups["g"].members and gc.groups["g"].state == GroupState.STABLE
    for _ in range(3):
        clock.advance(3)
        gc.heartbeat("g", gen, a, None)
    clock.advance(0.998)
    assert b in gc.groups["g"].members  # 10 s after its heartbeat, less 1 ms
    clock.advance(0.001)
    assert b not in gc.groups["g"].members and a in gc.groups["g"].members


async def test_join_completes_when_the_last_member_rejoins_not_at_the_timeout(clock: ManualClock) -> None:
    gc = make(clock)
    a, b, gen = await stable_pair(gc)
    rebalances = gc.rebalance_purgatory
    assert rebalances.delayed == 0  # no join or sync phase pending in a Stable group
    c, fc = await new_member(gc)
    assert rebalances.delayed == 1  # the DelayedJoin
    fa = join(gc, a)
    clock.advance(1)
    assert not fa.done() and not fc.done()
    fb = join(gc, b)  # the last one: no clock movement needed
    assert fa.done() and fb.done() and fc.done()
    assert fa.result().generation_id == gen + 1 and len(fa.result().members) == 3
    assert gc.groups["g"].state == GroupState.COMPLETING_REBALANCE
    assert rebalances.delayed == 1  # the join left the timer; the sync wait is in it
    await sync_all(gc, gen + 1, a, [b, c])
    assert rebalances.delayed == 0 and rebalances.watched == 0


async def test_completed_operations_leave_the_timer(clock: ManualClock) -> None:
    gc = make(clock)
    a, b, gen = await stable_pair(gc)
    heartbeats = gc.heartbeat_purgatory
    assert heartbeats.delayed == 2 and heartbeats.watched == 2  # one session per member
    for _ in range(50):
        clock.advance(0.5)
        assert gc.heartbeat("g", gen, a, None) == gc.heartbeat("g", gen, b, None) == E.none
    assert heartbeats.delayed == 2 and heartbeats.watched == 2  # each heartbeat replaced one
    assert gc.validate_commit("g", gen, a, None) == E.none  # a commit counts as a heartbeat
    assert heartbeats.delayed == 2
    ghost = join(gc).result().member_id
    assert heartbeats.delayed == 3  # the pending id's wait
    assert gc.leave("g", [LeaveRequest(ghost), LeaveRequest(b)]) == [E.none, E.none]
    assert heartbeats.delayed == 1 and gc.rebalance_purgatory.delayed == 1  # a's session; the join
    assert gc.leave("g", [LeaveRequest(a)]) == [E.none]
    assert heartbeats.delayed == 0 and gc.rebalance_purgatory.delayed == 0
    assert heartbeats.watched == 0 and gc.rebalance_purgatory.watched == 0
    assert "g" not in gc.groups


async def test_initial_delay_is_extended_by_a_new_member(clock: ManualClock) -> None:
    gc = make(clock, delay_ms=3000)
    a, fa = await new_member(gc)
    assert gc.groups["g"].state == GroupState.PREPARING_REBALANCE and not fa.done()
    clock.advance(2)
    b, fb = await new_member(gc)
    clock.advance(1)  # the first delay ends: b arrived during it, so it is re-armed
    assert not fa.done() and not fb.done()
    clock.advance(2.999)
    assert not fa.done()
    clock.advance(0.001)  # 3 s after the re-arm
    assert fa.result().generation_id == fb.result().generation_id == 1
    assert len(fa.result().members) == 2


async def test_initial_delay_without_newcomers_ends_on_time_and_is_bounded_by_the_rebalance_timeout(
    clock: ManualClock,
) -> None:
    gc = make(clock, delay_ms=3000)
    first = await new_member(gc)
    clock.advance(2.999)
    assert not first[1].done()
    clock.advance(0.001)
    assert first[1].result().generation_id == 1  # alone, nobody came: exactly the delay

    gc = make(clock, delay_ms=3000)

    def join_7s(member_id: str = "") -> asyncio.Future[JoinResult]:
        return gc.join("g", member_id, None, "consumer", [("range", b"")], SESSION, 7000)

    a = join_7s().result().member_id
    fa = join_7s(a)  # rebalance timeout 7 s: delays of 3 s, 3 s, then the 1 s left
    for _ in range(6):  # a newcomer every second keeps re-arming the delay
        clock.advance(1)
        join_7s(join_7s().result().member_id)
        assert not fa.done()
    clock.advance(0.999)
    assert not fa.done()
    clock.advance(0.001)  # 7 s: the rebalance timeout caps the wait
    assert fa.result().generation_id == 1 and len(fa.result().members) == 7


async def test_pending_member_id_expires_after_one_session(clock: ManualClock) -> None:
    gc = make(clock)
    ghost = join(gc).result().member_id
    assert gc.groups["g"].pending == {ghost} and gc.heartbeat_purgatory.delayed == 1
    clock.advance(SESSION / 1000 - 0.001)
    assert ghost in gc.groups["g"].pending
    clock.advance(0.001)
    assert "g" not in gc.groups  # nothing but that id: the group is forgotten
    assert join(gc, ghost).result().error == E.unknown_member_id
    assert gc.heartbeat_purgatory.delayed == 0


async def test_a_new_member_whose_join_lasts_too_long_is_removed(clock: ManualClock) -> None:
    gc = make(clock, new_member_join_timeout_ms=5_000)
    a, b, gen = await stable_pair(gc)
    c, fc = await new_member(gc)
    fa = join(gc, a)  # b stays alive but does not rejoin: the join phase lasts
    for _ in range(4):
        clock.advance(1.2)
        gc.heartbeat("g", gen, b, None)
    assert not fc.done()
    clock.advance(0.2)  # 5 s after c joined
    assert fc.result().error == E.unknown_member_id  # c may retry, as a Java client does
    assert c not in gc.groups["g"].members and not fa.done()
    fb = join(gc, b)
    assert fa.result().generation_id == fb.result().generation_id == gen + 1
    assert {m.member_id for m in fa.result().members} == {a, b}


async def test_static_members_that_do_not_rejoin_hold_the_join_until_their_session_expires(
    clock: ManualClock,
) -> None:
    gc = make(clock)
    a = join(gc, instance="i-a").result().member_id
    gc.sync("g", 1, a, "i-a", [(a, b"A")])
    b, fb = await new_member(gc)
    ra = join(gc, a, instance="i-a").result()
    gen = ra.generation_id
    assert fb.result().generation_id == gen
    sb = gc.sync("g", gen, b, None, [])
    gc.sync("g", gen, a, "i-a", [(a, b"A"), (b, b"B")])
    assert sb.result().error == E.none
    assert gc.leave("g", [LeaveRequest(b)]) == [E.none]
    for _ in range(11):  # a stays alive past the 30 s rebalance timeout but never rejoins
        clock.advance(3)
        assert gc.heartbeat("g", gen, a, "i-a") == E.rebalance_in_progress
    group = gc.groups["g"]
    assert group.state == GroupState.PREPARING_REBALANCE and a in group.members  # static: kept
    assert gc.rebalance_purgatory.delayed == 1  # another join phase, waiting for a
    clock.advance(SESSION / 1000)  # a goes silent: its session ends, the phase completes
    assert "g" not in gc.groups and gc.rebalance_purgatory.delayed == 0


async def test_members_that_never_sync_are_removed_even_once_stable(clock: ManualClock) -> None:
    gc = make(clock)
    a, fa = await new_member(gc)
    fa.result()
    b, fb = await new_member(gc)
    ra = join(gc, a).result()
    gen = ra.generation_id
    assert fb.result().generation_id == gen
    gc.sync("g", gen, a, None, [(a, b"A"), (b, b"B")])  # the leader syncs, b never does
    assert gc.groups["g"].state == GroupState.STABLE
    for _ in range(9):  # b heartbeats all along
        clock.advance(3)
        assert gc.heartbeat("g", gen, b, None) == E.none
        gc.heartbeat("g", gen, a, None)
    clock.advance(2.999)
    assert b in gc.groups["g"].members
    clock.advance(0.001)  # the rebalance timeout after the join phase ended
    assert b not in gc.groups["g"].members
    assert gc.groups["g"].state == GroupState.PREPARING_REBALANCE


async def test_leader_leaving_mid_rebalance_elects_a_new_leader(clock: ManualClock) -> None:
    gc = make(clock)
    a, b, gen = await stable_pair(gc)
    fb = join(gc, b, protocols=[("range", b"changed")])  # b asks for a rebalance
    assert gc.leave("g", [LeaveRequest(a)]) == [E.none]  # the leader leaves instead of rejoining
    r = fb.result()
    assert r.generation_id == gen + 1 and r.leader == b and [m.member_id for m in r.members] == [b]


async def test_close_completes_every_delayed_operation(clock: ManualClock) -> None:
    gc = make(clock, delay_ms=3000)
    a, fa = await new_member(gc)
    ghost = join(gc, group="other").result().member_id
    assert ghost and gc.heartbeat_purgatory.delayed == 2 and gc.rebalance_purgatory.delayed == 1
    await gc.close()
    assert fa.result().error == E.not_coordinator
    assert gc.heartbeat_purgatory.delayed == 0 and gc.rebalance_purgatory.delayed == 0
    assert gc.groups == {}


def test_subscription_topics_parses_consumer_protocol_metadata() -> None:
    def string(s: str) -> bytes:
        return len(s).to_bytes(2, "big") + s.encode()

    v1 = (1).to_bytes(2, "big") + (2).to_bytes(4, "big") + string("t1") + string("t2") + b"\xff\xff\xff\xff"
    assert subscription_topics(v1) == {"t1", "t2"}
    assert subscription_topics(b"") is None
    assert subscription_topics(v1[:9]) is None  # cut inside a topic name
    assert subscription_topics(b"\x00\x00\xff\xff\xff\xff") == set()  # null topic array


async def test_started_on_the_loop_the_purgatories_run_by_themselves() -> None:
    gc = GroupCoordinator(initial_rebalance_delay_ms=50, min_session_timeout_ms=10)
    gc.start()
    try:
        a = gc.join("g", "", None, "consumer", [("range", b"")], 150, 1000).result().member_id
        fa = gc.join("g", a, None, "consumer", [("range", b"")], 150, 1000)
        r = await asyncio.wait_for(fa, 2)  # the initial delay ends on the real clock
        assert r.generation_id == 1
        assert (await gc.sync("g", 1, a, None, [(a, b"A")])).error == E.none
        for _ in range(4):
            await asyncio.sleep(0.05)
            assert gc.heartbeat("g", 1, a, None) == E.none
        deadline = asyncio.get_running_loop().time() + 2
        while "g" in gc.groups:  # silent: the session (150 ms) expires
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.02)
    finally:
        await gc.close()


async def test_session_timeout_bounds_and_initial_delay_come_from_the_config() -> None:
    from skiff.agent.config import AgentConfig

    config = AgentConfig.from_env(
        {
            "SKIFF_GROUP_MIN_SESSION_TIMEOUT_MS": "1000",
            "SKIFF_GROUP_MAX_SESSION_TIMEOUT_MS": "20_000",
            "SKIFF_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        },
        agent_id="a",
    )
    gc = GroupCoordinator.from_config(config)
    assert (gc.min_session_timeout_ms, gc.max_session_timeout_ms, gc.initial_rebalance_delay_ms) == (
        1000,
        20_000,
        0,
    )

    def first_join(session_ms: int) -> ErrorCode:
        return gc.join("g", "", None, "consumer", [("range", b"")], session_ms, 1000).result().error

    assert first_join(999) == first_join(20_001) == E.invalid_session_timeout
    assert first_join(1000) == first_join(20_000) == E.member_id_required
    defaults = AgentConfig(agent_id="a")
    assert (
        defaults.group_min_session_timeout_ms,
        defaults.group_max_session_timeout_ms,
        defaults.group_initial_rebalance_delay_ms,
    ) == (6000, 1_800_000, 3000)  # Kafka's defaults
    invalid: list[dict[str, Any]] = [
        {"group_min_session_timeout_ms": 0},
        {"group_min_session_timeout_ms": 7000, "group_max_session_timeout_ms": 6000},
        {"group_initial_rebalance_delay_ms": -1},
    ]
    for bad in invalid:
        with pytest.raises(ValueError, match="group_"):
            AgentConfig(agent_id="a", **bad)
    await gc.close()
