"""An operator's "run a compaction pass now" (the console's action, recorded as the maintenance
task `COMPACTION_REQUEST_TASK`) wakes a waiting maintenance loop at its next poll instead of its
next interval; a request made before the loop's first pass does not cause a second one."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from skiff.compactor.maintenance_loop import MaintenanceLoop
from skiff.compactor.pass_summary import PassSummary
from skiff.fileformat.objectstore import open_store
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import COMPACTION_REQUEST_TASK

HOUR_MS = 3_600_000


async def test_a_requested_pass_runs_before_the_interval(tmp_path: Path) -> None:
    svc = MetadataService.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    md = LocalMetadataClient(svc, owns_service=True)
    svc.record_success(COMPACTION_REQUEST_TASK)  # an old request: the first pass serves it
    passes: asyncio.Queue[PassSummary] = asyncio.Queue()
    loop = MaintenanceLoop(
        md,
        open_store(f"memory://request-{uuid.uuid4().hex}"),
        interval_ms=HOUR_MS,
        on_pass=passes.put_nowait,
        request_poll_ms=20,
    )
    loop.start()
    try:
        await asyncio.wait_for(passes.get(), 30)
        assert loop.passes == 1
        # nothing requested since: the loop waits for its hour (many polls go by meanwhile)
        polled = asyncio.Event()
        real = md.last_successes
        calls = 0

        async def counting() -> dict[str, int]:
            nonlocal calls
            calls += 1
            if calls >= 5:
                polled.set()
            return await real()

        md.last_successes = counting  # type: ignore[method-assign]
        await asyncio.wait_for(polled.wait(), 30)
        assert loop.passes == 1 and passes.empty()
        svc.record_success(COMPACTION_REQUEST_TASK)
        await asyncio.wait_for(passes.get(), 30)
        assert loop.passes == 2
    finally:
        await loop.close()
        await md.close()
