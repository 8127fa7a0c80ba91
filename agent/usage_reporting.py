"""The agent's object-store usage reports (metadata.usage): every `REPORT_INTERVAL_MS` (and
once more when the agent closes), what its own store was asked since the last accepted report
(`report_agent_usage`, as role `agent`) and what each in-process compaction role's store
was asked (`report_compactor_usage`, as `compactor`). The books (what was already reported)
are metadata.wire.usage_report's; a failed report is kept for the next one, and at most one
report per role is in flight.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from skiff.agent.periodic import Periodic
from skiff.agent.store_metrics import store_snapshots
from skiff.fileformat.objectstore import StatsSnapshot
from skiff.metadata.wire.usage_report import REPORT_INTERVAL_MS, UsageBook, report_async

if TYPE_CHECKING:
    from skiff.agent.runtime import RunningAgent

log = logging.getLogger(__name__)

FINAL_REPORT_TIMEOUT_S = 2.0  # a closing agent does not wait longer for metadata


class UsageReporting:
    """A background task of a running agent (started and closed like the others)."""

    def __init__(self, agent: RunningAgent, interval_ms: int = REPORT_INTERVAL_MS) -> None:
        self._agent = agent
        self._books: dict[str, UsageBook] = {}
        self._poller = Periodic("usage-report", lambda: interval_ms / 1000, self.report, self._unexpected)

    def start(self) -> None:
        self._poller.start()

    def _book(self, role: str) -> UsageBook:
        book = self._books.get(role)
        if book is None:
            book = self._books[role] = UsageBook(lambda: self._snapshot(role))
        return book

    def _snapshot(self, role: str) -> StatsSnapshot:
        for r, snap in store_snapshots(self._agent):
            if r == role:
                return snap
        return StatsSnapshot()

    async def report(self) -> None:
        """Report every role's pending usage now."""
        md = self._agent.metadata
        agent_id = self._agent.config.agent_id
        roles = {role for role, _ in store_snapshots(self._agent)}
        for role in sorted(roles):
            book = self._book(role)
            if role == "agent":
                await report_async(book, lambda u: md.report_agent_usage(agent_id, u))
            else:
                await report_async(book, md.report_compactor_usage)

    @property
    def failures(self) -> int:
        return sum(b.failures for b in self._books.values())

    @staticmethod
    def _unexpected(e: Exception) -> None:
        log.warning("object-store usage report failed: %s", e)

    async def close(self) -> None:
        await self._poller.close()
        try:
            await asyncio.wait_for(self.report(), FINAL_REPORT_TIMEOUT_S)
        except TimeoutError:
            log.info("the last object-store usage report timed out; its requests are not counted")
