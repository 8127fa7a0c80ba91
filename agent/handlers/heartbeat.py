"""Heartbeat (api key 12), v0-v4: keeps a member's session alive; tells it to rejoin
(REBALANCE_IN_PROGRESS) or that it is out of date (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
FENCED_INSTANCE_ID). See `agent.groups.coordinator`. Without READ on the group:
GROUP_AUTHORIZATION_FAILED (Kafka's ACLs)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.heartbeat.v4.response import HeartbeatResponse
from skiff.agent.context import AgentContext
from skiff.agent.groups.ownership import coordinator, ensure_coordinator
from skiff.agent.handlers import NO_THROTTLE, HandlerSpec, Op, Request, Resource, authorized
from skiff.agent.handlers._access import GROUP_DENIED, RT, on, request, requires
from skiff.agent.protocol import convert

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, HeartbeatRequest)
    if not authorized(ctx, request, Op.READ, Resource.GROUP, body.group_id):
        return HeartbeatResponse(throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed)
    code = await ensure_coordinator(ctx, body.group_id, request.connection.zone.zone)
    if code == ErrorCode.none:
        code = coordinator(ctx).heartbeat(
            body.group_id, int(body.generation_id), body.member_id, body.group_instance_id
        )
    return HeartbeatResponse(throttle_time=NO_THROTTLE, error_code=code)


ACCESS = requires(request(on(RT.GROUP, Op.READ), GROUP_DENIED))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
