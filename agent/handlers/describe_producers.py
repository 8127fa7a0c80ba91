"""DescribeProducers (api key 61), v0: the idempotent and transactional producers of partitions.

From metadata's producer state (`describe_producers`: the rows the commit path keeps to
de-duplicate retries), per partition: producer id and epoch, the last sequence number it
wrote there, the time of its last batch (when that batch was committed: Skiff keeps no
per-producer batch timestamp), coordinator epoch -1 (Kafka's value when no marker has
been written; Skiff's coordinators are fenced by leases, not epochs) and the first offset
of its open transaction in the partition (-1: none). Producer state is kept until the
topic is deleted, where Kafka forgets a producer after `producer.id.expiration.ms`.

Any agent answers for any partition (there is no NOT_LEADER_OR_FOLLOWER). Per topic, as
Kafka's `handleDescribeProducersRequest`: an illegal name -> INVALID_TOPIC_EXCEPTION, no
READ on the topic -> TOPIC_AUTHORIZATION_FAILED, an unknown topic ->
UNKNOWN_TOPIC_OR_PARTITION, on every partition asked; a partition past the topic's count ->
UNKNOWN_TOPIC_OR_PARTITION; metadata out of reach -> REQUEST_TIMED_OUT (retriable).
"""

from __future__ import annotations

from typing import Any

from kio.schema.describe_producers.v0.request import DescribeProducersRequest
from kio.schema.describe_producers.v0.response import (
    DescribeProducersResponse,
    PartitionResponse,
    ProducerState,
    TopicResponse,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId
from kio.static.primitive import i32, i64
from skiff.agent.context import AgentContext
from skiff.agent.handlers import (
    METADATA_ERRORS,
    NO_THROTTLE,
    HandlerSpec,
    Op,
    Request,
    Resource,
    authorized,
    error_of,
)
from skiff.agent.handlers._access import RT, TOPIC_DENIED, item, on, requires
from skiff.agent.protocol import convert
from skiff.metadata.configs import topic_name_error
from skiff.metadata.types import ActiveProducer, PartitionKey, Topic

API_KEY = 61
MIN_VERSION = 0
MAX_VERSION = 0

NO_COORDINATOR_EPOCH = i32(-1)


def _topic_error(
    ctx: AgentContext, request: Request, name: str, found: dict[str, Topic], failed: ErrorCode
) -> ErrorCode:
    if topic_name_error(name) is not None:
        return ErrorCode.invalid_topic_exception
    if not authorized(ctx, request, Op.READ, Resource.TOPIC, name):
        return ErrorCode.topic_authorization_failed
    if failed != ErrorCode.none:
        return failed
    if name not in found:
        return ErrorCode.unknown_topic_or_partition
    return ErrorCode.none


def _state(p: ActiveProducer) -> ProducerState:
    return ProducerState(
        producer_id=ProducerId(p.producer_id),
        producer_epoch=i32(p.producer_epoch),
        last_sequence=i32(p.last_sequence),
        last_timestamp=i64(p.last_commit_ms),
        coordinator_epoch=NO_COORDINATOR_EPOCH,
        current_txn_start_offset=i64(p.txn_start_offset),
    )


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, DescribeProducersRequest)
    names = [t.name for t in body.topics if topic_name_error(t.name) is None]
    try:
        found = await ctx.topics.get_by_name(list(dict.fromkeys(names)))
    except METADATA_ERRORS as e:
        found, failed = {}, error_of(e)[0]
    else:
        failed = ErrorCode.none
    errors = {t.name: _topic_error(ctx, request, t.name, found, failed) for t in body.topics}
    keys = [
        PartitionKey(found[t.name].topic_id, int(p))
        for t in body.topics
        if errors[t.name] == ErrorCode.none
        for p in t.partition_indexes
        if 0 <= p < found[t.name].partition_count
    ]
    by_key: dict[tuple[Any, int], list[ProducerState]] = {}
    try:
        producers = await ctx.metadata.describe_producers(list(dict.fromkeys(keys))) if keys else []
    except METADATA_ERRORS as e:
        code = error_of(e)[0]
        errors = {n: code if c == ErrorCode.none else c for n, c in errors.items()}
        producers = []
    for p in producers:
        by_key.setdefault((p.topic_id, p.partition), []).append(_state(p))
    return DescribeProducersResponse(
        throttle_time=NO_THROTTLE,
        topics=tuple(
            TopicResponse(
                name=t.name,
                partitions=tuple(
                    _partition(found.get(t.name), int(p), errors[t.name], by_key) for p in t.partition_indexes
                ),
            )
            for t in body.topics
        ),
    )


def _partition(
    topic: Topic | None, index: int, code: ErrorCode, by_key: dict[tuple[Any, int], list[ProducerState]]
) -> PartitionResponse:
    if code == ErrorCode.none and topic is not None and not 0 <= index < topic.partition_count:
        code = ErrorCode.unknown_topic_or_partition
    if code != ErrorCode.none or topic is None:
        return PartitionResponse(partition_index=i32(index), error_code=code, active_producers=())
    return PartitionResponse(
        partition_index=i32(index),
        error_code=ErrorCode.none,
        active_producers=tuple(by_key.get((topic.topic_id, index), ())),
    )


ACCESS = requires(item(on(RT.TOPIC, Op.READ), TOPIC_DENIED))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
