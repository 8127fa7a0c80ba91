"""Produce (api key 0), v3-v9: validate batches, buffer them into the next file, ack after commit.

Per partition of a request:
0. the principal must be allowed WRITE on the topic (TOPIC_AUTHORIZATION_FAILED; Kafka's
   ACLs, agent.authorizer), checked before whether the topic exists;
1. the topic must exist and the partition be in range (UNKNOWN_TOPIC_OR_PARTITION);
   Kafka creates topics on Metadata requests, not on Produce;
2. the records are checked (`validate_batches`) as Kafka's LogValidator checks them: exactly
   one RecordBatch (Kafka: INVALID_RECORD otherwise), magic 2 (older formats get
   UNSUPPORTED_FOR_MESSAGE_FORMAT), lengths inside the request and CRC-32C (CORRUPT_MESSAGE),
   at most the topic's `max.message.bytes` (MESSAGE_TOO_LARGE), no control batches (only
   the transaction coordinator writes markers: INVALID_RECORD); then every record is decoded
   (`fileformat.log_validator`): counts, lengths, offset deltas 0..n-1, keys on compacted
   topics (INVALID_RECORD), compressed data that does not decompress within the cap
   (CORRUPT_MESSAGE), timestamps against `message.timestamp.before.max.ms` /
   `.after.max.ms` / `.difference.max.ms` and a producer-set LogAppendTime (INVALID_TIMESTAMP).
   The partition's answer carries the error message and, when the fault is a record's, the
   rejected records' batch indexes and messages (`record_errors`, KIP-467: written for v8+,
   older versions get the code alone);
3. on topics with broker-side schema validation (`confluent.value.schema.validation` /
   `confluent.key.schema.validation`, `agent.schema_validation`), every non-null value (key)
   must carry a schema id registered under the topic's subject: else INVALID_RECORD with
   each rejected record in `record_errors`; a registry out of reach refuses the batch with the
   retriable REQUEST_TIMED_OUT and the reason. Decided from the agent's cache
   (`agent.schema_cache`) on the synchronous path; a request whose check needs a registry
   lookup takes the awaiting path, which fetches first;
4. for topics with `message.timestamp.type=LogAppendTime` the batch's timestamp type and
   maxTimestamp are set to the agent's receive time and its CRC recomputed, as Kafka does; for
   CreateTime topics a header maxTimestamp that is not the records' largest timestamp is
   corrected the same way (Kafka's `setMaxTimestamp`);
5. a transactional batch carries the request's transactional id to the produce buffer; the
   file commit decides whether it is stored (KIP-890 part 1, in the database transaction
   that assigns its offsets: metadata.transactions.state.check_produce): the partition must be in
   the producer's ongoing transaction at its current epoch, else the partition's answer is
   INVALID_PRODUCER_EPOCH (a fenced or unknown producer) or INVALID_TXN_STATE, with a
   message. Checking here, before the batch waits in the buffer, would cost a metadata
   request per Produce and still let a transaction that ends meanwhile (a timeout, a new
   producer instance) be reopened by the late batch; the answer comes with the commit's
   either way (acks=0 gets none, as in Kafka);
6. the batches go to the produce buffer (`agent.produce_buffer`); acks=0 returns no
   response at once, acks=1/all wait for the file's commit (all is the same as 1: the
   object store is the replication).

Ordering: batches of one connection reach the buffer in request order (a pipelined
idempotent producer depends on it), even though handlers of a connection run
concurrently: each request takes a ticket before its first await and appends only after
the previous request of its connection has appended.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Coroutine, Sequence
from typing import Any, cast

from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.response import (
    BatchIndexAndErrorMessage,
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from kio.static.primitive import TZAware, i32, i64
from skiff.agent.context import AgentContext
from skiff.agent.handlers import (
    METADATA_UNAVAILABLE,
    ConnectionInfo,
    HandlerSpec,
    Op,
    Request,
    Resource,
    authorized,
    error_of,
)
from skiff.agent.handlers import _consumer_offsets as consumer_offsets
from skiff.agent.handlers._access import RT, TOPIC_DENIED, TXN_ID_DENIED, item, on, request, requires
from skiff.agent.metrics import observe_produce_ack
from skiff.agent.produce_buffer import PendingBatch
from skiff.agent.protocol.produce_response import PartitionAnswer
from skiff.agent.quota_cache import as_throttle
from skiff.agent.schema_cache import Unavailable
from skiff.agent.schema_validation import Lookups, topic_rules
from skiff.fileformat.batch_header import (
    LOG_OVERHEAD,
    BatchHeader,
    RecordBatchError,
    UnsupportedMagicError,
    check_codec,
    check_crc,
    iter_batches,
    single_batch_header,
    with_max_timestamp,
)
from skiff.fileformat.log_validator import (
    UNBOUNDED_MS,
    CorruptRecordsError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordErrors,
    timestamp_bounds_ms,
    validated_timestamps,
)
from skiff.metadata.configs import config_int, config_value, is_compacted
from skiff.metadata.types import BatchResult, Topic

log = logging.getLogger(__name__)

API_KEY = 0
MIN_VERSION = 3
MAX_VERSION = 9


class BatchRejected(Exception):
    """A partition's records refused: the error code, its message and the rejected records
    ((batch index, message) pairs: Produce v8+'s `record_errors`, KIP-467)."""

    def __init__(self, code: ErrorCode, message: str, record_errors: RecordErrors = ()) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.record_errors = record_errors


def validate_batches(
    records: bytes,
    *,
    max_message_bytes: int,
    log_append_time_ms: int | None,
    now_ms: int = 0,
    compacted: bool = False,
    timestamp_before_max_ms: int = UNBOUNDED_MS,
    timestamp_after_max_ms: int = UNBOUNDED_MS,
    transactional_id: str | None = None,
) -> list[PendingBatch]:
    """Check a partition's record bytes and describe the batch for the buffer (see module
    doc); `transactional_id` is the request's, kept on a transactional batch."""
    if not records:
        raise BatchRejected(ErrorCode.invalid_record, "produce request carries no records")
    header = single_batch_header(records)  # the common case: one batch, one header parse
    if header is not None:
        pos = 0
    else:
        pos, header = _one_batch(records)
    size = header.batch_length + LOG_OVERHEAD
    if size > max_message_bytes:
        raise BatchRejected(
            ErrorCode.message_too_large,
            f"batch of {size} bytes exceeds the topic's max.message.bytes {max_message_bytes}",
        )
    try:
        check_crc(records, pos, header)
        check_codec(pos, header)
    except RecordBatchError as exc:
        raise BatchRejected(ErrorCode.corrupt_message, str(exc)) from None
    try:
        min_ts, max_ts = validated_timestamps(
            records,
            pos,
            header,
            now_ms=now_ms,
            compacted=compacted,
            log_append_time=log_append_time_ms is not None,
            timestamp_before_max_ms=timestamp_before_max_ms,
            timestamp_after_max_ms=timestamp_after_max_ms,
        )
    except InvalidRecordError as exc:
        raise BatchRejected(ErrorCode.invalid_record, str(exc), exc.record_errors) from None
    except InvalidTimestampError as exc:
        raise BatchRejected(ErrorCode.invalid_timestamp, str(exc), exc.record_errors) from None
    except CorruptRecordsError as exc:
        raise BatchRejected(ErrorCode.corrupt_message, str(exc)) from None
    ts_type = int(header.timestamp_type)
    data = records
    if log_append_time_ms is not None:
        data = with_max_timestamp(records, pos, log_append_time_ms, log_append_time=True, header=header)
        min_ts = max_ts = log_append_time_ms
        ts_type = 1
    elif max_ts != header.max_timestamp:
        data = with_max_timestamp(records, pos, max_ts, header=header)
    return [
        PendingBatch(
            # one batch per partition: keep the request's bytes, no copy
            data=data if (pos == 0 and size == len(data)) else bytes(data[pos : pos + size]),
            offset_count=header.last_offset_delta + 1,
            record_count=header.records_count,
            min_timestamp=min_ts,
            max_timestamp=max_ts,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            timestamp_type=ts_type,
            # opens the producer's transaction in this partition at commit (txn_open)
            is_transactional=header.is_transactional,
            transactional_id=transactional_id if header.is_transactional else None,
        )
    ]


def _one_batch(records: bytes) -> tuple[int, BatchHeader]:
    """The position and header of the only batch in `records`, which `single_batch_header`
    did not accept: walked batch by batch for the precise refusal."""
    try:
        positions = list(iter_batches(records))
    except UnsupportedMagicError as exc:
        raise BatchRejected(
            ErrorCode.unsupported_for_message_format, f"only RecordBatch v2 (magic 2) is accepted: {exc}"
        ) from None
    except RecordBatchError as exc:  # truncated, bad lengths
        raise BatchRejected(ErrorCode.corrupt_message, str(exc)) from None
    if len(positions) != 1:
        raise BatchRejected(
            ErrorCode.invalid_record,
            f"a produce request carries one record batch per partition, this one {len(positions)}",
        )
    return positions[0]


# Parsed topic configs by topic object: Topic values are immutable and the topic cache
# hands out the same object until it reloads one, so parsing once per object is exact
# (the identity check guards against a reused id()); cleared when it grows past the bound.
_RULES_CACHE_MAX = 1024
_rules_cache: dict[int, tuple[Topic, dict[str, Any], bool]] = {}


def _topic_rules(topic: Topic, now_ms: int) -> dict[str, Any]:
    """`validate_batches`' keyword arguments from a topic's configs (once per topic and request)."""
    cached = _rules_cache.get(id(topic))
    if cached is None or cached[0] is not topic:
        cfg = topic.configs
        before_ms, after_ms = timestamp_bounds_ms(
            config_int(cfg, "message.timestamp.before.max.ms"),
            config_int(cfg, "message.timestamp.after.max.ms"),
            config_int(cfg, "message.timestamp.difference.max.ms"),
        )
        static = {
            "max_message_bytes": config_int(cfg, "max.message.bytes"),
            "log_append_time_ms": None,
            "compacted": is_compacted(cfg),
            "timestamp_before_max_ms": before_ms,
            "timestamp_after_max_ms": after_ms,
        }
        if len(_rules_cache) >= _RULES_CACHE_MAX:
            _rules_cache.clear()
        cached = _rules_cache[id(topic)] = (
            topic,
            static,
            config_value(cfg, "message.timestamp.type") == "LogAppendTime",
        )
    _, rules, log_append = cached
    return {**rules, "log_append_time_ms": now_ms} if log_append else rules


# One partition's answer (agent.protocol.produce_response.PartitionAnswer): (index, error
# code, base_offset, log_append_time_ms, log_start_offset, error_message, record_errors).
Answer = PartitionAnswer


def _answer(
    index: int, code: ErrorCode, message: str | None = None, record_errors: RecordErrors = ()
) -> Answer:
    return (index, code.value, -1, -1, -1, message, tuple(record_errors))


def _partition_response(answer: Answer) -> PartitionProduceResponse:
    """An answer as kio's entity (the handler's awaiting path returns a kio response)."""
    index, code, base_offset, log_append_time_ms, log_start_offset, message, record_errors = answer
    # kio's TZAware.parse refuses any datetime with a sub-second part (its predicate wants
    # microsecond == 0, not millisecond precision), so nearly every LogAppendTime would
    # raise; its writer encodes round(timestamp * 1000), exact for a whole-ms datetime.
    append_time = (
        cast(
            TZAware,
            datetime.datetime.fromtimestamp(log_append_time_ms // 1000, tz=datetime.UTC)
            + datetime.timedelta(milliseconds=log_append_time_ms % 1000),
        )
        if log_append_time_ms >= 0
        else None
    )
    # The ints are in range (a request's partition index; offsets from metadata): cast, not
    # i32()/i64(), whose range checks cost ~1.5 us of this response's ~3 us.
    return PartitionProduceResponse(
        index=cast(i32, index),
        error_code=ErrorCode(code),
        base_offset=cast(i64, base_offset),
        log_append_time=append_time,
        log_start_offset=cast(i64, log_start_offset),
        record_errors=tuple(
            BatchIndexAndErrorMessage(batch_index=cast(i32, i), batch_index_error_message=m)
            for i, m in record_errors
        )
        if record_errors
        else (),
        error_message=message,
    )


def _combine(index: int, results: Sequence[BatchResult], append_time_ms: int | None) -> Answer:
    """One partition's answer from its batches' results: the first error, else the first offset."""
    for r in results:
        if r.error_code:
            return (index, r.error_code, -1, -1, -1, r.error_message, ())
    first = results[0]
    return (
        index,
        0,
        first.base_offset,
        append_time_ms if append_time_ms is not None else -1,
        first.log_start_offset,
        None,
        (),
    )


Validated = list[tuple[tuple[int, int], Topic, int, list[PendingBatch], int | None]]


def _check_partitions(
    ctx: AgentContext,
    request: Request,
    topics: dict[str, Topic],
    lookup_error: tuple[ErrorCode, str] | None,
    now_ms: int,
) -> tuple[dict[tuple[int, int], Answer], Validated]:
    """Steps 0-3 of the module doc for every partition: the answers of refused partitions,
    by (topic index, partition index), and the validated batches of the others."""
    body = request.body
    # Kafka's ACLs: a transactional produce needs WRITE on its transactional id
    request_txn_id = getattr(body, "transactional_id", None)
    txn_allowed = not request_txn_id or authorized(
        ctx, request, Op.WRITE, Resource.TRANSACTIONAL_ID, request_txn_id
    )
    txn_id = str(request_txn_id) if request_txn_id else None
    answers: dict[tuple[int, int], Answer] = {}
    validated: Validated = []
    for ti, t in enumerate(body.topic_data):
        topic = topics.get(t.name)
        rules = _topic_rules(topic, now_ms) if topic is not None else {}
        allowed = authorized(ctx, request, Op.WRITE, Resource.TOPIC, t.name)
        for pi, p in enumerate(t.partition_data):
            key = (ti, pi)
            if not txn_allowed:
                answers[key] = _answer(p.index, ErrorCode.transactional_id_authorization_failed)
                continue
            if not allowed:
                answers[key] = _answer(p.index, ErrorCode.topic_authorization_failed)
                continue
            if lookup_error is not None:
                answers[key] = _answer(p.index, lookup_error[0], lookup_error[1])
                continue
            if t.name == consumer_offsets.NAME and 0 <= p.index < consumer_offsets.PARTITIONS:
                answers[key] = _answer(
                    p.index, ErrorCode.invalid_topic_exception, consumer_offsets.WRITE_REFUSED
                )
                continue
            if topic is None or not 0 <= p.index < topic.partition_count:
                answers[key] = _answer(p.index, ErrorCode.unknown_topic_or_partition)
                continue
            try:
                batches = validate_batches(p.records or b"", now_ms=now_ms, transactional_id=txn_id, **rules)
            except BatchRejected as exc:
                answers[key] = _answer(p.index, exc.code, exc.message, exc.record_errors)
                continue
            validated.append((key, topic, p.index, batches, rules["log_append_time_ms"]))
    return answers, validated


def _schemas_now(
    ctx: AgentContext, validated: Validated, answers: dict[tuple[int, int], Answer]
) -> Validated | None:
    """Step 3 of the module doc from the cache alone: the batches that pass (refusals go to
    `answers`), or None when one needs a registry lookup (the awaiting path then decides)."""
    if not any(topic_rules(v[1]) is not None for v in validated):
        return validated  # the usual request: no topic validates schemas
    passed: Validated = []
    for v in validated:
        verdict = ctx.schemas.check(v[1], v[3][0].data)
        if verdict is None:
            passed.append(v)
        elif isinstance(verdict, Lookups):
            return None
        else:
            answers[v[0]] = _answer(v[2], ErrorCode.invalid_record, verdict.message, verdict.record_errors)
    return passed


async def _schemas_fetching(
    ctx: AgentContext, validated: Validated, answers: dict[tuple[int, int], Answer]
) -> Validated:
    """Step 3 of the module doc, fetching from the registry what the cache lacks."""
    if not any(topic_rules(v[1]) is not None for v in validated):
        return validated
    passed: Validated = []
    for v in validated:
        verdict = await ctx.schemas.check_fetching(v[1], v[3][0].data)
        if verdict is None:
            passed.append(v)
        elif isinstance(verdict, Unavailable):
            answers[v[0]] = _answer(v[2], METADATA_UNAVAILABLE, verdict.message)
        else:
            answers[v[0]] = _answer(v[2], ErrorCode.invalid_record, verdict.message, verdict.record_errors)
    return passed


# --- the awaiting path ------------------------------------------------------------------


class Ticket:
    """A request's place in its connection's append order (see the module doc)."""

    __slots__ = ("conn", "previous", "mine")

    def __init__(self, conn: ConnectionInfo) -> None:
        self.conn = conn
        self.previous = conn.produce_tail
        self.mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        conn.produce_tail = self.mine

    def release(self) -> None:
        """Let later requests append (idempotent; also for a handler cancelled before it ran)."""
        if not self.mine.done():
            self.mine.set_result(None)
        if self.conn.produce_tail is self.mine:
            self.conn.produce_tail = None


def begin(ctx: AgentContext, request: Request) -> tuple[Coroutine[Any, Any, Any], Ticket]:
    """Take the request's ordering ticket now and return the handler's coroutine (run it as a
    task; call `ticket.release()` when the task is done, in case it never ran)."""
    ticket = Ticket(request.connection)
    # client quotas (agent.quota_cache): recorded now, as the request is read, so that the
    # connection's next request already waits out a throttle
    throttle_ms = ctx.quotas.record_produce(request)
    return _ticketed(ctx, request, ticket, time.perf_counter(), throttle_ms), ticket


async def handle(ctx: AgentContext, request: Request) -> Any:
    # Take this connection's ordering ticket before the first await (see module doc).
    coro, _ = begin(ctx, request)
    return await coro


async def _ticketed(
    ctx: AgentContext, request: Request, ticket: Ticket, started_s: float, throttle_ms: int = 0
) -> Any:
    try:
        response = await _produce(ctx, request, ticket, throttle_ms)
    finally:
        ticket.release()
    observe_produce_ack(int(request.body.acks), time.perf_counter() - started_s)
    return response


async def _produce(ctx: AgentContext, request: Request, ticket: Ticket, throttle_ms: int) -> Any:
    body = request.body
    buffer = ctx.parts.produce_buffer
    acks = int(body.acks)
    names = [t.name for t in body.topic_data]
    topics: dict[str, Topic] = {}
    lookup_error: tuple[ErrorCode, str] | None = None
    try:
        topics = await ctx.topics.get_by_name(names)
    except Exception as exc:  # boundary: a failed lookup is each partition's error code
        lookup_error = error_of(exc)
    answers, checked = _check_partitions(ctx, request, topics, lookup_error, ctx.clock.wall_ms())
    validated = await _schemas_fetching(ctx, checked, answers)
    if ticket.previous is not None:
        await ticket.previous
    pending: dict[tuple[int, int], tuple[list[asyncio.Future[BatchResult]], int | None]] = {}
    for key, topic, partition, batches, append_time in validated:
        futures = await buffer.append_nowait(topic.topic_id, partition, batches)
        pending[key] = (futures, append_time)
    ticket.mine.set_result(None)  # later requests of this connection may append now

    if acks == 0:
        return None
    for key, (futures, append_time) in pending.items():
        # one batch per partition: await its future itself, not through a gather
        results = [await futures[0]] if len(futures) == 1 else await asyncio.gather(*futures)
        answers[key] = _combine(body.topic_data[key[0]].partition_data[key[1]].index, results, append_time)
    return ProduceResponse(
        responses=tuple(
            TopicProduceResponse(
                name=t.name,
                partition_responses=tuple(
                    _partition_response(answers[(ti, pi)]) for pi in range(len(t.partition_data))
                ),
            )
            for ti, t in enumerate(body.topic_data)
        ),
        throttle_time=as_throttle(throttle_ms),
    )


ACCESS = requires(
    item(on(RT.TOPIC, Op.WRITE), TOPIC_DENIED),
    request(on(RT.TRANSACTIONAL_ID, Op.WRITE), TXN_ID_DENIED, when="transactional records"),
)

SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, access=ACCESS)
