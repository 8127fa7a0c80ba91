"""The agent's object-store metrics: every store call timed (`TimedStore`, into
`skiff_object_store_request_duration_seconds{operation}`), the stores' request accounting by
role (`object_store_families`: the agent's own store as `agent`, a compaction role's as
`compactor`) and the request bill's estimate (`CostTracker`, at the prices of
fileformat.objectstore.pricing: public S3 Standard list prices unless configured). Exported
by agent.metrics' collector.
"""

from __future__ import annotations

import builtins
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from skiff.fileformat.objectstore import AsyncObjectStore, AsyncObjectStream, ObjectInfo, StatsSnapshot
from skiff.fileformat.objectstore.base import (
    DEFAULT_CHUNK_SIZE,
    BytesLike,
)
from skiff.fileformat.objectstore.pricing import GIB, CostRate, Prices

if TYPE_CHECKING:
    from skiff.agent.runtime import RunningAgent

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

OBJECT_STORE_LATENCY = Histogram(
    "skiff_object_store_request_duration_seconds",
    "Object store calls of the agent by operation",
    ["operation"],
    buckets=LATENCY_BUCKETS_S,
    registry=None,
)
_STORE_CHILDREN = {
    op: OBJECT_STORE_LATENCY.labels(op)
    for op in ("put", "get", "range", "stream", "delete", "list", "head", "create")
}


@contextlib.contextmanager
def _timed_store_call(operation: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:  # a failed request took time too (and the errors counter says it failed)
        _STORE_CHILDREN[operation].observe(time.perf_counter() - started)


class TimedStore(AsyncObjectStore):
    """The agent's object store with every call timed into
    `skiff_object_store_request_duration_seconds{operation}`; the rest (stats, url, close)
    is the wrapped store's."""

    def __init__(self, inner: AsyncObjectStore) -> None:
        self.inner = inner
        self.url = inner.url
        self.stats = inner.stats

    async def put(self, key: str, data: BytesLike) -> None:
        with _timed_store_call("put"):
            await self.inner.put(key, data)

    async def get(self, key: str) -> bytes:
        with _timed_store_call("get"):
            return await self.inner.get(key)

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        with _timed_store_call("range"):
            return await self.inner.get_range(key, start, length)

    async def get_ranges(
        self, key: str, ranges: Sequence[tuple[int, int]], *, gap_bytes: int | None = None
    ) -> builtins.list[BytesLike]:
        with _timed_store_call("range"):
            return await self.inner.get_ranges(key, ranges, gap_bytes=gap_bytes)

    async def stream_get(
        self, key: str, start: int = 0, *, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> AsyncObjectStream:
        with _timed_store_call("stream"):
            return await self.inner.stream_get(key, start, chunk_size=chunk_size)

    async def delete_many(self, keys: Iterable[str]) -> None:
        with _timed_store_call("delete"):
            await self.inner.delete_many(keys)

    async def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        with _timed_store_call("list"):
            async for info in self.inner.list(prefix):
                yield info

    async def create_if_absent(self, key: str, data: BytesLike) -> bool:
        with _timed_store_call("create"):
            return await self.inner.create_if_absent(key, data)

    async def head(self, key: str) -> ObjectInfo:
        with _timed_store_call("head"):
            return await self.inner.head(key)

    async def close(self) -> None:
        await self.inner.close()


def store_snapshots(a: RunningAgent) -> list[tuple[str, StatsSnapshot]]:
    """(role, request accounting) of every store this process uses for the agent: its own
    (`agent`), and those of background tasks that offer theirs (`object_store_stats()`:
    the compaction role's loop, as `compactor`)."""
    out = [("agent", a.store.stats.snapshot())]
    for task in a.background:
        stats = getattr(task, "object_store_stats", None)
        if callable(stats):
            out.append(stats())
    return out


def object_store_families(
    snapshots: Sequence[tuple[str, StatsSnapshot]], costs: CostTracker | None = None
) -> Iterator[Metric]:
    """The object stores' request accounting by role, and (with `costs`) the bill's estimate."""
    requests = CounterMetricFamily(
        "skiff_object_store_requests", "Object store requests by role and kind", labels=["role", "kind"]
    )
    errors = CounterMetricFamily(
        "skiff_object_store_errors", "Failed object store requests", labels=["role", "kind"]
    )
    moved = CounterMetricFamily(
        "skiff_object_store_bytes", "Bytes sent to / received from the store", labels=["role", "direction"]
    )
    retries = CounterMetricFamily(
        "skiff_object_store_retries", "Extra attempts made by the S3 client", labels=["role"]
    )
    for role, snap in snapshots:
        for kind, n in sorted(snap.requests.items()):
            requests.add_metric([role, kind], n)
        for kind, n in sorted(snap.errors.items()):
            errors.add_metric([role, kind], n)
        moved.add_metric([role, "out"], snap.bytes_out)
        moved.add_metric([role, "in"], snap.bytes_in)
        retries.add_metric([role], snap.retries)
    yield from (requests, errors, moved, retries)
    if costs is not None:
        yield from costs.families(snapshots)


class CostTracker:
    """The request bill's estimate per role, at `Prices` (fileformat.objectstore.pricing):
    `skiff_object_store_request_cost_usd_total{role}` (since the process started),
    `skiff_object_store_cost_usd_per_hour{role}` (over the last hour of scrapes) and
    `skiff_object_store_cost_usd_per_gib_written{role}` (request cost per GiB PUT)."""

    def __init__(self, prices: Prices, clock_s: Callable[[], float] = time.monotonic) -> None:
        self.prices = prices
        self._clock_s = clock_s
        self._rates: dict[str, CostRate] = {}
        self._lock = threading.Lock()  # scrapes run in the HTTP server's threads

    def families(self, snapshots: Sequence[tuple[str, StatsSnapshot]]) -> Iterator[Metric]:
        total = CounterMetricFamily(
            "skiff_object_store_request_cost_usd",
            "Estimated request cost since start (USD, configured prices)",
            labels=["role"],
        )
        hourly = GaugeMetricFamily(
            "skiff_object_store_cost_usd_per_hour",
            "Estimated request cost per hour over the last hour (USD)",
            labels=["role"],
        )
        per_gib = GaugeMetricFamily(
            "skiff_object_store_cost_usd_per_gib_written",
            "Estimated request cost per GiB written to the bucket since start (USD)",
            labels=["role"],
        )
        with self._lock:
            for role, snap in snapshots:
                usd = self.prices.requests_usd(snap.requests)
                rate = self._rates.get(role)
                if rate is None:
                    rate = self._rates[role] = CostRate(self._clock_s)
                total.add_metric([role], usd)
                hourly.add_metric([role], rate.per_hour(usd))
                per_gib.add_metric([role], usd / (snap.bytes_out / GIB) if snap.bytes_out else 0.0)
        yield from (total, hourly, per_gib)
