"""ListPartitionReassignments (api key 46), v0: none in progress, ever.

A reassignment completes the moment it is accepted (agent.handlers.alter_partition_reassignments:
a partition's data is in the bucket, nothing is copied), so none is ever in progress. Kafka
lists only partitions being reassigned, and topics with none are left out: the answer is
always an empty list, with no error, for every topic or the named ones.

Authorization: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED, with the named
partitions listed back (Kafka's `ListPartitionReassignmentsRequest.getErrorResponse`).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.list_partition_reassignments.v0.response import (
    ListPartitionReassignmentsResponse,
    OngoingPartitionReassignment,
    OngoingTopicReassignment,
)
from skiff.agent.context import AgentContext
from skiff.agent.handlers import NO_THROTTLE, HandlerSpec, Op, Request
from skiff.agent.handlers._access import CLUSTER_DENIED, RT, on, request, requires
from skiff.agent.protocol import convert

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0


def _refused(body: Any, code: ErrorCode) -> ListPartitionReassignmentsResponse:
    req = convert(body, ListPartitionReassignmentsRequest)
    return ListPartitionReassignmentsResponse(
        throttle_time=NO_THROTTLE,
        error_code=code,
        error_message="Cluster authorization failed.",
        topics=tuple(
            OngoingTopicReassignment(
                name=t.name,
                partitions=tuple(
                    OngoingPartitionReassignment(partition_index=p) for p in t.partition_indexes
                ),
            )
            for t in req.topics or ()
        ),
    )


async def handle(ctx: AgentContext, request: Request) -> Any:
    return ListPartitionReassignmentsResponse(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, topics=()
    )


ACCESS = requires(request(on(RT.CLUSTER, Op.DESCRIBE), CLUSTER_DENIED), refuse=_refused)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
