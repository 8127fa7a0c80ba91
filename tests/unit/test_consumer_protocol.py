"""The consumer group protocol (KIP-848) coordinator, `agent.groups.consumer_protocol`, on
an injected clock: its purgatory runs on a `SystemTimer` reading a manual clock.

`Client` plays a consumer as librdkafka and the Java client do: it keeps what it owns,
reports it in each heartbeat, and takes an assignment from a response as its new target
(revoking what is gone and taking the rest at once, or not yet when `lazy`). The invariant checked after every
step: no partition is held (assigned or pending revocation) by two members at once, and
what a client owns is always held by it in the coordinator.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode
from skiff.agent.groups.consumer_model import ConsumerGroup, MemberState, TopicView
from skiff.agent.groups.consumer_persistence import (
    decode_consumer_group,
    encode_consumer_group,
    is_consumer_state,
)
from skiff.agent.groups.consumer_protocol import ConsumerGroups
from skiff.agent.groups.consumer_requests import HeartbeatResult, MemberRequest, validate
from skiff.agent.purgatory import DelayedOperation, DelayedOperationPurgatory
from skiff.agent.timing_wheel import SystemTimer

E = ErrorCode
T1 = uuid.UUID(int=11)
T2 = uuid.UUID(int=12)
SESSION_MS = 10_000
REBALANCE_MS = 30_000


class ManualClock:
    def __init__(self) -> None:
        self.now = 1_000
        self.purgatory: DelayedOperationPurgatory[DelayedOperation] | None = None

    def __call__(self) -> int:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += round(seconds * 1000)

    def advance(self, ms: int) -> None:
        assert self.purgatory is not None
        end = self.now + ms
        while True:
            head = self.purgatory.timer.next_expiration_ms()
            if head is None or head > end:
                break
            self.now = max(self.now, head)
            self.purgatory.advance_clock()
        self.now = end
        self.purgatory.advance_clock()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def groups(clock: ManualClock) -> Iterator[ConsumerGroups]:
    purgatory: DelayedOperationPurgatory[DelayedOperation] = DelayedOperationPurgatory(
        "Rebalance", timer=SystemTimer(now_ms=clock, sleep=clock.sleep)
    )
    clock.purgatory = purgatory
    yield ConsumerGroups(purgatory, session_timeout_ms=SESSION_MS, heartbeat_interval_ms=1_000)


TOPICS = {"t1": (T1, 6), "t2": (T2, 4)}


def view(topics: dict[str, tuple[uuid.UUID, int]] | None = None) -> TopicView:
    found = TOPICS if topics is None else topics
    return TopicView(dict(found), frozenset(found), listed=True)


class Client:
    def __init__(
        self, groups: ConsumerGroups, member_id: str, topics: tuple[str, ...] = ("t1",), **kw: object
    ) -> None:
        self.groups = groups
        self.member_id = member_id
        self.topics = topics
        self.kw = kw
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}
        self.target: dict[uuid.UUID, frozenset[int]] | None = None

    def heartbeat(
        self, topics: dict[str, tuple[uuid.UUID, int]] | None = None, *, lazy: bool = False, **kw: object
    ) -> HeartbeatResult:
        joining = self.epoch == 0
        fields: dict[str, object] = {
            "group_id": "g",
            "member_id": self.member_id,
            "member_epoch": self.epoch,
            "owned": dict(self.owned),
        }
        if joining:
            fields.update(rebalance_timeout_ms=REBALANCE_MS, subscribed_topic_names=self.topics)
        fields.update(self.kw)
        fields.update(kw)
        req = MemberRequest(**fields)  # type: ignore[arg-type]
        bad = validate(req)
        r = bad if bad is not None else self.groups.heartbeat(req, view(topics))
        if r.error == E.none and r.member_epoch >= 0:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.target = r.assignment
            if self.target is not None and not lazy:  # lazy: has not reconciled yet
                self.owned = {t: ps for t, ps in self.target.items() if ps}
        elif r.error in (E.fenced_member_epoch, E.unknown_member_id):
            self.epoch, self.owned, self.target = 0, {}, None
        check(self.groups)
        return r

    def partitions(self) -> set[tuple[uuid.UUID, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


def check(groups: ConsumerGroups) -> None:
    """No partition held by two members; `owners` is exactly the members' holdings."""
    for group in groups.groups.values():
        held: dict[tuple[uuid.UUID, int], str] = {}
        for m in group.members.values():
            for part in (m.assigned, m.pending_revocation):
                for t, ps in part.items():
                    for p in ps:
                        assert (t, p) not in held, f"{(t, p)} held by {held.get((t, p))} and {m.member_id}"
                        held[(t, p)] = m.member_id
        assert held == group.owners


def group(groups: ConsumerGroups) -> ConsumerGroup:
    return groups.groups["g"]


def test_first_member_gets_everything(groups: ConsumerGroups) -> None:
    a = Client(groups, "a")
    r = a.heartbeat()
    assert r.error == E.none and r.member_epoch == 1
    assert r.assignment == {T1: frozenset(range(6))}
    assert group(groups).state.value == "Stable"
    assert a.heartbeat().assignment is None  # nothing changed: no assignment sent


def test_a_partition_is_revoked_before_it_is_given_to_another(groups: ConsumerGroups) -> None:
    a, b = Client(groups, "a"), Client(groups, "b")
    a.heartbeat()
    r = b.heartbeat()
    assert r.member_epoch == 2 and r.assignment == {}  # its target is still held by a
    assert group(groups).members["b"].state == MemberState.UNRELEASED_PARTITIONS
    r = a.heartbeat(lazy=True)  # a is asked to revoke, does not yet
    assert r.member_epoch == 1 and len(r.assignment[T1]) == 3  # type: ignore[index]
    assert group(groups).members["a"].state == MemberState.UNREVOKED_PARTITIONS
    a.owned = {T1: frozenset(range(6))}  # still holding everything
    assert a.heartbeat(lazy=True).member_epoch == 1
    assert b.heartbeat().assignment is None and not b.owned
    a.owned = dict(a.target or {})  # revoked
    assert a.heartbeat().member_epoch == 2
    r = b.heartbeat()
    assert r.assignment is not None and len(r.assignment[T1]) == 3
    assert a.partitions().isdisjoint(b.partitions()) and len(a.partitions() | b.partitions()) == 6
    assert group(groups).state.value == "Stable"


def test_epochs_are_fenced(groups: ConsumerGroups) -> None:
    a, b = Client(groups, "a"), Client(groups, "b")
    a.heartbeat()
    b.heartbeat()
    a.heartbeat()
    a.heartbeat()
    assert a.epoch == 2
    stale = MemberRequest("g", "a", 3, owned={})
    assert groups.heartbeat(stale, view()).error == E.fenced_member_epoch
    # the previous epoch with a subset of the assignment: a lost response, accepted
    previous = MemberRequest("g", "a", 1, owned=dict(a.owned))
    assert groups.heartbeat(previous, view()).error == E.none
    assert groups.heartbeat(MemberRequest("g", "zz", 1, owned={}), view()).error == E.unknown_member_id


def test_session_timeout_removes_a_member(groups: ConsumerGroups, clock: ManualClock) -> None:
    a, b = Client(groups, "a"), Client(groups, "b")
    a.heartbeat()
    b.heartbeat()
    for _ in range(5):
        clock.advance(SESSION_MS // 2)
        a.heartbeat()
    assert "b" not in group(groups).members
    assert a.partitions() == {(T1, p) for p in range(6)}
    clock.advance(SESSION_MS + 1)
    assert "g" not in groups.groups  # emptied, forgotten
    c = Client(groups, "c")
    assert c.heartbeat().member_epoch > 4  # the group epoch goes on


def test_unrevoked_partitions_within_the_rebalance_timeout(
    groups: ConsumerGroups, clock: ManualClock
) -> None:
    a, b = Client(groups, "a"), Client(groups, "b")
    a.heartbeat()
    b.heartbeat()
    a.heartbeat(lazy=True)
    a.owned = {T1: frozenset(range(6))}
    started = clock.now
    while a.heartbeat(lazy=True).error == E.none:
        b.heartbeat()
        assert clock.now - started <= REBALANCE_MS
        clock.advance(5_000)
    assert clock.now - started >= REBALANCE_MS  # removed: it held the partitions too long
    b.heartbeat()
    assert b.partitions() == {(T1, p) for p in range(6)}


def test_leave_frees_partitions(groups: ConsumerGroups) -> None:
    a, b = Client(groups, "a"), Client(groups, "b")
    a.heartbeat()
    b.heartbeat()
    a.heartbeat()
    b.heartbeat()
    r = groups.heartbeat(MemberRequest("g", "a", -1), view())
    assert r.error == E.none and r.member_epoch == -1
    b.heartbeat()
    assert b.partitions() == {(T1, p) for p in range(6)}


def test_static_member_comes_back_without_a_rebalance(groups: ConsumerGroups) -> None:
    a, b = Client(groups, "a", instance_id="ia"), Client(groups, "b")
    for _ in range(3):
        a.heartbeat()
        b.heartbeat()
    held = a.partitions()
    epoch = group(groups).group_epoch
    r = groups.heartbeat(MemberRequest("g", "a", -2, instance_id="ia"), view())
    assert r.error == E.none and r.member_epoch == -2
    assert {tp for tp, m in group(groups).owners.items() if m == "a"} == held  # kept while away
    a2 = Client(groups, "a2", instance_id="ia")
    r = a2.heartbeat()
    assert r.error == E.none and a2.partitions() == held
    assert "a" not in group(groups).members
    assert group(groups).group_epoch == epoch  # no rebalance for the others
    assert Client(groups, "y", instance_id="ia").heartbeat().error == E.unreleased_instance_id


def test_subscription_by_regex_follows_new_topics(groups: ConsumerGroups) -> None:
    a = Client(groups, "a", topics=(), subscribed_topic_regex="t.*")
    a.heartbeat({"t1": (T1, 2)})
    assert a.partitions() == {(T1, 0), (T1, 1)}
    a.heartbeat({"t1": (T1, 2), "t2": (T2, 1), "other": (uuid.UUID(int=99), 3), "__internal": (T2, 1)})
    assert a.partitions() == {(T1, 0), (T1, 1), (T2, 0)}


def test_a_regex_member_is_assigned_only_the_topics_it_may_describe(groups: ConsumerGroups) -> None:
    """KIP-848 with ACLs (Kafka 4.0, KAFKA-18813), per member: two members of one regex with
    different rights each get only topics their own principal may describe; rights granted
    later reach the member at its next heartbeat (fail-closed), and survive a coordinator move."""
    only_t1 = lambda name: name == "t1"  # noqa: E731
    a = Client(groups, "a", topics=(), subscribed_topic_regex="t.*", describable=only_t1)
    b = Client(groups, "b", topics=(), subscribed_topic_regex="t.*", describable=lambda _n: True)
    a.heartbeat()
    assert a.partitions() == {(T1, p) for p in range(6)}  # t2 matches, but a may not describe it
    b.heartbeat()
    for _ in range(3):  # revocations and handovers settle
        a.heartbeat()
        b.heartbeat()
    assert {t for t, _p in a.partitions()} <= {T1}
    assert {(T2, p) for p in range(4)} <= b.partitions()  # b alone may read t2: it gets all of it
    assert len(a.partitions() | b.partitions()) == 10
    assert group(groups).members["a"].regex_allowed == frozenset({"t1"})
    stored = decode_consumer_group("g", encode_consumer_group(group(groups)))
    assert stored is not None and stored.members["a"].regex_allowed == frozenset({"t1"})
    epoch = a.epoch
    a.kw["describable"] = lambda _n: True  # t2 granted to a's principal
    a.heartbeat()
    assert a.epoch > epoch and group(groups).members["a"].regex_allowed == frozenset({"t1", "t2"})


def test_topic_growth_and_deletion(groups: ConsumerGroups) -> None:
    a = Client(groups, "a", topics=("t1", "t2"))
    a.heartbeat()
    epoch = a.epoch
    a.heartbeat({"t1": (T1, 8), "t2": (T2, 4)})
    assert a.epoch == epoch + 1 and len(a.partitions()) == 12
    a.heartbeat({"t1": (T1, 8)})  # t2 deleted
    assert a.partitions() == {(T1, p) for p in range(8)}


def test_requests_are_validated() -> None:
    join = {"group_id": "g", "member_id": "m", "member_epoch": 0, "rebalance_timeout_ms": 1, "owned": {}}
    assert validate(MemberRequest(**join, subscribed_topic_names=("t",))) is None  # type: ignore[arg-type]
    bad = validate(MemberRequest(**join))  # type: ignore[arg-type]
    assert bad is not None and bad.error == E.invalid_request
    bad = validate(MemberRequest(**join, subscribed_topic_names=(), server_assignor="sticky"))  # type: ignore[arg-type]
    assert bad is not None and bad.error == E.unsupported_assignor
    bad = validate(MemberRequest(**join, subscribed_topic_regex="t[", subscribed_topic_names=()))  # type: ignore[arg-type]
    assert bad is not None and bad.error == E.invalid_regular_expression
    bad = validate(MemberRequest("g", "m", 3))
    assert bad is None
    bad = validate(MemberRequest("g", "", 3))
    assert bad is not None and bad.error == E.invalid_request


def test_range_assignor_by_request(groups: ConsumerGroups) -> None:
    a = Client(groups, "a", server_assignor="range")
    b = Client(groups, "b", server_assignor="range")
    for _ in range(3):
        a.heartbeat()
        b.heartbeat()
    assert group(groups).assignor == "range"
    assert a.owned == {T1: frozenset({0, 1, 2})} and b.owned == {T1: frozenset({3, 4, 5})}


def test_commit_and_fetch_epochs(groups: ConsumerGroups) -> None:
    a = Client(groups, "a")
    a.heartbeat()
    ok = groups.validate_commit("g", "a", a.epoch, api_version=9, transactional=False)
    assert ok == E.none
    assert (
        groups.validate_commit("g", "a", a.epoch - 1, api_version=9, transactional=False)
        == E.stale_member_epoch
    )
    assert (
        groups.validate_commit("g", "a", a.epoch, api_version=8, transactional=False) == E.unsupported_version
    )
    assert groups.validate_commit("g", "a", 0, api_version=9, transactional=True) == E.illegal_generation
    assert groups.validate_commit("g", "", -1, api_version=9, transactional=False) == E.unknown_member_id
    assert groups.validate_commit("other", "", -1, api_version=9, transactional=False) is None
    assert groups.validate_fetch("g", None, -1) == E.none
    assert groups.validate_fetch("g", "a", a.epoch + 1) == E.stale_member_epoch


def test_stored_state_round_trips(groups: ConsumerGroups, clock: ManualClock) -> None:
    a, b = Client(groups, "a", instance_id="ia"), Client(groups, "b", subscribed_topic_regex="t2")
    a.heartbeat()
    b.heartbeat()
    a.heartbeat(lazy=True)  # a mid-revocation: its pending partitions must survive the move
    text = encode_consumer_group(group(groups))
    assert is_consumer_state(text) and not is_consumer_state('{"generation": 1, "members": []}')
    loaded = decode_consumer_group("g", text)
    assert loaded is not None
    original = group(groups)
    assert loaded.owners == original.owners and loaded.target == original.target
    assert {
        m: (x.member_epoch, x.state, x.assigned, x.pending_revocation) for m, x in loaded.members.items()
    } == {m: (x.member_epoch, x.state, x.assigned, x.pending_revocation) for m, x in original.members.items()}
    groups.drop("g")
    assert groups.load("g", text)
    a.heartbeat()  # the member goes on at its epoch with the next coordinator
    b.heartbeat()
    assert a.partitions().isdisjoint(b.partitions())
    clock.advance(SESSION_MS + 1)  # sessions restarted at the load, then expired
    assert "g" not in groups.groups


def test_flush_without_fence_stores_nothing(groups: ConsumerGroups) -> None:
    a = Client(groups, "a")
    r = a.heartbeat()
    assert r.group is not None
    assert asyncio.run(groups.flush(r.group)) and r.group.stored_version == r.group.version


@pytest.mark.parametrize("seed", range(20))
def test_random_membership_never_double_assigns(
    groups: ConsumerGroups, clock: ManualClock, seed: int
) -> None:
    rnd = random.Random(seed)
    clients = [Client(groups, f"m{i}", topics=rnd.choice([("t1",), ("t1", "t2")])) for i in range(6)]
    active: list[Client] = []
    for _ in range(150):
        c = rnd.choice(clients)
        action = rnd.random()
        if c not in active and action < 0.3:
            active.append(c)
            c.heartbeat()
        elif c in active and action < 0.1:
            active.remove(c)
            groups.heartbeat(MemberRequest("g", c.member_id, -1), view())
            c.epoch, c.owned, c.target = 0, {}, None
        elif c in active:
            c.heartbeat(lazy=rnd.random() < 0.3)
        clock.advance(rnd.randint(0, 500))
        owned = [c.partitions() for c in active]
        assert sum(len(o) for o in owned) == len(set().union(*owned)) if owned else True
    for _ in range(4):  # everybody converges once they heartbeat and revoke
        for c in active:
            c.heartbeat()
    if active:
        assert group(groups).state.value == "Stable"
        union = set().union(*(c.partitions() for c in active))
        subscribed = {t for c in active for t in c.topics}
        assert union == {(TOPICS[t][0], p) for t in subscribed for p in range(TOPICS[t][1])}


def test_a_commit_racing_the_epoch_bump_passes_for_partitions_still_held(groups: ConsumerGroups) -> None:
    a, b = Client(groups, "a"), Client(groups, "b")
    a.heartbeat()
    b.heartbeat()
    a.heartbeat()  # told to revoke 3, revokes at once
    a.heartbeat()  # acked: epoch 2, still holding 3 partitions it got at epoch 1
    assert a.epoch == 2
    kept = sorted(p for _, p in a.partitions())
    gone = sorted(set(range(6)) - set(kept))

    def commit(epoch: int, parts: list[int]) -> ErrorCode | None:
        return groups.validate_commit(
            "g", "a", epoch, api_version=9, transactional=False, partitions=[("t1", p) for p in parts]
        )

    assert commit(1, kept) == E.none  # sent before the heartbeat that moved it to epoch 2 was answered
    assert commit(1, kept + gone[:1]) == E.stale_member_epoch  # a partition given up since
    assert commit(3, kept) == E.stale_member_epoch
    b.heartbeat()
    assert (
        b.epoch == 2
        and groups.validate_commit(
            "g", "b", 1, api_version=9, transactional=False, partitions=[("t1", gone[0])]
        )
        == E.stale_member_epoch
    )  # b got it at epoch 2
