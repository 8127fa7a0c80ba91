"""`__consumer_offsets` served read-only from metadata: the committed offsets as Kafka's own records.

Lag tools (Burrow, Kafka UIs) consume Kafka's internal offsets topic. Skiff keeps committed
offsets in the metadata database; metadata places each commit in a 50-partition log
(metadata.groups.offsets_log: the group's partition is Kafka's, Java hash of the group id
modulo 50; offsets per partition in commit order, the latest commit of each (group, topic,
partition) kept, like a compacted topic). This module serves that log:

- Metadata and DescribeTopicPartitions list the topic (`TOPIC`: 50 partitions, a fixed
  topic id, `is_internal`), when all topics are asked for and by name;
- Fetch (`serve_fetch`) builds, per partition, one RecordBatch v2 on the fly from the
  commits at and after the fetch offset (`read_offsets_log`): each record is a commit at
  its log offset (offset deltas with holes where commits were overwritten or deleted; the
  batch's last offset delta reaches the end of the log when the page does, so a consumer
  skips trailing holes), keyed by OffsetCommitKey v1 (group, topic, partition) with an
  OffsetCommitValue v3 value (offset, leader epoch, metadata, commit timestamp), Kafka's
  GroupCoordinator record formats; the record timestamp is the commit time. A fetch of
  this topic alone with nothing to return waits its `max_wait` once (capped like any fetch)
  and reads again: new commits are seen within a poll, at one metadata read per fetch;
- ListOffsets (`serve_list_offsets`): earliest 0, latest the log end, a time the first
  commit at or after it;
- writes are refused as Kafka refuses them to clients: Produce answers
  INVALID_TOPIC_EXCEPTION ("Cannot append to internal topic"), after the usual WRITE check.

Limits: no tombstone is served for a deleted group or offset (the row is gone, as after
Kafka's `delete.retention.ms`); group metadata records (GroupMetadataKey) are not served,
only offset commits; offsets committed before this log existed are placed in commit-time
order by the migration.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.response import FetchableTopicResponse, PartitionData
from kio.schema.list_offsets.v10.response import ListOffsetsPartitionResponse, ListOffsetsTopicResponse
from kio.static.primitive import Records, i32, i64
from skiff.agent.context import AgentContext
from skiff.agent.handlers import METADATA_ERRORS
from skiff.fileformat.record_build import build_batch
from skiff.metadata.types import OffsetsLogEntry, OffsetsLogPage, OffsetsLogQuery, Topic

NAME = "__consumer_offsets"
PARTITIONS = 50
# Kafka gives the topic a random id per cluster; Skiff's is fixed (it is not in the topics table).
TOPIC_ID = uuid.uuid5(uuid.NAMESPACE_URL, "skiff:__consumer_offsets")
TOPIC = Topic(NAME, TOPIC_ID, PARTITIONS, {"cleanup.policy": "compact"})

KEY_VERSION = 1  # OffsetCommitKey
VALUE_VERSION = 3  # OffsetCommitValue
RECORD_BYTES_GUESS = 100  # to turn a partition's byte budget into a number of records
MAX_RECORDS = 10_000
MAX_OFFSET_DELTA = 2**31 - 1
WRITE_REFUSED = f"Cannot append to internal topic {NAME}"

_I16 = struct.Struct(">h")


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    return _I16.pack(len(data)) + data


def encode_key(group: str, topic: str, partition: int) -> bytes:
    """OffsetCommitKey v1: version, group, topic, partition (not flexible)."""
    return _I16.pack(KEY_VERSION) + _string(group) + _string(topic) + struct.pack(">i", partition)


def encode_value(offset: int, leader_epoch: int, metadata: str | None, commit_ms: int) -> bytes:
    """OffsetCommitValue v3: version, offset, leader epoch, metadata (null as ""), commit time."""
    head = _I16.pack(VALUE_VERSION) + struct.pack(">qi", offset, leader_epoch)
    return head + _string(metadata or "") + struct.pack(">q", commit_ms)


def batch_of(page: OffsetsLogPage, from_offset: int, limit: int) -> bytes:
    """One RecordBatch holding the page's commits at their log offsets (`limit` was asked
    for), its last offset delta at the end of the log when the page reached it (an empty
    batch when only holes are left); b"" at the end of the log."""
    end = page.high_watermark
    if from_offset >= end:
        return b""
    entries = [e for e in page.entries if e.log_offset - from_offset <= MAX_OFFSET_DELTA]
    complete = len(entries) == len(page.entries) and len(entries) < limit
    if complete or not entries:  # everything up to the end, holes included, is covered
        last = min(end - 1 - from_offset, MAX_OFFSET_DELTA)
    else:
        last = entries[-1].log_offset - from_offset
    records = [
        (
            e.log_offset - from_offset,
            e.commit_time_ms,
            encode_key(e.group_id, e.topic, e.partition),
            _value(e),
            (),
        )
        for e in entries
    ]
    if not records:
        return build_batch(
            [], base_offset=from_offset, last_offset_delta=last, base_timestamp=-1, max_timestamp=-1
        )
    return build_batch(records, base_offset=from_offset, last_offset_delta=last)


def _value(e: OffsetsLogEntry) -> bytes:
    return encode_value(e.committed_offset, e.leader_epoch, e.metadata, e.commit_time_ms)


# --- Fetch --------------------------------------------------------------------------------------


def _partition_data(index: int, code: ErrorCode, end: int = -1, records: bytes = b"") -> PartitionData:
    return PartitionData(
        partition_index=i32(index),
        error_code=code,
        high_watermark=i64(end),
        last_stable_offset=i64(end),
        log_start_offset=i64(0 if end >= 0 else -1),
        aborted_transactions=None,
        records=Records.parse(records),
    )


def _served(body: Any, responses: Sequence[FetchableTopicResponse]) -> list[tuple[int, int, Any]]:
    """(topic index, partition index, requested partition) of this topic's partitions that
    the normal path left unknown (authorization refusals stay as they are)."""
    out = []
    for ti, (t, resp) in enumerate(zip(body.topics, responses, strict=True)):
        if t.topic != NAME:
            continue
        for pi, (p, answer) in enumerate(zip(t.partitions, resp.partitions, strict=True)):
            if answer.error_code == ErrorCode.unknown_topic_or_partition and 0 <= p.partition < PARTITIONS:
                out.append((ti, pi, p))
    return out


async def _read(ctx: AgentContext, wanted: list[tuple[int, int, Any]], cap_bytes: int) -> list[PartitionData]:
    queries = []
    for _, _, p in wanted:
        budget = min(max(int(p.partition_max_bytes), 0), cap_bytes)
        count = min(max(budget // RECORD_BYTES_GUESS, 1), MAX_RECORDS)
        queries.append(OffsetsLogQuery(int(p.partition), max(int(p.fetch_offset), 0), count))
    limits = [q.max_records for q in queries]
    try:
        pages = await ctx.metadata.read_offsets_log(queries)
    except METADATA_ERRORS:
        return [_partition_data(int(p.partition), ErrorCode.kafka_storage_error) for _, _, p in wanted]
    out = []
    for (_, _, p), page, limit in zip(wanted, pages, limits, strict=True):
        offset, index = int(p.fetch_offset), int(p.partition)
        if not 0 <= offset <= page.high_watermark:
            out.append(_partition_data(index, ErrorCode.offset_out_of_range, page.high_watermark))
        else:
            out.append(
                _partition_data(index, ErrorCode.none, page.high_watermark, batch_of(page, offset, limit))
            )
    return out


async def serve_fetch(
    ctx: AgentContext, body: Any, responses: tuple[FetchableTopicResponse, ...]
) -> tuple[FetchableTopicResponse, ...]:
    """The Fetch answer with this topic's partitions served from metadata (the normal path
    answered them UNKNOWN_TOPIC_OR_PARTITION, having checked READ on the topic)."""
    wanted = _served(body, responses)
    if not wanted:
        return responses
    cap = ctx.config.max_partition_fetch_bytes
    answers = await _read(ctx, wanted, cap)
    alone = all(t.topic == NAME for t in body.topics)
    if alone and not any(a.records for a in answers) and body.max_wait.total_seconds() > 0:
        wait_ms = min(int(body.max_wait.total_seconds() * 1000), ctx.config.fetch_max_wait_ms_cap)
        await asyncio.sleep(wait_ms / 1000.0)  # a long poll at the end of the log: read again once
        answers = await _read(ctx, wanted, cap)
    rows = [list(r.partitions) for r in responses]
    for (ti, pi, _), answer in zip(wanted, answers, strict=True):
        rows[ti][pi] = answer
    return tuple(
        FetchableTopicResponse(topic=r.topic, partitions=tuple(row))
        for r, row in zip(responses, rows, strict=True)
    )


# --- ListOffsets ----------------------------------------------------------------------------------

EARLIEST, LATEST = -2, -1


async def serve_list_offsets(
    ctx: AgentContext, body: Any, topics: list[ListOffsetsTopicResponse]
) -> list[ListOffsetsTopicResponse]:
    """The ListOffsets answer with this topic's partitions answered from the log."""
    wanted = [
        (ti, pi, p)
        for ti, (t, resp) in enumerate(zip(body.topics, topics, strict=True))
        if t.name == NAME
        for pi, (p, answer) in enumerate(zip(t.partitions, resp.partitions, strict=True))
        if answer.error_code == ErrorCode.unknown_topic_or_partition and 0 <= p.partition_index < PARTITIONS
    ]
    if not wanted:
        return topics
    queries = [
        OffsetsLogQuery(int(p.partition_index), timestamp=max(int(p.timestamp), -1)) for _, _, p in wanted
    ]
    try:
        pages: list[OffsetsLogPage | None] = list(await ctx.metadata.read_offsets_log(queries))
    except METADATA_ERRORS:
        pages = [None] * len(wanted)
    rows = [list(t.partitions) for t in topics]
    for (ti, pi, p), page in zip(wanted, pages, strict=True):
        ts = int(p.timestamp)
        if page is None:
            code, offset = ErrorCode.kafka_storage_error, -1
        elif ts == EARLIEST:
            code, offset = ErrorCode.none, 0
        elif ts >= 0:
            code, offset = ErrorCode.none, page.offset_for_timestamp
        else:  # LATEST and the other special values: the end of the log
            code, offset = ErrorCode.none, page.high_watermark
        rows[ti][pi] = ListOffsetsPartitionResponse(
            partition_index=p.partition_index,
            error_code=code,
            timestamp=i64(-1),  # Kafka gives the found record's time; the offset is what tools use
            offset=i64(offset),
            leader_epoch=i32(-1),
        )
    return [
        ListOffsetsTopicResponse(name=t.name, partitions=tuple(row))
        for t, row in zip(topics, rows, strict=True)
    ]
