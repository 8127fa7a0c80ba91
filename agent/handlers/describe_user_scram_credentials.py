"""DescribeUserScramCredentials (api key 50), v0: which SCRAM mechanisms (and iteration
counts) each user has, never salts or keys (metadata.security.scram_users).

Null or empty `users`: every user with a credential. Named users, as Kafka answers: a
name asked twice is DUPLICATE_RESOURCE, a user without credentials RESOURCE_NOT_FOUND.
Metadata out of reach fails the whole request (top-level error). Only a principal with
DESCRIBE on the cluster may ask (Kafka's `handleDescribeUserScramCredentialsRequest`):
anyone else gets CLUSTER_AUTHORIZATION_FAILED as the top-level error, applied by the
connection before this handler runs (the declared cluster gate, agent.handlers._access).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kio.schema.describe_user_scram_credentials.v0.response import (
    CredentialInfo,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
)
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32
from skiff.agent.context import AgentContext
from skiff.agent.handlers import METADATA_ERRORS, NO_THROTTLE, HandlerSpec, Request, error_of
from skiff.agent.handlers._access import CLUSTER_DENIED, RT, Op, on, request, requires
from skiff.metadata.security.scram_types import MECHANISM_CODES, ScramCredentialInfo

API_KEY = 50


def _result(user: str, infos: list[ScramCredentialInfo]) -> DescribeUserScramCredentialsResult:
    return DescribeUserScramCredentialsResult(
        user=user,
        error_code=ErrorCode.none,
        error_message=None,
        credential_infos=tuple(
            CredentialInfo(mechanism=i8(MECHANISM_CODES[i.mechanism]), iterations=i32(i.iterations))
            for i in infos
            if i.mechanism in MECHANISM_CODES
        ),
    )


def _error(user: str, code: ErrorCode, message: str) -> DescribeUserScramCredentialsResult:
    return DescribeUserScramCredentialsResult(
        user=user, error_code=code, error_message=message, credential_infos=()
    )


def refused(body: Any, code: ErrorCode) -> Any:
    """Kafka's answer to a refused request: the top-level error, and each named user's too."""
    message = "Cluster authorization failed."
    users = dict.fromkeys(u.name for u in body.users or ())
    return DescribeUserScramCredentialsResponse(
        throttle_time=NO_THROTTLE,
        error_code=code,
        error_message=message,
        results=tuple(_error(u, code, message) for u in users),
    )


async def handle(ctx: AgentContext, request: Request) -> Any:
    names = [u.name for u in request.body.users or ()]
    counts = Counter(names)
    try:
        infos = await ctx.metadata.describe_scram_users(sorted(counts) if names else None)
    except METADATA_ERRORS as e:
        code, message = error_of(e)
        return DescribeUserScramCredentialsResponse(
            throttle_time=NO_THROTTLE, error_code=code, error_message=message, results=()
        )
    by_user: dict[str, list[ScramCredentialInfo]] = {}
    for info in infos:
        by_user.setdefault(info.user, []).append(info)
    results: list[DescribeUserScramCredentialsResult] = []
    if not names:
        results = [_result(u, by_user[u]) for u in sorted(by_user)]
    else:
        for user in dict.fromkeys(names):  # first-seen order, once each
            if counts[user] > 1:
                results.append(
                    _error(
                        user,
                        ErrorCode.duplicate_resource,
                        f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}",
                    )
                )
            elif user not in by_user:
                results.append(
                    _error(
                        user,
                        ErrorCode.resource_not_found,
                        f"Attempt to describe a user credential that does not exist: {user}",
                    )
                )
            else:
                results.append(_result(user, by_user[user]))
    return DescribeUserScramCredentialsResponse(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, results=tuple(results)
    )


ACCESS = requires(request(on(RT.CLUSTER, Op.DESCRIBE), CLUSTER_DENIED), refuse=refused)

SPEC = HandlerSpec(API_KEY, 0, 0, handle, access=ACCESS)
