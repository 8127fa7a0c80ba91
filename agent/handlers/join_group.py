"""JoinGroup (api key 11), v0-v9: the join phase of the classic group protocol.

The state machine is `agent.groups.coordinator`; this module translates. A group this
agent does not coordinate (or whose lease it cannot take, `agent.groups.fencing`) gets
NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE (the client finds the coordinator again).
v4+ clients are asked to rejoin with a member id the coordinator hands out
(MEMBER_ID_REQUIRED, KIP-394); older ones get a member id at once. The answer waits
until the join phase ends (bounded by the rebalance timeout). A principal without READ on
the group gets GROUP_AUTHORIZATION_FAILED (Kafka's ACLs), as in SyncGroup, Heartbeat and
LeaveGroup. In a consumer-protocol group (a mixed group, `agent.groups.mixed`) the topics the
member subscribes to are looked up first and the answer comes at once, the assignment being
the coordinator's.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.join_group.v9.request import JoinGroupRequest
from kio.schema.join_group.v9.response import JoinGroupResponse, JoinGroupResponseMember
from kio.static.primitive import i32
from skiff.agent.context import AgentContext
from skiff.agent.groups.embedded_protocol import decode_subscription
from skiff.agent.groups.model import JoinResult
from skiff.agent.groups.ownership import coordinator, ensure_coordinator
from skiff.agent.handlers import METADATA_ERRORS, NO_THROTTLE, HandlerSpec, Op, Request, Resource, authorized
from skiff.agent.handlers._access import GROUP_DENIED, RT, on, request, requires
from skiff.agent.handlers.consumer_group_heartbeat import topic_view
from skiff.agent.protocol import convert

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 9


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000)


def _response(r: JoinResult, version: int) -> JoinGroupResponse:
    return JoinGroupResponse(
        throttle_time=NO_THROTTLE,
        error_code=r.error,
        generation_id=i32(r.generation_id),
        protocol_type=r.protocol_type,
        # non-nullable before v7
        protocol_name=r.protocol_name if version >= 7 else (r.protocol_name or ""),
        leader=r.leader,
        skip_assignment=r.skip_assignment,
        member_id=r.member_id,
        members=tuple(
            JoinGroupResponseMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata
            )
            for m in r.members
        ),
    )


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, JoinGroupRequest)
    if not authorized(ctx, request, Op.READ, Resource.GROUP, body.group_id):
        return _response(
            JoinResult(ErrorCode.group_authorization_failed, member_id=body.member_id), request.api_version
        )
    code = await ensure_coordinator(ctx, body.group_id, request.connection.zone.zone)
    if code != ErrorCode.none:
        return _response(JoinResult(code, member_id=body.member_id), request.api_version)
    session_ms = _ms(body.session_timeout)
    rebalance_ms = _ms(body.rebalance_timeout) if request.api_version >= 1 else session_ms
    view = None
    group = coordinator(ctx).consumer.groups.get(body.group_id)
    if group is not None:
        # A consumer-protocol group (a mixed group): the member's topics are looked up, as
        # for a ConsumerGroupHeartbeat (agent.groups.mixed).
        sub = decode_subscription(body.protocols[0].metadata) if body.protocols else None
        names = set(sub.topics if sub is not None else ()) | group.all_subscribed_names() | set(group.topics)
        try:
            view = await topic_view(ctx, names, False)
        except METADATA_ERRORS:
            return _response(
                JoinResult(ErrorCode.coordinator_not_available, member_id=body.member_id), request.api_version
            )
    fut = coordinator(ctx).join(
        body.group_id,
        body.member_id,
        body.group_instance_id,
        body.protocol_type,
        [(p.name, p.metadata) for p in body.protocols],
        session_ms,
        rebalance_ms,
        client_id=request.client_id or "",
        client_host=request.connection.peer,
        require_known_member_id=request.api_version >= 4,
        view=view,
    )
    result = await fut
    if request.api_version < 7 and result.skip_assignment:
        # Before v9 a leader cannot be told to skip the assignment: it assigns again, harmlessly.
        result = JoinResult(**{**result.__dict__, "skip_assignment": False})
    return _response(result, request.api_version)


ACCESS = requires(request(on(RT.GROUP, Op.READ), GROUP_DENIED))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
