"""CreatePartitions (api key 37), v0-v3: grow a topic to `count` partitions.

Per topic, in Kafka's order: the same topic twice -> INVALID_REQUEST for every copy;
without ALTER on the topic -> TOPIC_AUTHORIZATION_FAILED (Kafka's ACLs);
illegal name -> INVALID_TOPIC_EXCEPTION; unknown topic -> UNKNOWN_TOPIC_OR_PARTITION;
`count` not above the current count -> INVALID_PARTITIONS (with Kafka's messages);
assignments given but not exactly one per new partition -> INVALID_REPLICA_ASSIGNMENT
(their broker ids are otherwise ignored: any agent serves any partition). With
`validate_only` nothing changes. The current count is read from metadata, not from the
cache, and metadata re-checks it when adding (a concurrent grow is reported by it).
New partitions start empty (log start offset and high watermark 0).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_partitions.v3.response import CreatePartitionsResponse, CreatePartitionsTopicResult
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
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
from skiff.metadata.types import Topic

log = logging.getLogger(__name__)

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3


def _result(name: str, code: ErrorCode, message: str | None = None) -> CreatePartitionsTopicResult:
    return CreatePartitionsTopicResult(name=TopicName(name), error_code=code, error_message=message)


def check(t: CreatePartitionsTopic, topic: Topic | None) -> CreatePartitionsTopicResult | None:
    """The error result for this request entry, or None if it may proceed."""
    if topic is None:
        return _result(t.name, ErrorCode.unknown_topic_or_partition, f"Topic '{t.name}' does not exist.")
    current = topic.partition_count
    if t.count < current:
        return _result(
            t.name,
            ErrorCode.invalid_partitions,
            f"Topic currently has {current} partitions, which is higher than the requested {t.count}.",
        )
    if t.count == current:
        return _result(t.name, ErrorCode.invalid_partitions, f"Topic already has {current} partitions.")
    if t.assignments is not None and len(t.assignments) != t.count - current:
        return _result(
            t.name,
            ErrorCode.invalid_replica_assignment,
            f"Attempted to add {t.count - current} additional partition(s), but only "
            f"{len(t.assignments)} assignment(s) were specified.",
        )
    return None


def _refusal(
    t: CreatePartitionsTopic,
    counts: Counter[TopicName],
    denied: set[TopicName],
    lookup_error: tuple[ErrorCode, str] | None,
) -> CreatePartitionsTopicResult | None:
    """The answer of a topic refused before its partitions are looked at, else None."""
    if counts[t.name] > 1:
        return _result(t.name, ErrorCode.invalid_request, "Duplicate topic in request.")
    if t.name in denied:
        return _result(t.name, ErrorCode.topic_authorization_failed, "The topic authorization is failed.")
    reason = topic_name_error(t.name)
    if reason is not None:
        return _result(t.name, ErrorCode.invalid_topic_exception, reason)
    if lookup_error is not None:
        return _result(t.name, *lookup_error)
    return None


async def _add(
    ctx: AgentContext, t: CreatePartitionsTopic, validate_only: bool
) -> CreatePartitionsTopicResult:
    """Add the partitions of a topic that passed the checks (or only say it would work)."""
    if validate_only:
        return _result(t.name, ErrorCode.none)
    try:
        topic = await ctx.metadata.add_partitions(t.name, t.count)
    except Exception as e:  # boundary: one topic's failure only
        # one topic's failure, even a bug (logged), answers for that topic only
        code, message = error_of(e)
        if code == ErrorCode.unknown_server_error:
            log.exception("adding partitions to %r failed", t.name)
        ctx.topics.invalidate(names=[t.name])
        return _result(t.name, code, message)
    ctx.topics.put(topic)
    log.info("topic %r now has %d partitions", topic.name, topic.partition_count)
    return _result(t.name, ErrorCode.none)


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, CreatePartitionsRequest)
    counts = Counter(t.name for t in body.topics)
    denied = {t.name for t in body.topics if not authorized(ctx, request, Op.ALTER, Resource.TOPIC, t.name)}
    valid = [
        t.name
        for t in body.topics
        if counts[t.name] == 1 and topic_name_error(t.name) is None and t.name not in denied
    ]
    existing: dict[str, Topic] = {}
    lookup_error: tuple[ErrorCode, str] | None = None
    if valid:
        try:
            existing = await ctx.metadata.describe_topics(valid)
        except METADATA_ERRORS as e:
            lookup_error = error_of(e)
            if lookup_error[0] == ErrorCode.unknown_server_error:
                raise

    results: list[CreatePartitionsTopicResult] = []
    for t in body.topics:
        refused = _refusal(t, counts, denied, lookup_error)
        if refused is not None:
            results.append(refused)
        else:
            results.append(check(t, existing.get(t.name)) or await _add(ctx, t, body.validate_only))
    return CreatePartitionsResponse(throttle_time=NO_THROTTLE, results=tuple(results))


ACCESS = requires(item(on(RT.TOPIC, Op.ALTER), TOPIC_DENIED))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
