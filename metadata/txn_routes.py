"""The transaction coordinator's metadata calls over HTTP: POST /v1/txn/* on their own
APIRouter (metadata.app includes it; the errors are the app's, see metadata.app).

One route per `MetadataClient` transaction method; bodies and answers are
`metadata.txn_serde`'s models. Answers carry Kafka error codes in the body (a refused
transition is an answer, not an HTTP error), so only malformed input is a 4xx.
"""

from __future__ import annotations

from fastapi import APIRouter
from skiff.metadata import serde as s
from skiff.metadata import txn_serde as ts
from skiff.metadata.auth import AGENT, allow
from skiff.metadata.service import MetadataService


def txn_router(svc: MetadataService) -> APIRouter:
    router = APIRouter(prefix="/v1/txn", tags=["transactions"], dependencies=[allow(AGENT)])

    @router.post("/init-producer-id", response_model=ts.OutcomeM)
    def init_producer_id(req: ts.InitTxnProducerIdRequest) -> ts.OutcomeM:
        """InitProducerId with a transactional id (KIP-360: the client's current id and epoch, or -1)."""
        expected = None if req.expected_producer_id < 0 else (req.expected_producer_id, req.expected_epoch)
        return ts.outcome_to_m(svc.init_txn_producer_id(req.transactional_id, req.timeout_ms, expected))

    @router.post("/add-partitions", response_model=list[ts.PartitionErrorM])
    def add_partitions(req: ts.AddPartitionsToTxnRequest) -> list[ts.PartitionErrorM]:
        errors = svc.add_partitions_to_txn(
            req.transactional_id,
            req.producer_id,
            req.producer_epoch,
            [(t, p) for t, p in req.partitions],
            req.max_partitions,
        )
        return [ts.PartitionErrorM(topic_id=t, partition=p, error=e) for (t, p), e in errors.items()]

    @router.post("/verify-partitions", response_model=ts.ErrorResponse)
    def verify_partitions(req: ts.AddPartitionsToTxnRequest) -> ts.ErrorResponse:
        error = svc.verify_txn_partitions(
            req.transactional_id, req.producer_id, req.producer_epoch, [(t, p) for t, p in req.partitions]
        )
        return ts.ErrorResponse(error=error)

    @router.post("/add-offsets", response_model=ts.ErrorResponse)
    def add_offsets(req: ts.AddOffsetsToTxnRequest) -> ts.ErrorResponse:
        error = svc.add_offsets_to_txn(
            req.transactional_id, req.producer_id, req.producer_epoch, req.group_id, req.max_partitions
        )
        return ts.ErrorResponse(error=error)

    @router.post("/offset-commit", response_model=list[s.OffsetCommitResultM])
    def offset_commit(req: ts.TxnOffsetCommitRequest) -> list[s.OffsetCommitResultM]:
        """TxnOffsetCommit: offsets staged until the transaction completes (metadata.txn_offsets)."""
        results = svc.txn_offset_commit(
            req.transactional_id,
            req.producer_id,
            req.producer_epoch,
            req.group_id,
            [s.t.GroupOffset(**o.__dict__) for o in req.offsets],
            req.max_offsets,
        )
        return [s.OffsetCommitResultM.model_construct(**r.__dict__) for r in results]

    @router.post("/stable-offsets", response_model=ts.StableOffsetsResponse)
    def stable_offsets(req: s.FetchOffsetsRequest) -> ts.StableOffsetsResponse:
        """OffsetFetch require_stable (KIP-447), one read transaction: a group's committed
        offsets and its partitions with offsets staged by unfinished transactions."""
        offsets, unstable = svc.fetch_stable_offsets(req.group_id, req.topics)
        return ts.StableOffsetsResponse(
            offsets=[s.GroupOffsetM.model_construct(**o.__dict__) for o in offsets],
            unstable=[ts.TopicPartitionM(topic=t, partition=p) for t, p in sorted(unstable)],
        )

    @router.post("/end", response_model=ts.OutcomeM)
    def end_txn(req: ts.EndTxnRequest) -> ts.OutcomeM:
        return ts.outcome_to_m(
            svc.end_txn(req.transactional_id, req.producer_id, req.producer_epoch, req.commit)
        )

    @router.post("/complete", response_model=ts.CompleteTxnResponse)
    def complete(req: ts.TxnProducerM) -> ts.CompleteTxnResponse:
        """PREPARE_* -> COMPLETE_* for a transaction with no partitions (no markers to write)."""
        record = svc.complete_txn(req.transactional_id, req.producer_id, req.producer_epoch)
        return ts.CompleteTxnResponse(record=None if record is None else ts.record_to_m(record))

    @router.post("/expire", response_model=list[ts.OutcomeM])
    def expire() -> list[ts.OutcomeM]:
        """Abort every transaction past its timeout; answers those whose markers must be written."""
        return [ts.outcome_to_m(o) for o in svc.expire_txns()]

    @router.post("/preparing", response_model=list[ts.TxnRecordM])
    def preparing() -> list[ts.TxnRecordM]:
        return [ts.record_to_m(r) for r in svc.preparing_txns()]

    @router.post("/describe", response_model=dict[str, ts.TxnRecordM | None])
    def describe(req: ts.DescribeTxnsRequest) -> dict[str, ts.TxnRecordM | None]:
        found = svc.describe_txns(req.transactional_ids)
        return {k: None if v is None else ts.record_to_m(v) for k, v in found.items()}

    @router.post("/list", response_model=list[ts.TxnRecordM])
    def list_txns(req: ts.ListTxnsRequest) -> list[ts.TxnRecordM]:
        return [
            ts.record_to_m(r) for r in svc.list_txns(req.states, req.producer_ids, req.duration_filter_ms)
        ]

    return router
