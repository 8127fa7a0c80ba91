"""AlterConfigs (api key 33), v0-v2: replace a topic's whole config set (the legacy API).

Kafka semantics: the configs listed become the topic's overrides and every override not
listed is removed (reset to its default). Per resource: the same resource twice ->
INVALID_REQUEST for each; topics: illegal name -> INVALID_TOPIC_EXCEPTION, a null value ->
INVALID_REQUEST, unknown -> UNKNOWN_TOPIC_OR_PARTITION (resource errors before config
errors, as ZooKeeper-mode Kafka >= 2.7 answers and the clients' suites expect; a KRaft
controller validates the configs first), unknown names or invalid values ->
INVALID_CONFIG; `validate_only` checks without changing anything. Broker resources ->
INVALID_REQUEST: agents are configured statically (flags and SKIFF_* variables) and have
no dynamic broker configs. Authorization (Kafka's ACLs), before the rest (`refusal`,
shared with IncrementalAlterConfigs): a topic needs ALTER_CONFIGS on it, else
TOPIC_AUTHORIZATION_FAILED; any other resource ALTER_CONFIGS on the cluster, else
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from kio.schema.alter_configs.v2.request import AlterConfigsRequest, AlterConfigsResource
from kio.schema.alter_configs.v2.response import AlterConfigsResourceResponse, AlterConfigsResponse
from kio.schema.errors import ErrorCode
from skiff.agent.context import AgentContext
from skiff.agent.handlers import (
    METADATA_ERRORS,
    NO_THROTTLE,
    HandlerSpec,
    Op,
    Request,
    Resource,
    authorized,
    authorized_on_cluster,
    error_of,
)
from skiff.agent.handlers._access import CLUSTER_DENIED, RT, TOPIC_DENIED, item, on, requires
from skiff.agent.handlers.describe_configs import RESOURCE_BROKER, RESOURCE_TOPIC
from skiff.agent.protocol import convert
from skiff.metadata import configs as topic_configs


class _Resource(Protocol):
    @property
    def resource_type(self) -> Any: ...
    @property
    def resource_name(self) -> str: ...


R = TypeVar("R", bound=_Resource)
T = TypeVar("T")

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2

BROKER_CONFIGS_ARE_STATIC = "Skiff agents are configured by flags and SKIFF_* environment variables; broker configs cannot be altered."


def _result(res: Any, code: ErrorCode, message: str | None = None) -> AlterConfigsResourceResponse:
    return AlterConfigsResourceResponse(
        error_code=code,
        error_message=message,
        resource_type=res.resource_type,
        resource_name=res.resource_name,
    )


async def alter_topic(
    ctx: AgentContext,
    name: str,
    set_configs: dict[str, str],
    delete_configs: list[str],
    replace: bool,
    validate_only: bool,
) -> tuple[ErrorCode, str | None]:
    """Apply (unless validate_only) to a topic known to exist; (error code, message)."""
    if validate_only:
        return ErrorCode.none, None
    try:
        updated = await ctx.metadata.alter_topic_configs(name, set_configs, delete_configs, replace)
    except METADATA_ERRORS as e:
        code, message = error_of(e)
        if code == ErrorCode.unknown_server_error:
            raise
        ctx.topics.invalidate(names=[name])
        return code, message
    ctx.topics.put(updated)
    return ErrorCode.none, None


async def topic_exists(ctx: AgentContext, name: str) -> tuple[ErrorCode, str | None]:
    """NONE if the topic exists, else UNKNOWN_TOPIC_OR_PARTITION (or metadata's error)."""
    try:
        if name in await ctx.metadata.describe_topics([name]):
            return ErrorCode.none, None
    except METADATA_ERRORS as e:
        code, message = error_of(e)
        if code == ErrorCode.unknown_server_error:
            raise
        return code, message
    return ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist."


def refusal(ctx: AgentContext, request: Request, res: _Resource) -> ErrorCode | None:
    """The authorization error for altering this resource's configs, or None if allowed."""
    if res.resource_type == RESOURCE_TOPIC:
        if authorized(ctx, request, Op.ALTER_CONFIGS, Resource.TOPIC, res.resource_name):
            return None
        return ErrorCode.topic_authorization_failed
    if authorized_on_cluster(ctx, request, Op.ALTER_CONFIGS):
        return None
    return ErrorCode.cluster_authorization_failed


async def _alter_one(
    ctx: AgentContext, request: Request, res: AlterConfigsResource, validate_only: bool
) -> AlterConfigsResourceResponse:
    refused = refusal(ctx, request, res)
    if refused is not None:
        return _result(res, refused, "Authorization failed.")
    if res.resource_type == RESOURCE_BROKER:
        return _result(res, ErrorCode.invalid_request, BROKER_CONFIGS_ARE_STATIC)
    if res.resource_type != RESOURCE_TOPIC:
        return _result(res, ErrorCode.invalid_request, f"Unsupported resource type {res.resource_type}")
    reason = topic_configs.topic_name_error(res.resource_name)
    if reason is not None:
        return _result(res, ErrorCode.invalid_topic_exception, reason)
    raw: dict[str, object] = {}
    for c in res.configs:
        if c.value is None:
            return _result(res, ErrorCode.invalid_request, f"Null value not supported for : {c.name}")
        raw[c.name] = c.value
    # Resource errors before config errors (Kafka >= 2.7, KAFKA-10033): a topic that does
    # not exist is UNKNOWN_TOPIC_OR_PARTITION whatever its configs say.
    code, message = await topic_exists(ctx, res.resource_name)
    if code != ErrorCode.none:
        return _result(res, code, message)
    try:
        normalized = topic_configs.validate_configs(raw)
    except topic_configs.ConfigError as e:
        return _result(res, ErrorCode.invalid_config, str(e))
    code, message = await alter_topic(ctx, res.resource_name, normalized, [], True, validate_only)
    return _result(res, code, message)


async def alter_each(
    resources: Sequence[R], alter_one: Callable[[R], Awaitable[T]], refuse: Callable[[R, ErrorCode, str], T]
) -> list[T]:
    """Answer each resource in order; one named twice in a request is refused, as Kafka does."""
    counts = Counter((r.resource_type, r.resource_name) for r in resources)
    return [
        refuse(res, ErrorCode.invalid_request, "Duplicate resource in request.")
        if counts[(res.resource_type, res.resource_name)] > 1
        else await alter_one(res)
        for res in resources
    ]


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, AlterConfigsRequest)
    out = await alter_each(
        body.resources, lambda res: _alter_one(ctx, request, res, body.validate_only), _result
    )
    return AlterConfigsResponse(throttle_time=NO_THROTTLE, responses=tuple(out))


ACCESS = requires(
    item(on(RT.TOPIC, Op.ALTER_CONFIGS), TOPIC_DENIED, when="topics"),
    item(on(RT.CLUSTER, Op.ALTER_CONFIGS), CLUSTER_DENIED, when="brokers"),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
