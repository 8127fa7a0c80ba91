"""Fetch (api key 1), v4-v12: read committed batches from the bucket, long-poll at the tail.

Per request:
1. Fetch sessions (KIP-227) are refused the way Kafka allows: a request for a new
   session (session_id 0) is answered sessionless (session_id 0 in the response, so the
   client keeps sending full fetches); a request naming an existing session gets
   FETCH_SESSION_ID_NOT_FOUND, after which clients fall back to full fetches.
2. Partitions of topics the principal may not READ get TOPIC_AUTHORIZATION_FAILED (Kafka's
   ACLs, agent.authorizer), before whether they exist is looked at.
   All partitions' chunk locations come from metadata in one `find_chunks` call (each
   with the partition's `partition_max_bytes`); offsets outside [log start, high
   watermark] get OFFSET_OUT_OF_RANGE, unknown partitions UNKNOWN_TOPIC_OR_PARTITION.
3. Records are read with `fileformat.read_async.read_fetch` through the agent's store,
   a `RangeCache` wrapper. What each partition serves is planned object by object
   (`chunk_reader.plan_reads`: the oldest files the partitions wait on, each served to
   every partition waiting on it, until the request's `max_bytes` is used; Kafka lets a
   broker return less than a partition's limit), so a consumer of many partitions reads
   each file about once. The planned chunks are read grouped per object (neighbouring
   chunks of one object with one ranged GET, together with the request's further chunks
   in that GET's reach as read-ahead, kept for the next fetch, when the agent-wide bound
   on bytes in flight has room), then the selection runs per partition in request order
   over its planned chunks; some partition with data always returns at least one whole
   batch (KIP-74). A connection's first Fetch reads each cold file it touches to the
   file's end in one GET (`fetch_first_read_object_bytes`; see `_first_fetch_to_end_bytes`).
   As in Kafka, `max_bytes` is capped by `fetch_max_bytes` (Kafka's fetch.max.bytes) and
   each `partition_max_bytes` by `max_partition_fetch_bytes`. A partition whose bytes
   cannot be read, are inconsistent or fail their CRC-32C (checked on every batch served
   unless `fetch_verify_crc` is off) gets KAFKA_STORAGE_ERROR and a log line naming the
   object and position; the others are answered.
4. If fewer than `min_bytes` were found and `max_wait_ms` > 0, the request waits in the
   fetch purgatory (`agent.commit_watch`, up to `max_wait_ms`, capped by config) until a
   commit moves one of its partitions past what it read (at once for this agent's
   commits, about one metadata round trip for other agents'), then reads again, and
   waits again for the rest of `max_wait_ms` while it still has fewer than `min_bytes`.
   Partitions answered with an error are not waited on.
5. `isolation_level` read_committed (1): the partition's last stable offset (LSO: the
   first offset of its oldest open transaction, else the high watermark) bounds what is
   served. The chunk-location cache answers like for read_uncommitted when it can
   (`lookup_committed`: the chunks below its known LSO and the aborted transactions of
   their span, which it keeps per partition, bounded; `known_tail_committed`: a fetch at
   the LSO of the confirmed high watermark waits at once), so a consumer of a partition
   without transactions costs no more metadata calls than a read_uncommitted one. Else
   one `find_chunks` with isolation_level 1 answers: chunks up to the LSO, the aborted
   transactions (producer id, first offset) of the range, and, for the cache, every
   aborted range up to the LSO when there are few. The records served are cut
   before the first batch at or above the LSO (`trim_below`: a chunk may straddle it), and
   the response carries `last_stable_offset` and `aborted_transactions`, with which
   clients drop aborted records and skip the markers. A read_committed fetch at the LSO
   waits like one at the high watermark: the LSO only moves with a commit (of the markers,
   or a file holding them) that moves the high watermark too, which wakes it.
6. Zones (agent.zones): a v11+ request's rack_id (the client's `client.rack`) becomes its
   connection's zone. A consumer fetch from a client of zone Z reaching an agent outside Z,
   while Z has ready agents, is answered per partition with no records and Z's leader of the
   partition as `preferred_read_replica` (KIP-392); clients then fetch there. The answer
   carries no watermarks (-1). An agent in Z never redirects, so a client moves at most once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import struct
import time
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.response import (
    AbortedTransaction,
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)
from kio.schema.types import BrokerId, ProducerId
from kio.static.primitive import Records, i32, i64
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
from skiff.agent.metrics import FETCH_LATENCY
from skiff.fileformat.chunk_reader import ChunkReadError, FetchSelection, PartitionRead
from skiff.fileformat.objectstore import AsyncObjectStore
from skiff.fileformat.objectstore.range_cache import RangeCache
from skiff.fileformat.read_async import read_fetch
from skiff.metadata.types import FetchQuery, PartitionFetchInfo, Topic

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 12


Key = tuple[uuid.UUID, int]
log = logging.getLogger(__name__)

READ_COMMITTED = 1
_BATCH_PREFIX = struct.Struct(">qi")  # baseOffset, batchLength


def trim_below(records: bytes, limit_offset: int) -> bytes:
    """The leading batches of `records` whose base offset is below `limit_offset` (pure).
    Batches never straddle a last stable offset (it is a batch's base offset or the
    high watermark), so cutting at a batch start is exact."""
    pos = 0
    n = len(records)
    while pos + _BATCH_PREFIX.size <= n:
        base_offset, length = _BATCH_PREFIX.unpack_from(records, pos)
        if base_offset >= limit_offset:
            break
        pos += _BATCH_PREFIX.size + length
    return records if pos >= n else records[:pos]


def _pdata(
    partition: int,
    code: ErrorCode,
    *,
    hwm: int = -1,
    log_start: int = -1,
    records: bytes | None = None,
    info: PartitionFetchInfo | None = None,
) -> PartitionData:
    lso = hwm
    aborted: tuple[AbortedTransaction, ...] | None = None
    if info is not None and info.last_stable_offset >= 0:  # a read_committed answer
        lso = info.last_stable_offset
        aborted = tuple(
            AbortedTransaction(producer_id=ProducerId(pid), first_offset=i64(first))
            for pid, first in info.aborted
        )
    return PartitionData(
        partition_index=i32(partition),
        error_code=code,
        high_watermark=i64(hwm),
        last_stable_offset=i64(lso),
        log_start_offset=i64(log_start),
        aborted_transactions=aborted,
        # An error answer still carries an empty record set, as Kafka's does (MemoryRecords.EMPTY):
        # librdkafka fails to parse a null one ("invalid MessageSetSize -1") and drops the error.
        records=Records.parse(b"" if records is None else records),
    )


async def _read_once(
    ctx: AgentContext,
    body: Any,
    topics: dict[str, Topic],
    slots: list[list[tuple[Key, int, int] | PartitionData]],
    to_end_bytes: int = 0,
) -> tuple[list[list[PartitionData]], int, dict[Key, int]]:
    """One pass over every requested partition; returns (answers, bytes found, watermarks).
    `to_end_bytes`: see `_first_fetch_to_end_bytes`."""
    committed = int(getattr(body, "isolation_level", 0)) == READ_COMMITTED
    queries = [
        FetchQuery(k[0], k[1], offset, max_bytes, READ_COMMITTED if committed else 0)
        for row in slots
        for s in row
        if isinstance(s, tuple)
        for k, offset, max_bytes in [s]
    ]
    infos = [_cached_info(ctx, q, committed) for q in queries]
    batch_error = await _fill_from_metadata(ctx, queries, infos)
    budget = min(int(body.max_bytes), ctx.config.fetch_max_bytes)
    if budget <= 0:
        budget = ctx.config.fetch_max_bytes
    results = await _read_records(ctx, ctx.parts.bucket, _partition_reads(slots, infos), budget, to_end_bytes)
    total = 0
    watermarks: dict[Key, int] = {}
    out: list[list[PartitionData]] = []
    i = 0
    for t, row in zip(body.topics, slots, strict=True):
        answers = []
        for p, slot in zip(t.partitions, row, strict=True):
            if not isinstance(slot, tuple):
                answers.append(slot)
                continue
            answer, size = _answer(
                p.partition, slot[0], infos[i], results[i], batch_error, committed, watermarks
            )
            i += 1
            total += size
            answers.append(answer)
        out.append(answers)
    return out, total, watermarks


def _cached_info(ctx: AgentContext, q: FetchQuery, committed: bool) -> PartitionFetchInfo | None:
    """The chunk-location cache's answer for one query, or None when metadata must answer."""
    locations = ctx.parts.chunk_locations
    watch = ctx.parts.commit_watch
    trust_ms = ctx.config.fetch_poll_interval_ms
    key = (q.topic_id, q.partition)
    if committed:
        return locations.lookup_committed(key, q.offset, q.max_bytes) or locations.known_tail_committed(
            key, q.offset, trust_ms, confirms=functools.partial(watch.confirms_tail, key)
        )
    return locations.lookup(key, q.offset, q.max_bytes) or locations.known_tail(
        key, q.offset, trust_ms, confirmed=watch.confirms_tail(key, q.offset)
    )


async def _fill_from_metadata(
    ctx: AgentContext, queries: list[FetchQuery], infos: list[PartitionFetchInfo | None]
) -> tuple[ErrorCode, str] | None:
    """Ask metadata, in one `find_chunks`, for the queries the cache could not answer (their
    `infos` are None), filling `infos` and the cache in. Returns the error those partitions
    get when metadata failed (a timeout answers as KAFKA_STORAGE_ERROR), else None."""
    misses = [i for i, info in enumerate(infos) if info is None]
    if not misses:
        return None
    locations = ctx.parts.chunk_locations
    try:
        answered = await ctx.metadata.find_chunks([queries[i] for i in misses])
        for i, info in zip(misses, answered, strict=True):
            infos[i] = info
            locations.store((queries[i].topic_id, queries[i].partition), info, queries[i].offset)
    except METADATA_ERRORS as exc:
        batch_error = error_of(exc)
        if batch_error[0] == ErrorCode.unknown_server_error:
            raise
        if batch_error[0] == ErrorCode.request_timed_out:
            return (ErrorCode.kafka_storage_error, batch_error[1])
        return batch_error
    return None


def _partition_reads(
    slots: list[list[tuple[Key, int, int] | PartitionData]], infos: list[PartitionFetchInfo | None]
) -> list[PartitionRead]:
    """The partitions that read records, in request order, and the chunks they need."""
    reads: list[PartitionRead] = []
    for row in slots:
        for slot in row:
            if isinstance(slot, tuple):
                known = infos[len(reads)]
                chunks = known.chunks if known is not None and not known.error_code else ()
                _, offset, max_bytes = slot
                reads.append(PartitionRead(chunks, offset, max_bytes))
    return reads


def _answer(
    partition: int,
    key: Key,
    found: PartitionFetchInfo | None,
    result: FetchSelection | Exception,
    batch_error: tuple[ErrorCode, str] | None,
    committed: bool,
    watermarks: dict[Key, int],
) -> tuple[PartitionData, int]:
    """One partition's answer and the bytes of records it carries; records the partition's
    high watermark in `watermarks` when it was read."""
    if found is None:  # metadata failed and the cache could not answer
        code = batch_error[0] if batch_error is not None else ErrorCode.kafka_storage_error
        return _pdata(partition, code), 0
    info = found
    if info.error_code:
        code = ErrorCode(info.error_code)
        return _pdata(partition, code, hwm=info.high_watermark, log_start=info.log_start_offset), 0
    watermarks[key] = info.high_watermark
    if isinstance(result, Exception):
        if isinstance(result, ChunkReadError):
            log.error(
                "fetch of %s: refusing corrupt or inconsistent data in object %s at byte %d: %s",
                key,
                result.object_key,
                result.position,
                result,
            )
        else:
            log.warning("fetch read of %s failed: %s", key, error_of(result)[1])
        code = ErrorCode.kafka_storage_error
        return _pdata(partition, code, hwm=info.high_watermark, log_start=info.log_start_offset), 0
    records = result.records
    if committed and info.last_stable_offset >= 0:
        records = trim_below(records, info.last_stable_offset)
    answer = _pdata(
        partition,
        ErrorCode.none,
        hwm=info.high_watermark,
        log_start=info.log_start_offset,
        records=records,
        info=info,
    )
    return answer, len(records)


async def _read_records(
    ctx: AgentContext,
    store: AsyncObjectStore,
    reads: list[PartitionRead],
    budget: int,
    to_end_bytes: int = 0,
) -> list[FetchSelection | Exception]:
    if not any(r.locations for r in reads):
        return [FetchSelection(b"", r.fetch_offset, 0) for r in reads]
    readahead = 0
    is_cached = None
    if isinstance(store, RangeCache):
        # Read-ahead only pays when the bytes are kept; never more than half the cache.
        readahead = min(ctx.config.fetch_readahead_bytes, store.max_bytes // 2)
        is_cached = lambda k: store.contains(*k)  # noqa: E731
    return await read_fetch(
        store,
        reads,
        budget,
        readahead_bytes=readahead,
        readahead_gap_bytes=ctx.config.fetch_coalesce_gap_bytes,
        is_cached=is_cached,
        verify_crc=ctx.config.fetch_verify_crc,
        to_end_bytes=to_end_bytes,
    )


def _first_fetch_to_end_bytes(ctx: AgentContext, request: Request) -> int:
    """`fetch_first_read_object_bytes` for a connection's first Fetch, else 0.

    A consumer's first Fetch often names only the partitions that were ready first (seen
    with librdkafka under load: one of 100); the cold files it reads would then be read in
    part, and the next Fetch, naming every partition, would GET the rest of each while the
    first GET is still in flight: two GETs per file. So the first Fetch of a connection
    reads each cold object it touches to the object's end, in one GET (`RangeCache`,
    `to_end_bytes`). Only the first: a consumer of a few partitions of a many-partition
    topic would otherwise read whole files for a chunk each on every fetch. The mark is
    an attribute of the connection's `ConnectionInfo` (per-connection state handlers keep)."""
    connection = request.connection
    if getattr(connection, _FETCHED_MARK, False):
        return 0
    setattr(connection, _FETCHED_MARK, True)
    return ctx.config.fetch_first_read_object_bytes


_FETCHED_MARK = "_skiff_fetched"  # set on a connection by its first Fetch


async def handle(ctx: AgentContext, request: Request) -> Any:
    started_s = time.perf_counter()
    try:
        request = ctx.quotas.bound_fetch(request)  # client quotas (agent.quota_cache)
        return ctx.quotas.throttle_fetch(request, await _fetch(ctx, request))
    finally:  # an error answer took its time too
        FETCH_LATENCY.observe(time.perf_counter() - started_s)


def _redirect_zone(ctx: AgentContext, request: Request) -> str | None:
    """The client's zone when this consumer fetch should be sent to an agent of it (KIP-392's
    preferred read replica): the request can carry one (v11+), the client states a zone (a
    rack_id read here, or its client.id: agent.zones), this agent is not in it and the zone
    has ready agents. Else None: served here, as any agent serves any partition."""
    zone_state = request.connection.zone
    if request.api_version < 11:
        return None
    zone_state.saw_rack_id(getattr(request.body, "rack_id", None))
    zone = zone_state.zone
    if zone is None or int(getattr(request.body, "replica_id", -1)) >= 0:
        return None
    agents = ctx.agents
    if zone == agents.self_info.zone or agents.routed_zone(zone) != zone:
        return None
    return zone


def _redirected(ctx: AgentContext, topic: Topic, partition: int, zone: str) -> PartitionData:
    """An answer with no records naming the partition's leader in `zone` as preferred read
    replica (watermarks unknown here, -1: clients keep what they knew and learn them there)."""
    leader = ctx.agents.leaders_for_topic(topic.topic_id, topic.partition_count, zone)[partition]
    answer = _pdata(partition, ErrorCode.none, records=b"")
    return dataclasses.replace(answer, preferred_read_replica=BrokerId(leader))


def _slots(
    ctx: AgentContext, request: Request, topics: dict[str, Topic]
) -> list[list[tuple[Key, int, int] | PartitionData]]:
    """Per requested partition: its answer when it is known without reading (refused,
    unknown, sent to its zone), else (key, fetch offset, max bytes) to read."""
    redirect_zone = _redirect_zone(ctx, request)
    slots: list[list[tuple[Key, int, int] | PartitionData]] = []
    for t in request.body.topics:
        topic = topics.get(t.topic)
        allowed = authorized(ctx, request, Op.READ, Resource.TOPIC, t.topic)
        row: list[tuple[Key, int, int] | PartitionData] = []
        for p in t.partitions:
            if not allowed:  # empty records, not null: librdkafka refuses a null record set
                row.append(_pdata(p.partition, ErrorCode.topic_authorization_failed, records=b""))
            elif topic is None or not 0 <= p.partition < topic.partition_count:
                row.append(_pdata(p.partition, ErrorCode.unknown_topic_or_partition))
            elif redirect_zone is not None:
                row.append(_redirected(ctx, topic, int(p.partition), redirect_zone))
            else:
                key = (topic.topic_id, int(p.partition))
                max_bytes = min(max(int(p.partition_max_bytes), 0), ctx.config.max_partition_fetch_bytes)
                row.append((key, int(p.fetch_offset), max_bytes))
        slots.append(row)
    return slots


async def _fetch(ctx: AgentContext, request: Request) -> Any:
    body = request.body
    session_id = int(getattr(body, "session_id", 0))
    if session_id != 0:
        return FetchResponse(
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.fetch_session_id_not_found,
            session_id=i32(0),
            responses=(),
        )
    names = [t.topic for t in body.topics]
    try:
        topics = await ctx.topics.get_by_name(names)
    except METADATA_ERRORS as exc:
        code, _ = error_of(exc)
        if code == ErrorCode.unknown_server_error:
            raise
        return FetchResponse(
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.none,
            session_id=i32(0),
            responses=tuple(
                FetchableTopicResponse(
                    topic=t.topic,
                    partitions=tuple(
                        _pdata(p.partition, ErrorCode.kafka_storage_error) for p in t.partitions
                    ),
                )
                for t in body.topics
            ),
        )
    slots = _slots(ctx, request, topics)
    answers, total, watermarks = await _read_once(
        ctx, body, topics, slots, _first_fetch_to_end_bytes(ctx, request)
    )
    max_wait_ms = min(int(body.max_wait.total_seconds() * 1000), ctx.config.fetch_max_wait_ms_cap)
    min_bytes = max(int(body.min_bytes), 1)
    if total < min_bytes and max_wait_ms > 0 and watermarks:
        watch = ctx.parts.commit_watch
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000.0
        while total < min_bytes and watermarks:
            remaining_ms = int((deadline - loop.time()) * 1000)
            if remaining_ms <= 0 or not await watch.wait(watermarks, remaining_ms):
                break
            answers, total, watermarks = await _read_once(ctx, body, topics, slots)
    responses = tuple(
        FetchableTopicResponse(topic=t.topic, partitions=tuple(a))
        for t, a in zip(body.topics, answers, strict=True)
    )
    # __consumer_offsets is not in the topics table: its partitions, answered unknown above
    # (after the READ check), are served from metadata's offsets log
    responses = await consumer_offsets.serve_fetch(ctx, body, responses)
    return FetchResponse(
        throttle_time=NO_THROTTLE, error_code=ErrorCode.none, session_id=i32(0), responses=responses
    )


ACCESS = requires(item(on(RT.TOPIC, Op.READ), TOPIC_DENIED))

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
