"""The HTTP/JSON wire format: pydantic models mirroring `metadata.types`, and conversions.

Field names are those of the dataclasses. UUIDs travel as strings, bitmaps
(`present_offsets`) as base64. Integers are range-checked (int32/int64) so that a
malformed request is a 422, never a database overflow. Used by both `metadata.app`
(server) and `metadata.http_client.HttpMetadataClient`.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import Base64Bytes, BaseModel, ConfigDict, Field
from skiff.metadata import types as t
from skiff.metadata.api_types import TopicCreation
from skiff.metadata.compaction_types import CheckpointUpdate

Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
NonNegInt32 = Annotated[int, Field(ge=0, le=2**31 - 1)]
NonNegInt64 = Annotated[int, Field(ge=0, le=2**63 - 1)]
Name = Annotated[str, Field(max_length=1024)]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------- values


class TopicM(_M):
    name: Name
    topic_id: uuid.UUID
    partition_count: Int32
    configs: dict[str, str] = {}


class FileSpecM(_M):
    object_key: Name
    size_bytes: NonNegInt64
    level: NonNegInt32 = 0
    writer: Annotated[str, Field(max_length=255)] = ""
    # (transactional id, producer id, epoch) of the transactions whose markers the file holds
    completes: Annotated[
        list[tuple[Annotated[str, Field(max_length=32767)], Int64, Int32]], Field(max_length=10_000)
    ] = []


class BatchSpecM(_M):
    byte_offset: NonNegInt64
    byte_length: NonNegInt64
    offset_count: NonNegInt64
    record_count: NonNegInt64
    max_timestamp: Int64
    producer_id: Int64 = -1
    producer_epoch: Int32 = -1
    base_sequence: Int32 = -1
    timestamp_type: Int32 = 0
    is_transactional: bool = False
    control_type: Annotated[int, Field(ge=-1, le=1)] = -1
    transactional_id: Annotated[str, Field(max_length=32767)] | None = None


class ChunkSpecM(_M):
    topic_id: uuid.UUID
    partition: Int32
    batches: list[BatchSpecM]


class BatchResultM(_M):
    error_code: Int32
    base_offset: Int64 = -1
    log_append_time_ms: Int64 = -1
    log_start_offset: Int64 = -1
    error_message: str | None = None
    duplicate: bool = False


class ChunkLocationM(_M):
    chunk_id: Int64
    object_key: str
    byte_position: Int64
    byte_length: Int64
    base_offset: Int64
    last_offset: Int64
    record_count: Int64
    max_timestamp: Int64
    offsets_absolute: bool = False
    present_offsets: Base64Bytes | None = None


class ChunkResultM(_M):
    error_code: Int32
    batches: list[BatchResultM]
    error_message: str | None = None
    locations: list[ChunkLocationM] = []


class PartitionKeyM(_M):
    topic_id: uuid.UUID
    partition: Int32


class FetchQueryM(_M):
    topic_id: uuid.UUID
    partition: Int32
    offset: Int64
    max_bytes: Int64
    isolation_level: Annotated[int, Field(ge=0, le=1)] = 0


class PartitionFetchInfoM(_M):
    error_code: Int32
    log_start_offset: Int64 = -1
    high_watermark: Int64 = -1
    chunks: list[ChunkLocationM] = []
    last_stable_offset: Int64 = -1
    aborted: list[tuple[Int64, Int64]] = []
    aborted_ranges: list[tuple[Int64, Int64, Int64]] = []
    aborted_until: Int64 = -1


class PartitionStateM(_M):
    error_code: Int32
    log_start_offset: Int64 = -1
    high_watermark: Int64 = -1
    last_stable_offset: Int64 = -1


class OffsetQueryM(_M):
    topic_id: uuid.UUID
    partition: Int32
    timestamp: Int64


class OffsetAnswerM(_M):
    error_code: Int32
    offset: Int64 = -1
    timestamp: Int64 = -1


class OutputChunkM(_M):
    topic_id: uuid.UUID
    partition: Int32
    byte_position: NonNegInt64
    byte_length: NonNegInt64
    base_offset: NonNegInt64
    last_offset: NonNegInt64
    record_count: NonNegInt64
    batch_count: NonNegInt32
    max_timestamp: Int64
    present_offsets: Base64Bytes | None = None


class GroupOffsetM(_M):
    topic: Name
    partition: Int32
    offset: Int64
    metadata: str | None = None
    leader_epoch: Int32 = -1


class OffsetCommitResultM(_M):
    error_code: Int32
    error_message: str | None = None


class ListenerEndpointM(_M):
    name: Annotated[str, Field(min_length=1, max_length=255)]
    host: Annotated[str, Field(max_length=255)]
    port: Annotated[int, Field(ge=0, le=65535)]


class AgentInfoM(_M):
    agent_id: Annotated[str, Field(min_length=1, max_length=255)]
    host: Annotated[str, Field(max_length=255)]
    port: Annotated[int, Field(ge=0, le=65535)]
    zone: Annotated[str, Field(max_length=255)] | None = None
    last_heartbeat_ms: Int64 = 0
    listeners: Annotated[list[ListenerEndpointM], Field(max_length=32)] = []
    ready: bool = True  # absent (an older agent or service): ready

    @classmethod
    def of(cls, a: t.AgentInfo) -> AgentInfoM:
        return cls.model_construct(
            agent_id=a.agent_id,
            host=a.host,
            port=a.port,
            zone=a.zone,
            last_heartbeat_ms=a.last_heartbeat_ms,
            listeners=[ListenerEndpointM.model_construct(name=n, host=h, port=p) for n, h, p in a.listeners],
            ready=a.ready,
        )

    def to_info(self) -> t.AgentInfo:
        return t.AgentInfo(
            agent_id=self.agent_id,
            host=self.host,
            port=self.port,
            zone=self.zone,
            last_heartbeat_ms=self.last_heartbeat_ms,
            listeners=tuple((e.name, e.host, e.port) for e in self.listeners),
            ready=self.ready,
        )


# ---------------------------------------------------------------- requests and responses


class CreateTopicRequest(_M):
    name: str
    partition_count: Int32
    configs: dict[str, str] = {}


class CreateTopicsRequest(_M):
    topics: list[CreateTopicRequest]


class TopicCreationM(_M):
    name: str
    topic: TopicM | None = None
    error_code: Int32 = 0
    message: str = ""


class TopicNameRequest(_M):
    name: str


class TopicNamesRequest(_M):
    names: list[str]


class TopicIdsRequest(_M):
    topic_ids: list[uuid.UUID]


class AlterConfigsRequest(_M):
    name: str
    set_configs: dict[str, str] = {}
    delete_configs: list[str] = []
    replace: bool = False


class AddPartitionsRequest(_M):
    name: str
    new_partition_count: Int32


class CommitFileRequest(_M):
    file: FileSpecM
    chunks: list[ChunkSpecM]


class FileChunksRequest(_M):
    object_key: str


class FileChunkM(_M):
    topic_id: uuid.UUID
    topic_name: str | None = None
    partition: Int32
    location: ChunkLocationM


class FileChunksM(_M):
    object_key: str
    state: str | None = None
    level: Int32 = -1
    chunks: list[FileChunkM] = []


class FindChunksRequest(_M):
    queries: list[FetchQueryM]


class PartitionStatesRequest(_M):
    keys: list[PartitionKeyM]


class PartitionWatermarkM(_M):
    topic_id: uuid.UUID
    partition: Int32
    high_watermark: Int64
    error_code: Int32 = 0
    last_stable_offset: Int64 = -1


class WaitForCommitsRequest(_M):
    known: list[PartitionWatermarkM]
    timeout_ms: Int32


class ListOffsetsRequest(_M):
    queries: list[OffsetQueryM]


class ProducerIdResponse(_M):
    producer_id: Int64
    producer_epoch: Int32


class CheckpointUpdateM(_M):
    topic_id: uuid.UUID
    partition: Int32
    first_dirty_offset: NonNegInt64


class ReplaceChunksRequest(_M):
    input_chunk_ids: list[Int64]
    file: FileSpecM
    outputs: list[OutputChunkM]
    checkpoints: list[CheckpointUpdateM] = []
    lease_token: Annotated[str, Field(max_length=64)] | None = None


class CommitOffsetsRequest(_M):
    group_id: str
    offsets: list[GroupOffsetM]
    lease: LeaseTokenM | None = None


class FetchOffsetsRequest(_M):
    group_id: str
    topics: list[str] | None = None


class TopicPartitionM(_M):
    topic: str
    partition: Int32


class DeletePartitionOffsetsRequest(_M):
    group_id: str
    partitions: list[TopicPartitionM]


class GroupsWithOffsetsRequest(_M):
    group_ids: list[str] | None = None


class StoredGroupM(_M):
    group_id: str
    coordinator: str | None = None
    active: bool = False
    group_state: str | None = None


class ResetOffsetsRequest(_M):
    group_id: str
    offsets: list[GroupOffsetM]


class GroupIdRequest(_M):
    group_id: str


class DeleteRecordsQueryM(_M):
    topic: Name
    partition: Int32
    offset: Int64


class DeleteRecordsRequest(_M):
    queries: list[DeleteRecordsQueryM]


class DeleteRecordsAnswerM(_M):
    error_code: Int32 = 0
    low_watermark: Int64 = -1
    message: str | None = None


class EnforceRetentionRequest(_M):
    topic: Name
    max_chunks_per_partition: Annotated[int, Field(ge=1, le=100_000)] = 1000


class RetentionResultM(_M):
    topic: Name
    partition: Int32
    log_start_offset: Int64
    chunks_deleted: NonNegInt64
    bytes_deleted: NonNegInt64


class GroupIdsRequest(_M):
    group_ids: list[str]


class ExpireOffsetsRequest(_M):
    retention_ms: NonNegInt64


class CountResponse(_M):
    count: NonNegInt64


class ClaimFilesRequest(_M):
    token: Annotated[str, Field(min_length=1, max_length=64)]
    max_files: Annotated[int, Field(ge=1, le=10_000)]
    grace_ms: NonNegInt64
    claim_ms: Annotated[int, Field(ge=1, le=2**63 - 1)]


class ClaimedFileM(_M):
    file_id: NonNegInt64
    object_key: Name


class ForgetFilesRequest(_M):
    token: Annotated[str, Field(min_length=1, max_length=64)]
    file_ids: list[NonNegInt64]


class ObjectKeysRequest(_M):
    object_keys: list[Name]


class RecordSuccessRequest(_M):
    task: Annotated[str, Field(min_length=1, max_length=64)]


class ErrorResponse(_M):
    error_code: int
    message: str


class OkResponse(_M):
    ok: bool = True


class ClusterInfoM(_M):
    """Cluster-wide settings readers need (`GET /v1/cluster`): the bucket URL the agents
    write to, or null when the service was not given one."""

    bucket_url: str | None = None


# ---------------------------------------------------------------- conversions


def topic_to_m(x: t.Topic) -> TopicM:
    return TopicM(
        name=x.name, topic_id=x.topic_id, partition_count=x.partition_count, configs=dict(x.configs)
    )


def topic_from_m(m: TopicM) -> t.Topic:
    return t.Topic(
        name=m.name, topic_id=m.topic_id, partition_count=m.partition_count, configs=dict(m.configs)
    )


def topic_creation_to_m(x: TopicCreation) -> TopicCreationM:
    return TopicCreationM(
        name=x.name,
        topic=None if x.topic is None else topic_to_m(x.topic),
        error_code=x.error_code,
        message=x.message,
    )


def topic_creation_from_m(m: TopicCreationM) -> TopicCreation:
    return TopicCreation(
        m.name, None if m.topic is None else topic_from_m(m.topic), int(m.error_code), m.message
    )


def file_to_m(x: t.FileSpec) -> FileSpecM:
    # Not validated here: the server validates (and refuses with INVALID_REQUEST) what it receives.
    return FileSpecM.model_construct(
        object_key=x.object_key,
        size_bytes=x.size_bytes,
        level=x.level,
        writer=x.writer,
        completes=[tuple(c) for c in x.completes],
    )


def file_from_m(m: FileSpecM) -> t.FileSpec:
    return t.FileSpec(
        object_key=m.object_key,
        size_bytes=m.size_bytes,
        level=m.level,
        writer=m.writer,
        completes=tuple((str(a), int(b), int(c)) for a, b, c in m.completes),
    )


def chunk_spec_to_m(x: t.ChunkSpec) -> ChunkSpecM:
    return ChunkSpecM.model_construct(
        topic_id=x.topic_id,
        partition=x.partition,
        batches=[BatchSpecM.model_construct(**b.__dict__) for b in x.batches],
    )


def chunk_spec_from_m(m: ChunkSpecM) -> t.ChunkSpec:
    return t.ChunkSpec(
        topic_id=m.topic_id,
        partition=m.partition,
        batches=tuple(t.BatchSpec(**b.__dict__) for b in m.batches),
    )


def chunk_result_to_m(x: t.ChunkResult) -> ChunkResultM:
    return ChunkResultM(
        error_code=x.error_code,
        batches=[BatchResultM.model_construct(**b.__dict__) for b in x.batches],
        error_message=x.error_message,
        locations=[location_to_m(c) for c in x.locations],
    )


def chunk_result_from_m(m: ChunkResultM) -> t.ChunkResult:
    return t.ChunkResult(
        error_code=m.error_code,
        batches=tuple(t.BatchResult(**b.__dict__) for b in m.batches),
        error_message=m.error_message,
        locations=tuple(location_from_m(c) for c in m.locations),
    )


def location_to_m(x: t.ChunkLocation) -> ChunkLocationM:
    return ChunkLocationM.model_construct(**x.__dict__)


def location_from_m(m: ChunkLocationM) -> t.ChunkLocation:
    return t.ChunkLocation(**m.__dict__)


def fetch_info_to_m(x: t.PartitionFetchInfo) -> PartitionFetchInfoM:
    return PartitionFetchInfoM.model_construct(
        error_code=x.error_code,
        log_start_offset=x.log_start_offset,
        high_watermark=x.high_watermark,
        chunks=[location_to_m(c) for c in x.chunks],
        last_stable_offset=x.last_stable_offset,
        aborted=list(x.aborted),
        aborted_ranges=list(x.aborted_ranges),
        aborted_until=x.aborted_until,
    )


def fetch_info_from_m(m: PartitionFetchInfoM) -> t.PartitionFetchInfo:
    return t.PartitionFetchInfo(
        error_code=m.error_code,
        log_start_offset=m.log_start_offset,
        high_watermark=m.high_watermark,
        chunks=tuple(location_from_m(c) for c in m.chunks),
        last_stable_offset=m.last_stable_offset,
        aborted=tuple((int(a), int(b)) for a, b in m.aborted),
        aborted_ranges=tuple((int(a), int(b), int(c)) for a, b, c in m.aborted_ranges),
        aborted_until=m.aborted_until,
    )


def output_to_m(x: t.OutputChunk) -> OutputChunkM:
    return OutputChunkM(**x.__dict__)


def output_from_m(m: OutputChunkM) -> t.OutputChunk:
    return t.OutputChunk(**m.__dict__)


def t_checkpoint(m: CheckpointUpdateM) -> CheckpointUpdate:
    return CheckpointUpdate(m.topic_id, m.partition, m.first_dirty_offset)


def file_chunks_to_m(x: t.FileChunks) -> FileChunksM:
    return FileChunksM.model_construct(
        object_key=x.object_key,
        state=x.state,
        level=x.level,
        chunks=[
            FileChunkM.model_construct(
                topic_id=c.topic_id,
                topic_name=c.topic_name,
                partition=c.partition,
                location=location_to_m(c.location),
            )
            for c in x.chunks
        ],
    )


def file_chunks_from_m(m: FileChunksM) -> t.FileChunks:
    return t.FileChunks(
        m.object_key,
        m.state,
        m.level,
        tuple(
            t.FileChunk(c.topic_id, c.topic_name, c.partition, location_from_m(c.location)) for c in m.chunks
        ),
    )


# ---------------------------------------------------------------- group coordinator leases


class LeaseTokenM(_M):
    holder: Name
    epoch: Int64


class LeaseGrantM(_M):
    group_id: str
    granted: bool
    holder: Name
    epoch: Int64
    expires_ms: Int64
    group_state: str | None = None


class AcquireGroupLeaseRequest(_M):
    group_id: str
    agent_id: Name
    ttl_ms: Int64


class GroupLeaseM(_M):
    group_id: str
    epoch: Int64


class RenewGroupLeasesRequest(_M):
    agent_id: Name
    leases: list[GroupLeaseM]
    ttl_ms: Int64


class ReleaseGroupLeasesRequest(_M):
    agent_id: Name
    leases: list[GroupLeaseM]


class ConfirmGroupGenerationRequest(_M):
    group_id: str
    lease: LeaseTokenM
    ttl_ms: Int64
    group_state: str


CommitOffsetsRequest.model_rebuild()  # its `lease` field is declared above this section
