"""InitProducerId (api key 22), v0-v5: producer ids for idempotent and transactional producers.

Non-transactional (`transactional_id` null): a fresh (producer id, epoch) comes from
`metadata.init_producer_id()`, which owns the id sequence and the de-duplication state.
As in Kafka, a producer id/epoch sent by the client (v3+, KIP-360) is ignored for a
non-transactional producer: it always gets a new id.

Transactional: `metadata.transactions.state.init_producer_id` under the transactional id's row
lock: the first call gets a new producer id at epoch 0, every later one the same id with
the epoch bumped (which fences the previous producer instance: its requests now get
PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH before v4); a client re-initialising after an
error sends its current id and epoch (KIP-360) and a stale one is fenced. If the previous
instance left a transaction open, metadata aborts it (PREPARE_ABORT, epoch bumped) and
answers CONCURRENT_TRANSACTIONS; this agent then writes the abort markers at once and asks
once more, so the client usually gets its id in this round trip (else it retries).
`transaction_timeout_ms` outside (0, transaction max timeout] is INVALID_TRANSACTION_TIMEOUT.

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
from skiff.agent.context import AgentContext
from skiff.agent.handlers import (
    METADATA_ERRORS,
    NO_THROTTLE,
    HandlerSpec,
    Op,
    Request,
    Resource,
    authorized,
    authorized_for_any,
    authorized_on_cluster,
)
from skiff.agent.handlers._access import CLUSTER_DENIED, RT, TXN_ID_DENIED, on, on_any, request, requires
from skiff.agent.handlers._txn import txn_error, txn_exception_code
from skiff.agent.protocol import to_error_code
from skiff.metadata.errors import MetadataError, MetadataUnavailable
from skiff.metadata.transactions.state import Outcome

log = logging.getLogger(__name__)

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5
FENCED_SINCE_VERSION = 4


def _error(code: ErrorCode) -> InitProducerIdResponse:
    return InitProducerIdResponse(
        throttle_time=NO_THROTTLE, error_code=code, producer_id=ProducerId(-1), producer_epoch=i16(-1)
    )


async def _transactional(ctx: AgentContext, request: Request) -> InitProducerIdResponse:
    body = request.body
    txn_id = str(body.transactional_id)
    timeout_ms = int(body.transaction_timeout.total_seconds() * 1000)
    expected: tuple[int, int] | None = None
    if request.api_version >= 3 and int(body.producer_id) >= 0:
        expected = (int(body.producer_id), int(body.producer_epoch))
    try:
        out: Outcome = await ctx.metadata.init_txn_producer_id(txn_id, timeout_ms, expected)
        # The previous instance's transaction is now PREPARE_ABORT: write its markers and
        # ask again as a new instance (a stale `expected` was fenced before the abort).
        if out.write_markers and out.record is not None and await ctx.parts.transactions.finish(out.record):
            out = await ctx.metadata.init_txn_producer_id(txn_id, timeout_ms, None)
    except METADATA_ERRORS as exc:
        return _error(txn_exception_code(exc))
    if not out.ok:
        return _error(txn_error(out.error, request.api_version, FENCED_SINCE_VERSION))
    return InitProducerIdResponse(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        producer_id=ProducerId(out.producer_id),
        producer_epoch=i16(out.producer_epoch),
    )


async def handle(ctx: AgentContext, request: Request) -> Any:
    transactional_id = request.body.transactional_id
    if transactional_id is not None:
        if not authorized(ctx, request, Op.WRITE, Resource.TRANSACTIONAL_ID, transactional_id):
            return _error(ErrorCode.transactional_id_authorization_failed)
        return await _transactional(ctx, request)
    if not authorized_on_cluster(ctx, request, Op.IDEMPOTENT_WRITE) and not authorized_for_any(
        ctx, request, Op.WRITE, Resource.TOPIC
    ):
        return _error(ErrorCode.cluster_authorization_failed)
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


ACCESS = requires(
    request(on(RT.TRANSACTIONAL_ID, Op.WRITE), TXN_ID_DENIED, when="a transactional id"),
    request(
        (on(RT.CLUSTER, Op.IDEMPOTENT_WRITE), on_any(RT.TOPIC, Op.WRITE)),
        CLUSTER_DENIED,
        when="no transactional id",
    ),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
