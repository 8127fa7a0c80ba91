"""Group admin APIs (raw kio requests, answered by the agent's handlers called directly:
tests/support/handler_call.py; a consumer's membership over TCP) for groups the coordinator does not hold in
memory: ListGroups / DescribeGroups / DeleteGroups / OffsetDelete find them in metadata
(committed offsets outlive members, agent restarts and the coordinator forgetting Empty
groups), and OffsetDelete keeps the topics an active consumer group subscribes to."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i32Timedelta, i64
from skiff.metadata.types import GroupOffset

from tests.component.fake_metadata import AgentHarness, RunningAgent, connect, roundtrip
from tests.support.handler_call import call_handler


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentHarness]:
    h = AgentHarness(tmp_path_factory.mktemp("groups"), group_initial_rebalance_delay_ms=0).start()
    yield h
    h.stop()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _topic(h: AgentHarness, partitions: int = 2) -> str:
    assert h.metadata is not None
    name = _name("t")
    h.call(h.metadata.create_topic(name, partitions, {}))
    return name


def _commit(h: AgentHarness, group: str, offsets: list[GroupOffset]) -> None:
    assert h.metadata is not None
    h.call(h.metadata.commit_offsets(group, offsets))


def _offsets(h: AgentHarness, group: str) -> list[tuple[str, int, int]]:
    assert h.metadata is not None
    return [(o.topic, o.partition, o.offset) for o in h.call(h.metadata.fetch_offsets(group, None))]


def _ask(h: AgentHarness, body: Any, agent: RunningAgent | None = None) -> Any:
    """The agent's (default: the first's) response to `body`, from its handler: no socket."""
    return h.call(call_handler((agent or h.agent).ctx, body))


def _list(h: AgentHarness, states: tuple[str, ...] = (), agent: RunningAgent | None = None) -> Any:
    return _ask(h, ListGroupsRequest(states_filter=states, types_filter=()), agent)


def _describe(h: AgentHarness, *groups: str) -> Any:
    return _ask(
        h,
        DescribeGroupsRequest(groups=tuple(GroupId(g) for g in groups), include_authorized_operations=False),
    )


def _offset_delete(h: AgentHarness, group: str, parts: dict[str, list[int]]) -> Any:
    return _ask(
        h,
        OffsetDeleteRequest(
            group_id=GroupId(group),
            topics=tuple(
                OffsetDeleteRequestTopic(
                    name=TopicName(t),
                    partitions=tuple(OffsetDeleteRequestPartition(partition_index=i32(p)) for p in ps),
                )
                for t, ps in parts.items()
            ),
        ),
    )


def _codes(resp: Any) -> dict[tuple[str, int], ErrorCode]:
    return {(t.name, int(p.partition_index)): p.error_code for t in resp.topics for p in t.partitions}


def test_groups_known_only_from_their_offsets(harness: AgentHarness) -> None:
    topic = _topic(harness)
    group, unknown = _name("g"), _name("nobody")
    _commit(harness, group, [GroupOffset(topic, 0, 5), GroupOffset(topic, 1, 6)])

    listed = {g.group_id: g for g in _list(harness).groups}
    assert listed[group].group_state == "Empty" and listed[group].protocol_type == ""
    assert unknown not in listed
    assert group in {g.group_id for g in _list(harness, ("Empty",)).groups}
    assert group not in {g.group_id for g in _list(harness, ("Stable",)).groups}

    described = {g.group_id: g for g in _describe(harness, group, unknown).groups}
    assert (described[group].error_code, described[group].group_state) == (ErrorCode.none, "Empty")
    assert described[group].members == ()
    assert (described[unknown].error_code, described[unknown].group_state) == (ErrorCode.none, "Dead")

    resp = _offset_delete(harness, group, {topic: [0], "no-such-topic": [0]})
    assert resp.error_code == ErrorCode.none
    assert _codes(resp) == {
        (topic, 0): ErrorCode.none,
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert _offsets(harness, group) == [(topic, 1, 6)]
    assert _offset_delete(harness, unknown, {topic: [0]}).error_code == ErrorCode.group_id_not_found

    resp = _ask(harness, DeleteGroupsRequest(groups_names=(GroupId(group), GroupId(unknown))))
    assert {r.group_id: r.error_code for r in resp.results} == {
        group: ErrorCode.none,
        unknown: ErrorCode.group_id_not_found,
    }
    assert _offsets(harness, group) == []
    assert group not in {g.group_id for g in _list(harness).groups}


def test_metadata_unreachable_gives_retriable_coordinator_errors(harness: AgentHarness) -> None:
    topic = _topic(harness)
    group = _name("g")
    _commit(harness, group, [GroupOffset(topic, 0, 1)])
    assert harness.metadata is not None
    harness.metadata.down = True
    try:
        assert _list(harness).error_code == ErrorCode.coordinator_not_available
        (d,) = _describe(harness, group).groups
        assert d.error_code == ErrorCode.coordinator_not_available
        resp = _ask(harness, DeleteGroupsRequest(groups_names=(GroupId(group),)))
        assert resp.results[0].error_code == ErrorCode.coordinator_not_available
        assert _offset_delete(harness, group, {topic: [0]}).error_code == (
            ErrorCode.coordinator_not_available
        )
    finally:
        harness.metadata.down = False
    assert _offsets(harness, group) == [(topic, 0, 1)]


def _subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topics, user data (null)."""
    out = (0).to_bytes(2, "big") + len(topics).to_bytes(4, "big")
    for t in topics:
        out += len(t).to_bytes(2, "big") + t.encode()
    return out + b"\xff\xff\xff\xff"


def test_offset_delete_keeps_the_topics_an_active_group_subscribes_to(harness: AgentHarness) -> None:
    subscribed, other = _topic(harness), _topic(harness)
    group = _name("g")
    ten_s = i32Timedelta.parse(datetime.timedelta(seconds=10))

    def join(member_id: str) -> Any:
        return JoinGroupRequest(
            group_id=GroupId(group),
            session_timeout=ten_s,
            rebalance_timeout=ten_s,
            member_id=member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=(JoinGroupRequestProtocol(name="range", metadata=_subscription(subscribed)),),
            reason=None,
        )

    with connect(harness.bootstrap) as sock:
        first = roundtrip(sock, join(""))
        assert first.error_code == ErrorCode.member_id_required
        joined = roundtrip(sock, join(first.member_id), correlation_id=2)
        assert joined.error_code == ErrorCode.none and joined.leader == joined.member_id
        synced = roundtrip(
            sock,
            SyncGroupRequest(
                group_id=GroupId(group),
                generation_id=joined.generation_id,
                member_id=joined.member_id,
                group_instance_id=None,
                protocol_type="consumer",
                protocol_name="range",
                assignments=(SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b""),),
            ),
            correlation_id=3,
        )
        assert synced.error_code == ErrorCode.none
        _commit(
            harness,
            group,
            [GroupOffset(subscribed, 0, 3), GroupOffset(other, 0, 4), GroupOffset(other, 1, 5)],
        )

        resp = _offset_delete(harness, group, {subscribed: [0], other: [0]})
        assert resp.error_code == ErrorCode.none
        assert _codes(resp) == {
            (subscribed, 0): ErrorCode.group_subscribed_to_topic,
            (other, 0): ErrorCode.none,
        }
        assert sorted(_offsets(harness, group)) == sorted([(subscribed, 0, 3), (other, 1, 5)])
        (d,) = _describe(harness, group).groups
        assert d.group_state == "Stable" and len(d.members) == 1
        resp = _ask(harness, DeleteGroupsRequest(groups_names=(GroupId(group),)))
        assert resp.results[0].error_code == ErrorCode.non_empty_group


def test_each_agent_lists_the_offset_only_groups_it_coordinates(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    h = AgentHarness(tmp_path_factory.mktemp("two")).start(agents=2)
    try:
        h.refresh_all()
        topic = _topic(h)
        groups = {_name("g") for _ in range(12)}
        for g in groups:
            _commit(h, g, [GroupOffset(topic, 0, 1)])
        seen = [{x.group_id for x in _list(h, agent=a).groups} & groups for a in h.agents]
        assert seen[0] | seen[1] == groups and not seen[0] & seen[1]
        assert seen[0] and seen[1]  # 12 groups over 2 agents: both get some
        for agent, mine in zip(h.agents, seen, strict=True):
            assert all(agent.ctx.agents.coordinator_for_group(g).node_id == agent.node_id for g in mine)
    finally:
        h.stop()


def test_offset_commit_stores_negative_offsets_as_given(harness: AgentHarness) -> None:
    """A simple OffsetCommit (no member) with negative offsets: stored as given, as Kafka's
    coordinator stores them (it checks only the metadata size)."""
    topic = _topic(harness, partitions=3)
    group = _name("g")
    body = OffsetCommitRequest(
        group_id=GroupId(group),
        generation_id_or_member_epoch=i32(-1),
        member_id="",
        topics=(
            OffsetCommitRequestTopic(
                name=TopicName(topic),
                partitions=tuple(
                    OffsetCommitRequestPartition(
                        partition_index=i32(p), committed_offset=i64(o), committed_metadata=None
                    )
                    for p, o in ((0, 7), (1, -5), (2, -1))
                ),
            ),
        ),
    )
    resp = _ask(harness, body)
    codes = [int(p.error_code) for p in resp.topics[0].partitions]
    assert codes == [ErrorCode.none] * 3
    assert _offsets(harness, group) == [(topic, 0, 7), (topic, 1, -5), (topic, 2, -1)]
