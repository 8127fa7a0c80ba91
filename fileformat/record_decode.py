"""The records of a Kafka RecordBatch v2: decompress, decode, control records, full check.

A batch is its 61-byte header (`fileformat.batch_header`) followed by recordsCount
records, the whole run compressed with the batch codec (`fileformat.codecs`) when it is
not "none". Each record (varint = zigzag-encoded signed LEB128, as protobuf's
sint32/sint64)::

    length          varint   bytes of the record after this field
    attributes      int8     unused, 0
    timestampDelta  varlong  record timestamp - baseTimestamp
    offsetDelta     varint   record offset - baseOffset
    keyLength       varint   -1 for a null key
    key             bytes
    valueLength     varint   -1 for a null value
    value           bytes
    headersCount    varint
    headers         headerKeyLength varint, headerKey UTF-8, headerValueLength varint (-1 =
                    null), headerValue bytes; repeated headersCount times

Compaction leaves holes, so offset deltas need not be contiguous (but always strictly
increase, and never exceed lastOffsetDelta).

Header keys are decoded as UTF-8 with ``surrogateescape`` (and encoded back the same way by
`fileformat.record_build`), so a key that is not valid UTF-8 still round-trips byte for byte.

A control batch (attributes: transactional + control) holds one control record: its key is
version int16 + type int16 (`ControlRecordType`); for ABORT/COMMIT markers its value is
version int16 + coordinatorEpoch int32.

This module is the one owner of the record grammar and of the batch-payload rule:
`records_view` / `records_payload` cut a batch's records out (after the 61-byte header, up to
batchLength) and decompress them under an output cap; `decode_records` decodes them into
`Record`s; `scan_records` walks them for a log cleaner (`compactor`), keeping byte positions.
Both walks read each record's fixed part and key with `_record_head`; varints follow `fileformat.varint`.

`validate_batch` (and `summarize_batches`, which calls it) live here rather than with the
header because, with `decode`, the check decodes every record.

No asyncio here; nothing outside `fileformat` is imported.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from enum import IntEnum
from typing import NamedTuple

from skiff.fileformat import codecs
from skiff.fileformat.batch_header import (
    _COMPRESSION_MASK,
    _TIMESTAMP_TYPE_MASK,
    BATCH_HEADER_SIZE,
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    LOG_OVERHEAD,
    BatchHeader,
    Compression,
    CorruptBatchError,
    _buffer_view,
    _check_length,
    _parse_header,
    check_codec,
    check_crc,
    iter_batches,
)
from skiff.fileformat.varint import MAX_VARLONG_BYTES, read_uvarint

__all__ = [
    "BatchRunSummary",
    "ControlRecordType",
    "Record",
    "ScannedRecord",
    "decode_records",
    "iter_records",
    "parse_control_record",
    "records_payload",
    "records_view",
    "scan_records",
    "summarize_batches",
    "validate_batch",
]

_CONTROL_KEY = struct.Struct(">hh")
_TXN_MARKER_VALUE = struct.Struct(">hi")


class ControlRecordType(IntEnum):
    """The ``type`` field of a control record's key (a transaction marker)."""

    ABORT = 0
    COMMIT = 1


class Record(NamedTuple):
    """One record. `timestamp` is absolute (ms); the absolute offset is base_offset + offset_delta."""

    offset_delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = ()


class BatchRunSummary(NamedTuple):
    """What `summarize_batches` learns from a run of consecutive batches."""

    batch_count: int
    record_count: int
    offset_count: int
    """Offsets the run spans: sum of (lastOffsetDelta + 1)."""
    max_timestamp: int
    """-1 for an empty run."""
    size: int


# ---------------------------------------------------------------------------------------------
# records


def records_view(
    buf: bytes | bytearray | memoryview,
    position: int,
    header: BatchHeader,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bytes | memoryview:
    """The records of the batch at `position` whose `header` is known: the bytes after its
    61-byte header up to its batchLength (a view into `buf` when uncompressed), else those
    bytes decompressed with the batch codec, at most `max_decompressed_bytes` of output
    (`fileformat.codecs`). The one place a batch's records payload is cut out and
    decompressed (decode, the cleaner's scans)."""
    mv = _buffer_view(buf)[position + BATCH_HEADER_SIZE : position + header.batch_length + LOG_OVERHEAD]
    cid = header.attributes & _COMPRESSION_MASK
    if cid == Compression.NONE:
        return mv
    if cid > Compression.ZSTD:
        raise CorruptBatchError(
            f"record batch at byte {position} uses unknown compression codec id {cid}", position
        )
    return codecs.decompress(Compression(cid), mv, max_output=max_decompressed_bytes, position=position)


def records_payload(
    buf: bytes | bytearray | memoryview,
    position: int,
    header: BatchHeader,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bytes:
    """`records_view` as bytes (a copy when uncompressed)."""
    data = records_view(buf, position, header, max_decompressed_bytes)
    return data if isinstance(data, bytes) else bytes(data)


def _batch_payload(
    buf: bytes | bytearray | memoryview,
    position: int,
    end: int | None,
    header: BatchHeader | None,
    max_decompressed_bytes: int,
) -> tuple[BatchHeader, bytes]:
    end = len(buf) if end is None else min(end, len(buf))
    if header is None:
        header = _parse_header(buf, position, end)
    _check_length(header, position, end, None)
    return header, records_payload(buf, position, header, max_decompressed_bytes)


def _record_head(data: bytes, pos: int, n: int) -> tuple[int, int, int, int, bytes | None, int]:
    """The record at `pos` up to its key (length, attributes, timestampDelta, offsetDelta,
    key): (record end, timestamp delta, end of the timestampDelta field, offset delta, key or
    None, position after the key). Both walks (`decode_records`, `scan_records`) call it once
    a record: one call is what the per-record budget affords.

    Raises ValueError for a length under 6 or past `n` and for a negative key length other
    than -1, IndexError for a field past the data. Varints are read inline in their one- and
    two-byte forms (a call costs more than the read), `fileformat.varint.read_uvarint` beyond."""
    v = data[pos]
    if v < 0x80:
        pos += 1
    elif data[pos + 1] < 0x80:
        v = (v & 0x7F) | (data[pos + 1] << 7)
        pos += 2
    else:
        v, pos = read_uvarint(data, pos)
    length = (v >> 1) ^ -(v & 1)
    rec_end = pos + length
    if length < 6 or rec_end > n:
        raise ValueError(f"record length {length} with {n - pos} bytes left")
    t = data[pos + 1]  # after the attributes byte: timestampDelta (varlong)
    if t < 0x80:
        pos += 2
    elif data[pos + 2] < 0x80:
        t = (t & 0x7F) | (data[pos + 2] << 7)
        pos += 3
    else:
        t, pos = read_uvarint(data, pos + 1, MAX_VARLONG_BYTES)
    ts_end = pos
    o = data[pos]
    if o < 0x80:
        pos += 1
    else:
        o, pos = read_uvarint(data, pos)
    v = data[pos]  # keyLength (-1: null)
    if v < 0x80:
        pos += 1
    else:
        v, pos = read_uvarint(data, pos)
    if v & 1 and v != 1:
        raise ValueError(f"key length {(v >> 1) ^ -1}")
    key_end = pos if v & 1 else pos + (v >> 1)
    key = None if v & 1 else data[pos:key_end]
    return rec_end, (t >> 1) ^ -(t & 1), ts_end, (o >> 1) ^ -(o & 1), key, key_end


def _nullable_bytes(data: bytes, pos: int, what: str) -> tuple[bytes | None, int]:
    """A varint length (-1 = null) and that many bytes: (the bytes or None, position after)."""
    v = data[pos]
    if v < 0x80:
        pos += 1
    elif data[pos + 1] < 0x80:
        v = (v & 0x7F) | (data[pos + 1] << 7)
        pos += 2
    else:
        v, pos = read_uvarint(data, pos)
    if v & 1:
        if v != 1:
            raise ValueError(f"{what} length {(v >> 1) ^ -1}")
        return None, pos
    end = pos + (v >> 1)
    return data[pos:end], end


def _headers(data: bytes, pos: int, rec_end: int) -> tuple[list[tuple[str, bytes | None]], int]:
    """A record's headers (varint count, then key and nullable value each): (headers, position after).

    Counts and key lengths are read inline in their one-byte form (`fileformat.varint` beyond)."""
    v = data[pos]
    if v < 0x80:
        pos += 1
    else:
        v, pos = read_uvarint(data, pos)
    hcount = (v >> 1) ^ -(v & 1)
    if hcount < 0 or hcount > (rec_end - pos) // 2:
        raise ValueError(f"header count {hcount}")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(hcount):
        v = data[pos]
        if v < 0x80:
            pos += 1
        else:
            v, pos = read_uvarint(data, pos)
        if v & 1:
            raise ValueError(f"header key length {(v >> 1) ^ -1}")
        end = pos + (v >> 1)
        hkey = data[pos:end].decode("utf-8", "surrogateescape")
        hval, pos = _nullable_bytes(data, end, "header value")
        headers.append((hkey, hval))
    return headers, pos


def _check_count(header: BatchHeader, position: int, n: int) -> int:
    count = header.records_count
    if count < 0:
        raise CorruptBatchError(f"record batch at byte {position} has recordsCount {count}", position)
    if count > n // 7:  # a record takes at least 7 bytes
        raise CorruptBatchError(
            f"record batch at byte {position} declares {count} records in {n} bytes of records", position
        )
    return count


def _malformed(exc: Exception, position: int, i: int, count: int) -> CorruptBatchError:
    if isinstance(exc, IndexError):  # a field (or a varint, `TruncatedVarintError`) past the end
        exc = ValueError("record runs past the end of the batch")
    return CorruptBatchError(
        f"record batch at byte {position}: record {i} of {count} is malformed: {exc}", position
    )


def _left_over(data: bytes, pos: int, position: int, count: int) -> None:
    if pos != len(data):
        raise CorruptBatchError(
            f"record batch at byte {position}: {len(data) - pos} bytes left after its {count} records",
            position,
        )


def decode_records(
    buf: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    end: int | None = None,
    header: BatchHeader | None = None,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[Record]:
    """Decompress and decode every record of the batch at `position` (CRC not checked here).

    Raises `RecordBatchError` (position = the batch's) on any malformed record, on fewer or
    more records than recordsCount, on bytes left over after the last record, and (from
    `fileformat.codecs`) on corrupt compressed data or output over `max_decompressed_bytes`.
    """
    header, data = _batch_payload(buf, position, end, header, max_decompressed_bytes)
    n = len(data)
    count = _check_count(header, position, n)
    log_append = bool(header.attributes & _TIMESTAMP_TYPE_MASK)
    base_ts = header.base_timestamp
    max_ts = header.max_timestamp
    out: list[Record] = []
    append = out.append
    head = _record_head
    new_record = tuple.__new__  # what Record(...) does, minus a Python-level call
    pos = 0
    i = 0
    try:
        for i in range(count):  # noqa: B007 - i is used in the error message
            rec_end, ts_delta, _, offset_delta, key, pos = head(data, pos, n)
            v = data[pos]  # valueLength (-1: null), inline as in `_record_head`
            if v < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                v = (v & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                v, pos = read_uvarint(data, pos)
            if v & 1:
                if v != 1:
                    raise ValueError(f"value length {(v >> 1) ^ -1}")
                value = None
            else:
                value = data[pos : pos + (v >> 1)]
                pos += v >> 1
            if data[pos]:
                headers, pos = _headers(data, pos, rec_end)
            else:
                headers = []
                pos += 1
            if pos != rec_end:
                raise ValueError(f"record fields end at {pos}, its length says {rec_end}")
            timestamp = max_ts if log_append else base_ts + ts_delta
            append(new_record(Record, (offset_delta, timestamp, key, value, headers)))
    except (ValueError, IndexError) as exc:
        raise _malformed(exc, position, i, count) from None
    _left_over(data, pos, position, count)
    return out


class ScannedRecord(NamedTuple):
    """One encoded record in a batch's (decompressed) records payload, as `scan_records` finds it."""

    start: int  # first byte (its length varint)
    end: int  # one past its last byte
    ts_end: int  # first byte after its timestampDelta field
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    tombstone: bool  # null value


def scan_records(data: bytes, count: int, position: int = 0) -> list[ScannedRecord]:
    """Walk `count` records of a decompressed payload for the fields a log cleaner needs
    (bounds, offset and timestamp deltas, key, whether the value is null), keeping byte
    positions so records can be copied as encoded; headers are not read.

    Raises CorruptBatchError (at the batch's `position`) on malformed records or when the
    payload holds more or fewer bytes than the records."""
    out: list[ScannedRecord] = []
    append = out.append
    head = _record_head
    new_record = tuple.__new__  # what ScannedRecord(...) does, minus a Python-level call
    n = len(data)
    pos = 0
    i = 0
    try:
        for i in range(count):  # noqa: B007 - i is used in the error message
            start = pos
            end, ts_delta, ts_end, offset_delta, key, pos = head(data, pos, n)
            v = data[pos]  # the value's length: only whether it is null (zigzag 1 = -1)
            if v >= 0x80:
                v, pos = read_uvarint(data, pos)
            if (v & 1 and v != 1) or pos > end:
                raise ValueError(f"value length {(v >> 1) ^ -(v & 1)}")
            append(new_record(ScannedRecord, (start, end, ts_end, offset_delta, ts_delta, key, v == 1)))
            pos = end
    except (ValueError, IndexError) as exc:
        raise CorruptBatchError(
            f"record batch at byte {position}: record {i} of {count} is malformed: {exc}", position
        ) from None
    _left_over(data, pos, position, count)
    return out


def iter_records(
    buf: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    end: int | None = None,
    header: BatchHeader | None = None,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> Iterator[Record]:
    """Iterate the records of the batch at `position` (see `decode_records`)."""
    yield from decode_records(
        buf, position, end=end, header=header, max_decompressed_bytes=max_decompressed_bytes
    )


def parse_control_record(record: Record) -> tuple[ControlRecordType | int, int | None]:
    """Decode a control record (from a batch with `is_control`): (type, coordinator epoch).

    The key is version int16 + type int16; for ABORT/COMMIT markers the value is version
    int16 + coordinatorEpoch int32. Unknown types are returned as plain ints, epoch None.
    """
    key = record.key
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptBatchError(f"control record key {key!r} is not version + type")
    _version, ctype = _CONTROL_KEY.unpack_from(key)
    if ctype not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        return ctype, None
    value = record.value
    epoch = None
    if value is not None and len(value) >= _TXN_MARKER_VALUE.size:
        epoch = _TXN_MARKER_VALUE.unpack_from(value)[1]
    return ControlRecordType(ctype), epoch


# ---------------------------------------------------------------------------------------------
# checking a whole batch


def validate_batch(
    buf: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    end: int | None = None,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    decode: bool = False,
    contiguous: bool = False,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    counts: bool = True,
) -> BatchHeader:
    """Check the batch at `position` and return its header.

    Always: magic 2, batchLength within [49, `max_batch_bytes`] and inside the buffer, a
    known codec, and the CRC-32C; with `counts` (the default) also recordsCount >= 0 and
    lastOffsetDelta >= recordsCount - 1 (the produce path leaves those to
    `fileformat.log_validator`, which reports them as Kafka does, as invalid records).
    With `decode`, also decompresses and decodes every record: exactly recordsCount records,
    offset deltas strictly increasing from >= 0 and none past lastOffsetDelta, no trailing
    bytes. With `contiguous` (what a producer must send), the deltas must be exactly
    0..recordsCount-1 and lastOffsetDelta = recordsCount - 1.
    """
    end = len(buf) if end is None else min(end, len(buf))
    header = _parse_header(buf, position, end)
    _check_length(header, position, end, max_batch_bytes)
    check_crc(buf, position, header)
    count = header.records_count
    if counts:
        if count < 0:
            raise CorruptBatchError(f"record batch at byte {position} has recordsCount {count}", position)
        if header.last_offset_delta < 0 or header.last_offset_delta < count - 1:
            raise CorruptBatchError(
                f"record batch at byte {position} has lastOffsetDelta {header.last_offset_delta}"
                f" for {count} records",
                position,
            )
    check_codec(position, header)
    if decode or contiguous:
        records = decode_records(
            buf, position, end=end, header=header, max_decompressed_bytes=max_decompressed_bytes
        )
        prev = -1
        for i, rec in enumerate(records):
            delta = rec.offset_delta
            if delta <= prev:
                raise CorruptBatchError(
                    f"record batch at byte {position}: record {i} has offset delta {delta} after {prev}",
                    position,
                )
            if contiguous and delta != i:
                raise CorruptBatchError(
                    f"record batch at byte {position}: record {i} has offset delta {delta}, expected {i}",
                    position,
                )
            prev = delta
        if prev > header.last_offset_delta:
            raise CorruptBatchError(
                f"record batch at byte {position}: last record has offset delta {prev},"
                f" past lastOffsetDelta {header.last_offset_delta}",
                position,
            )
        if contiguous and header.last_offset_delta != count - 1:
            raise CorruptBatchError(
                f"record batch at byte {position}: lastOffsetDelta {header.last_offset_delta}"
                f" for {count} contiguous records",
                position,
            )
    return header


def summarize_batches(
    buf: bytes | bytearray | memoryview,
    start: int = 0,
    end: int | None = None,
    *,
    verify: bool = True,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
) -> BatchRunSummary:
    """Count batches, records and offsets of a run (headers only; CRCs checked if `verify`)."""
    end = len(buf) if end is None else min(end, len(buf))
    batches = records = offsets = 0
    max_ts = -1
    for pos, header in iter_batches(buf, start, end, max_batch_bytes=max_batch_bytes):
        if verify:
            validate_batch(buf, pos, end=end, max_batch_bytes=max_batch_bytes)
        batches += 1
        records += header.records_count
        offsets += header.last_offset_delta + 1
        if header.max_timestamp > max_ts:
            max_ts = header.max_timestamp
    return BatchRunSummary(batches, records, offsets, max_ts, end - start)
