"""AlterClientQuotas (api key 49), v0-v1 (KIP-546): set and remove client quotas.

As a Kafka broker answers, one entry per requested entity: a principal without
ALTER_CONFIGS on the cluster gets CLUSTER_AUTHORIZATION_FAILED on every entry (the declared
cluster gate); an alteration Kafka refuses gets INVALID_REQUEST with Kafka's message
(metadata.security.quota_types: entity types user / client-id, names or the default (null),
the keys `producer_byte_rate`, `consumer_byte_rate`, `request_percentage`,
`controller_mutation_rate`, positive values, whole byte rates; `ip` entities are not
served). The valid alterations are applied in one metadata call, or only checked with
`validate_only`; if that call fails they all get its error (REQUEST_TIMED_OUT when metadata
is out of reach: it may or may not have happened). Then this agent reloads its quotas
before answering; other agents follow within `quota_refresh_interval_ms`
(agent.quota_cache).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from kio.schema.alter_client_quotas.v1.response import AlterClientQuotasResponse, EntityData, EntryData
from kio.schema.errors import ErrorCode
from skiff.agent.context import AgentContext
from skiff.agent.handlers import METADATA_ERRORS, NO_THROTTLE, HandlerSpec, Op, Request, error_of
from skiff.agent.handlers._access import CLUSTER_DENIED, RT, on, request, requires
from skiff.metadata.security.quota_types import (
    QuotaAlteration,
    QuotaEntity,
    QuotaOp,
    alteration_errors,
    entity_from,
)

log = logging.getLogger(__name__)

API_KEY = 49
MIN_VERSION = 0
MAX_VERSION = 1


def _entry(entity: Any, code: ErrorCode, message: str | None) -> EntryData:
    return EntryData(
        error_code=code,
        error_message=message,
        entity=tuple(EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entity),
    )


def refused(body: Any, code: ErrorCode) -> AlterClientQuotasResponse:
    """Kafka's answer to a principal without ALTER_CONFIGS on the cluster: every entry refused."""
    return AlterClientQuotasResponse(
        throttle_time=NO_THROTTLE,
        entries=tuple(_entry(e.entity, code, "Cluster authorization failed.") for e in body.entries),
    )


def alterations_of(body: Any) -> tuple[list[QuotaAlteration], list[str | None]]:
    """The request's alterations and, per alteration, why Kafka refuses it (or None)."""
    alterations: list[QuotaAlteration] = []
    early: list[str | None] = []
    for e in body.entries:
        pairs = [(d.entity_type, d.entity_name) for d in e.entity]
        entity, why = entity_from(pairs)
        ops = tuple(QuotaOp(o.key, None if o.remove else float(o.value)) for o in e.ops)
        if why is None and any(o.value is not None and not math.isfinite(o.value) for o in ops):
            why = "Quota values must be finite numbers"
        alterations.append(QuotaAlteration(entity or QuotaEntity(tuple(pairs)), ops))
        early.append(why)
    checked = alteration_errors(alterations)
    return alterations, [a or b for a, b in zip(early, checked, strict=True)]


async def handle(ctx: AgentContext, request: Request) -> Any:
    # ALTER_CONFIGS on the cluster is checked before this runs (the declared cluster gate)
    body = request.body
    alterations, errors = alterations_of(body)
    valid = [a for a, why in zip(alterations, errors, strict=True) if why is None]
    outcome: tuple[ErrorCode, str | None] = (ErrorCode.none, None)
    if valid:
        try:
            _, answers = await ctx.metadata.alter_client_quotas(valid, bool(body.validate_only))
            remote = iter(answers)
            errors = [next(remote) if why is None else why for why in errors]
            if not body.validate_only:
                log.info("client quotas altered by %s: %s", request.connection.principal, valid)
        except Exception as e:  # boundary: the alterations fail together
            # a bug is logged and answered as unknown_server_error for every valid entry
            code, message = error_of(e)
            if code == ErrorCode.unknown_server_error:
                log.exception("AlterClientQuotas failed")
            outcome = (code, message)
        if not body.validate_only:
            await refresh_after_change(ctx)
    entries = []
    for item, why in zip(body.entries, errors, strict=True):
        if why is not None:
            entries.append(_entry(item.entity, ErrorCode.invalid_request, why))
        else:
            entries.append(_entry(item.entity, *outcome))
    return AlterClientQuotasResponse(throttle_time=NO_THROTTLE, entries=tuple(entries))


async def refresh_after_change(ctx: AgentContext) -> None:
    """This agent's copy follows its own change before the response goes out (if metadata
    answers; otherwise the background poll catches up)."""
    try:
        await ctx.quotas.refresh()
    except METADATA_ERRORS as e:
        log.warning("client quotas changed, but reloading them failed (the next poll retries): %s", e)


ACCESS = requires(request(on(RT.CLUSTER, Op.ALTER_CONFIGS), CLUSTER_DENIED), refuse=refused)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
