"""Planning a file commit: assigning offsets to its batches, in memory. Pure (no I/O).

The service locks the partitions of a commit, loads their state, the producer state of
the idempotent batches and the transactional ids' records of the transactional batches,
and hands them here; `plan_commit` decides every batch's fate in commit order (so that a
retry landing in the same file is a duplicate of the first copy) and returns the rows to
write. Topics are referred to by their index in a `TopicIndex` (sorted topic ids), which
keeps the hot dictionaries keyed by small ints.

A batch's fate, in Kafka's order (UnifiedLog.analyzeAndValidateProducerState): larger
than max.message.bytes -> refused; a duplicate of a cached idempotent batch -> its
original offsets; a transactional data batch whose transaction does not hold it (see
`txn_state.check_produce`) -> refused; an idempotence error -> refused; else stored.
A refused batch gets no offsets and no chunk row (its bytes stay in the file, unread).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from skiff.metadata import configs, errors
from skiff.metadata.commits import idempotence
from skiff.metadata.errors import MESSAGE_TOO_LARGE, NONE, UNKNOWN_SERVER_ERROR, UNKNOWN_TOPIC_OR_PARTITION
from skiff.metadata.transactions import state as txn_state
from skiff.metadata.types import (
    BatchResult,
    BatchSpec,
    ChunkLocation,
    ChunkResult,
    ChunkSpec,
    stored_batch_result,
)

TKey = tuple[int, int]  # (topic index, partition)
PKey = tuple[int, int, int]  # (topic index, partition, producer id)


class TopicIndex:
    """The topics of one commit, sorted by id: index <-> id (and its text form)."""

    def __init__(self, topic_ids: Sequence[uuid.UUID] | set[uuid.UUID]) -> None:
        self.ids = sorted(set(topic_ids))
        self.index = {t: i for i, t in enumerate(self.ids)}
        self.text = [str(t) for t in self.ids]


@dataclass
class PartitionRow:
    log_start_offset: int
    high_watermark: int
    log_append_time: bool  # the topic's message.timestamp.type is LogAppendTime
    max_message_bytes: int


def topic_flags(topic_configs: dict[str, str]) -> tuple[bool, int]:
    """What a commit needs of a topic's configs: (LogAppendTime?, max.message.bytes)."""
    return (
        configs.uses_log_append_time(topic_configs),
        configs.config_int(topic_configs, configs.MAX_MESSAGE_BYTES),
    )


@dataclass
class Run:
    """A contiguous run of accepted batches of one chunk spec: becomes one chunk row."""

    tix: int
    partition: int
    byte_position: int
    byte_length: int
    base_offset: int
    last_offset: int
    record_count: int
    batch_count: int
    max_timestamp: int
    spec_index: int = 0  # which chunk spec of the file (and so which ChunkResult) it belongs to
    min_timestamp: int | None = None  # None once any of its batches' is unknown


@dataclass(frozen=True)
class TxnEvent:
    """A stored batch that opens or ends a producer's transaction in a partition: a
    transactional data batch (`control_type` -1: the transaction is open from `offset` on,
    unless it already was) or a marker (0 ABORT, 1 COMMIT, at `offset`)."""

    key: PKey
    control_type: int
    offset: int


@dataclass
class CommitPlan:
    results: list[ChunkResult]
    runs: list[Run]
    hwms: dict[TKey, int]  # partitions whose high watermark grows -> the new one
    changed: list[PKey] = field(default_factory=list)  # producer entries to write back
    txn_events: list[TxnEvent] = field(default_factory=list)  # in commit order


ProducerStates = dict[PKey, idempotence.ProducerEntry | None]
# The records of the transactional ids of a commit's transactional batches, as read in the
# commit's database transaction (ids without a row are absent).
TxnRecords = dict[str, txn_state.TxnRecord]


def last_seq(b: BatchSpec) -> int:
    return idempotence.increment_sequence(b.base_sequence, b.offset_count - 1)


def producer_keys(
    chunk_specs: Sequence[ChunkSpec], spec_keys: Sequence[TKey], locked: dict[TKey, PartitionRow]
) -> list[PKey]:
    """The (partition, producer) pairs whose state the commit needs."""
    wanted: dict[PKey, None] = {}
    for spec, key in zip(chunk_specs, spec_keys, strict=True):
        if key in locked:
            for b in spec.batches:
                if b.producer_id != idempotence.NO_PRODUCER_ID:
                    wanted[(key[0], key[1], b.producer_id)] = None
    return list(wanted)


def transactional_ids(
    chunk_specs: Sequence[ChunkSpec], spec_keys: Sequence[TKey], locked: dict[TKey, PartitionRow]
) -> list[str]:
    """The transactional ids whose records the commit needs: those of its transactional
    data batches (markers are the coordinator's), in partitions that exist."""
    wanted: dict[str, None] = {}
    for spec, key in zip(chunk_specs, spec_keys, strict=True):
        if key in locked:
            for b in spec.batches:
                if b.transactional_id is not None and b.is_transactional and b.control_type < 0:
                    wanted[b.transactional_id] = None
    return list(wanted)


def txn_refusal(b: BatchSpec, txns: TxnRecords, partition: txn_state.Partition) -> tuple[int, str] | None:
    """Why the transactional data batch `b` may not be stored in `partition` (code,
    message), or None: the rule is `txn_state.check_produce`, on the record of the batch's
    transactional id."""
    if b.transactional_id is None:
        return (
            errors.INVALID_TXN_STATE,
            "a transactional batch needs its Produce request's transactional id",
        )
    return txn_state.check_produce(
        txns.get(b.transactional_id),
        producer_id=b.producer_id,
        epoch=b.producer_epoch,
        partition=partition,
    )


def _unknown(spec: ChunkSpec) -> ChunkResult:
    msg = f"Unknown topic or partition {spec.topic_id}/{spec.partition}"
    return ChunkResult(
        UNKNOWN_TOPIC_OR_PARTITION,
        tuple(BatchResult(UNKNOWN_TOPIC_OR_PARTITION, error_message=msg) for _ in spec.batches),
        msg,
    )


def plan_commit(
    chunk_specs: Sequence[ChunkSpec],
    spec_keys: Sequence[TKey],
    locked: dict[TKey, PartitionRow],
    pstate: ProducerStates,
    now: int,
    txns: TxnRecords | None = None,
) -> CommitPlan:
    """Assign offsets: contiguous per partition from its high watermark, in commit order.
    Updates `pstate` in place for accepted idempotent batches (listed in plan.changed).
    `txns`: the records of the transactional ids of the transactional data batches (see
    `transactional_ids`); a transactional data batch without its record is refused."""
    txns = txns if txns is not None else {}
    next_offset: dict[TKey, int] = {}
    results: list[ChunkResult] = []
    runs: list[Run] = []
    changed: dict[PKey, None] = {}
    txn_events: list[TxnEvent] = []
    no_pid = idempotence.NO_PRODUCER_ID
    for spec_index, (spec, key) in enumerate(zip(chunk_specs, spec_keys, strict=True)):
        prow = locked.get(key)
        if prow is None:
            results.append(_unknown(spec))
            continue
        nxt = next_offset.get(key, prow.high_watermark)
        append_time = now if prow.log_append_time else -1
        log_start = prow.log_start_offset
        batch_results: list[BatchResult] = []
        run: Run | None = None
        run_end = -1  # byte position just past the current run
        part: txn_state.Partition | None = None  # the spec's partition as txn records hold it
        for b in spec.batches:
            pkey: PKey | None = None
            if b.byte_length > prow.max_message_bytes:
                batch_results.append(
                    BatchResult(
                        MESSAGE_TOO_LARGE,
                        error_message=f"batch of {b.byte_length} bytes exceeds max.message.bytes "
                        f"{prow.max_message_bytes}",
                    )
                )
                run = None
                continue
            if b.producer_id != no_pid and b.control_type >= 0:
                pkey = None  # markers carry no sequence: written by the coordinator, never retried as data
            else:
                v: idempotence.Verdict | None = None
                if b.producer_id != no_pid:
                    pkey = (key[0], key[1], b.producer_id)
                    v = idempotence.check(pstate[pkey], b.producer_epoch, b.base_sequence, last_seq(b))
                    if v.duplicate_of is not None:
                        d = v.duplicate_of
                        batch_results.append(
                            BatchResult(NONE, d.base_offset, d.append_time_ms, log_start, duplicate=True)
                        )
                        run = None
                        continue
                if b.is_transactional:
                    if part is None:
                        part = (str(spec.topic_id), spec.partition)
                    refused = txn_refusal(b, txns, part)
                    if refused is not None:
                        batch_results.append(BatchResult(refused[0], error_message=refused[1]))
                        run = None
                        continue
                if v is not None and v.error:
                    batch_results.append(BatchResult(v.error, error_message=v.message))
                    run = None
                    continue
            base = nxt
            last = base + b.offset_count - 1
            nxt = last + 1
            if b.is_transactional and b.producer_id != no_pid:
                txn_events.append(TxnEvent((key[0], key[1], b.producer_id), b.control_type, base))
            if pkey is not None:
                pstate[pkey] = idempotence.record(
                    pstate[pkey],
                    b.producer_epoch,
                    idempotence.CachedBatch(b.base_sequence, last_seq(b), base, last, append_time),
                )
                changed[pkey] = None
            batch_results.append(stored_batch_result(base, append_time, log_start))
            max_ts = now if prow.log_append_time else b.max_timestamp
            # not `now` on LogAppendTime topics: readers see the time the agent wrote into the
            # batch (its header's max, which the agent also sends as the min), a little earlier
            min_ts = b.min_timestamp
            if run is not None and run_end == b.byte_offset:
                run.byte_length += b.byte_length
                run.last_offset = last
                run.record_count += b.record_count
                run.batch_count += 1
                if max_ts > run.max_timestamp:
                    run.max_timestamp = max_ts
                run.min_timestamp = _lower(run.min_timestamp, min_ts)
            else:
                run = Run(
                    key[0],
                    key[1],
                    b.byte_offset,
                    b.byte_length,
                    base,
                    last,
                    b.record_count,
                    1,
                    max_ts,
                    spec_index,
                    min_ts,
                )
                runs.append(run)
            run_end = b.byte_offset + b.byte_length
        next_offset[key] = nxt
        results.append(ChunkResult(NONE, tuple(batch_results)))
    hwms = {k: n for k, n in next_offset.items() if n != locked[k].high_watermark}
    for k, n in hwms.items():
        assert n > locked[k].high_watermark, "the high watermark only grows"
    return CommitPlan(results, runs, hwms, list(changed), txn_events)


def _lower(a: int | None, b: int | None) -> int | None:
    """The smaller of two lower bounds of a run's timestamps; None (unknown) if either is."""
    return None if a is None or b is None else min(a, b)


def with_locations(plan: CommitPlan, object_key: str, chunk_ids: Sequence[int]) -> list[ChunkResult]:
    """The plan's answers with the locations of the chunk rows written for it, `chunk_ids`
    in the order of `plan.runs`: the same values find_chunks will read back (agent files
    hold relative offsets, no bitmap), so that a cache filled from the answer agrees
    with metadata, LogAppendTime timestamps included."""
    by_spec: dict[int, list[ChunkLocation]] = {}
    for run, chunk_id in zip(plan.runs, chunk_ids, strict=True):
        by_spec.setdefault(run.spec_index, []).append(
            ChunkLocation(
                chunk_id=chunk_id,
                object_key=object_key,
                byte_position=run.byte_position,
                byte_length=run.byte_length,
                base_offset=run.base_offset,
                last_offset=run.last_offset,
                record_count=run.record_count,
                max_timestamp=run.max_timestamp,
                min_timestamp=run.min_timestamp,
            )
        )
    return [
        replace(r, locations=tuple(by_spec[i])) if i in by_spec else r for i, r in enumerate(plan.results)
    ]


@dataclass(frozen=True)
class RecordedChunk:
    byte_position: int
    byte_length: int
    base_offset: int


def answer_recommit(
    object_key: str,
    chunk_specs: Sequence[ChunkSpec],
    spec_keys: Sequence[TKey],
    locked: dict[TKey, PartitionRow],
    pstate: ProducerStates,
    recorded: dict[tuple[int, int, int], RecordedChunk],  # (tix, partition, byte_position) -> chunk
    txns: TxnRecords | None = None,
) -> list[ChunkResult]:
    """The answer to a commit of an object key that was committed before (the agent
    retrying after a lost answer), rebuilt from the chunk rows recorded for it: a stored
    batch gets its offset back; a duplicate of a cached idempotent batch its original
    offset; a transactional data batch its transaction refuses now (`txns`, read in this
    transaction) that refusal; any other batch was not stored and gets
    UNKNOWN_SERVER_ERROR (-1)."""
    txns = txns if txns is not None else {}
    results: list[ChunkResult] = []
    for spec, key in zip(chunk_specs, spec_keys, strict=True):
        prow = locked.get(key)
        if prow is None:
            results.append(_unknown(spec))
            continue
        out: list[BatchResult] = []
        cur: RecordedChunk | None = None
        cur_next = -1
        for b in spec.batches:
            r = recorded.get((key[0], key[1], b.byte_offset))
            if r is not None:
                cur, cur_next = r, r.base_offset
            if cur is not None and cur.byte_position <= b.byte_offset < cur.byte_position + cur.byte_length:
                out.append(stored_batch_result(cur_next, -1, prow.log_start_offset))
                cur_next += b.offset_count
                continue
            cur = None
            if b.producer_id != idempotence.NO_PRODUCER_ID:
                entry = pstate.get((key[0], key[1], b.producer_id))
                v = idempotence.check(entry, b.producer_epoch, b.base_sequence, last_seq(b))
                if v.duplicate_of is not None:
                    d = v.duplicate_of
                    out.append(
                        BatchResult(
                            NONE, d.base_offset, d.append_time_ms, prow.log_start_offset, duplicate=True
                        )
                    )
                    continue
            if b.is_transactional and b.control_type < 0:
                # Not stored: refused by the first commit, most likely for the reason it
                # would be refused now (a transaction only moves on: ended, fenced).
                refused = txn_refusal(b, txns, (str(spec.topic_id), spec.partition))
                if refused is not None:
                    out.append(BatchResult(refused[0], error_message=refused[1]))
                    continue
            out.append(
                BatchResult(
                    UNKNOWN_SERVER_ERROR,
                    error_message=f"file {object_key} was already committed; this batch was not stored",
                )
            )
        results.append(ChunkResult(NONE, tuple(out)))
    return results
