"""DeleteTopics (api key 20), v1-v6: by name, and (v6) by topic id.

v1-v5 carry `topic_names`; v6 carries `topics`, each with a name or a topic id (exactly
one; both or neither -> INVALID_REQUEST). A topic asked twice is deleted once and both
entries get the same answer. Errors per topic: illegal name -> INVALID_TOPIC_EXCEPTION,
unknown name -> UNKNOWN_TOPIC_OR_PARTITION, unknown id -> UNKNOWN_TOPIC_ID, metadata
unreachable -> REQUEST_TIMED_OUT. Authorization (Kafka's ACLs): without DELETE on the topic
-> TOPIC_AUTHORIZATION_FAILED, checked before the topic's existence; a topic asked by id
that the principal may not DESCRIBE -> TOPIC_AUTHORIZATION_FAILED with a null name. Deleting removes the topic from metadata at once; its
files are garbage-collected later (invariant 3), which is not this handler's concern.
The topic cache is invalidated, so this agent stops serving the topic immediately.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from kio.schema.delete_topics.v6.response import DeletableTopicResult, DeleteTopicsResponse
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
from skiff.agent.protocol import uuid_or_none
from skiff.metadata.configs import topic_name_error
from skiff.metadata.types import Topic

log = logging.getLogger(__name__)

API_KEY = 20
MIN_VERSION = 1
MAX_VERSION = 6


def _result(
    name: str | None, topic_id: uuid.UUID | None, code: ErrorCode, message: str | None = None
) -> DeletableTopicResult:
    return DeletableTopicResult(
        name=TopicName(name) if name is not None else None,
        topic_id=topic_id,
        error_code=code,
        error_message=message,
    )


async def _delete_by_name(
    ctx: AgentContext, request: Request, name: str, topic_id: uuid.UUID | None
) -> DeletableTopicResult:
    if not authorized(ctx, request, Op.DELETE, Resource.TOPIC, name):
        return _result(name, topic_id, ErrorCode.topic_authorization_failed, "Authorization failed.")
    reason = topic_name_error(name)
    if reason is not None:
        return _result(name, topic_id, ErrorCode.invalid_topic_exception, reason)
    try:
        if topic_id is None:
            topic = await ctx.topics.get(name)
            topic_id = topic.topic_id if topic is not None else None
        await ctx.metadata.delete_topic(name)
    except Exception as e:  # boundary: one topic's failure, even a bug (logged), answers for that topic only
        code, message = error_of(e)
        if code == ErrorCode.unknown_server_error:
            log.exception("deleting topic %r failed", name)
        return _result(name, topic_id, code, message)
    finally:
        ctx.topics.invalidate(names=[name])
    log.info("deleted topic %r", name)
    return _result(name, topic_id, ErrorCode.none)


async def _delete_one(
    ctx: AgentContext,
    request: Request,
    name: str | None,
    tid: uuid.UUID | None,
    by_id: dict[uuid.UUID, Topic],
    id_error: tuple[ErrorCode, str] | None,
) -> DeletableTopicResult:
    """One requested topic, named by name or by id (`by_id` and `id_error`: the ids' lookup)."""
    if name is not None and tid is not None:
        return _result(name, tid, ErrorCode.invalid_request, "Only one of topic name or topic id may be set.")
    if name is not None:
        return await _delete_by_name(ctx, request, name, None)
    if tid is None:
        return _result(None, None, ErrorCode.invalid_request, "A topic name or a topic id is required.")
    if id_error is not None:
        return _result(None, tid, *id_error)
    if tid not in by_id:
        return _result(None, tid, ErrorCode.unknown_topic_id, f"Topic id {tid} does not exist.")
    if not authorized(ctx, request, Op.DESCRIBE, Resource.TOPIC, by_id[tid].name):
        return _result(None, tid, ErrorCode.topic_authorization_failed, "Authorization failed.")
    return await _delete_by_name(ctx, request, by_id[tid].name, tid)


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = request.body
    wanted: list[tuple[str | None, uuid.UUID | None]] = []
    if hasattr(body, "topic_names"):
        wanted = [(name, None) for name in body.topic_names]
    else:
        wanted = [(t.name, uuid_or_none(t.topic_id)) for t in body.topics]

    ids = [tid for name, tid in wanted if name is None and tid is not None]
    by_id: dict[uuid.UUID, Topic] = {}
    id_error: tuple[ErrorCode, str] | None = None
    if ids:
        try:
            by_id = await ctx.metadata.topics_by_id(ids)
        except METADATA_ERRORS as e:
            id_error = error_of(e)

    done: dict[tuple[str | None, uuid.UUID | None], DeletableTopicResult] = {}
    results: list[DeletableTopicResult] = []
    for name, tid in wanted:
        key = (name, tid)
        if key in done:
            results.append(done[key])
            continue
        res = await _delete_one(ctx, request, name, tid, by_id, id_error)
        done[key] = res
        results.append(res)
    return DeleteTopicsResponse(throttle_time=NO_THROTTLE, responses=tuple(results))


ACCESS = requires(
    item(on(RT.TOPIC, Op.DELETE), TOPIC_DENIED),
    item(on(RT.TOPIC, Op.DESCRIBE), TOPIC_DENIED, when="topics named by id"),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
