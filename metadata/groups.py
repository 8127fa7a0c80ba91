"""Consumer groups' committed offsets (OffsetCommit, OffsetFetch, OffsetDelete, DeleteGroups).

One row per (group, topic, partition): the committed offset, its metadata string and
leader epoch, and when it was committed. A commit upserts (the last one wins if a
partition is listed twice in one request); deletions are per group or per partition,
each in one transaction. Group membership itself lives in the agents, not here.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, select, tuple_

from metadata.db import read_tx, write_tx
from metadata.rows import Db
from metadata.schema import group_offsets
from metadata.types import GroupOffset


class GroupOffsets:
    def __init__(self, db: Db) -> None:
        self._db = db

    def commit_offsets(self, group_id: str, offsets: Sequence[GroupOffset]) -> None:
        if not offsets:
            return
        now = self._db.clock()
        latest: dict[tuple[str, int], GroupOffset] = {}
        for o in offsets:  # the last one wins if a partition is listed twice
            latest[(o.topic, o.partition)] = o
        rows = [
            {
                "group_id": group_id,
                "topic": o.topic,
                "partition": o.partition,
                "committed_offset": o.offset,
                "metadata": o.metadata,
                "leader_epoch": o.leader_epoch,
                "commit_time_ms": now,
            }
            for o in latest.values()
        ]
        stmt = self._db.dialect.insert(group_offsets)
        stmt = stmt.on_conflict_do_update(
            index_elements=[group_offsets.c.group_id, group_offsets.c.topic, group_offsets.c.partition],
            set_={
                "committed_offset": stmt.excluded.committed_offset,
                "metadata": stmt.excluded.metadata,
                "leader_epoch": stmt.excluded.leader_epoch,
                "commit_time_ms": stmt.excluded.commit_time_ms,
            },
        )
        with write_tx(self._db.engine) as conn:
            conn.execute(stmt, rows)

    def fetch_offsets(self, group_id: str, topics_: Sequence[str] | None) -> list[GroupOffset]:
        g = group_offsets.c
        stmt = select(g.topic, g.partition, g.committed_offset, g.metadata, g.leader_epoch).where(
            g.group_id == group_id
        )
        if topics_ is not None:
            if not topics_:
                return []
            stmt = stmt.where(g.topic.in_(sorted(set(topics_))))
        with read_tx(self._db.engine) as conn:
            rows = conn.execute(stmt.order_by(g.topic, g.partition)).all()
        return [
            GroupOffset(r.topic, r.partition, r.committed_offset, r.metadata, r.leader_epoch) for r in rows
        ]

    def delete_group_offsets(self, group_id: str) -> None:
        """Forget a group's committed offsets (DeleteGroups)."""
        with write_tx(self._db.engine) as conn:
            conn.execute(delete(group_offsets).where(group_offsets.c.group_id == group_id))

    def delete_partition_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]]) -> None:
        """Forget the committed offsets of some (topic, partition)s of a group, in one
        transaction (OffsetDelete); partitions without a commit are ignored."""
        keys = sorted(set(partitions))
        if not keys:
            return
        g = group_offsets.c
        with write_tx(self._db.engine) as conn:
            for batch in self._db.dialect.key_batches(keys):
                conn.execute(
                    delete(group_offsets).where(
                        g.group_id == group_id, tuple_(g.topic, g.partition).in_(batch)
                    )
                )

    def groups_with_offsets(self, group_ids: Sequence[str] | None) -> list[str]:
        """The group ids (of `group_ids`, or all when None) that have committed offsets, sorted."""
        g = group_offsets.c
        stmt = select(g.group_id).distinct()
        if group_ids is not None:
            if not group_ids:
                return []
            stmt = stmt.where(g.group_id.in_(sorted(set(group_ids))))
        with read_tx(self._db.engine) as conn:
            return [r[0] for r in conn.execute(stmt.order_by(g.group_id)).all()]
