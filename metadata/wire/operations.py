"""The metadata operations: what agents, the compactor, Spark and operators may ask of
metadata, each declared once (name, parameters with their bounds, answer, HTTP path, the
token roles that may call it; `metadata.wire.codec` derives the wire layer from it).

The Protocols group the operations by concern; the callers' interfaces combine them by
role: `AgentClient`, `CompactorClient`, `ReaderClient` (Spark, `skiff inspect`),
`AdminClient` (the `skiff` operator commands); `MetadataClient` is all of them.
`MetadataService` implements every operation under the same name and parameters (a test
checks it), synchronously; the clients are `metadata.server.local_client` (in this process),
`metadata.wire.http_client` (over HTTP, async and sync), both chosen by
`metadata.wire.connect.open_metadata_client`.

Errors: `metadata.errors.MetadataError` (with a Kafka error code) for whole-request
failures, `metadata.errors.MetadataUnavailable` when the service cannot be reached (a
retriable condition the agent maps to a retriable Kafka error).

Adding an operation: declare it here (on the Protocol of its concern) and implement it on
`MetadataService`; the route, the clients and the fakes follow.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Protocol

from annotated_types import Interval, MaxLen
from skiff.metadata.compaction.types import CheckpointUpdate, CompactionCandidate, CompactionLease, MergeRules
from skiff.metadata.groups.lease_types import LeaseGrant, LeaseToken
from skiff.metadata.security.acl_types import AclBinding, AclBindingFilter
from skiff.metadata.security.quota_types import ClientQuotaEntry, QuotaAlteration, QuotaFilterComponent
from skiff.metadata.security.scram_types import ScramCredential, ScramCredentialInfo
from skiff.metadata.transactions.state import Outcome, Partition, TxnRecord
from skiff.metadata.types import (
    ActiveProducer,
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
    NewTopic,
    OffsetAnswer,
    OffsetCommitResult,
    OffsetQuery,
    OffsetsLogPage,
    OffsetsLogQuery,
    OutputChunk,
    PartitionFetchInfo,
    PartitionKey,
    PartitionState,
    PartitionWatermark,
    RetentionResult,
    StoredGroup,
    Topic,
    TopicCreation,
)
from skiff.metadata.wire.bounds import (
    Id,
    Int32,
    Int64,
    Items,
    KafkaId,
    ManyItems,
    Name,
    NonNegInt32,
    NonNegInt64,
    ShortName,
    Token,
    TxnId,
)
from skiff.metadata.wire.codec import Args, Operation, operation, operations_of
from skiff.metadata.wire.roles import ADMIN, AGENT, COMPACTOR, READ, READER
from skiff.metadata.wire.schema_operations import SchemaAdmin, SchemaBrowsing, SchemaLookups, SchemaWrites
from skiff.metadata.wire.usage_operations import AgentUsage, CompactorUsage, ReaderUsage

Configs = dict[Name, str]
GroupIds = Items[KafkaId] | None
TopicPartitions = ManyItems[tuple[Name, Int32]]
LeaseList = Items[tuple[KafkaId, Int32]]


def _writer(a: Args) -> list[str]:
    return [a["file"].writer]


def _agent(a: Args) -> list[str]:
    return [a["agent"].agent_id]


def _agent_id(a: Args) -> list[str]:
    return [a["agent_id"]]


def _lease_holder(a: Args) -> list[str]:
    lease = a.get("lease")
    return [] if lease is None else [lease.holder]


# ------------------------------------------------------------------------------ by concern


class TopicLookups(Protocol):
    @operation("/v1/topics", *READ, http_method="GET")
    async def list_topics(self) -> list[Topic]: ...

    @operation("/v1/topics/describe", *READ)
    async def describe_topics(self, names: Items[Name]) -> dict[str, Topic]:
        """The named topics that exist (missing names are absent)."""
        ...

    @operation("/v1/topics/by-id", *READ)
    async def topics_by_id(self, topic_ids: Items[uuid.UUID]) -> dict[uuid.UUID, Topic]: ...


class TopicChanges(Protocol):
    @operation("/v1/topics/create", AGENT)
    async def create_topic(self, name: Name, partition_count: Int32, configs: Configs) -> Topic: ...

    @operation("/v1/topics/create-batch", AGENT)
    async def create_topics(self, new: Items[NewTopic]) -> list[TopicCreation]:
        """Each topic as `create_topic` would create it (its errors per topic), in one
        transaction; at most the `create_batches` bounds per call (else INVALID_REQUEST)."""
        ...

    @operation("/v1/topics/delete", AGENT)
    async def delete_topic(self, name: Name) -> None: ...

    @operation("/v1/topics/alter-configs", AGENT)
    async def alter_topic_configs(
        self, name: Name, set_configs: Configs, delete_configs: Items[Name], replace: bool
    ) -> Topic: ...

    @operation("/v1/topics/add-partitions", AGENT)
    async def add_partitions(self, name: Name, new_partition_count: Int32) -> Topic: ...


class ReadPath(Protocol):
    @operation("/v1/find-chunks", *READ)
    async def find_chunks(self, queries: ManyItems[FetchQuery]) -> list[PartitionFetchInfo]: ...

    @operation("/v1/file-chunks", *READ)
    async def file_chunks(self, object_key: Name) -> FileChunks:
        """What metadata knows of one object (operators: `skiff inspect --metadata`)."""
        ...

    @operation("/v1/partition-states", *READ)
    async def partition_states(self, keys: ManyItems[PartitionKey]) -> list[PartitionState]: ...

    @operation("/v1/list-offsets", *READ)
    async def list_offsets(self, queries: ManyItems[OffsetQuery]) -> list[OffsetAnswer]: ...

    @operation("/v1/wait-for-commits", AGENT, READER, long_poll_ms="timeout_ms")
    async def wait_for_commits(
        self, known: ManyItems[PartitionWatermark], timeout_ms: NonNegInt32
    ) -> list[PartitionWatermark]:
        """Long poll (metadata.commits.feed): the partitions whose high watermark moved past
        the known value, or [] after timeout_ms."""
        ...


class ProducePath(Protocol):
    @operation("/v1/commit-file", AGENT, acting_as=_writer)
    async def commit_file(self, file: FileSpec, chunks: ManyItems[ChunkSpec]) -> list[ChunkResult]: ...

    @operation("/v1/producer-ids", AGENT)
    async def init_producer_id(self) -> tuple[int, int]:
        """A new idempotent producer: (producer id, epoch)."""
        ...


class Compaction(Protocol):
    @operation("/v1/replace-chunks", COMPACTOR)
    async def replace_chunks(
        self,
        input_chunk_ids: ManyItems[Int64],
        file: FileSpec,
        outputs: ManyItems[OutputChunk],
        checkpoints: ManyItems[CheckpointUpdate] = (),
        lease_token: Token | None = None,
    ) -> None:
        """Swap compacted chunks for their inputs (metadata.compaction.swap); ConflictError
        if the inputs changed meanwhile or the lease was lost."""
        ...

    @operation("/v1/compaction/candidates", COMPACTOR)
    async def compaction_candidates(
        self,
        topic: Name | None = None,
        rules: MergeRules | None = None,
        limit: Annotated[int, Interval(ge=0, le=100_000)] = 1000,
    ) -> list[CompactionCandidate]:
        """Most urgent first; partitions under a lease are left out."""
        ...

    @operation("/v1/compaction/claim", COMPACTOR)
    async def claim_compaction_job(
        self,
        partitions: Items[PartitionKey],
        holder: ShortName,
        lease_ms: NonNegInt64,
        input_chunk_ids: ManyItems[Int64] = (),
    ) -> CompactionLease | None:
        """A lease on all the partitions, or None (some are leased)."""
        ...

    @operation("/v1/compaction/renew", COMPACTOR)
    async def renew_compaction_lease(self, token: Token, lease_ms: NonNegInt64) -> CompactionLease:
        """ConflictError: the lease was lost."""
        ...

    @operation("/v1/compaction/release", COMPACTOR)
    async def release_compaction_lease(self, token: Token) -> None: ...


class Retention(Protocol):
    @operation("/v1/delete-records", AGENT)
    async def delete_records(self, queries: ManyItems[DeleteRecordsQuery]) -> list[DeleteRecordsAnswer]:
        """DeleteRecords: one answer per query, same order."""
        ...

    @operation("/v1/retention/enforce", COMPACTOR)
    async def enforce_retention(
        self, topic: Name, max_chunks_per_partition: NonNegInt32 = 1000
    ) -> list[RetentionResult]:
        """The partitions whose log start moved or that lost chunks."""
        ...

    @operation("/v1/groups/expire-offsets", COMPACTOR)
    async def expire_group_offsets(self, retention_ms: Int64) -> int:
        """Offsets of empty groups older than retention_ms deleted; answers how many."""
        ...


class GarbageCollection(Protocol):
    @operation("/v1/gc/claim", COMPACTOR)
    async def claim_deletable_files(
        self, token: Token, max_files: NonNegInt32, grace_ms: NonNegInt64, claim_ms: NonNegInt64
    ) -> list[ClaimedFile]: ...

    @operation("/v1/gc/forget", COMPACTOR)
    async def forget_files(self, token: Token, file_ids: ManyItems[Int64]) -> int: ...

    @operation("/v1/gc/unknown-keys", COMPACTOR)
    async def unknown_object_keys(self, object_keys: ManyItems[Name]) -> list[str]: ...

    @operation("/v1/gc/record-success", COMPACTOR)
    async def record_success(self, task: ShortName) -> None:
        """A maintenance task just finished."""
        ...


class MaintenanceStatus(Protocol):
    @operation("/v1/gc/last-successes", COMPACTOR, READER, http_method="GET")
    async def last_successes(self) -> dict[str, int]:
        """Maintenance task -> ms since the epoch of its last success."""
        ...


class GroupOffsets(Protocol):
    @operation("/v1/groups/commit-offsets", AGENT, acting_as=_lease_holder)
    async def commit_offsets(
        self, group_id: KafkaId, offsets: ManyItems[GroupOffset], lease: LeaseToken | None = None
    ) -> list[OffsetCommitResult]:
        """One answer per offset, same order; the valid ones are stored. With `lease`, every
        offset is refused with NOT_COORDINATOR unless it is current."""
        ...

    @operation("/v1/groups/delete-offsets", AGENT)
    async def delete_group_offsets(self, group_id: KafkaId) -> None:
        """Forget every committed offset of a group (DeleteGroups)."""
        ...

    @operation("/v1/groups/delete-partition-offsets", AGENT)
    async def delete_partition_offsets(self, group_id: KafkaId, partitions: TopicPartitions) -> None:
        """One transaction (OffsetDelete); (topic, partition)s without a commit ignored."""
        ...

    @operation("/v1/groups/touch", AGENT)
    async def touch_groups(self, group_ids: Items[KafkaId]) -> None:
        """These groups have members now (their offsets do not expire)."""
        ...


class GroupOffsetReads(Protocol):
    @operation("/v1/groups/fetch-offsets", AGENT, READER)
    async def fetch_offsets(self, group_id: KafkaId, topics: Items[Name] | None) -> list[GroupOffset]: ...

    @operation("/v1/groups/with-offsets", AGENT, READER)
    async def groups_with_offsets(self, group_ids: GroupIds) -> list[str]:
        """The group ids (of `group_ids`, or all when None) with committed offsets."""
        ...


class GroupLeases(Protocol):
    @operation("/v1/groups/lease/acquire", AGENT, acting_as=_agent_id)
    async def acquire_group_lease(self, group_id: KafkaId, agent_id: Id, ttl_ms: NonNegInt64) -> LeaseGrant:
        """Take (or re-take, with a new epoch) the lease on coordinating a group."""
        ...

    @operation("/v1/groups/lease/renew", AGENT, acting_as=_agent_id)
    async def renew_group_leases(self, agent_id: Id, leases: LeaseList, ttl_ms: NonNegInt64) -> list[str]:
        """Renew an agent's group leases in one transaction; answers the groups renewed."""
        ...

    @operation("/v1/groups/lease/release", AGENT, acting_as=_agent_id)
    async def release_group_leases(self, agent_id: Id, leases: LeaseList) -> None: ...

    @operation("/v1/groups/lease/holders", AGENT)
    async def group_lease_holders(self, group_ids: Items[KafkaId]) -> dict[str, str]:
        """The agent holding each group's unexpired lease (groups without one are absent)."""
        ...

    @operation("/v1/groups/lease/confirm-generation", AGENT, acting_as=_lease_holder)
    async def confirm_group_generation(
        self, group_id: KafkaId, lease: LeaseToken, ttl_ms: NonNegInt64, group_state: str
    ) -> None:
        """A new generation: renew the lease and store the group's state, or NOT_COORDINATOR."""
        ...


class GroupOperators(Protocol):
    """`skiff groups` (metadata.groups.admin); changes are refused with NON_EMPTY_GROUP while
    the group has active members."""

    @operation("/v1/admin/groups/stored", ADMIN)
    async def stored_groups(self, group_ids: GroupIds) -> list[StoredGroup]:
        """Groups (of `group_ids`, or all) with offsets or a stored generation."""
        ...

    @operation("/v1/admin/groups/reset-offsets", ADMIN)
    async def reset_group_offsets(
        self, group_id: KafkaId, offsets: ManyItems[GroupOffset]
    ) -> list[OffsetCommitResult]: ...

    @operation("/v1/admin/groups/delete", ADMIN)
    async def delete_group(self, group_id: KafkaId) -> None:
        """Forget a group: offsets and stored state (GROUP_ID_NOT_FOUND if it has neither)."""
        ...


class Agents(Protocol):
    @operation("/v1/agents/heartbeat", AGENT, acting_as=_agent)
    async def heartbeat_agent(self, agent: AgentInfo) -> None:
        """Registers on the first call."""
        ...

    @operation("/v1/agents/deregister", AGENT, acting_as=_agent)
    async def deregister_agent(self, agent: AgentInfo) -> None:
        """On clean shutdown."""
        ...

    @operation("/v1/agents/bucket", AGENT)
    async def claim_bucket(self, bucket_url: Name) -> str:
        """The bucket this agent writes to; answers the cluster's (learned from the first
        agent if not configured: metadata.membership). INVALID_CONFIG if it is another."""
        ...


class PartitionInfo(Protocol):
    """What Kafka's admin APIs report of partitions beyond their offsets (metadata.log_info)."""

    @operation("/v1/partitions/sizes", AGENT)
    async def partition_sizes(self, keys: ManyItems[PartitionKey]) -> list[int]:
        """Bytes of each partition's chunks in the bucket (DescribeLogDirs); 0 when none."""
        ...

    @operation("/v1/partitions/producers", AGENT)
    async def describe_producers(self, keys: Items[PartitionKey]) -> list[ActiveProducer]:
        """The producers of the partitions (DescribeProducers), at most 10,000."""
        ...

    @operation("/v1/consumer-offsets/read", AGENT)
    async def read_offsets_log(self, queries: Items[OffsetsLogQuery]) -> list[OffsetsLogPage]:
        """Partitions of `__consumer_offsets`: the committed offsets in log order
        (metadata.groups.offsets_log), their ends, offsets for timestamps."""
        ...


class Cluster(Protocol):
    @operation("/v1/agents", *READ, http_method="GET")
    async def live_agents(self) -> list[AgentInfo]: ...

    @operation("/v1/cluster", *READ, http_method="GET")
    async def bucket_url(self) -> str | None:
        """Where the agents write (None: neither configured nor learned from an agent)."""
        ...


class ScramUsers(Protocol):
    """Credentials are salted, never passwords (metadata.security.scram_users). Agents read them to
    authenticate Kafka clients and change them for AlterUserScramCredentials (which the
    agent's ACLs guard: ALTER on CLUSTER)."""

    @operation("/v1/scram-users/upsert", AGENT)
    async def upsert_scram_credential(self, cred: ScramCredential) -> None: ...

    @operation("/v1/scram-users/delete", AGENT)
    async def delete_scram_credential(self, user: ShortName, mechanism: ShortName) -> None:
        """RESOURCE_NOT_FOUND if there is no such credential."""
        ...

    @operation("/v1/scram-users/describe", AGENT)
    async def describe_scram_users(self, users: Items[ShortName] | None) -> list[ScramCredentialInfo]:
        """Users' mechanisms and iteration counts (never salts or keys); None: all."""
        ...

    @operation("/v1/scram-users/credentials", AGENT)
    async def scram_credentials(self, user: ShortName) -> list[ScramCredential]:
        """One user's stored credentials, [] for an unknown user."""
        ...


class Acls(Protocol):
    """Kafka ACL bindings (metadata.security.acls); every change increments the version."""

    @operation("/v1/acls/version", AGENT, http_method="GET")
    async def acl_version(self) -> int:
        """Cheap: what agents poll."""
        ...

    @operation("/v1/acls", AGENT, http_method="GET")
    async def list_acls(self) -> tuple[int, list[AclBinding]]:
        """(version, every binding)."""
        ...

    @operation("/v1/acls/describe", AGENT)
    async def describe_acls(self, acl_filter: AclBindingFilter) -> tuple[int, list[AclBinding]]: ...

    @operation("/v1/acls/create", AGENT)
    async def create_acls(self, bindings: Items[AclBinding]) -> int:
        """The version after (bindings already present are kept)."""
        ...

    @operation("/v1/acls/delete", AGENT)
    async def delete_acls(self, filters: Items[AclBindingFilter]) -> tuple[int, list[list[AclBinding]]]:
        """(version after, per filter the bindings it matched and deleted)."""
        ...


class ClientQuotas(Protocol):
    """Kafka client quotas (metadata.security.quotas); every change increments the version."""

    @operation("/v1/client-quotas/version", AGENT, http_method="GET")
    async def client_quota_version(self) -> int:
        """Cheap: what agents poll."""
        ...

    @operation("/v1/client-quotas", AGENT, http_method="GET")
    async def list_client_quotas(self) -> tuple[int, list[ClientQuotaEntry]]:
        """(version, every entity with its quotas)."""
        ...

    @operation("/v1/client-quotas/describe", AGENT)
    async def describe_client_quotas(
        self, components: Annotated[Sequence[QuotaFilterComponent], MaxLen(8)], strict: bool
    ) -> list[ClientQuotaEntry]:
        """Kafka's DescribeClientQuotas filter; INVALID_REQUEST / UNSUPPORTED_VERSION as Kafka's."""
        ...

    @operation("/v1/client-quotas/alter", AGENT)
    async def alter_client_quotas(
        self, alterations: Items[QuotaAlteration], validate_only: bool
    ) -> tuple[int, list[str | None]]:
        """(version after, per alteration Kafka's INVALID_REQUEST message or None)."""
        ...


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


class Closable(Protocol):
    async def close(self) -> None: ...


# ------------------------------------------------------------------------------ by caller


# The concern Protocols are listed in this one order in every role (a consistent MRO).


class ReaderClient(
    TopicLookups,
    ReadPath,
    MaintenanceStatus,
    GroupOffsetReads,
    Cluster,
    SchemaLookups,
    ReaderUsage,
    Closable,
    Protocol,
):
    """Spark, `skiff inspect`, dashboards: reads only."""


class AgentClient(
    TopicLookups,
    TopicChanges,
    ReadPath,
    ProducePath,
    Retention,
    GroupOffsets,
    GroupOffsetReads,
    GroupLeases,
    Agents,
    PartitionInfo,
    Cluster,
    ScramUsers,
    Acls,
    ClientQuotas,
    Transactions,
    SchemaLookups,
    AgentUsage,
    CompactorUsage,
    Closable,
    Protocol,
):
    """What an agent calls."""


class CompactorClient(
    TopicLookups,
    ReadPath,
    Compaction,
    Retention,
    GarbageCollection,
    MaintenanceStatus,
    Cluster,
    CompactorUsage,
    Closable,
    Protocol,
):
    """What the compactor and the maintenance loop call."""


class AdminClient(
    TopicLookups,
    GroupOffsetReads,
    GroupOperators,
    Cluster,
    ScramUsers,
    Acls,
    SchemaLookups,
    SchemaBrowsing,
    SchemaWrites,
    SchemaAdmin,
    Closable,
    Protocol,
):
    """What the `skiff` operator commands call beyond Kafka's own APIs."""


class MetadataClient(
    TopicLookups,
    TopicChanges,
    ReadPath,
    ProducePath,
    Compaction,
    Retention,
    GarbageCollection,
    MaintenanceStatus,
    GroupOffsets,
    GroupOffsetReads,
    GroupLeases,
    GroupOperators,
    Agents,
    PartitionInfo,
    Cluster,
    ScramUsers,
    Acls,
    ClientQuotas,
    Transactions,
    SchemaLookups,
    SchemaBrowsing,
    SchemaWrites,
    SchemaAdmin,
    AgentUsage,
    CompactorUsage,
    ReaderUsage,
    Closable,
    Protocol,
):
    """Every operation (the playground and tests hold one client for all roles); it
    satisfies each role's Protocol above."""


OPERATIONS = operations_of(MetadataClient)


class OperationForwarder:
    """The one rule every client and fake follows: an attribute named like a declared
    operation is `self._forward(op)` (a callable of the declared signature), made once per
    instance and kept; any other unknown attribute is an AttributeError."""

    def _forward(self, op: Operation) -> Callable[..., Any]:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:  # a forwarder of the declared signature
        op = OPERATIONS.get(name)
        if op is None:
            raise AttributeError(f"{type(self).__name__} has no operation {name!r}")
        forward = self._forward(op)
        forward.__name__ = forward.__qualname__ = name
        self.__dict__[name] = forward  # found directly next time
        return forward
