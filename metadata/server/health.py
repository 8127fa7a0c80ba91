"""`ReadinessProbe`: is the database answering? For the metadata service's /readyz.

The check (a blocking `SELECT 1`) runs in a worker thread; the probe waits for it at most
`timeout_s` and then answers "not ready". At most one check runs at a time (single
flight): probes arriving while one is under way wait for that one, so a database that
hangs ties up one thread, not one per probe (Kubernetes probes every few seconds, and
a hung connect can take the driver's connect timeout).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class ReadinessProbe:
    def __init__(self, check: Callable[[], None], timeout_s: float) -> None:
        self._check = check
        self._timeout_s = timeout_s
        self._running: asyncio.Future[None] | None = None

    async def check(self) -> str | None:
        """None when the check succeeded within the timeout, else what went wrong."""
        if self._running is None or self._running.done():
            fut = asyncio.get_running_loop().run_in_executor(None, self._check)
            # A check that fails after its waiters gave up must not log "never retrieved".
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())
            self._running = fut
        try:
            await asyncio.wait_for(asyncio.shield(self._running), self._timeout_s)
        except TimeoutError:
            return f"the database did not answer within {self._timeout_s * 1000:.0f} ms"
        except Exception as e:  # boundary: a readiness check: any failure means not ready; say why
            return f"the database did not answer: {type(e).__name__}: {str(e)[:300]}"
        return None
