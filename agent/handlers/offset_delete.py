"""OffsetDelete (api key 47), v0: delete some committed offsets of a group (KIP-496).

Only while the group has no active members (otherwise every partition gets
GROUP_SUBSCRIBED_TO_TOPIC; Kafka refines this to the topics the members subscribe to).
Metadata has no per-partition delete yet, so the group's offsets are read, all deleted,
and the ones to keep written back; with no member committing meanwhile (the group is
empty and this agent coordinates it), nothing else writes them.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.offset_delete.v0.response import (
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)

from agent.context import AgentContext
from agent.group_coordinator import coordinator, owns_group
from agent.handlers import NO_THROTTLE, HandlerSpec, Request, error_of

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


def _answer(body: Any, top: ErrorCode, per: ErrorCode) -> OffsetDeleteResponse:
    return OffsetDeleteResponse(
        error_code=top,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            OffsetDeleteResponseTopic(
                name=t.name,
                partitions=tuple(
                    OffsetDeleteResponsePartition(partition_index=p.partition_index, error_code=per)
                    for p in t.partitions
                ),
            )
            for t in body.topics
        ),
    )


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = request.body
    if not owns_group(ctx, body.group_id):
        return _answer(body, ErrorCode.not_coordinator, ErrorCode.none)
    if not coordinator(ctx).is_empty(body.group_id):
        return _answer(body, ErrorCode.none, ErrorCode.group_subscribed_to_topic)
    try:
        current = await ctx.metadata.fetch_offsets(body.group_id, None)
        if not current and body.group_id not in coordinator(ctx).groups:
            return _answer(body, ErrorCode.group_id_not_found, ErrorCode.none)
        drop = {(t.name, int(p.partition_index)) for t in body.topics for p in t.partitions}
        keep = [o for o in current if (o.topic, o.partition) not in drop]
        if len(keep) != len(current):
            await ctx.metadata.delete_group_offsets(body.group_id)
            if keep:
                await ctx.metadata.commit_offsets(body.group_id, keep)
    except Exception as e:
        return _answer(body, error_of(e)[0], ErrorCode.none)
    return _answer(body, ErrorCode.none, ErrorCode.none)


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle)
