"""Kafka RecordBatch v2 (magic 2): parse, check, iterate, build and re-offset.

This is the only on-the-wire record format Skiff accepts (Kafka 0.11+ clients; magic 0 and 1
are refused). All integers are big-endian; a batch is::

    byte  0  baseOffset            int64    first offset of the batch; NOT covered by the CRC
    byte  8  batchLength           int32    bytes after this field (= total size - 12)
    byte 12  partitionLeaderEpoch  int32    not covered by the CRC
    byte 16  magic                 int8     always 2
    byte 17  crc                   uint32   CRC-32C (Castagnoli) of bytes 21 .. end of batch
    byte 21  attributes            int16    bits 0-2 compression (0 none, 1 gzip, 2 snappy,
                                            3 lz4, 4 zstd), bit 3 timestamp type (0 create,
                                            1 log append), bit 4 transactional, bit 5 control,
                                            bit 6 delete horizon set (baseTimestamp is it)
    byte 23  lastOffsetDelta       int32    last offset of the batch - baseOffset
    byte 27  baseTimestamp         int64
    byte 35  maxTimestamp          int64
    byte 43  producerId            int64    -1 if none
    byte 51  producerEpoch         int16
    byte 53  baseSequence          int32
    byte 57  recordsCount          int32
    byte 61  records                        recordsCount records, the whole run compressed
                                            with the batch codec when it is not "none"

and each record (varint = zigzag-encoded signed LEB128, as protobuf's sint32/sint64)::

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

Because baseOffset lies outside the CRC range, `patch_base_offset` can re-offset a batch in
place without recomputing anything: agents store batches with the producer's relative offsets
and fetch patches the absolute ones in. Compaction leaves holes, so offset deltas need not be
contiguous (but always strictly increase, and never exceed lastOffsetDelta).

Header keys are decoded as UTF-8 with ``surrogateescape`` (and encoded back the same way), so a
key that is not valid UTF-8 still round-trips byte for byte through decode and `build_batch`.

No asyncio here; nothing else from the project is imported (codecs live in `fileformat.codecs`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from enum import IntEnum
from typing import NamedTuple

import crc32c as _crc32c

__all__ = [
    "ATTRIBUTES_OFFSET",
    "BATCH_HEADER_SIZE",
    "CRC_OFFSET",
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "LOG_OVERHEAD",
    "MAGIC",
    "BatchHeader",
    "BatchRunSummary",
    "Compression",
    "ControlRecordType",
    "CorruptBatchError",
    "Record",
    "RecordBatchError",
    "TimestampType",
    "TruncatedBatchError",
    "UnsupportedMagicError",
    "build_batch",
    "build_control_batch",
    "decode_records",
    "iter_assigned_offsets",
    "iter_batches",
    "iter_records",
    "parse_control_record",
    "parse_header",
    "patch_base_offset",
    "patch_base_offsets",
    "summarize_batches",
    "validate_batch",
]

MAGIC = 2
BATCH_HEADER_SIZE = 61
"""Bytes before the first record."""
LOG_OVERHEAD = 12
"""baseOffset + batchLength: the bytes not counted in batchLength."""
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
"""The CRC covers the batch from here to its end."""
MAGIC_OFFSET = 16
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49: a batch with no records

DEFAULT_MAX_BATCH_BYTES = 64 * 1024 * 1024
"""Sanity cap on one batch's size on the wire; callers pass the topic's max.message.bytes."""
DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
"""Cap on one batch's records after decompression (zip-bomb guard)."""

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_CONTROL_KEY = struct.Struct(">hh")
_TXN_MARKER_VALUE = struct.Struct(">hi")

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08
_TRANSACTIONAL_MASK = 0x10
_CONTROL_MASK = 0x20
_DELETE_HORIZON_MASK = 0x40

assert _HEADER.size == BATCH_HEADER_SIZE


class Compression(IntEnum):
    """The codec id in attributes bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    """Attributes bit 3."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlRecordType(IntEnum):
    """The ``type`` field of a control record's key (a transaction marker)."""

    ABORT = 0
    COMMIT = 1


class RecordBatchError(ValueError):
    """Bytes that are not a valid RecordBatch v2 (or cannot be decoded).

    `position` is the byte position of the offending batch in the buffer that was being read
    (None when the error is not tied to one position).
    """

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message)
        self.position = position


class UnsupportedMagicError(RecordBatchError):
    """A message set of magic 0 or 1 (or an unknown magic): Skiff only accepts magic 2."""


class TruncatedBatchError(RecordBatchError):
    """The buffer ends inside a batch."""


class CorruptBatchError(RecordBatchError):
    """CRC mismatch or a batch whose contents contradict its header."""


class BatchHeader(NamedTuple):
    """The fixed 61-byte header of a RecordBatch v2, as parsed (see the module docstring).

    A NamedTuple (built from `struct.unpack_from` in one call, ~4x cheaper than a frozen
    dataclass: a header is parsed for every produced batch)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression_id(self) -> int:
        """The raw codec id (0-7); `compression` raises for ids that are not defined."""
        return self.attributes & _COMPRESSION_MASK

    @property
    def compression(self) -> Compression:
        cid = self.attributes & _COMPRESSION_MASK
        try:
            return Compression(cid)
        except ValueError:
            raise CorruptBatchError(f"unknown compression codec id {cid}") from None

    @property
    def timestamp_type(self) -> TimestampType:
        return (
            TimestampType.LOG_APPEND_TIME
            if self.attributes & _TIMESTAMP_TYPE_MASK
            else TimestampType.CREATE_TIME
        )

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & _DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """KIP-534: when bit 6 is set, baseTimestamp is the tombstone delete horizon."""
        return self.base_timestamp if self.attributes & _DELETE_HORIZON_MASK else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0


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
# headers and walking a concatenation of batches


def _buffer_view(buf: bytes | bytearray | memoryview) -> memoryview:
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    return mv


def _parse_header(buf: bytes | bytearray | memoryview, pos: int, end: int) -> BatchHeader:
    avail = end - pos
    if avail < MAGIC_OFFSET + 1:
        raise TruncatedBatchError(
            f"truncated record batch at byte {pos}: {avail} bytes left, a batch header needs {BATCH_HEADER_SIZE}",
            pos,
        )
    magic = buf[pos + MAGIC_OFFSET]
    if magic != MAGIC:
        if magic > 127:
            magic -= 256
        raise UnsupportedMagicError(
            f"record batch at byte {pos} has magic {magic}: only magic 2 (RecordBatch v2, Kafka 0.11+"
            " clients) is supported; message format v0/v1 is not",
            pos,
        )
    if avail < BATCH_HEADER_SIZE:
        raise TruncatedBatchError(
            f"truncated record batch at byte {pos}: {avail} bytes left, a batch header needs {BATCH_HEADER_SIZE}",
            pos,
        )
    return BatchHeader._make(_HEADER.unpack_from(buf, pos))


def parse_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the header of the batch at `position` (magic checked; no CRC or length check)."""
    return _parse_header(buf, position, len(buf))


def _check_length(header: BatchHeader, pos: int, end: int, max_batch_bytes: int | None) -> int:
    length = header.batch_length
    if length < _MIN_BATCH_LENGTH:
        raise CorruptBatchError(
            f"record batch at byte {pos} has batchLength {length}, less than the {_MIN_BATCH_LENGTH}-byte"
            " header",
            pos,
        )
    size = length + LOG_OVERHEAD
    if max_batch_bytes is not None and size > max_batch_bytes:
        raise CorruptBatchError(
            f"record batch at byte {pos} is {size} bytes, over the limit of {max_batch_bytes}", pos
        )
    if pos + size > end:
        raise TruncatedBatchError(
            f"truncated record batch at byte {pos}: batchLength says {size} bytes, only {end - pos} left", pos
        )
    return size


def iter_batches(
    buf: bytes | bytearray | memoryview,
    start: int = 0,
    end: int | None = None,
    *,
    max_batch_bytes: int | None = None,
) -> Iterator[tuple[int, BatchHeader]]:
    """Walk the batches laid end to end in ``buf[start:end]``, yielding (position, header).

    Nothing is copied; positions are absolute in `buf`. Lengths and magic are checked (a
    batch running past `end` raises `TruncatedBatchError` naming its position); CRCs are not
    (see `validate_batch`).
    """
    end = len(buf) if end is None else min(end, len(buf))
    pos = start
    while pos < end:
        header = _parse_header(buf, pos, end)
        size = _check_length(header, pos, end, max_batch_bytes)
        yield pos, header
        pos += size


def single_batch_header(buf: bytes | bytearray | memoryview) -> BatchHeader | None:
    """The header of `buf` when it is exactly one batch of magic 2 whose batchLength is
    at least a header's and spans the buffer, else None (walk it with `iter_batches` for
    the precise error). The produce path's common case, with one header parse."""
    if len(buf) < BATCH_HEADER_SIZE or buf[MAGIC_OFFSET] != MAGIC:
        return None
    header = BatchHeader._make(_HEADER.unpack_from(buf, 0))
    length = header.batch_length
    if length < _MIN_BATCH_LENGTH or length + LOG_OVERHEAD != len(buf):
        return None
    return header


def check_crc(buf: bytes | bytearray | memoryview, position: int, header: BatchHeader) -> None:
    """The CRC-32C check of `validate_batch`, for a batch whose lengths are known to be
    inside `buf` (CorruptBatchError)."""
    computed = _crc32c.crc32c(
        _buffer_view(buf)[position + ATTRIBUTES_OFFSET : position + header.batch_length + LOG_OVERHEAD]
    )
    if computed != header.crc:
        raise CorruptBatchError(
            f"record batch at byte {position} fails its CRC-32C check (stored {header.crc:#010x},"
            f" computed {computed:#010x})",
            position,
        )


def check_codec(position: int, header: BatchHeader) -> None:
    """The codec id check of `validate_batch` (CorruptBatchError for ids 5-7)."""
    if header.attributes & _COMPRESSION_MASK > Compression.ZSTD:
        raise CorruptBatchError(
            f"record batch at byte {position} uses unknown compression codec id {header.compression_id}",
            position,
        )


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


# ---------------------------------------------------------------------------------------------
# offsets


def patch_base_offset(buf: bytearray | memoryview, position: int, new_base_offset: int) -> None:
    """Overwrite the baseOffset of the batch at `position` in place (the CRC stays valid)."""
    if position < 0 or position + BATCH_HEADER_SIZE > len(buf):
        raise TruncatedBatchError(f"no record batch header at byte {position}", position)
    if buf[position + MAGIC_OFFSET] != MAGIC:
        raise UnsupportedMagicError(f"no magic-2 record batch at byte {position}", position)
    _I64.pack_into(buf, position, new_base_offset)


def iter_assigned_offsets(
    buf: bytes | bytearray | memoryview, first_offset: int, start: int = 0, end: int | None = None
) -> Iterator[tuple[int, BatchHeader, int]]:
    """Yield (position, header, assigned base offset) for a run of consecutive batches.

    The first batch gets `first_offset`; each next one the previous base + lastOffsetDelta + 1.
    The headers are as stored (their base_offset is not the assigned one).
    """
    offset = first_offset
    for pos, header in iter_batches(buf, start, end):
        yield pos, header, offset
        offset += header.last_offset_delta + 1


def patch_base_offsets(
    buf: bytearray | memoryview, first_offset: int, start: int = 0, end: int | None = None
) -> int:
    """Rewrite the baseOffsets of a run of batches as `iter_assigned_offsets` assigns them.

    Returns the offset after the run (the next offset to assign).
    """
    offset = first_offset
    pack = _I64.pack_into
    for pos, header in iter_batches(buf, start, end):
        pack(buf, pos, offset)
        offset += header.last_offset_delta + 1
    return offset


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
    from fileformat import codecs  # codecs imports this module; import lazily to break the cycle

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
# building


_SMALL_VARINTS = [bytes([i]) for i in range(128)]


def _uvarint_bytes(z: int) -> bytes:
    if z < 0x80:
        return _SMALL_VARINTS[z]
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def zigzag_varint(v: int) -> bytes:
    """Zigzag + LEB128 of a signed 64-bit value (Kafka's varint/varlong encoding)."""
    return _uvarint_bytes((v << 1) ^ (v >> 63))


_zz = zigzag_varint


_BYTES_LIKE = (bytes, bytearray, memoryview)


def _encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    headers: Iterable[tuple[str, bytes | bytearray | memoryview | None]],
) -> None:
    body = bytearray(b"\x00")  # attributes
    body += _zz(timestamp_delta)
    body += _zz(offset_delta)
    if key is None:
        body += b"\x01"
    elif isinstance(key, _BYTES_LIKE):
        body += _zz(len(key) if not isinstance(key, memoryview) else key.nbytes)
        body += key
    else:
        raise TypeError(f"record key must be bytes or None, not {type(key).__name__}")
    if value is None:
        body += b"\x01"
    elif isinstance(value, _BYTES_LIKE):
        body += _zz(len(value) if not isinstance(value, memoryview) else value.nbytes)
        body += value
    else:
        raise TypeError(f"record value must be bytes or None, not {type(value).__name__}")
    hdrs = list(headers)
    body += _zz(len(hdrs))
    for hkey, hval in hdrs:
        if not isinstance(hkey, str):
            raise TypeError(f"header key must be str, not {type(hkey).__name__}")
        hk = hkey.encode("utf-8", "surrogateescape")
        body += _zz(len(hk))
        body += hk
        if hval is None:
            body += b"\x01"
        elif isinstance(hval, _BYTES_LIKE):
            body += _zz(len(hval) if not isinstance(hval, memoryview) else hval.nbytes)
            body += hval
        else:
            raise TypeError(f"header value must be bytes or None, not {type(hval).__name__}")
    out += _zz(len(body))
    out += body


def build_batch(
    records: Iterable[
        Record | tuple[int, int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]
    ],
    *,
    base_offset: int = 0,
    compression: Compression | int = Compression.NONE,
    compression_level: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: TimestampType | int = TimestampType.CREATE_TIME,
    max_timestamp: int | None = None,
    last_offset_delta: int | None = None,
    delete_horizon_ms: int | None = None,
    base_timestamp: int | None = None,
) -> bytes:
    """Encode records into one RecordBatch v2 with a correct CRC-32C.

    `records` are (offset_delta, timestamp, key, value, headers) with strictly increasing
    offset deltas >= 0; holes are fine (compaction output). Timestamps are absolute.

    - baseTimestamp is the first record's timestamp (as Java writes it) unless
      `delete_horizon_ms` is given (it then becomes baseTimestamp and attribute bit 6 is set)
      or `base_timestamp` overrides it.
    - maxTimestamp is the largest record timestamp unless `max_timestamp` is given (for
      LOG_APPEND_TIME batches pass the append time).
    - lastOffsetDelta is the last record's delta unless `last_offset_delta` (>= it) is given:
      Kafka keeps the original lastOffsetDelta when compaction drops a batch's tail.
    - An empty batch (no records; Kafka keeps these to preserve producer state) is written
      uncompressed and needs `last_offset_delta`.
    - snappy output uses the xerial framing Java clients write (every client reads it).
    """
    recs = [r if isinstance(r, Record) else Record(*r) for r in records]
    codec = Compression(compression)
    count = len(recs)
    if count:
        first_ts = recs[0].timestamp
        base_ts = first_ts if base_timestamp is None else base_timestamp
        if delete_horizon_ms is not None:
            base_ts = delete_horizon_ms
        payload = bytearray()
        prev = -1
        max_ts = first_ts
        for rec in recs:
            delta = rec.offset_delta
            if type(delta) is not int or delta <= prev or delta > _INT32_MAX:
                raise ValueError(
                    f"offset deltas must be strictly increasing ints in [0, 2**31): {delta!r} after {prev}"
                )
            prev = delta
            ts = rec.timestamp
            if not _INT64_MIN <= ts <= _INT64_MAX:
                raise ValueError(f"timestamp {ts} does not fit in int64")
            if ts > max_ts:
                max_ts = ts
            if not _INT64_MIN <= ts - base_ts <= _INT64_MAX:
                raise ValueError(f"timestamp {ts} is too far from baseTimestamp {base_ts}")
            _encode_record(payload, delta, ts - base_ts, rec.key, rec.value, rec.headers)
        lod = prev if last_offset_delta is None else last_offset_delta
        if lod < prev:
            raise ValueError(f"last_offset_delta {lod} is less than the last record's delta {prev}")
        if max_timestamp is not None:
            max_ts = max_timestamp
        if codec is not Compression.NONE:
            from fileformat import codecs  # codecs imports this module; import lazily to break the cycle

            body: bytes | bytearray = codecs.compress(codec, payload, level=compression_level)
        else:
            body = payload
    else:
        if last_offset_delta is None:
            raise ValueError("an empty batch needs last_offset_delta")
        lod = last_offset_delta
        codec = Compression.NONE
        if delete_horizon_ms is not None:
            base_ts = delete_horizon_ms
        else:
            base_ts = (
                base_timestamp
                if base_timestamp is not None
                else (max_timestamp if max_timestamp is not None else -1)
            )
        max_ts = max_timestamp if max_timestamp is not None else base_ts
        body = b""
    if not 0 <= lod <= _INT32_MAX:
        raise ValueError(f"last_offset_delta {lod} out of range")
    attributes = int(codec)
    if int(timestamp_type) == TimestampType.LOG_APPEND_TIME:
        attributes |= _TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= _TRANSACTIONAL_MASK
    if is_control:
        attributes |= _CONTROL_MASK
    if delete_horizon_ms is not None:
        attributes |= _DELETE_HORIZON_MASK
    return frame_batch(
        body,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=lod,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        record_count=count,
    )


def frame_batch(
    body: bytes | bytearray,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    record_count: int,
) -> bytes:
    """A v2 RecordBatch around an encoded (and, per `attributes`, compressed) records body:
    the 61-byte header with batchLength and magic filled in, and the CRC-32C over
    attributes..end. The one place batches are framed (build_batch, the compactor)."""
    out = bytearray(BATCH_HEADER_SIZE)
    out += body
    _HEADER.pack_into(
        out,
        0,
        base_offset,
        len(out) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    _U32.pack_into(out, CRC_OFFSET, _crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def build_control_batch(
    marker: ControlRecordType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker batch (transactional + control, one record) as brokers write them."""
    key = _CONTROL_KEY.pack(0, int(marker))
    value = _TXN_MARKER_VALUE.pack(0, coordinator_epoch)
    return build_batch(
        [Record(0, timestamp, key, value, ())],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=True,
        is_control=True,
    )
