"""AddOffsetsToTxn (api key 25), v0-v3: a consumer group's offsets join the transaction
(`metadata.transactions.state.add_offsets`, under the transactional id's row lock).

The offsets themselves come next with TxnOffsetCommit (`agent.handlers.txn_offset_commit`),
which refuses a group not added here. Each group counts as one of the transaction's
`transaction_max_partitions` partitions (Kafka adds the group's __consumer_offsets
partition): beyond, POLICY_VIOLATION and nothing changes (`metadata.transactions.store`).
"""

from __future__ import annotations

from typing import Any

from kio.schema.add_offsets_to_txn.v3.response import AddOffsetsToTxnResponse
from kio.schema.errors import ErrorCode
from skiff.agent.context import AgentContext
from skiff.agent.handlers import METADATA_ERRORS, NO_THROTTLE, HandlerSpec, Op, Request, Resource, authorized
from skiff.agent.handlers._access import GROUP_DENIED, RT, TXN_ID_DENIED, on, request, requires
from skiff.agent.handlers._txn import txn_error, txn_exception_code

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 3
FENCED_SINCE_VERSION = 2


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = request.body
    if not authorized(ctx, request, Op.WRITE, Resource.TRANSACTIONAL_ID, body.transactional_id):
        return AddOffsetsToTxnResponse(
            throttle_time=NO_THROTTLE, error_code=ErrorCode.transactional_id_authorization_failed
        )
    if not authorized(ctx, request, Op.READ, Resource.GROUP, body.group_id):
        return AddOffsetsToTxnResponse(
            throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed
        )
    try:
        code = await ctx.metadata.add_offsets_to_txn(
            body.transactional_id,
            int(body.producer_id),
            int(body.producer_epoch),
            body.group_id,
            max_partitions=ctx.config.transaction_max_partitions,
        )
    except METADATA_ERRORS as exc:
        return AddOffsetsToTxnResponse(throttle_time=NO_THROTTLE, error_code=txn_exception_code(exc))
    return AddOffsetsToTxnResponse(
        throttle_time=NO_THROTTLE, error_code=txn_error(code, request.api_version, FENCED_SINCE_VERSION)
    )


ACCESS = requires(
    request(on(RT.TRANSACTIONAL_ID, Op.WRITE), TXN_ID_DENIED),
    request(on(RT.GROUP, Op.READ), GROUP_DENIED),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
