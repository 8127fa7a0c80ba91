"""Planning queries: which partitions need compaction work now (`compaction_candidates`).

One read transaction: the topics (and their configs), then per topic one query over
its chunk rows joined with their files, the partition rows and the compaction state
(cleaner checkpoint, lease), in (partition, offset) order. The rules themselves are
pure (`metadata.compaction.rules`: Kafka's cleaner for compacted topics, the level
merge rules for the others), and the answer carries, per partition, the chunk rows a
job consumes (a compacted partition's whole log up to the cleanable end; a merged
partition's tail). A compacted partition's cleanable end stops at its last stable offset
(txn_open), and its candidate carries the aborted transactions below that end
(`metadata.transactions.cleanup`). Partitions under an unexpired lease are left out (another compactor
works on them). Compaction keeps chunk rows per partition few, so reading them is cheap;
delete-policy topics only read partitions that have level-0 chunks.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from itertools import groupby
from typing import Any

from skiff.metadata import configs
from skiff.metadata.compaction.rules import ChunkStat, cleanable_offsets, merge_start, needs_cleaning
from skiff.metadata.compaction.types import CandidateChunk, CompactionCandidate, MergeRules
from skiff.metadata.db import read_tx
from skiff.metadata.rows import LOC_COLS, Db, location_of
from skiff.metadata.schema import chunks, compaction_state, files, partitions, topics
from skiff.metadata.transactions.cleanup import aborted_ranges, last_stable_offsets
from skiff.metadata.types import Topic
from sqlalchemy import Connection, and_, select


class CompactionPlanning:
    def __init__(self, db: Db) -> None:
        self._db = db

    def compaction_candidates(
        self, topic: str | None = None, rules: MergeRules | None = None, limit: int = 1000
    ) -> list[CompactionCandidate]:
        """The partitions that need a clean or a merge now, most urgent first: compacted
        ones (forced by max.compaction.lag.ms, then by dirty ratio, highest first, as
        Kafka's grabFilthiestCompactedLog), then merges (most bytes first); at most
        `limit`. `topic` restricts to one topic (by name)."""
        rules = rules or MergeRules()
        now = self._db.clock()
        with read_tx(self._db.engine) as conn:
            q = select(topics.c.topic_id, topics.c.name, topics.c.partition_count, topics.c.configs)
            if topic is not None:
                q = q.where(topics.c.name == topic)
            tops = [
                Topic(r.name, r.topic_id, r.partition_count, dict(r.configs))
                for r in conn.execute(q.order_by(topics.c.name))
            ]
            cleans: list[CompactionCandidate] = []
            merges: list[CompactionCandidate] = []
            for t in tops:
                if configs.is_compacted(t.configs):
                    cleans.extend(self._cleans(conn, t, now))
                else:
                    merges.extend(self._merges(conn, t, now, rules))
        cleans.sort(key=lambda c: (not c.forced, -c.dirty_ratio, c.topic_name, c.partition))
        merges.sort(key=lambda c: (-c.cleanable_bytes, c.topic_name, c.partition))
        return (cleans + merges)[: max(limit, 0)]

    def _rows(self, conn: Connection, topic_id: uuid.UUID, *, level0_only: bool) -> list[Any]:
        c, f, p, s = chunks.c, files.c, partitions.c, compaction_state.c
        q = (
            select(
                c.partition,
                *LOC_COLS,
                f.size_bytes.label("file_size_bytes"),
                f.level.label("file_level"),
                f.committed_ms,
                p.log_start_offset,
                p.high_watermark,
                s.first_dirty_offset,
                s.lease_token,
                s.lease_expires_ms,
            )
            .select_from(
                chunks.join(files, files.c.id == c.file_id)
                .join(partitions, and_(p.topic_id == c.topic_id, p.partition == c.partition))
                .outerjoin(compaction_state, and_(s.topic_id == c.topic_id, s.partition == c.partition))
            )
            .where(c.topic_id == topic_id)
            .order_by(c.partition, c.base_offset)
        )
        if level0_only:
            c2 = chunks.alias("c2")
            f2 = files.alias("f2")
            with_l0 = (
                select(c2.c.partition)
                .select_from(c2.join(f2, f2.c.id == c2.c.file_id))
                .where(c2.c.topic_id == topic_id, f2.c.level == 0)
            )
            q = q.where(c.partition.in_(with_l0))
        return list(conn.execute(q))

    def _cleans(self, conn: Connection, t: Topic, now: int) -> list[CompactionCandidate]:
        min_ratio = float(configs.config_value(t.configs, configs.MIN_CLEANABLE_DIRTY_RATIO))
        min_lag = configs.config_int(t.configs, configs.MIN_COMPACTION_LAG_MS)
        max_lag = configs.config_int(t.configs, configs.MAX_COMPACTION_LAG_MS)
        out = []
        lso = last_stable_offsets(conn, t.topic_id)
        for part, group in groupby(
            self._rows(conn, t.topic_id, level0_only=False), key=lambda r: r.partition
        ):
            rows = list(group)
            head = rows[0]
            if _leased(head, now):
                continue
            cl = cleanable_offsets(
                [_stat(r) for r in rows],
                checkpoint=head.first_dirty_offset,
                log_start_offset=head.log_start_offset,
                high_watermark=head.high_watermark,
                now_ms=now,
                min_compaction_lag_ms=min_lag,
                max_compaction_lag_ms=max_lag,
                last_stable_offset=lso.get(part),
            )
            if not needs_cleaning(cl, min_ratio):
                continue
            reason = (
                f"dirty data older than {configs.MAX_COMPACTION_LAG_MS}={max_lag}"
                if cl.forced and cl.dirty_ratio <= min_ratio
                else f"dirty ratio {cl.dirty_ratio:.3f} > {configs.MIN_CLEANABLE_DIRTY_RATIO}={min_ratio}"
            )
            consumed = [r for r in rows if r.base_offset < cl.cleanable_end_offset]
            out.append(
                _candidate(t, part, head, rows=consumed, compact=True, reason=reason, **_clean_fields(cl))
            )
        if out:  # the aborted transactions each clean drops (metadata.transactions.cleanup)
            ranges = aborted_ranges(conn, t.topic_id, {c.partition: c.cleanable_end_offset for c in out})
            out = [replace(c, aborted=tuple(ranges.get(c.partition, ()))) for c in out]
        return out

    def _merges(self, conn: Connection, t: Topic, now: int, rules: MergeRules) -> list[CompactionCandidate]:
        out = []
        for part, group in groupby(self._rows(conn, t.topic_id, level0_only=True), key=lambda r: r.partition):
            rows = list(group)
            head = rows[0]
            if _leased(head, now):
                continue
            start = merge_start([_stat(r) for r in rows], now, rules)
            if start is None:
                continue
            consumed = rows[start:]
            nbytes = sum(r.byte_length for r in consumed)
            l0 = sum(1 for r in consumed if r.file_level == 0)
            out.append(
                _candidate(
                    t,
                    part,
                    head,
                    rows=consumed,
                    compact=False,
                    reason=f"merge {l0} level-0 chunk(s) of {len(consumed)}, {nbytes} bytes",
                    first_dirty_offset=consumed[0].base_offset,
                    cleanable_end_offset=consumed[-1].last_offset + 1,
                    clean_bytes=0,
                    cleanable_bytes=nbytes,
                    dirty_ratio=1.0,
                    forced=False,
                )
            )
        return out


def _leased(r: Any, now: int) -> bool:
    return r.lease_token is not None and r.lease_expires_ms is not None and r.lease_expires_ms > now


def _stat(r: Any) -> ChunkStat:
    return ChunkStat(
        r.base_offset, r.last_offset, r.byte_length, r.max_timestamp, r.file_level, r.committed_ms
    )


def _clean_fields(cl: Any) -> dict[str, Any]:
    return {
        "first_dirty_offset": cl.first_dirty_offset,
        "cleanable_end_offset": cl.cleanable_end_offset,
        "clean_bytes": cl.clean_bytes,
        "cleanable_bytes": cl.cleanable_bytes,
        "dirty_ratio": cl.dirty_ratio,
        "forced": cl.forced,
    }


def _candidate(
    t: Topic, part: int, head: Any, *, rows: Sequence[Any], compact: bool, reason: str, **fields: Any
) -> CompactionCandidate:
    return CompactionCandidate(
        topic_id=t.topic_id,
        partition=part,
        topic_name=t.name,
        compact=compact,
        delete="delete" in configs.cleanup_policies(t.configs),
        delete_retention_ms=configs.config_int(t.configs, configs.DELETE_RETENTION_MS),
        log_start_offset=head.log_start_offset,
        high_watermark=head.high_watermark,
        reason=reason,
        chunks=tuple(CandidateChunk(location_of(r), r.file_size_bytes, r.file_level) for r in rows),
        **fields,
    )


__all__ = ["CompactionPlanning"]
