"""LeaveGroup (api key 13), v0-v5: members leave at once instead of timing out.

v0-v2 name one member (`member_id`) and get one error code; v3+ (KIP-345) name a batch
of members by member id and/or `group.instance.id` and get one answer each. The group
rebalances without them. See `agent.groups.coordinator`. Without READ on the group:
GROUP_AUTHORIZATION_FAILED (Kafka's ACLs).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.leave_group.v5.response import LeaveGroupResponse, MemberResponse
from skiff.agent.context import AgentContext
from skiff.agent.groups.model import LeaveRequest
from skiff.agent.groups.ownership import coordinator, ensure_coordinator
from skiff.agent.handlers import NO_THROTTLE, HandlerSpec, Op, Request, Resource, authorized
from skiff.agent.handlers._access import GROUP_DENIED, RT, on, request, requires

API_KEY = 13
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = request.body
    batched = request.api_version >= 3
    leaving = (
        [LeaveRequest(m.member_id, m.group_instance_id) for m in body.members]
        if batched
        else [LeaveRequest(body.member_id)]
    )
    if not authorized(ctx, request, Op.READ, Resource.GROUP, body.group_id):
        code = ErrorCode.group_authorization_failed
    else:
        code = await ensure_coordinator(ctx, body.group_id, request.connection.zone.zone)
    if code != ErrorCode.none:
        return LeaveGroupResponse(throttle_time=NO_THROTTLE, error_code=code, members=())
    codes = coordinator(ctx).leave(body.group_id, leaving)
    if not batched:
        return LeaveGroupResponse(throttle_time=NO_THROTTLE, error_code=codes[0], members=())
    return LeaveGroupResponse(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        members=tuple(
            MemberResponse(member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=c)
            for m, c in zip(leaving, codes, strict=True)
        ),
    )


ACCESS = requires(request(on(RT.GROUP, Op.READ), GROUP_DENIED))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
