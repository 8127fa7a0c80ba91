"""`MaintenanceLoop`: maintenance passes (compactor.runner.run_pass) every `interval_ms` until
stopped, or sooner when an operator asks for one (the console's "run a compaction pass":
`COMPACTION_REQUEST_TASK`, polled every `request_poll_ms`). What the playground, agents with
the compaction role and `skiff compact` without `--once` run; a failing pass is logged, not
fatal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator

from prometheus_client.core import Metric
from skiff.compactor import metrics
from skiff.compactor.pass_summary import PassSummary, Progress
from skiff.compactor.runner import RunnerConfig, run_pass
from skiff.fileformat.objectstore import ObjectStore, StatsSnapshot
from skiff.metadata.errors import MetadataError, MetadataUnavailable
from skiff.metadata.types import COMPACTION_REQUEST_TASK
from skiff.metadata.wire.operations import CompactorClient

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_MS = 30_000
# How often a waiting loop asks metadata whether an operator requested a pass now.
DEFAULT_REQUEST_POLL_MS = 5_000


class MaintenanceLoop:
    """Passes every `interval_ms` until `stop()`; a failing pass is logged, not fatal."""

    def __init__(
        self,
        md: CompactorClient,
        store: ObjectStore,
        config: RunnerConfig | None = None,
        *,
        interval_ms: int = DEFAULT_INTERVAL_MS,
        progress_factory: Callable[[], Progress] | None = None,
        on_pass: Callable[[PassSummary], None] | None = None,
        request_poll_ms: int = DEFAULT_REQUEST_POLL_MS,
    ) -> None:
        self.md = md
        self.store = store
        self.config = config or RunnerConfig()
        self.interval_ms = interval_ms
        self.request_poll_ms = request_poll_ms
        self._seen_request_ms = 0
        self._progress_factory = progress_factory
        self._on_pass = on_pass
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.total = PassSummary()
        self.passes = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self.run())

    def metric_families(self) -> Iterator[Metric]:
        """This process's maintenance metrics (compactor.metrics), for the /metrics of the
        process running the loop (an agent's collector asks its background tasks)."""
        return metrics.families()

    def object_store_stats(self) -> tuple[str, StatsSnapshot]:
        """The loop's own store's request accounting, as role `compactor`."""
        return "compactor", self.store.stats.snapshot()

    async def run(self) -> None:
        await self._requested()  # a request older than the first pass is already served by it
        while not self._stop.is_set():
            progress = self._progress_factory() if self._progress_factory else None
            try:
                summary = await run_pass(self.md, self.store, self.config, progress)
            except Exception as exc:  # boundary: the maintenance task must not die
                # metadata or bucket away: try again next interval
                log.warning("maintenance pass failed: %s", exc)
            else:
                self.passes += 1
                self.total.merge(summary)
                if self._on_pass:
                    self._on_pass(summary)
            await self._wait_for_next_pass()

    async def _wait_for_next_pass(self) -> None:
        """Until `interval_ms` has passed, `stop()`, or an operator asked for a pass (the
        console's "run a compaction pass": `COMPACTION_REQUEST_TASK`, polled every
        `request_poll_ms`, one small metadata read)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.interval_ms / 1000
        while not self._stop.is_set():
            left = deadline - loop.time()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), min(left, self.request_poll_ms / 1000))
            if not self._stop.is_set() and await self._requested():
                log.info("maintenance: a compaction pass was requested; running one now")
                return

    async def _requested(self) -> bool:
        """Whether a pass was requested since the last time this asked."""
        try:
            at = (await self.md.last_successes()).get(COMPACTION_REQUEST_TASK, 0)
        except (MetadataError, MetadataUnavailable) as e:
            log.debug("maintenance: cannot read pass requests: %s", e)
            return False
        fresh = at > self._seen_request_ms
        self._seen_request_ms = max(self._seen_request_ms, at)
        return fresh

    def stop(self) -> None:
        self._stop.set()

    async def close(self) -> None:
        """Stop now. A job under way is abandoned: its lease is released, so swaps its
        thread still attempts are refused; swaps already made stay (each is consistent)."""
        self.stop()
        if self.config.pause is not None:  # a paused job's thread would keep the process alive
            self.config.pause.resume.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
