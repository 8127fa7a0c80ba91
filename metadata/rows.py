"""What the service's modules share: the database handle and the row helpers.

`Db` bundles the engine, its `Dialect` and the service's clock (milliseconds since the
epoch; tests inject one). The helpers turn rows into values (`location_of`,
`topic_from_row`), write rows keyed by a unique key (`upsert`, `insert_on_conflict`: the
one place the dialects' INSERT ... ON CONFLICT is spelled) and keep the file-state invariant (`mark_orphan_files_deleting`: a
live file that no chunk refers to any more becomes `deleting`, and garbage collection
removes its object after a grace period).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skiff.metadata.commits.storage import Dialect
from skiff.metadata.schema import FILE_DELETING, FILE_LIVE, PRODUCER_ID_SEQUENCE, chunks, files, sequences
from skiff.metadata.types import ChunkLocation, Topic
from sqlalchemy import Connection, Engine, Table, exists, insert, update
from sqlalchemy.dialects import postgresql, sqlite

Clock = Callable[[], int]

# Lists of ids (chunk ids, file ids, names) are split into statements of this many.
IDS_PER_STATEMENT = 1000


def insert_on_conflict(conn: Connection, table: Table) -> Any:
    """An INSERT of `table` that takes ON CONFLICT clauses, for the connection's database
    (PostgreSQL and SQLite both have them; SQLAlchemy spells each in its dialect)."""
    return (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(table)


def upsert(conn: Connection, table: Table, keys: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> None:
    """INSERT `rows` (all with the same columns); a row whose `keys` already exist instead
    updates the other columns it gives (ON CONFLICT DO UPDATE; columns it does not give keep
    their values)."""
    if not rows:
        return
    ins = insert_on_conflict(conn, table)
    stmt = ins.on_conflict_do_update(
        index_elements=[table.c[k] for k in keys],
        set_={name: ins.excluded[name] for name in rows[0] if name not in keys},
    )
    conn.execute(stmt, list(rows))


def system_clock() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Db:
    engine: Engine
    dialect: Dialect
    clock: Clock


# The columns of a ChunkLocation (chunks joined with files), in `location_of`'s order.
LOC_COLS = (
    chunks.c.id,
    files.c.object_key,
    chunks.c.byte_position,
    chunks.c.byte_length,
    chunks.c.base_offset,
    chunks.c.last_offset,
    chunks.c.record_count,
    chunks.c.max_timestamp,
    chunks.c.offsets_absolute,
    chunks.c.present_offsets,
    chunks.c.min_timestamp,
)


def location_of(r: Any) -> ChunkLocation:
    return ChunkLocation(
        chunk_id=r.id,
        object_key=r.object_key,
        byte_position=r.byte_position,
        byte_length=r.byte_length,
        base_offset=r.base_offset,
        last_offset=r.last_offset,
        record_count=r.record_count,
        max_timestamp=r.max_timestamp,
        offsets_absolute=bool(r.offsets_absolute),
        present_offsets=bytes(r.present_offsets) if r.present_offsets is not None else None,
        min_timestamp=r.min_timestamp,
    )


def topic_from_row(r: Any) -> Topic:
    return Topic(name=r.name, topic_id=r.topic_id, partition_count=r.partition_count, configs=dict(r.configs))


def mark_orphan_files_deleting(db: Db, conn: Connection, file_ids: Iterable[int], now: int) -> None:
    """Files among `file_ids` that no chunk refers to any more become `deleting`.

    The file rows are locked first (in id order, after the partition locks; PostgreSQL),
    so that two transactions removing the last chunks of one file from different
    partitions serialize here and the second one sees the first one's deletions:
    otherwise each could see the other's chunks and neither would mark it."""
    ids = sorted(set(file_ids))
    for i in range(0, len(ids), IDS_PER_STATEMENT):
        part = ids[i : i + IDS_PER_STATEMENT]
        db.dialect.lock_files(conn, part)
        conn.execute(
            update(files)
            .where(
                files.c.id.in_(part),
                files.c.state == FILE_LIVE,
                ~exists().where(chunks.c.file_id == files.c.id),
            )
            .values(state=FILE_DELETING, deleting_since_ms=now)
        )


def allocate_producer_id(conn: Connection) -> int:
    """The next producer id from the `producer_id` counter row, inside the caller's write
    transaction (idempotent and transactional producers share the sequence)."""
    value = conn.execute(
        update(sequences)
        .where(sequences.c.name == PRODUCER_ID_SEQUENCE)
        .values(next_value=sequences.c.next_value + 1)
        .returning(sequences.c.next_value)
    ).scalar()
    if value is None:
        conn.execute(insert(sequences).values(name=PRODUCER_ID_SEQUENCE, next_value=1))
        value = 1
    return int(value) - 1
