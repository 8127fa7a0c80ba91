"""ListTransactions (api key 66), v0-v1 (KIP-664, KIP-994 duration filter): the
transactional ids metadata knows, filtered by state name, producer id and (v1) running
longer than `duration_filter` ms. State filters that name no state are echoed in
`unknown_state_filters`, as Kafka does. Any agent answers. Only the ids the principal may
DESCRIBE are listed (Kafka's `handleListTransactionsRequest` filters the same way).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.list_transactions.v1.response import ListTransactionsResponse, TransactionState
from kio.schema.types import ProducerId, TransactionalId
from skiff.agent.context import AgentContext
from skiff.agent.handlers import METADATA_ERRORS, NO_THROTTLE, HandlerSpec, Request, Resource, authorized
from skiff.agent.handlers._access import RT, Op, filtered, on, requires
from skiff.agent.handlers._txn import txn_exception_code
from skiff.metadata.transactions.state import TxnState

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 1

_STATE_NAMES = frozenset(s.value for s in TxnState)


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = request.body
    wanted = [str(s) for s in body.state_filters]
    unknown = tuple(s for s in wanted if s not in _STATE_NAMES)
    known = [s for s in wanted if s in _STATE_NAMES]
    duration_ms = int(getattr(body, "duration_filter", -1))
    if wanted and not known:  # only unknown states: nothing can match
        return ListTransactionsResponse(
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            unknown_state_filters=unknown,
            transaction_states=(),
        )
    try:
        records = await ctx.metadata.list_txns(known, [int(p) for p in body.producer_id_filters], duration_ms)
    except METADATA_ERRORS as exc:
        return ListTransactionsResponse(
            throttle_time=NO_THROTTLE,
            error_code=txn_exception_code(exc),
            unknown_state_filters=unknown,
            transaction_states=(),
        )
    return ListTransactionsResponse(
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        unknown_state_filters=unknown,
        transaction_states=tuple(
            TransactionState(
                transactional_id=TransactionalId(r.transactional_id),
                producer_id=ProducerId(r.producer_id),
                transaction_state=r.state.value,
            )
            for r in records
            if authorized(ctx, request, Op.DESCRIBE, Resource.TRANSACTIONAL_ID, r.transactional_id)
        ),
    )


ACCESS = requires(filtered(on(RT.TRANSACTIONAL_ID, Op.DESCRIBE)))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
