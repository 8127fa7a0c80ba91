"""CreateAcls (api key 30), v1-v3: add ACL bindings.

As a Kafka broker answers, one result per creation, in order: with authorization off
(`authorizer_enabled`) every one gets SECURITY_DISABLED; a principal without ALTER on the
cluster CLUSTER_AUTHORIZATION_FAILED; an invalid binding (UNKNOWN or ANY codes, MATCH/ANY
pattern types, an empty name, a principal without `Type:`, a CLUSTER resource not named
`kafka-cluster`) INVALID_REQUEST with Kafka's message. The valid ones are stored in one
metadata call (a binding already present is kept, not an error); if that fails they all
get its error (REQUEST_TIMED_OUT when metadata is out of reach: it may or may not have
happened). Then this agent reloads its ACLs before answering, so its next request obeys
them; other agents follow within `acl_refresh_interval_ms` (agent.acl_cache).
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.create_acls.v3.response import AclCreationResult, CreateAclsResponse
from kio.schema.errors import ErrorCode
from skiff.agent.context import AgentContext
from skiff.agent.handlers import (
    METADATA_ERRORS,
    NO_THROTTLE,
    HandlerSpec,
    Op,
    Request,
    authorized_on_cluster,
    error_of,
)
from skiff.agent.handlers._access import CLUSTER_DENIED, RT, on, request, requires
from skiff.agent.handlers.describe_acls import SECURITY_DISABLED_MESSAGE
from skiff.metadata.security.acl_types import AclBinding, binding_error, binding_of

log = logging.getLogger(__name__)

API_KEY = 30
MIN_VERSION = 1
MAX_VERSION = 3


def _result(code: ErrorCode, message: str | None = None) -> AclCreationResult:
    return AclCreationResult(error_code=code, error_message=message)


async def handle(ctx: AgentContext, request: Request) -> Any:
    creations = request.body.creations
    if not ctx.acls.enabled:
        results = [_result(ErrorCode.security_disabled, SECURITY_DISABLED_MESSAGE)] * len(creations)
        return CreateAclsResponse(throttle_time=NO_THROTTLE, results=tuple(results))
    if not authorized_on_cluster(ctx, request, Op.ALTER):
        results = [_result(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")] * len(
            creations
        )
        return CreateAclsResponse(throttle_time=NO_THROTTLE, results=tuple(results))
    answers: list[AclCreationResult | None] = []
    valid: list[AclBinding] = []
    for c in creations:
        b = binding_of(
            int(c.resource_type),
            c.resource_name,
            int(c.resource_pattern_type),
            c.principal,
            c.host,
            int(c.operation),
            int(c.permission_type),
        )
        reason = binding_error(b)
        if reason is not None:
            answers.append(_result(ErrorCode.invalid_request, reason))
        else:
            answers.append(None)
            valid.append(b)
    outcome = _result(ErrorCode.none)
    if valid:
        try:
            await ctx.metadata.create_acls(valid)
            log.info("ACLs created by %s: %s", request.connection.principal, valid)
        except Exception as e:  # boundary: the bindings fail together
            # a bug is logged and answered as unknown_server_error for every binding
            code, message = error_of(e)
            if code == ErrorCode.unknown_server_error:
                log.exception("CreateAcls failed")
            outcome = _result(code, message)
        await refresh_after_change(ctx)
    return CreateAclsResponse(
        throttle_time=NO_THROTTLE, results=tuple(a if a is not None else outcome for a in answers)
    )


async def refresh_after_change(ctx: AgentContext) -> None:
    """This agent's copy follows its own change before the response goes out (if metadata
    answers; otherwise the background poll catches up)."""
    try:
        await ctx.acls.refresh()
    except METADATA_ERRORS as e:
        log.warning("ACLs changed, but reloading them failed (the next poll retries): %s", e)


ACCESS = requires(request(on(RT.CLUSTER, Op.ALTER), CLUSTER_DENIED))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
