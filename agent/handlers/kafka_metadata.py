"""Metadata (api key 3), v1-v13: brokers, the controller, topics and partition leaders.

Brokers are the live agents (`ctx.agents`), this agent always among them. Partition
leadership is advice: each partition's leader is the live agent winning the rendezvous
hash of (topic id, partition) (`agent.routing`), so clients spread over the agents and
one lost agent moves only its share. Each partition reports a single replica (its
leader) in sync, and leader epoch -1 (unknown), which tells clients to skip epoch
validation (KIP-320): leadership here carries no log state to validate. Only ready agents
lead (agent.health): an agent that is not ready still answers, naming the ready ones; with
no agent ready every partition is LEADER_NOT_AVAILABLE with leader -1 (Kafka's answer for
a partition without a leader; clients refresh metadata and retry).

Zones (agent.zones): a client that states its zone (client.id `az=`/`zone=`/`ws_az=`, or the
rack_id of an earlier Fetch on the connection) is given leaders among the ready agents of
its zone, rendezvous-hashed within it; all ready agents when its zone has none, and for a
client of no zone, as before. Brokers are every agent either way. When ready agents span two
or more zones each partition lists as replicas (and ISR) its leader, then every other zone's
leader: the Java client follows a Fetch's preferred read replica (agent.handlers.fetch) only
to a listed replica.

Requested topics:
- an invalid name -> INVALID_TOPIC_EXCEPTION;
- an unknown name -> created with `default_partitions` when the agent allows it
  (`auto_create_topics`) and the request does (`allow_auto_topic_creation`, v4+; always
  for v1-v3), and returned at once, ready; otherwise UNKNOWN_TOPIC_OR_PARTITION. The
  internal names `__consumer_offsets`/`__transaction_state` are never auto-created;
- v12+: a topic asked by id (null name) -> looked up by id, UNKNOWN_TOPIC_ID if absent
- v13 (Kafka 4.0): the response's top-level error code, always NONE here (Kafka sets it only to
  ask a client to re-bootstrap, KIP-1102). Clients told they talk to Kafka 4.x (kafka-python
  with `api_version=(4, 0)`) send v13 without asking ApiVersions first
  (also for neither name nor id: the zero id names no topic), as Kafka answers;
- v10-v11 carry topic ids on the wire but Kafka does not serve them there: a request with a
  null name or a non-zero id gets INVALID_REQUEST for every requested topic (Kafka's
  `getErrorResponse`, null names written as ""), since these versions cannot encode a null
  name in the response.

Authorization (Kafka's ACLs, agent.authorizer; nothing changes with it off): a listing of
every topic shows only those the principal may DESCRIBE; a named topic it may not
DESCRIBE gets TOPIC_AUTHORIZATION_FAILED (by id: with a null name), whether it exists or
not; auto-creating one also needs CREATE on the cluster or on the topic, else
TOPIC_AUTHORIZATION_FAILED. Authorized-operations fields are computed from the ACLs (the
cluster's only for a principal that may DESCRIBE it, else 0, as Kafka does).

With `topics` null, every topic is listed. `__consumer_offsets` is listed, internal, when
every topic is asked for and by name: it is served read-only from metadata's offsets log
(agent.handlers._consumer_offsets). When metadata is unreachable, answers come
from the topic cache where it has them; a named topic it does not have gets
LEADER_NOT_AVAILABLE (retriable); an all-topics listing with nothing cached raises, and
the server closes the connection so the client retries elsewhere.

The response is built in v12 form and converted to the request's version by the server.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
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
    authorized_on_cluster,
    authorized_operations,
)
from skiff.agent.handlers import _consumer_offsets as consumer_offsets
from skiff.agent.handlers._access import RT, TOPIC_DENIED, filtered, item, on, reported, requires
from skiff.agent.handlers._cooperative import pause
from skiff.agent.protocol import convert, response_schema, to_error_code, uuid_or_none
from skiff.metadata.configs import topic_name_error
from skiff.metadata.errors import MetadataError, MetadataUnavailable
from skiff.metadata.security.acl_types import CLUSTER_NAME
from skiff.metadata.types import Topic

log = logging.getLogger(__name__)

API_KEY = 3
MIN_VERSION = 1
MAX_VERSION = 13

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

# Kafka AclOperation codes, for the "authorized operations" bit fields. With authorization
# off every operation that applies to the resource is allowed.
_READ, _WRITE, _CREATE, _DELETE, _ALTER, _DESCRIBE = 3, 4, 5, 6, 7, 8
_CLUSTER_ACTION, _DESCRIBE_CONFIGS, _ALTER_CONFIGS, _IDEMPOTENT_WRITE = 9, 10, 11, 12
_CREATE_TOKENS, _DESCRIBE_TOKENS = 13, 14
TOPIC_AUTHORIZED_OPERATIONS = sum(
    1 << op for op in (_READ, _WRITE, _CREATE, _DELETE, _ALTER, _DESCRIBE, _DESCRIBE_CONFIGS, _ALTER_CONFIGS)
)
CLUSTER_AUTHORIZED_OPERATIONS = sum(
    1 << op
    for op in (
        _CREATE,
        _ALTER,
        _DESCRIBE,
        _CLUSTER_ACTION,
        _DESCRIBE_CONFIGS,
        _ALTER_CONFIGS,
        _IDEMPOTENT_WRITE,
        _CREATE_TOKENS,
        _DESCRIBE_TOKENS,
    )
)
OPERATIONS_NOT_REQUESTED = -(2**31)


def brokers_of(ctx: AgentContext, listener: str = "PLAINTEXT") -> tuple[MetadataResponseBroker, ...]:
    """Every live agent, addressed on `listener` (the one the client connected through)."""
    return tuple(
        MetadataResponseBroker(node_id=BrokerId(b.node_id), host=host, port=i32(port), rack=b.rack)
        for b in ctx.agents.brokers()
        for host, port in (b.address(listener),)
    )


@functools.lru_cache(maxsize=4096)
def _partitions(
    leaders: tuple[int, ...], replicas: tuple[tuple[int, ...], ...] | None = None
) -> tuple[MetadataResponsePartition, ...]:
    """Partition entries for a leader assignment, with each partition's replicas when agents
    span zones (else the leader alone). Memoized: entries are immutable and shared."""
    out = []
    for p, leader in enumerate(leaders):
        nodes: tuple[BrokerId, ...] = ()
        if leader != NO_LEADER:
            nodes = tuple(BrokerId(n) for n in replicas[p]) if replicas is not None else (BrokerId(leader),)
        out.append(
            MetadataResponsePartition(
                error_code=ErrorCode.none if leader != NO_LEADER else ErrorCode.leader_not_available,
                partition_index=i32(p),
                leader_id=BrokerId(leader),
                leader_epoch=i32(-1),
                replica_nodes=nodes,
                isr_nodes=nodes,
                offline_replicas=(),
            )
        )
    return tuple(out)


def topic_entry(
    ctx: AgentContext, topic: Topic, with_ops: bool, request: Request | None = None
) -> MetadataResponseTopic:
    zone = request.connection.zone.zone if request is not None else None
    agents = ctx.agents
    partitions = _partitions(
        agents.leaders_for_topic(topic.topic_id, topic.partition_count, zone),
        agents.replicas_for_topic(topic.topic_id, topic.partition_count, zone),
    )
    ops = TOPIC_AUTHORIZED_OPERATIONS
    if with_ops and request is not None:
        computed = authorized_operations(ctx, request, Resource.TOPIC, topic.name)
        ops = ops if computed is None else computed
    return MetadataResponseTopic(
        error_code=ErrorCode.none,
        name=TopicName(topic.name),
        topic_id=topic.topic_id,
        is_internal=topic.name in INTERNAL_TOPICS,
        partitions=partitions,
        topic_authorized_operations=i32(ops if with_ops else OPERATIONS_NOT_REQUESTED),
    )


def error_entry(code: int, name: str | None, topic_id: uuid.UUID | None = None) -> MetadataResponseTopic:
    return MetadataResponseTopic(
        error_code=to_error_code(code),
        name=TopicName(name) if name is not None else None,
        topic_id=topic_id,
        is_internal=False,
        partitions=(),
    )


async def _auto_create(ctx: AgentContext, name: str) -> Topic | int:
    """The created (or concurrently created) topic, or a Kafka error code."""
    try:
        topic = await ctx.metadata.create_topic(name, ctx.config.default_partitions, {})
    except MetadataError as e:
        if e.error_code == ErrorCode.topic_already_exists:
            ctx.topics.invalidate(names=[name])
            found = await ctx.topics.get(name)
            return found if found is not None else int(ErrorCode.leader_not_available)
        return e.error_code
    log.info("auto-created topic %r with %d partition(s)", name, topic.partition_count)
    ctx.topics.put(topic)
    return topic


def _may_create(ctx: AgentContext, request: Request, name: str) -> bool:
    return authorized_on_cluster(ctx, request, Op.CREATE) or authorized(
        ctx, request, Op.CREATE, Resource.TOPIC, name
    )


async def _named_topics(
    ctx: AgentContext, request: Request, body: MetadataRequest, with_ops: bool
) -> list[MetadataResponseTopic]:
    out: list[MetadataResponseTopic] = []
    names: list[str] = []
    ids: list[uuid.UUID] = []
    for req_topic in body.topics or ():
        tid = uuid_or_none(req_topic.topic_id)
        if req_topic.name is None:
            if tid is None:
                out.append(error_entry(ErrorCode.unknown_topic_id, None))
            elif tid not in ids:
                ids.append(tid)
        elif req_topic.name not in names:
            names.append(req_topic.name)
    denied = {n for n in names if not authorized(ctx, request, Op.DESCRIBE, Resource.TOPIC, n)}

    valid = [n for n in names if topic_name_error(n) is None and n not in denied]
    found: dict[str, Topic]
    unavailable = False
    try:
        found = await ctx.topics.get_by_name(valid) if valid else {}
    except MetadataUnavailable as e:
        log.warning("metadata unavailable, answering Metadata from the topic cache: %s", e)
        unavailable = True
        found = {n: t for n in valid if (t := ctx.topics.cached(n)) is not None}

    if consumer_offsets.NAME in valid:  # served from metadata's offsets log, not a topics row
        found[consumer_offsets.NAME] = consumer_offsets.TOPIC
    auto_create = ctx.config.auto_create_topics and body.allow_auto_topic_creation
    for i, name in enumerate(names):
        await pause(i)  # up to 10,000 names (agent.protocol.request_limits): let other clients in
        if name in denied:
            out.append(error_entry(ErrorCode.topic_authorization_failed, name))
            continue
        if topic_name_error(name) is not None:
            out.append(error_entry(ErrorCode.invalid_topic_exception, name))
            continue
        topic: Topic | int | None = found.get(name)
        if topic is None:
            if unavailable:
                topic = int(ErrorCode.leader_not_available)
            elif auto_create and name not in INTERNAL_TOPICS and not _may_create(ctx, request, name):
                topic = int(ErrorCode.topic_authorization_failed)
            elif auto_create and name not in INTERNAL_TOPICS:
                try:
                    topic = await _auto_create(ctx, name)
                except MetadataUnavailable:
                    topic = int(ErrorCode.leader_not_available)
            else:
                topic = int(ErrorCode.unknown_topic_or_partition)
        if isinstance(topic, Topic):
            out.append(topic_entry(ctx, topic, with_ops, request))
        else:
            out.append(error_entry(topic, name))

    if ids:
        try:
            by_id = await ctx.topics.get_by_id(ids)
        except MetadataUnavailable:
            by_id = None
        for i, tid in enumerate(ids):
            await pause(i)
            if by_id is None:
                out.append(error_entry(ErrorCode.leader_not_available, None, tid))
            elif tid in by_id and not authorized(ctx, request, Op.DESCRIBE, Resource.TOPIC, by_id[tid].name):
                # Kafka: topic ids are not secret, the name is (the answer keeps it null)
                out.append(error_entry(ErrorCode.topic_authorization_failed, None, tid))
            elif tid in by_id:
                out.append(topic_entry(ctx, by_id[tid], with_ops, request))
            else:
                out.append(error_entry(ErrorCode.unknown_topic_id, None, tid))
    return out


async def _all_topics(ctx: AgentContext, request: Request, with_ops: bool) -> list[MetadataResponseTopic]:
    try:
        topics = await ctx.topics.all_topics()
    except MetadataUnavailable:
        cached = ctx.topics.cached_all()
        if cached is None:
            raise
        log.warning("metadata unavailable, listing topics from the cache")
        topics = cached
    topics = [*topics, consumer_offsets.TOPIC]  # the internal topic, served from metadata's offsets log
    out = []
    for i, t in enumerate(topics):  # every topic of the cluster: give other clients turns
        if authorized(ctx, request, Op.DESCRIBE, Resource.TOPIC, t.name):  # the others are left out
            out.append(topic_entry(ctx, t, with_ops, request))
        await pause(i)
    return out


def _ids_where_not_served(request: Request) -> bool:
    """v10-v11 requests naming a topic by id (or by nothing), which Kafka refuses."""
    topics = request.body.topics
    if request.api_version not in (10, 11) or not topics:
        return False
    return any(t.name is None or uuid_or_none(t.topic_id) is not None for t in topics)


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, MetadataRequest)
    with_ops = body.include_topic_authorized_operations
    if _ids_where_not_served(request):
        topics = [
            error_entry(ErrorCode.invalid_request, t.name or "", uuid_or_none(t.topic_id))
            for t in body.topics or ()
        ]
    elif body.topics is None:
        topics = await _all_topics(ctx, request, with_ops)
    else:
        topics = await _named_topics(ctx, request, body, with_ops)
    response = MetadataResponse(
        throttle_time=NO_THROTTLE,
        brokers=brokers_of(ctx, request.connection.listener),
        cluster_id=ctx.config.cluster_id,
        controller_id=BrokerId(ctx.agents.controller_id),
        topics=tuple(topics),
    )
    target = response_schema(API_KEY, request.api_version)
    assert target is not None
    out = convert(response, target)
    # v8-v10 also carry cluster-level authorized operations, which v12 no longer has.
    if getattr(request.body, "include_cluster_authorized_operations", False) and hasattr(
        out, "cluster_authorized_operations"
    ):
        out = dataclasses.replace(out, cluster_authorized_operations=i32(cluster_operations(ctx, request)))
    return out


def cluster_operations(ctx: AgentContext, request: Request) -> int:
    """The cluster's authorized operations for this principal: all of them with authorization
    off; as Kafka computes them only for a principal that may DESCRIBE the cluster, else 0."""
    computed = authorized_operations(ctx, request, Resource.CLUSTER, CLUSTER_NAME)
    if computed is None:
        return CLUSTER_AUTHORIZED_OPERATIONS
    return computed if authorized_on_cluster(ctx, request, Op.DESCRIBE) else 0


ACCESS = requires(
    item(on(RT.TOPIC, Op.DESCRIBE), TOPIC_DENIED, when="named topics"),
    filtered(on(RT.TOPIC, Op.DESCRIBE), when="all topics"),
    item((on(RT.CLUSTER, Op.CREATE), on(RT.TOPIC, Op.CREATE)), TOPIC_DENIED, when="auto-creation"),
    reported(on(RT.TOPIC, Op.DESCRIBE), when="topic authorized operations"),
    reported(on(RT.CLUSTER, Op.DESCRIBE), when="cluster authorized operations, v8-v10"),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
