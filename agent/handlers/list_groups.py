"""ListGroups (api key 16), v0-v5: the groups this agent coordinates.

Clients ask every broker and merge, so each agent lists only its own groups (those in
its `GroupCoordinator`, including Empty ones it has seen since it started). v4+ filter by
state, v5+ by type: every Skiff group is a "classic" group.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.list_groups.v5.response import ListedGroup, ListGroupsResponse
from kio.schema.types import GroupId

from agent.context import AgentContext
from agent.group_coordinator import coordinator
from agent.handlers import NO_THROTTLE, HandlerSpec, Request
from agent.protocol import convert

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5

GROUP_TYPE = "classic"


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, ListGroupsRequest)
    states = {s.lower() for s in body.states_filter}
    types = {t.lower() for t in body.types_filter}
    listed = []
    for g in coordinator(ctx).list_groups():
        if states and g.state.value.lower() not in states:
            continue
        if types and GROUP_TYPE not in types:
            continue
        listed.append(
            ListedGroup(
                group_id=GroupId(g.group_id),
                protocol_type=g.protocol_type or "",
                group_state=g.state.value,
                group_type=GROUP_TYPE,
            )
        )
    return ListGroupsResponse(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=tuple(listed))


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle)
