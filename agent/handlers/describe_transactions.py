"""DescribeTransactions (api key 65), v0 (KIP-664): transactional ids' state for operators
(`kafka-transactions.sh describe`), read from metadata's `transactions` table.

ACLs as Kafka's `handleDescribeTransactionsRequest`: an id the principal may not DESCRIBE
gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED (and is not looked up), and a transaction's
partitions of topics it may not DESCRIBE are left out. An id metadata does not know gets
TRANSACTIONAL_ID_NOT_FOUND. A transaction not started
(Empty, Complete*) has start time -1, as in Kafka. Partitions are stored by
topic id and answered by topic name (a deleted topic's partitions are left out). Any
agent answers (the state is in metadata, not in the coordinator).
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any, cast

from kio.schema.describe_transactions.v0.response import (
    DescribeTransactionsResponse,
    TopicData,
    TransactionState,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import TZAware, i16, i32, i32Timedelta
from skiff.agent.context import AgentContext
from skiff.agent.handlers import METADATA_ERRORS, NO_THROTTLE, HandlerSpec, Request, Resource, authorized
from skiff.agent.handlers._access import RT, TXN_ID_DENIED, Op, filtered, item, on, requires
from skiff.agent.handlers._txn import txn_exception_code
from skiff.metadata.transactions.state import TxnRecord

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0


def epoch_ms(ms: int) -> TZAware:
    """A whole-millisecond datetime kio encodes back to `ms` (-1: not started)."""
    return cast(
        TZAware,
        datetime.datetime.fromtimestamp(ms // 1000, tz=datetime.UTC)
        + datetime.timedelta(milliseconds=ms % 1000),
    )


def _state(
    txn_id: str, r: TxnRecord | None, names: dict[uuid.UUID, str], code: ErrorCode
) -> TransactionState:
    if r is None:
        return TransactionState(
            error_code=code,
            transactional_id=TransactionalId(txn_id),
            transaction_state="",
            transaction_timeout=i32Timedelta.parse(datetime.timedelta(0)),
            transaction_start_time=epoch_ms(0),  # the schema's default, as Kafka answers errors
            producer_id=ProducerId(-1),
            producer_epoch=i16(-1),
            topics=(),
        )
    by_topic: dict[str, list[int]] = {}
    for topic_id, partition in sorted(r.partitions):
        name = names.get(uuid.UUID(topic_id))
        if name is not None:
            by_topic.setdefault(name, []).append(partition)
    return TransactionState(
        error_code=ErrorCode.none,
        transactional_id=TransactionalId(txn_id),
        transaction_state=r.state.value,
        transaction_timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=r.timeout_ms)),
        transaction_start_time=epoch_ms(r.start_ms),
        producer_id=ProducerId(r.producer_id),
        producer_epoch=i16(r.producer_epoch),
        topics=tuple(
            TopicData(topic=TopicName(n), partitions=tuple(i32(p) for p in ps)) for n, ps in by_topic.items()
        ),
    )


async def handle(ctx: AgentContext, request: Request) -> Any:
    ids = [str(t) for t in request.body.transactional_ids]
    allowed = {t for t in ids if authorized(ctx, request, Op.DESCRIBE, Resource.TRANSACTIONAL_ID, t)}
    try:
        found = await ctx.metadata.describe_txns(sorted(allowed)) if allowed else {}
        topic_ids = {uuid.UUID(t) for r in found.values() if r is not None for t, _ in r.partitions}
        topics = await ctx.metadata.topics_by_id(sorted(topic_ids)) if topic_ids else {}
    except METADATA_ERRORS as exc:
        code = txn_exception_code(exc)
        states = tuple(_state(t, None, {}, code) for t in ids)
        return DescribeTransactionsResponse(throttle_time=NO_THROTTLE, transaction_states=states)
    names = {
        k: v.name
        for k, v in topics.items()
        if authorized(ctx, request, Op.DESCRIBE, Resource.TOPIC, v.name)  # others left out
    }
    return DescribeTransactionsResponse(
        throttle_time=NO_THROTTLE,
        transaction_states=tuple(
            _state(t, found.get(t), names, ErrorCode.transactional_id_not_found)
            if t in allowed
            else _state(t, None, {}, ErrorCode.transactional_id_authorization_failed)
            for t in ids
        ),
    )


ACCESS = requires(
    item(on(RT.TRANSACTIONAL_ID, Op.DESCRIBE), TXN_ID_DENIED),
    filtered(on(RT.TOPIC, Op.DESCRIBE), when="the transaction's partitions"),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
