"""DescribeGroups (api key 15), v0-v5: state, protocol and members of groups.

A group this agent does not coordinate gets NOT_COORDINATOR; one it does not know is
reported Dead with no members (as Kafka does). Member assignments are shown only when
the group is Stable. Authorized operations are not computed (Skiff has no ACLs).
"""

from __future__ import annotations

from typing import Any

from kio.schema.describe_groups.v6.response import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsResponse,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import GroupId

from agent.context import AgentContext
from agent.group_coordinator import coordinator, owns_group
from agent.handlers import NO_THROTTLE, HandlerSpec, Request

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 5


def _describe(ctx: AgentContext, group_id: str) -> DescribedGroup:
    if not owns_group(ctx, group_id):
        return DescribedGroup(
            error_code=ErrorCode.not_coordinator,
            group_id=GroupId(group_id),
            group_state="",
            protocol_type="",
            protocol_data="",
            members=(),
        )
    d = coordinator(ctx).describe(group_id)
    return DescribedGroup(
        error_code=ErrorCode.none,
        group_id=GroupId(group_id),
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


async def handle(ctx: AgentContext, request: Request) -> Any:
    return DescribeGroupsResponse(
        throttle_time=NO_THROTTLE, groups=tuple(_describe(ctx, g) for g in request.body.groups)
    )


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle)
