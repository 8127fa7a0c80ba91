"""Mixed groups (`agent.groups.mixed`): the online upgrade of a classic group to the consumer
protocol, classic members served by the consumer group, and the downgrade back, on the
coordinator's manual clock (no fence: answers go out at once).

`Classic` plays an eager classic consumer (kafka-python, librdkafka's range assignor): it
revokes everything before it rejoins, so it reports no owned partitions; `Modern` plays a
consumer-protocol one (as in tests/unit/test_consumer_protocol.py). After every step the
partitions the clients hold are checked disjoint: none is ever owned twice.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from kio.schema.errors import ErrorCode
from skiff.agent.groups.consumer_model import ClassicMeta, ConsumerGroup, TopicView
from skiff.agent.groups.consumer_persistence import decode_consumer_group, encode_consumer_group
from skiff.agent.groups.consumer_requests import MemberRequest
from skiff.agent.groups.coordinator import GroupCoordinator
from skiff.agent.groups.embedded_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from skiff.agent.groups.model import GroupState, LeaveRequest

from tests.unit.test_group_coordinator import REBALANCE, SESSION, ManualClock, make

E = ErrorCode
T1 = uuid.UUID(int=7)
VIEW = TopicView({"t1": (T1, 6)}, frozenset({"t1"}), listed=False)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


class Classic:
    """An eager classic member: revokes all before JoinGroup, takes SyncGroup's assignment."""

    def __init__(self, gc: GroupCoordinator, member_id: str = "") -> None:
        self.gc = gc
        self.member_id = member_id
        self.generation = -1
        self.owned: dict[str, frozenset[int]] = {}
        self.committed_with: list[int] = []

    def protocols(self) -> list[tuple[str, bytes]]:
        return [("range", encode_subscription(("t1",)))]

    async def rejoin(self) -> None:
        self.owned = {}  # eager: onPartitionsRevoked before the JoinGroup
        fut = self.gc.join(
            "g", self.member_id, None, "consumer", self.protocols(), SESSION, REBALANCE, view=VIEW
        )
        r = await fut
        if r.error == E.member_id_required:
            self.member_id = r.member_id
            r = await self.gc.join(
                "g", self.member_id, None, "consumer", self.protocols(), SESSION, REBALANCE, view=VIEW
            )
        assert r.error == E.none, r
        self.member_id, self.generation = r.member_id, r.generation_id
        leader = r.leader == self.member_id
        assignments = [(m.member_id, b"") for m in r.members] if leader else []
        s = await self.gc.sync("g", self.generation, self.member_id, None, assignments, "consumer", "range")
        assert s.error == E.none, s
        got = decode_assignment(s.assignment)
        assert got is not None
        self.owned = got

    def heartbeat(self) -> ErrorCode:
        return self.gc.heartbeat("g", self.generation, self.member_id, None)

    def commit(self) -> ErrorCode:
        return self.gc.validate_commit("g", self.generation, self.member_id, None, api_version=2)


class Modern:
    def __init__(self, gc: GroupCoordinator, member_id: str) -> None:
        self.gc = gc
        self.member_id = member_id
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}

    def heartbeat(self, epoch: int | None = None) -> ErrorCode:
        joining = self.epoch == 0
        req = MemberRequest(
            "g",
            self.member_id,
            self.epoch if epoch is None else epoch,
            rebalance_timeout_ms=REBALANCE if joining else -1,
            subscribed_topic_names=("t1",) if joining else None,
            owned=dict(self.owned),
        )
        r = self.gc.consumer_heartbeat(req, VIEW)
        if r.error == E.none:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.owned = dict(r.assignment)  # revokes what is gone at once, takes the rest
        return r.error


def held(*clients: Classic | Modern) -> None:
    """No partition is owned by two clients."""
    seen: set[int] = set()
    for c in clients:
        ps = set().union(*c.owned.values()) if c.owned else set()
        assert not (seen & ps), f"partitions {seen & ps} owned twice"
        seen |= ps


async def classic_pair(gc: GroupCoordinator) -> tuple[Classic, Classic]:
    """Two classic members, Stable at generation 2 with t1-0..2 and t1-3..5."""
    a, b = Classic(gc), Classic(gc)
    await a.rejoin()
    first = asyncio.ensure_future(b.rejoin())
    await asyncio.sleep(0)
    assert a.heartbeat() == E.rebalance_in_progress
    a_join = gc.join("g", a.member_id, None, "consumer", a.protocols(), SESSION, REBALANCE)
    ra = await a_join
    assert ra.leader == a.member_id and ra.generation_id == 2
    assignments = [
        (a.member_id, encode_assignment({"t1": frozenset({0, 1, 2})})),
        (b.member_id, encode_assignment({"t1": frozenset({3, 4, 5})})),
    ]
    sa = await gc.sync("g", 2, a.member_id, None, assignments)
    a.generation, a.owned = 2, decode_assignment(sa.assignment) or {}
    await first
    assert gc.groups["g"].state == GroupState.STABLE and b.owned == {"t1": frozenset({3, 4, 5})}
    return a, b


async def test_codec_round_trips() -> None:
    sub = decode_subscription(encode_subscription(("t1", "t2"), {"t1": frozenset({1, 2})}))
    assert sub is not None and sub.version == 1 and sub.topics == ("t1", "t2")
    assert sub.owned == {"t1": frozenset({1, 2})}
    assert decode_assignment(encode_assignment({"a": frozenset({0, 3}), "b": frozenset({1})}, 3)) == {
        "a": frozenset({0, 3}),
        "b": frozenset({1}),
    }
    assert decode_subscription(b"\x00") is None and decode_assignment(b"\x00\x00\x7f") is None


async def test_rolling_upgrade_moves_partitions_only_after_revocation(clock: ManualClock) -> None:
    gc = make(clock)
    a, b = await classic_pair(gc)
    c = Modern(gc, "c")
    assert c.heartbeat() == E.none  # the upgrade: the group is a consumer group now
    assert "g" not in gc.groups and "g" in gc.consumer.groups and gc.upgrades == 1
    group = gc.consumer.groups["g"]
    assert group.members[a.member_id].classic is not None and group.group_epoch == 3
    assert c.owned == {}  # every partition is still held by a classic member
    held(a, b, c)
    # a commit of the generation the classic members consume in still lands
    assert a.commit() == E.none and b.commit() == E.none
    # the classic members must rejoin: the group epoch moved past their member epoch
    assert a.heartbeat() == E.rebalance_in_progress
    await a.rejoin()
    assert a.generation == 3 and a.commit() == E.none
    assert Classic.commit(Classic(gc, a.member_id)) == E.illegal_generation  # generation -1
    held(a, b, c)
    assert c.heartbeat() == E.none
    held(a, b, c)
    assert b.heartbeat() == E.rebalance_in_progress
    await b.rejoin()
    assert c.heartbeat() == E.none
    held(a, b, c)
    assert set().union(*a.owned.values(), *b.owned.values(), *c.owned.values()) == set(range(6))
    assert all(len(set().union(*x.owned.values())) == 2 for x in (a, b, c))
    assert a.heartbeat() == E.none and b.heartbeat() == E.none
    # a stale generation is refused for commits and heartbeats, as Kafka's rule
    assert gc.validate_commit("g", 2, a.member_id, None, api_version=2) == E.illegal_generation
    assert gc.heartbeat("g", 2, a.member_id, None) == E.illegal_generation
    assert gc.list_groups()[0].group_id == "g" and isinstance(gc.list_groups()[0], ConsumerGroup)


async def test_classic_member_restarted_with_the_consumer_protocol_completes_the_upgrade(
    clock: ManualClock,
) -> None:
    gc = make(clock)
    a, b = await classic_pair(gc)
    c = Modern(gc, "c")
    assert c.heartbeat() == E.none
    assert gc.leave("g", [LeaveRequest(a.member_id)]) == [E.none]  # a restarts as d
    d = Modern(gc, "d")
    assert d.heartbeat() == E.none and d.owned  # a's partitions were free at once
    held(b, c, d)
    assert b.heartbeat() == E.rebalance_in_progress
    await b.rejoin()
    assert gc.leave("g", [LeaveRequest(b.member_id)]) == [E.none]
    for m in (c, d):
        assert m.heartbeat() == E.none
    assert set().union(*c.owned.values(), *d.owned.values()) == set(range(6))
    held(c, d)
    assert all(m.classic is None for m in gc.consumer.groups["g"].members.values())


async def test_downgrade_when_the_last_consumer_member_leaves(clock: ManualClock) -> None:
    gc = make(clock)
    a, b = await classic_pair(gc)
    c = Modern(gc, "c")
    assert c.heartbeat() == E.none
    await a.rejoin()
    await b.rejoin()
    assert c.heartbeat() == E.none and c.owned
    assert c.heartbeat(epoch=-1) == E.none  # c leaves: only classic members are left
    assert "g" not in gc.consumer.groups and gc.downgrades == 1
    group = gc.groups["g"]
    assert group.state == GroupState.PREPARING_REBALANCE and group.protocol_name == "range"
    assert group.generation_id == a.generation
    assert a.heartbeat() == E.rebalance_in_progress and b.heartbeat() == E.rebalance_in_progress
    await asyncio.gather(a.rejoin(), b.rejoin())
    assert group.state == GroupState.STABLE and group.generation_id == a.generation
    assert a.generation == b.generation > 3


async def test_upgrade_waits_for_a_stable_group(clock: ManualClock) -> None:
    gc = make(clock)
    a, b = await classic_pair(gc)
    pending = gc.join("g", a.member_id, None, "consumer", a.protocols(), SESSION, REBALANCE)
    assert gc.groups["g"].state == GroupState.PREPARING_REBALANCE
    c = Modern(gc, "c")
    assert c.heartbeat() == E.coordinator_not_available  # retriable: it asks again
    assert "g" in gc.groups and not pending.done()
    assert gc.groups["g"].protocol_type == "consumer"


async def test_session_timeout_of_a_classic_member(clock: ManualClock) -> None:
    gc = make(clock)
    a, b = await classic_pair(gc)
    c = Modern(gc, "c")
    assert c.heartbeat() == E.none
    for _ in range(4):
        clock.advance(SESSION / 4000)
        assert a.heartbeat() == E.rebalance_in_progress  # a keeps its session, b does not
        assert c.heartbeat() == E.none
    assert b.member_id not in gc.consumer.groups["g"].members
    assert a.member_id in gc.consumer.groups["g"].members


async def test_classic_members_are_stored_with_their_metadata(clock: ManualClock) -> None:
    gc = make(clock)
    a, _ = await classic_pair(gc)
    assert Modern(gc, "c").heartbeat() == E.none
    group = gc.consumer.groups["g"]
    loaded = decode_consumer_group("g", encode_consumer_group(group))
    assert loaded is not None
    meta = loaded.members[a.member_id].classic
    assert meta == ClassicMeta(SESSION, (("range", encode_subscription(("t1",))),))
    assert loaded.members[a.member_id].assigned == group.members[a.member_id].assigned
    assert loaded.members["c"].classic is None


async def test_a_classic_member_that_never_rejoins_is_removed(clock: ManualClock) -> None:
    """Kafka's join timer: told to rejoin, a classic member that keeps heartbeating but does
    not rejoin within its rebalance timeout is removed, and its partitions move on."""
    gc = make(clock)
    a, b = await classic_pair(gc)
    c = Modern(gc, "c")
    assert c.heartbeat() == E.none
    await b.rejoin()
    answers = []
    for _ in range(7):  # 35 s: past a's rebalance timeout, within every session
        clock.advance(5)
        answers.append(a.heartbeat())
        if b.heartbeat() == E.rebalance_in_progress:  # once a is gone, the group epoch moved
            assert answers[-1] == E.unknown_member_id
            await b.rejoin()
        assert c.heartbeat() == E.none
        held(b, c)
    assert answers[:5] == [E.rebalance_in_progress] * 5 and answers[-1] == E.unknown_member_id
    assert a.member_id not in gc.consumer.groups["g"].members
    assert c.heartbeat() == E.none
    assert set().union(*b.owned.values(), *c.owned.values()) == set(range(6))
