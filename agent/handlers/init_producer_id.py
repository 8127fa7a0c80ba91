"""InitProducerId (api key 22), v0-v5: producer ids for idempotent producers.

Non-transactional (`transactional_id` null): a fresh (producer id, epoch) comes from
`metadata.init_producer_id()`, which owns the id sequence and the de-duplication state.
As in Kafka, a producer id/epoch sent by the client (v3+, KIP-360) is ignored for a
non-transactional producer: it always gets a new id.

Transactional (`transactional_id` set): Skiff has no transaction coordinator, so the
answer is UNSUPPORTED_VERSION (35) with producer id -1: what a Kafka broker that does not
implement the transactional API answers (the Java producer raises
UnsupportedVersionException; librdkafka retries it until its timeout). Clients normally never
get here: FindCoordinator for their transactional id already fails with a fatal error (see
`agent.handlers.find_coordinator`).

Authorization (Kafka's ACLs), first: a transactional id needs WRITE on it
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer IDEMPOTENT_WRITE on the
cluster or WRITE on some topic (Kafka's authorizeByResourceType), else
CLUSTER_AUTHORIZATION_FAILED.

Metadata unreachable -> COORDINATOR_NOT_AVAILABLE, which producers retry.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v5.response import InitProducerIdResponse
from kio.schema.types import ProducerId
from kio.static.primitive import i16

from agent.context import AgentContext
from agent.handlers import (
    NO_THROTTLE,
    HandlerSpec,
    Op,
    Request,
    Resource,
    authorized,
    authorized_for_any,
    authorized_on_cluster,
)
from agent.protocol import to_error_code
from metadata.errors import MetadataError, MetadataUnavailable

log = logging.getLogger(__name__)

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5

TRANSACTIONS_UNSUPPORTED = ErrorCode.unsupported_version


def _error(code: ErrorCode) -> InitProducerIdResponse:
    return InitProducerIdResponse(
        throttle_time=NO_THROTTLE, error_code=code, producer_id=ProducerId(-1), producer_epoch=i16(-1)
    )


async def handle(ctx: AgentContext, request: Request) -> Any:
    transactional_id = request.body.transactional_id
    if transactional_id is not None:
        if not authorized(ctx, request, Op.WRITE, Resource.TRANSACTIONAL_ID, transactional_id):
            return _error(ErrorCode.transactional_id_authorization_failed)
    elif not authorized_on_cluster(ctx, request, Op.IDEMPOTENT_WRITE) and not authorized_for_any(
        ctx, request, Op.WRITE, Resource.TOPIC
    ):
        return _error(ErrorCode.cluster_authorization_failed)
    if transactional_id is not None:
        log.info(
            "refusing transactional InitProducerId (transactional.id=%r): transactions are not supported",
            request.body.transactional_id,
        )
        return _error(TRANSACTIONS_UNSUPPORTED)
    try:
        producer_id, epoch = await ctx.metadata.init_producer_id()
    except MetadataUnavailable as e:
        log.warning("InitProducerId: metadata unavailable: %s", e)
        return _error(ErrorCode.coordinator_not_available)
    except MetadataError as e:
        return _error(to_error_code(e.error_code))
    return InitProducerIdResponse(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id=ProducerId(producer_id),
        producer_epoch=i16(epoch),
    )


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle)
