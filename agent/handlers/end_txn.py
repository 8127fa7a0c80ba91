"""EndTxn (api key 26), v0-v4: commit or abort the producer's ongoing transaction.

Metadata moves the transaction to PREPARE_COMMIT / PREPARE_ABORT (`metadata.transactions.state.end_txn`,
under the transactional id's row lock); the agent then writes the markers and completes
it (`agent.transactions.coordinator.TxnCoordinator.finish`) before answering, so a read_committed
consumer sees a committed transaction as soon as `commit_transaction()` returns. If the
markers cannot be written now the answer is still success, as in Kafka (the outcome is
durable once prepared): the background scan finishes the transaction, and until then the
producer's next request gets CONCURRENT_TRANSACTIONS.

Nothing here waits on a timer: the client sends EndTxn only once all its produce requests
are acked (librdkafka, the Java client and aiokafka flush first), so the markers never
wait for a produce file. A DEBUG line gives the PREPARE write's and the markers' times.

v5 (KIP-890 part 2, an epoch bump per transaction) is not served.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kio.schema.end_txn.v4.response import EndTxnResponse
from kio.schema.errors import ErrorCode
from skiff.agent.context import AgentContext
from skiff.agent.handlers import METADATA_ERRORS, NO_THROTTLE, HandlerSpec, Op, Request, Resource, authorized
from skiff.agent.handlers._access import RT, TXN_ID_DENIED, on, request, requires
from skiff.agent.handlers._txn import txn_error, txn_exception_code

log = logging.getLogger(__name__)

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 4
FENCED_SINCE_VERSION = 2


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = request.body
    if not authorized(ctx, request, Op.WRITE, Resource.TRANSACTIONAL_ID, body.transactional_id):
        return EndTxnResponse(
            throttle_time=NO_THROTTLE, error_code=ErrorCode.transactional_id_authorization_failed
        )
    started_s = time.perf_counter()
    try:
        out = await ctx.metadata.end_txn(
            body.transactional_id, int(body.producer_id), int(body.producer_epoch), bool(body.committed)
        )
    except METADATA_ERRORS as exc:
        return EndTxnResponse(throttle_time=NO_THROTTLE, error_code=txn_exception_code(exc))
    if out.ok and out.write_markers and out.record is not None:
        prepared_s = time.perf_counter()
        await ctx.parts.transactions.finish(out.record)
        log.debug(
            "EndTxn %r: prepare %.1f ms, markers %.1f ms",
            body.transactional_id,
            (prepared_s - started_s) * 1000,
            (time.perf_counter() - prepared_s) * 1000,
        )
    return EndTxnResponse(
        throttle_time=NO_THROTTLE, error_code=txn_error(out.error, request.api_version, FENCED_SINCE_VERSION)
    )


ACCESS = requires(request(on(RT.TRANSACTIONAL_ID, Op.WRITE), TXN_ID_DENIED))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
