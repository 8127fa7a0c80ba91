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
from skiff.agent.groups.ownership import coordinator, ensure_coordinator
from skiff.agent.handlers import (
    METADATA_ERRORS,
    NO_THROTTLE,
    HandlerSpec,
    Op,
    Request,
    Resource,
    admin_error_of,
    authorized,
)
from skiff.agent.handlers._access import GROUP_DENIED, RT, item, on, requires

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: AgentContext, request: Request) -> Any:
    names = list(request.body.groups_names)
    codes: dict[str, ErrorCode] = {}
    candidates = await _empty_groups(ctx, request, names, codes)
    with_offsets: set[str] = set()
    if candidates:
        try:
            with_offsets = set(await ctx.metadata.groups_with_offsets(candidates))
        except METADATA_ERRORS as e:
            code = admin_error_of(e)
            codes.update((g, code) for g in candidates)
            candidates = []
    for group_id in candidates:
        codes[group_id] = await _delete(ctx, group_id, with_offsets)
    return DeleteGroupsResponse(
        throttle_time=NO_THROTTLE,
        results=tuple(DeletableGroupResult(group_id=g, error_code=codes[g]) for g in names),
    )


async def _empty_groups(
    ctx: AgentContext, request: Request, names: list[str], codes: dict[str, ErrorCode]
) -> list[str]:
    """The named groups this agent may delete and finds empty; the others' codes go in `codes`."""
    coord = coordinator(ctx)
    candidates: list[str] = []
    for group_id in dict.fromkeys(names):
        if not authorized(ctx, request, Op.DELETE, Resource.GROUP, group_id):
            codes[group_id] = ErrorCode.group_authorization_failed
            continue
        code = await ensure_coordinator(
            ctx, group_id, request.connection.zone.zone
        )  # a lease: a group held elsewhere is not empty
        if code != ErrorCode.none:
            codes[group_id] = code
        elif not coord.is_empty(group_id):
            codes[group_id] = ErrorCode.non_empty_group
        else:
            candidates.append(group_id)
    return candidates


async def _delete(ctx: AgentContext, group_id: str, with_offsets: set[str]) -> ErrorCode:
    """Forget an empty group and its committed offsets; its code."""
    coord = coordinator(ctx)
    if group_id not in coord.groups and group_id not in with_offsets:
        return ErrorCode.group_id_not_found
    # Forget it in memory first (this re-checks that it is still empty): a member that
    # joins from here on starts a new group, which cannot commit before it has synced.
    code = coord.delete(group_id)
    if code == ErrorCode.none and group_id in with_offsets:
        try:
            await ctx.metadata.delete_group_offsets(group_id)
        except METADATA_ERRORS as e:
            code = admin_error_of(e)
    return code


ACCESS = requires(item(on(RT.GROUP, Op.DELETE), GROUP_DENIED))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
