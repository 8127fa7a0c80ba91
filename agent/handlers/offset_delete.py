"""OffsetDelete (api key 47), v0: delete some committed offsets of a group (KIP-496).

As in Kafka: a group the coordinator does not hold and that has no committed offsets gets
GROUP_ID_NOT_FOUND; partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION. While
the group has members, a "consumer" group keeps the offsets of the topics its members
subscribe to (GROUP_SUBSCRIBED_TO_TOPIC on those partitions; the others are deleted) and
any other protocol type gets NON_EMPTY_GROUP. The deletable partitions go in one metadata
call, deleted in one transaction, so offsets other partitions get committed meanwhile are
never touched. A group known only from its offsets (after an agent restart, or once
Empty) is handled as the Empty group it is. If metadata cannot be reached the answer is
COORDINATOR_NOT_AVAILABLE (retriable).

Authorization (Kafka's ACLs), first: without DELETE on the group (Kafka checks DELETE
here, not READ) the answer is GROUP_AUTHORIZATION_FAILED; partitions of topics the
principal may not READ get TOPIC_AUTHORIZATION_FAILED and are not deleted.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.offset_delete.v0.response import (
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)
from skiff.agent.context import AgentContext
from skiff.agent.groups.model import CONSUMER_PROTOCOL_TYPE
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
from skiff.agent.handlers._access import GROUP_DENIED, RT, TOPIC_DENIED, item, on, request, requires
from skiff.metadata.types import Topic

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


def _answer(
    body: Any, top: ErrorCode, codes: dict[tuple[str, int], ErrorCode] | None = None
) -> OffsetDeleteResponse:
    codes = codes or {}
    return OffsetDeleteResponse(
        error_code=top,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            OffsetDeleteResponseTopic(
                name=t.name,
                partitions=tuple(
                    OffsetDeleteResponsePartition(
                        partition_index=p.partition_index,
                        error_code=codes.get((t.name, int(p.partition_index)), ErrorCode.none),
                    )
                    for p in t.partitions
                ),
            )
            for t in body.topics
        ),
    )


def _partition_codes(
    ctx: AgentContext, request: Request, topics: dict[str, Topic], subscribed: set[str] | None
) -> tuple[dict[tuple[str, int], ErrorCode], list[tuple[str, int]]]:
    """(the codes of the partitions refused, the partitions whose offsets to delete):
    refused without READ on the topic, when unknown, or while the group subscribes to it
    (`subscribed` None: unknown, every topic counts)."""
    codes: dict[tuple[str, int], ErrorCode] = {}
    delete: list[tuple[str, int]] = []
    for t in request.body.topics:
        topic = topics.get(t.name)
        for p in t.partitions:
            key = (t.name, int(p.partition_index))
            if not authorized(ctx, request, Op.READ, Resource.TOPIC, t.name):
                codes[key] = ErrorCode.topic_authorization_failed
            elif topic is None or not 0 <= key[1] < topic.partition_count:
                codes[key] = ErrorCode.unknown_topic_or_partition
            elif subscribed is None or t.name in subscribed:
                codes[key] = ErrorCode.group_subscribed_to_topic
            else:
                delete.append(key)
    return codes, delete


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = request.body
    group_id = body.group_id
    if not authorized(ctx, request, Op.DELETE, Resource.GROUP, group_id):
        return _answer(body, ErrorCode.group_authorization_failed)
    code = await ensure_coordinator(ctx, group_id, request.connection.zone.zone)
    if code != ErrorCode.none:
        return _answer(body, code)
    coord = coordinator(ctx)
    try:
        if not coord.holds(group_id) and not await ctx.metadata.groups_with_offsets([group_id]):
            return _answer(body, ErrorCode.group_id_not_found)
        topics: dict[str, Topic] = await ctx.topics.get_by_name(list({t.name for t in body.topics}))
    except METADATA_ERRORS as e:
        return _answer(body, admin_error_of(e))

    group = coord.groups.get(group_id)  # looked up again: the awaits above let others run
    subscribed: set[str] | None = set()
    consumer = coord.consumer.groups.get(group_id)
    if consumer is not None:  # a consumer-protocol group: its members' subscribed topics
        subscribed = set(consumer.topics)
    elif group is not None and group.members:
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return _answer(body, ErrorCode.non_empty_group)
        subscribed = group.subscribed_topics()  # None: unknown, every topic counts
    codes, delete = _partition_codes(ctx, request, topics, subscribed)
    if delete:
        try:
            await ctx.metadata.delete_partition_offsets(group_id, delete)
        except METADATA_ERRORS as e:
            return _answer(body, admin_error_of(e))
    return _answer(body, ErrorCode.none, codes)


ACCESS = requires(
    request(on(RT.GROUP, Op.DELETE), GROUP_DENIED),
    item(on(RT.TOPIC, Op.READ), TOPIC_DENIED),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
