"""The classic group protocol state machine (`agent.group_coordinator`) on a fake clock."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from kio.schema.errors import ErrorCode

from agent.group_coordinator import GroupCoordinator, GroupState, JoinResult, LeaveRequest

SESSION = 10_000
REBALANCE = 30_000
E = ErrorCode


@dataclass
class Timer:
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class FakeClock:
    now: float = 0.0
    _heap: list[tuple[float, int, Timer, Callable[[], None]]] = field(default_factory=list)
    _seq: itertools.count = field(default_factory=itertools.count)

    def monotonic(self) -> float:
        return self.now

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Timer:
        t = Timer()
        heapq.heappush(self._heap, (self.now + delay_s, next(self._seq), t, callback))
        return t

    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        while self._heap and self._heap[0][0] <= end:
            when, _, t, cb = heapq.heappop(self._heap)
            self.now = when
            if not t.cancelled:
                cb()
        self.now = end


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make(clock: FakeClock, delay_ms: int = 0) -> GroupCoordinator:
    return GroupCoordinator(scheduler=clock, monotonic=clock.monotonic, initial_rebalance_delay_ms=delay_ms)


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


async def test_member_id_required_then_join_and_sync(clock: FakeClock) -> None:
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


async def test_old_clients_get_a_member_id_at_once(clock: FakeClock) -> None:
    gc = make(clock)
    r = join(gc, require_known=False).result()
    assert r.error == E.none and r.member_id and r.leader == r.member_id


async def test_two_members_rebalance_and_leave(clock: FakeClock) -> None:
    gc = make(clock)
    a, b, gen = await stable_pair(gc)
    assert gc.leave("g", [LeaveRequest(b)]) == [E.none]
    assert gc.groups["g"].state == GroupState.PREPARING_REBALANCE
    assert gc.heartbeat("g", gen, a, None) == E.rebalance_in_progress
    r = join(gc, a).result()
    assert r.generation_id == gen + 1 and [m.member_id for m in r.members] == [a]
    assert gc.leave("g", [LeaveRequest(a)]) == [E.none]
    assert gc.groups["g"].state == GroupState.EMPTY
    assert gc.leave("g", [LeaveRequest("ghost")]) == [E.unknown_member_id]


async def test_rebalance_timeout_drops_members_that_do_not_rejoin(clock: FakeClock) -> None:
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


async def test_session_expiry_removes_member_and_rebalances(clock: FakeClock) -> None:
    gc = make(clock)
    a, b, gen = await stable_pair(gc)
    for _ in range(4):  # a heartbeats, b goes silent
        clock.advance(3)
        gc.heartbeat("g", gen, a, None)
    assert b not in gc.groups["g"].members
    assert gc.groups["g"].state == GroupState.PREPARING_REBALANCE
    r = join(gc, a).result()
    assert r.generation_id == gen + 1 and [m.member_id for m in r.members] == [a]


async def test_followers_wait_for_leader_sync_and_rebalance_interrupts(clock: FakeClock) -> None:
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


async def test_sync_timeout_removes_members_that_never_sync(clock: FakeClock) -> None:
    gc = make(clock)
    a, fa = await new_member(gc)
    assert fa.result().error == E.none  # ... and the leader never sends SyncGroup
    clock.advance(REBALANCE / 1000 + 0.1)
    assert a not in gc.groups["g"].members and gc.groups["g"].state == GroupState.EMPTY


async def test_protocol_selection_by_vote_and_inconsistent_protocol(clock: FakeClock) -> None:
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


async def test_static_member_rejoin_replaces_id_without_rebalance(clock: FakeClock) -> None:
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


async def test_initial_rebalance_delay_collects_members(clock: FakeClock) -> None:
    gc = make(clock, delay_ms=300)
    a, fa = await new_member(gc)
    clock.advance(0.2)
    b, fb = await new_member(gc)
    clock.advance(0.2)  # the delay is re-armed because b arrived
    assert not fa.done()
    clock.advance(0.3)
    assert fa.result().generation_id == fb.result().generation_id == 1
    assert len(fa.result().members) == 2


async def test_pending_member_that_never_joins_expires(clock: FakeClock) -> None:
    gc = make(clock)
    a, b, gen = await stable_pair(gc)
    ghost = join(gc).result().member_id  # MEMBER_ID_REQUIRED, never comes back
    assert ghost in gc.groups["g"].pending
    fa, fb = join(gc, a), join(gc, b)  # a rejoins (leader), b rejoins
    assert not fa.done()  # the pending member holds the join phase
    clock.advance(SESSION / 1000 + 0.1)
    assert fa.result().generation_id == gen + 1 and fb.result().error == E.none


async def test_commit_validation(clock: FakeClock) -> None:
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


async def test_describe_list_delete(clock: FakeClock) -> None:
    gc = make(clock)
    a, b, gen = await stable_pair(gc)
    d = gc.describe("g")
    assert (d.state, d.protocol_type, d.protocol_name) == ("Stable", "consumer", "range")
    assert {m.member_id: m.assignment for m in d.members} == {a: b"A", b: b"B"}
    assert gc.describe("missing").state == "Dead"
    assert [g.group_id for g in gc.list_groups()] == ["g"]
    assert gc.delete("g") == E.non_empty_group
    gc.leave("g", [LeaveRequest(a), LeaveRequest(b)])
    assert gc.groups["g"].state == GroupState.EMPTY
    assert gc.delete("g") == E.none and "g" not in gc.groups


async def test_invalid_session_timeout_and_unknown_member(clock: FakeClock) -> None:
    gc = make(clock)
    r = gc.join("g", "", None, "consumer", [("range", b"")], 10, REBALANCE).result()
    assert r.error == E.invalid_session_timeout
    assert join(gc, "made-up").result().error == E.unknown_member_id


async def test_close_answers_waiters(clock: FakeClock) -> None:
    gc = make(clock)
    a, b, gen = await stable_pair(gc)
    c, fc = await new_member(gc)
    gc.close()
    assert fc.result().error == E.not_coordinator
