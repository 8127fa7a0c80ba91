"""TxnOffsetCommit (api key 28), v0-v3: a consumer group's offsets inside a transaction
(`send_offsets_to_transaction`).

Metadata stages them under the transactional id (`metadata.transactions.offsets`): they become the
group's committed offsets in the same database transaction that completes a COMMIT, and
are dropped by an ABORT; until then OffsetFetch does not see them. The producer must own
the transactional id at its current epoch (PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH
before v3) and the group must have been added with AddOffsetsToTxn (INVALID_TXN_STATE).
Per offset: UNKNOWN_TOPIC_OR_PARTITION, OFFSET_METADATA_TOO_LARGE as OffsetCommit.

The request goes to the group's coordinator, as in Kafka: another agent gets
NOT_COORDINATOR (the producer looks the group coordinator up again). v3+ (KIP-447) carries
the consumer's generation id, member id and group instance id, checked against the group
as Kafka's GroupCoordinator.handleTxnCommitOffsets does
(`GroupCoordinator.validate_txn_commit`): FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID,
ILLEGAL_GENERATION on every partition (the Java producer makes the last two an abortable
CommitFailedException: a zombie consumer cannot commit offsets for partitions it lost);
generation -1 with no member id skips the check. One transaction may stage at most
`transaction_max_offsets` offsets: beyond, POLICY_VIOLATION (`metadata.transactions.offsets`).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.txn_offset_commit.v3.response import (
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from kio.static.primitive import i32
from skiff.agent.context import AgentContext
from skiff.agent.groups.ownership import coordinator, ensure_coordinator
from skiff.agent.handlers import METADATA_ERRORS, NO_THROTTLE, HandlerSpec, Op, Request, Resource, authorized
from skiff.agent.handlers._access import (
    GROUP_DENIED,
    RT,
    TOPIC_DENIED,
    TXN_ID_DENIED,
    item,
    on,
    request,
    requires,
)
from skiff.agent.handlers._txn import txn_error, txn_exception_code
from skiff.metadata.types import GroupOffset

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 3
FENCED_SINCE_VERSION = 3
GENERATION_SINCE_VERSION = 3


async def _check_group(ctx: AgentContext, request: Request) -> ErrorCode:
    """This agent coordinates the group, and (v3+) the consumer is a member of its generation."""
    body = request.body
    code = await ensure_coordinator(ctx, body.group_id, request.connection.zone.zone)
    if code != ErrorCode.none or request.api_version < GENERATION_SINCE_VERSION:
        return code
    return coordinator(ctx).validate_txn_commit(
        body.group_id, int(body.generation_id), body.member_id, body.group_instance_id
    )


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = request.body
    v = request.api_version
    offsets = [
        GroupOffset(
            topic=t.name,
            partition=int(p.partition_index),
            offset=int(p.committed_offset),
            metadata=p.committed_metadata,
            leader_epoch=int(getattr(p, "committed_leader_epoch", -1)),
        )
        for t in body.topics
        for p in t.partitions
    ]
    # Kafka's ACLs: WRITE on the transactional id, READ on the group, READ on each topic
    refused: ErrorCode | None = None
    if not authorized(ctx, request, Op.WRITE, Resource.TRANSACTIONAL_ID, body.transactional_id):
        refused = ErrorCode.transactional_id_authorization_failed
    elif not authorized(ctx, request, Op.READ, Resource.GROUP, body.group_id):
        refused = ErrorCode.group_authorization_failed
    unreadable = {o.topic for o in offsets if not authorized(ctx, request, Op.READ, Resource.TOPIC, o.topic)}
    if refused is not None:
        codes = [refused] * len(offsets)
    elif unreadable:
        codes = [
            ErrorCode.topic_authorization_failed
            if o.topic in unreadable
            else ErrorCode.operation_not_attempted
            for o in offsets
        ]
    elif (group_code := await _check_group(ctx, request)) != ErrorCode.none:
        codes = [group_code] * len(offsets)
    else:
        try:
            results = await ctx.metadata.txn_offset_commit(
                body.transactional_id,
                int(body.producer_id),
                int(body.producer_epoch),
                body.group_id,
                offsets,
                max_offsets=ctx.config.transaction_max_offsets,
            )
            codes = [txn_error(r.error_code, v, FENCED_SINCE_VERSION) for r in results]
        except METADATA_ERRORS as exc:
            codes = [txn_exception_code(exc)] * len(offsets)
    it = iter(codes)
    return TxnOffsetCommitResponse(
        throttle_time=NO_THROTTLE,
        topics=tuple(
            TxnOffsetCommitResponseTopic(
                name=t.name,
                partitions=tuple(
                    TxnOffsetCommitResponsePartition(
                        partition_index=i32(int(p.partition_index)), error_code=next(it)
                    )
                    for p in t.partitions
                ),
            )
            for t in body.topics
        ),
    )


ACCESS = requires(
    request(on(RT.TRANSACTIONAL_ID, Op.WRITE), TXN_ID_DENIED),
    request(on(RT.GROUP, Op.READ), GROUP_DENIED),
    item(on(RT.TOPIC, Op.READ), TOPIC_DENIED),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
