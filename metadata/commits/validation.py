"""What the metadata service refuses to store: the checks on commits, swaps and offsets.

Metadata is the system's source of truth, and a bad row can make a partition unreadable
for good (a chunk claiming a billion offsets for ten bytes, an object key the store
refuses), so the service checks what it is asked to record, whoever asks (an agent, the
compactor, a tool over HTTP). A malformed file commit or swap is refused as a whole
(INVALID_REQUEST, with a message naming the bad value); offset commits are answered per
partition, with Kafka's codes.

Rules:

- Object keys follow the object store's own key rules (`fileformat.objectstore.base
  .validate_key`: relative, no `.`/`..` segment, no control character, <= 1024 bytes).
- Every value fits its column (int32/int64), and a batch lies inside its file; batches
  of one commit do not overlap.
- Counts fit the bytes. A RecordBatch v2 is at least 61 bytes (its header) and a record
  at least 7 bytes once decompressed (seven one-byte fields). Decompressed, a batch's
  records are at most `DEFAULT_MAX_DECOMPRESSED_BYTES` (the readers' cap), and no codec
  compresses better than `MAX_COMPRESSION_RATIO` (zstd's RLE block: 4 bytes for 128 KiB),
  so a batch of `n` bytes holds at most
  `min(cap, (n - 61) * MAX_COMPRESSION_RATIO) // 7` records. A batch written by an agent
  occupies exactly one offset per record (Kafka's rule for produced batches:
  lastOffsetDelta + 1 == recordCount), so its offset count is bounded the same way.
  A compacted chunk of `batch_count` batches needs `batch_count * 61` bytes and holds at
  most `batch_count` times a batch's records; its offsets may have holes (its bitmap), so
  its span is bounded by its inputs' instead (metadata.compaction.swap).
- Group offsets: >= -1 (-1: "no position", what clients commit to clear one), metadata
  strings of at most `MAX_OFFSET_METADATA_BYTES` (Kafka's offset.metadata.max.bytes),
  partitions that exist.
"""

from __future__ import annotations

from collections.abc import Sequence

from skiff.fileformat.batch_header import BATCH_HEADER_SIZE, DEFAULT_MAX_DECOMPRESSED_BYTES
from skiff.fileformat.objectstore.base import validate_key
from skiff.fileformat.objectstore.errors import InvalidKey
from skiff.metadata.errors import INVALID_REQUEST, MetadataError
from skiff.metadata.types import ChunkSpec, FileSpec, OutputChunk

I32 = 2**31
I64 = 2**63
MIN_BATCH_BYTES = BATCH_HEADER_SIZE  # 61
MIN_RECORD_BYTES = 7  # length, attributes, timestamp delta, offset delta, key/value lengths, header count
MAX_COMPRESSION_RATIO = 32_768
MAX_OFFSET_METADATA_BYTES = 4096
MAX_WRITER_CHARS = 255


def max_records_in_batch(byte_length: int) -> int:
    """The most records a RecordBatch of `byte_length` bytes can hold (see the module doc)."""
    payload = max(0, byte_length - MIN_BATCH_BYTES)
    return min(DEFAULT_MAX_DECOMPRESSED_BYTES, payload * MAX_COMPRESSION_RATIO) // MIN_RECORD_BYTES


def object_key_error(key: str) -> str | None:
    try:
        validate_key(key)
    except InvalidKey as e:
        return f"invalid object key: {e}"
    return None


def file_error(file: FileSpec) -> str | None:
    """What is wrong with a file to record (its key, size, level or writer), or None."""
    err = object_key_error(file.object_key)
    if err:
        return err
    if "\x00" in file.writer or len(file.writer) > MAX_WRITER_CHARS:
        return "writer too long or with NUL"
    if not 0 <= file.size_bytes < I64 or not 0 <= file.level < I32:
        return "size or level out of range"
    return None


def check_commit(file: FileSpec, chunk_specs: Sequence[ChunkSpec]) -> None:
    """Refuse a malformed commit as a whole (INVALID_REQUEST) before it joins a group:
    every value must fit its column and the counts the bytes, so that one bad file
    cannot fail its group nor poison a partition."""

    def bad(msg: str) -> MetadataError:
        return MetadataError(INVALID_REQUEST, f"commit of {file.object_key!r}: {msg}")

    err = file_error(file)
    if err:
        raise bad(err)
    spans: list[tuple[int, int]] = []
    for c in chunk_specs:
        where = f"chunk {c.topic_id}/{c.partition}"
        if not c.batches:
            raise bad(f"{where} has no batches")
        if not -I32 <= c.partition < I32:  # negative: no such partition (answered per chunk)
            raise bad(f"partition {c.partition} out of range")
        for b in c.batches:
            if b.byte_offset < 0 or b.byte_offset + b.byte_length > file.size_bytes:
                raise bad(f"{where}: batch bytes [{b.byte_offset}, +{b.byte_length}) outside the file")
            if b.byte_length < MIN_BATCH_BYTES:
                raise bad(
                    f"{where}: a batch of {b.byte_length} bytes (a RecordBatch is at least {MIN_BATCH_BYTES})"
                )
            most = max_records_in_batch(b.byte_length)
            if not 0 < b.offset_count <= most or not 0 <= b.record_count <= b.offset_count:
                raise bad(
                    f"{where}: a batch of {b.byte_length} bytes cannot hold offset_count {b.offset_count} "
                    f"with record_count {b.record_count} (at most {most} records, one offset each)"
                )
            if not -I64 <= b.max_timestamp < I64 or not -I64 <= b.producer_id < I64:
                raise bad(f"{where}: batch timestamp or producer id out of range")
            if b.min_timestamp is not None and not -I64 <= b.min_timestamp <= b.max_timestamp:
                # a min above the max would let a time-bounded scan skip the batch's records
                raise bad(f"{where}: batch min_timestamp {b.min_timestamp} above its max_timestamp")
            if not -I32 <= b.producer_epoch < I32 or not -I32 <= b.base_sequence < I32:
                raise bad(f"{where}: batch producer epoch or sequence out of range")
            spans.append((b.byte_offset, b.byte_offset + b.byte_length))
    spans.sort()
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        if start < end:
            raise bad(f"two batches claim the bytes at {start}")


def check_output_chunk(file: FileSpec, o: OutputChunk) -> str | None:
    """What is wrong with a compactor output chunk's numbers (offsets, counts, bytes), or None."""
    if o.byte_position < 0 or o.byte_length < 0 or o.byte_position + o.byte_length > file.size_bytes:
        return f"output chunk bytes outside the file: {o}"
    if o.last_offset < o.base_offset or o.base_offset < 0 or o.record_count < 0 or o.batch_count < 0:
        return f"bad output chunk offsets/counts: {o}"
    if o.min_timestamp is not None and o.min_timestamp > o.max_timestamp:
        return f"output chunk min_timestamp {o.min_timestamp} above its max_timestamp {o.max_timestamp}"
    if o.batch_count < 1 or o.batch_count * MIN_BATCH_BYTES > o.byte_length:
        return (
            f"output chunk {o.topic_id}/{o.partition}: {o.batch_count} batch(es) cannot fit in "
            f"{o.byte_length} bytes (a RecordBatch is at least {MIN_BATCH_BYTES})"
        )
    payload = o.byte_length - o.batch_count * MIN_BATCH_BYTES
    most = (
        min(o.batch_count * DEFAULT_MAX_DECOMPRESSED_BYTES, payload * MAX_COMPRESSION_RATIO)
        // MIN_RECORD_BYTES
    )
    if o.record_count > most:
        return (
            f"output chunk {o.topic_id}/{o.partition}: {o.record_count} records cannot fit in "
            f"{o.batch_count} batch(es) of {o.byte_length} bytes in all (at most {most})"
        )
    return None
