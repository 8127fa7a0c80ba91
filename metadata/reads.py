"""Reads: partition states, where a fetch's records live (find_chunks), ListOffsets.

All answers come from the partition rows (log start, high watermark) and the chunk
index (one row per run of batches of one partition in one file, ordered by last_offset,
unique per partition). find_chunks reads the index in pages: the first page is small
(most fetches need one or two chunks), later pages grow; the total read is bounded by
the fetch size. Compacted chunks carry a bitmap of the offsets still present
(metadata.bitmaps); a chunk with nothing left at or after the fetch offset is skipped.

read_committed queries stop at the last stable offset (LSO) and also answer, for the
agent's cache, every aborted transaction overlapping [fetch offset, LSO) with its last
offset (`aborted_ranges`, complete up to `aborted_until`), when there are at most
`MAX_CACHEABLE_ABORTED` of them (one indexed query with a LIMIT); past that only the
aborted transactions of the returned range are answered, as before, and `aborted_ranges`
holds those same ones with their last offsets (`aborted_until` -1: nothing to cache), so
every entry of `aborted` has its last offset in `aborted_ranges` (Spark's executors close
an aborted range there when its ABORT marker is lost).

Each call reads in one read transaction (metadata.db.read_tx), a single snapshot on both
databases, so what it answers describes one moment: the last stable offset is the one of
the high watermark answered, and the chunks and aborted transactions are those below it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from skiff.metadata import bitmaps
from skiff.metadata.db import read_tx
from skiff.metadata.errors import INVALID_REQUEST, NONE, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION
from skiff.metadata.rows import LOC_COLS, Db, location_of
from skiff.metadata.schema import chunks, files, topics, txn_aborted
from skiff.metadata.transactions import store as transactions
from skiff.metadata.types import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_CACHEABLE_ABORTED,
    MAX_TIMESTAMP,
    ChunkLocation,
    FetchQuery,
    FileChunk,
    FileChunks,
    OffsetAnswer,
    OffsetQuery,
    PartitionFetchInfo,
    PartitionKey,
    PartitionState,
)
from sqlalchemy import Connection, select

_FIND_FIRST_PAGE = 4
READ_COMMITTED = 1
_FIND_MAX_PAGE = 256


class Reads:
    def __init__(self, db: Db) -> None:
        self._db = db

    def partition_states(self, keys: Sequence[PartitionKey]) -> list[PartitionState]:
        """Log start, high watermark and last stable offset of each partition (what the
        commit feed's long poll answers with)."""
        pairs = [(k.topic_id, k.partition) for k in keys]
        with read_tx(self._db.engine) as conn:  # one snapshot: the LSO is that watermark's
            states = self._db.dialect.read_partitions(conn, pairs)
            open_from = transactions.stable_state(conn, [k for k in pairs if k in states])
        out = []
        for k in pairs:
            s = states.get(k)
            if s is None:
                out.append(PartitionState(UNKNOWN_TOPIC_OR_PARTITION))
                continue
            out.append(PartitionState(NONE, s[0], s[1], min(s[1], open_from.get(k, s[1]))))
        return out

    def file_chunks(self, object_key: str) -> FileChunks:
        """The chunk rows that point into one object, by (topic, partition, offset): what an
        operator needs to read an agent file, whose batches carry no final offsets."""
        with read_tx(self._db.engine) as conn:
            f = conn.execute(
                select(files.c.id, files.c.state, files.c.level).where(files.c.object_key == object_key)
            ).first()
            if f is None:
                return FileChunks(object_key)
            rows = conn.execute(
                select(*LOC_COLS, chunks.c.topic_id, chunks.c.partition, topics.c.name)
                .join(files, files.c.id == chunks.c.file_id)
                .outerjoin(topics, topics.c.topic_id == chunks.c.topic_id)
                .where(chunks.c.file_id == f.id)
                .order_by(chunks.c.byte_position)
            ).all()
        found = tuple(FileChunk(r.topic_id, r.name, r.partition, location_of(r)) for r in rows)
        return FileChunks(object_key, f.state, f.level, found)

    def find_chunks(self, queries: Sequence[FetchQuery]) -> list[PartitionFetchInfo]:
        """Where the records from each query's offset onwards live: from the chunk holding
        the offset (or the next present offset, for compacted chunks) onward, until the
        chunks' byte lengths add up to max_bytes; always at least one chunk when the offset
        is below the high watermark. Reads at most a few pages of the chunk index per
        query, however far behind the reader is."""
        out: list[PartitionFetchInfo] = []
        # one snapshot (read_tx): the watermark, the open transactions (LSO), the chunks and
        # the aborted transactions all describe the same moment
        with read_tx(self._db.engine) as conn:
            states = self._db.dialect.read_partitions(conn, [(q.topic_id, q.partition) for q in queries])
            committed = [
                (q.topic_id, q.partition)
                for q in queries
                if q.isolation_level == READ_COMMITTED and (q.topic_id, q.partition) in states
            ]
            open_from = transactions.stable_state(conn, committed)
            for q in queries:
                s = states.get((q.topic_id, q.partition))
                if s is None:
                    out.append(PartitionFetchInfo(UNKNOWN_TOPIC_OR_PARTITION))
                    continue
                log_start, hwm = s
                if q.offset < log_start or q.offset > hwm:
                    out.append(PartitionFetchInfo(OFFSET_OUT_OF_RANGE, log_start, hwm))
                    continue
                if q.isolation_level != READ_COMMITTED:
                    locs = self._chunks_from(conn, q.topic_id, q.partition, q.offset, hwm, q.max_bytes)
                    out.append(PartitionFetchInfo(NONE, log_start, hwm, tuple(locs)))
                    continue
                # read_committed: nothing at or above the last stable offset, and the
                # aborted transactions of the range returned.
                lso = min(hwm, open_from.get((q.topic_id, q.partition), hwm))
                if q.offset >= lso:
                    out.append(
                        PartitionFetchInfo(NONE, log_start, hwm, last_stable_offset=lso, aborted_until=lso)
                    )
                    continue
                locs = self._chunks_from(conn, q.topic_id, q.partition, q.offset, lso, q.max_bytes)
                upper = min(lso, max((c.last_offset for c in locs), default=q.offset) + 1)
                ranges = _aborted_ranges(
                    conn, q.topic_id, q.partition, q.offset, lso, max_rows=MAX_CACHEABLE_ABORTED + 1
                )
                if len(ranges) > MAX_CACHEABLE_ABORTED:  # too many to cache: only what this read needs
                    ranges = _aborted_ranges(conn, q.topic_id, q.partition, q.offset, upper)
                    until = -1
                else:
                    until = lso
                aborted = [(pid, first) for pid, first, _ in ranges if first < upper]
                out.append(
                    PartitionFetchInfo(
                        NONE, log_start, hwm, tuple(locs), lso, tuple(aborted), tuple(ranges), until
                    )
                )
        return out

    def _chunks_from(
        self, conn: Connection, tid: uuid.UUID, part: int, offset: int, hwm: int, max_bytes: int
    ) -> list[ChunkLocation]:
        locs: list[ChunkLocation] = []
        total = 0
        cursor = offset  # next page: chunks with last_offset >= cursor
        page = _FIND_FIRST_PAGE
        while True:
            rows = conn.execute(
                select(*LOC_COLS)
                .join(files, files.c.id == chunks.c.file_id)
                .where(
                    chunks.c.topic_id == tid,
                    chunks.c.partition == part,
                    chunks.c.last_offset >= cursor,
                    chunks.c.base_offset < hwm,
                )
                .order_by(chunks.c.last_offset)
                .limit(page)
            ).all()
            for r in rows:
                loc = location_of(r)
                if loc.present_offsets is not None and bitmaps.next_present_in_chunk(loc, offset) is None:
                    continue  # compacted: nothing left at or after the offset in this chunk
                locs.append(loc)
                total += loc.byte_length
                if total >= max_bytes:
                    return locs
            if len(rows) < page:
                return locs
            cursor = rows[-1].last_offset + 1
            page = min(page * 4, _FIND_MAX_PAGE)

    def list_offsets(self, queries: Sequence[OffsetQuery]) -> list[OffsetAnswer]:
        """EARLIEST (-2): log start; LATEST (-1): high watermark (timestamp -1 for both).
        MAX_TIMESTAMP (-3): approximated per chunk: the last present offset of the chunk
        with the greatest max_timestamp (earliest such chunk on ties), with that timestamp.
        A timestamp: the first chunk (in offset order) whose max_timestamp >= it; answers
        its first present offset >= log start and its max_timestamp; the agent refines the
        answer inside the chunk. No such chunk: offset -1, timestamp -1."""
        out: list[OffsetAnswer] = []
        with read_tx(self._db.engine) as conn:
            states = self._db.dialect.read_partitions(conn, [(q.topic_id, q.partition) for q in queries])
            for q in queries:
                s = states.get((q.topic_id, q.partition))
                if s is None:
                    out.append(OffsetAnswer(UNKNOWN_TOPIC_OR_PARTITION))
                    continue
                log_start, hwm = s
                if q.timestamp == EARLIEST_TIMESTAMP or q.timestamp == -4:  # -4: EARLIEST_LOCAL
                    out.append(OffsetAnswer(NONE, log_start, -1))
                elif q.timestamp == LATEST_TIMESTAMP:
                    out.append(OffsetAnswer(NONE, hwm, -1))
                elif q.timestamp == MAX_TIMESTAMP:
                    out.append(self._max_timestamp(conn, q, log_start, hwm))
                elif q.timestamp < 0:
                    out.append(OffsetAnswer(INVALID_REQUEST))
                else:
                    out.append(self._offset_for_timestamp(conn, q, log_start, hwm))
        return out

    def _partition_chunks(self, q: OffsetQuery, log_start: int, hwm: int) -> Any:
        return (
            select(*LOC_COLS)
            .join(files, files.c.id == chunks.c.file_id)
            .where(
                chunks.c.topic_id == q.topic_id,
                chunks.c.partition == q.partition,
                chunks.c.last_offset >= log_start,
                chunks.c.base_offset < hwm,
            )
        )

    def _max_timestamp(self, conn: Connection, q: OffsetQuery, log_start: int, hwm: int) -> OffsetAnswer:
        stmt = self._partition_chunks(q, log_start, hwm).order_by(
            chunks.c.max_timestamp.desc(), chunks.c.last_offset
        )
        # closed on the early return: a server-side cursor left open warns when collected
        with conn.execute(stmt.execution_options(yield_per=16)) as rows:
            for r in rows:
                loc = location_of(r)
                last = bitmaps.last_present_in_chunk(loc)
                if last is not None and last >= log_start:
                    return OffsetAnswer(NONE, last, loc.max_timestamp)
        return OffsetAnswer(NONE, -1, -1)

    def _offset_for_timestamp(
        self, conn: Connection, q: OffsetQuery, log_start: int, hwm: int
    ) -> OffsetAnswer:
        stmt = (
            self._partition_chunks(q, log_start, hwm)
            .where(chunks.c.max_timestamp >= q.timestamp)
            .order_by(chunks.c.last_offset)
        )
        with conn.execute(stmt.execution_options(yield_per=16)) as rows:
            for r in rows:
                loc = location_of(r)
                first = bitmaps.next_present_in_chunk(loc, log_start)
                if first is not None:
                    return OffsetAnswer(NONE, first, loc.max_timestamp)
        return OffsetAnswer(NONE, -1, -1)


def _aborted_ranges(
    conn: Connection,
    topic_id: uuid.UUID,
    partition: int,
    from_offset: int,
    below_offset: int,
    max_rows: int | None = None,
) -> tuple[tuple[int, int, int], ...]:
    """(producer id, first offset, last offset) of every aborted transaction overlapping
    [from_offset, below_offset), sorted by first offset; with `max_rows`, at most that
    many (the ones whose markers come first: one indexed query with a LIMIT)."""
    stmt = (
        select(txn_aborted.c.producer_id, txn_aborted.c.first_offset, txn_aborted.c.last_offset)
        .where(
            txn_aborted.c.topic_id == topic_id,
            txn_aborted.c.partition == partition,
            txn_aborted.c.last_offset >= from_offset,
            txn_aborted.c.first_offset < below_offset,
        )
        .order_by(txn_aborted.c.last_offset)
    )
    rows = conn.execute(stmt if max_rows is None else stmt.limit(max_rows)).all()
    return tuple(
        sorted(
            ((int(r.producer_id), int(r.first_offset), int(r.last_offset)) for r in rows), key=lambda a: a[1]
        )
    )
