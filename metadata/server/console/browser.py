"""The console's message browser: a partition's records, read from the bucket.

The read is the one every reader of the bucket uses (Spark's executors, `skiff inspect`,
the compactor): metadata's `find_chunks` gives the chunk locations from an offset, and
`fileformat.read_sync.read_partition` reads their byte ranges and applies the fetch rule
(batches with absolute offsets, at most `max_bytes` but always the first batch); the
records are then decoded by `fileformat.record_decode`. Control batches (transaction
markers) are skipped; compacted partitions have holes, which simply do not appear.

Where the read starts (`Start`): the last N records (`max(log start, high watermark - N)`),
an offset (clamped into [log start, high watermark]), or a timestamp (ListOffsets' rule:
the first offset whose timestamp is at or after it). At most `limit` records
(`MAX_RECORDS`) and `MAX_ROUNDS` reads of at most `max_bytes` each are made, so one page
view costs a bounded number of GETs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from skiff.fileformat.batch_header import TimestampType, iter_batches
from skiff.fileformat.objectstore import ObjectStore
from skiff.fileformat.read_sync import read_partition
from skiff.fileformat.record_decode import iter_records
from skiff.metadata.errors import MetadataError
from skiff.metadata.service import MetadataService
from skiff.metadata.types import FetchQuery, OffsetQuery, PartitionKey, Topic

MAX_RECORDS = 500
MAX_ROUNDS = 8
DEFAULT_MAX_BYTES = 1 << 20

StartMode = Literal["last", "offset", "timestamp"]


@dataclass(frozen=True)
class Start:
    mode: StartMode
    value: int  # N for "last", an offset, or a timestamp in ms


@dataclass(frozen=True)
class BrowsedRecord:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class RecordPage:
    """What one view of the browser read: the records, and where the partition stands."""

    partition: int
    log_start_offset: int
    high_watermark: int
    start_offset: int
    records: tuple[BrowsedRecord, ...]
    next_offset: int  # where a "next page" starts


def start_offset(svc: MetadataService, key: PartitionKey, start: Start, log_start: int, hw: int) -> int:
    """The first offset to read for `start`, within [log_start, hw]."""
    if start.mode == "last":
        return max(log_start, hw - max(start.value, 0))
    if start.mode == "offset":
        return min(max(start.value, log_start), hw)
    (answer,) = svc.list_offsets([OffsetQuery(key.topic_id, key.partition, start.value)])
    if answer.error_code or answer.offset < 0:
        return hw  # no record at or after that time
    return min(max(answer.offset, log_start), hw)


def read_records(
    svc: MetadataService,
    store: ObjectStore,
    topic: Topic,
    partition: int,
    start: Start,
    *,
    limit: int,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> RecordPage:
    """Up to `limit` records of the partition from `start` (see the module docstring).
    Raises MetadataError for an unknown partition; storage errors pass through."""
    limit = max(1, min(limit, MAX_RECORDS))
    key = PartitionKey(topic.topic_id, partition)
    (state,) = svc.partition_states([key])
    if state.error_code:
        raise MetadataError(state.error_code, f"{topic.name}-{partition}: no such partition")
    first = start_offset(svc, key, start, state.log_start_offset, state.high_watermark)
    out: list[BrowsedRecord] = []
    offset = first
    # Metadata finds a timestamp's chunk; the record is found here, as the agent's
    # ListOffsets does: records before the first one at or after the time are skipped.
    not_before_ms = start.value if start.mode == "timestamp" else None
    for _ in range(MAX_ROUNDS):
        if len(out) >= limit or offset >= state.high_watermark:
            break
        (info,) = svc.find_chunks([FetchQuery(topic.topic_id, partition, offset, max_bytes)])
        if info.error_code or not info.chunks:
            break
        selection = read_partition(store, info.chunks, offset, max_bytes)
        got = decode_selection(
            selection.records, offset, limit - len(out), not_before_ms if not out else None
        )
        out.extend(got)
        if selection.next_offset <= offset:
            break  # nothing more to read from here
        offset = selection.next_offset
    next_offset = out[-1].offset + 1 if out else offset
    return RecordPage(partition, state.log_start_offset, state.high_watermark, first, tuple(out), next_offset)


def decode_selection(
    records: bytes, from_offset: int, limit: int, not_before_ms: int | None = None
) -> list[BrowsedRecord]:
    """The data records of `records` (whole batches, absolute offsets) at or after
    `from_offset`, at most `limit`; with `not_before_ms`, from the first record whose
    timestamp is at or after it."""
    out: list[BrowsedRecord] = []
    for pos, header in iter_batches(records):
        if header.is_control or header.last_offset < from_offset:
            continue
        append_time = header.timestamp_type == TimestampType.LOG_APPEND_TIME
        for r in iter_records(records, pos, header=header):
            offset = header.base_offset + r.offset_delta
            if offset < from_offset:
                continue
            ts = header.max_timestamp if append_time else r.timestamp
            if not out and not_before_ms is not None and ts < not_before_ms:
                continue
            out.append(BrowsedRecord(offset, ts, r.key, r.value, tuple(r.headers)))
            if len(out) >= limit:
                return out
    return out
