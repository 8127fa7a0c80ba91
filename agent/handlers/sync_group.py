"""SyncGroup (api key 14), v0-v5: the leader hands out assignments, everyone gets theirs.

Followers wait until the leader's SyncGroup arrives (or the group rebalances, which
answers REBALANCE_IN_PROGRESS). Assignments are opaque bytes; see `agent.groups.coordinator`.
Without READ on the group: GROUP_AUTHORIZATION_FAILED (Kafka's ACLs).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.sync_group.v5.request import SyncGroupRequest
from kio.schema.sync_group.v5.response import SyncGroupResponse
from skiff.agent.context import AgentContext
from skiff.agent.groups.model import SyncResult
from skiff.agent.groups.ownership import coordinator, ensure_coordinator
from skiff.agent.handlers import NO_THROTTLE, HandlerSpec, Op, Request, Resource, authorized
from skiff.agent.handlers._access import GROUP_DENIED, RT, on, request, requires
from skiff.agent.protocol import convert

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 5


def _response(r: SyncResult) -> SyncGroupResponse:
    return SyncGroupResponse(
        throttle_time=NO_THROTTLE,
        error_code=r.error,
        protocol_type=r.protocol_type,
        protocol_name=r.protocol_name,
        assignment=r.assignment,
    )


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, SyncGroupRequest)
    if not authorized(ctx, request, Op.READ, Resource.GROUP, body.group_id):
        return _response(SyncResult(ErrorCode.group_authorization_failed))
    code = await ensure_coordinator(ctx, body.group_id, request.connection.zone.zone)
    if code != ErrorCode.none:
        return _response(SyncResult(code))
    v5 = request.api_version >= 5
    fut = coordinator(ctx).sync(
        body.group_id,
        int(body.generation_id),
        body.member_id,
        body.group_instance_id,
        [(a.member_id, a.assignment) for a in body.assignments],
        body.protocol_type if v5 else None,
        body.protocol_name if v5 else None,
    )
    return _response(await fut)


ACCESS = requires(request(on(RT.GROUP, Op.READ), GROUP_DENIED))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
