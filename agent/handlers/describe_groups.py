"""DescribeGroups (api key 15), v0-v5: state, protocol and members of groups.

A group this agent does not coordinate gets NOT_COORDINATOR. A consumer-protocol group
(KIP-848) is Dead here, as Kafka answers DescribeGroups below v6 for a group that is not
classic: ConsumerGroupDescribe (api key 69) describes it, and admin clients ask that first.
One the coordinator does not
hold in memory is looked up in metadata (one call for the whole request): with committed
offsets it is Empty (no members, no protocol type, as Kafka reports a group that only
stores offsets), without any it is Dead, as Kafka reports an unknown group. If metadata
cannot be reached such groups get COORDINATOR_NOT_AVAILABLE (retriable). Member
assignments are shown only when the group is Stable. A principal without DESCRIBE on a
group gets GROUP_AUTHORIZATION_FAILED for it (Kafka's ACLs); v3+ authorized operations
are computed from the ACLs when asked for (all of READ, DESCRIBE, DELETE with
authorization off).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kio.schema.describe_groups.v6.response import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsResponse,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import GroupId
from kio.static.primitive import i32
from skiff.agent.context import AgentContext
from skiff.agent.groups.model import GroupDescription, GroupState
from skiff.agent.groups.ownership import coordinator, owns_group
from skiff.agent.handlers import (
    METADATA_ERRORS,
    NO_THROTTLE,
    HandlerSpec,
    Op,
    Request,
    Resource,
    admin_error_of,
    authorized,
    authorized_operations,
)
from skiff.agent.handlers._access import GROUP_DENIED, RT, item, on, reported, requires
from skiff.agent.handlers._cooperative import pause

# READ, DESCRIBE and DELETE (Kafka's AclOperation codes): what a group supports.
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 8) | (1 << 6)

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 5


def _failed(group_id: str, code: ErrorCode) -> DescribedGroup:
    return DescribedGroup(
        error_code=code,
        group_id=GroupId(group_id),
        group_state="",
        protocol_type="",
        protocol_data="",
        members=(),
    )


def _described(d: GroupDescription) -> DescribedGroup:
    return DescribedGroup(
        error_code=ErrorCode.none,
        group_id=GroupId(d.group_id),
        group_state=d.state,
        protocol_type=d.protocol_type,
        protocol_data=d.protocol_name,
        members=tuple(
            DescribedGroupMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata,
                member_assignment=m.assignment,
            )
            for m in d.members
        ),
    )


async def _described_from_offsets(ctx: AgentContext, group_ids: list[str]) -> dict[str, DescribedGroup]:
    """Groups the coordinator does not hold: Empty if metadata has committed offsets for
    them, else Dead (or as the coordinator describes them, if created meanwhile)."""
    coord = coordinator(ctx)
    try:
        with_offsets = set(await ctx.metadata.groups_with_offsets(group_ids))
    except METADATA_ERRORS as e:
        code = admin_error_of(e)
        return {g: _failed(g, code) for g in group_ids}
    answers: dict[str, DescribedGroup] = {}
    for i, group_id in enumerate(group_ids):
        await pause(i)
        d = coord.describe(group_id)  # it may have been created while we waited
        if d is None:
            state = GroupState.EMPTY if group_id in with_offsets else GroupState.DEAD
            d = GroupDescription(group_id, state.value, "", "", ())
        answers[group_id] = _described(d)
    return answers


def _add_authorized_operations(
    ctx: AgentContext, request: Request, answers: dict[str, DescribedGroup]
) -> None:
    """KIP-430: each described group's authorized operations for this principal."""
    for group_id, answer in answers.items():
        if answer.error_code == ErrorCode.none:
            ops = authorized_operations(ctx, request, Resource.GROUP, group_id)
            answers[group_id] = dataclasses.replace(
                answer, authorized_operations=i32(GROUP_AUTHORIZED_OPERATIONS if ops is None else ops)
            )


async def handle(ctx: AgentContext, request: Request) -> Any:
    coord = coordinator(ctx)
    answers: dict[str, DescribedGroup] = {}
    not_in_memory: list[str] = []
    for i, group_id in enumerate(request.body.groups):
        await pause(i)  # up to 10,000 groups (agent.protocol.request_limits): let other clients in
        if not authorized(ctx, request, Op.DESCRIBE, Resource.GROUP, group_id):
            answers[group_id] = _failed(group_id, ErrorCode.group_authorization_failed)
            continue
        if not await owns_group(ctx, group_id, request.connection.zone.zone):
            answers[group_id] = _failed(group_id, ErrorCode.not_coordinator)
            continue
        if group_id in coord.consumer.groups:
            answers[group_id] = _described(GroupDescription(group_id, GroupState.DEAD.value, "", "", ()))
            continue
        d = coord.describe(group_id)
        if d is None:
            not_in_memory.append(group_id)
        else:
            answers[group_id] = _described(d)
    if not_in_memory:
        answers.update(await _described_from_offsets(ctx, not_in_memory))
    if getattr(request.body, "include_authorized_operations", False):
        _add_authorized_operations(ctx, request, answers)
    return DescribeGroupsResponse(
        throttle_time=NO_THROTTLE, groups=tuple(answers[g] for g in request.body.groups)
    )


ACCESS = requires(
    item(on(RT.GROUP, Op.DESCRIBE), GROUP_DENIED),
    reported(on(RT.GROUP, Op.DESCRIBE), when="group authorized operations"),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
