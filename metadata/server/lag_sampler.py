"""Consumer lag over time, sampled by the metadata service (the console's lag charts).

`LagSampler.sample_if_due()` records every group's total lag (the sum over its partitions,
from the query behind `skiff_consumer_lag_sum`: metadata.server.metrics_queries.lag_rows)
into the database (metadata.usage: one row per group and aligned sample time) unless a sample
of the current interval is already there. It runs every `LAG_SAMPLE_INTERVAL_MS` in the
served app's background (`run()`, started by the app's lifespan: `skiff metadata` and the
playground) and also before a console page that charts lag is drawn, so a page is current
even where the app is not served by uvicorn. Several replicas sampling at once write each row
once (aligned times, INSERT ... ON CONFLICT DO NOTHING): the history survives restarts and is
the same whichever replica draws the page.
"""

from __future__ import annotations

import asyncio
import logging

from skiff.metadata.db import read_tx
from skiff.metadata.errors import MetadataError, MetadataUnavailable
from skiff.metadata.server.metrics_queries import lag_rows
from skiff.metadata.service import MetadataService
from skiff.metadata.usage import LAG_SAMPLE_INTERVAL_MS, MAX_LAG_GROUPS
from sqlalchemy.exc import SQLAlchemyError

log = logging.getLogger(__name__)


class LagSampler:
    def __init__(self, service: MetadataService, interval_ms: int = LAG_SAMPLE_INTERVAL_MS) -> None:
        self.service = service
        self.interval_ms = interval_ms
        self.samples = 0  # taken by this sampler

    def sample_if_due(self) -> bool:
        """Take a sample unless the current interval has one; True if one was taken."""
        now = self.service.clock()
        last = self.service.usage.last_lag_sample_ms()
        if last is not None and now - now % LAG_SAMPLE_INTERVAL_MS <= last:
            return False
        with read_tx(self.service.engine) as conn:
            rows, _ = lag_rows(conn, limit=MAX_LAG_GROUPS)
        totals: dict[str, int] = {}
        for r in rows:
            totals[r.group_id] = totals.get(r.group_id, 0) + int(r.lag_sum or 0)
        self.service.usage.record_lag(totals)
        self.samples += 1
        return True

    async def run(self) -> None:
        """Sample every `interval_ms` until cancelled; a failed sample is logged and retried."""
        while True:
            try:
                await asyncio.to_thread(self.sample_if_due)
            except (SQLAlchemyError, MetadataError, MetadataUnavailable) as e:
                log.warning("lag sample failed (retried in %d ms): %s", self.interval_ms, e)
            await asyncio.sleep(self.interval_ms / 1000)
