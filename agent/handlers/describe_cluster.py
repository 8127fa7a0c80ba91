"""DescribeCluster (api key 60), v0-v2: the cluster id, the controller and the live agents.

The same view as Metadata's broker list (`ctx.agents`). Agents are brokers only: a
request for the controller endpoints (`endpoint_type` 2, v1+) gets
MISMATCHED_ENDPOINT_TYPE, as from a Kafka broker. No agent is ever fenced (v2).
As in Kafka, any principal may ask; the cluster's authorized operations (when asked for)
are computed from the ACLs for a principal that may DESCRIBE the cluster, else 0.
"""

from __future__ import annotations

from typing import Any

from kio.schema.describe_cluster.v2.request import DescribeClusterRequest
from kio.schema.describe_cluster.v2.response import DescribeClusterBroker, DescribeClusterResponse
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i32
from skiff.agent.context import AgentContext
from skiff.agent.handlers import NO_THROTTLE, HandlerSpec, Request
from skiff.agent.handlers._access import RT, Op, on, reported, requires
from skiff.agent.handlers.kafka_metadata import OPERATIONS_NOT_REQUESTED, cluster_operations
from skiff.agent.protocol import convert

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 2

ENDPOINT_BROKERS = 1


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, DescribeClusterRequest)
    ops = (
        cluster_operations(ctx, request)
        if body.include_cluster_authorized_operations
        else OPERATIONS_NOT_REQUESTED
    )
    if body.endpoint_type != ENDPOINT_BROKERS:
        return DescribeClusterResponse(
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.mismatched_endpoint_type,
            error_message="The request was sent to an endpoint of type BROKER, but we wanted an endpoint of "
            "type CONTROLLER",
            endpoint_type=i8(ENDPOINT_BROKERS),
            cluster_id=ctx.config.cluster_id,
            brokers=(),
        )
    brokers = tuple(
        DescribeClusterBroker(
            broker_id=BrokerId(b.node_id), host=host, port=i32(port), rack=b.rack, is_fenced=False
        )
        for b in ctx.agents.brokers()
        for host, port in (b.address(request.connection.listener),)
    )
    return DescribeClusterResponse(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=i8(ENDPOINT_BROKERS),
        cluster_id=ctx.config.cluster_id,
        controller_id=BrokerId(ctx.agents.controller_id),
        brokers=brokers,
        cluster_authorized_operations=i32(ops),
    )


ACCESS = requires(reported(on(RT.CLUSTER, Op.DESCRIBE), when="cluster authorized operations"))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
