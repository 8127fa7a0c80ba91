"""Encode records into Kafka RecordBatch v2 batches: records, framing, markers.

The formats are described where they are read: the batch header in
`fileformat.batch_header`, the records and control records in `fileformat.record_decode`.
`build_batch` encodes records (zigzag varints, `fileformat.varint`), compresses them with the
batch codec (`fileformat.codecs`) and frames them; `frame_batch` is the one place a batch
is framed (header, batchLength, magic, CRC-32C over attributes..end), which the compactor
also uses for the batches it rebuilds; `build_control_batch` writes transaction markers.

No asyncio here; nothing outside `fileformat` is imported.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

import crc32c as _crc32c
from skiff.fileformat import codecs
from skiff.fileformat.batch_header import (
    _CONTROL_MASK,
    _DELETE_HORIZON_MASK,
    _HEADER,
    _TIMESTAMP_TYPE_MASK,
    _TRANSACTIONAL_MASK,
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    CRC_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    Compression,
    TimestampType,
)
from skiff.fileformat.record_decode import _CONTROL_KEY, _TXN_MARKER_VALUE, ControlRecordType, Record
from skiff.fileformat.varint import encode_varint

__all__ = [
    "build_batch",
    "build_control_batch",
    "frame_batch",
]

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

_U32 = struct.Struct(">I")


_zz = encode_varint


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
