"""Validate a produced RecordBatch v2 record by record, as Kafka's LogValidator does.

A batch whose CRC is right can still lie: a recordsCount that is not the number of records,
a record length that does not match its fields, offset deltas that repeat or skip, a
lastOffsetDelta that disagrees with them, compressed records that are garbage or a
decompression bomb. Stored verbatim, such a batch stalls every consumer at its offset for
good, so a broker must refuse it before acking. `validate_produced_batch` runs after
`record_decode.validate_batch` (magic, lengths, CRC) and checks, in Kafka's order and with
its error classes (the agent maps them to error codes):

batch (Kafka's `validateBatch`), `InvalidRecordError` (INVALID_RECORD):
  recordsCount > 0 and lastOffsetDelta = recordsCount - 1; not a control batch; a batch with
  a producer id has a baseSequence >= 0.
records (DefaultRecord.readFrom and the batch iterator):
  the records decompress (`CorruptRecordsError`, CORRUPT_MESSAGE, also for output past
  `max_decompressed_bytes`: never more is allocated), and walk exactly: recordsCount records,
  each one's fields filling exactly its length (null key/value = -1, no other negative
  length, header keys non-null), no bytes left over (`InvalidRecordError`); offset deltas are
  exactly 0, 1, ..., recordsCount - 1 (what producers write; Kafka rewrites other deltas,
  Skiff stores batches verbatim so it refuses them: INVALID_RECORD).
per record (Kafka's `validateRecord`):
  a compacted topic needs keys (`InvalidRecordError`: "Compacted topic cannot accept message
  without key"); timestamps (`InvalidTimestampError`, INVALID_TIMESTAMP): the producer may not
  set LogAppendTime in the batch attributes, and for a CreateTime topic every record's
  timestamp (other than -1, no timestamp) lies within [now - before_max_ms, now + after_max_ms]
  (`message.timestamp.before.max.ms` / `.after.max.ms`, each falling back to
  `message.timestamp.difference.max.ms` when left at its default, as Kafka 3.6+ does).

Which record: an error that is a record's fault carries `record_errors`, (batch index,
message) pairs, which the agent returns as Produce v8's `record_errors` (KIP-467). A malformed
record (length, offset delta, a field running past the batch) is named alone: the walk stops
there, since nothing after it can be located. Keyless records on a compacted topic and
timestamps out of range are all named, each with Kafka's message, and the error's message is
Kafka's ("One or more records have been rejected due to ..."). Faults of the batch as a whole
(its header's counts, bytes left after the records, compression) name no record.

It returns the batch's largest record timestamp, which Kafka writes into the header's
maxTimestamp (the agent does the same when a producer's header disagrees), and
`validated_timestamps` also the smallest, which metadata keeps per chunk so that a query with
an upper time bound skips chunks (spark/pushdown.py). Kafka's header has no minimum and its
baseTimestamp is the first record's, not the smallest (deltas may be negative), so the walk
reports whether any delta is negative: the base is the minimum when none is, and a second
pass finds it when one is (producers that reorder timestamps within a batch; rare).

Speed: this is the produce hot path. `walk_records` runs the compiled twin of the walk
(`skiff.fileformat._speedups`, fileformat/_speedups.c, built by the normal install) when it is
there: it only accepts, and whatever it refuses is walked again here to raise the error, so
this module stays the one statement of the rules (tests/unit/test_speedups.py runs both on
one corpus of valid and malformed batches). The pure-Python walk (about 0.7 us per record in
CPython 3.11 on the benchmark machine; see docs/benchmarks.md) reads each record's varints inline (one-
and two-byte forms without a call; longer ones by `fileformat.varint.read_uvarint`), compares offset deltas and lengths in zigzag form, never
slices a key or value, and walks uncompressed batches in place in the request's bytes.
Timestamp bounds take a second pass, only on topics that set them (by default none does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NoReturn

from skiff.fileformat import codecs
from skiff.fileformat.batch_header import (
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_MASK,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    Compression,
    RecordBatchError,
)
from skiff.fileformat.varint import read_uvarint as _uvarint

__all__ = [
    "NO_TIMESTAMP",
    "UNBOUNDED_MS",
    "CorruptRecordsError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "RecordErrors",
    "Timestamps",
    "timestamp_bounds_ms",
    "validate_produced_batch",
    "validated_timestamps",
    "walk_records",
]

NO_TIMESTAMP = -1
UNBOUNDED_MS = 2**63 - 1
"""Long.MAX_VALUE: the default of the timestamp difference configs (no bound)."""


RecordErrors = tuple[tuple[int, str], ...]
"""(batch index, message) per rejected record: Produce v8's `record_errors` (KIP-467)."""

_SHOWN_RECORD_ERRORS = 3  # Kafka's message lists at most the first three


class InvalidRecordError(RecordBatchError):
    """A batch or record that contradicts the format or Kafka's produce rules (INVALID_RECORD).

    `record_errors` names the rejected records when the fault is a record's, empty when it
    is the batch's (its header, or bytes that are not records at all).
    """

    def __init__(self, message: str, position: int | None = None, record_errors: RecordErrors = ()) -> None:
        super().__init__(message, position)
        self.record_errors = record_errors


class CorruptRecordsError(RecordBatchError):
    """Compressed records that cannot be decompressed, or decompress past the cap (CORRUPT_MESSAGE)."""


class InvalidTimestampError(RecordBatchError):
    """A record timestamp outside the topic's bounds, or a producer-set LogAppendTime (INVALID_TIMESTAMP).

    `record_errors` as for `InvalidRecordError` (every record out of range).
    """

    def __init__(self, message: str, position: int | None = None, record_errors: RecordErrors = ()) -> None:
        super().__init__(message, position)
        self.record_errors = record_errors


class _BadRecord(ValueError):
    """Raised by `_walk`: record `index` is malformed (`reason`), or has no key where one is required."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(reason)
        self.index = index
        self.reason = reason


_NO_KEY = "no key"


def _records_rejected(errors: RecordErrors) -> str:
    """Kafka's INVALID_RECORD message for record errors (LogValidator.processRecordErrors)."""
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:_SHOWN_RECORD_ERRORS])
    return (
        f"One or more records have been rejected due to {len(errors)} record errors in total, and only"
        f" showing the first three errors at most: [{shown}]"
    )


def timestamp_bounds_ms(before_max_ms: int, after_max_ms: int, difference_max_ms: int) -> tuple[int, int]:
    """(before, after) bounds as Kafka 3.6+ resolves them: each falls back to the difference."""
    before = before_max_ms if before_max_ms != UNBOUNDED_MS else difference_max_ms
    after = after_max_ms if after_max_ms != UNBOUNDED_MS else difference_max_ms
    return before, after


def _skip_headers(data: bytes, pos: int, zz_count: int) -> int:
    """Walk a record's headers (the rare case); `zz_count` is the zigzag-encoded count."""
    if zz_count & 1:
        raise ValueError(f"header count {(zz_count >> 1) ^ -1}")
    for _ in range(zz_count >> 1):
        v, pos = _uvarint(data, pos, 5)
        if v & 1:
            raise ValueError(f"header key length {(v >> 1) ^ -1}")
        pos += v >> 1
        v, pos = _uvarint(data, pos, 5)
        if v & 1:
            if v != 1:
                raise ValueError(f"header value length {(v >> 1) ^ -1}")
        else:
            pos += v >> 1
    return pos


def _walk(data: bytes, pos: int, count: int, keys_required: bool) -> tuple[int, bool]:
    """Walk `count` records from `pos` to the end of `data`: the largest zigzag timestamp delta,
    and whether any delta is negative (odd in zigzag form: then the batch's base timestamp is
    not a lower bound of its records' and `_timestamp_deltas` finds the smallest).

    Raises `_BadRecord` (the first bad record's index and what is wrong with it; reason
    `_NO_KEY` for a keyless record when `keys_required`), or ValueError when the records and
    the declared count disagree (bytes left over, or fewer records: the batch's fault).
    `data` must end where the records end: a record that runs past it then fails on a read
    (IndexError, caught once around the loop: free in CPython 3.11) or on the final position
    check, so no per-record end test is needed. Varints are read inline in their one- and
    two-byte forms, and compared in zigzag form where that is enough: offset delta i is 2i, a length of -1 is
    1, odd means negative. The timestamp deltas are compared in zigzag form too: that keeps the
    order of non-negative deltas, so an even result is the largest delta times two; an odd one
    (a negative delta encoded larger than every other) needs `_timestamp_deltas`.
    """
    max_zz = -1
    odd = 0  # the OR of every zigzag delta: bit 0 set iff some delta is negative
    uvarint = _uvarint
    expected = 0  # zigzag of record i's offset delta i
    first = pos
    i = 0
    try:
        for i in range(count):
            # length (varint)
            v = data[pos]
            if v < 0x80:
                pos += 1
            else:
                v2 = data[pos + 1]
                if v2 < 0x80:
                    v = (v & 0x7F) | (v2 << 7)
                    pos += 2
                else:
                    v, pos = uvarint(data, pos, 5)
            if v & 1:
                raise _BadRecord(i, f"record {i} has length {(v >> 1) ^ -1}")
            rec_end = pos + (v >> 1)
            # attributes (int8, unused), then timestampDelta (varlong)
            v = data[pos + 1]
            if v < 0x80:
                pos += 2
            else:
                v2 = data[pos + 2]
                if v2 < 0x80:
                    v = (v & 0x7F) | (v2 << 7)
                    pos += 3
                else:
                    v, pos = uvarint(data, pos + 1, 10)
            if v > max_zz:
                max_zz = v
            odd |= v
            # offsetDelta (varint): must be i, i.e. zigzag 2i
            v = data[pos]
            if v < 0x80:
                pos += 1
            else:
                v2 = data[pos + 1]
                if v2 < 0x80:
                    v = (v & 0x7F) | (v2 << 7)
                    pos += 2
                else:
                    v, pos = uvarint(data, pos, 5)
            if v != expected:
                raise _BadRecord(i, f"record {i} has offset delta {(v >> 1) ^ -(v & 1)}, expected {i}")
            expected += 2
            # key (varint length, -1 = null)
            v = data[pos]
            if v == 1:
                pos += 1
                if keys_required:
                    raise _BadRecord(i, _NO_KEY)
            else:
                if v < 0x80:
                    pos += 1
                else:
                    v2 = data[pos + 1]
                    if v2 < 0x80:
                        v = (v & 0x7F) | (v2 << 7)
                        pos += 2
                    else:
                        v, pos = uvarint(data, pos, 5)
                if v & 1:
                    raise _BadRecord(i, f"record {i} has key length {(v >> 1) ^ -1}")
                pos += v >> 1
            # value (varint length, -1 = null)
            v = data[pos]
            if v < 0x80:
                pos += 1
            else:
                v2 = data[pos + 1]
                if v2 < 0x80:
                    v = (v & 0x7F) | (v2 << 7)
                    pos += 2
                else:
                    v, pos = uvarint(data, pos, 5)
            if v & 1:
                if v != 1:
                    raise _BadRecord(i, f"record {i} has value length {(v >> 1) ^ -1}")
            else:
                pos += v >> 1
            # headers (varint count)
            if data[pos]:
                v, pos = uvarint(data, pos, 5)
                pos = _skip_headers(data, pos, v)
            else:
                pos += 1
            if pos != rec_end:
                raise _BadRecord(i, f"record {i}'s fields do not fill its length")
    except IndexError:
        if _record_start(data, first, i) >= len(data):  # no record i at all: the count lies
            raise ValueError(f"the batch holds {i} records, its header declares {count}") from None
        raise _BadRecord(i, f"record {i} runs past the end of the batch") from None
    except _BadRecord:
        raise
    except ValueError as exc:  # a varint too long
        raise _BadRecord(i, f"record {i} has a {exc}") from None
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} bytes left after the {count} records the header declares")
    return max_zz, bool(odd & 1)


def _load_compiled_walk() -> Callable[[bytes, int, int, bool], tuple[int, bool] | None] | None:
    """The compiled twin of `_walk` (fileformat/_speedups.c, built by the normal install), or
    None when the install had no C compiler: then the pure-Python walk runs alone."""
    try:
        from skiff.fileformat._speedups import walk
    except ImportError:
        return None
    return walk


_compiled_walk = _load_compiled_walk()


def walk_records(data: bytes, pos: int, count: int, keys_required: bool) -> tuple[int, bool]:
    """`_walk`, by its compiled twin when it is installed: that one answers only for batches
    `_walk` accepts (with the same result) and None for any other, which `_walk` then walks
    again to raise its exact error. So every rule and message stays here, in Python."""
    if _compiled_walk is not None:
        walked: tuple[int, bool] | None = _compiled_walk(data, pos, count, keys_required)
        if walked is not None:
            return walked
    return _walk(data, pos, count, keys_required)


def _record_start(data: bytes, pos: int, index: int) -> int:
    """Where record `index` starts, the records before it being well formed (the error path)."""
    for _ in range(index):
        length, pos = _uvarint(data, pos, 5)
        pos += length >> 1
    return pos


def _timestamp_deltas(data: bytes, pos: int, count: int) -> Iterator[int]:
    """Each record's timestamp delta, for records `_walk` accepted (lengths and deltas only)."""
    for _ in range(count):
        length, pos = _uvarint(data, pos, 5)
        v, _ = _uvarint(data, pos + 1, 10)
        yield (v >> 1) ^ -(v & 1)
        pos += length >> 1


def _keyless(data: bytes, pos: int, count: int) -> list[int]:
    """The indexes of the records without a key, for records `_walk` accepted (the error path)."""
    out = []
    for i in range(count):
        length, pos = _uvarint(data, pos, 5)
        end = pos + (length >> 1)
        _, p = _uvarint(data, pos + 1, 10)  # timestamp delta
        _, p = _uvarint(data, p, 5)  # offset delta
        if data[p] == 1:  # key length -1
            out.append(i)
        pos = end
    return out


def _refuse_keyless(data: bytes, start: int, count: int, where: str, position: int) -> NoReturn:
    """A compacted topic's batch with a keyless record: the batch is refused with every keyless
    record named, as Kafka's validator does, unless it is malformed as well (that wins)."""
    try:
        _walk(data, start, count, False)
    except _BadRecord as bad:
        raise InvalidRecordError(f"{where}: {bad.reason}", position, ((bad.index, bad.reason),)) from None
    except ValueError as exc:
        raise InvalidRecordError(f"{where}: {exc}", position) from None
    errors = tuple(
        (i, "Compacted topic cannot accept message without key") for i in _keyless(data, start, count)
    )
    raise InvalidRecordError(_records_rejected(errors), position, errors)


def validate_produced_batch(
    buf: bytes,
    position: int,
    header: BatchHeader,
    *,
    now_ms: int,
    compacted: bool = False,
    log_append_time: bool = False,
    timestamp_before_max_ms: int = UNBOUNDED_MS,
    timestamp_after_max_ms: int = UNBOUNDED_MS,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> int:
    """`validated_timestamps`' largest record timestamp (what the header's maxTimestamp must be)."""
    return validated_timestamps(
        buf,
        position,
        header,
        now_ms=now_ms,
        compacted=compacted,
        log_append_time=log_append_time,
        timestamp_before_max_ms=timestamp_before_max_ms,
        timestamp_after_max_ms=timestamp_after_max_ms,
        max_decompressed_bytes=max_decompressed_bytes,
    )[1]


# A batch's (smallest, largest) record timestamp, in ms: a plain tuple, as a NamedTuple costs
# a visible share of a one-record batch's validation (bench/produce_validation.py).
Timestamps = tuple[int, int]


def _check_header(header: BatchHeader, where: str, position: int) -> None:
    """Kafka's `validateBatch` and the producer's timestamp type (see module doc)."""
    count = header.records_count
    if count <= 0 or header.last_offset_delta != count - 1:
        raise InvalidRecordError(
            f"{where}: {count} records with lastOffsetDelta {header.last_offset_delta}; a producer"
            " must send recordsCount > 0 and lastOffsetDelta = recordsCount - 1",
            position,
        )
    if header.attributes & CONTROL_MASK:
        raise InvalidRecordError(f"{where}: clients are not allowed to write control records", position)
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecordError(
            f"{where}: invalid sequence number {header.base_sequence} with producerId {header.producer_id}",
            position,
        )
    if header.attributes & TIMESTAMP_TYPE_MASK:
        raise InvalidTimestampError(
            f"{where}: invalid timestamp type; a producer should not set the timestamp type to LogAppendTime",
            position,
        )


def _check_timestamp_range(
    data: bytes, start: int, count: int, base: int, bounds: tuple[int, int], where: str, position: int
) -> None:
    """Every record timestamp (other than -1) within the inclusive `bounds`, or
    `InvalidTimestampError` naming each one outside them."""
    lo, hi = bounds
    errors = tuple(
        (
            i,
            f"Timestamp {base + delta} of message with offset {i} is out of range. The timestamp"
            f" should be within [{lo}, {hi}]",
        )
        for i, delta in enumerate(_timestamp_deltas(data, start, count))
        if base + delta != NO_TIMESTAMP and not lo <= base + delta <= hi
    )
    if errors:  # Kafka's message, with the first record's detail
        raise InvalidTimestampError(
            f"One or more records have been rejected due to invalid timestamp ({where}: {errors[0][1]})",
            position,
            errors,
        )


def validated_timestamps(
    buf: bytes,
    position: int,
    header: BatchHeader,
    *,
    now_ms: int,
    compacted: bool = False,
    log_append_time: bool = False,
    timestamp_before_max_ms: int = UNBOUNDED_MS,
    timestamp_after_max_ms: int = UNBOUNDED_MS,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> Timestamps:
    """Check a produced batch whose magic, lengths and CRC were already checked (see module doc).

    Returns the smallest and largest record timestamps (baseTimestamp + the smallest and the
    largest delta; the smallest is the base itself unless a delta is negative, which the walk
    reports, so the exact minimum costs a second pass only then). Raises `InvalidRecordError`,
    `CorruptRecordsError` or `InvalidTimestampError`, each naming the batch's byte `position`.
    """
    count = header.records_count
    where = f"record batch at byte {position}"
    _check_header(header, where, position)
    start = position + BATCH_HEADER_SIZE
    end = position + header.batch_length + 12
    cid = header.attributes & COMPRESSION_MASK
    data: bytes = buf
    if cid == Compression.NONE:
        if end != len(buf):  # the walk wants the records to end with `data` (rare: tests, tools)
            data = bytes(memoryview(buf)[start:end])
            start, end = 0, len(data)
    else:
        try:
            data = codecs.decompress(
                cid, memoryview(buf)[start:end], max_output=max_decompressed_bytes, position=position
            )
        except RecordBatchError as exc:
            raise CorruptRecordsError(str(exc), position) from None
        start, end = 0, len(data)
    if count > (end - start) // 7:  # a record takes at least 7 bytes: refuse before walking
        raise InvalidRecordError(
            f"{where} declares {count} records in {end - start} bytes of records", position
        )
    try:
        max_zz, negative = walk_records(data, start, count, compacted)
    except _BadRecord as bad:
        if bad.reason != _NO_KEY:
            raise InvalidRecordError(f"{where}: {bad.reason}", position, ((bad.index, bad.reason),)) from None
        _refuse_keyless(data, start, count, where, position)
    except ValueError as exc:
        raise InvalidRecordError(f"{where}: {exc}", position) from None
    base = header.base_timestamp
    if not log_append_time and (
        timestamp_before_max_ms != UNBOUNDED_MS or timestamp_after_max_ms != UNBOUNDED_MS
    ):
        lo = now_ms - timestamp_before_max_ms
        _check_timestamp_range(
            data, start, count, base, (lo, now_ms + timestamp_after_max_ms), where, position
        )
    if negative:  # a negative delta: compare them all as numbers
        deltas = list(_timestamp_deltas(data, start, count))
        return base + min(deltas), base + max(deltas)
    return base, base + (max_zz >> 1)
