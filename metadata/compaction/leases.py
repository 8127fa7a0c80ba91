"""Compaction job leases and cleaner checkpoints (the `compaction_state` rows).

A job claims all its partitions at once, or none: the claim takes the partitions'
state rows whose lease is absent or expired and writes one token, a holder name and an
expiry (now + lease_ms) into each. Two compactors never hold one partition, so never
consume the same input chunks; a crashed compactor's lease expires and the partitions
are planned again.

- PostgreSQL: `SELECT ... FOR UPDATE SKIP LOCKED` over the free rows: rows another
  claim is taking right now are skipped rather than waited for, so racing planners
  never queue behind each other; fewer rows than asked means someone else has some of
  them, and the claim gives up (the transaction changes nothing).
- SQLite: write transactions hold the database's one write lock (`BEGIN IMMEDIATE`), so a
  conditional UPDATE (`WHERE lease free`) and its row count are the claim.

State rows are created on first use, in their own short transaction before the claim
(so that the claim itself only ever locks existing rows, in (topic, partition) order).
The claim also checks that the job's input chunks still exist: a plan made from rows
another compactor has since swapped away is refused at once instead of at the swap.

The swap (`metadata.compaction.swap`) calls `check_lease` and `move_checkpoints` inside
its transaction, after the partition locks: a swap under a lost or expired lease is
refused (ConflictError) and leaves everything as it was, and the cleaner checkpoint
moves only together with the data it describes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

from skiff.metadata.commits.storage import Key
from skiff.metadata.compaction.types import CheckpointUpdate, CompactionLease
from skiff.metadata.db import read_tx, write_tx
from skiff.metadata.errors import (
    CONFLICT,
    INVALID_REQUEST,
    UNKNOWN_TOPIC_OR_PARTITION,
    ConflictError,
    MetadataError,
)
from skiff.metadata.rows import IDS_PER_STATEMENT, Db, insert_on_conflict, upsert
from skiff.metadata.schema import chunks, compaction_state
from skiff.metadata.types import PartitionKey
from sqlalchemy import ColumnElement, Connection, func, select, tuple_, update

MAX_LEASE_MS = 24 * 3600 * 1000
MAX_HOLDER_CHARS = 255

_s = compaction_state.c


def _keys_where(keys: Sequence[Key]) -> ColumnElement[bool]:
    return tuple_(_s.topic_id, _s.partition).in_(list(keys))


class CompactionLeases:
    def __init__(self, db: Db) -> None:
        self._db = db

    def claim_compaction_job(
        self,
        partitions: Sequence[PartitionKey],
        holder: str,
        lease_ms: int,
        input_chunk_ids: Sequence[int] = (),
    ) -> CompactionLease | None:
        """Lease every one of `partitions` to one new token, or none of them (None: some
        are leased by another job, or some input chunk is gone). Unknown partitions:
        MetadataError(UNKNOWN_TOPIC_OR_PARTITION)."""
        keys = sorted({(k.topic_id, k.partition) for k in partitions})
        if not keys:
            raise MetadataError(INVALID_REQUEST, "a compaction job claims at least one partition")
        _check_lease_ms(lease_ms)
        if len(holder) > MAX_HOLDER_CHARS:
            raise MetadataError(INVALID_REQUEST, f"lease holder longer than {MAX_HOLDER_CHARS} characters")
        self._ensure_rows(keys)
        now = self._db.clock()
        token = uuid.uuid4().hex
        free = (_s.lease_token.is_(None)) | (_s.lease_expires_ms.is_(None)) | (_s.lease_expires_ms <= now)
        with write_tx(self._db.engine) as conn:
            got = 0
            for batch in self._db.dialect.key_batches(keys):
                q = select(_s.topic_id, _s.partition).where(_keys_where(batch), free)
                if self._db.dialect.name == "postgresql":
                    q = q.order_by(_s.topic_id, _s.partition).with_for_update(skip_locked=True)
                got += len(conn.execute(q).all())
            if got != len(keys) or not _chunks_exist(conn, input_chunk_ids):
                return None  # nothing written: the transaction commits no change
            expires = now + lease_ms
            for batch in self._db.dialect.key_batches(keys):
                conn.execute(
                    update(compaction_state)
                    .where(_keys_where(batch), free)
                    .values(lease_token=token, lease_holder=holder, lease_expires_ms=expires)
                )
        return CompactionLease(token, holder, expires)

    def renew_compaction_lease(self, token: str, lease_ms: int) -> CompactionLease:
        """Extend a held lease to now + lease_ms; ConflictError if it was lost or has expired."""
        _check_lease_ms(lease_ms)
        now = self._db.clock()
        with write_tx(self._db.engine) as conn:
            rows = conn.execute(
                select(_s.lease_holder, _s.lease_expires_ms).where(_s.lease_token == token).with_for_update()
            ).all()
            if not rows or any(r.lease_expires_ms is None or r.lease_expires_ms <= now for r in rows):
                raise ConflictError(CONFLICT, f"compaction lease {token} was lost or has expired")
            conn.execute(
                update(compaction_state)
                .where(_s.lease_token == token)
                .values(lease_expires_ms=now + lease_ms)
            )
        return CompactionLease(token, rows[0].lease_holder or "", now + lease_ms)

    def release_compaction_lease(self, token: str) -> None:
        """Give the partitions back (a no-op if the lease is gone)."""
        with write_tx(self._db.engine) as conn:
            conn.execute(
                update(compaction_state)
                .where(_s.lease_token == token)
                .values(lease_token=None, lease_holder=None, lease_expires_ms=None)
            )

    def checkpoints(self, keys: Sequence[PartitionKey]) -> dict[PartitionKey, int | None]:
        """The cleaner checkpoints (first dirty offsets) of `keys`; None: never cleaned."""
        out: dict[PartitionKey, int | None] = dict.fromkeys(keys)
        with read_tx(self._db.engine) as conn:
            for batch in self._db.dialect.key_batches([(k.topic_id, k.partition) for k in keys]):
                for r in conn.execute(
                    select(_s.topic_id, _s.partition, _s.first_dirty_offset).where(_keys_where(batch))
                ):
                    out[PartitionKey(r.topic_id, r.partition)] = r.first_dirty_offset
        return out

    def _ensure_rows(self, keys: list[Key]) -> None:
        with write_tx(self._db.engine) as conn:
            known = self._db.dialect.read_partitions(conn, keys)
            missing = [k for k in keys if k not in known]
            if missing:
                raise MetadataError(
                    UNKNOWN_TOPIC_OR_PARTITION, f"no such partition {missing[0][0]}/{missing[0][1]}"
                )
            for batch in self._db.dialect.key_batches(keys):
                conn.execute(
                    insert_on_conflict(conn, compaction_state)
                    .values([{"topic_id": t, "partition": p} for t, p in batch])
                    .on_conflict_do_nothing(index_elements=["topic_id", "partition"])
                )


def _check_lease_ms(lease_ms: int) -> None:
    if not 0 < lease_ms <= MAX_LEASE_MS:
        raise MetadataError(INVALID_REQUEST, f"lease_ms must be in (0, {MAX_LEASE_MS}], got {lease_ms}")


def _chunks_exist(conn: Connection, ids: Sequence[int]) -> bool:
    wanted = sorted(set(ids))
    found = 0
    for i in range(0, len(wanted), IDS_PER_STATEMENT):
        part = wanted[i : i + IDS_PER_STATEMENT]
        found += conn.execute(
            select(func.count()).select_from(chunks).where(chunks.c.id.in_(part))
        ).scalar_one()
    return found == len(wanted)


def check_lease(db: Db, conn: Connection, token: str, keys: Iterable[Key], now: int) -> None:
    """Inside a swap, after its partition locks: every partition of the swap must be held
    by `token`, unexpired; the rows are locked so that no claim can take them meanwhile."""
    wanted = sorted(set(keys))
    held = 0
    for batch in db.dialect.key_batches(wanted):
        rows = conn.execute(
            select(_s.lease_token, _s.lease_expires_ms)
            .where(_keys_where(batch))
            .order_by(_s.topic_id, _s.partition)
            .with_for_update()
        ).all()
        held += sum(1 for r in rows if r.lease_token == token and (r.lease_expires_ms or 0) > now)
    if held != len(wanted):
        raise ConflictError(CONFLICT, f"compaction lease {token} was lost or has expired")


def move_checkpoints(
    db: Db, conn: Connection, updates: Sequence[CheckpointUpdate], locked: dict[Key, tuple[int, int]]
) -> None:
    """Inside a swap: set the cleaner checkpoints. Each partition must be one of the
    swap's (in `locked`: its log start and high watermark, read under the lock) and the
    offset within [0, high watermark]."""
    for u in updates:
        k = (u.topic_id, u.partition)
        if k not in locked:
            raise MetadataError(
                INVALID_REQUEST, f"checkpoint for {k[0]}/{k[1]}, which has no input chunk in this swap"
            )
        if not 0 <= u.first_dirty_offset <= locked[k][1]:
            raise MetadataError(
                INVALID_REQUEST,
                f"checkpoint {u.first_dirty_offset} of {k[0]}/{k[1]} is outside [0, {locked[k][1]}]",
            )
        row = {"topic_id": u.topic_id, "partition": u.partition, "first_dirty_offset": u.first_dirty_offset}
        upsert(conn, compaction_state, ["topic_id", "partition"], [row])
