"""ListGroups (api key 16), v0-v5: the groups this agent coordinates.

Clients ask every broker and merge, so each agent lists only its own groups: those in its
`GroupCoordinator`, plus those known only from their committed offsets in metadata (after
an agent restart, or once a group is Empty and forgotten by the coordinator) that rendezvous
hashing gives to this agent, which are Empty with no protocol type (as Kafka reports a
group that only stores offsets). If metadata cannot be reached the answer is
COORDINATOR_NOT_AVAILABLE (retriable) rather than a silently partial list. v4+ filter by
state, v5+ by type: "consumer" for the groups of the consumer group protocol (KIP-848,
ConsumerGroupHeartbeat), "classic" for the others (JoinGroup groups, and groups known only
from their offsets, as Kafka lists them). As in Kafka, a principal that may DESCRIBE the
cluster sees every group, any other one only the groups it may DESCRIBE.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.list_groups.v5.response import ListedGroup, ListGroupsResponse
from kio.schema.types import GroupId
from skiff.agent.context import AgentContext
from skiff.agent.groups.consumer_model import ConsumerGroup
from skiff.agent.groups.model import GroupState
from skiff.agent.groups.ownership import coordinator, owned_groups
from skiff.agent.handlers import (
    METADATA_ERRORS,
    NO_THROTTLE,
    HandlerSpec,
    Op,
    Request,
    Resource,
    admin_error_of,
    authorized,
    authorized_on_cluster,
)
from skiff.agent.handlers._access import RT, filtered, on, requires
from skiff.agent.protocol import convert

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5

CLASSIC_TYPE = "classic"
CONSUMER_TYPE = "consumer"


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, ListGroupsRequest)
    states = {s.lower() for s in body.states_filter}
    types = {t.lower() for t in body.types_filter}
    zone = request.connection.zone.zone
    in_memory = coordinator(ctx).list_groups()
    try:
        # not one left over from before a coordinator move
        held = await owned_groups(ctx, [g.group_id for g in in_memory], zone)
        with_offsets = await ctx.metadata.groups_with_offsets(None)
        placed_here = await owned_groups(ctx, with_offsets, zone)
    except METADATA_ERRORS as e:
        return ListGroupsResponse(throttle_time=NO_THROTTLE, error_code=admin_error_of(e), groups=())
    found: dict[str, tuple[str, str, str]] = {  # group id -> (protocol type, state, group type)
        g.group_id: (
            g.protocol_type or "",
            g.state.value,
            CONSUMER_TYPE if isinstance(g, ConsumerGroup) else CLASSIC_TYPE,
        )
        for g in in_memory
        if g.group_id in held
    }
    for group_id in with_offsets:
        if group_id not in found and group_id in placed_here:
            found[group_id] = ("", GroupState.EMPTY.value, CLASSIC_TYPE)
    listed = []
    every_group = authorized_on_cluster(ctx, request, Op.DESCRIBE)
    for group_id, (protocol_type, state, group_type) in found.items():
        if not every_group and not authorized(ctx, request, Op.DESCRIBE, Resource.GROUP, group_id):
            continue
        if states and state.lower() not in states:
            continue
        if types and group_type not in types:
            continue
        listed.append(
            ListedGroup(
                group_id=GroupId(group_id),
                protocol_type=protocol_type,
                group_state=state,
                group_type=group_type,
            )
        )
    return ListGroupsResponse(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=tuple(listed))


ACCESS = requires(filtered((on(RT.CLUSTER, Op.DESCRIBE), on(RT.GROUP, Op.DESCRIBE))))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
