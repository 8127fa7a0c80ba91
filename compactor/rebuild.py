"""Rebuilding a RecordBatch that loses records in a clean, as Kafka's cleaner does.

Kafka's rules (`LogCleaner.cleanInto` / `MemoryRecords.filterTo`, KIP-534), which
`compactor.dedup` applies through this module:

- Offsets never change and order is kept. A batch whose records all survive (and that
  needs no delete horizon) is copied byte for byte; only its 8-byte baseOffset may be
  written (agent files store relative offsets; the field is outside the CRC).
- A batch that loses records is rebuilt with its original baseOffset and
  lastOffsetDelta (so removed records leave holes, also at the tail), the same
  partitionLeaderEpoch, producer id/epoch, baseSequence, attributes (codec, timestamp
  type, transactional, control) and compression codec. Surviving records are copied as
  encoded: their offset and timestamp deltas stay relative to the unchanged baseOffset
  and baseTimestamp, so no record is re-encoded. maxTimestamp is recomputed from the
  surviving records for CreateTime batches (Kafka's builder does the same) and kept for
  LogAppendTime. (Kafka's builder would also make the first surviving record's
  timestamp the new baseTimestamp; every record's timestamp is the same either way.)
- Delete horizon (KIP-534): when a clean keeps a tombstone (null value) in a batch that
  has no horizon yet, the batch is rewritten with attribute bit 0x40 set and
  baseTimestamp = now + delete.retention.ms; each record's timestamp delta is then
  re-encoded against the new base, so record timestamps do not change.
- A batch left without records is dropped, except the last data batch of a producer
  (producer id >= 0): Kafka keeps it as an empty batch (header only, baseTimestamp -1,
  maxTimestamp kept) so the producer's last sequence and epoch survive (BatchRetention
  RETAIN_EMPTY).

Records are walked by `fileformat.record_decode.scan_records` (re-exported here with
`records_payload`, which cuts out and decompresses a batch's records), which reads only the
fields the cleaner needs (record bounds, offset and timestamp deltas, key, whether the value
is null) and keeps the byte positions for copying: the record grammar and the batch-payload
rule have one owner, `fileformat`.
"""

from __future__ import annotations

from collections.abc import Sequence

from skiff.fileformat import codecs
from skiff.fileformat.batch_header import COMPRESSION_MASK, DELETE_HORIZON_MASK, BatchHeader, TimestampType
from skiff.fileformat.record_build import frame_batch
from skiff.fileformat.record_decode import ScannedRecord, records_payload, scan_records
from skiff.fileformat.varint import encode_varint

__all__ = [
    "ScannedRecord",
    "empty_batch",
    "rebuild_batch",
    "rebuild_from_kept",
    "records_payload",
    "scan_records",
]


def _assemble(
    header: BatchHeader,
    base_offset: int,
    attributes: int,
    base_timestamp: int,
    max_timestamp: int,
    count: int,
    records: bytes,
) -> bytes:
    codec = attributes & COMPRESSION_MASK
    body = records if codec == 0 or not records else codecs.compress(codec, records)
    if not records:
        attributes &= ~COMPRESSION_MASK  # an empty batch is written uncompressed, as Kafka does
    return frame_batch(
        body,
        base_offset=base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        record_count=count,
    )


def rebuild_batch(
    header: BatchHeader,
    base_offset: int,
    payload: bytes,
    kept: Sequence[ScannedRecord],
    *,
    new_delete_horizon_ms: int | None = None,
) -> bytes:
    """The batch with only the `kept` records (in order), its base offset `base_offset`,
    and, with `new_delete_horizon_ms`, the delete horizon set (see the module doc)."""
    if not kept:
        return empty_batch(header, base_offset)
    old_base_ts = header.base_timestamp
    log_append = header.timestamp_type is TimestampType.LOG_APPEND_TIME
    attributes = header.attributes
    if new_delete_horizon_ms is None:
        base_ts = old_base_ts
        records = b"".join([payload[r.start : r.end] for r in kept])
        parts_ts = [r.timestamp_delta for r in kept]
    else:
        base_ts = new_delete_horizon_ms
        attributes |= DELETE_HORIZON_MASK
        shift = old_base_ts - base_ts
        pieces = []
        parts_ts = []
        for r in kept:
            delta = r.timestamp_delta + shift
            parts_ts.append(delta)
            body = b"\x00" + encode_varint(delta) + payload[r.ts_end : r.end]
            pieces.append(encode_varint(len(body)))
            pieces.append(body)
        records = b"".join(pieces)
    max_ts = header.max_timestamp if log_append else base_ts + max(parts_ts)
    return _assemble(header, base_offset, attributes, base_ts, max_ts, len(kept), records)


def rebuild_from_kept(
    header: BatchHeader, base_offset: int, records: bytes, count: int, max_timestamp_delta: int
) -> bytes:
    """The batch rebuilt from its kept records, already joined as encoded (`count` of them,
    the largest timestampDelta among them given), without a new delete horizon: what
    `rebuild_batch` builds, for callers that select records as columns."""
    if count == 0:
        return empty_batch(header, base_offset)
    log_append = header.timestamp_type is TimestampType.LOG_APPEND_TIME
    base_ts = header.base_timestamp
    max_ts = header.max_timestamp if log_append else base_ts + max_timestamp_delta
    return _assemble(header, base_offset, header.attributes, base_ts, max_ts, count, records)


def empty_batch(header: BatchHeader, base_offset: int) -> bytes:
    """The header-only batch Kafka keeps for a producer's last batch (RETAIN_EMPTY)."""
    attributes = header.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_MASK)
    return _assemble(header, base_offset, attributes, -1, header.max_timestamp, 0, b"")
