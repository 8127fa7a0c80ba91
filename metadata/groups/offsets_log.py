"""`__consumer_offsets`: the committed offsets as Kafka's internal topic, a view of `group_offsets`.

Lag tools (Burrow and the like) consume Kafka's internal offsets topic. Skiff keeps committed
offsets as rows, one per (group, topic, partition); this module gives each row a place in a
50-partition log so that the agent can serve that log (agent.consumer_offsets):

- the partition of a group is Kafka's: the Java hash code of the group id, absolute value
  (Integer.MIN_VALUE -> 0, Kafka's `Utils.abs`), modulo 50 (`offsets.topic.num.partitions`'
  default), so a tool computing a group's partition finds it there;
- each commit takes the next offset of its partition from the counter row
  `consumer_offsets-<partition>` of `sequences`, in the commit's own transaction. Taking it
  locks that row (PostgreSQL row lock, SQLite's single writer) until the commit ends, so
  offsets are taken in commit order: a reader that has seen offset N committed never sees a
  later commit get an offset at or below N. Partitions are locked in ascending order (no
  deadlock between commits of several groups);
- a commit of an already committed (group, topic, partition) moves its row to the new offset:
  the log holds the latest commit of each key, like a compacted topic whose older records
  the cleaner has removed. Offsets of overwritten, deleted (DeleteGroups, OffsetDelete,
  expiry) or dropped commits are holes; no tombstone is served for a deletion (as after
  Kafka's `delete.retention.ms`). The log starts at 0; its end is the counter.

A reader resuming at offset X reads the rows of its partition with log_offset >= X in order
(an index on (log_partition, log_offset)), so it misses no commit and repeats none.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from skiff.metadata.schema import group_offsets, sequences
from skiff.metadata.types import OffsetsLogEntry, OffsetsLogPage, OffsetsLogQuery
from sqlalchemy import Connection, func, insert, select, update

PARTITIONS = 50
TOPIC = "__consumer_offsets"


def java_hash(text: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, with 32-bit wrap-around."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str) -> int:
    """Kafka's `GroupCoordinator.partitionFor`: Utils.abs(groupId.hashCode) % 50."""
    h = java_hash(group_id)
    return (0 if h == -(2**31) else abs(h)) % PARTITIONS


def counter_name(partition: int) -> str:
    return f"consumer_offsets-{partition}"


def _take(conn: Connection, partition: int, count: int) -> int:
    """The first of `count` offsets of the partition, taken under its counter row's lock."""
    name = counter_name(partition)
    end = conn.execute(
        update(sequences)
        .where(sequences.c.name == name)
        .values(next_value=sequences.c.next_value + count)
        .returning(sequences.c.next_value)
    ).scalar()
    if end is None:  # a database made without the migrations' rows (created from the schema)
        conn.execute(insert(sequences).values(name=name, next_value=count))
        end = count
    return int(end) - count


def place(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Give each row about to be written to `group_offsets` its place in the log (sets its
    `log_partition` and `log_offset`), inside the caller's write transaction."""
    by_partition: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_partition[partition_for(row["group_id"])].append(row)
    for partition in sorted(by_partition):
        placed = by_partition[partition]
        first = _take(conn, partition, len(placed))
        for i, row in enumerate(placed):
            row["log_partition"] = partition
            row["log_offset"] = first + i


def _end(conn: Connection, partition: int) -> int:
    value = conn.execute(
        select(sequences.c.next_value).where(sequences.c.name == counter_name(partition))
    ).scalar()
    return 0 if value is None else int(value)


def _entry(r: Any) -> OffsetsLogEntry:
    return OffsetsLogEntry(
        int(r["log_offset"]),
        r["group_id"],
        r["topic"],
        int(r["partition"]),
        int(r["committed_offset"]),
        int(r["leader_epoch"]),
        r["metadata"],
        int(r["commit_time_ms"]),
    )


def read(conn: Connection, query: OffsetsLogQuery) -> OffsetsLogPage:
    """One partition's end, commits from `from_offset` on and the offset for `timestamp`,
    inside the caller's read transaction (one snapshot: the entries are below the end)."""
    g = group_offsets.c
    end = _end(conn, query.partition)
    entries: tuple[OffsetsLogEntry, ...] = ()
    if query.max_records > 0 and query.from_offset < end:
        stmt = (
            select(g.log_offset, g.group_id, g.topic, g.partition, g.committed_offset)
            .add_columns(g.leader_epoch, g.metadata, g.commit_time_ms)
            .where(g.log_partition == query.partition, g.log_offset >= query.from_offset, g.log_offset < end)
            .order_by(g.log_offset)
            .limit(query.max_records)
        )
        entries = tuple(_entry(r._mapping) for r in conn.execute(stmt))
    at = -1
    if query.timestamp >= 0:
        found = conn.execute(
            select(func.min(g.log_offset)).where(
                g.log_partition == query.partition, g.commit_time_ms >= query.timestamp
            )
        ).scalar()
        at = -1 if found is None else int(found)
    return OffsetsLogPage(end, entries, at)
