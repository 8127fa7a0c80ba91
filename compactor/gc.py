"""The garbage collector: the one owner of object deletion in the bucket.

Two jobs, both safe to run in many processes at once:

- `collect_once`: files that have been `deleting` (no live chunk refers to them) for at
  least `grace_ms` are claimed in metadata (`claim_deletable_files`, each claim expiring
  after `claim_ms`, so a crashed collector's files are retried by another), their
  objects deleted with batched `delete_many`, then their rows forgotten
  (`forget_files`): the row goes only after the object. Claimed sets are disjoint, so
  collectors never repeat each other's deletes. Deletions are rate-limited
  (`max_deletes_per_s`, a token bucket over an injected clock).
- `collect_orphans`: objects that no file row names (uploaded, then never committed: an
  agent or compactor crashed between PUT and commit) are found by a paged bucket scan
  (`store.list`, here only, never on a hot path), one metadata question per page
  (`unknown_object_keys`), and deleted when older than `orphan_grace_ms`, which must
  exceed the longest PUT-to-commit time (agents retry a commit for at most a few
  minutes; default 1 hour). Skiff's own objects under `_skiff/` (fileformat.objectstore.keys)
  are never segments: metadata is never asked about them, and only readiness probe objects
  not rewritten for `orphan_grace_ms` (their agent is gone: a live one rewrites its own
  every few seconds) are deleted.

Grace period: a reader may use a chunk location it learnt before the file became
`deleting` for up to the agents' `chunk_cache_ttl_ms` (default 30 s), plus a fetch's own
duration. `grace_ms` (default 10 minutes) must be well above that; `skiff compact` and
the playground use the default.

After each successful run the task's time is recorded in metadata (`record_success`:
"gc" / "orphans"); metadata's /metrics reports its age
(`skiff_maintenance_last_success_age_seconds{task=...}`). Each batch deleted is logged at
DEBUG; the maintenance pass logs one INFO summary when anything was (compactor.runner).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from skiff.fileformat.objectstore import ObjectInfo, ObjectStore
from skiff.fileformat.objectstore.keys import READINESS_PREFIX, is_internal
from skiff.fileformat.tables_layout import TABLES_PREFIX
from skiff.metadata.wire.operations import CompactorClient

log = logging.getLogger(__name__)


DEFAULT_GRACE_MS = 10 * 60_000
DEFAULT_ORPHAN_GRACE_MS = 60 * 60_000
DEFAULT_CLAIM_MS = 5 * 60_000
DEFAULT_BATCH_FILES = 1000  # S3 DeleteObjects takes up to 1000 keys
DEFAULT_MAX_DELETES_PER_S = 1000.0
DEFAULT_LIST_PAGE = 1000


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class GcStats:
    files_deleted: int = 0
    orphans_deleted: int = 0
    objects_scanned: int = 0


class RateLimiter:
    """A token bucket: `acquire(n)` waits until n deletes fit under `per_s` (burst: one second's worth)."""

    def __init__(
        self,
        per_s: float,
        clock_s: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._per_s = per_s
        self._clock = clock_s
        self._sleep = sleep
        self._tokens = per_s
        self._last = clock_s()

    async def acquire(self, n: int) -> None:
        while True:
            now = self._clock()
            self._tokens = min(self._per_s, self._tokens + (now - self._last) * self._per_s)
            self._last = now
            if self._tokens >= min(n, self._per_s):
                self._tokens -= n
                return
            await self._sleep((min(n, self._per_s) - self._tokens) / self._per_s)


class GarbageCollector:
    def __init__(
        self,
        metadata: CompactorClient,
        store: ObjectStore,
        *,
        grace_ms: int = DEFAULT_GRACE_MS,
        orphan_grace_ms: int = DEFAULT_ORPHAN_GRACE_MS,
        claim_ms: int = DEFAULT_CLAIM_MS,
        batch_files: int = DEFAULT_BATCH_FILES,
        max_deletes_per_s: float = DEFAULT_MAX_DELETES_PER_S,
        list_prefix: str = "",
        wall_ms: Callable[[], int] = _wall_ms,
        limiter: RateLimiter | None = None,
    ) -> None:
        self._md = metadata
        self._store = store
        self.grace_ms = grace_ms
        self.orphan_grace_ms = orphan_grace_ms
        self.claim_ms = claim_ms
        self.batch_files = batch_files
        self.list_prefix = list_prefix
        self._wall_ms = wall_ms
        self._limiter = limiter or RateLimiter(max_deletes_per_s)
        self.token = uuid.uuid4().hex  # this collector's claims
        self.stats = GcStats()

    async def collect_once(self) -> int:
        """Delete every file past its grace period that nobody else has claimed; returns
        how many this collector deleted."""
        deleted = 0
        while True:
            claimed = await self._md.claim_deletable_files(
                self.token, self.batch_files, self.grace_ms, self.claim_ms
            )
            if not claimed:
                break
            await self._limiter.acquire(len(claimed))
            await asyncio.to_thread(self._store.delete_many, [c.object_key for c in claimed])
            await self._md.forget_files(self.token, [c.file_id for c in claimed])
            deleted += len(claimed)
            log.debug("gc: deleted %d file(s)", len(claimed))
        self.stats.files_deleted += deleted
        await self._md.record_success("gc")
        return deleted

    async def collect_orphans(self) -> int:
        """Delete objects that no file row names and that are older than orphan_grace_ms."""
        cutoff = datetime.fromtimestamp((self._wall_ms() - self.orphan_grace_ms) / 1000, tz=UTC)
        listing = iter(self._store.list(self.list_prefix))  # lazy: pages are pulled in a thread
        deleted = 0
        while True:
            page = await asyncio.to_thread(_next_page, listing, DEFAULT_LIST_PAGE)
            if not page:
                break
            self.stats.objects_scanned += len(page)
            old = {o.key for o in page if o.last_modified <= cutoff}
            gone_probes = sorted(k for k in old if k.startswith(READINESS_PREFIX))
            # not segments, not metadata's to know: Skiff's own objects and the Iceberg
            # tables' files (compactor.tables, which the table's snapshots own)
            old = {k for k in old if not is_internal(k) and not k.startswith(TABLES_PREFIX)}
            if gone_probes:
                await self._limiter.acquire(len(gone_probes))
                await asyncio.to_thread(self._store.delete_many, gone_probes)
                deleted += len(gone_probes)
                log.debug("gc: deleted %d readiness probe object(s) of gone agents", len(gone_probes))
            if not old:
                continue
            unknown = await self._md.unknown_object_keys(sorted(old))
            if unknown:
                await self._limiter.acquire(len(unknown))
                await asyncio.to_thread(self._store.delete_many, unknown)
                deleted += len(unknown)
                log.debug("gc: deleted %d orphan object(s)", len(unknown))
        self.stats.orphans_deleted += deleted
        await self._md.record_success("orphans")
        return deleted


def _next_page(it: Iterator[ObjectInfo], n: int) -> list[ObjectInfo]:
    out: list[ObjectInfo] = []
    for o in it:
        out.append(o)
        if len(out) >= n:
            break
    return out
