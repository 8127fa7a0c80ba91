"""Chunks to Arrow record batches, without a Python object per record (the executors' side).

Per chunk, `fileformat.chunk_reader.iter_chunk_batches` gives each RecordBatch with its
absolute base offset (one Python object per *batch*); control batches (transaction
markers) are skipped in every isolation level (Kafka consumers never return them), and so
are batches wholly outside the wanted offset range and, under read_committed, the batches
of the task's aborted transactions (`spark.aborted`: a batch-level NumPy mask by producer
id and offset range, closed at each producer's ABORT marker or after its known last
offset, whichever comes first). Each
remaining batch's records are decompressed with the batch codec (`fileformat.codecs`,
cramjam) and appended to one growing buffer. When the buffer holds `max_rows` records or
`max_bytes` bytes, the compiled walk (`spark.decode_kernels`) finds every record's fields
and the columns are assembled from NumPy arrays:

- binary/string columns: int32 offsets (a cumulative sum of lengths) and one contiguous
  data buffer gathered by the kernel, plus a validity bitmap for null keys and values
  (`pa.BinaryArray.from_buffers`);
- `offset`, `timestamp` (ms -> us), `partition`, `timestampType`: NumPy arrays;
- `topic`: one repeated string built from a repeated byte buffer;
- `headers`: list offsets from each record's header count over a struct of two
  binary/string children built the same way.

Records outside [start_offset, end_offset) and, for compacted chunks, offsets missing
from the chunk's present-offset bitmap are masked out before the columns are built, so
holes are exact and offsets stay the original ones.

The Arrow types are exactly what Spark maps the Kafka source schema to (Spark checks only
column names and count of the first batch, so a wrong type would surface late):
key/value binary, topic string, partition int32, offset int64, timestamp
timestamp[us, tz=UTC], timestampType int32, headers list<struct<key string, value binary>>.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyroaring import BitMap
from skiff.fileformat import codecs
from skiff.fileformat.batch_header import BATCH_HEADER_SIZE
from skiff.fileformat.chunk_reader import ChunkBatch, ChunkLocation, ChunkReadError, iter_chunk_batches
from skiff.spark import decode_kernels as k
from skiff.spark.aborted import AbortedTransactions

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08
_TRANSACTIONAL_MASK = 0x10
_CONTROL_MASK = 0x20
# A batch's records never decompress to more than this (a guard against decompression bombs).
MAX_DECOMPRESSED_BATCH_BYTES = 256 * 1024 * 1024

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


@dataclass
class _Pending:
    """One batch's records waiting in the buffer, and what the walk needs to know of it."""

    start: int
    end: int
    count: int
    base_offset: int
    base_timestamp: int
    timestamp_override: int
    timestamp_type: int
    # Compacted chunks: the present offsets (absolute) of the batch's chunk, else None.
    present: np.ndarray | None
    where: str  # "object@position", for errors


class RecordBatchBuilder:
    """Accumulates batches of one partition and yields Arrow record batches of bounded size."""

    def __init__(
        self,
        topic: str,
        partition: int,
        start_offset: int,
        end_offset: int,
        *,
        include_headers: bool = False,
        max_rows: int = 131072,
        max_bytes: int = 32 * 1024 * 1024,
        aborted: Sequence[tuple[int, int] | tuple[int, int, int]] = (),
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.include_headers = include_headers
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.schema = arrow_schema(include_headers)
        self._parts: list[bytes | memoryview] = []
        self._size = 0
        self._pending: list[_Pending] = []
        self._rows = 0
        # read_committed: the task's aborted transactions (None: nothing to drop)
        self._aborted = AbortedTransactions(aborted) if aborted else None

    def add_chunk(self, loc: ChunkLocation, data: bytes | memoryview) -> Iterator[pa.RecordBatch]:
        """Feed one chunk's bytes; yields the record batches that became full."""
        present = None
        if loc.present_offsets is not None:
            bitmap = BitMap.deserialize(loc.present_offsets)
            present = np.frombuffer(bitmap.to_array(), dtype=np.uint32).astype(np.int64) + loc.base_offset
        view = memoryview(data)
        batches = [
            b
            for b in iter_chunk_batches(loc, view)
            if b.last_offset >= self.start_offset and b.base_offset < self.end_offset
        ]
        aborted = self._aborted_batches(batches) if self._aborted is not None else None
        for i, batch in enumerate(batches):
            header = batch.header
            if header.attributes & _CONTROL_MASK:
                continue  # a transaction marker: never a row (Kafka consumers never return them)
            if aborted is not None and aborted[i]:
                continue
            pos = batch.position
            payload = view[pos + BATCH_HEADER_SIZE : pos + header.size]
            codec = header.attributes & _COMPRESSION_MASK
            if codec:
                try:
                    payload = memoryview(
                        codecs.decompress(
                            codec, payload, max_output=MAX_DECOMPRESSED_BATCH_BYTES, position=pos
                        )
                    )
                except codecs.CodecError as exc:
                    raise ChunkReadError(loc.object_key, loc.byte_position + pos, str(exc)) from exc
            log_append = bool(header.attributes & _TIMESTAMP_TYPE_MASK)
            self._pending.append(
                _Pending(
                    start=self._size,
                    end=self._size + len(payload),
                    count=header.records_count,
                    base_offset=batch.base_offset,
                    base_timestamp=header.base_timestamp,
                    timestamp_override=header.max_timestamp if log_append else -1,
                    timestamp_type=1 if log_append else 0,
                    present=present,
                    where=f"{loc.object_key}@{loc.byte_position + pos}",
                )
            )
            self._parts.append(payload)
            self._size += len(payload)
            self._rows += max(header.records_count, 0)
            if self._rows >= self.max_rows or self._size >= self.max_bytes:
                out = self.flush()
                if out is not None:
                    yield out

    def _aborted_batches(self, batches: list[ChunkBatch]) -> np.ndarray:
        """Which of the chunk's batches (in range, in offset order) to drop as aborted."""
        assert self._aborted is not None
        n = len(batches)
        attributes = np.fromiter((b.header.attributes for b in batches), np.int64, n)
        return self._aborted.mask(
            np.fromiter((b.header.producer_id for b in batches), np.int64, n),
            np.fromiter((b.base_offset for b in batches), np.int64, n),
            (attributes & _CONTROL_MASK) != 0,
            (attributes & _TRANSACTIONAL_MASK) != 0,
        )

    def flush(self) -> pa.RecordBatch | None:
        """The records buffered so far as one record batch (None if none survive)."""
        if not self._pending:
            return None
        pending, parts = self._pending, self._parts
        self._pending, self._parts, self._size, self._rows = [], [], 0, 0
        buf = np.frombuffer(b"".join(parts), dtype=np.uint8)
        return self._build(buf, pending)

    def _build(self, buf: np.ndarray, pending: list[_Pending]) -> pa.RecordBatch | None:
        nb = len(pending)
        counts = np.fromiter((max(p.count, 0) for p in pending), dtype=np.int64, count=nb)
        total = int(counts.sum())
        offsets = np.empty(total, np.int64)
        timestamps = np.empty(total, np.int64)
        key_pos = np.empty(total, np.int64)
        key_len = np.empty(total, np.int64)
        value_pos = np.empty(total, np.int64)
        value_len = np.empty(total, np.int64)
        headers_pos = np.empty(total, np.int64)
        headers_count = np.empty(total, np.int64)
        found, status = k.walk_records(
            buf,
            np.fromiter((p.start for p in pending), np.int64, nb),
            np.fromiter((p.end for p in pending), np.int64, nb),
            counts,
            np.fromiter((p.base_offset for p in pending), np.int64, nb),
            np.fromiter((p.base_timestamp for p in pending), np.int64, nb),
            np.fromiter((p.timestamp_override for p in pending), np.int64, nb),
            offsets,
            timestamps,
            key_pos,
            key_len,
            value_pos,
            value_len,
            headers_pos,
            headers_count,
        )
        if status:
            bad = pending[status - 1]
            object_key, _, position = bad.where.rpartition("@")
            raise ChunkReadError(object_key, int(position), "malformed records in the record batch")
        ts_type = np.repeat(np.fromiter((p.timestamp_type for p in pending), np.int32, nb), counts)
        keep = (offsets >= self.start_offset) & (offsets < self.end_offset)
        if any(p.present is not None for p in pending):
            keep &= self._present_mask(pending, counts, offsets)
        if not keep.all():
            idx = np.flatnonzero(keep)
            offsets, timestamps, ts_type = offsets[idx], timestamps[idx], ts_type[idx]
            key_pos, key_len, value_pos, value_len = (
                key_pos[idx],
                key_len[idx],
                value_pos[idx],
                value_len[idx],
            )
            headers_pos, headers_count = headers_pos[idx], headers_count[idx]
        n = len(offsets)
        if n == 0:
            return None
        columns = [
            _binary_column(buf, key_pos, key_len, pa.binary()),
            _binary_column(buf, value_pos, value_len, pa.binary()),
            _repeated_string(self.topic, n),
            pa.array(np.full(n, self.partition, np.int32)),
            pa.array(offsets),
            pa.array(timestamps * 1000, pa.timestamp("us", tz="UTC")),
            pa.array(ts_type),
        ]
        if self.include_headers:
            columns.append(_headers_column(buf, headers_pos, headers_count))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    @staticmethod
    def _present_mask(pending: list[_Pending], counts: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        mask = np.ones(len(offsets), dtype=bool)
        cursor = 0
        for p, count in zip(pending, counts.tolist(), strict=True):
            if p.present is not None and count:
                mask[cursor : cursor + count] = np.isin(offsets[cursor : cursor + count], p.present)
            cursor += count
        return mask


def _validity(lengths: np.ndarray) -> tuple[pa.Buffer | None, int]:
    nulls = lengths < 0
    null_count = int(nulls.sum())
    if not null_count:
        return None, 0
    return pa.py_buffer(np.packbits(~nulls, bitorder="little")), null_count


def _binary_column(buf: np.ndarray, pos: np.ndarray, lengths: np.ndarray, type_: pa.DataType) -> pa.Array:
    """A binary (or string) array of the slices buf[pos[i]: pos[i] + lengths[i]]; length
    -1 is null."""
    n = len(pos)
    sizes = np.maximum(lengths, 0)
    out_offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=out_offsets[1:])
    total = int(out_offsets[-1])
    if total > np.iinfo(np.int32).max:
        raise ValueError(f"{total} bytes do not fit one Arrow binary column (lower max_bytes)")
    data = np.empty(total, np.uint8)
    k.gather(buf, pos, sizes, out_offsets, data)
    validity, null_count = _validity(lengths)
    return pa.Array.from_buffers(
        type_,
        n,
        [validity, pa.py_buffer(out_offsets.astype(np.int32)), pa.py_buffer(data)],
        null_count=null_count,
    )


def _repeated_string(text: str, n: int) -> pa.Array:
    raw = text.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def _headers_column(buf: np.ndarray, headers_pos: np.ndarray, headers_count: np.ndarray) -> pa.Array:
    n = len(headers_pos)
    list_offsets = np.zeros(n + 1, np.int64)
    np.cumsum(headers_count, out=list_offsets[1:])
    total = int(list_offsets[-1])
    hkey_pos = np.empty(total, np.int64)
    hkey_len = np.empty(total, np.int64)
    hvalue_pos = np.empty(total, np.int64)
    hvalue_len = np.empty(total, np.int64)
    k.walk_headers(buf, headers_pos, headers_count, hkey_pos, hkey_len, hvalue_pos, hvalue_len)
    keys = _binary_column(buf, hkey_pos, hkey_len, pa.string())
    values = _binary_column(buf, hvalue_pos, hvalue_len, pa.binary())
    struct = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(list_offsets.astype(np.int32)), struct, type=HEADER_TYPE)
