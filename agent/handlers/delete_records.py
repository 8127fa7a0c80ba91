"""DeleteRecords (api key 21), v0-v2: move partitions' log start offsets forward.

Each partition's request offset becomes its log start offset (-1: the high watermark),
in metadata (metadata.maintenance.retention.delete_records): chunks wholly below it are dropped and
fetches below it get OFFSET_OUT_OF_RANGE. Answers, per partition, the new low watermark
or Kafka's error: TOPIC_AUTHORIZATION_FAILED without DELETE on the topic (Kafka's ACLs,
checked first; such partitions are not sent to metadata), OFFSET_OUT_OF_RANGE for an offset above the high watermark or below
-1, UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist, POLICY_VIOLATION for
a topic whose cleanup.policy lacks `delete`; a metadata outage fails every partition
with a retriable error. Any agent serves any partition, so there is no leader check,
and the operation is complete when metadata answers, so `timeout` is not waited on.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.delete_records.v2.request import DeleteRecordsRequest
from kio.schema.delete_records.v2.response import (
    DeleteRecordsPartitionResult,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32, i64
from skiff.agent.context import AgentContext
from skiff.agent.handlers import NO_THROTTLE, HandlerSpec, Op, Request, Resource, authorized, error_of
from skiff.agent.handlers._access import RT, TOPIC_DENIED, item, on, requires
from skiff.agent.protocol import convert, to_error_code
from skiff.metadata.types import DeleteRecordsAnswer, DeleteRecordsQuery

log = logging.getLogger(__name__)

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, DeleteRecordsRequest)
    denied = {t.name for t in body.topics if not authorized(ctx, request, Op.DELETE, Resource.TOPIC, t.name)}
    queries = [
        DeleteRecordsQuery(str(t.name), int(p.partition_index), int(p.offset))
        for t in body.topics
        if t.name not in denied
        for p in t.partitions
    ]
    answers: list[DeleteRecordsAnswer]
    try:
        answers = await ctx.metadata.delete_records(queries) if queries else []
    except Exception as e:  # boundary: a failure, even a bug (logged), answers every partition with the error
        code, message = error_of(e)
        if code == ErrorCode.unknown_server_error:
            log.exception("DeleteRecords failed")
        else:
            log.warning("DeleteRecords failed: %s", message)
        answers = [DeleteRecordsAnswer(int(code), -1, message)] * len(queries)
    _forget_cached_locations(ctx, queries, answers)
    it = iter(answers)
    topics = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            a = (
                DeleteRecordsAnswer(int(ErrorCode.topic_authorization_failed), -1)
                if t.name in denied
                else next(it)
            )
            parts.append(
                DeleteRecordsPartitionResult(
                    partition_index=i32(p.partition_index),
                    low_watermark=i64(a.low_watermark),
                    error_code=to_error_code(a.error_code),
                )
            )
        topics.append(DeleteRecordsTopicResult(name=TopicName(t.name), partitions=tuple(parts)))
    return DeleteRecordsResponse(throttle_time=NO_THROTTLE, topics=tuple(topics))


def _forget_cached_locations(
    ctx: AgentContext, queries: list[DeleteRecordsQuery], answers: list[DeleteRecordsAnswer]
) -> None:
    """This agent's cached chunk locations of the changed partitions go, so its next fetch
    below the new log start asks metadata and gets OFFSET_OUT_OF_RANGE at once. Other
    agents learn it within chunk_cache_ttl_ms (their cached files outlive that: the
    garbage collector's grace period is longer)."""
    cache = ctx.parts.chunk_locations
    for q, a in zip(queries, answers, strict=True):
        topic = ctx.topics.cached(q.topic)
        if a.error_code == ErrorCode.none and topic is not None:
            cache.invalidate((topic.topic_id, q.partition))


ACCESS = requires(item(on(RT.TOPIC, Op.DELETE), TOPIC_DENIED))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
