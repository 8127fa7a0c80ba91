"""Consumer lag over the last hour, for the console's charts: a bounded in-memory history.

The metadata database holds committed offsets and high watermarks now, not their past, so the
console keeps the past itself: each time a console page is served and `interval_ms` has passed
since the last sample, the total lag of every group (the sum over its partitions, from the same
query as the `skiff_consumer_lag_sum` metric, capped at its `MAX_LAG_SERIES` pairs) is recorded
with the time. Samples older than `window_ms` are dropped; at most `max_groups` groups are kept
(the ones with the most lag at the latest sample). So the history exists while someone watches
(a page with `?refresh=N`) and per metadata replica; a restart forgets it. For lag history that
survives, Prometheus scrapes `skiff_consumer_lag_sum` (docs/operations.md).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping

DEFAULT_INTERVAL_MS = 10_000
DEFAULT_WINDOW_MS = 3_600_000
DEFAULT_MAX_GROUPS = 500


class LagHistory:
    def __init__(
        self,
        interval_ms: int = DEFAULT_INTERVAL_MS,
        window_ms: int = DEFAULT_WINDOW_MS,
        max_groups: int = DEFAULT_MAX_GROUPS,
    ) -> None:
        self.interval_ms = interval_ms
        self.window_ms = window_ms
        self.max_groups = max_groups
        self._last_ms: int | None = None
        self._series: dict[str, deque[tuple[int, int]]] = {}
        self._lock = threading.Lock()

    def due(self, now_ms: int) -> bool:
        with self._lock:
            return self._last_ms is None or now_ms - self._last_ms >= self.interval_ms

    def record(self, now_ms: int, totals: Mapping[str, int]) -> None:
        """One sample: each group's total lag at `now_ms` (groups absent now get no point)."""
        keep = sorted(totals, key=lambda g: (-totals[g], g))[: self.max_groups]
        with self._lock:
            self._last_ms = now_ms
            for group in keep:
                points = self._series.setdefault(group, deque(maxlen=self._max_points()))
                points.append((now_ms, int(totals[group])))
            horizon = now_ms - self.window_ms
            for group in list(self._series):
                points = self._series[group]
                while points and points[0][0] < horizon:
                    points.popleft()
                if not points or group not in totals and len(self._series) > self.max_groups:
                    del self._series[group]

    def series(self, group: str) -> list[tuple[int, int]]:
        """(ms since the epoch, total lag) samples of `group`, oldest first."""
        with self._lock:
            return list(self._series.get(group, ()))

    def _max_points(self) -> int:
        return max(1, self.window_ms // max(1, self.interval_ms) + 1)
