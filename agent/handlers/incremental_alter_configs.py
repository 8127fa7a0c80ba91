"""IncrementalAlterConfigs (api key 44), v0-v1: change single topic configs.

Operations per config: SET (0) sets an override, DELETE (1) removes it (back to the
default), APPEND (2) / SUBTRACT (3) add items to / remove items from a list config
(`cleanup.policy`, the throttled-replica lists), starting from the current value,
default included (`cleanup.policy` delete + APPEND compact = `delete,compact`).

Per resource: the same resource twice or the same config twice -> INVALID_REQUEST;
an unknown operation or a null value for SET/APPEND/SUBTRACT -> INVALID_REQUEST; an
unknown config name, an invalid value, or APPEND/SUBTRACT on a non-list config ->
INVALID_CONFIG; topics: illegal name -> INVALID_TOPIC_EXCEPTION, unknown topic ->
UNKNOWN_TOPIC_OR_PARTITION. Broker resources -> INVALID_REQUEST (agents are configured
statically). The new overrides are computed from the topic's current ones and written
with `alter_topic_configs(replace=False)`; `validate_only` stops before writing.
Authorization as in AlterConfigs (agent.handlers.alter_configs.refusal), checked first.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.incremental_alter_configs.v1.response import (
    AlterConfigsResourceResponse,
    IncrementalAlterConfigsResponse,
)
from skiff.agent.context import AgentContext
from skiff.agent.handlers import METADATA_ERRORS, NO_THROTTLE, HandlerSpec, Request, error_of
from skiff.agent.handlers._access import CLUSTER_DENIED, RT, TOPIC_DENIED, Op, item, on, requires
from skiff.agent.handlers.alter_configs import BROKER_CONFIGS_ARE_STATIC, alter_each, alter_topic, refusal
from skiff.agent.handlers.describe_configs import RESOURCE_BROKER, RESOURCE_TOPIC
from skiff.agent.protocol import convert
from skiff.metadata import configs as topic_configs

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1

OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


class _Invalid(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _result(res: Any, code: ErrorCode, message: str | None = None) -> AlterConfigsResourceResponse:
    return AlterConfigsResourceResponse(
        error_code=code,
        error_message=message,
        resource_type=res.resource_type,
        resource_name=res.resource_name,
    )


def _items(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


def plan_changes(res: AlterConfigsResource, current: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """(configs to set, configs to delete) for a topic whose current overrides are `current`."""
    set_configs: dict[str, str] = {}
    delete_configs: list[str] = []
    for c in res.configs:
        d = topic_configs.CONFIG_DEFS.get(c.name)
        if c.config_operation not in (OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT):
            raise _Invalid(
                ErrorCode.invalid_request, f"Unknown config operation {c.config_operation} for {c.name}"
            )
        if d is None:
            raise _Invalid(ErrorCode.invalid_config, f"Unknown topic config name: {c.name}")
        if c.config_operation == OP_DELETE:
            delete_configs.append(c.name)
            continue
        if c.value is None:
            raise _Invalid(ErrorCode.invalid_request, f"Null value not supported for : {c.name}")
        value: str
        if c.config_operation == OP_SET:
            value = c.value
        else:
            if d.config_type != topic_configs.TYPE_LIST:
                verb = "append" if c.config_operation == OP_APPEND else "subtract"
                raise _Invalid(
                    ErrorCode.invalid_config, f"Config value {verb} is not allowed for config key: {c.name}"
                )
            items = _items(topic_configs.config_value(current, c.name))
            change = _items(c.value)
            if c.config_operation == OP_APPEND:
                items += [i for i in change if i not in items]
            else:
                items = [i for i in items if i not in change]
            value = ",".join(items)
        try:
            set_configs[c.name] = topic_configs.validate_config(c.name, value)
        except topic_configs.ConfigError as e:
            raise _Invalid(ErrorCode.invalid_config, str(e)) from None
    return set_configs, delete_configs


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
    name = res.resource_name
    reason = topic_configs.topic_name_error(name)
    if reason is not None:
        return _result(res, ErrorCode.invalid_topic_exception, reason)
    dupes = [n for n, k in Counter(c.name for c in res.configs).items() if k > 1]
    if dupes:
        return _result(
            res, ErrorCode.invalid_request, f"Error due to duplicate config keys: {', '.join(dupes)}"
        )
    try:
        topic = (await ctx.metadata.describe_topics([name])).get(name)
    except METADATA_ERRORS as e:
        err_code, err_message = error_of(e)
        if err_code == ErrorCode.unknown_server_error:
            raise
        return _result(res, err_code, err_message)
    if topic is None:
        return _result(res, ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist.")
    try:
        set_configs, delete_configs = plan_changes(res, dict(topic.configs))
    except _Invalid as e:
        return _result(res, e.code, e.message)
    code, message = await alter_topic(ctx, name, set_configs, delete_configs, False, validate_only)
    return _result(res, code, message)


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, IncrementalAlterConfigsRequest)
    out = await alter_each(
        body.resources, lambda res: _alter_one(ctx, request, res, body.validate_only), _result
    )
    return IncrementalAlterConfigsResponse(throttle_time=NO_THROTTLE, responses=tuple(out))


ACCESS = requires(
    item(on(RT.TOPIC, Op.ALTER_CONFIGS), TOPIC_DENIED, when="topics"),
    item(on(RT.CLUSTER, Op.ALTER_CONFIGS), CLUSTER_DENIED, when="brokers"),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
