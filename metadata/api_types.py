"""The metadata client interface: what agents, the compactor and Spark may ask of metadata.

Two implementations: `metadata.local_client.LocalMetadataClient` wraps a
`MetadataService` in this process (the playground; blocking SQL runs in a worker
thread) and `metadata.http_client.HttpMetadataClient` talks to `skiff metadata` over
HTTP/JSON without importing the database side (`metadata.client.open_metadata_client`
picks one from a URL). Both raise
`metadata.errors.MetadataError` (with a Kafka error code) for whole-request failures
and `metadata.errors.MetadataUnavailable` when the service cannot be reached (a
retriable condition the agent maps to a retriable Kafka error).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from skiff.metadata.acl_types import AclBinding, AclBindingFilter
from skiff.metadata.compaction_types import CheckpointUpdate, CompactionCandidate, CompactionLease, MergeRules
from skiff.metadata.group_lease_types import LeaseGrant, LeaseToken
from skiff.metadata.scram_types import ScramCredential, ScramCredentialInfo
from skiff.metadata.txn_state import Outcome, Partition, TxnRecord
from skiff.metadata.types import (
    AgentInfo,
    ChunkResult,
    ChunkSpec,
    ClaimedFile,
    DeleteRecordsAnswer,
    DeleteRecordsQuery,
    FetchQuery,
    FileChunks,
    FileSpec,
    GroupOffset,
    OffsetAnswer,
    OffsetCommitResult,
    OffsetQuery,
    OutputChunk,
    PartitionFetchInfo,
    PartitionKey,
    PartitionState,
    PartitionWatermark,
    RetentionResult,
    Topic,
)


@dataclass(frozen=True)
class StoredGroup:
    """A consumer group as metadata holds it (`metadata.group_admin`): `group_state` is the
    JSON its coordinators last confirmed (format: agent.group_persistence), None if only
    offsets are stored; `coordinator` the agent whose lease has not lapsed, if any;
    `active` whether that generation has members under a live lease."""

    group_id: str
    coordinator: str | None
    active: bool
    group_state: str | None


# One `create_topics` call (one HTTP request, one database transaction) holds at most this
# many topics, partitions (one row each) and bytes of names and configs; `create_batches`
# cuts a larger request to fit (a single topic over the partition bound goes alone).
MAX_TOPICS_PER_CREATE_BATCH = 500
MAX_PARTITIONS_PER_CREATE_BATCH = 100_000
MAX_CREATE_BATCH_BYTES = 1 << 20


@dataclass(frozen=True)
class NewTopic:
    """A topic to create: what `create_topic` takes."""

    name: str
    partition_count: int
    configs: dict[str, str]


@dataclass(frozen=True)
class TopicCreation:
    """One topic's outcome in `create_topics`: the topic, or the Kafka error `create_topic`
    would have raised for it (TOPIC_ALREADY_EXISTS, INVALID_CONFIG, ...)."""

    name: str
    topic: Topic | None
    error_code: int = 0
    message: str = ""


def _create_bytes(t: NewTopic) -> int:
    return len(t.name) + sum(len(k) + len(v) for k, v in t.configs.items()) + 16


def create_batches(new: Sequence[NewTopic]) -> list[list[NewTopic]]:
    """`new` cut, in order, into batches within the `create_topics` bounds."""
    batches: list[list[NewTopic]] = []
    batch: list[NewTopic] = []
    partitions = size = 0
    for t in new:
        n, b = max(t.partition_count, 0), _create_bytes(t)
        if batch and (
            len(batch) >= MAX_TOPICS_PER_CREATE_BATCH
            or partitions + n > MAX_PARTITIONS_PER_CREATE_BATCH
            or size + b > MAX_CREATE_BATCH_BYTES
        ):
            batches.append(batch)
            batch, partitions, size = [], 0, 0
        batch.append(t)
        partitions += n
        size += b
    if batch:
        batches.append(batch)
    return batches


class MetadataClient(Protocol):
    # topics
    async def create_topic(self, name: str, partition_count: int, configs: dict[str, str]) -> Topic: ...
    # Each topic as `create_topic` would create it (its errors per topic), in one transaction;
    # at most the `create_batches` bounds per call (else INVALID_REQUEST for the call).
    async def create_topics(self, new: Sequence[NewTopic]) -> list[TopicCreation]: ...
    async def delete_topic(self, name: str) -> None: ...
    async def list_topics(self) -> list[Topic]: ...
    async def describe_topics(self, names: Sequence[str]) -> dict[str, Topic]: ...  # missing names absent
    async def topics_by_id(self, topic_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Topic]: ...
    async def alter_topic_configs(
        self, name: str, set_configs: dict[str, str], delete_configs: Sequence[str], replace: bool
    ) -> Topic: ...
    async def add_partitions(self, name: str, new_partition_count: int) -> Topic: ...

    # produce / fetch
    async def commit_file(self, file: FileSpec, chunks: Sequence[ChunkSpec]) -> list[ChunkResult]: ...
    async def find_chunks(self, queries: Sequence[FetchQuery]) -> list[PartitionFetchInfo]: ...
    async def file_chunks(self, object_key: str) -> FileChunks: ...  # operators: `skiff inspect --metadata`
    async def partition_states(self, keys: Sequence[PartitionKey]) -> list[PartitionState]: ...
    async def wait_for_commits(
        self, known: Sequence[PartitionWatermark], timeout_ms: int
    ) -> list[PartitionWatermark]: ...  # long poll: the partitions whose watermark moved, or [] at timeout
    async def list_offsets(self, queries: Sequence[OffsetQuery]) -> list[OffsetAnswer]: ...
    async def init_producer_id(self) -> tuple[int, int]: ...  # (producer_id, producer_epoch)

    # compaction
    async def replace_chunks(  # checkpoints/lease_token: see metadata.compaction_leases
        self,
        input_chunk_ids: Sequence[int],
        file: FileSpec,
        outputs: Sequence[OutputChunk],
        checkpoints: Sequence[CheckpointUpdate] = (),
        lease_token: str | None = None,
    ) -> None: ...
    async def compaction_candidates(  # most urgent first; leased partitions left out
        self, topic: str | None = None, rules: MergeRules | None = None, limit: int = 1000
    ) -> list[CompactionCandidate]: ...
    async def claim_compaction_job(  # all partitions or none (None)
        self,
        partitions: Sequence[PartitionKey],
        holder: str,
        lease_ms: int,
        input_chunk_ids: Sequence[int] = (),
    ) -> CompactionLease | None: ...
    async def renew_compaction_lease(
        self, token: str, lease_ms: int
    ) -> CompactionLease: ...  # ConflictError: lost
    async def release_compaction_lease(self, token: str) -> None: ...

    # retention, DeleteRecords, offset expiry (metadata.retention)
    async def delete_records(  # one answer per query, same order
        self, queries: Sequence[DeleteRecordsQuery]
    ) -> list[DeleteRecordsAnswer]: ...
    async def enforce_retention(  # the partitions whose log start moved or lost chunks
        self, topic: str, max_chunks_per_partition: int = 1000
    ) -> list[RetentionResult]: ...
    async def touch_groups(self, group_ids: Sequence[str]) -> None: ...  # these groups have members now
    async def expire_group_offsets(self, retention_ms: int) -> int: ...  # offsets deleted

    # garbage collection (metadata.gc)
    async def claim_deletable_files(
        self, token: str, max_files: int, grace_ms: int, claim_ms: int
    ) -> list[ClaimedFile]: ...
    async def forget_files(self, token: str, file_ids: Sequence[int]) -> int: ...
    async def unknown_object_keys(self, object_keys: Sequence[str]) -> list[str]: ...
    async def record_success(self, task: str) -> None: ...  # a maintenance task just finished
    async def last_successes(self) -> dict[str, int]: ...  # task -> ms since the epoch

    # consumer groups
    async def commit_offsets(  # one answer per offset, same order; the valid ones are stored.
        # With `lease`: every offset is refused with NOT_COORDINATOR unless it is current.
        self,
        group_id: str,
        offsets: Sequence[GroupOffset],
        lease: LeaseToken | None = None,
    ) -> list[OffsetCommitResult]: ...
    async def fetch_offsets(self, group_id: str, topics: Sequence[str] | None) -> list[GroupOffset]: ...
    async def delete_group_offsets(self, group_id: str) -> None: ...
    async def delete_partition_offsets(  # one transaction; (topic, partition)s without a commit ignored
        self, group_id: str, partitions: Sequence[tuple[str, int]]
    ) -> None: ...
    async def groups_with_offsets(self, group_ids: Sequence[str] | None) -> list[str]: ...  # None: all

    # operators (`skiff groups`: metadata.group_admin); NON_EMPTY_GROUP while members are active
    async def stored_groups(self, group_ids: Sequence[str] | None) -> list[StoredGroup]: ...  # None: all
    async def reset_group_offsets(
        self, group_id: str, offsets: Sequence[GroupOffset]
    ) -> list[OffsetCommitResult]: ...
    async def delete_group(self, group_id: str) -> None: ...

    # agents
    async def heartbeat_agent(self, agent: AgentInfo) -> None: ...  # registers on first call
    async def deregister_agent(self, agent: AgentInfo) -> None: ...  # on clean shutdown
    async def live_agents(self) -> list[AgentInfo]: ...

    # SCRAM users (metadata.scram_users): credentials are salted, never passwords
    async def upsert_scram_credential(self, cred: ScramCredential) -> None: ...
    async def delete_scram_credential(self, user: str, mechanism: str) -> None: ...  # RESOURCE_NOT_FOUND
    async def describe_scram_users(self, users: Sequence[str] | None) -> list[ScramCredentialInfo]: ...
    async def scram_credentials(self, user: str) -> list[ScramCredential]: ...  # [] for an unknown user

    # cluster settings
    async def bucket_url(self) -> str | None: ...  # where the agents write; None: not configured

    # group coordinator leases (metadata.group_leases)
    async def acquire_group_lease(self, group_id: str, agent_id: str, ttl_ms: int) -> LeaseGrant: ...
    async def renew_group_leases(  # the groups renewed
        self, agent_id: str, leases: Sequence[tuple[str, int]], ttl_ms: int
    ) -> list[str]: ...
    async def release_group_leases(self, agent_id: str, leases: Sequence[tuple[str, int]]) -> None: ...
    async def confirm_group_generation(
        self, group_id: str, lease: LeaseToken, ttl_ms: int, group_state: str
    ) -> None: ...

    # Kafka ACLs (metadata.acls): every change increments the version
    async def acl_version(self) -> int: ...  # cheap: what agents poll
    async def list_acls(self) -> tuple[int, list[AclBinding]]: ...  # (version, every binding)
    async def describe_acls(self, acl_filter: AclBindingFilter) -> tuple[int, list[AclBinding]]: ...
    async def create_acls(self, bindings: Sequence[AclBinding]) -> int: ...  # the version after
    async def delete_acls(  # (version after, per filter the bindings it matched and deleted)
        self, filters: Sequence[AclBindingFilter]
    ) -> tuple[int, list[list[AclBinding]]]: ...

    # transactions (metadata.transactions; partitions are (topic id as text, partition))
    async def init_txn_producer_id(  # expected: KIP-360 (producer id, epoch) or None
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None = None
    ) -> Outcome: ...
    async def add_partitions_to_txn(  # one error code per partition
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Sequence[Partition],
        max_partitions: int | None = None,
    ) -> dict[Partition, int]: ...
    async def verify_txn_partitions(  # AddPartitionsToTxn v4+ verify_only
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Sequence[Partition]
    ) -> int: ...
    async def add_offsets_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        max_partitions: int | None = None,
    ) -> int: ...
    async def txn_offset_commit(  # staged until the transaction completes; one answer per offset
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        offsets: Sequence[GroupOffset],
        max_offsets: int | None = None,
    ) -> list[OffsetCommitResult]: ...
    async def fetch_stable_offsets(  # committed offsets, and (topic, partition)s staged by open transactions
        self, group_id: str, topics: Sequence[str] | None
    ) -> tuple[list[GroupOffset], set[tuple[str, int]]]: ...
    async def end_txn(  # write_markers: the caller writes them, the markers file completes it
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> Outcome: ...
    async def complete_txn(  # PREPARE_* -> COMPLETE_* without markers (no partitions); None: not preparing
        self, transactional_id: str, producer_id: int, epoch: int
    ) -> TxnRecord | None: ...
    async def expire_txns(self) -> list[Outcome]: ...  # timed-out transactions now PREPARE_ABORT
    async def preparing_txns(self) -> list[TxnRecord]: ...  # markers still to write
    async def describe_txns(self, transactional_ids: Sequence[str]) -> dict[str, TxnRecord | None]: ...
    async def list_txns(
        self, states: Sequence[str] = (), producer_ids: Sequence[int] = (), duration_filter_ms: int = -1
    ) -> list[TxnRecord]: ...

    async def close(self) -> None: ...
