"""DeleteGroups (api key 42), v0-v2: forget empty groups and their committed offsets.

Per group: GROUP_AUTHORIZATION_FAILED without DELETE on it (Kafka's ACLs); NOT_COORDINATOR if another agent coordinates it, NON_EMPTY_GROUP while it has
members, GROUP_ID_NOT_FOUND if the coordinator does not hold it and metadata has no
committed offsets for it; otherwise the coordinator forgets it and its offsets are deleted
in metadata. A group known only from its offsets (after an agent restart, or once Empty)
is deletable, as in Kafka. Metadata is asked once for the whole request; if it cannot be
reached the groups concerned get COORDINATOR_NOT_AVAILABLE (retriable).
"""

from __future__ import annotations

from typing import Any

from kio.schema.delete_groups.v2.response import DeletableGroupResult, DeleteGroupsResponse
from kio.schema.errors import ErrorCode
from skiff.agent.context import AgentContext
from skiff.agent.groups.coordinator import coordinator, ensure_coordinator
from skiff.agent.handlers import NO_THROTTLE, HandlerSpec, Op, Request, Resource, admin_error_of, authorized
from skiff.agent.handlers._access import GROUP_DENIED, RT, item, on, requires

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: AgentContext, request: Request) -> Any:
    coord = coordinator(ctx)
    names = list(request.body.groups_names)
    codes: dict[str, ErrorCode] = {}
    candidates: list[str] = []
    for group_id in dict.fromkeys(names):
        if not authorized(ctx, request, Op.DELETE, Resource.GROUP, group_id):
            codes[group_id] = ErrorCode.group_authorization_failed
            continue
        code = await ensure_coordinator(ctx, group_id)  # a lease: a group held elsewhere is not empty
        if code != ErrorCode.none:
            codes[group_id] = code
        elif not coord.is_empty(group_id):
            codes[group_id] = ErrorCode.non_empty_group
        else:
            candidates.append(group_id)
    with_offsets: set[str] = set()
    if candidates:
        try:
            with_offsets = set(await ctx.metadata.groups_with_offsets(candidates))
        except Exception as e:
            code = admin_error_of(e)
            codes.update((g, code) for g in candidates)
            candidates = []
    for group_id in candidates:
        if group_id not in coord.groups and group_id not in with_offsets:
            codes[group_id] = ErrorCode.group_id_not_found
            continue
        # Forget it in memory first (this re-checks that it is still empty): a member that
        # joins from here on starts a new group, which cannot commit before it has synced.
        code = coord.delete(group_id)
        if code == ErrorCode.none and group_id in with_offsets:
            try:
                await ctx.metadata.delete_group_offsets(group_id)
            except Exception as e:
                code = admin_error_of(e)
        codes[group_id] = code
    return DeleteGroupsResponse(
        throttle_time=NO_THROTTLE,
        results=tuple(DeletableGroupResult(group_id=g, error_code=codes[g]) for g in names),
    )


ACCESS = requires(item(on(RT.GROUP, Op.DELETE), GROUP_DENIED))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
