"""DescribeClientQuotas (api key 48), v0 (KIP-546): the client quotas matching a filter.

As a Kafka broker answers: a principal without DESCRIBE_CONFIGS on the cluster gets
CLUSTER_AUTHORIZATION_FAILED (the declared cluster gate); a filter Kafka refuses gets its
INVALID_REQUEST or UNSUPPORTED_VERSION with Kafka's message (metadata.security.quota_types:
match types exact / default / any-specified, `strict`). The entries are read from metadata,
not from this agent's copy, so an answer is never older than the last change. Metadata out
of reach: REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from typing import Any

from kio.schema.describe_client_quotas.v0.response import (
    DescribeClientQuotasResponse,
    EntityData,
    EntryData,
    ValueData,
)
from kio.schema.errors import ErrorCode
from kio.static.primitive import f64
from skiff.agent.context import AgentContext
from skiff.agent.handlers import METADATA_ERRORS, NO_THROTTLE, HandlerSpec, Op, Request, error_of
from skiff.agent.handlers._access import CLUSTER_DENIED, RT, on, request, requires
from skiff.metadata.security.quota_types import ClientQuotaEntry, QuotaFilterComponent

API_KEY = 48
MIN_VERSION = 0
MAX_VERSION = 0


def _error(code: ErrorCode, message: str | None) -> DescribeClientQuotasResponse:
    return DescribeClientQuotasResponse(
        throttle_time=NO_THROTTLE, error_code=code, error_message=message, entries=None
    )


def entry_data(entry: ClientQuotaEntry) -> EntryData:
    return EntryData(
        entity=tuple(EntityData(entity_type=t, entity_name=name) for t, name in entry.entity.parts),
        values=tuple(ValueData(key=k, value=f64(v)) for k, v in entry.values),
    )


async def handle(ctx: AgentContext, request: Request) -> Any:
    # DESCRIBE_CONFIGS on the cluster is checked before this runs (the declared cluster gate)
    body = request.body
    components = [QuotaFilterComponent(c.entity_type, int(c.match_type), c.match) for c in body.components]
    try:
        entries = await ctx.metadata.describe_client_quotas(components, bool(body.strict))
    except METADATA_ERRORS as e:
        code, message = error_of(e)
        if code == ErrorCode.unknown_server_error:
            raise
        return _error(code, message)
    return DescribeClientQuotasResponse(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        entries=tuple(entry_data(e) for e in entries),
    )


ACCESS = requires(request(on(RT.CLUSTER, Op.DESCRIBE_CONFIGS), CLUSTER_DENIED))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
