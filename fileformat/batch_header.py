"""Kafka RecordBatch v2 (magic 2): the batch header: parse, check, walk and re-offset.

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

The records after the header are read by `fileformat.record_decode` (their format, their
decoding, and the full check of a batch, which may decode them) and written by
`fileformat.record_build` (encoding records, framing batches).

Because baseOffset lies outside the CRC range, `patch_base_offset` can re-offset a batch in
place without recomputing anything: agents store batches with the producer's relative offsets
and fetch patches the absolute ones in.

The fields inside the CRC range that a broker rewrites (Kafka's `setMaxTimestamp`: the
maxTimestamp, and for LogAppendTime topics the timestamp-type attribute bit) are patched by
`set_max_timestamp` / `with_max_timestamp`, which recompute the CRC-32C after the change
(`rewrite_crc`): the one place header bytes under the CRC are written after framing.

No asyncio here; nothing else from the project is imported.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from enum import IntEnum
from typing import NamedTuple

import crc32c as _crc32c

__all__ = [
    "ATTRIBUTES_OFFSET",
    "BATCH_HEADER_SIZE",
    "COMPRESSION_MASK",
    "CONTROL_MASK",
    "CRC_OFFSET",
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "DELETE_HORIZON_MASK",
    "LOG_OVERHEAD",
    "MAGIC",
    "MAGIC_OFFSET",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_MASK",
    "BatchHeader",
    "Compression",
    "CorruptBatchError",
    "RecordBatchError",
    "TimestampType",
    "TruncatedBatchError",
    "UnsupportedMagicError",
    "check_codec",
    "check_crc",
    "iter_assigned_offsets",
    "iter_batches",
    "parse_header",
    "patch_base_offset",
    "patch_base_offsets",
    "rewrite_crc",
    "set_attribute_bits",
    "set_max_timestamp",
    "single_batch_header",
    "with_max_timestamp",
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
_MAX_TIMESTAMP_OFFSET = 35
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49: a batch with no records

DEFAULT_MAX_BATCH_BYTES = 64 * 1024 * 1024
"""Sanity cap on one batch's size on the wire; callers pass the topic's max.message.bytes."""
DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
"""Cap on one batch's records after decompression (zip-bomb guard)."""

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
_U32 = struct.Struct(">I")

# The attributes bits (module docstring); the underscored names are the older spellings.
COMPRESSION_MASK = _COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = _TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = _TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = _CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = _DELETE_HORIZON_MASK = 0x40

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
    (see `fileformat.record_decode.validate_batch`).
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
    """The CRC-32C check of `record_decode.validate_batch`, for a batch whose lengths are known to be
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
    """The codec id check of `record_decode.validate_batch` (CorruptBatchError for ids 5-7)."""
    if header.attributes & _COMPRESSION_MASK > Compression.ZSTD:
        raise CorruptBatchError(
            f"record batch at byte {position} uses unknown compression codec id {header.compression_id}",
            position,
        )


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
# fields under the CRC: patch, then recompute the CRC


def _header_at(buf: bytearray | memoryview, position: int) -> BatchHeader:
    """The header of the batch at `position`, which must lie wholly inside `buf`."""
    header = _parse_header(buf, position, len(buf))
    _check_length(header, position, len(buf), None)
    return header


def _store_crc(buf: bytearray | memoryview, position: int, size: int) -> None:
    crc = _crc32c.crc32c(_buffer_view(buf)[position + ATTRIBUTES_OFFSET : position + size])
    _U32.pack_into(buf, position + CRC_OFFSET, crc)


def rewrite_crc(buf: bytearray | memoryview, position: int) -> None:
    """Recompute and store the CRC-32C of the batch at `position` (attributes .. end)."""
    _store_crc(buf, position, _header_at(buf, position).size)


def set_attribute_bits(buf: bytearray | memoryview, position: int, bits: int) -> None:
    """Set `bits` in the attributes of the batch at `position` and recompute its CRC.

    Only the timestamp-type bit (0x08) is a broker's to set; the codec bits (0-2) are
    refused: the records would no longer match them."""
    if bits & _COMPRESSION_MASK or bits & ~0xFFFF:
        raise ValueError(f"attribute bits {bits:#x} cannot be set on a framed batch")
    header = _header_at(buf, position)
    _I16.pack_into(buf, position + ATTRIBUTES_OFFSET, header.attributes | bits)
    _store_crc(buf, position, header.size)


def set_max_timestamp(
    buf: bytearray | memoryview,
    position: int,
    max_timestamp_ms: int,
    *,
    log_append_time: bool = False,
    header: BatchHeader | None = None,
) -> None:
    """Rewrite the maxTimestamp of the batch at `position` (and, with `log_append_time`, set
    its LogAppendTime bit), then recompute its CRC: what Kafka's `setMaxTimestamp` does to a
    produced batch (LogAppendTime topics, or a CreateTime header that disagrees with its
    records). `header`, when given, is the batch's as already parsed and length-checked
    (the produce path has it; parsing it again would cost more than the patch)."""
    if header is None:
        header = _header_at(buf, position)
    if log_append_time:
        _I16.pack_into(buf, position + ATTRIBUTES_OFFSET, header.attributes | _TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buf, position + _MAX_TIMESTAMP_OFFSET, max_timestamp_ms)
    _store_crc(buf, position, header.size)


def with_max_timestamp(
    buf: bytes | bytearray | memoryview,
    position: int,
    max_timestamp_ms: int,
    *,
    log_append_time: bool = False,
    header: BatchHeader | None = None,
) -> bytes:
    """A copy of `buf` with `set_max_timestamp` applied to the batch at `position`."""
    out = bytearray(buf)
    set_max_timestamp(out, position, max_timestamp_ms, log_append_time=log_append_time, header=header)
    return bytes(out)
