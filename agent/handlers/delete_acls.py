"""DeleteAcls (api key 31), v1-v3: remove the ACL bindings matching filters.

As a Kafka broker answers, one result per filter, in order, listing the bindings it
matched (and so deleted; a binding matched by two filters is listed under both): with
authorization off (`authorizer_enabled`) every filter gets SECURITY_DISABLED; a principal
without ALTER on the cluster CLUSTER_AUTHORIZATION_FAILED; a filter with UNKNOWN codes
INVALID_REQUEST. The valid filters go to metadata in one call, deleted in one transaction;
if it fails they all get its error. This agent then reloads its ACLs before answering
(other agents: within `acl_refresh_interval_ms`, agent.acl_cache).
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.delete_acls.v3.response import (
    DeleteAclsFilterResult,
    DeleteAclsMatchingAcl,
    DeleteAclsResponse,
)
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8
from skiff.agent.context import AgentContext
from skiff.agent.handlers import NO_THROTTLE, HandlerSpec, Op, Request, authorized_on_cluster, error_of
from skiff.agent.handlers._access import CLUSTER_DENIED, RT, on, request, requires
from skiff.agent.handlers.create_acls import refresh_after_change
from skiff.agent.handlers.describe_acls import SECURITY_DISABLED_MESSAGE
from skiff.metadata.security.acl_types import AclBinding, AclBindingFilter, filter_error, filter_of

log = logging.getLogger(__name__)

API_KEY = 31
MIN_VERSION = 1
MAX_VERSION = 3


def _failed(code: ErrorCode, message: str | None) -> DeleteAclsFilterResult:
    return DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=())


def _matched(bindings: list[AclBinding]) -> DeleteAclsFilterResult:
    return DeleteAclsFilterResult(
        error_code=ErrorCode.none,
        error_message=None,
        matching_acls=tuple(
            DeleteAclsMatchingAcl(
                error_code=ErrorCode.none,
                error_message=None,
                resource_type=i8(int(b.resource_type)),
                resource_name=b.resource_name,
                pattern_type=i8(int(b.pattern_type)),
                principal=b.principal,
                host=b.host,
                operation=i8(int(b.operation)),
                permission_type=i8(int(b.permission)),
            )
            for b in bindings
        ),
    )


async def handle(ctx: AgentContext, request: Request) -> Any:
    filters = request.body.filters
    if not ctx.acls.enabled:
        results = [_failed(ErrorCode.security_disabled, SECURITY_DISABLED_MESSAGE)] * len(filters)
        return DeleteAclsResponse(throttle_time=NO_THROTTLE, filter_results=tuple(results))
    if not authorized_on_cluster(ctx, request, Op.ALTER):
        results = [_failed(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")] * len(
            filters
        )
        return DeleteAclsResponse(throttle_time=NO_THROTTLE, filter_results=tuple(results))
    answers: list[DeleteAclsFilterResult | None] = []
    valid: list[AclBindingFilter] = []
    for f in filters:
        acl_filter = filter_of(
            int(f.resource_type_filter),
            f.resource_name_filter,
            int(f.pattern_type_filter),
            f.principal_filter,
            f.host_filter,
            int(f.operation),
            int(f.permission_type),
        )
        reason = filter_error(acl_filter)
        if reason is not None:
            answers.append(_failed(ErrorCode.invalid_request, reason))
        else:
            answers.append(None)
            valid.append(acl_filter)
    matched: list[DeleteAclsFilterResult] = []
    if valid:
        try:
            _, found = await ctx.metadata.delete_acls(valid)
            matched = [_matched(bindings) for bindings in found]
            if any(found):
                log.info(
                    "ACLs deleted by %s: %s", request.connection.principal, [b for f in found for b in f]
                )
        except Exception as e:  # boundary: answers each filter
            # a failed deletion, even a bug (logged), answers each filter with the error
            code, message = error_of(e)
            if code == ErrorCode.unknown_server_error:
                log.exception("DeleteAcls failed")
            matched = [_failed(code, message)] * len(valid)
        await refresh_after_change(ctx)
    it = iter(matched)
    return DeleteAclsResponse(
        throttle_time=NO_THROTTLE, filter_results=tuple(a if a is not None else next(it) for a in answers)
    )


ACCESS = requires(request(on(RT.CLUSTER, Op.ALTER), CLUSTER_DENIED))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
