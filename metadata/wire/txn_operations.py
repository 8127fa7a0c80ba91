"""The transaction coordinator's operations (metadata.transactions.store), declared as every
metadata operation is (`metadata.wire.codec.operation`; `metadata.wire.operations` joins them
into the callers' roles)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Protocol

from annotated_types import MaxLen
from skiff.metadata.transactions.state import Outcome, Partition, TxnRecord
from skiff.metadata.types import (
    GroupOffset,
    OffsetCommitResult,
)
from skiff.metadata.wire.bounds import (
    Int32,
    Int64,
    Items,
    KafkaId,
    ManyItems,
    Name,
    NonNegInt32,
    TxnId,
)
from skiff.metadata.wire.codec import operation
from skiff.metadata.wire.roles import AGENT


class Transactions(Protocol):
    """The transaction coordinator's state (metadata.transactions.store); partitions are (topic
    id as text, partition). Refused transitions are answers (error codes), not errors."""

    @operation("/v1/txn/init-producer-id", AGENT)
    async def init_txn_producer_id(
        self, transactional_id: TxnId, timeout_ms: Int32, expected: tuple[Int64, Int32] | None = None
    ) -> Outcome:
        """InitProducerId with a transactional id; `expected`: KIP-360's (producer id, epoch)."""
        ...

    @operation("/v1/txn/add-partitions", AGENT)
    async def add_partitions_to_txn(
        self,
        transactional_id: TxnId,
        producer_id: Int64,
        epoch: Int32,
        partitions: ManyItems[Partition],
        max_partitions: NonNegInt32 | None = None,
    ) -> dict[Partition, int]:
        """One error code per partition."""
        ...

    @operation("/v1/txn/verify-partitions", AGENT)
    async def verify_txn_partitions(
        self, transactional_id: TxnId, producer_id: Int64, epoch: Int32, partitions: ManyItems[Partition]
    ) -> int:
        """AddPartitionsToTxn v4+ verify_only."""
        ...

    @operation("/v1/txn/add-offsets", AGENT)
    async def add_offsets_to_txn(
        self,
        transactional_id: TxnId,
        producer_id: Int64,
        epoch: Int32,
        group_id: KafkaId,
        max_partitions: NonNegInt32 | None = None,
    ) -> int: ...

    @operation("/v1/txn/offset-commit", AGENT)
    async def txn_offset_commit(
        self,
        transactional_id: TxnId,
        producer_id: Int64,
        epoch: Int32,
        group_id: KafkaId,
        offsets: ManyItems[GroupOffset],
        max_offsets: NonNegInt32 | None = None,
    ) -> list[OffsetCommitResult]:
        """TxnOffsetCommit: staged until the transaction completes; one answer per offset."""
        ...

    @operation("/v1/txn/stable-offsets", AGENT)
    async def fetch_stable_offsets(
        self, group_id: KafkaId, topics: Items[Name] | None
    ) -> tuple[list[GroupOffset], set[tuple[str, int]]]:
        """OffsetFetch require_stable (KIP-447), one read transaction: committed offsets,
        and the (topic, partition)s with offsets staged by unfinished transactions."""
        ...

    @operation("/v1/txn/end", AGENT)
    async def end_txn(
        self, transactional_id: TxnId, producer_id: Int64, epoch: Int32, commit: bool
    ) -> Outcome:
        """`write_markers`: the caller writes them; the markers file completes it."""
        ...

    @operation("/v1/txn/complete", AGENT)
    async def complete_txn(
        self, transactional_id: TxnId, producer_id: Int64, epoch: Int32
    ) -> TxnRecord | None:
        """PREPARE_* -> COMPLETE_* without markers (no partitions); None: not preparing."""
        ...

    @operation("/v1/txn/expire", AGENT)
    async def expire_txns(self) -> list[Outcome]:
        """Timed-out transactions, now PREPARE_ABORT (their markers to write)."""
        ...

    @operation("/v1/txn/preparing", AGENT)
    async def preparing_txns(self) -> list[TxnRecord]:
        """Transactions whose markers are still to write."""
        ...

    @operation("/v1/txn/describe", AGENT)
    async def describe_txns(self, transactional_ids: Items[TxnId]) -> dict[str, TxnRecord | None]: ...

    @operation("/v1/txn/list", AGENT)
    async def list_txns(
        self,
        states: Annotated[Sequence[Annotated[str, MaxLen(32)]], MaxLen(16)] = (),
        producer_ids: Items[Int64] = (),
        duration_filter_ms: Int64 = -1,
    ) -> list[TxnRecord]: ...
