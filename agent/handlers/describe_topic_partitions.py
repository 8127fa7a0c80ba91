"""DescribeTopicPartitions (api key 75), v0: topics and their partitions, a page at a time.

What the Java AdminClient's `describeTopics` asks brokers that serve it (Kafka 3.8+), in
place of Metadata. Partitions are described as Metadata describes them
(`agent.handlers.kafka_metadata`: the rendezvous leader as the only replica, in sync,
leader epoch -1), with empty eligible-leader-replica lists.

Pagination, as Kafka's `DescribeTopicPartitionsRequestHandler`: topics are answered in name
order, from the cursor's topic (and, for that topic, the cursor's partition) on, at most
`response_partition_limit` partitions (capped at Kafka's default limit 2,000, at least 1)
per response; when partitions are left, `next_cursor` names the first one not answered
(the next topic's partition 0 when the page ended exactly at a topic's end). An empty
topic list means every topic; a cursor whose topic is not in a non-empty list, or whose
partition is negative, is INVALID_REQUEST for every requested topic.

Authorization: a listing of every topic shows only those the principal may DESCRIBE; a
named topic it may not DESCRIBE is answered at the end with TOPIC_AUTHORIZATION_FAILED
(and no id), whether it exists or not. Named topics that do not exist get
UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an illegal name). Every answered
topic carries its authorized operations (all a topic supports with authorization off).
Metadata out of reach: the topics answered from the topic cache where it has them, the
others LEADER_NOT_AVAILABLE (retriable); a listing with nothing cached closes the
connection (the client retries), as Metadata does.
"""

from __future__ import annotations

from typing import Any

from kio.schema.describe_topic_partitions.v0.request import DescribeTopicPartitionsRequest
from kio.schema.describe_topic_partitions.v0.response import (
    Cursor,
    DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponsePartition,
    DescribeTopicPartitionsResponseTopic,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32
from skiff.agent.agent_registry import NO_LEADER
from skiff.agent.context import AgentContext
from skiff.agent.handlers import (
    NO_THROTTLE,
    HandlerSpec,
    Op,
    Request,
    Resource,
    authorized,
    authorized_operations,
)
from skiff.agent.handlers import _consumer_offsets as consumer_offsets
from skiff.agent.handlers._access import RT, TOPIC_DENIED, filtered, item, on, reported, requires
from skiff.agent.handlers.kafka_metadata import INTERNAL_TOPICS, TOPIC_AUTHORIZED_OPERATIONS
from skiff.agent.protocol import convert
from skiff.metadata.configs import topic_name_error
from skiff.metadata.errors import MetadataUnavailable
from skiff.metadata.types import Topic

API_KEY = 75
MIN_VERSION = 0
MAX_VERSION = 0

MAX_PARTITIONS_PER_RESPONSE = 2000  # Kafka's max.request.partition.size.limit default


def _topic(
    name: str,
    code: ErrorCode,
    topic: Topic | None = None,
    partitions: tuple[Any, ...] = (),
    ops: int | None = None,
) -> DescribeTopicPartitionsResponseTopic:
    return DescribeTopicPartitionsResponseTopic(
        error_code=code,
        name=TopicName(name),
        topic_id=None if topic is None else topic.topic_id,
        is_internal=name in INTERNAL_TOPICS,
        partitions=partitions,
        topic_authorized_operations=i32(TOPIC_AUTHORIZED_OPERATIONS if ops is None else ops),
    )


def _partitions(ctx: AgentContext, topic: Topic, start: int, end: int) -> tuple[Any, ...]:
    leaders = ctx.agents.leaders_for_topic(topic.topic_id, topic.partition_count)
    return tuple(
        DescribeTopicPartitionsResponsePartition(
            error_code=ErrorCode.none,
            partition_index=i32(p),
            leader_id=BrokerId(leaders[p]),
            leader_epoch=i32(-1),
            replica_nodes=(BrokerId(leaders[p]),) if leaders[p] != NO_LEADER else (),
            isr_nodes=(BrokerId(leaders[p]),) if leaders[p] != NO_LEADER else (),
            eligible_leader_replicas=(),
            last_known_elr=(),
            offline_replicas=(),
        )
        for p in range(start, end)
    )


def _invalid(body: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse:
    return DescribeTopicPartitionsResponse(
        throttle_time=NO_THROTTLE,
        topics=tuple(
            DescribeTopicPartitionsResponseTopic(
                error_code=ErrorCode.invalid_request,
                name=t.name,
                topic_id=None,
                is_internal=False,
                partitions=(),
            )
            for t in body.topics
        ),
    )


async def _lookup(ctx: AgentContext, names: list[str] | None) -> dict[str, Topic | None]:
    """name -> topic (None: unavailable) for `names`, or every topic when None; with the
    internal `__consumer_offsets` (agent.handlers._consumer_offsets)."""
    found = await _lookup_table(ctx, names)
    if names is None or consumer_offsets.NAME in names:
        found[consumer_offsets.NAME] = consumer_offsets.TOPIC
    return found


async def _lookup_table(ctx: AgentContext, names: list[str] | None) -> dict[str, Topic | None]:
    try:
        if names is None:
            return {t.name: t for t in await ctx.topics.all_topics()}
        return dict(await ctx.topics.get_by_name([n for n in names if topic_name_error(n) is None]))
    except MetadataUnavailable:
        if names is None:
            cached = ctx.topics.cached_all()
            if cached is None:
                raise
            return {t.name: t for t in cached}
        return {n: ctx.topics.cached(n) for n in names}


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, DescribeTopicPartitionsRequest)
    cursor = body.cursor
    after = cursor.topic_name if cursor is not None else ""
    every = not body.topics
    asked: list[str] = sorted({str(t.name) for t in body.topics if t.name >= after})
    if cursor is not None and ((not every and cursor.topic_name not in asked) or cursor.partition_index < 0):
        return _invalid(body)
    found = await _lookup(ctx, None if every else asked)
    names = sorted(n for n in found if n >= after) if every else asked
    allowed = [n for n in names if authorized(ctx, request, Op.DESCRIBE, Resource.TOPIC, n)]
    remaining = max(min(MAX_PARTITIONS_PER_RESPONSE, int(body.response_partition_limit)), 1)
    out: list[DescribeTopicPartitionsResponseTopic] = []
    next_cursor: Cursor | None = None
    for name in allowed:
        if remaining == 0:
            next_cursor = Cursor(topic_name=TopicName(name), partition_index=i32(0))
            break
        ops = authorized_operations(ctx, request, Resource.TOPIC, name)
        topic = found.get(name)
        if topic is None:
            if not every:
                code = ErrorCode.unknown_topic_or_partition
                if topic_name_error(name) is not None:
                    code = ErrorCode.invalid_topic_exception
                elif name in found:  # known to exist, metadata out of reach
                    code = ErrorCode.leader_not_available
                out.append(_topic(name, code, ops=ops))
            continue
        start = int(cursor.partition_index) if cursor is not None and name == cursor.topic_name else 0
        end = min(topic.partition_count, start + remaining)
        out.append(_topic(name, ErrorCode.none, topic, _partitions(ctx, topic, start, end), ops))
        if end < topic.partition_count:
            next_cursor = Cursor(topic_name=TopicName(name), partition_index=i32(end))
            break
        remaining -= max(end - start, 0)
    if not every:
        denied = [n for n in names if n not in allowed]
        out += [
            DescribeTopicPartitionsResponseTopic(
                error_code=ErrorCode.topic_authorization_failed,
                name=TopicName(n),
                topic_id=None,
                is_internal=False,
                partitions=(),
            )
            for n in denied
        ]
    return DescribeTopicPartitionsResponse(
        throttle_time=NO_THROTTLE, topics=tuple(out), next_cursor=next_cursor
    )


ACCESS = requires(
    item(on(RT.TOPIC, Op.DESCRIBE), TOPIC_DENIED, when="named topics"),
    filtered(on(RT.TOPIC, Op.DESCRIBE), when="all topics"),
    reported(on(RT.TOPIC, Op.DESCRIBE), when="topic authorized operations"),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
