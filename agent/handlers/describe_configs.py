"""DescribeConfigs (api key 32), v1-v4: topic configs, and a few static broker configs.

Topic resources (type 2) list every topic config Kafka knows (`metadata.configs`), with
the topic's own value where it sets one (source DYNAMIC_TOPIC_CONFIG) and Kafka's
default otherwise (source DEFAULT_CONFIG, `is_default` in the client's eyes).
`configuration_keys` restricts the answer to the named keys (unknown keys are left
out); `include_synonyms` adds, per config, the topic override (if any) followed by the
default under the broker-level name Kafka would show (`log.retention.ms` for
`retention.ms`); `include_documentation` (v3+) adds a one-line description.

Broker resources (type 4) are answered for this agent's node id or the empty name (the
cluster default), with a small set of read-only STATIC_BROKER_CONFIG entries derived
from the agent's configuration; another broker's id gets INVALID_REQUEST, as in Kafka.
Other resource types (broker loggers, client metrics, groups) get INVALID_REQUEST.
Authorization (Kafka's ACLs), first: a topic needs DESCRIBE_CONFIGS on it, else
TOPIC_AUTHORIZATION_FAILED; any other resource DESCRIBE_CONFIGS on the cluster, else
CLUSTER_AUTHORIZATION_FAILED.

All topics of a request are looked up in one metadata call; the answers are built in slices
that yield to the event loop (`agent.handlers._cooperative`), so a request for thousands of
topics (at most 10,000: `agent.protocol.request_limits`) does not hold up other clients (its
encoding is sliced too: `agent.protocol.sliced_encode`). A config at its default is described
the same way for every topic, so its kio entity is built once per flag combination and shared.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.describe_configs.v4.response import (
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
)
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8
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
from skiff.agent.handlers._cooperative import pause
from skiff.agent.protocol import convert
from skiff.metadata import configs as topic_configs
from skiff.metadata.configs import topic_name_error
from skiff.metadata.types import Topic

API_KEY = 32
MIN_VERSION = 1
MAX_VERSION = 4

# ConfigResource types
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4

# ConfigSource values
SOURCE_DYNAMIC_TOPIC_CONFIG = 1
SOURCE_STATIC_BROKER_CONFIG = 4
SOURCE_DEFAULT_CONFIG = 5

# The broker-level config behind each topic config (what Kafka shows as its synonym).
BROKER_SYNONYMS: dict[str, str] = {
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "follower.replication.throttled.replicas": "follower.replication.throttled.replicas",
    "index.interval.bytes": "log.index.interval.bytes",
    "leader.replication.throttled.replicas": "leader.replication.throttled.replicas",
    "local.retention.bytes": "log.local.retention.bytes",
    "local.retention.ms": "log.local.retention.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "max.message.bytes": "message.max.bytes",
    "message.downconversion.enable": "log.message.downconversion.enable",
    "message.format.version": "log.message.format.version",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "message.timestamp.type": "log.message.timestamp.type",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "min.insync.replicas": "min.insync.replicas",
    "preallocate": "log.preallocate",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "segment.bytes": "log.segment.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.ms": "log.roll.ms",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}


@dataclass(frozen=True)
class ConfigEntry:
    """One described config, independent of the wire version."""

    name: str
    value: str | None
    source: int
    config_type: int
    read_only: bool = False
    is_sensitive: bool = False
    documentation: str | None = None
    synonyms: tuple[tuple[str, str | None, int], ...] = ()  # (name, value, source)

    @property
    def is_default(self) -> bool:
        return self.source == SOURCE_DEFAULT_CONFIG


def topic_config_entries(
    overrides: dict[str, str],
    keys: Iterable[str] | None = None,
    include_synonyms: bool = False,
    include_documentation: bool = False,
) -> list[ConfigEntry]:
    """Every topic config (or those in `keys`), with value, source and optional synonyms."""
    wanted = None if keys is None else set(keys)
    return [
        topic_config_entry(name, value, is_default, include_synonyms, include_documentation)
        for name, (value, is_default) in sorted(topic_configs.effective_configs(overrides).items())
        if wanted is None or name in wanted
    ]


def topic_config_entry(
    name: str,
    value: str,
    is_default: bool,
    include_synonyms: bool = False,
    include_documentation: bool = False,
) -> ConfigEntry:
    """One topic config as described (CreateTopics answers these too, without synonyms or
    documentation)."""
    d = topic_configs.CONFIG_DEFS[name]
    synonyms: tuple[tuple[str, str | None, int], ...] = ()
    if include_synonyms:
        syn: list[tuple[str, str | None, int]] = []
        if not is_default:
            syn.append((name, value, SOURCE_DYNAMIC_TOPIC_CONFIG))
        syn.append((BROKER_SYNONYMS.get(name, name), d.default, SOURCE_DEFAULT_CONFIG))
        synonyms = tuple(syn)
    return ConfigEntry(
        name=name,
        value=value,
        source=SOURCE_DEFAULT_CONFIG if is_default else SOURCE_DYNAMIC_TOPIC_CONFIG,
        config_type=d.config_type,
        documentation=(d.doc or None) if include_documentation else None,
        synonyms=synonyms,
    )


TOPIC_CONFIG_NAMES = tuple(sorted(topic_configs.CONFIG_DEFS))


@functools.cache
def _default_topic_config(
    name: str, include_synonyms: bool, include_documentation: bool
) -> DescribeConfigsResourceResult:
    """A config at its default, as described: the same for every topic, so built once (kio's
    entities are immutable; building ~40 per topic was most of a 10,000-topic request)."""
    d = topic_configs.CONFIG_DEFS[name]
    return _config_result(topic_config_entry(name, d.default, True, include_synonyms, include_documentation))


def _topic_config_results(
    overrides: dict[str, str], keys: Iterable[str] | None, include_synonyms: bool, include_documentation: bool
) -> tuple[DescribeConfigsResourceResult, ...]:
    """`topic_config_entries` as kio entities, the default-valued ones shared."""
    wanted = None if keys is None else set(keys)
    return tuple(
        _config_result(
            topic_config_entry(name, overrides[name], False, include_synonyms, include_documentation)
        )
        if name in overrides
        else _default_topic_config(name, include_synonyms, include_documentation)
        for name in TOPIC_CONFIG_NAMES
        if wanted is None or name in wanted
    )


def broker_config_entries(ctx: AgentContext, keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    cfg = ctx.config
    me = ctx.agents.self_info
    static: list[tuple[str, str, int]] = [
        ("broker.id", str(ctx.agents.self_node_id), topic_configs.TYPE_INT),
        ("node.id", str(ctx.agents.self_node_id), topic_configs.TYPE_INT),
        ("broker.rack", cfg.zone or "", topic_configs.TYPE_STRING),
        ("advertised.listeners", f"PLAINTEXT://{me.host}:{me.port}", topic_configs.TYPE_LIST),
        (
            "auto.create.topics.enable",
            "true" if cfg.auto_create_topics else "false",
            topic_configs.TYPE_BOOLEAN,
        ),
        ("num.partitions", str(cfg.default_partitions), topic_configs.TYPE_INT),
        ("default.replication.factor", "1", topic_configs.TYPE_SHORT),
        ("delete.topic.enable", "true", topic_configs.TYPE_BOOLEAN),
        ("socket.request.max.bytes", str(cfg.max_request_bytes), topic_configs.TYPE_INT),
        (
            "message.max.bytes",
            topic_configs.DEFAULTS[topic_configs.MAX_MESSAGE_BYTES],
            topic_configs.TYPE_INT,
        ),
        ("log.cleanup.policy", topic_configs.DEFAULTS[topic_configs.CLEANUP_POLICY], topic_configs.TYPE_LIST),
        ("log.retention.ms", topic_configs.DEFAULTS[topic_configs.RETENTION_MS], topic_configs.TYPE_LONG),
        (
            "log.retention.bytes",
            topic_configs.DEFAULTS[topic_configs.RETENTION_BYTES],
            topic_configs.TYPE_LONG,
        ),
        (
            "compression.type",
            topic_configs.DEFAULTS[topic_configs.COMPRESSION_TYPE],
            topic_configs.TYPE_STRING,
        ),
        ("min.insync.replicas", "1", topic_configs.TYPE_INT),
        ("skiff.flush.interval.ms", str(cfg.flush_interval_ms), topic_configs.TYPE_INT),
        ("skiff.flush.max.bytes", str(cfg.flush_max_bytes), topic_configs.TYPE_INT),
        ("skiff.metadata.url", cfg.public_metadata_url(), topic_configs.TYPE_STRING),  # skiff.cli.bootstrap
    ]
    wanted = None if keys is None else set(keys)
    return [
        ConfigEntry(name, value, SOURCE_STATIC_BROKER_CONFIG, ctype, read_only=True)
        for name, value, ctype in static
        if wanted is None or name in wanted
    ]


def _config_result(e: ConfigEntry) -> DescribeConfigsResourceResult:
    return DescribeConfigsResourceResult(
        name=e.name,
        value=e.value,
        read_only=e.read_only,
        config_source=i8(e.source),
        is_sensitive=e.is_sensitive,
        synonyms=tuple(DescribeConfigsSynonym(name=n, value=v, source=i8(s)) for n, v, s in e.synonyms),
        config_type=i8(e.config_type),
        documentation=e.documentation,
    )


def _result(
    res: DescribeConfigsResource,
    code: ErrorCode,
    message: str | None,
    entries: Sequence[ConfigEntry] | tuple[DescribeConfigsResourceResult, ...] = (),
) -> DescribeConfigsResult:
    return DescribeConfigsResult(
        error_code=code,
        error_message=message,
        resource_type=res.resource_type,
        resource_name=res.resource_name,
        configs=tuple(
            e if isinstance(e, DescribeConfigsResourceResult) else _config_result(e) for e in entries
        ),
    )


def _describe_one(
    ctx: AgentContext,
    res: DescribeConfigsResource,
    body: DescribeConfigsRequest,
    topics: dict[str, Topic],
    lookup_error: tuple[ErrorCode, str] | None,
) -> DescribeConfigsResult:
    keys = res.configuration_keys if res.configuration_keys else None  # null or empty: all
    if res.resource_type == RESOURCE_TOPIC:
        name = res.resource_name
        reason = topic_name_error(name)
        if reason is not None:
            return _result(res, ErrorCode.invalid_topic_exception, reason)
        if lookup_error is not None:
            return _result(res, *lookup_error)
        topic = topics.get(name)
        if topic is None:
            return _result(res, ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist.")
        ctx.topics.put(topic)
        results = _topic_config_results(
            topic.configs, keys, body.include_synonyms, body.include_documentation
        )
        return _result(res, ErrorCode.none, None, results)
    if res.resource_type == RESOURCE_BROKER:
        own = str(ctx.agents.self_node_id)
        if res.resource_name not in ("", own):
            return _result(
                res,
                ErrorCode.invalid_request,
                f"Unexpected broker id, expected {own} or empty string, but received {res.resource_name}",
            )
        return _result(res, ErrorCode.none, None, broker_config_entries(ctx, keys))
    return _result(res, ErrorCode.invalid_request, f"Unsupported resource type {res.resource_type}")


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, DescribeConfigsRequest)
    # One metadata call for every topic of the request, then the answers built in slices that
    # give the event loop a turn (a request may name up to 10,000 topics).
    names = list(
        dict.fromkeys(
            res.resource_name
            for res in body.resources
            if res.resource_type == RESOURCE_TOPIC
            and topic_name_error(res.resource_name) is None
            and authorized(ctx, request, Op.DESCRIBE_CONFIGS, Resource.TOPIC, res.resource_name)
        )
    )
    topics: dict[str, Topic] = {}
    lookup_error: tuple[ErrorCode, str] | None = None
    if names:
        try:
            topics = await ctx.metadata.describe_topics(names)
        except METADATA_ERRORS as e:
            lookup_error = error_of(e)
            if lookup_error[0] == ErrorCode.unknown_server_error:
                raise
    results = []
    for i, res in enumerate(body.resources):
        if res.resource_type == RESOURCE_TOPIC:
            allowed = authorized(ctx, request, Op.DESCRIBE_CONFIGS, Resource.TOPIC, res.resource_name)
            refusal = ErrorCode.topic_authorization_failed
        else:
            allowed = authorized_on_cluster(ctx, request, Op.DESCRIBE_CONFIGS)
            refusal = ErrorCode.cluster_authorization_failed
        if allowed:
            results.append(_describe_one(ctx, res, body, topics, lookup_error))
        else:
            results.append(_result(res, refusal, "Authorization failed."))
        await pause(i)
    return DescribeConfigsResponse(throttle_time=NO_THROTTLE, results=tuple(results))


ACCESS = requires(
    item(on(RT.TOPIC, Op.DESCRIBE_CONFIGS), TOPIC_DENIED, when="topics"),
    item(on(RT.CLUSTER, Op.DESCRIBE_CONFIGS), CLUSTER_DENIED, when="brokers"),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
