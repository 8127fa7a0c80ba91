"""Retention, DeleteRecords and committed-offset expiry: what moves a log's start.

A partition's log starts at `log_start_offset`; chunks wholly below it are dropped (their
files become `deleting` when no chunk is left in them, and the garbage collector removes
the objects after a grace period, metadata.maintenance.gc). Deletion is chunk-granular, as Kafka's
is segment-granular (UnifiedLog.deleteOldSegments), and never reaches the high
watermark: a chunk ends below it, so the new log start is at most the high watermark.

- Retention (`enforce_retention`, per topic, one transaction per partition under the
  partition's lock, as commits and compaction swaps take it): for topics whose
  `cleanup.policy` contains `delete`, Kafka's three rules in its order:
  `retention.ms` (deleteRetentionMsBreachedSegments: from the oldest chunk, drop while
  `now - max_timestamp > retention.ms`), `retention.bytes`
  (deleteRetentionSizeBreachedSegments: `diff = size - retention.bytes`, drop the oldest
  chunk while `diff - chunk_bytes >= 0`), and for every topic the log-start rule
  (deleteLogStartOffsetBreachedSegments: chunks wholly below the log start, which
  DeleteRecords leaves behind). The time and size rules together drop the longer of the
  two prefixes, which is what running them one after the other does. -1 disables a rule.
- DeleteRecords (`delete_records`, Kafka API 21): the log start moves up to the
  requested offset (-1: the high watermark; above it or below -1: OFFSET_OUT_OF_RANGE;
  topics without `delete` in `cleanup.policy`: POLICY_VIOLATION, as Kafka answers);
  chunks wholly below it are dropped at once, a chunk straddling it stays (fetch refuses
  offsets below the log start with OFFSET_OUT_OF_RANGE).
- Both forget the partition's aborted transactions (`txn_aborted`) whose ABORT marker
  lies below the new log start, in the same transaction (`metadata.transactions.cleanup`).
- Offset expiry (`expire_group_offsets`, Kafka's GroupMetadata.removeExpiredOffsets
  without per-commit expire timestamps): a group seen with members (group_activity,
  refreshed by its coordinator through `touch_groups`) loses all its committed offsets
  `offsets.retention.minutes` after it was last seen non-empty; a standalone consumer's
  offsets (a group never seen with members) expire that long after their last commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from skiff.metadata import configs
from skiff.metadata.db import write_tx
from skiff.metadata.errors import NONE, OFFSET_OUT_OF_RANGE, POLICY_VIOLATION, UNKNOWN_TOPIC_OR_PARTITION
from skiff.metadata.rows import IDS_PER_STATEMENT, Db, mark_orphan_files_deleting, upsert
from skiff.metadata.schema import chunks, group_activity, group_offsets, partitions, topics
from skiff.metadata.transactions.cleanup import drop_aborted_below
from skiff.metadata.types import DeleteRecordsAnswer, DeleteRecordsQuery, RetentionResult
from sqlalchemy import Connection, delete, func, select, update

# How many chunks one retention transaction examines per partition (the caller repeats
# while a partition reports this many deleted).
DEFAULT_MAX_CHUNKS_PER_PARTITION = 1000


class Retention:
    def __init__(self, db: Db) -> None:
        self._db = db

    # ------------------------------------------------------------------ DeleteRecords

    def delete_records(self, queries: Sequence[DeleteRecordsQuery]) -> list[DeleteRecordsAnswer]:
        """One answer per query, in order; each partition in its own transaction."""
        names = sorted({q.topic for q in queries})
        found: dict[str, Any] = {}
        with write_tx(self._db.engine) as conn:
            for i in range(0, len(names), IDS_PER_STATEMENT):
                stmt = select(topics).where(topics.c.name.in_(names[i : i + IDS_PER_STATEMENT]))
                found.update({r.name: r for r in conn.execute(stmt)})
        out: list[DeleteRecordsAnswer] = []
        for q in queries:
            t = found.get(q.topic)
            if t is None or not 0 <= q.partition < t.partition_count:
                out.append(
                    DeleteRecordsAnswer(
                        UNKNOWN_TOPIC_OR_PARTITION, -1, f"no partition {q.partition} of topic {q.topic!r}"
                    )
                )
                continue
            if "delete" not in configs.cleanup_policies(dict(t.configs)):
                out.append(
                    DeleteRecordsAnswer(
                        POLICY_VIOLATION,
                        -1,
                        f"Records of partitions of Topic '{q.topic}' with policy "
                        f"'{configs.config_value(dict(t.configs), configs.CLEANUP_POLICY)}' cannot be deleted",
                    )
                )
                continue
            with write_tx(self._db.engine) as conn:
                out.append(self._delete_records_locked(conn, t.topic_id, q))
        return out

    def _delete_records_locked(
        self, conn: Connection, tid: uuid.UUID, q: DeleteRecordsQuery
    ) -> DeleteRecordsAnswer:
        state = self._db.dialect.lock_partitions(conn, [(tid, q.partition)]).get((tid, q.partition))
        if state is None:  # deleted meanwhile
            return DeleteRecordsAnswer(UNKNOWN_TOPIC_OR_PARTITION, -1, f"no partition {q.partition}")
        log_start, hwm = state
        target = hwm if q.offset == -1 else q.offset
        if target < 0 or target > hwm:
            return DeleteRecordsAnswer(
                OFFSET_OUT_OF_RANGE,
                -1,
                f"Cannot increment the log start offset to {q.offset} of partition {q.topic}-{q.partition} "
                f"since it is larger than the high watermark {hwm}",
            )
        if target <= log_start:
            return DeleteRecordsAnswer(NONE, log_start)
        self._set_log_start(conn, tid, q.partition, target)
        self._drop_below(conn, tid, q.partition, target)
        return DeleteRecordsAnswer(NONE, target)

    # ------------------------------------------------------------------ retention

    def enforce_retention(
        self, topic: str, max_chunks_per_partition: int = DEFAULT_MAX_CHUNKS_PER_PARTITION
    ) -> list[RetentionResult]:
        """Apply the topic's retention to each partition; the partitions that changed."""
        with write_tx(self._db.engine) as conn:
            t = conn.execute(select(topics).where(topics.c.name == topic)).first()
        if t is None:
            return []
        cfg = dict(t.configs)
        delete_policy = "delete" in configs.cleanup_policies(cfg)
        retention_ms = configs.config_int(cfg, configs.RETENTION_MS) if delete_policy else -1
        retention_bytes = configs.config_int(cfg, configs.RETENTION_BYTES) if delete_policy else -1
        out: list[RetentionResult] = []
        for p in range(t.partition_count):
            with write_tx(self._db.engine) as conn:
                r = self._retain_partition(
                    conn, t.topic_id, p, retention_ms, retention_bytes, max(1, max_chunks_per_partition)
                )
            if r is not None:
                out.append(RetentionResult(topic, p, *r))
        return out

    def _retain_partition(
        self, conn: Connection, tid: uuid.UUID, part: int, retention_ms: int, retention_bytes: int, limit: int
    ) -> tuple[int, int, int] | None:
        state = self._db.dialect.lock_partitions(conn, [(tid, part)]).get((tid, part))
        if state is None:
            return None
        log_start, _hwm = state
        c = chunks.c
        new_start = log_start
        if retention_ms >= 0 or retention_bytes >= 0:
            oldest = conn.execute(
                select(c.last_offset, c.byte_length, c.max_timestamp)
                .where(c.topic_id == tid, c.partition == part, c.last_offset >= log_start)
                .order_by(c.last_offset)
                .limit(limit)
            ).all()
            drop = 0  # length of the prefix of `oldest` to drop
            if retention_ms >= 0:
                now = self._db.clock()
                while drop < len(oldest) and now - oldest[drop].max_timestamp > retention_ms:
                    drop += 1
            if retention_bytes >= 0 and oldest:
                total = conn.execute(
                    select(func.coalesce(func.sum(c.byte_length), 0)).where(
                        c.topic_id == tid, c.partition == part, c.last_offset >= log_start
                    )
                ).scalar_one()
                diff = int(total) - retention_bytes
                by_size = 0
                while by_size < len(oldest) and diff - oldest[by_size].byte_length >= 0:
                    diff -= oldest[by_size].byte_length
                    by_size += 1
                drop = max(drop, by_size)
            if drop:
                new_start = oldest[drop - 1].last_offset + 1
        if new_start > log_start:
            self._set_log_start(conn, tid, part, new_start)
        dropped, nbytes = self._drop_below(conn, tid, part, new_start)
        if not dropped and new_start == log_start:
            return None
        return new_start, dropped, nbytes

    # ------------------------------------------------------------------ shared

    def _set_log_start(self, conn: Connection, tid: uuid.UUID, part: int, offset: int) -> None:
        p = partitions.c
        conn.execute(
            update(partitions)
            .where(p.topic_id == tid, p.partition == part, p.log_start_offset < offset)
            .values(log_start_offset=offset)
        )

    def _drop_below(self, conn: Connection, tid: uuid.UUID, part: int, offset: int) -> tuple[int, int]:
        """Delete the partition's chunks wholly below `offset` (under its lock); their files
        without chunks left become `deleting`, and its aborted transactions whose marker
        lies below `offset` are forgotten. Returns (chunks, bytes) deleted."""
        drop_aborted_below(conn, tid, part, offset)
        c = chunks.c
        below = (c.topic_id == tid, c.partition == part, c.last_offset < offset)
        rows = conn.execute(select(c.id, c.file_id, c.byte_length).where(*below)).all()
        if not rows:
            return 0, 0
        conn.execute(delete(chunks).where(*below))
        mark_orphan_files_deleting(self._db, conn, {r.file_id for r in rows}, self._db.clock())
        return len(rows), sum(r.byte_length for r in rows)

    # ------------------------------------------------------------------ offset expiry

    def touch_groups(self, group_ids: Sequence[str]) -> None:
        """Record that these groups have members now (their coordinator reports them)."""
        ids = sorted(set(group_ids))
        if not ids:
            return
        now = self._db.clock()
        with write_tx(self._db.engine) as conn:
            for i in range(0, len(ids), IDS_PER_STATEMENT):
                rows = [{"group_id": g, "last_active_ms": now} for g in ids[i : i + IDS_PER_STATEMENT]]
                upsert(conn, group_activity, ["group_id"], rows)

    def expire_group_offsets(self, retention_ms: int) -> int:
        """Delete the committed offsets that `offsets.retention.minutes` (as ms) has
        expired (see the module docstring); returns how many were deleted."""
        cutoff = self._db.clock() - retention_ms
        g, a = group_offsets.c, group_activity.c
        with write_tx(self._db.engine) as conn:
            idle = select(a.group_id).where(a.last_active_ms <= cutoff)
            n = conn.execute(delete(group_offsets).where(g.group_id.in_(idle))).rowcount or 0
            conn.execute(delete(group_activity).where(a.last_active_ms <= cutoff))
            seen = select(a.group_id)
            n += (
                conn.execute(
                    delete(group_offsets).where(g.commit_time_ms <= cutoff, g.group_id.not_in(seen))
                ).rowcount
                or 0
            )
        return n
