"""The driver's plan: options + metadata -> offset ranges -> input partitions with chunks.

Everything here talks to the metadata service over HTTP (`metadata.wire.http_client`; never the
database) and, only to refine a timestamp to an exact offset, reads one chunk from the
bucket. The steps:

1. topics and partitions: `subscribe` / `subscribePattern` (list_topics, whole-name
   regex match) / `assign`; an unknown topic or partition is an error;
2. each partition's log start, high watermark and *latest* offset (partition_states): the
   high watermark, or with `kafka.isolation.level=read_committed` the last stable offset
   (LSO: the first offset of the oldest open transaction, else the high watermark), which
   one find_chunks call per partition at the high watermark with isolation level 1
   answers. Then the start and end offsets from the option specs: earliest = log start,
   latest = the latest offset; timestamps through list_offsets (metadata answers per
   chunk) refined inside the chunk by `first_record_at_or_after`, and, as Kafka's
   ListOffsets, an offset at or above the latest offset counts as no answer; JSON maps
   must name exactly the assigned partitions;
3. a start below the log start (retention, DeleteRecords) fails the query when
   `failOnDataLoss` is true, else the range starts at the log start; a start above the
   end, or an end above the latest offset, is an error;
4. the ranges are split into tasks (`spark.ranges`), and each task gets the chunk
   locations covering its range (find_chunks, paged, so a long range costs a few calls).
   Under read_committed find_chunks is asked with isolation level 1 and also answers the
   aborted transactions overlapping each page, as (producer id, first offset) pairs, and
   each one's last offset (its ABORT marker's) in `aborted_ranges`: the task carries
   those of its range as (producer id, first offset, last offset) to the executor
   (`spark.decode` drops their batches; the last offset ends a range whose marker was in
   a lost chunk). The executors then read only the bucket.

The bucket URL is the `bucket` option, else the one metadata serves (GET /v1/cluster).
Streaming (`spark.stream`) reuses steps 1, 2 and 4 for each micro-batch.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from skiff.fileformat.chunk_reader import ChunkLocation, first_record_at_or_after
from skiff.fileformat.objectstore import open_store
from skiff.fileformat.objectstore.errors import StorageError
from skiff.metadata.errors import OFFSET_OUT_OF_RANGE, MetadataError, MetadataUnavailable
from skiff.metadata.types import FetchQuery, OffsetQuery, PartitionKey, PartitionState, Topic
from skiff.metadata.wire.credentials import CredentialsError, MetadataCredentials, resolve_credentials
from skiff.metadata.wire.http_client import SyncHttpMetadataClient
from skiff.spark.options import EARLIEST, LATEST, OffsetSpec, SourceOptions
from skiff.spark.pushdown import ScanBounds, chunk_may_match, clamp_range, keeps_partition
from skiff.spark.ranges import OffsetRange, split_ranges

# find_chunks answers chunks until their bytes add up to this; longer ranges page on.
T = TypeVar("T")

FIND_CHUNKS_PAGE_BYTES = 256 * 1024 * 1024
READ_COMMITTED_LEVEL = 1  # Kafka's isolation level in FetchQuery


class SkiffSourceError(RuntimeError):
    """The query cannot be planned or read: the message says what to fix."""


def bucket_read_error(bucket: str, key: str, exc: StorageError) -> SkiffSourceError:
    """A failed read from the bucket (driver or executor), with where its settings come from."""
    return SkiffSourceError(
        f"cannot read {key} from the bucket {bucket}: {exc} (endpoint and credentials come from"
        " the standard AWS settings of the driver and every executor: AWS_ENDPOINT_URL,"
        " AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile)"
    )


@dataclass(frozen=True)
class PartitionInfo:
    topic: str
    topic_id: str
    partition: int
    log_start: int
    high_watermark: int
    # what "latest" means for the query: the high watermark, or under read_committed the
    # last stable offset (never above the high watermark)
    latest: int


@dataclass(frozen=True)
class PlannedRead:
    """One Spark task: an offset range of one partition and the chunks that hold it."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    chunks: tuple[ChunkLocation, ...]
    # read_committed only: (producer id, first offset, last offset) of the aborted
    # transactions that overlap the range, sorted; the last offset is the ABORT marker's
    # (-1: metadata did not answer it). Empty under read_uncommitted.
    aborted: tuple[tuple[int, int, int], ...] = ()


def metadata_client_credentials(opts: SourceOptions) -> MetadataCredentials:
    """The options' credentials, else the driver's SKIFF_METADATA_*."""
    try:
        return resolve_credentials(
            token=opts.metadata_token, token_file=opts.metadata_token_file, ca_file=opts.metadata_ca_file
        )
    except CredentialsError as exc:
        raise SkiffSourceError(str(exc)) from None


def metadata_client(opts: SourceOptions) -> SyncHttpMetadataClient:
    """The driver's client (`metadata_client_credentials`)."""
    return SyncHttpMetadataClient(opts.metadata_url, credentials=metadata_client_credentials(opts))


def run(fn: Callable[[SyncHttpMetadataClient], T], opts: SourceOptions) -> T:
    """`fn(client)` with a fresh (blocking) HTTP client; metadata errors become
    `SkiffSourceError`s a data engineer can act on."""
    metadata_url = opts.metadata_url

    def main() -> T:
        client = metadata_client(opts)
        try:
            return fn(client)
        finally:
            client.close()

    try:
        return main()
    except MetadataUnavailable as exc:
        raise SkiffSourceError(
            f"cannot reach the Skiff metadata service at {metadata_url}: {exc}. Check the option"
            " metadata.url and that `skiff metadata` is running and reachable from the driver"
        ) from exc
    except MetadataError as exc:
        raise SkiffSourceError(f"the Skiff metadata service at {metadata_url} refused: {exc}") from exc


def resolve_partitions(client: SyncHttpMetadataClient, opts: SourceOptions) -> list[PartitionInfo]:
    """The partitions the options select, with their log start and high watermark."""
    wanted: list[tuple[Topic, int]] = []
    if opts.subscribe is not None:
        found = client.describe_topics(list(opts.subscribe))
        missing = [t for t in opts.subscribe if t not in found]
        if missing:
            raise SkiffSourceError(f"unknown topic(s): {', '.join(missing)}")
        wanted = [(found[t], p) for t in opts.subscribe for p in range(found[t].partition_count)]
    elif opts.subscribe_pattern is not None:
        regex = re.compile(opts.subscribe_pattern)
        topics = sorted((t for t in client.list_topics() if regex.fullmatch(t.name)), key=lambda t: t.name)
        wanted = [(t, p) for t in topics for p in range(t.partition_count)]
    else:
        assert opts.assign is not None
        names = sorted({t for t, _ in opts.assign})
        found = client.describe_topics(names)
        for name, partition in opts.assign:
            topic = found.get(name)
            if topic is None:
                raise SkiffSourceError(f"unknown topic: {name}")
            if not 0 <= partition < topic.partition_count:
                raise SkiffSourceError(
                    f"topic {name} has {topic.partition_count} partitions; partition {partition} does not exist"
                )
            wanted.append((topic, partition))
    states = client.partition_states([PartitionKey(t.topic_id, p) for t, p in wanted])
    for (topic, p), state in zip(wanted, states, strict=True):
        if state.error_code:
            raise SkiffSourceError(
                f"partition {topic.name}-{p} is unknown to metadata (error {state.error_code})"
            )
    bounds = [(s.log_start_offset, s.high_watermark, s.high_watermark) for s in states]
    if opts.read_committed and wanted:
        bounds = _stable_bounds(client, wanted, states)
    return [
        PartitionInfo(topic.name, str(topic.topic_id), p, log_start, hwm, latest)
        for (topic, p), (log_start, hwm, latest) in zip(wanted, bounds, strict=True)
    ]


def _stable_bounds(
    client: SyncHttpMetadataClient, wanted: list[tuple[Topic, int]], states: Sequence[PartitionState]
) -> list[tuple[int, int, int]]:
    """(log start, high watermark, last stable offset) per partition: find_chunks at the
    high watermark with isolation level 1 answers the LSO (and, the watermark being the
    end, no chunks unless records arrived meanwhile; its max_bytes of 1 keeps that short).
    A log start that moved past that watermark in between (DeleteRecords) is answered
    OFFSET_OUT_OF_RANGE with the new bounds: asked again once at the new watermark."""
    at = [s.high_watermark for s in states]
    out: list[tuple[int, int, int] | None] = [None] * len(wanted)
    todo = list(range(len(wanted)))
    for attempt in range(2):
        infos = client.find_chunks(
            [
                FetchQuery(
                    wanted[i][0].topic_id, wanted[i][1], at[i], 1, isolation_level=READ_COMMITTED_LEVEL
                )
                for i in todo
            ]
        )
        retry = []
        for i, info in zip(todo, infos, strict=True):
            if info.error_code == OFFSET_OUT_OF_RANGE and attempt == 0 and info.high_watermark >= 0:
                at[i] = info.high_watermark
                retry.append(i)
            elif info.error_code or info.last_stable_offset < 0:
                topic, p = wanted[i]
                raise SkiffSourceError(
                    f"{topic.name}-{p}: metadata did not answer its last stable offset (Kafka error"
                    f" {info.error_code}; log start {info.log_start_offset}, latest {info.high_watermark})"
                )
            else:
                out[i] = (info.log_start_offset, info.high_watermark, info.last_stable_offset)
        todo = retry
        if not todo:
            break
    assert all(b is not None for b in out)
    return [b for b in out if b is not None]


def _timestamp_offsets(
    client: SyncHttpMetadataClient,
    parts: Sequence[PartitionInfo],
    timestamps_ms: Sequence[int],
    opts: SourceOptions,
    edge: str,
) -> list[int]:
    """The first offset whose record timestamp is >= the timestamp, per partition (Kafka's
    offsetsForTimes); none: an error, or the latest offset with strategy `latest`."""
    import uuid

    answers = client.list_offsets(
        [
            OffsetQuery(uuid.UUID(p.topic_id), p.partition, ts)
            for p, ts in zip(parts, timestamps_ms, strict=True)
        ]
    )
    out = []
    store = None
    for p, ts, ans in zip(parts, timestamps_ms, answers, strict=True):
        offset = ans.offset if ans.error_code == 0 else -1
        if offset >= p.latest:  # Kafka answers no offset at or above the last fetchable one
            offset = -1
        if offset >= 0:
            # metadata narrows it to a chunk; the exact record is found inside the chunk
            info = (client.find_chunks([FetchQuery(uuid.UUID(p.topic_id), p.partition, offset, 1)]))[0]
            if info.chunks:
                if opts.bucket is None:
                    raise SkiffSourceError(
                        "option bucket is required (the bucket URL, e.g. s3://bucket/prefix)"
                    )
                store = store or open_store(opts.bucket)
                loc = info.chunks[0]
                try:
                    data = store.get_range(loc.object_key, loc.byte_position, loc.byte_length)
                except StorageError as exc:
                    raise bucket_read_error(opts.bucket, loc.object_key, exc) from exc
                hit = first_record_at_or_after(loc, data, ts, min_offset=max(offset, p.log_start))
                offset = hit[0] if hit is not None else offset
                if offset >= p.latest:
                    offset = -1
        if offset < 0:
            if opts.timestamp_strategy == "latest" or edge == "ending":
                offset = p.latest
            else:
                raise SkiffSourceError(
                    f"no record at or after timestamp {ts} in {p.topic}-{p.partition}"
                    " (set startingOffsetsByTimestampStrategy=latest to start at the latest offset)"
                )
        out.append(offset)
    return out


def resolve_offsets(
    client: SyncHttpMetadataClient,
    parts: list[PartitionInfo],
    spec: OffsetSpec,
    opts: SourceOptions,
    edge: str,
) -> list[int]:
    if spec.kind == "earliest":
        return [p.log_start for p in parts]
    if spec.kind == "latest":
        return [p.latest for p in parts]
    if spec.kind == "timestamp":
        assert spec.timestamp_ms is not None
        return _timestamp_offsets(client, parts, [spec.timestamp_ms] * len(parts), opts, edge)
    per = dict(spec.per_partition or {})
    assigned = {(p.topic, p.partition) for p in parts}
    if set(per) != assigned:
        name = f"{edge}Offsets" if spec.kind == "offsets" else f"{edge}OffsetsByTimestamp"
        extra = sorted(set(per) - assigned)
        missing = sorted(assigned - set(per))
        raise SkiffSourceError(
            f"{name} must name exactly the assigned partitions: "
            f"not assigned {[f'{t}-{p}' for t, p in extra]}, missing {[f'{t}-{p}' for t, p in missing]}"
        )
    values = [per[(p.topic, p.partition)] for p in parts]
    if spec.kind == "timestamps":
        return _timestamp_offsets(client, parts, values, opts, edge)
    out = []
    for p, v in zip(parts, values, strict=True):
        if v == EARLIEST:
            out.append(p.log_start)
        elif v == LATEST:
            out.append(p.latest)
        elif v < 0:
            raise SkiffSourceError(
                f"{edge}Offsets for {p.topic}-{p.partition} is {v}: use -2, -1 or an offset"
            )
        else:
            out.append(v)
    return out


def plan_batch(
    client: SyncHttpMetadataClient, opts: SourceOptions, bounds: ScanBounds | None = None
) -> list[PlannedRead]:
    """The batch query's tasks; `bounds` (pushed filters, `spark.pushdown`) prune them."""
    parts = resolve_partitions(client, opts)
    starts = resolve_offsets(client, parts, opts.starting, opts, "starting")
    ends = resolve_offsets(client, parts, opts.ending, opts, "ending")
    ranges = []
    for p, start, end in zip(parts, starts, ends, strict=True):
        if start < p.log_start:
            if opts.fail_on_data_loss:
                raise SkiffSourceError(
                    f"{p.topic}-{p.partition}: offsets {start} to {p.log_start - 1} are gone (the log now"
                    f" starts at {p.log_start}; retention or DeleteRecords removed them). Set"
                    " failOnDataLoss=false to read from the log start instead."
                )
            start = p.log_start
        if end > p.latest:
            if opts.read_committed:
                raise SkiffSourceError(
                    f"{p.topic}-{p.partition}: ending offset {end} is above the last stable offset"
                    f" {p.latest} (kafka.isolation.level=read_committed reads only up to it: offsets"
                    f" from {p.latest} belong to a transaction still open, or follow one)"
                )
            raise SkiffSourceError(
                f"{p.topic}-{p.partition}: ending offset {end} is above the latest offset {p.high_watermark}"
            )
        if start > end:
            raise SkiffSourceError(
                f"{p.topic}-{p.partition}: starting offset {start} is after the ending offset {end}"
            )
        ranges.append(OffsetRange(p.topic, p.partition, start, end))
    ids = {(p.topic, p.partition): p.topic_id for p in parts}
    if bounds is None or not bounds.pruning:
        return plan_tasks(client, ranges, ids, opts)
    return prune_tasks(plan_tasks(client, prune_ranges(ranges, bounds), ids, opts), bounds)


def prune_ranges(ranges: list[OffsetRange], bounds: ScanBounds) -> list[OffsetRange]:
    """The ranges of the partitions the bounds keep, cut to their offset bounds."""
    kept = (clamp_range(r, bounds) for r in ranges if keeps_partition(bounds, r.partition))
    return [r for r in kept if r is not None]


def prune_tasks(tasks: list[PlannedRead], bounds: ScanBounds) -> list[PlannedRead]:
    """Each task without the chunks no matching row can be in (timestamp bound); a task
    left without chunks is dropped. Its offset range stays: the reader drops what is
    outside it, and Spark re-applies every filter."""
    out = []
    for t in tasks:
        chunks = tuple(c for c in t.chunks if chunk_may_match(c, bounds))
        if chunks:
            out.append(dataclasses.replace(t, chunks=chunks))
    return out


def plan_tasks(
    client: SyncHttpMetadataClient,
    ranges: list[OffsetRange],
    topic_ids: dict[tuple[str, int], str],
    opts: SourceOptions,
) -> list[PlannedRead]:
    """Offset ranges -> Spark tasks (split as Spark's Kafka source does) with their chunks."""
    tasks = split_ranges(
        ranges, min_partitions=opts.min_partitions, max_records_per_partition=opts.max_records_per_partition
    )
    return attach_chunks(client, tasks, topic_ids, read_committed=opts.read_committed)


def resolve_bucket(client: SyncHttpMetadataClient, opts: SourceOptions) -> str:
    """The `bucket` option, else the bucket URL metadata was given (`skiff metadata --bucket`)."""
    if opts.bucket:
        return opts.bucket
    bucket = client.bucket_url()
    if not bucket:
        raise SkiffSourceError(
            f"no bucket URL: the metadata service at {client.base_url} was not given one (start it"
            " with `skiff metadata --bucket URL` or SKIFF_BUCKET_URL) and the option bucket is not"
            " set; set option bucket to the URL the agents write to (s3://bucket/prefix, file:///path)"
        )
    return str(bucket)


def attach_chunks(
    client: SyncHttpMetadataClient,
    tasks: list[OffsetRange],
    topic_ids: dict[tuple[str, int], str],
    *,
    read_committed: bool = False,
) -> list[PlannedRead]:
    """Each task with the chunks that hold its offsets (find_chunks pages, all tasks at once)
    and, under read_committed, the aborted transactions overlapping its range."""
    import uuid

    level = READ_COMMITTED_LEVEL if read_committed else 0
    found: list[list[ChunkLocation]] = [[] for _ in tasks]
    aborted: list[dict[tuple[int, int], int]] = [{} for _ in tasks]  # (pid, first) -> last offset
    cursor = [t.from_offset for t in tasks]
    todo = [i for i, t in enumerate(tasks) if t.size > 0]
    while todo:
        queries = [
            FetchQuery(
                uuid.UUID(topic_ids[(tasks[i].topic, tasks[i].partition)]),
                tasks[i].partition,
                cursor[i],
                FIND_CHUNKS_PAGE_BYTES,
                isolation_level=level,
            )
            for i in todo
        ]
        answers = client.find_chunks(queries)
        next_todo = []
        for i, info in zip(todo, answers, strict=True):
            t = tasks[i]
            if info.error_code:
                raise SkiffSourceError(
                    f"{t.topic}-{t.partition}: offsets from {cursor[i]} cannot be read (Kafka error"
                    f" {info.error_code}; log start {info.log_start_offset}, latest {info.high_watermark})."
                    " Retention may have removed them while the query was planned."
                )
            useful = [c for c in info.chunks if c.base_offset < t.until_offset]
            found[i].extend(useful)
            last_offsets = {(pid, first): last for pid, first, last in info.aborted_ranges}
            for pid, first in info.aborted:
                if first < t.until_offset:
                    known = aborted[i].get((pid, first), -1)
                    aborted[i][(pid, first)] = max(known, last_offsets.get((pid, first), -1))
            if not info.chunks or len(useful) < len(info.chunks):
                continue
            cursor[i] = info.chunks[-1].last_offset + 1
            if cursor[i] < t.until_offset:
                next_todo.append(i)
        todo = next_todo
    return [
        PlannedRead(
            t.topic,
            t.partition,
            t.from_offset,
            t.until_offset,
            tuple(chunks),
            tuple(sorted((pid, first, last) for (pid, first), last in aborted[i].items())),
        )
        for i, (t, chunks) in enumerate(zip(tasks, found, strict=True))
    ]
