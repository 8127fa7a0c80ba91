"""The reporting side of object-store usage (metadata.usage): what a process asked of its
bucket since its last report.

`UsageBook` keeps the store's counters (`fileformat.objectstore.StatsSnapshot`) as of the
last report that the metadata service accepted; `pending()` is the difference since then as
a `StoreUsage` (request kinds folded into the bill's classes: `put` and `create_if_absent`
are PUTs, `get`, `get_range` and `stream_get` GETs), and `reported(at)` moves the mark once
the service has it. A report that fails is not marked, so its requests travel with the next
one: nothing is lost while metadata is down, and nothing is counted twice unless a report
that timed out had in fact been stored. Each value is capped at the operation's bound
(`metadata.types.UsageCount`/`UsageBytes`); the excess of a process that could not report for
a very long time is dropped, not sent.

Who reports: the agent every `REPORT_INTERVAL_MS` (agent.usage_reporting), `skiff compact`
every `REPORT_INTERVAL_MS` and when it ends, a Spark executor after each task (spark.usage).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Mapping

from skiff.fileformat.objectstore import StatsSnapshot
from skiff.metadata.errors import MetadataError, MetadataUnavailable
from skiff.metadata.types import StoreUsage

log = logging.getLogger(__name__)

REPORT_INTERVAL_MS = 30_000
_MAX_COUNT = 2**32
_MAX_BYTES = 2**40


def usage_of(delta: StatsSnapshot) -> StoreUsage:
    """A store's request accounting (a difference of two snapshots) in the bill's classes."""
    r: Mapping[str, int] = delta.requests

    def count(*kinds: str) -> int:
        return max(0, min(_MAX_COUNT, sum(r.get(k, 0) for k in kinds)))

    return StoreUsage(
        puts=count("put", "create_if_absent"),
        gets=count("get", "get_range", "stream_get"),
        heads=count("head"),
        lists=count("list"),
        deletes=count("delete"),
        errors=max(0, min(_MAX_COUNT, sum(delta.errors.values()))),
        bytes_in=max(0, min(_MAX_BYTES, delta.bytes_in)),
        bytes_out=max(0, min(_MAX_BYTES, delta.bytes_out)),
    )


class UsageBook:
    """What a store was asked since the last accepted report (thread-safe)."""

    def __init__(self, snapshot: Callable[[], StatsSnapshot]) -> None:
        self.snapshot = snapshot
        self._lock = threading.Lock()
        self._reported = StatsSnapshot()
        self.failures = 0

    def pending(self) -> tuple[StoreUsage, StatsSnapshot]:
        """(usage since the last accepted report, the counters it was taken at)."""
        now = self.snapshot()
        with self._lock:
            return usage_of(now - self._reported), now

    def reported(self, at: StatsSnapshot) -> None:
        """The service accepted the usage taken at `at`."""
        with self._lock:
            self._reported = at

    def failed(self) -> None:
        with self._lock:
            self.failures += 1


def report_sync(book: UsageBook, send: Callable[[StoreUsage], None]) -> bool:
    """Send what `book` has pending with `send` (a blocking client's `report_*_usage`);
    False if it failed (the usage stays pending). Nothing is sent when nothing was asked."""
    usage, at = book.pending()
    if usage.empty:
        return True
    try:
        send(usage)
    except (MetadataError, MetadataUnavailable) as e:
        book.failed()
        log.debug("object-store usage report failed (kept for the next one): %s", e)
        return False
    book.reported(at)
    return True


async def report_async(book: UsageBook, send: Callable[[StoreUsage], Awaitable[None]]) -> bool:
    """`report_sync` for an async client."""
    usage, at = book.pending()
    if usage.empty:
        return True
    try:
        await send(usage)
    except (MetadataError, MetadataUnavailable) as e:
        book.failed()
        log.debug("object-store usage report failed (kept for the next one): %s", e)
        return False
    book.reported(at)
    return True
