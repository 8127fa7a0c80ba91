"""The SQLite `Dialect` (see metadata.commits.storage): the embedded default, one writer at a time.

Write transactions start with `BEGIN IMMEDIATE` (metadata.db), which takes the
database's single write lock: locking rows is just reading them. SQLite allows 32766
bound parameters per statement, so key lists are split below that (`key_batches`);
the commit path passes its key lists as one JSON parameter (json_each) and writes rows
with raw-driver executemany. Topic ids are stored as 32 hex digits (SQLAlchemy's Uuid on
SQLite).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from skiff.metadata.commits import idempotence
from skiff.metadata.commits.feed import CommitFeed, PgCommitListener
from skiff.metadata.commits.plan import (
    CommitPlan,
    PartitionRow,
    PKey,
    ProducerStates,
    Run,
    TKey,
    TopicIndex,
    topic_flags,
)
from skiff.metadata.commits.storage import Key, KeyT
from skiff.metadata.schema import FILE_DELETING, FILE_LIVE, files, partitions, topics
from skiff.metadata.types import FileSpec
from sqlalchemy import Connection, Engine, insert, select, tuple_

KEYS_PER_STATEMENT = 4000

# The commit path's statements (raw driver SQL: key lists travel as one JSON parameter,
# rows as executemany tuples).
_SQ_READ_PARTITIONS = (
    "SELECT k.key, p.log_start_offset, p.high_watermark FROM json_each(?) AS k "
    "JOIN partitions AS p ON p.topic_id = json_extract(k.value, '$[0]') "
    "AND p.partition = json_extract(k.value, '$[1]')"
)
_SQ_READ_PRODUCERS = (
    "SELECT k.key, s.producer_epoch, s.batches FROM json_each(?) AS k "
    "JOIN producer_state AS s ON s.topic_id = json_extract(k.value, '$[0]') "
    "AND s.partition = json_extract(k.value, '$[1]') AND s.producer_id = json_extract(k.value, '$[2]')"
)
_SQ_INSERT_CHUNKS = (
    "INSERT INTO chunks (file_id, topic_id, partition, byte_position, byte_length, base_offset, last_offset, "
    "record_count, batch_count, max_timestamp, min_timestamp, offsets_absolute, present_offsets) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL)"
)
_SQ_CHUNK_IDS = "SELECT byte_position, id FROM chunks WHERE file_id = ?"
_SQ_SET_HWM = "UPDATE partitions SET high_watermark = ? WHERE topic_id = ? AND partition = ?"
_SQ_UPSERT_PRODUCER = (
    "INSERT INTO producer_state (topic_id, partition, producer_id, producer_epoch, batches, last_update_ms) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (topic_id, partition, producer_id) DO UPDATE SET "
    "producer_epoch = excluded.producer_epoch, batches = excluded.batches, last_update_ms = excluded.last_update_ms"
)


class SqliteDialect:
    name = "sqlite"

    def key_batches(self, keys: Sequence[KeyT]) -> Iterable[Sequence[KeyT]]:
        for i in range(0, len(keys), KEYS_PER_STATEMENT):
            yield keys[i : i + KEYS_PER_STATEMENT]

    def read_partitions(self, conn: Connection, keys: Iterable[Key]) -> dict[Key, tuple[int, int]]:
        p = partitions.c
        out: dict[Key, tuple[int, int]] = {}
        for batch in self.key_batches(list(set(keys))):
            rows = conn.execute(
                select(p.topic_id, p.partition, p.log_start_offset, p.high_watermark).where(
                    tuple_(p.topic_id, p.partition).in_(list(batch))
                )
            )
            for r in rows:
                out[(r.topic_id, r.partition)] = (r.log_start_offset, r.high_watermark)
        return out

    def lock_partitions(self, conn: Connection, keys: Iterable[Key]) -> dict[Key, tuple[int, int]]:
        # BEGIN IMMEDIATE locked the database already: locking the rows is reading them
        return self.read_partitions(conn, sorted(set(keys)))

    def lock_files(self, conn: Connection, file_ids: Sequence[int]) -> None:
        pass  # the database is locked already

    def commit_listener(self, feed: CommitFeed, engine: Engine) -> PgCommitListener | None:
        return None  # every writer is in this process: the feed already sees every commit

    # ------------------------------------------------------------------ the commit path

    def lock_for_commit(
        self, conn: Connection, tindex: TopicIndex, keys: list[TKey], object_keys: list[str]
    ) -> tuple[dict[TKey, PartitionRow], bool]:
        hexes = [t.hex for t in tindex.ids]
        found = conn.exec_driver_sql(
            _SQ_READ_PARTITIONS, (json.dumps([[hexes[k[0]], k[1]] for k in keys]),)
        ).all()
        ids = sorted({tindex.ids[keys[i][0]] for i, _, _ in found})
        topic_configs = conn.execute(
            select(topics.c.topic_id, topics.c.configs).where(topics.c.topic_id.in_(ids))
        )
        flags = {tindex.index[r.topic_id]: topic_flags(r.configs) for r in topic_configs}
        locked: dict[TKey, PartitionRow] = {}
        for i, log_start, hwm in found:
            k = keys[i]
            locked[k] = PartitionRow(log_start, hwm, *flags[k[0]])
        existing = conn.execute(
            select(files.c.id).where(files.c.object_key.in_(object_keys)).limit(1)
        ).first()
        return locked, existing is not None

    def load_producer_state(self, conn: Connection, tindex: TopicIndex, pkeys: list[PKey]) -> ProducerStates:
        out: ProducerStates = dict.fromkeys(pkeys)
        if not pkeys:
            return out
        make = idempotence.CachedBatch.from_json
        hexes = [t.hex for t in tindex.ids]
        doc = json.dumps([[hexes[k[0]], k[1], k[2]] for k in pkeys])
        for i, epoch, batches in conn.exec_driver_sql(_SQ_READ_PRODUCERS, (doc,)):
            out[pkeys[i]] = idempotence.ProducerEntry(epoch, [make(b) for b in json.loads(batches)])
        return out

    def write_commit(
        self,
        conn: Connection,
        file_specs: list[FileSpec],
        plans: list[CommitPlan],
        tindex: TopicIndex,
        hwms: dict[TKey, int],
        entries: list[tuple[PKey, idempotence.ProducerEntry]],
        now: int,
    ) -> list[list[int]]:
        hexes = [t.hex for t in tindex.ids]
        chunk_ids: list[list[int]] = []
        for f, plan in zip(file_specs, plans, strict=True):
            file_id = conn.execute(
                insert(files)
                .values(
                    object_key=f.object_key,
                    size_bytes=f.size_bytes,
                    level=f.level,
                    state=FILE_LIVE if plan.runs else FILE_DELETING,
                    writer=f.writer,
                    created_ms=now,
                    committed_ms=now,
                    deleting_since_ms=None if plan.runs else now,
                )
                .returning(files.c.id)
            ).scalar_one()
            chunk_ids.append(self.insert_runs(conn, file_id, hexes, plan.runs) if plan.runs else [])
        if hwms:
            self.set_high_watermarks(conn, hexes, hwms)
        if entries:
            conn.exec_driver_sql(
                _SQ_UPSERT_PRODUCER,
                [
                    (hexes[k[0]], k[1], k[2], e.epoch, json.dumps(e.batches, separators=(",", ":")), now)
                    for k, e in entries
                ],
            )
        return chunk_ids

    def insert_runs(self, conn: Connection, file_id: int, hexes: list[str], runs: list[Run]) -> list[int]:
        """The chunk rows of a file (executemany); their ids in the order of `runs` (read
        back by byte position: executemany returns no ids)."""
        conn.exec_driver_sql(
            _SQ_INSERT_CHUNKS,
            [
                (
                    file_id,
                    hexes[r.tix],
                    r.partition,
                    r.byte_position,
                    r.byte_length,
                    r.base_offset,
                    r.last_offset,
                    r.record_count,
                    r.batch_count,
                    r.max_timestamp,
                    r.min_timestamp,
                )
                for r in runs
            ],
        )
        ids: dict[int, int] = dict(conn.exec_driver_sql(_SQ_CHUNK_IDS, (file_id,)).all())
        return [ids[r.byte_position] for r in runs]

    def set_high_watermarks(self, conn: Connection, hexes: list[str], hwms: dict[TKey, int]) -> None:
        conn.exec_driver_sql(_SQ_SET_HWM, [(h, hexes[k[0]], k[1]) for k, h in hwms.items()])

    def notify_committed(self, conn: Connection, moved: list[Key]) -> None:
        pass  # no other process writes: the service's own feed publishes after the commit
