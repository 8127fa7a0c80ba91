"""Which agent coordinates a group, as the group handlers ask it: `coordinator(ctx)` (this
agent's `GroupCoordinator`), `owns_group` / `owned_groups` (does this agent coordinate it for
a client of that zone: it holds the group's lease, or the group is placed here,
agent.groups.placement) and `ensure_coordinator` (may it serve the request now, taking the
lease if needed: NONE, NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE, agent.groups.fencing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from skiff.agent.context import AgentContext
    from skiff.agent.groups.coordinator import GroupCoordinator


def coordinator(ctx: AgentContext) -> GroupCoordinator:
    """The agent's coordinator."""
    return ctx.parts.groups


async def owns_group(ctx: AgentContext, group_id: str, zone: str | None = None) -> bool:
    """Whether this agent coordinates `group_id` for a client of `zone` (else the answer is
    NOT_COORDINATOR): it holds the group's lease, or the group is placed here
    (agent.groups.placement)."""
    return group_id in await owned_groups(ctx, [group_id], zone)


async def owned_groups(ctx: AgentContext, group_ids: Sequence[str], zone: str | None = None) -> set[str]:
    """The groups of `group_ids` this agent coordinates for a client of `zone` (one metadata
    read at most, for the groups not held here whose holder is not cached)."""
    coord = coordinator(ctx)
    fence, placement = coord.fence, coord.placement
    if placement is None:
        return {g for g in group_ids if ctx.agents.coordinates_group(g, zone)}
    mine = {g for g in group_ids if fence is not None and fence.valid(g)}
    rest = [g for g in group_ids if g not in mine]
    chosen = await placement.choose_many(rest, zone) if rest else {}
    me = ctx.agents.self_node_id
    return mine | {g for g, b in chosen.items() if b is not None and b.node_id == me}


async def ensure_coordinator(ctx: AgentContext, group_id: str, zone: str | None = None) -> ErrorCode:
    """Whether this agent may serve a request for `group_id` from a client of `zone` now:
    NONE, NOT_COORDINATOR (placed elsewhere, or another agent holds its lease) or
    COORDINATOR_NOT_AVAILABLE (metadata out of reach). Acquires the group's lease if needed
    (agent.groups.fencing)."""
    fence = coordinator(ctx).fence
    if fence is None:
        return ErrorCode.none if ctx.agents.coordinates_group(group_id, zone) else ErrorCode.not_coordinator
    return await fence.ensure(group_id, zone)
