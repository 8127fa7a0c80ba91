"""DeleteGroups (api key 42), v0-v2: forget empty groups and their committed offsets.

Per group: NOT_COORDINATOR if another agent coordinates it, NON_EMPTY_GROUP while it has
members, GROUP_ID_NOT_FOUND if it has neither members nor committed offsets; otherwise
its offsets are deleted in metadata and the coordinator forgets it.
"""

from __future__ import annotations

from typing import Any

from kio.schema.delete_groups.v2.response import DeletableGroupResult, DeleteGroupsResponse
from kio.schema.errors import ErrorCode

from agent.context import AgentContext
from agent.group_coordinator import coordinator, owns_group
from agent.handlers import NO_THROTTLE, HandlerSpec, Request, error_of

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def _delete(ctx: AgentContext, group_id: str) -> ErrorCode:
    if not owns_group(ctx, group_id):
        return ErrorCode.not_coordinator
    coord = coordinator(ctx)
    if not coord.is_empty(group_id):
        return ErrorCode.non_empty_group
    try:
        known = group_id in coord.groups or bool(await ctx.metadata.fetch_offsets(group_id, None))
        if not known:
            return ErrorCode.group_id_not_found
        await ctx.metadata.delete_group_offsets(group_id)
    except Exception as e:
        return error_of(e)[0]
    return coord.delete(group_id)


async def handle(ctx: AgentContext, request: Request) -> Any:
    results = []
    for g in request.body.groups_names:
        results.append(DeletableGroupResult(group_id=g, error_code=await _delete(ctx, g)))
    return DeleteGroupsResponse(throttle_time=NO_THROTTLE, results=tuple(results))


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle)
