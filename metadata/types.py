"""Plain value types exchanged with the metadata service.

These are the public surface of `metadata`: the agent, the compactor and Spark build
and read them; the service, the FastAPI app and both clients (in-process and HTTP)
speak them. They are frozen dataclasses with no I/O, so any package may import them.

Error reporting: operations that fail as a whole raise `MetadataError` carrying a
Kafka error code (see `metadata.errors`); per-item failures (one chunk of a commit,
one partition of a lookup) are reported in the item's own `error_code`, 0 meaning
success, so that one bad partition never fails its neighbours.

Offsets: `offset_count` of a batch is its `last_offset_delta + 1`, the number of
offsets it occupies; a chunk occupies `[base_offset, last_offset]`, inclusive.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated

from annotated_types import Interval, Len, MaxLen

# Defined beside the reader that interprets it; re-exported here for every user of metadata.
from skiff.fileformat.chunk_reader import ChunkLocation as ChunkLocation
from skiff.metadata.wire.bounds import (
    MAX_ITEMS,
    MAX_PARTITIONS,
    Id,
    Int32,
    Int64,
    KafkaId,
    Name,
    NonNegInt32,
    NonNegInt64,
    Port,
    ShortName,
    TxnId,
)

# ListOffsets special timestamps, as Kafka defines them.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3

# At most this many aborted transactions are answered in `PartitionFetchInfo.aborted_ranges`
# (the agent's cache of a partition's aborted ranges holds about as many).
MAX_CACHEABLE_ABORTED = 64
# The maintenance task name under which an operator's "run a compaction pass now" is recorded
# (`record_success`: its time is the request's); maintenance loops poll `last_successes` for it.
COMPACTION_REQUEST_TASK = "compaction_requested"


@dataclass(frozen=True)
class Topic:
    name: str
    topic_id: uuid.UUID
    partition_count: int
    # Only the configs set explicitly on the topic; `metadata.configs` knows the defaults.
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FileSpec:
    """An object just written to the bucket, about to be committed."""

    object_key: Annotated[str, Len(1, 1024)]
    size_bytes: NonNegInt64
    level: NonNegInt32 = 0  # 0: written by an agent; 1+: written by the compactor
    writer: ShortName = ""  # agent or compactor id, for operators
    # Transactions whose markers this file carries, completed (PREPARE_* -> COMPLETE_*) in
    # the commit's own database transaction: (transactional id, producer id, epoch).
    completes: Annotated[tuple[tuple[TxnId, Int64, Int32], ...], MaxLen(MAX_ITEMS)] = ()


@dataclass(frozen=True)
class BatchSpec:
    """One RecordBatch inside a file, as the agent saw it on the produce path."""

    byte_offset: NonNegInt64  # position of the batch's first byte inside the file
    byte_length: NonNegInt64
    offset_count: NonNegInt64  # last_offset_delta + 1
    record_count: NonNegInt64
    max_timestamp: Int64  # ms
    producer_id: Int64 = -1
    producer_epoch: Int32 = -1
    base_sequence: Int32 = -1
    # Kafka timestampType of the batch: 0 CreateTime, 1 LogAppendTime.
    timestamp_type: Annotated[int, Interval(ge=0, le=1)] = 0
    is_transactional: bool = False  # attribute bit 4
    control_type: Annotated[
        int, Interval(ge=-1, le=1)
    ] = -1  # a control batch (attribute bit 5): 0 ABORT, 1 COMMIT marker; -1 data
    # A transactional data batch: its Produce request's transactional id. The commit accepts
    # the batch only if that id's transaction is ongoing, with this producer id and epoch,
    # and holds the partition (metadata.transactions.state.check_produce); None on every other batch.
    transactional_id: KafkaId | None = None
    # ms: the smallest record timestamp (a lower bound is enough), None when unknown (older
    # agents): the chunk row's min_timestamp, which lets Spark skip chunks after a time bound.
    min_timestamp: Int64 | None = None


def produced_batch_spec(
    byte_offset: int,
    byte_length: int,
    offset_count: int,
    record_count: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    timestamp_type: int,
    is_transactional: bool,
    transactional_id: str | None,
    min_timestamp: int | None,
) -> BatchSpec:
    """`BatchSpec(...)` of a produced data batch (`control_type` -1), equal to the one the
    constructor builds, built without the frozen dataclass's `__init__` (an
    `object.__setattr__` per field: 1.3 us, against 0.5 us here). The agent builds one per
    produced batch at every commit. tests/unit/test_produce_buffer.py checks that it sets
    every field of BatchSpec."""
    spec: BatchSpec = _new_object(BatchSpec)
    spec.__dict__.update(
        byte_offset=byte_offset,
        byte_length=byte_length,
        offset_count=offset_count,
        record_count=record_count,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        timestamp_type=timestamp_type,
        is_transactional=is_transactional,
        control_type=-1,
        transactional_id=transactional_id,
        min_timestamp=min_timestamp,
    )
    return spec


_new_object = object.__new__


@dataclass(frozen=True)
class ChunkSpec:
    """One partition's batches inside one file, contiguous in the file and in order."""

    topic_id: uuid.UUID
    partition: Int32
    batches: Annotated[tuple[BatchSpec, ...], MaxLen(MAX_PARTITIONS)]


@dataclass(frozen=True)
class BatchResult:
    error_code: int
    base_offset: int = -1  # assigned (or, for a retried duplicate, original) offset
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    # True when this batch was not stored by this commit: a retried duplicate answered
    # with its original offset (or a re-commit of an already committed file).
    duplicate: bool = False


def stored_batch_result(base_offset: int, log_append_time_ms: int, log_start_offset: int) -> BatchResult:
    """`BatchResult(0, base_offset, log_append_time_ms, log_start_offset)`, a stored batch's
    answer (one per produced batch at every commit), built without the frozen dataclass's
    `__init__`, as `produced_batch_spec` is (tests/unit/test_produce_buffer.py checks it)."""
    result: BatchResult = _new_object(BatchResult)
    result.__dict__.update(
        error_code=0,
        base_offset=base_offset,
        log_append_time_ms=log_append_time_ms,
        log_start_offset=log_start_offset,
        error_message=None,
        duplicate=False,
    )
    return result


@dataclass(frozen=True)
class ChunkResult:
    error_code: int  # set when the whole chunk failed (e.g. unknown partition)
    batches: tuple[BatchResult, ...]  # one per BatchSpec, same order
    error_message: str | None = None
    # The chunk rows this commit recorded for the spec, in offset order, exactly as
    # find_chunks returns them (one per contiguous run of stored batches; none when
    # nothing was stored). The agent caches them: there is one rule, metadata's.
    locations: tuple[ChunkLocation, ...] = ()


@dataclass(frozen=True)
class PartitionKey:
    topic_id: uuid.UUID
    partition: Int32


@dataclass(frozen=True)
class PartitionWatermark:
    """A partition's high watermark as someone knows it (`wait_for_commits`' question) or
    as it now is (its answer; `error_code` set if the partition is gone)."""

    topic_id: uuid.UUID
    partition: Int32
    high_watermark: Int64
    error_code: int = 0
    # In answers: the partition's last stable offset at that high watermark (-1: unknown).
    last_stable_offset: int = -1


@dataclass(frozen=True)
class FetchQuery:
    topic_id: uuid.UUID
    partition: Int32
    offset: Int64
    max_bytes: Int64
    # Kafka's isolation level: 0 read_uncommitted (up to the high watermark), 1
    # read_committed (up to the last stable offset, with the aborted transactions).
    isolation_level: Annotated[int, Interval(ge=0, le=1)] = 0


@dataclass(frozen=True)
class PartitionFetchInfo:
    error_code: int
    log_start_offset: int = -1
    high_watermark: int = -1
    chunks: tuple[ChunkLocation, ...] = ()
    last_stable_offset: int = -1  # read_committed queries only (-1: not asked)
    # read_committed: (producer id, first offset) of the aborted transactions in the range
    aborted: tuple[tuple[int, int], ...] = ()
    # read_committed, for the agent's cache: (producer id, first offset, last offset) of
    # every aborted transaction overlapping [query offset, aborted_until) (-1: not given).
    # Complete for that span, and at most `MAX_CACHEABLE_ABORTED` entries. With
    # aborted_until -1 (too many to cache): those of `aborted`, with their last offsets.
    # Either way every entry of `aborted` is here with its last offset (the ABORT marker's).
    aborted_ranges: tuple[tuple[int, int, int], ...] = ()
    aborted_until: int = -1


@dataclass(frozen=True)
class PartitionState:
    error_code: int
    log_start_offset: int = -1
    high_watermark: int = -1
    # The first offset of the oldest open transaction, else the high watermark (-1: unknown).
    last_stable_offset: int = -1


@dataclass(frozen=True)
class OffsetQuery:
    topic_id: uuid.UUID
    partition: Int32
    timestamp: Int64  # ms, or LATEST_TIMESTAMP / EARLIEST_TIMESTAMP / MAX_TIMESTAMP


@dataclass(frozen=True)
class OffsetAnswer:
    error_code: int
    offset: int = -1
    timestamp: int = -1


@dataclass(frozen=True)
class OutputChunk:
    """A chunk of a compactor-written file: absolute offsets, and exact holes."""

    topic_id: uuid.UUID
    partition: Int32
    byte_position: NonNegInt64
    byte_length: NonNegInt64
    base_offset: NonNegInt64
    last_offset: NonNegInt64
    record_count: NonNegInt64
    batch_count: NonNegInt32
    max_timestamp: Int64
    present_offsets: bytes | None = None  # serialized pyroaring BitMap, relative to base_offset
    min_timestamp: Int64 | None = None  # ms, a lower bound of its records'; None: unknown


@dataclass(frozen=True)
class GroupOffset:
    topic: Name
    partition: Int32
    offset: Int64
    metadata: str | None = None
    leader_epoch: Int32 = -1


@dataclass(frozen=True)
class OffsetCommitResult:
    """The outcome of one GroupOffset of a commit_offsets call: 0 (stored) or a Kafka error
    code (UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST, OFFSET_METADATA_TOO_LARGE)."""

    error_code: int = 0
    error_message: str | None = None


@dataclass(frozen=True)
class AgentInfo:
    agent_id: Id
    host: ShortName
    port: Port
    zone: ShortName | None = None
    last_heartbeat_ms: Int64 = 0
    # Every advertised listener as (listener name, host, port), e.g. ("SASL_SSL", "b1", 9094):
    # Kafka clients are told the address on the listener they connected through. Empty for
    # agents (and rows) from before listeners: then (host, port) is the only address.
    listeners: Annotated[tuple[tuple[Annotated[str, Len(1, 255)], ShortName, Port], ...], MaxLen(32)] = ()
    # The agent's last readiness probe found its bucket writable and readable and metadata
    # answering (agent.health). Agents that are not ready stay registered (their address and
    # node id keep) but lead no partition and coordinate nothing (agent.agent_registry).
    ready: bool = True
    # The Skiff version the agent runs (metadata.build_info.SKIFF_VERSION); "" when not told
    # (an agent from before versions).
    version: Annotated[str, MaxLen(64)] = ""


@dataclass(frozen=True)
class FileChunk:
    """One chunk row of a file: which partition it belongs to and where its offsets are."""

    topic_id: uuid.UUID
    topic_name: str | None  # None when the topic has been deleted
    partition: int
    location: ChunkLocation


@dataclass(frozen=True)
class FileChunks:
    """What metadata knows of one object: its state and the chunk rows that point into it.

    `state` is None when metadata has no such file (never committed, or collected)."""

    object_key: str
    state: str | None = None
    level: int = -1
    chunks: tuple[FileChunk, ...] = ()


# --------------------------------------------------------------------------- retention, GC


@dataclass(frozen=True)
class DeleteRecordsQuery:
    """DeleteRecords for one partition: move its log start offset up to `offset`
    (-1: the high watermark)."""

    topic: Name
    partition: Int32
    offset: Int64


@dataclass(frozen=True)
class DeleteRecordsAnswer:
    error_code: int = 0
    low_watermark: int = -1  # the log start offset after the call
    message: str | None = None


@dataclass(frozen=True)
class RetentionResult:
    """What one retention pass did to one partition (only partitions it changed)."""

    topic: str
    partition: int
    log_start_offset: int
    chunks_deleted: int
    bytes_deleted: int


@dataclass(frozen=True)
class ClaimedFile:
    """A `deleting` file the garbage collector claimed: delete the object, then forget the row."""

    file_id: int
    object_key: str


# --------------------------------------------------------------------------- topics, groups


@dataclass(frozen=True)
class NewTopic:
    """A topic to create: what `create_topic` takes."""

    name: Name
    partition_count: Int32
    configs: dict[Name, str]


@dataclass(frozen=True)
class TopicCreation:
    """One topic's outcome in `create_topics`: the topic, or the Kafka error `create_topic`
    would have raised for it (TOPIC_ALREADY_EXISTS, INVALID_CONFIG, ...)."""

    name: str
    topic: Topic | None
    error_code: int = 0
    message: str = ""


@dataclass(frozen=True)
class StoredGroup:
    """A consumer group as metadata holds it (`metadata.groups.admin`): `group_state` is the
    JSON its coordinators last confirmed (format: agent.groups.persistence), None if only
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


@dataclass(frozen=True)
class ActiveProducer:
    """One producer's state in one partition (Kafka's DescribeProducers): its epoch, the last
    sequence number it wrote there, when that last batch was committed (ms), and the first
    offset of its transaction open in the partition (-1: none)."""

    topic_id: uuid.UUID
    partition: Int32
    producer_id: Int64
    producer_epoch: Int32
    last_sequence: Int32 = -1
    last_commit_ms: Int64 = -1
    txn_start_offset: Int64 = -1


@dataclass(frozen=True)
class OffsetsLogQuery:
    """A read of one partition of `__consumer_offsets` (metadata.groups.offsets_log): up to
    `max_records` commits from `from_offset` on, and, with `timestamp` >= 0, the first offset
    committed at or after that time (ms)."""

    partition: Annotated[int, Interval(ge=0, le=49)]
    from_offset: NonNegInt64 = 0
    max_records: Annotated[int, Interval(ge=0, le=10_000)] = 0
    timestamp: Int64 = -1


@dataclass(frozen=True)
class OffsetsLogEntry:
    """One committed offset as a record of `__consumer_offsets`, at `log_offset`."""

    log_offset: Int64
    group_id: KafkaId
    topic: Name
    partition: Int32
    committed_offset: Int64
    leader_epoch: Int32
    metadata: str | None
    commit_time_ms: Int64


@dataclass(frozen=True)
class OffsetsLogPage:
    """The partition's next offset, the commits read (in offset order) and, for a timestamp
    query, the first offset at or after it (-1: none)."""

    high_watermark: Int64
    entries: Annotated[tuple[OffsetsLogEntry, ...], MaxLen(10_000)] = ()
    offset_for_timestamp: Int64 = -1


# One report's bounds: a report covers at most a minute or so of one process's requests, so
# these are far above any real value, and a row summing reports cannot overflow 2**63 unless
# millions of reports arrive within one minute.
UsageCount = Annotated[int, Interval(ge=0, le=2**32)]
UsageBytes = Annotated[int, Interval(ge=0, le=2**40)]


@dataclass(frozen=True)
class StoreUsage:
    """Object-store requests and bytes of one process since its last report (a delta):
    write-class `puts` (PUTs and conditional PUTs) and `lists` (pages), read-class `gets`
    (whole and ranged GETs) and `heads`, free `deletes` (DeleteObjects calls), failed
    requests, and payload bytes received (`bytes_in`) and sent (`bytes_out`)."""

    puts: UsageCount = 0
    gets: UsageCount = 0
    heads: UsageCount = 0
    lists: UsageCount = 0
    deletes: UsageCount = 0
    errors: UsageCount = 0
    bytes_in: UsageBytes = 0
    bytes_out: UsageBytes = 0

    @property
    def empty(self) -> bool:
        return not any(getattr(self, f) for f in STORE_USAGE_FIELDS)


STORE_USAGE_FIELDS = ("puts", "gets", "heads", "lists", "deletes", "errors", "bytes_in", "bytes_out")
