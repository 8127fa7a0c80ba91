"""AlterUserScramCredentials (api key 51), v0: create, replace and delete users' SCRAM
credentials (KIP-554), stored salted in metadata (metadata.security.scram_users).

An upsertion carries (user, mechanism, iterations, salt, SaltedPassword): the client salts,
the agent derives StoredKey and ServerKey (`metadata.security.scram_types.keys_from_salted_password`)
and stores those, never the salted password. One result per user, as Kafka answers:

- a (user, mechanism) altered twice in the request: DUPLICATE_RESOURCE for that user;
- an empty user name, iterations outside 4096..16384 or an empty salt: UNACCEPTABLE_CREDENTIAL;
- an unknown mechanism code: UNSUPPORTED_SASL_MECHANISM;
- deleting a credential that does not exist: RESOURCE_NOT_FOUND.

Only a principal with ALTER on the cluster may alter credentials (Kafka's
`handleAlterUserScramCredentialsRequest`): anyone else gets CLUSTER_AUTHORIZATION_FAILED
for every user named, and nothing is applied. A user with any invalid operation has none of them applied; the valid users' operations
are applied (deletions, then upsertions, each one metadata call). Agents see a change
within `scram_credential_cache_ms`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kio.schema.alter_user_scram_credentials.v0.response import (
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
)
from kio.schema.errors import ErrorCode
from skiff.agent.context import AgentContext
from skiff.agent.handlers import (
    METADATA_ERRORS,
    NO_THROTTLE,
    HandlerSpec,
    Request,
    authorized_on_cluster,
    error_of,
)
from skiff.agent.handlers._access import CLUSTER_DENIED, RT, Op, on, request, requires
from skiff.metadata.security.scram_types import (
    MAX_ITERATIONS,
    MAX_SALT_BYTES,
    MECHANISMS_BY_CODE,
    MIN_ITERATIONS,
    ScramCredential,
    keys_from_salted_password,
)

API_KEY = 51


def _check(
    user: str, mechanism_code: int, iterations: int | None, salt: bytes | None
) -> tuple[ErrorCode, str] | None:
    if not user:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism_code not in MECHANISMS_BY_CODE:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    if iterations is not None:
        if iterations < MIN_ITERATIONS:
            return ErrorCode.unacceptable_credential, f"Too few iterations (at least {MIN_ITERATIONS})"
        if iterations > MAX_ITERATIONS:
            return ErrorCode.unacceptable_credential, f"Too many iterations (at most {MAX_ITERATIONS})"
    if salt is not None and not 1 <= len(salt) <= MAX_SALT_BYTES:
        return ErrorCode.unacceptable_credential, "Salt must not be empty"
    return None


def _refused(body: Any) -> Any:
    users = dict.fromkeys([d.name for d in body.deletions] + [u.name for u in body.upsertions])
    return AlterUserScramCredentialsResponse(
        throttle_time=NO_THROTTLE,
        results=tuple(
            AlterUserScramCredentialsResult(
                user=user,
                error_code=ErrorCode.cluster_authorization_failed,
                error_message="Cluster authorization failed.",
            )
            for user in users
        ),
    )


def _invalid(body: Any, ops: Counter[tuple[str, int]]) -> dict[str, tuple[ErrorCode, str]]:
    """Each user with an invalid operation: its first error (Kafka checks them all first)."""
    errors: dict[str, tuple[ErrorCode, str]] = {}
    for (user, _mech), n in ops.items():
        if n > 1:
            errors.setdefault(
                user,
                (
                    ErrorCode.duplicate_resource,
                    "A user credential cannot be altered twice in the same request",
                ),
            )
    for d in body.deletions:
        if (bad := _check(d.name, int(d.mechanism), None, None)) is not None:
            errors.setdefault(d.name, bad)
    for u in body.upsertions:
        if (bad := _check(u.name, int(u.mechanism), int(u.iterations), u.salt)) is not None:
            errors.setdefault(u.name, bad)
    return errors


async def _apply(ctx: AgentContext, user: str, body: Any) -> None:
    """One user's deletions, then its upsertions (one metadata call each)."""
    for d in body.deletions:
        if d.name == user:
            await ctx.metadata.delete_scram_credential(user, MECHANISMS_BY_CODE[int(d.mechanism)])
    for u in body.upsertions:
        if u.name == user:
            mech = MECHANISMS_BY_CODE[int(u.mechanism)]
            stored, server = keys_from_salted_password(mech, u.salted_password)
            await ctx.metadata.upsert_scram_credential(
                ScramCredential(user, mech, u.salt, int(u.iterations), stored, server)
            )


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = request.body
    if not authorized_on_cluster(ctx, request, Op.ALTER):
        return _refused(body)
    ops = Counter(
        [(d.name, int(d.mechanism)) for d in body.deletions]
        + [(u.name, int(u.mechanism)) for u in body.upsertions]
    )
    errors = _invalid(body, ops)
    users = list(dict.fromkeys(name for name, _ in ops))
    for user in users:
        if user in errors:
            continue
        try:
            await _apply(ctx, user, body)
        except METADATA_ERRORS as e:
            errors[user] = error_of(e)
    results = tuple(
        AlterUserScramCredentialsResult(
            user=user,
            error_code=errors[user][0] if user in errors else ErrorCode.none,
            error_message=errors[user][1] if user in errors else None,
        )
        for user in users
    )
    return AlterUserScramCredentialsResponse(throttle_time=NO_THROTTLE, results=results)


ACCESS = requires(request(on(RT.CLUSTER, Op.ALTER), CLUSTER_DENIED))

SPEC = HandlerSpec(API_KEY, 0, 0, handle, access=ACCESS)
