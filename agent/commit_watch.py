"""Wake long-poll fetches when new data is committed to the partitions they watch.

Two sources of news:
- this agent's own commits (the produce buffer reports each committed file): waiters on
  those partitions are woken at once, with no round trip;
- commits made through other agents: while anyone waits, a poller asks metadata for the
  watched partitions' high watermarks every `poll_interval_ms` and wakes the waiters of
  partitions whose watermark moved. The added end-to-end latency for cross-agent
  long polls is therefore at most one poll interval (plus one metadata round trip).

A waiter is an `asyncio.Event` registered under the partitions it watches; it is set at
most once and removed by its owner (`unwatch`) whether it fired or timed out.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable

from metadata.api_types import MetadataClient
from metadata.types import PartitionKey

log = logging.getLogger(__name__)

Key = tuple[uuid.UUID, int]


class CommitWatch:
    def __init__(
        self,
        metadata: MetadataClient,
        *,
        poll_interval_ms: int = 100,
        on_high_watermark: Callable[[Key, int], None] | None = None,
    ) -> None:
        if poll_interval_ms <= 0:
            raise ValueError("poll_interval_ms must be positive")
        self._metadata = metadata
        self._poll_interval_s = poll_interval_ms / 1000.0
        self._waiters: dict[Key, set[asyncio.Event]] = {}
        self._known_hwm: dict[Key, int] = {}
        self._poller: asyncio.Task[None] | None = None
        self._closed = False
        self._on_hwm = on_high_watermark

    def watch(self, keys: Iterable[Key], known_hwm: dict[Key, int] | None = None) -> asyncio.Event:
        event = asyncio.Event()
        for key in keys:
            self._waiters.setdefault(key, set()).add(event)
            if known_hwm and key in known_hwm:
                self._known_hwm[key] = max(self._known_hwm.get(key, -1), known_hwm[key])
        if self._poller is None and not self._closed:
            self._poller = asyncio.get_running_loop().create_task(self._poll())
        return event

    def unwatch(self, keys: Iterable[Key], event: asyncio.Event) -> None:
        for key in keys:
            waiters = self._waiters.get(key)
            if waiters is None:
                continue
            waiters.discard(event)
            if not waiters:
                del self._waiters[key]
                self._known_hwm.pop(key, None)

    def notify(self, keys: Iterable[Key]) -> None:
        for key in keys:
            for event in self._waiters.get(key, ()):
                event.set()

    @property
    def watched_partitions(self) -> int:
        return len(self._waiters)

    async def _poll(self) -> None:
        try:
            while self._waiters and not self._closed:
                await asyncio.sleep(self._poll_interval_s)
                keys = list(self._waiters)
                if not keys:
                    break
                try:
                    states = await self._metadata.partition_states([PartitionKey(t, p) for t, p in keys])
                except Exception as exc:  # metadata briefly down: waiters time out normally
                    log.debug("commit watch poll failed: %s", exc)
                    continue
                moved = []
                for key, state in zip(keys, states, strict=True):
                    if state.error_code:
                        moved.append(key)  # let the fetch see the error promptly
                        continue
                    before = self._known_hwm.get(key)
                    if before is not None and state.high_watermark > before:
                        moved.append(key)
                        if self._on_hwm is not None:
                            self._on_hwm(key, state.high_watermark)
                    self._known_hwm[key] = state.high_watermark
                self.notify(moved)
        finally:
            self._poller = None

    async def close(self) -> None:
        self._closed = True
        if self._poller is not None:
            self._poller.cancel()
            try:
                await self._poller
            except asyncio.CancelledError:
                pass
