"""Reporting this agent's non-empty consumer groups to metadata, for offset expiry.

Kafka expires a group's committed offsets `offsets.retention.minutes` after the group
became empty. Metadata cannot see members (they live in the coordinating agent's
memory), so each agent reports the groups it coordinates that have members
(`metadata.touch_groups`, the `group_activity` table) every `interval_ms`, which must
not exceed Kafka's `offsets.retention.check.interval.ms` (default 10 minutes): a group's
last-active time is then at most one interval stale, and expiry
(`metadata.maintenance.retention`, run by the compactor) never takes a live group's offsets. A
failed report is logged and retried at the next tick; the agent serves on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from skiff.metadata.wire.operations import AgentClient

log = logging.getLogger(__name__)

# Kafka's offsets.retention.check.interval.ms; reporting twice per interval keeps a live
# group's activity fresher than the expiry check ever looks.
OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000
DEFAULT_REPORT_INTERVAL_MS = OFFSETS_RETENTION_CHECK_INTERVAL_MS // 2


class GroupActivityReporter:
    def __init__(
        self,
        metadata: AgentClient,
        non_empty_groups: Callable[[], list[str]],
        *,
        interval_ms: int = DEFAULT_REPORT_INTERVAL_MS,
    ) -> None:
        self._md = metadata
        self._groups = non_empty_groups
        self.interval_ms = interval_ms
        self._task: asyncio.Task[None] | None = None
        self.reports = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def report_once(self) -> None:
        groups = sorted(self._groups())
        if groups:
            await self._md.touch_groups(groups)
        self.reports += 1

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_ms / 1000)
            try:
                await self.report_once()
            except Exception as exc:  # boundary: the reporting task must not die
                # metadata away: the next tick tries again
                log.warning("reporting active consumer groups failed: %s", exc)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(Exception):  # a last report: members may just have left
            await self.report_once()
