"""ConsumerGroupDescribe (api key 69), v0-v1: consumer-protocol groups (KIP-848) as their
coordinator holds them: state, group epoch, assignment epoch, assignor, and every member's
epoch, subscription, current and target assignment (topic ids with their names).

A group this agent does not coordinate gets NOT_COORDINATOR; a group it does not hold as a
consumer-protocol group gets GROUP_ID_NOT_FOUND, as in Kafka ("not a consumer group" for a
classic one; the Java AdminClient then falls back to DescribeGroups, which describes classic
groups and groups known only from their committed offsets). Like DescribeGroups it reads the
coordinator's memory and takes no lease: right after a coordinator moved, a group is
described once one of its members has heartbeated to the new coordinator.

Authorization (Kafka's ACLs): DESCRIBE on each group (else GROUP_AUTHORIZATION_FAILED for
it); the authorized operations are computed when asked for (READ, DESCRIBE, DELETE with
authorization off).
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.consumer_group_describe.v1.response import (
    Assignment,
    ConsumerGroupDescribeResponse,
    DescribedGroup,
    Member,
    TopicPartitions,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32
from skiff.agent.context import AgentContext
from skiff.agent.groups.assignors import Assignment as PartitionsByTopic
from skiff.agent.groups.consumer_model import ConsumerGroup, ConsumerMember
from skiff.agent.groups.ownership import coordinator, owns_group
from skiff.agent.handlers import (
    NO_THROTTLE,
    HandlerSpec,
    Op,
    Request,
    Resource,
    authorized,
    authorized_operations,
)
from skiff.agent.handlers._access import GROUP_DENIED, RT, item, on, reported, requires
from skiff.agent.handlers._cooperative import pause
from skiff.agent.handlers.describe_groups import GROUP_AUTHORIZED_OPERATIONS

API_KEY = 69
MIN_VERSION = 0
MAX_VERSION = 1

CONSUMER_MEMBER_TYPE = 1  # v1 member_type: 0 classic, 1 consumer
CLASSIC_MEMBER_TYPE = 0  # a classic-protocol member of a mixed group (agent.groups.mixed)


def _failed(group_id: str, code: ErrorCode, message: str | None = None) -> DescribedGroup:
    return DescribedGroup(
        error_code=code,
        error_message=message,
        group_id=GroupId(group_id),
        group_state="",
        group_epoch=i32(-1),
        assignment_epoch=i32(-1),
        assignor_name="",
        members=(),
    )


def _assignment(parts: PartitionsByTopic, names: dict[uuid.UUID, str]) -> Assignment:
    return Assignment(
        topic_partitions=tuple(
            TopicPartitions(
                topic_id=tid,
                topic_name=TopicName(names.get(tid, "")),
                partitions=tuple(i32(p) for p in sorted(ps)),
            )
            for tid, ps in sorted(parts.items(), key=lambda kv: names.get(kv[0], str(kv[0])))
        )
    )


def _member(group: ConsumerGroup, m: ConsumerMember, names: dict[uuid.UUID, str]) -> Member:
    return Member(
        member_id=m.member_id,
        instance_id=m.instance_id,
        rack_id=m.rack_id,
        member_epoch=i32(m.member_epoch),
        client_id=m.client_id,
        client_host=m.client_host,
        subscribed_topic_names=tuple(TopicName(n) for n in m.subscribed_topic_names),
        subscribed_topic_regex=m.subscribed_topic_regex,
        assignment=_assignment(m.assigned, names),
        target_assignment=_assignment(group.target.get(m.member_id, {}), names),
        member_type=i8(CONSUMER_MEMBER_TYPE if m.classic is None else CLASSIC_MEMBER_TYPE),
    )


def described(group: ConsumerGroup, authorized_ops: int) -> DescribedGroup:
    names = group.topic_names()
    return DescribedGroup(
        error_code=ErrorCode.none,
        group_id=GroupId(group.group_id),
        group_state=group.state.value,
        group_epoch=i32(group.group_epoch),
        assignment_epoch=i32(group.assignment_epoch),
        assignor_name=group.assignor,
        members=tuple(_member(group, m, names) for m in group.members.values()),
        authorized_operations=i32(authorized_ops),
    )


async def handle(ctx: AgentContext, request: Request) -> Any:
    coord = coordinator(ctx)
    answers: list[DescribedGroup] = []
    for i, group_id in enumerate(request.body.group_ids):
        await pause(i)  # a bounded but long list: let other clients in
        if not authorized(ctx, request, Op.DESCRIBE, Resource.GROUP, group_id):
            answers.append(_failed(group_id, ErrorCode.group_authorization_failed))
            continue
        if not await owns_group(ctx, group_id, request.connection.zone.zone):
            answers.append(_failed(group_id, ErrorCode.not_coordinator))
            continue
        group = coord.consumer.groups.get(group_id)
        if group is None:
            kind = "is not a consumer group" if group_id in coord.groups else "not found"
            answers.append(_failed(group_id, ErrorCode.group_id_not_found, f"Group {group_id} {kind}."))
            continue
        ops = -(2**31)
        if request.body.include_authorized_operations:
            found = authorized_operations(ctx, request, Resource.GROUP, group_id)
            ops = GROUP_AUTHORIZED_OPERATIONS if found is None else found
        answers.append(described(group, ops))
    return ConsumerGroupDescribeResponse(throttle_time=NO_THROTTLE, groups=tuple(answers))


ACCESS = requires(
    item(on(RT.GROUP, Op.DESCRIBE), GROUP_DENIED),
    reported(on(RT.GROUP, Op.DESCRIBE), when="group authorized operations"),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
