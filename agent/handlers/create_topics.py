"""CreateTopics (api key 19), v2-v7.

Each topic is checked in Kafka's order, and gets its own error code:

1. the same name twice in one request -> INVALID_REQUEST for every copy;
1a. without CREATE on the cluster or on the topic -> TOPIC_AUTHORIZATION_FAILED (Kafka's
   ACLs); a created topic's configs are returned only to a principal that may
   DESCRIBE_CONFIGS it (else `topic_config_error_code` TOPIC_AUTHORIZATION_FAILED);
2. an illegal name -> INVALID_TOPIC_EXCEPTION;
3. a name that exists -> TOPIC_ALREADY_EXISTS;
4. a manual assignment with num_partitions or replication_factor not -1 -> INVALID_REQUEST;
   assignments must number partitions 0..n-1 -> INVALID_REPLICA_ASSIGNMENT otherwise
   (the broker ids are ignored: any agent serves any partition);
5. num_partitions -1 -> `default_partitions`; 0 or below -1 -> INVALID_PARTITIONS;
6. replication_factor -1 or any positive value is accepted and ignored (the bucket is
   the replication); 0 or below -1 -> INVALID_REPLICATION_FACTOR;
7. configs: unknown names, null or invalid values -> INVALID_CONFIG (`metadata.configs`).

`validate_only` stops there. Otherwise the topics are created in metadata in batches
(`metadata.types.create_batches`: up to 500 topics, one metadata call and one database
transaction per batch; metadata checks again, atomically: a concurrent create of the same
name gets TOPIC_ALREADY_EXISTS) and the answer carries the topic id (v7), partition count,
replication factor 1 and every config with its source (v5+).

`timeout` (ms, > 0): the topics whose batch has not returned by then are answered
REQUEST_TIMED_OUT, as Kafka does; their creation goes on (they may exist a moment later,
and a retry gets TOPIC_ALREADY_EXISTS). A timeout of 0 or less waits for the creation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections import Counter
from collections.abc import Set as AbstractSet
from typing import Any

from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.create_topics.v7.response import (
    CreatableTopicConfigs,
    CreatableTopicResult,
    CreateTopicsResponse,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i8, i16, i32
from skiff.agent.context import AgentContext
from skiff.agent.handlers import (
    NO_THROTTLE,
    HandlerSpec,
    Op,
    Request,
    Resource,
    authorized,
    authorized_on_cluster,
    error_of,
)
from skiff.agent.handlers import _consumer_offsets as consumer_offsets
from skiff.agent.handlers._access import RT, TOPIC_DENIED, item, on, requires
from skiff.agent.handlers._cooperative import pause
from skiff.agent.handlers.describe_configs import TOPIC_CONFIG_NAMES, ConfigEntry, topic_config_entry
from skiff.agent.protocol import convert, to_error_code
from skiff.metadata import configs as topic_configs
from skiff.metadata.errors import MetadataUnavailable
from skiff.metadata.types import NewTopic, Topic, create_batches

log = logging.getLogger(__name__)

API_KEY = 19
MIN_VERSION = 2
MAX_VERSION = 7


class TopicError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _failed(name: str, code: ErrorCode, message: str | None) -> CreatableTopicResult:
    return CreatableTopicResult(
        name=TopicName(name),
        topic_id=None,
        error_code=code,
        error_message=message,
        num_partitions=i32(-1),
        replication_factor=i16(-1),
        configs=None,
    )


def _succeeded(name: str, topic_id: Any, partitions: int, configs: dict[str, str]) -> CreatableTopicResult:
    return CreatableTopicResult(
        name=TopicName(name),
        topic_id=topic_id,
        error_code=ErrorCode.none,
        error_message=None,
        num_partitions=i32(partitions),
        replication_factor=i16(1),
        configs=tuple(
            _config(topic_config_entry(name, configs[name], False))
            if name in configs
            else _default_config(name)
            for name in TOPIC_CONFIG_NAMES
        ),
    )


def _config(e: ConfigEntry) -> CreatableTopicConfigs:
    return CreatableTopicConfigs(
        name=e.name,
        value=e.value,
        read_only=e.read_only,
        config_source=i8(e.source),
        is_sensitive=e.is_sensitive,
    )


@functools.cache
def _default_config(name: str) -> CreatableTopicConfigs:
    """A default-valued config is answered alike for every topic: built once and shared."""
    return _config(topic_config_entry(name, topic_configs.CONFIG_DEFS[name].default, True))


def _without_configs_unless(
    ctx: AgentContext, request: Request, result: CreatableTopicResult
) -> CreatableTopicResult:
    """Kafka returns a created topic's configs only to a principal that may DESCRIBE_CONFIGS it."""
    if authorized(ctx, request, Op.DESCRIBE_CONFIGS, Resource.TOPIC, result.name):
        return result
    return dataclasses.replace(
        result, configs=(), topic_config_error_code=i16(int(ErrorCode.topic_authorization_failed))
    )


def validate_topic(ctx: AgentContext, t: CreatableTopic) -> tuple[int, dict[str, str]]:
    """(partition count, normalized configs) of a topic to create; TopicError if invalid."""
    reason = topic_configs.topic_name_error(t.name)
    if reason is not None:
        raise TopicError(ErrorCode.invalid_topic_exception, reason)
    if t.name == consumer_offsets.NAME:  # served from metadata's offsets log: it exists
        raise TopicError(ErrorCode.topic_already_exists, f"Topic '{t.name}' already exists.")
    partitions = _partition_count(ctx, t)
    if t.replication_factor == 0 or t.replication_factor < -1:
        raise TopicError(
            ErrorCode.invalid_replication_factor,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    raw: dict[str, object] = {}
    for c in t.configs:
        if c.value is None:
            raise TopicError(
                ErrorCode.invalid_config, f"Null value not supported for topic configs: {c.name}"
            )
        raw[c.name] = c.value
    try:
        configs = topic_configs.validate_configs(raw)
    except topic_configs.ConfigError as e:
        raise TopicError(ErrorCode.invalid_config, str(e)) from None
    return partitions, configs


def _partition_count(ctx: AgentContext, t: CreatableTopic) -> int:
    """The topic's partition count: from its manual assignment, its num_partitions, or the
    default (-1); TopicError if invalid."""
    if t.assignments:
        if t.num_partitions != -1 or t.replication_factor != -1:
            raise TopicError(
                ErrorCode.invalid_request,
                "A manual partition assignment was specified, but numPartitions or replicationFactor "
                "was not set to -1.",
            )
        indices = sorted(a.partition_index for a in t.assignments)
        if indices != list(range(len(indices))):
            raise TopicError(
                ErrorCode.invalid_replica_assignment,
                "Partitions in a manual assignment must be numbered consecutively from 0.",
            )
        return len(indices)
    if t.num_partitions == -1:
        return ctx.config.default_partitions
    if t.num_partitions <= 0:
        raise TopicError(
            ErrorCode.invalid_partitions, "Number of partitions was set to an invalid non-positive value."
        )
    return t.num_partitions


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, CreateTopicsRequest)
    counts = Counter(t.name for t in body.topics)
    duplicates = {n for n, c in counts.items() if c > 1}
    cluster_create = authorized_on_cluster(ctx, request, Op.CREATE)
    denied = {
        t.name
        for t in body.topics
        if not cluster_create and not authorized(ctx, request, Op.CREATE, Resource.TOPIC, t.name)
    }

    to_check = [t for t in body.topics if t.name not in duplicates and t.name not in denied]
    existing: dict[str, Topic] = {}
    lookup_error: tuple[ErrorCode, str] | None = None
    names = [t.name for t in to_check if topic_configs.topic_name_error(t.name) is None]
    if names:
        try:
            existing = await ctx.metadata.describe_topics(names)
        except MetadataUnavailable as e:
            lookup_error = error_of(e)

    results: list[CreatableTopicResult | None] = []
    to_create: dict[int, NewTopic] = {}  # by index in the request
    for i, t in enumerate(body.topics):
        checked = _checked(ctx, request, body, t, duplicates, denied, existing, lookup_error)
        if isinstance(checked, CreatableTopicResult):
            results.append(checked)
        else:
            results.append(None)
            to_create[i] = NewTopic(t.name, *checked)
        await pause(i)
    if to_create:
        created = _Creation(ctx, request, to_create)
        task = asyncio.create_task(created.run())
        timeout_s = body.timeout.total_seconds()
        try:
            # The creation goes on after the timeout (as in Kafka, the topics may still be
            # created); the answer does not wait for it.
            await asyncio.wait_for(asyncio.shield(task), timeout_s if timeout_s > 0 else None)
        except TimeoutError:
            _BACKGROUND.add(task)
            task.add_done_callback(_BACKGROUND.discard)
            log.warning(
                "CreateTopics from %s: %d of %d topic(s) not created within its timeout of %d ms; "
                "answered REQUEST_TIMED_OUT for them, creation goes on",
                request.client_id,
                len(to_create) - len(created.done),
                len(to_create),
                int(timeout_s * 1000),
            )
        for i in to_create:
            results[i] = created.done.get(i) or _failed(
                to_create[i].name,
                ErrorCode.request_timed_out,
                f"Topic creation did not finish within the request's timeout of {int(timeout_s * 1000)} ms.",
            )
    return CreateTopicsResponse(throttle_time=NO_THROTTLE, topics=tuple(r for r in results if r is not None))


# Creations still running after their request timed out (a reference, so they finish).
_BACKGROUND: set[asyncio.Task[None]] = set()


def _checked(
    ctx: AgentContext,
    request: Request,
    body: CreateTopicsRequest,
    t: CreatableTopic,
    duplicates: AbstractSet[str],
    denied: AbstractSet[str],
    existing: dict[str, Topic],
    lookup_error: tuple[ErrorCode, str] | None,
) -> CreatableTopicResult | tuple[int, dict[str, str]]:
    """The answer for a topic refused by the checks (or answered by validate_only), else its
    (partition count, normalized configs) to create it with."""
    if t.name in duplicates:
        return _failed(
            t.name,
            ErrorCode.invalid_request,
            f"Create topics request from client `{request.client_id}` contains multiple entries for "
            f"the following topics: {t.name}",
        )
    if t.name in denied:
        return _failed(t.name, ErrorCode.topic_authorization_failed, "Authorization failed.")
    try:
        partitions, configs = validate_topic(ctx, t)
    except TopicError as e:
        if e.code != ErrorCode.invalid_topic_exception and t.name in existing:
            return _failed(t.name, ErrorCode.topic_already_exists, f"Topic '{t.name}' already exists.")
        return _failed(t.name, e.code, e.message)
    if lookup_error is not None:
        return _failed(t.name, *lookup_error)
    if t.name in existing:
        return _failed(t.name, ErrorCode.topic_already_exists, f"Topic '{t.name}' already exists.")
    if body.validate_only:
        return _without_configs_unless(ctx, request, _succeeded(t.name, None, partitions, configs))
    return partitions, configs


class _Creation:
    """Creates the topics in batches (`metadata.types.create_batches`: one metadata call
    and one transaction each), recording each topic's answer in `done` as its batch returns."""

    def __init__(self, ctx: AgentContext, request: Request, to_create: dict[int, NewTopic]) -> None:
        self.ctx = ctx
        self.request = request
        self.to_create = to_create
        self.done: dict[int, CreatableTopicResult] = {}

    async def run(self) -> None:
        ctx = self.ctx
        index = {id(t): i for i, t in self.to_create.items()}
        for batch in create_batches(list(self.to_create.values())):
            try:
                outcomes = await ctx.metadata.create_topics(batch)
            except Exception as e:  # boundary: one batch's failure only
                # one batch's failure, even a bug (logged), answers for its topics only
                code, message = error_of(e)
                if code == ErrorCode.unknown_server_error:
                    log.exception("creating %d topic(s) failed", len(batch))
                for t in batch:
                    self.done[index[id(t)]] = _failed(t.name, code, message)
                continue
            created = 0
            for n, (t, outcome) in enumerate(zip(batch, outcomes, strict=True)):
                i = index[id(t)]
                if outcome.topic is None:
                    self.done[i] = _failed(t.name, to_error_code(outcome.error_code), outcome.message)
                else:
                    topic = outcome.topic
                    ctx.topics.put(topic)
                    created += 1
                    self.done[i] = _without_configs_unless(
                        ctx,
                        self.request,
                        _succeeded(topic.name, topic.topic_id, topic.partition_count, dict(topic.configs)),
                    )
                await pause(n)
            if created:
                log.info(
                    "created %d topic(s) (%s%s)",
                    created,
                    batch[0].name,
                    f" ... {batch[-1].name}" if len(batch) > 1 else "",
                )


ACCESS = requires(
    item((on(RT.CLUSTER, Op.CREATE), on(RT.TOPIC, Op.CREATE)), TOPIC_DENIED),
    item(on(RT.TOPIC, Op.DESCRIBE_CONFIGS), TOPIC_DENIED, when="the created topic's configs, v5+"),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
