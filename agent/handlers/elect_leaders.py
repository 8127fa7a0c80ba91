"""ElectLeaders (api key 43), v0-v2: nothing to elect.

A partition's leader is the ready agent that wins its rendezvous hash (agent.routing); it
holds no log that another replica would have to catch up on, so it is always the preferred
leader and always an eligible one. Kafka answers such a partition ELECTION_NOT_NEEDED, for
both election types (PREFERRED 0, UNCLEAN 1; v0 is always PREFERRED), and so does Skiff.
As Kafka's controller (`ReplicationControlManager.electLeaders`): named partitions that do
not exist get UNKNOWN_TOPIC_OR_PARTITION; a partition with no leader (no agent ready)
PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE; `topic_partitions` null
means every partition, and then the partitions that needed no election are left out (each
topic still listed, with no partitions); an unknown election type is INVALID_REQUEST.

Authorization: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED on the request and on
every named partition (Kafka's `ElectLeadersRequest.getErrorResponse`).
"""

from __future__ import annotations

from typing import Any

from kio.schema.elect_leaders.v2.request import ElectLeadersRequest
from kio.schema.elect_leaders.v2.response import ElectLeadersResponse, PartitionResult, ReplicaElectionResult
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32
from skiff.agent.agent_registry import NO_LEADER
from skiff.agent.context import AgentContext
from skiff.agent.handlers import METADATA_ERRORS, NO_THROTTLE, HandlerSpec, Op, Request, error_of
from skiff.agent.handlers._access import CLUSTER_DENIED, RT, on, request, requires
from skiff.agent.protocol import convert
from skiff.metadata.types import Topic

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2

PREFERRED, UNCLEAN = 0, 1

MESSAGES = {
    ErrorCode.election_not_needed: "Leader election not needed for topic partition.",
    ErrorCode.preferred_leader_not_available: "The preferred leader was not available.",
    ErrorCode.eligible_leaders_not_available: "Eligible topic partition leaders are not available.",
    ErrorCode.unknown_topic_or_partition: "This server does not host this topic-partition.",
}


def answer_all(body: Any, code: ErrorCode, message: str | None = None) -> ElectLeadersResponse:
    """The request refused as a whole: the code at the top and on every named partition."""
    req = convert(body, ElectLeadersRequest)
    return ElectLeadersResponse(
        throttle_time=NO_THROTTLE,
        error_code=code,
        replica_election_results=tuple(
            ReplicaElectionResult(
                topic=t.topic,
                partition_result=tuple(
                    PartitionResult(partition_id=p, error_code=code, error_message=message)
                    for p in t.partitions
                ),
            )
            for t in req.topic_partitions or ()
        ),
    )


def _outcome(ctx: AgentContext, topic: Topic | None, partition: int, election: int) -> ErrorCode:
    if topic is None or not 0 <= partition < topic.partition_count:
        return ErrorCode.unknown_topic_or_partition
    if ctx.agents.leaders_for_topic(topic.topic_id, topic.partition_count)[partition] != NO_LEADER:
        return ErrorCode.election_not_needed
    if election == PREFERRED:
        return ErrorCode.preferred_leader_not_available
    return ErrorCode.eligible_leaders_not_available


def _result(p: int, code: ErrorCode) -> PartitionResult:
    return PartitionResult(partition_id=i32(p), error_code=code, error_message=MESSAGES.get(code))


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, ElectLeadersRequest)
    election = int(body.election_type) if request.api_version >= 1 else PREFERRED
    if election not in (PREFERRED, UNCLEAN):
        return answer_all(body, ErrorCode.invalid_request, f"Unknown election type {election}")
    try:
        if body.topic_partitions is None:
            every = await ctx.topics.all_topics()
        else:
            named = await ctx.topics.get_by_name(list(dict.fromkeys(t.topic for t in body.topic_partitions)))
    except METADATA_ERRORS as e:
        return answer_all(body, *error_of(e))
    if body.topic_partitions is None:
        results = []
        for t in sorted(every, key=lambda t: t.name):
            codes = [(p, _outcome(ctx, t, p, election)) for p in range(t.partition_count)]
            needed = tuple(_result(p, c) for p, c in codes if c != ErrorCode.election_not_needed)
            results.append(ReplicaElectionResult(topic=TopicName(t.name), partition_result=needed))
    else:
        results = [
            ReplicaElectionResult(
                topic=t.topic,
                partition_result=tuple(
                    _result(p, _outcome(ctx, named.get(t.topic), int(p), election)) for p in t.partitions
                ),
            )
            for t in body.topic_partitions
        ]
    return ElectLeadersResponse(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, replica_election_results=tuple(results)
    )


ACCESS = requires(
    request(on(RT.CLUSTER, Op.ALTER), CLUSTER_DENIED),
    refuse=lambda body, code: answer_all(body, code, "Cluster authorization failed."),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
