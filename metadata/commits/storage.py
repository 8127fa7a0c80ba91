"""What differs between PostgreSQL and SQLite, behind one interface.

The service's logic (metadata.topic_admin, commit_path, reads, compaction_swap, groups,
membership) is written once; every statement whose shape depends on the backend goes
through a `Dialect`: `metadata.commits.storage_pg.PgDialect` or
`metadata.commits.storage_sqlite.SqliteDialect`, chosen by `dialect_for(engine)`.

Two parts:

- `CommitSql`, the commit path's four steps (the hot path, written per backend for
  speed): lock the partitions and read their state, read the producer state, write the
  file/chunk/watermark/producer rows, announce the commit to other replicas.
  PostgreSQL does each in one statement whose key lists travel as arrays (the statement
  text never changes, so psycopg prepares it); SQLite uses JSON parameters and
  executemany.
- The rest of `Dialect`: reading and row-locking partitions, locking file rows, the
  upsert-capable INSERT, how many keys fit in one statement, and the listener that hears
  other replicas' commits (PostgreSQL LISTEN/NOTIFY; SQLite has a single writer process).

Locking rule both keep: partition rows are locked in one statement in
(topic_id, partition) order (PostgreSQL `FOR UPDATE`; SQLite write transactions start
with `BEGIN IMMEDIATE`, so the whole database is already locked).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from skiff.metadata.commits import idempotence
from skiff.metadata.commits.feed import CommitFeed, PgCommitListener
from skiff.metadata.commits.plan import CommitPlan, PartitionRow, PKey, ProducerStates, TKey, TopicIndex
from skiff.metadata.db import is_postgresql
from skiff.metadata.types import FileSpec
from sqlalchemy import Connection, Engine

Key = tuple[uuid.UUID, int]  # (topic id, partition)
KeyT = TypeVar("KeyT")


class CommitSql(Protocol):
    """The commit path's statements (see metadata.commits.path for the transaction)."""

    def lock_for_commit(
        self, conn: Connection, tindex: TopicIndex, keys: list[TKey], object_keys: list[str]
    ) -> tuple[dict[TKey, PartitionRow], bool]:
        """Lock the partitions `keys` (sorted) and read their state and their topics' flags;
        and whether any of `object_keys` is recorded already. Missing partitions are absent."""
        ...

    def load_producer_state(self, conn: Connection, tindex: TopicIndex, pkeys: list[PKey]) -> ProducerStates:
        """The state of the given (partition, producer) pairs; None where there is none."""
        ...

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
        """Insert the file rows (`deleting` when the plan stored nothing) and their chunk
        rows, set the new high watermarks, upsert the changed producer state. Returns the
        new chunk ids, per plan in the order of its runs."""
        ...

    def notify_committed(self, conn: Connection, moved: list[Key]) -> None:
        """Tell other replicas, if (and only if) the transaction commits, whose watermark moved."""
        ...


class Dialect(CommitSql, Protocol):
    name: str  # "postgresql" or "sqlite"

    def key_batches(self, keys: Sequence[KeyT]) -> Iterable[Sequence[KeyT]]:
        """`keys` in slices small enough for one statement's bound parameters."""
        ...

    def read_partitions(self, conn: Connection, keys: Iterable[Key]) -> dict[Key, tuple[int, int]]:
        """(log start, high watermark) of the partitions that exist among `keys`."""
        ...

    def lock_partitions(self, conn: Connection, keys: Iterable[Key]) -> dict[Key, tuple[int, int]]:
        """Lock the partition rows (in sorted order) in a write transaction; as read_partitions."""
        ...

    def lock_files(self, conn: Connection, file_ids: Sequence[int]) -> None:
        """Lock the file rows (sorted ids) in a write transaction."""
        ...

    def commit_listener(self, feed: CommitFeed, engine: Engine) -> PgCommitListener | None:
        """A (not yet started) listener publishing other replicas' commits into `feed`, or
        None when every writer is in this process."""
        ...


def dialect_for(engine: Engine) -> Dialect:
    if is_postgresql(engine):
        from skiff.metadata.commits.storage_pg import PgDialect

        return PgDialect()
    from skiff.metadata.commits.storage_sqlite import SqliteDialect

    return SqliteDialect()
