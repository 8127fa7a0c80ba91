"""ConsumerGroupHeartbeat (api key 68), v0-v1: the whole membership of the consumer group
protocol (KIP-848, `group.protocol=consumer`): join (epoch 0), heartbeat, leave (-1; -2 for
a static member that will come back), with the assignment computed by the coordinator.

The protocol is `agent.groups.consumer_protocol`; this module translates and does the I/O:
the coordinator lease (`ensure_coordinator`: NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE,
the client finds the coordinator again), the lookup of the subscribed topics in metadata
(through the agent's topic cache; every topic when a regular expression is subscribed),
then the synchronous state change, then the group stored under its lease before the answer
goes out (a lease lost meanwhile: NOT_COORDINATOR). Metadata out of reach:
COORDINATOR_NOT_AVAILABLE (retriable for every client).

v0 clients may leave the member id to the coordinator; v1 clients choose it (KIP-1082) and
may subscribe by regular expression.

Authorization, as Kafka's KafkaApis: READ on the group (else GROUP_AUTHORIZATION_FAILED),
and DESCRIBE on every subscribed topic name (else TOPIC_AUTHORIZATION_FAILED). A regex is
resolved, for each member at each of its heartbeats, against the topics its principal may
DESCRIBE (Kafka 4.0's rule, KAFKA-18813): the others are never assigned to it, with no error.
Kafka resolves a group's regex once, with the principal of the member that last changed it,
so members of one regex with different rights may see each other's topics (KAFKA-19147's
note); here each member gets only its own.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.consumer_group_heartbeat.v1.response import (
    Assignment,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta
from skiff.agent.context import AgentContext
from skiff.agent.groups.assignors import Assignment as PartitionsByTopic
from skiff.agent.groups.consumer_model import TopicView
from skiff.agent.groups.consumer_requests import HeartbeatResult, MemberRequest, validate
from skiff.agent.groups.ownership import coordinator, ensure_coordinator
from skiff.agent.handlers import METADATA_ERRORS, NO_THROTTLE, HandlerSpec, Op, Request, Resource, authorized
from skiff.agent.handlers._access import GROUP_DENIED, RT, TOPIC_DENIED, filtered, on, request, requires
from skiff.agent.protocol import convert

API_KEY = 68
MIN_VERSION = 0
MAX_VERSION = 1


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000)


def _response(r: HeartbeatResult) -> ConsumerGroupHeartbeatResponse:
    assignment = None
    if r.assignment is not None:
        assignment = Assignment(
            topic_partitions=tuple(
                TopicPartitions(topic_id=tid, partitions=tuple(i32(p) for p in sorted(ps)))
                for tid, ps in sorted(r.assignment.items(), key=lambda kv: str(kv[0]))
            )
        )
    return ConsumerGroupHeartbeatResponse(
        throttle_time=NO_THROTTLE,
        error_code=r.error,
        error_message=r.message,
        member_id=r.member_id,
        member_epoch=i32(r.member_epoch),
        heartbeat_interval=i32Timedelta.parse(datetime.timedelta(milliseconds=r.heartbeat_interval_ms)),
        assignment=assignment,
    )


def _error(body: ConsumerGroupHeartbeatRequest, code: ErrorCode, message: str | None = None) -> Any:
    return _response(HeartbeatResult(code, message, body.member_id or None))


def _member_request(
    ctx: AgentContext, body: ConsumerGroupHeartbeatRequest, request: Request
) -> MemberRequest:
    owned: PartitionsByTopic | None = None
    if body.topic_partitions is not None:
        owned = {}
        for tp in body.topic_partitions:
            if tp.topic_id is not None:
                owned[tp.topic_id] = owned.get(tp.topic_id, frozenset()) | frozenset(
                    int(p) for p in tp.partitions
                )
    return MemberRequest(
        group_id=body.group_id,
        member_id=body.member_id,
        member_epoch=int(body.member_epoch),
        instance_id=body.instance_id,
        rack_id=body.rack_id,
        rebalance_timeout_ms=_ms(body.rebalance_timeout),
        subscribed_topic_names=None
        if body.subscribed_topic_names is None
        else tuple(body.subscribed_topic_names),
        subscribed_topic_regex=body.subscribed_topic_regex,
        server_assignor=body.server_assignor,
        owned=owned,
        client_id=request.client_id or "",
        client_host=request.connection.client_host,
        # KIP-848 (Kafka 4.0, KAFKA-18813): a regex is resolved against the topics the
        # member's principal may describe; checked for this member at each of its heartbeats
        describable=lambda name: authorized(ctx, request, Op.DESCRIBE, Resource.TOPIC, name),
    )


async def topic_view(ctx: AgentContext, names: set[str], listing: bool) -> TopicView:
    """The topics this heartbeat needs, from the agent's topic cache (metadata on a miss)."""
    found: dict[str, tuple[uuid.UUID, int]] = {}
    if listing:
        for t in await ctx.topics.all_topics():
            found[t.name] = (t.topic_id, t.partition_count)
        return TopicView(found, frozenset(found) | frozenset(names), listed=True)
    for name, t in (await ctx.topics.get_by_name(sorted(names))).items():
        found[name] = (t.topic_id, t.partition_count)
    return TopicView(found, frozenset(names), listed=False)


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, ConsumerGroupHeartbeatRequest)
    if not authorized(ctx, request, Op.READ, Resource.GROUP, body.group_id):
        return _error(body, ErrorCode.group_authorization_failed)
    for name in body.subscribed_topic_names or ():
        if not authorized(ctx, request, Op.DESCRIBE, Resource.TOPIC, name):
            return _error(body, ErrorCode.topic_authorization_failed)
    req = _member_request(ctx, body, request)
    refused = validate(req)
    if refused is not None:
        return _response(refused)
    code = await ensure_coordinator(ctx, req.group_id, request.connection.zone.zone)
    if code != ErrorCode.none:
        return _error(body, code)
    coord = coordinator(ctx)
    names, listing = coord.wanted_topics(req)
    try:
        view = await topic_view(ctx, names, listing)
    except METADATA_ERRORS as e:
        return _error(body, ErrorCode.coordinator_not_available, f"metadata unavailable: {e}")
    result = coord.consumer_heartbeat(req, view)
    if result.group is not None and not await coord.consumer.flush(result.group):
        return _error(body, ErrorCode.not_coordinator, "the coordinator lease was lost")
    return _response(result)


ACCESS = requires(
    request(on(RT.GROUP, Op.READ), GROUP_DENIED),
    request(on(RT.TOPIC, Op.DESCRIBE), TOPIC_DENIED, when="subscribed topic names"),
    filtered(on(RT.TOPIC, Op.DESCRIBE), when="topics matching a subscribed regex (never assigned)"),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
