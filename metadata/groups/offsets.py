"""Consumer groups' committed offsets (OffsetCommit, OffsetFetch, OffsetDelete, DeleteGroups).

One row per (group, topic, partition): the committed offset, its metadata string and
leader epoch, and when it was committed. A commit upserts (the last one wins if a
partition is listed twice in one request) the offsets that pass the checks (partition
exists, metadata size) and answers each offset with its own Kafka error code. The offset
itself is stored as given, negative ones included: Kafka's coordinator checks only the
metadata size, and clients rely on it (KafkaJS `resetOffsets({earliest: true})` commits
the sentinel -2 and reads it back with OffsetFetch). Deletions are per group or per
partition, each in one transaction. Group membership itself lives in the agents, not here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from skiff.metadata.commits.validation import MAX_OFFSET_METADATA_BYTES
from skiff.metadata.db import read_tx, write_tx
from skiff.metadata.errors import (
    GROUP_ID_NOT_FOUND,
    OFFSET_METADATA_TOO_LARGE,
    UNKNOWN_TOPIC_OR_PARTITION,
    MetadataError,
)
from skiff.metadata.groups import admin as group_admin
from skiff.metadata.groups import leases as group_leases
from skiff.metadata.groups import offsets_log
from skiff.metadata.groups.lease_types import LeaseToken
from skiff.metadata.rows import IDS_PER_STATEMENT, Db, upsert
from skiff.metadata.schema import group_offsets, topics
from skiff.metadata.types import GroupOffset, OffsetCommitResult, OffsetsLogPage, OffsetsLogQuery
from sqlalchemy import Connection, delete, select, tuple_

# A committed offset's key (the primary key of `group_offsets`).
OFFSET_KEY = ("group_id", "topic", "partition")


class GroupOffsets:
    def __init__(self, db: Db) -> None:
        self._db = db

    def commit_offsets(
        self, group_id: str, offsets: Sequence[GroupOffset], lease: LeaseToken | None = None
    ) -> list[OffsetCommitResult]:
        """Store the valid offsets (the last one wins if a partition is listed twice) and
        answer each one: refused are metadata strings over 4096 bytes
        (OFFSET_METADATA_TOO_LARGE) and partitions that do not exist
        (UNKNOWN_TOPIC_OR_PARTITION); offsets are stored as given, as Kafka does. The topics are read FOR SHARE in the same
        transaction, so a concurrent delete_topic (which removes its group offsets) cannot
        leave an offset of a deleted topic behind. With `lease`, only while it is the
        group's current coordinator lease (checked in this transaction, else the whole
        commit is refused with NOT_COORDINATOR: metadata.groups.leases)."""
        if not offsets:
            return []
        now = self._db.clock()
        with write_tx(self._db.engine) as conn:
            if lease is not None:
                group_leases.check(conn, group_id, lease, now)
            return self._store(conn, group_id, offsets, now)

    def reset_offsets(self, group_id: str, offsets: Sequence[GroupOffset]) -> list[OffsetCommitResult]:
        """An operator's commit (`skiff groups reset-offsets --execute`): as commit_offsets,
        but refused with NON_EMPTY_GROUP while the group has active members (checked in
        the same transaction: metadata.groups.admin)."""
        if not offsets:
            return []
        with write_tx(self._db.engine) as conn:
            group_admin.check_empty(conn, self._db, group_id, "reset offsets of")
            return self._store(conn, group_id, offsets, self._db.clock())

    def delete_group(self, group_id: str) -> None:
        """`skiff groups delete`: refused with NON_EMPTY_GROUP while the group has active
        members, GROUP_ID_NOT_FOUND if it has neither offsets nor stored state."""
        with write_tx(self._db.engine) as conn:
            group_admin.check_empty(conn, self._db, group_id, "delete")
            if not group_admin.forget_group(conn, group_id):
                raise MetadataError(GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")

    def _store(
        self, conn: Connection, group_id: str, offsets: Sequence[GroupOffset], now: int
    ) -> list[OffsetCommitResult]:
        results: list[OffsetCommitResult] = []
        counts = _partition_counts(conn, sorted({o.topic for o in offsets}))
        latest: dict[tuple[str, int], GroupOffset] = {}
        for o in offsets:
            result = _check(o, counts.get(o.topic))
            results.append(result)
            if not result.error_code:
                latest[(o.topic, o.partition)] = o
        if latest:
            rows = [_row(group_id, o, now) for o in latest.values()]
            offsets_log.place(conn, rows)  # their places in __consumer_offsets
            upsert(conn, group_offsets, OFFSET_KEY, rows)
        return results

    def fetch_offsets(self, group_id: str, topics_: Sequence[str] | None) -> list[GroupOffset]:
        with read_tx(self._db.engine) as conn:
            return fetch_offsets_in(conn, group_id, topics_)

    def read_offsets_log(self, queries: Sequence[OffsetsLogQuery]) -> list[OffsetsLogPage]:
        """Partitions of `__consumer_offsets` (metadata.groups.offsets_log), in one snapshot."""
        with read_tx(self._db.engine) as conn:
            return [offsets_log.read(conn, q) for q in queries]

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


def _partition_counts(conn: Connection, names: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in range(0, len(names), IDS_PER_STATEMENT):
        stmt = (
            select(topics.c.name, topics.c.partition_count)
            .where(topics.c.name.in_(names[i : i + IDS_PER_STATEMENT]))
            .with_for_update(read=True)
        )
        out.update({r.name: r.partition_count for r in conn.execute(stmt)})
    return out


def _check(o: GroupOffset, partition_count: int | None) -> OffsetCommitResult:
    if partition_count is None or not 0 <= o.partition < partition_count:
        return OffsetCommitResult(
            UNKNOWN_TOPIC_OR_PARTITION, f"no partition {o.partition} of topic {o.topic!r}"
        )
    if (
        o.metadata is not None
        and len(o.metadata.encode("utf-8", "surrogatepass")) > MAX_OFFSET_METADATA_BYTES
    ):
        return OffsetCommitResult(
            OFFSET_METADATA_TOO_LARGE,
            f"offset metadata of {o.topic}/{o.partition} over {MAX_OFFSET_METADATA_BYTES} bytes",
        )
    return OffsetCommitResult()


def _row(group_id: str, o: GroupOffset, now: int) -> dict[str, Any]:
    return {
        "group_id": group_id,
        "topic": o.topic,
        "partition": o.partition,
        "committed_offset": o.offset,
        "metadata": o.metadata,
        "leader_epoch": o.leader_epoch,
        "commit_time_ms": now,
    }


def fetch_offsets_in(conn: Connection, group_id: str, topics_: Sequence[str] | None) -> list[GroupOffset]:
    """A group's committed offsets (of `topics_`, or all), inside the caller's transaction."""
    g = group_offsets.c
    stmt = select(g.topic, g.partition, g.committed_offset, g.metadata, g.leader_epoch).where(
        g.group_id == group_id
    )
    if topics_ is not None:
        if not topics_:
            return []
        stmt = stmt.where(g.topic.in_(sorted(set(topics_))))
    rows = conn.execute(stmt.order_by(g.topic, g.partition)).all()
    return [GroupOffset(r.topic, r.partition, r.committed_offset, r.metadata, r.leader_epoch) for r in rows]
