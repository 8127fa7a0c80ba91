"""ListOffsets (api key 2), v1-v10: offsets by timestamp, and the earliest/latest offsets.

Per partition, the query timestamp is either a time in ms (the first offset whose
timestamp is at or after it) or a special value:

- -1 LATEST: the high watermark (next offset to be written);
- -2 EARLIEST: the log start offset;
- -3 MAX_TIMESTAMP (v7+): the offset of the record with the largest timestamp;
- -4 EARLIEST_LOCAL (v8+, tiered storage): Skiff has no local tier, so = EARLIEST;
- -5 LATEST_TIERED (v9+): as in Kafka for a topic without tiered storage, offset -1.

All partitions of a request go to metadata in one `list_offsets` call, which answers a
timestamp query (and MAX_TIMESTAMP) at chunk granularity: it names an offset inside the
one chunk that holds the answer. The agent then finds the exact record in that chunk
(one `find_chunks` call for all such partitions, the chunks read through the agent's
store and cache): for a time, the first record at or after the metadata answer whose
timestamp is >= the time; for MAX_TIMESTAMP, the earliest record with the largest
timestamp at or after the log start. Both report that record's own timestamp. With
isolation level read_committed (1), LATEST answers the last stable offset (the first
offset of the partition's oldest open transaction, else the high watermark): the fetch
path's chunk-location cache answers it when it knows the LSO of exactly the high
watermark metadata answered, else one more `find_chunks` call at the high watermark
with isolation level 1 does; timestamp queries
are not limited to the LSO. `replica_id`, `current_leader_epoch` and `timeout` (v10) are ignored;
leader epochs are reported as -1, as in Metadata. Errors per partition: a topic the principal may not DESCRIBE ->
TOPIC_AUTHORIZATION_FAILED (Kafka's ACLs); unknown topic
or partition -> UNKNOWN_TOPIC_OR_PARTITION; metadata unreachable -> KAFKA_STORAGE_ERROR
(retriable: "the storage behind this partition is unavailable").
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v10.request import ListOffsetsRequest
from kio.schema.list_offsets.v10.response import (
    ListOffsetsPartitionResponse,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)
from kio.static.primitive import i32, i64
from skiff.agent.context import AgentContext
from skiff.agent.handlers import (
    METADATA_ERRORS,
    NO_THROTTLE,
    HandlerSpec,
    Op,
    Request,
    Resource,
    authorized,
    error_of,
)
from skiff.agent.handlers import _consumer_offsets as consumer_offsets
from skiff.agent.handlers._access import RT, TOPIC_DENIED, item, on, requires
from skiff.agent.protocol import convert, to_error_code
from skiff.fileformat.chunk_reader import first_record_at_or_after, max_timestamp_record
from skiff.fileformat.read_async import load_chunks
from skiff.metadata.errors import MetadataError, MetadataUnavailable
from skiff.metadata.types import (
    EARLIEST_TIMESTAMP,
    MAX_TIMESTAMP,
    FetchQuery,
    OffsetAnswer,
    OffsetQuery,
    Topic,
)

API_KEY = 2
MIN_VERSION = 1
MAX_VERSION = 10

LATEST_TIMESTAMP = -1
READ_COMMITTED = 1
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
UNAVAILABLE = ErrorCode.kafka_storage_error
log = logging.getLogger(__name__)


def _answer(
    partition: int, code: ErrorCode, offset: int = -1, timestamp: int = -1
) -> ListOffsetsPartitionResponse:
    return ListOffsetsPartitionResponse(
        partition_index=i32(partition),
        error_code=code,
        timestamp=i64(timestamp),
        offset=i64(offset),
        leader_epoch=i32(-1),
    )


async def handle(ctx: AgentContext, request: Request) -> Any:
    body = convert(request.body, ListOffsetsRequest)
    names = [t.name for t in body.topics]
    topics: dict[str, Topic] = {}
    topic_error: ErrorCode | None = None
    try:
        topics = await ctx.topics.get_by_name(names)
    except MetadataUnavailable:
        topic_error = UNAVAILABLE
    except MetadataError as e:
        topic_error = to_error_code(e.error_code)

    # One slot per requested partition: either an answer now, or an index into `queries`.
    slots: list[list[ListOffsetsPartitionResponse | int]] = []
    queries: list[OffsetQuery] = []
    for t in body.topics:
        row: list[ListOffsetsPartitionResponse | int] = []
        topic = topics.get(t.name)
        allowed = authorized(ctx, request, Op.DESCRIBE, Resource.TOPIC, t.name)
        for p in t.partitions:
            if not allowed:
                row.append(_answer(p.partition_index, ErrorCode.topic_authorization_failed))
            elif topic_error is not None:
                row.append(_answer(p.partition_index, topic_error))
            elif topic is None or not 0 <= p.partition_index < topic.partition_count:
                row.append(_answer(p.partition_index, ErrorCode.unknown_topic_or_partition))
            elif p.timestamp == LATEST_TIERED_TIMESTAMP:
                row.append(_answer(p.partition_index, ErrorCode.none))
            else:
                ts = EARLIEST_TIMESTAMP if p.timestamp == EARLIEST_LOCAL_TIMESTAMP else int(p.timestamp)
                row.append(len(queries))
                queries.append(OffsetQuery(topic.topic_id, p.partition_index, ts))
        slots.append(row)

    answers: list[OffsetAnswer] = []
    batch_error: ErrorCode | None = None
    if queries:
        try:
            answers = await ctx.metadata.list_offsets(queries)
        except METADATA_ERRORS as e:
            code, _ = error_of(e)
            if code == ErrorCode.unknown_server_error:
                raise
            batch_error = UNAVAILABLE if isinstance(e, MetadataUnavailable) else code
            if code == ErrorCode.unknown_topic_or_partition:
                ctx.topics.invalidate(names=names)

    if answers:
        answers = await _refine(ctx, queries, answers)
    if answers and int(body.isolation_level) == READ_COMMITTED:
        answers = await _stable(ctx, queries, answers)

    out: list[ListOffsetsTopicResponse] = []
    for t, row in zip(body.topics, slots, strict=True):
        partitions = []
        for p, slot in zip(t.partitions, row, strict=True):
            if not isinstance(slot, int):
                partitions.append(slot)
            elif batch_error is not None:
                partitions.append(_answer(p.partition_index, batch_error))
            else:
                a = answers[slot]
                partitions.append(
                    _answer(p.partition_index, to_error_code(a.error_code), a.offset, a.timestamp)
                )
        out.append(ListOffsetsTopicResponse(name=t.name, partitions=tuple(partitions)))
    out = await consumer_offsets.serve_list_offsets(ctx, body, out)  # answered from metadata's log
    return ListOffsetsResponse(throttle_time=NO_THROTTLE, topics=tuple(out))


async def _stable(
    ctx: AgentContext, queries: list[OffsetQuery], answers: list[OffsetAnswer]
) -> list[OffsetAnswer]:
    """LATEST answers lowered to the last stable offset (read_committed)."""
    todo = [
        i
        for i, (q, a) in enumerate(zip(queries, answers, strict=True))
        if q.timestamp == LATEST_TIMESTAMP and not a.error_code and a.offset >= 0
    ]
    out = list(answers)
    known = ctx.parts.chunk_locations
    for i in list(todo):  # the fetch cache may know the LSO of exactly that high watermark
        lso = known.lso_at((queries[i].topic_id, queries[i].partition), answers[i].offset)
        if lso is not None:
            out[i] = dataclasses.replace(out[i], offset=lso)
            todo.remove(i)
    if not todo:
        return out
    try:
        # at the high watermark: no chunks, only the partition's last stable offset
        infos = await ctx.metadata.find_chunks(
            [
                FetchQuery(queries[i].topic_id, queries[i].partition, answers[i].offset, 0, READ_COMMITTED)
                for i in todo
            ]
        )
    except METADATA_ERRORS as e:
        code, message = error_of(e)
        if code == ErrorCode.unknown_server_error:
            raise
        log.warning("ListOffsets: last stable offset lookup failed: %s", message)
        for i in todo:
            out[i] = OffsetAnswer(int(UNAVAILABLE))
        return out
    for i, info in zip(todo, infos, strict=True):
        if not info.error_code and info.last_stable_offset >= 0:
            out[i] = dataclasses.replace(out[i], offset=min(out[i].offset, info.last_stable_offset))
    return out


async def _refine(
    ctx: AgentContext, queries: list[OffsetQuery], answers: list[OffsetAnswer]
) -> list[OffsetAnswer]:
    """Replace metadata's chunk-granular answers to timestamp and MAX_TIMESTAMP queries by
    the exact record (see the module docstring). A chunk that cannot be read makes that
    partition's answer KAFKA_STORAGE_ERROR; a metadata failure makes them all so."""
    todo = [
        i
        for i, (q, a) in enumerate(zip(queries, answers, strict=True))
        if (q.timestamp >= 0 or q.timestamp == MAX_TIMESTAMP) and not a.error_code and a.offset >= 0
    ]
    if not todo:
        return answers
    out = list(answers)
    try:
        # max_bytes 1: only the chunk holding the offset
        infos = await ctx.metadata.find_chunks(
            [FetchQuery(queries[i].topic_id, queries[i].partition, answers[i].offset, 1) for i in todo]
        )
    except METADATA_ERRORS as e:
        code, message = error_of(e)
        if code == ErrorCode.unknown_server_error:
            raise
        log.warning("ListOffsets: chunk lookup failed: %s", message)
        for i in todo:
            out[i] = OffsetAnswer(int(UNAVAILABLE))
        return out
    store = ctx.parts.bucket
    chunks = {
        i: info.chunks[0] for i, info in zip(todo, infos, strict=True) if not info.error_code and info.chunks
    }
    loaded, failed = await load_chunks(store, chunks.values())
    for i, info in zip(todo, infos, strict=True):
        loc = chunks.get(i)
        if loc is None:
            continue  # the partition moved on meanwhile (retention): keep metadata's answer
        data = loaded.get(loc.range_key)
        try:
            if data is None:
                raise failed[loc.range_key]
            if queries[i].timestamp == MAX_TIMESTAMP:
                found = max_timestamp_record(loc, data, min_offset=max(info.log_start_offset, 0))
            else:
                found = first_record_at_or_after(
                    loc, data, queries[i].timestamp, min_offset=answers[i].offset
                )
        except Exception as e:  # boundary: one partition's read
            # any store or decode failure reading one partition's object answers it unavailable
            log.warning("ListOffsets: reading %s@%d failed: %s", loc.object_key, loc.byte_position, e)
            out[i] = OffsetAnswer(int(UNAVAILABLE))
            continue
        if found is not None:
            out[i] = dataclasses.replace(out[i], offset=found[0], timestamp=found[1])
    return out


ACCESS = requires(item(on(RT.TOPIC, Op.DESCRIBE), TOPIC_DENIED))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
