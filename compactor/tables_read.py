"""The committed records of one partition's offset range, as an Arrow table (the
materializer's read side, `compactor.tables`). Pure apart from the bucket reads.

Input: the chunks find_chunks answered under read_committed for the range
[from_offset, until_offset) (until_offset at most the last stable offset) and the aborted
transactions overlapping it, as (producer id, first offset, last offset). Each chunk is
read with one ranged GET (`fileformat.read_sync.load_chunks`), its batches walked with
their absolute offsets (`fileformat.chunk_reader.iter_chunk_batches`); control batches
(transaction markers) and the data batches of aborted transactions
(`compactor.dedup.AbortedIndex`, Kafka's read_committed rule) are skipped, and records
outside the range are left out. A compacted chunk holds only its surviving records, each
at its original offset.

Columns, in `ARROW_SCHEMA` order: partition int32, offset int64, timestamp (us, UTC),
timestampType int32 (0 CreateTime, 1 LogAppendTime, as Spark's Kafka source), key and
value binary (null when null), headers list<struct<key string, value binary>>.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa
from skiff.compactor.dedup import AbortedIndex
from skiff.fileformat.chunk_reader import ChunkLocation, iter_chunk_batches
from skiff.fileformat.objectstore import ObjectStore
from skiff.fileformat.read_sync import load_chunks
from skiff.fileformat.record_decode import decode_records

_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
ARROW_SCHEMA = pa.schema(
    [
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("timestampType", pa.int32(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", pa.list_(_HEADER)),
    ]
)


@dataclass(frozen=True)
class RangeRead:
    """One partition's range to materialize and what metadata answered for it."""

    partition: int
    from_offset: int
    until_offset: int  # exclusive; at most the last stable offset
    chunks: tuple[ChunkLocation, ...]
    aborted: tuple[tuple[int, int, int], ...] = ()  # (producer id, first, last offset)


@dataclass
class _Columns:
    partition: list[int] = field(default_factory=list)
    offset: list[int] = field(default_factory=list)
    timestamp_us: list[int] = field(default_factory=list)
    timestamp_type: list[int] = field(default_factory=list)
    key: list[bytes | None] = field(default_factory=list)
    value: list[bytes | None] = field(default_factory=list)
    headers: list[list[dict[str, object]]] = field(default_factory=list)

    def table(self) -> pa.Table:
        return pa.Table.from_arrays(
            [
                pa.array(self.partition, pa.int32()),
                pa.array(self.offset, pa.int64()),
                pa.array(self.timestamp_us, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                pa.array(self.timestamp_type, pa.int32()),
                pa.array(self.key, pa.binary()),
                pa.array(self.value, pa.binary()),
                pa.array(self.headers, pa.list_(_HEADER)),
            ],
            schema=ARROW_SCHEMA,
        )


def _aborted_index(read: RangeRead) -> AbortedIndex:
    # A last offset metadata did not answer (-1): the transaction ended below the LSO, so
    # before until_offset at the latest; the range closes there.
    return AbortedIndex(
        [(pid, first, last if last >= 0 else read.until_offset) for pid, first, last in read.aborted]
    )


def _add_chunk(
    out: _Columns, read: RangeRead, loc: ChunkLocation, data: bytes, aborted: AbortedIndex
) -> None:
    for batch in iter_chunk_batches(loc, data):
        h = batch.header
        if h.is_control or batch.last_offset < read.from_offset or batch.base_offset >= read.until_offset:
            continue
        if h.is_transactional and aborted and aborted.holds(h.producer_id, batch.base_offset):
            continue
        ts_type = int(h.timestamp_type)
        for r in decode_records(data, batch.position, header=h):
            offset = batch.base_offset + r.offset_delta
            if not read.from_offset <= offset < read.until_offset:
                continue
            out.partition.append(read.partition)
            out.offset.append(offset)
            out.timestamp_us.append(r.timestamp * 1000)
            out.timestamp_type.append(ts_type)
            out.key.append(None if r.key is None else bytes(r.key))
            out.value.append(None if r.value is None else bytes(r.value))
            out.headers.append([{"key": k, "value": None if v is None else bytes(v)} for k, v in r.headers])


def read_ranges(store: ObjectStore, reads: Sequence[RangeRead]) -> pa.Table:
    """The committed records of every range, partition after partition, in offset order."""
    out = _Columns()
    for read in reads:
        loaded, failed = load_chunks(store, read.chunks)
        if failed:
            raise next(iter(failed.values()))
        aborted = _aborted_index(read)
        for loc in read.chunks:
            _add_chunk(out, read, loc, bytes(loaded[loc.range_key]), aborted)
    return out.table()
