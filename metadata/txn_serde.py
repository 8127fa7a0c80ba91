"""The HTTP/JSON wire format of the transaction coordinator's metadata calls (see
metadata.serde for the rules): pydantic models mirroring `metadata.txn_state.TxnRecord`
and `Outcome`, the request bodies of /v1/txn/*, and conversions.

Partitions travel as [topic id as text, partition], as `metadata.transactions` stores them.
Lists are bounded so that a hostile body is a 422, never an unbounded query.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from skiff.metadata import txn_state as ts
from skiff.metadata.serde import _M, GroupOffsetM, Int32, Int64, Name, NonNegInt32

TxnId = Annotated[str, Field(min_length=1, max_length=32767)]
StateName = Annotated[str, Field(max_length=32)]
MAX_PARTITIONS = 100_000
MAX_IDS = 10_000

PartitionW = tuple[Annotated[str, Field(max_length=64)], Int32]


class TxnRecordM(_M):
    transactional_id: TxnId
    producer_id: Int64
    producer_epoch: Int32
    timeout_ms: Int64
    state: StateName
    partitions: list[PartitionW] = []
    groups: list[Name] = []
    start_ms: Int64 = -1
    last_update_ms: Int64 = -1
    last_producer_id: Int64 = -1
    last_epoch: Int32 = -1


class OutcomeM(_M):
    error: Int32
    record: TxnRecordM | None = None
    write_markers: bool = False
    producer_id: Int64 = -1
    producer_epoch: Int32 = -1
    groups: list[Name] = []


class InitTxnProducerIdRequest(_M):
    transactional_id: TxnId
    timeout_ms: Int64
    expected_producer_id: Int64 = -1
    expected_epoch: Int32 = -1


class TxnProducerM(_M):
    transactional_id: TxnId
    producer_id: Int64
    producer_epoch: Int32


class AddPartitionsToTxnRequest(TxnProducerM):
    partitions: Annotated[list[PartitionW], Field(max_length=MAX_PARTITIONS)]
    verify_only: bool = False
    max_partitions: NonNegInt32 | None = None  # the transaction's bound (POLICY_VIOLATION beyond)


class PartitionErrorM(_M):
    topic_id: Annotated[str, Field(max_length=64)]
    partition: Int32
    error: Int32


class AddOffsetsToTxnRequest(TxnProducerM):
    group_id: Name
    max_partitions: NonNegInt32 | None = None  # the transaction's bound (POLICY_VIOLATION beyond)


class EndTxnRequest(TxnProducerM):
    commit: bool


class TxnOffsetCommitRequest(TxnProducerM):
    group_id: Name
    offsets: Annotated[list[GroupOffsetM], Field(max_length=MAX_PARTITIONS)]
    max_offsets: NonNegInt32 | None = None  # the transaction's bound (POLICY_VIOLATION beyond)


class TopicPartitionM(_M):
    topic: Name
    partition: Int32


class StableOffsetsResponse(_M):
    offsets: list[GroupOffsetM]  # committed
    unstable: list[TopicPartitionM]  # staged by unfinished transactions


class ErrorResponse(_M):
    error: Int32


class CompleteTxnResponse(_M):
    record: TxnRecordM | None = None


class DescribeTxnsRequest(_M):
    transactional_ids: Annotated[list[TxnId], Field(max_length=MAX_IDS)]


class ListTxnsRequest(_M):
    states: Annotated[list[StateName], Field(max_length=16)] = []
    producer_ids: Annotated[list[Int64], Field(max_length=MAX_IDS)] = []
    duration_filter_ms: Int64 = -1


def record_to_m(r: ts.TxnRecord) -> TxnRecordM:
    return TxnRecordM.model_construct(
        transactional_id=r.transactional_id,
        producer_id=r.producer_id,
        producer_epoch=r.producer_epoch,
        timeout_ms=r.timeout_ms,
        state=r.state.value,
        partitions=sorted((t, p) for t, p in r.partitions),
        groups=sorted(r.groups),
        start_ms=r.start_ms,
        last_update_ms=r.last_update_ms,
        last_producer_id=r.last_producer_id,
        last_epoch=r.last_epoch,
    )


def record_from_m(m: TxnRecordM) -> ts.TxnRecord:
    return ts.TxnRecord(
        transactional_id=m.transactional_id,
        producer_id=m.producer_id,
        producer_epoch=m.producer_epoch,
        timeout_ms=m.timeout_ms,
        state=ts.TxnState(m.state),
        partitions=frozenset((str(t), int(p)) for t, p in m.partitions),
        groups=frozenset(m.groups),
        start_ms=m.start_ms,
        last_update_ms=m.last_update_ms,
        last_producer_id=m.last_producer_id,
        last_epoch=m.last_epoch,
    )


def outcome_to_m(o: ts.Outcome) -> OutcomeM:
    return OutcomeM.model_construct(
        error=o.error,
        record=None if o.record is None else record_to_m(o.record),
        write_markers=o.write_markers,
        producer_id=o.producer_id,
        producer_epoch=o.producer_epoch,
        groups=sorted(o.groups),
    )


def outcome_from_m(m: OutcomeM) -> ts.Outcome:
    return ts.Outcome(
        error=m.error,
        record=None if m.record is None else record_from_m(m.record),
        write_markers=m.write_markers,
        producer_id=m.producer_id,
        producer_epoch=m.producer_epoch,
        groups=frozenset(m.groups),
    )
