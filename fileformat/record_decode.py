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

__all__ = [
    "BatchRunSummary",
    "ControlRecordType",
    "Record",
    "decode_records",
    "iter_records",
    "parse_control_record",
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


def _uvarint_slow(data: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    """Decode an unsigned LEB128 at `pos` (first byte already known to have its high bit set)."""
    result = 0
    shift = 0
    limit = 7 * max_bytes
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= limit:
            raise ValueError(f"varint longer than {max_bytes} bytes")


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
    size = _check_length(header, position, end, None)
    mv = _buffer_view(buf)[position + BATCH_HEADER_SIZE : position + size]
    cid = header.attributes & _COMPRESSION_MASK
    if cid == Compression.NONE:
        return header, bytes(mv)
    if cid > Compression.ZSTD:
        raise CorruptBatchError(
            f"record batch at byte {position} uses unknown compression codec id {cid}", position
        )
    data = codecs.decompress(Compression(cid), mv, max_output=max_decompressed_bytes, position=position)
    return header, data


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
    count = header.records_count
    if count < 0:
        raise CorruptBatchError(f"record batch at byte {position} has recordsCount {count}", position)
    n = len(data)
    if count > n // 7:  # a record takes at least 7 bytes
        raise CorruptBatchError(
            f"record batch at byte {position} declares {count} records in {n} bytes of records", position
        )
    log_append = bool(header.attributes & _TIMESTAMP_TYPE_MASK)
    base_ts = header.base_timestamp
    max_ts = header.max_timestamp
    out: list[Record] = []
    append = out.append
    uvarint = _uvarint_slow
    new_record = tuple.__new__  # what Record(...) does, minus a Python-level call
    pos = 0
    i = 0
    try:
        for i in range(count):  # noqa: B007 - i is used in the error message
            # length
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
            length = (v >> 1) ^ -(v & 1)
            rec_end = pos + length
            if length < 6 or rec_end > n:
                raise ValueError(f"record length {length} with {n - pos} bytes left")
            pos += 1  # attributes
            # timestampDelta (varlong)
            v = data[pos]
            if v < 0x80:
                pos += 1
            else:
                v2 = data[pos + 1]
                if v2 < 0x80:
                    v = (v & 0x7F) | (v2 << 7)
                    pos += 2
                else:
                    v, pos = uvarint(data, pos, 10)
            timestamp = max_ts if log_append else base_ts + ((v >> 1) ^ -(v & 1))
            # offsetDelta
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
            offset_delta = (v >> 1) ^ -(v & 1)
            # key
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
            klen = (v >> 1) ^ -(v & 1)
            if klen >= 0:
                key: bytes | None = data[pos : pos + klen]
                pos += klen
            elif klen == -1:
                key = None
            else:
                raise ValueError(f"key length {klen}")
            # value
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
            vlen = (v >> 1) ^ -(v & 1)
            if vlen >= 0:
                value: bytes | None = data[pos : pos + vlen]
                pos += vlen
            elif vlen == -1:
                value = None
            else:
                raise ValueError(f"value length {vlen}")
            # headers
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
            hcount = (v >> 1) ^ -(v & 1)
            headers: list[tuple[str, bytes | None]] = []
            if hcount:
                if hcount < 0 or hcount > (rec_end - pos) // 2:
                    raise ValueError(f"header count {hcount}")
                for _ in range(hcount):
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
                    hklen = (v >> 1) ^ -(v & 1)
                    if hklen < 0:
                        raise ValueError(f"header key length {hklen}")
                    hkey = data[pos : pos + hklen].decode("utf-8", "surrogateescape")
                    pos += hklen
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
                    hvlen = (v >> 1) ^ -(v & 1)
                    if hvlen >= 0:
                        hval: bytes | None = data[pos : pos + hvlen]
                        pos += hvlen
                    elif hvlen == -1:
                        hval = None
                    else:
                        raise ValueError(f"header value length {hvlen}")
                    headers.append((hkey, hval))
            if pos != rec_end:
                raise ValueError(
                    f"record fields take {pos - rec_end + length} bytes, its length says {length}"
                )
            append(new_record(Record, (offset_delta, timestamp, key, value, headers)))
    except (ValueError, IndexError) as exc:
        if isinstance(exc, IndexError):
            exc = ValueError("record runs past the end of the batch")
        raise CorruptBatchError(
            f"record batch at byte {position}: record {i} of {count} is malformed: {exc}", position
        ) from None
    if pos != n:
        raise CorruptBatchError(
            f"record batch at byte {position}: {n - pos} bytes left after its {count} records", position
        )
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
