"""The garbage collector's side of metadata: claiming `deleting` files, forgetting them,
telling orphans from known objects, and when each cleanup last succeeded.

A file becomes `deleting` when its last chunk goes (compaction swap, retention,
DeleteRecords, topic deletion; metadata.rows.mark_orphan_files_deleting) and records when
(`deleting_since_ms`). The collector (compactor.gc) then:

1. `claim_deletable_files(token, ...)`: claims up to `max_files` files that have been
   `deleting` for at least `grace_ms` and are not claimed by someone else (or whose claim
   expired: a crashed collector), setting `gc_claim_token` / `gc_claimed_until_ms` in one
   transaction. On PostgreSQL the candidate rows are read `FOR UPDATE SKIP LOCKED`, so
   concurrent collectors take disjoint sets without waiting on each other; SQLite has
   one writer at a time. A claimed file is never handed to another collector before
   its claim expires, so collectors do not repeat each other's deletes.
2. deletes the objects (batched `delete_many`), then `forget_files(token, ids)`: removes
   the rows it still holds the claim on. A file row goes only after its object.

The grace period must exceed the longest time a reader may keep using a chunk location
it learnt before the file became `deleting` (agents' `chunk_cache_ttl_ms` plus a fetch's
duration): the default grace is 10 minutes against a 30 s cache.

Orphans (objects no file row names: an agent or compactor died between PUT and commit)
are found by the collector's paged bucket scan; `unknown_object_keys` answers which keys
of one page metadata does not know.

`record_success(task)` / `last_successes()` keep when each task ("gc", "orphans",
"retention") last finished; metadata's /metrics exposes the age.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from skiff.metadata.db import read_tx, write_tx
from skiff.metadata.errors import INVALID_REQUEST, MetadataError
from skiff.metadata.rows import IDS_PER_STATEMENT, Db, upsert
from skiff.metadata.schema import FILE_DELETING, files, maintenance_runs
from skiff.metadata.types import ClaimedFile
from sqlalchemy import and_, delete, or_, select, update

MAX_CLAIM_FILES = 10_000
_TASK_NAME = re.compile(r"[a-z0-9_-]{1,64}")  # also a Prometheus label value: no quoting needed


class GarbageCollection:
    def __init__(self, db: Db) -> None:
        self._db = db

    def claim_deletable_files(
        self, token: str, max_files: int, grace_ms: int, claim_ms: int
    ) -> list[ClaimedFile]:
        """Claim (for `claim_ms`) up to `max_files` files `deleting` for >= `grace_ms`,
        oldest first, that nobody else holds a live claim on."""
        if not token or len(token) > 64:
            raise MetadataError(INVALID_REQUEST, "claim token must be 1..64 characters")
        if not 1 <= max_files <= MAX_CLAIM_FILES or grace_ms < 0 or claim_ms <= 0:
            raise MetadataError(INVALID_REQUEST, "bad max_files, grace_ms or claim_ms")
        now = self._db.clock()
        f = files.c
        with write_tx(self._db.engine) as conn:
            rows = conn.execute(
                select(f.id, f.object_key)
                .where(
                    f.state == FILE_DELETING,
                    f.deleting_since_ms <= now - grace_ms,
                    or_(f.gc_claimed_until_ms.is_(None), f.gc_claimed_until_ms <= now),
                )
                .order_by(f.deleting_since_ms, f.id)
                .limit(max_files)
                .with_for_update(skip_locked=True)
            ).all()
            ids = [r.id for r in rows]
            for i in range(0, len(ids), IDS_PER_STATEMENT):
                conn.execute(
                    update(files)
                    .where(f.id.in_(ids[i : i + IDS_PER_STATEMENT]))
                    .values(gc_claim_token=token, gc_claimed_until_ms=now + claim_ms)
                )
        return [ClaimedFile(r.id, r.object_key) for r in rows]

    def forget_files(self, token: str, file_ids: Sequence[int]) -> int:
        """Remove the rows of deleted objects that `token` still holds a live claim on;
        returns how many were removed (a claim that expired and was taken over is not
        this collector's any more, and its row stays for the new holder)."""
        ids = sorted(set(file_ids))
        now = self._db.clock()
        f = files.c
        n = 0
        with write_tx(self._db.engine) as conn:
            for i in range(0, len(ids), IDS_PER_STATEMENT):
                n += (
                    conn.execute(
                        delete(files).where(
                            f.id.in_(ids[i : i + IDS_PER_STATEMENT]),
                            and_(f.state == FILE_DELETING, f.gc_claim_token == token),
                            f.gc_claimed_until_ms > now,
                        )
                    ).rowcount
                    or 0
                )
        return n

    def unknown_object_keys(self, object_keys: Sequence[str]) -> list[str]:
        """The keys among `object_keys` that no file row names (sorted)."""
        keys = sorted(set(object_keys))
        known: set[str] = set()
        with read_tx(self._db.engine) as conn:
            for i in range(0, len(keys), IDS_PER_STATEMENT):
                part = keys[i : i + IDS_PER_STATEMENT]
                known.update(
                    r[0] for r in conn.execute(select(files.c.object_key).where(files.c.object_key.in_(part)))
                )
        return [k for k in keys if k not in known]

    def record_success(self, task: str) -> None:
        if not _TASK_NAME.fullmatch(task):
            raise MetadataError(INVALID_REQUEST, "task name must be 1..64 of [a-z0-9_-]")
        now = self._db.clock()
        with write_tx(self._db.engine) as conn:
            upsert(conn, maintenance_runs, ["task"], [{"task": task, "last_success_ms": now}])

    def last_successes(self) -> dict[str, int]:
        """task -> when it last succeeded (ms since the epoch)."""
        with read_tx(self._db.engine) as conn:
            return {r.task: r.last_success_ms for r in conn.execute(select(maintenance_runs))}
