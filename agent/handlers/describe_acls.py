"""DescribeAcls (api key 29), v1-v3: the ACL bindings matching a filter (Kafka's AclBindingFilter).

As a Kafka broker answers: with authorization off (`authorizer_enabled`) SECURITY_DISABLED;
a principal without DESCRIBE on the cluster gets CLUSTER_AUTHORIZATION_FAILED; a filter
with a code Kafka does not define (UNKNOWN) gets INVALID_REQUEST. Otherwise the bindings
matching it (metadata.security.acl_types: ANY / MATCH / LITERAL / PREFIXED pattern filters) are
read from metadata, not from this agent's cache, so an answer is never older than the
last change, and returned grouped by resource pattern. Metadata out of reach: REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from typing import Any

from kio.schema.describe_acls.v3.response import AclDescription, DescribeAclsResource, DescribeAclsResponse
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8
from skiff.agent.context import AgentContext
from skiff.agent.handlers import METADATA_ERRORS, NO_THROTTLE, HandlerSpec, Op, Request, error_of
from skiff.agent.handlers._access import CLUSTER_DENIED, RT, on, request, requires
from skiff.metadata.security.acl_types import AclBinding, filter_error, filter_of

API_KEY = 29
MIN_VERSION = 1
MAX_VERSION = 3

SECURITY_DISABLED_MESSAGE = "No Authorizer is configured on the broker"


def _error(code: ErrorCode, message: str | None) -> DescribeAclsResponse:
    return DescribeAclsResponse(
        throttle_time=NO_THROTTLE, error_code=code, error_message=message, resources=()
    )


def group_by_resource(bindings: list[AclBinding]) -> tuple[DescribeAclsResource, ...]:
    grouped: dict[tuple[int, str, int], list[AclDescription]] = {}
    for b in sorted(bindings):
        grouped.setdefault((int(b.resource_type), b.resource_name, int(b.pattern_type)), []).append(
            AclDescription(
                principal=b.principal,
                host=b.host,
                operation=i8(int(b.operation)),
                permission_type=i8(int(b.permission)),
            )
        )
    return tuple(
        DescribeAclsResource(resource_type=i8(rt), resource_name=name, pattern_type=i8(pt), acls=tuple(acls))
        for (rt, name, pt), acls in grouped.items()
    )


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = request.body
    if not ctx.acls.enabled:
        return _error(ErrorCode.security_disabled, SECURITY_DISABLED_MESSAGE)
    # DESCRIBE on the cluster is checked before this runs (the declared cluster gate)
    acl_filter = filter_of(
        int(body.resource_type_filter),
        body.resource_name_filter,
        int(body.pattern_type_filter),
        body.principal_filter,
        body.host_filter,
        int(body.operation),
        int(body.permission_type),
    )
    reason = filter_error(acl_filter)
    if reason is not None:
        return _error(ErrorCode.invalid_request, reason)
    try:
        _, bindings = await ctx.metadata.describe_acls(acl_filter)
    except METADATA_ERRORS as e:
        code, message = error_of(e)
        if code == ErrorCode.unknown_server_error:
            raise
        return _error(code, message)
    return DescribeAclsResponse(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        resources=group_by_resource(bindings),
    )


ACCESS = requires(request(on(RT.CLUSTER, Op.DESCRIBE), CLUSTER_DENIED))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
