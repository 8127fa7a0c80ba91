"""AlterPartitionReassignments (api key 45), v0-v1: nothing to move.

An agent holds no replica: a partition's data is in the bucket, and every agent serves
it. A reassignment therefore has nothing to copy and is complete the moment it is
accepted; Kafka answers a completed one with no error, and so does Skiff, after Kafka's
own checks of the target (`ReplicationControlManager.alterPartitionReassignment`): the
topic and partition exist (else UNKNOWN_TOPIC_OR_PARTITION); the replica list is not empty,
names no agent twice and only live agents (else INVALID_REPLICA_ASSIGNMENT); with v1's
`allow_replication_factor_change` false, a list of other than one replica (the replication
factor Metadata reports) is INVALID_REPLICATION_FACTOR. Cancelling (replicas null) finds
nothing in progress: NO_REASSIGNMENT_IN_PROGRESS. Leadership stays with the rendezvous
hash (agent.routing), so Metadata's replica list does not change, and
ListPartitionReassignments lists nothing, as Kafka's does once a reassignment completed.

Authorization: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED on the request and on
every partition (Kafka's `AlterPartitionReassignmentsRequest.getErrorResponse`).
"""

from __future__ import annotations

from typing import Any

from kio.schema.alter_partition_reassignments.v1.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
)
from kio.schema.alter_partition_reassignments.v1.response import (
    AlterPartitionReassignmentsResponse,
    ReassignablePartitionResponse,
    ReassignableTopicResponse,
)
from kio.schema.errors import ErrorCode
from skiff.agent.context import AgentContext
from skiff.agent.handlers import METADATA_ERRORS, NO_THROTTLE, HandlerSpec, Op, Request, error_of
from skiff.agent.handlers._access import CLUSTER_DENIED, RT, on, request, requires
from skiff.agent.protocol import convert
from skiff.metadata.types import Topic

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 1

REPLICATION_FACTOR = 1  # what Metadata reports: the leader is the one replica


def answer_all(body: Any, code: ErrorCode, message: str | None = None) -> AlterPartitionReassignmentsResponse:
    req = convert(body, AlterPartitionReassignmentsRequest)
    return AlterPartitionReassignmentsResponse(
        throttle_time=NO_THROTTLE,
        error_code=code,
        error_message=message,
        responses=tuple(
            ReassignableTopicResponse(
                name=t.name,
                partitions=tuple(
                    ReassignablePartitionResponse(
                        partition_index=p.partition_index, error_code=code, error_message=message
                    )
                    for p in t.partitions
                ),
            )
            for t in req.topics
        ),
        allow_replication_factor_change=req.allow_replication_factor_change,
    )


def check(
    topic: Topic | None, target: ReassignablePartition, live: set[int], allow_rf_change: bool
) -> tuple[ErrorCode, str | None]:
    """Kafka's answer to one partition's reassignment (all of them complete at once)."""
    if topic is None or not 0 <= target.partition_index < topic.partition_count:
        return ErrorCode.unknown_topic_or_partition, f"Unable to find partition {target.partition_index}."
    if target.replicas is None:
        return ErrorCode.no_reassignment_in_progress, "No partition reassignment is in progress."
    replicas = [int(r) for r in target.replicas]
    if not replicas:
        return ErrorCode.invalid_replica_assignment, (
            "The manual partition assignment includes an empty replica list."
        )
    for broker in sorted(replicas):
        if broker not in live:
            return ErrorCode.invalid_replica_assignment, (
                f"The manual partition assignment includes broker {broker}, but no such broker is registered."
            )
    if len(set(replicas)) != len(replicas):
        twice = next(r for r in sorted(replicas) if replicas.count(r) > 1)
        return ErrorCode.invalid_replica_assignment, (
            f"The manual partition assignment includes the broker {twice} more than once."
        )
    if not allow_rf_change and len(replicas) != REPLICATION_FACTOR:
        return ErrorCode.invalid_replication_factor, (
            f"The replication factor is changed from {REPLICATION_FACTOR} to {len(replicas)} "
            "but allowReplicationFactorChange is false."
        )
    return ErrorCode.none, None


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, AlterPartitionReassignmentsRequest)
    allow = body.allow_replication_factor_change if request.api_version >= 1 else True
    try:
        found = await ctx.topics.get_by_name(list(dict.fromkeys(t.name for t in body.topics)))
    except METADATA_ERRORS as e:
        return answer_all(body, *error_of(e))
    live = {b.node_id for b in ctx.agents.brokers()}
    responses = []
    for t in body.topics:
        partitions = []
        for p in t.partitions:
            code, message = check(found.get(t.name), p, live, allow)
            partitions.append(
                ReassignablePartitionResponse(
                    partition_index=p.partition_index, error_code=code, error_message=message
                )
            )
        responses.append(ReassignableTopicResponse(name=t.name, partitions=tuple(partitions)))
    return AlterPartitionReassignmentsResponse(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        responses=tuple(responses),
        allow_replication_factor_change=allow,
    )


ACCESS = requires(
    request(on(RT.CLUSTER, Op.ALTER), CLUSTER_DENIED),
    refuse=lambda body, code: answer_all(body, code, "Cluster authorization failed."),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
