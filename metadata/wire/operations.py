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
from collections.abc import Callable
from typing import Annotated, Any, Protocol

from annotated_types import Interval
from skiff.metadata.compaction.types import CheckpointUpdate, CompactionCandidate, CompactionLease, MergeRules
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
    NewTopic,
    OffsetAnswer,
    OffsetQuery,
    OffsetsLogPage,
    OffsetsLogQuery,
    OutputChunk,
    PartitionFetchInfo,
    PartitionKey,
    PartitionState,
    PartitionWatermark,
    RetentionResult,
    Topic,
    TopicCreation,
)
from skiff.metadata.wire.bounds import (
    Int32,
    Int64,
    Items,
    ManyItems,
    Name,
    NonNegInt32,
    NonNegInt64,
    ShortName,
    Token,
)
from skiff.metadata.wire.codec import Args, Operation, operation, operations_of
from skiff.metadata.wire.group_operations import GroupLeases, GroupOffsetReads, GroupOffsets, GroupOperators
from skiff.metadata.wire.roles import AGENT, COMPACTOR, READ, READER
from skiff.metadata.wire.schema_operations import SchemaAdmin, SchemaBrowsing, SchemaLookups, SchemaWrites
from skiff.metadata.wire.security_operations import Acls, ClientQuotas, ScramUsers
from skiff.metadata.wire.txn_operations import Transactions
from skiff.metadata.wire.usage_operations import AgentUsage, CompactorUsage, ReaderUsage

Configs = dict[Name, str]


def _writer(a: Args) -> list[str]:
    return [a["file"].writer]


def _agent(a: Args) -> list[str]:
    return [a["agent"].agent_id]


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
