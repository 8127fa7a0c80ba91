"""AddPartitionsToTxn (api key 24), v0-v4: partitions join the producer's transaction.

v0-v3 (producers) carry one transaction; v4 (brokers, KIP-890) a batch of transactions,
each possibly `verify_only` (are these partitions already in the ongoing transaction?).
Topic names are resolved here; metadata checks the partitions exist and applies
`metadata.transactions.state.add_partitions` under the transactional id's row lock. As in Kafka, a
request naming an unknown topic or partition changes nothing: those partitions get
UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED. ACLs: v4 (sent by brokers) needs
CLUSTER_ACTION on the cluster (else CLUSTER_AUTHORIZATION_FAILED for the whole request); WRITE on the
transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and on each topic (else
TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED). A transaction may hold at
most `transaction_max_partitions` partitions: a request that would take it beyond changes
nothing and gets POLICY_VIOLATION on every partition (see `metadata.transactions.store`).
"""

from __future__ import annotations

from typing import Any

from kio.schema.add_partitions_to_txn.v3 import response as r3
from kio.schema.add_partitions_to_txn.v4 import response as r4
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32
from skiff.agent.context import AgentContext
from skiff.agent.handlers import (
    METADATA_ERRORS,
    NO_THROTTLE,
    HandlerSpec,
    Op,
    Request,
    Resource,
    authorized,
    authorized_on_cluster,
)
from skiff.agent.handlers._access import (
    CLUSTER_DENIED,
    RT,
    TOPIC_DENIED,
    TXN_ID_DENIED,
    item,
    on,
    request,
    requires,
)
from skiff.agent.handlers._txn import txn_error, txn_exception_code

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 4
FENCED_SINCE_VERSION = 2

TopicErrors = dict[str, dict[int, ErrorCode]]


async def _add(
    ctx: AgentContext,
    request: Request,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    topics: Any,
    version: int,
    verify_only: bool = False,
) -> TopicErrors:
    wanted: dict[str, list[int]] = {}
    for t in topics:
        wanted.setdefault(t.name, []).extend(int(p) for p in t.partitions)
    # Kafka's ACLs: WRITE on the transactional id, then WRITE on every topic (a refused
    # topic fails the request; the others are not attempted)
    if not authorized(ctx, request, Op.WRITE, Resource.TRANSACTIONAL_ID, transactional_id):
        return {
            n: dict.fromkeys(ps, ErrorCode.transactional_id_authorization_failed) for n, ps in wanted.items()
        }
    refused = {n for n in wanted if not authorized(ctx, request, Op.WRITE, Resource.TOPIC, n)}
    if refused:
        return {
            n: dict.fromkeys(
                ps,
                ErrorCode.topic_authorization_failed if n in refused else ErrorCode.operation_not_attempted,
            )
            for n, ps in wanted.items()
        }
    try:
        known = await ctx.topics.get_by_name(list(wanted))
    except METADATA_ERRORS as exc:
        code = txn_exception_code(exc)
        return {n: dict.fromkeys(ps, code) for n, ps in wanted.items()}
    if any(n not in known for n in wanted):
        return {
            n: dict.fromkeys(
                ps,
                ErrorCode.unknown_topic_or_partition if n not in known else ErrorCode.operation_not_attempted,
            )
            for n, ps in wanted.items()
        }
    by_id = {(str(known[n].topic_id), p): (n, p) for n, ps in wanted.items() for p in ps}
    out: TopicErrors = {n: {} for n in wanted}
    errors: dict[tuple[str, int], int]
    try:
        if verify_only:
            verified = await ctx.metadata.verify_txn_partitions(
                transactional_id, producer_id, epoch, list(by_id)
            )
            errors = dict.fromkeys(by_id, verified)
        else:
            errors = await ctx.metadata.add_partitions_to_txn(
                transactional_id,
                producer_id,
                epoch,
                list(by_id),
                max_partitions=ctx.config.transaction_max_partitions,
            )
    except METADATA_ERRORS as exc:
        code = txn_exception_code(exc)
        return {n: dict.fromkeys(ps, code) for n, ps in wanted.items()}
    for key, (n, p) in by_id.items():
        out[n][p] = txn_error(errors.get(key, ErrorCode.unknown_server_error), version, FENCED_SINCE_VERSION)
    return out


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = request.body
    v = request.api_version
    if v <= 3:
        errors = await _add(
            ctx,
            request,
            body.v3_and_below_transactional_id,
            int(body.v3_and_below_producer_id),
            int(body.v3_and_below_producer_epoch),
            body.v3_and_below_topics,
            v,
        )
        return r3.AddPartitionsToTxnResponse(
            throttle_time=NO_THROTTLE,
            results_by_topic_v3_and_below=tuple(
                r3.AddPartitionsToTxnTopicResult(
                    name=TopicName(n),
                    results_by_partition=tuple(
                        r3.AddPartitionsToTxnPartitionResult(partition_index=i32(p), partition_error_code=c)
                        for p, c in ps.items()
                    ),
                )
                for n, ps in errors.items()
            ),
        )
    if not authorized_on_cluster(ctx, request, Op.CLUSTER_ACTION):  # v4+ is broker-to-broker
        return r4.AddPartitionsToTxnResponse(
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            results_by_transaction=(),
        )
    results = []
    for txn in body.transactions:
        errors = await _add(
            ctx,
            request,
            txn.transactional_id,
            int(txn.producer_id),
            int(txn.producer_epoch),
            txn.topics,
            v,
            verify_only=bool(txn.verify_only),
        )
        results.append(
            r4.AddPartitionsToTxnResult(
                transactional_id=txn.transactional_id,
                topic_results=tuple(
                    r4.AddPartitionsToTxnTopicResult(
                        name=TopicName(n),
                        results_by_partition=tuple(
                            r4.AddPartitionsToTxnPartitionResult(
                                partition_index=i32(p), partition_error_code=c
                            )
                            for p, c in ps.items()
                        ),
                    )
                    for n, ps in errors.items()
                ),
            )
        )
    return r4.AddPartitionsToTxnResponse(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results_by_transaction=tuple(results)
    )


ACCESS = requires(
    request(on(RT.CLUSTER, Op.CLUSTER_ACTION), CLUSTER_DENIED, when="v4+, sent by brokers"),
    item(on(RT.TRANSACTIONAL_ID, Op.WRITE), TXN_ID_DENIED),
    item(on(RT.TOPIC, Op.WRITE), TOPIC_DENIED),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
