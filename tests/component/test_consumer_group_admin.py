"""The consumer group protocol (KIP-848) through the agent's handlers (raw kio requests,
tests/support/handler_call.py) with its fenced coordinator over the real metadata service:
ConsumerGroupHeartbeat and ConsumerGroupDescribe, the member-epoch fencing of OffsetCommit
v9 and OffsetFetch v9, the group admin APIs over both protocols (ListGroups types,
DescribeGroups, DeleteGroups, OffsetDelete), the two protocols refusing each other's
groups unless the upgrade applies, a classic group upgraded in place (a mixed group) and
downgraded back, and a group taken over from its stored state after its coordinator let it go."""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest, TopicPartitions
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.offset_commit.v8.request import OffsetCommitRequest as OffsetCommitRequestV8
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.offset_fetch.v9.request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)
from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i32Timedelta, i64
from skiff.agent.groups.embedded_protocol import decode_assignment, encode_assignment, encode_subscription
from skiff.agent.protocol import convert

from tests.component.fake_metadata import AgentHarness
from tests.support.handler_call import call_handler

E = ErrorCode


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentHarness]:
    h = AgentHarness(tmp_path_factory.mktemp("kip848"), group_initial_rebalance_delay_ms=0).start()
    yield h
    h.stop()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _ask(h: AgentHarness, body: Any) -> Any:
    return h.call(call_handler(h.agent.ctx, body))


def _topic(h: AgentHarness, partitions: int = 4) -> tuple[str, uuid.UUID]:
    assert h.metadata is not None
    name = _name("t")
    topic = h.call(h.metadata.create_topic(name, partitions, {}))
    return name, topic.topic_id


def _heartbeat(
    h: AgentHarness,
    group: str,
    member: str,
    epoch: int,
    topics: tuple[str, ...] | None = None,
    owned: dict[uuid.UUID, list[int]] | None = None,
) -> Any:
    return _ask(
        h,
        ConsumerGroupHeartbeatRequest(
            group_id=GroupId(group),
            member_id=member,
            member_epoch=i32(epoch),
            rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30 if epoch == 0 else -0.001)),
            subscribed_topic_names=None if topics is None else tuple(TopicName(t) for t in topics),
            topic_partitions=None
            if owned is None
            else tuple(
                TopicPartitions(topic_id=t, partitions=tuple(i32(p) for p in ps)) for t, ps in owned.items()
            ),
        ),
    )


def _commit(h: AgentHarness, group: str, member: str, epoch: int, topic: str, version: int = 9) -> ErrorCode:
    body = OffsetCommitRequest(
        group_id=GroupId(group),
        generation_id_or_member_epoch=i32(epoch),
        member_id=member,
        topics=(
            OffsetCommitRequestTopic(
                name=TopicName(topic),
                partitions=(
                    OffsetCommitRequestPartition(
                        partition_index=i32(0), committed_offset=i64(7), committed_metadata=""
                    ),
                ),
            ),
        ),
    )
    resp = _ask(h, body if version == 9 else convert(body, OffsetCommitRequestV8))
    code: ErrorCode = resp.topics[0].partitions[0].error_code
    return code


def _fetch(h: AgentHarness, group: str, member: str | None, epoch: int, topic: str) -> Any:
    return _ask(
        h,
        OffsetFetchRequest(
            groups=(
                OffsetFetchRequestGroup(
                    group_id=GroupId(group),
                    member_id=member,
                    member_epoch=i32(epoch),
                    topics=(OffsetFetchRequestTopics(name=TopicName(topic), partition_indexes=(i32(0),)),),
                ),
            )
        ),
    ).groups[0]


def _listed(h: AgentHarness, types: tuple[str, ...] = ()) -> dict[str, Any]:
    resp = _ask(h, ListGroupsRequest(states_filter=(), types_filter=types))
    return {g.group_id: g for g in resp.groups}


def test_a_consumer_protocol_group_and_its_admin(harness: AgentHarness) -> None:
    topic, topic_id = _topic(harness)
    group = _name("g")
    r = _heartbeat(harness, group, "m1", 0, (topic,), {})
    assert r.error_code == E.none and r.member_epoch == 1 and r.heartbeat_interval.total_seconds() == 5
    assert r.assignment.topic_partitions[0].topic_id == topic_id
    assert list(r.assignment.topic_partitions[0].partitions) == [0, 1, 2, 3]

    d = _ask(
        harness, ConsumerGroupDescribeRequest(group_ids=(GroupId(group),), include_authorized_operations=True)
    )
    g = d.groups[0]
    assert (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name) == (
        E.none,
        "Stable",
        1,
        1,
        "uniform",
    )
    member = g.members[0]
    assert member.member_id == "m1" and member.member_epoch == 1 and member.member_type == 1
    assert member.assignment.topic_partitions[0].topic_name == topic
    assert member.target_assignment == member.assignment

    assert _listed(harness, ("consumer",))[group].group_type == "consumer"
    assert group not in _listed(harness, ("classic",))
    assert _listed(harness)[group].group_state == "Stable"
    desc = _ask(harness, DescribeGroupsRequest(groups=(GroupId(group),), include_authorized_operations=False))
    assert desc.groups[0].group_state == "Dead"  # not a classic group (Kafka below DescribeGroups v6)

    assert _commit(harness, group, "m1", 1, topic) == E.none
    assert _commit(harness, group, "m1", 0, topic) == E.stale_member_epoch
    assert _commit(harness, group, "m1", 1, topic, version=8) == E.unsupported_version
    assert _commit(harness, group, "", -1, topic) == E.unknown_member_id  # simple commit, non-empty group
    assert _fetch(harness, group, "m1", 2, topic).error_code == E.stale_member_epoch
    fetched = _fetch(harness, group, "m1", 1, topic)
    assert fetched.error_code == E.none and fetched.topics[0].partitions[0].committed_offset == 7
    assert _fetch(harness, group, None, -1, topic).error_code == E.none  # an admin's fetch

    deleted = _ask(harness, DeleteGroupsRequest(groups_names=(GroupId(group),)))
    assert deleted.results[0].error_code == E.non_empty_group
    kept = _ask(
        harness,
        OffsetDeleteRequest(
            group_id=GroupId(group),
            topics=(
                OffsetDeleteRequestTopic(
                    name=TopicName(topic), partitions=(OffsetDeleteRequestPartition(partition_index=i32(0)),)
                ),
            ),
        ),
    )
    assert kept.topics[0].partitions[0].error_code == E.group_subscribed_to_topic

    left = _heartbeat(harness, group, "m1", -1)
    assert (left.error_code, left.member_epoch) == (E.none, -1)
    assert group not in _listed(harness, ("consumer",))
    deleted = _ask(harness, DeleteGroupsRequest(groups_names=(GroupId(group),)))
    assert deleted.results[0].error_code == E.none


def test_the_protocols_keep_to_their_groups(harness: AgentHarness) -> None:
    topic, _ = _topic(harness)
    consumer_group, classic_group = _name("new"), _name("old")
    assert _heartbeat(harness, consumer_group, "m1", 0, (topic,), {}).error_code == E.none
    join = JoinGroupRequest(
        group_id=GroupId(consumer_group),
        session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        member_id="",
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
    )
    assert _ask(harness, join).error_code == E.inconsistent_group_protocol
    classic = _ask(harness, dataclasses.replace(join, group_id=GroupId(classic_group)))
    assert classic.error_code == E.member_id_required  # a pending member: the group is not empty
    refused = _heartbeat(harness, classic_group, "m2", 0, (topic,), {})
    assert refused.error_code == E.coordinator_not_available  # retriable: until the classic members left
    _heartbeat(harness, consumer_group, "m1", -1)


def test_the_group_survives_its_coordinator_letting_go(harness: AgentHarness) -> None:
    topic, topic_id = _topic(harness, 2)
    group = _name("g")
    _heartbeat(harness, group, "a", 0, (topic,), {})
    b = _heartbeat(harness, group, "b", 0, (topic,), {})
    assert b.member_epoch == 2 and list(b.assignment.topic_partitions) == []  # held by a
    a = _heartbeat(harness, group, "a", 1, None, {topic_id: [0, 1]})
    assert a.member_epoch == 1 and len(a.assignment.topic_partitions[0].partitions) == 1  # revoke one
    kept = int(a.assignment.topic_partitions[0].partitions[0])

    coordinator = harness.agent.ctx.parts.groups
    assert coordinator.fence is not None
    harness.call(_let_go(coordinator, group))  # as when routing moves the group to another agent
    assert group not in coordinator.consumer.groups

    # the next request takes the lease again and loads the stored state: a is still revoking
    again = _heartbeat(harness, group, "b", 2, None, {})
    assert again.error_code == E.none and again.assignment is None
    a = _heartbeat(harness, group, "a", 1, None, {topic_id: [kept]})
    assert a.error_code == E.none and a.member_epoch == 2
    b = _heartbeat(harness, group, "b", 2, None, {})
    assert [int(p) for p in b.assignment.topic_partitions[0].partitions] == [1 - kept]
    _heartbeat(harness, group, "a", -1)
    _heartbeat(harness, group, "b", -1)


async def _let_go(coordinator: Any, group: str) -> None:
    coordinator.fence.lose(group, release=True)
    await coordinator.fence.drain()


def _classic_join(h: AgentHarness, group: str, topic: str, member: str = "") -> Any:
    return _ask(
        h,
        JoinGroupRequest(
            group_id=GroupId(group),
            session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
            rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
            member_id=member,
            protocol_type="consumer",
            protocols=(JoinGroupRequestProtocol(name="range", metadata=encode_subscription((topic,))),),
        ),
    )


def _classic_sync(h: AgentHarness, group: str, generation: int, member: str, given: bytes = b"") -> Any:
    return _ask(
        h,
        SyncGroupRequest(
            group_id=GroupId(group),
            generation_id=i32(generation),
            member_id=member,
            protocol_type="consumer",
            protocol_name="range",
            assignments=(SyncGroupRequestAssignment(member_id=member, assignment=given),) if given else (),
        ),
    )


def _classic_heartbeat(h: AgentHarness, group: str, generation: int, member: str) -> ErrorCode:
    resp = _ask(h, HeartbeatRequest(group_id=GroupId(group), generation_id=i32(generation), member_id=member))
    code: ErrorCode = resp.error_code
    return code


def test_a_classic_group_upgrades_in_place(harness: AgentHarness) -> None:
    """The online upgrade through the handlers, stored under the coordinator's lease: a
    classic member keeps its partitions until it rejoins, then the consumer-protocol member
    gets its share; ConsumerGroupDescribe tells the member types apart."""
    topic, topic_id = _topic(harness)
    group = _name("g")
    member = _classic_join(harness, group, topic).member_id
    joined = _classic_join(harness, group, topic, member)
    assert joined.error_code == E.none and joined.leader == member
    everything = encode_assignment({topic: frozenset(range(4))})
    assert _classic_sync(harness, group, joined.generation_id, member, everything).assignment == everything
    generation = int(joined.generation_id)

    new = _heartbeat(harness, group, "m2", 0, (topic,), {})
    assert new.error_code == E.none and list(new.assignment.topic_partitions) == []  # all held
    assert _listed(harness, ("consumer",))[group].group_type == "consumer"
    d = _ask(
        harness,
        ConsumerGroupDescribeRequest(group_ids=(GroupId(group),), include_authorized_operations=False),
    )
    assert sorted(m.member_type for m in d.groups[0].members) == [0, 1]
    assert _commit(harness, group, member, generation, topic, version=8) == E.none  # classic: any version

    assert _classic_heartbeat(harness, group, generation, member) == E.rebalance_in_progress
    again = _classic_join(harness, group, topic, member)  # eager: it owns nothing any more
    assert again.error_code == E.none and again.generation_id == new.member_epoch and again.leader == ""
    mine = decode_assignment(_classic_sync(harness, group, again.generation_id, member).assignment)
    assert mine is not None and len(mine[topic]) == 2
    assert _commit(harness, group, member, generation, topic, version=8) == E.illegal_generation
    assert _classic_heartbeat(harness, group, again.generation_id, member) == E.none
    theirs = _heartbeat(harness, group, "m2", new.member_epoch, None, {})
    got = {int(p) for tp in theirs.assignment.topic_partitions for p in tp.partitions}
    assert got == set(range(4)) - mine[topic] and theirs.assignment.topic_partitions[0].topic_id == topic_id

    # the last consumer-protocol member leaves: a classic group again, rebalancing
    assert _heartbeat(harness, group, "m2", -1).error_code == E.none
    assert group in _listed(harness, ("classic",))
    assert _classic_heartbeat(harness, group, again.generation_id, member) == E.rebalance_in_progress
