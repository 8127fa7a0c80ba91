"""The agent's copy of the cluster's client quotas, and the hooks that enforce them.

Freshness, as for ACLs (agent.acl_cache): metadata keeps a version number that every quota
change increments in the change's own transaction. Every agent polls it every
`quota_refresh_interval_ms` (one cheap read) and reloads the quotas only when it moved; the
agent that answers an AlterClientQuotas reloads before its response goes out. Another agent's
change therefore applies within `quota_refresh_interval_ms` plus two metadata round trips.
Quotas are always on, as in Kafka: with none configured nothing is recorded and no request
pays more than one attribute check. If metadata cannot be reached, the last loaded quotas
stay in force (none before the first load: a client is never refused for metadata's sake).

Enforcement (the math is agent.quotas; the hooks are one call each in the handlers and the
connection):

- Produce (`record_produce`, as the request is read): its record bytes against `producer_byte_rate`;
  the response carries the throttle time. A client with any produce or request quota takes
  the handler's task path, not the inline one (`limited`), so that it is measured.
- Fetch (`bound_fetch`, `throttle_fetch`): the request's `max_bytes` is bounded by what the
  quota allows in `samples - 1` windows (Kafka's `getMaxValueInQuotaWindow`) and by the
  client's room under its quota now (agent.quotas says why); the response's
  record bytes are recorded against `consumer_byte_rate`. A fetch that goes over its quota
  by the last batch it was given (KIP-74: a fetch returns at least one whole batch) is
  served with the throttle time; one made while the client had no room left (a new
  connection of a throttled client) is answered with no partitions and its bytes are taken
  back out of the rate, as Kafka answers every throttled fetch. Kafka's way alone throws
  away the reads of a consumer whose batches are large against its quota, again and again:
  measured with librdkafka reading a backlog of 1 MB batches at a 256 KiB/s quota, it got
  72 % of its quota; serving the overshooting batch and throttling for it, as for produce,
  reaches the quota (docs/operations.md, tests/e2e/test_client_quotas_e2e.py).
- Request time (`timed`, `after_request`): the time the request's handler runs on the event
  loop (each of its steps, timed; the asyncio counterpart of Kafka's request handler thread
  time) against `request_percentage`; measured only while some request quota exists.
  ApiVersions and the SASL APIs are exempt, as Kafka exempts what precedes authentication.

Throttling (KIP-219): the response is sent at once with `throttle_time_ms`, and the
connection reads nothing more until the throttle time has passed (`mute_remaining_s`,
checked by the connection before it reads each request).

Cluster-wide meaning: each agent enforces each quota in full on the traffic it serves, as a
Kafka broker does (docs/operations.md, "Client quotas", says why it is not divided by the
number of live agents).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

from kio.static.primitive import i32, i32Timedelta
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from skiff.agent.periodic import Periodic
from skiff.agent.quotas import (
    PERCENT_PER_NANO,
    QuotaBook,
    QuotaTable,
    QuotaType,
    Resolution,
    WindowConfig,
    user_of,
)
from skiff.metadata.errors import MetadataError, MetadataUnavailable
from skiff.metadata.wire.operations import AgentClient

log = logging.getLogger(__name__)

# Served before authentication; never throttled for request time (Kafka exempts them too).
EXEMPT_API_KEYS = frozenset({17, 18, 36})


class QuotaCache:
    def __init__(
        self,
        metadata: AgentClient | None,
        *,
        refresh_interval_ms: int = 1_000,
        window: WindowConfig | None = None,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self.metadata = metadata
        self.refresh_interval_ms = refresh_interval_ms
        self.window = window or WindowConfig()
        self.now_ms = now_ms or (lambda: int(time.monotonic() * 1000))
        self.version = -1  # nothing loaded yet
        self.table = QuotaTable()
        self.books = {t: QuotaBook(t, self.window) for t in QuotaType}
        self._muted_until_ms: dict[int, int] = {}  # connection id -> end of its throttle
        self._lock = asyncio.Lock()
        self._poller = Periodic(
            "quota-refresh", lambda: self.refresh_interval_ms / 1000, self.refresh, self._refresh_failed
        )

    @classmethod
    def disabled(cls) -> QuotaCache:
        return cls(None)

    # ------------------------------------------------------------------ loading

    async def refresh(self, *, force: bool = False) -> bool:
        """Reload if metadata's version moved (or `force`); True if the quotas changed."""
        if self.metadata is None:
            return False
        async with self._lock:
            if not force and await self.metadata.client_quota_version() == self.version:
                return False
            version, entries = await self.metadata.list_client_quotas()
            if version == self.version and not force:
                return False
            previous, self.version = self.version, version
            self.table = QuotaTable(entries)
            log.info("client quotas: version %d -> %d, %d entit(ies)", previous, version, len(entries))
            return True

    async def start(self) -> None:
        """Load once, then poll in the background (failures keep the last quotas)."""
        if self.metadata is None:
            return
        try:
            await self.refresh(force=True)
        except (MetadataError, MetadataUnavailable) as e:
            log.warning("client quotas: cannot load them yet (none enforced until then): %s", e)
        self._poller.start()

    def _refresh_failed(self, e: Exception) -> None:
        log.warning("client quotas: refresh failed, keeping version %d: %s", self.version, e)

    async def close(self) -> None:
        await self._poller.close()

    # ------------------------------------------------------------------ metrics

    def metric_families(self) -> Iterator[Metric]:
        """Throttle time handed out and throttled responses, per quota type; clients throttled now."""
        seconds = CounterMetricFamily(
            "skiff_quota_throttle_time_seconds",
            "Throttle time told to clients over a client quota (their connections muted that long), by quota type",
            labels=["type"],
        )
        responses = CounterMetricFamily(
            "skiff_quota_throttled_responses",
            "Responses throttled by a client quota, by quota type",
            labels=["type"],
        )
        clients = GaugeMetricFamily(
            "skiff_quota_throttled_clients",
            "Clients (users, client ids, or both, as their quota resolves) throttled now, by quota type",
            labels=["type"],
        )
        now = self.now_ms()
        for t, book in self.books.items():
            seconds.add_metric([t.value], book.throttle_ms_total / 1000)
            responses.add_metric([t.value], book.throttled_total)
            clients.add_metric([t.value], book.throttled_clients(now))
        yield seconds
        yield responses
        yield clients

    # ------------------------------------------------------------------ enforcement

    def _resolve(self, quota_type: QuotaType, request: Any) -> Resolution | None:
        if not self.table.has(quota_type):
            return None
        conn = request.connection
        return self.table.resolve(quota_type, user_of(conn.principal), request.client_id or "")

    def _throttle(self, connection_id: int, throttle_ms: int, now_ms: int) -> None:
        if throttle_ms <= 0:
            return
        until = now_ms + throttle_ms
        if until > self._muted_until_ms.get(connection_id, 0):
            self._muted_until_ms[connection_id] = until
        if len(self._muted_until_ms) > 1024:  # closed connections' ended throttles
            self._muted_until_ms = {c: u for c, u in self._muted_until_ms.items() if u > now_ms}

    def mute_remaining_s(self, connection_id: int) -> float:
        """How long the connection must read nothing more (0: it may read)."""
        until = self._muted_until_ms.get(connection_id)
        if until is None:
            return 0.0
        left_ms = until - self.now_ms()
        if left_ms <= 0:
            del self._muted_until_ms[connection_id]
            return 0.0
        return left_ms / 1000.0

    def limited(self, request: Any) -> bool:
        """Whether a produce or request-time quota applies to this request's client."""
        if self.table.empty:
            return False
        return (
            self._resolve(QuotaType.PRODUCE, request) is not None
            or self._resolve(QuotaType.REQUEST, request) is not None
        )

    def _record(self, quota_type: QuotaType, request: Any, value: float) -> int:
        found = self._resolve(quota_type, request)
        if found is None:
            return 0
        now = self.now_ms()
        throttle = self.books[quota_type].record(found.key, found.bound, value, now)
        self._throttle(request.connection.connection_id, throttle, now)
        return throttle

    def record_produce(self, request: Any) -> int:
        """The Produce request's record bytes recorded; its throttle time in ms."""
        if self.table.empty:
            return 0
        size = sum(len(p.records or b"") for t in request.body.topic_data for p in t.partition_data)
        return self._record(QuotaType.PRODUCE, request, size)

    def bound_fetch(self, request: Any) -> Any:
        """The Fetch request with `max_bytes` (and `min_bytes`) bounded by the quota's window."""
        found = self._resolve(QuotaType.FETCH, request)
        if found is None:
            return request
        window_bytes = int(found.bound * (self.window.samples - 1) * self.window.window_ms / 1000)
        room = int(self.books[QuotaType.FETCH].room(found.key, found.bound, self.now_ms()))
        body = request.body
        max_bytes = min(int(body.max_bytes), window_bytes, max(room, 1))
        if max_bytes == int(body.max_bytes):
            return request
        bounded = dataclasses.replace(
            body, max_bytes=i32(max_bytes), min_bytes=i32(min(int(body.min_bytes), max_bytes))
        )
        return dataclasses.replace(request, body=bounded)

    def throttle_fetch(self, request: Any, response: Any) -> Any:
        """The Fetch response, throttled if its bytes exceed the consumer's quota."""
        found = self._resolve(QuotaType.FETCH, request)
        if found is None or int(response.error_code) != 0:
            return response
        size = sum(len(p.records or b"") for t in response.responses for p in t.partitions)
        now = self.now_ms()
        book = self.books[QuotaType.FETCH]
        room = book.room(found.key, found.bound, now)
        throttle = book.record(found.key, found.bound, size, now)
        if throttle <= 0:
            return response
        if room > 0:  # asked within its room, over only by its last batch: served, then throttled
            self._throttle(request.connection.connection_id, throttle, now)
            return dataclasses.replace(response, throttle_time=as_throttle(throttle))
        book.unrecord(found.key, size, now)
        self._throttle(request.connection.connection_id, throttle, now)
        return dataclasses.replace(response, responses=(), throttle_time=as_throttle(throttle))

    def timing(self, api_key: int) -> bool:
        """Whether to time this request's handler (some request quota exists)."""
        return api_key not in EXEMPT_API_KEYS and self.table.has(QuotaType.REQUEST)

    def after_request(self, request: Any, handler_ns: int, response: Any) -> Any:
        """The response with the request-time throttle (if any) in its `throttle_time`."""
        throttle = self._record(QuotaType.REQUEST, request, handler_ns * PERCENT_PER_NANO)
        if throttle <= 0 or response is None:
            return response
        current = getattr(response, "throttle_time", None)
        if current is None or current.total_seconds() * 1000 >= throttle:
            return response
        return dataclasses.replace(response, throttle_time=as_throttle(throttle))


def as_throttle(throttle_ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=min(throttle_ms, 2**31 - 1)))


class Timed:
    """Awaits a coroutine and adds the time each of its steps runs on the event loop to `ns`
    (what the request-time quota counts: not the time it waits for I/O)."""

    __slots__ = ("coro", "ns")

    def __init__(self, coro: Any) -> None:
        self.coro = coro
        self.ns = 0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self.coro
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            started = time.perf_counter_ns()
            try:
                yielded = coro.send(sent) if thrown is None else coro.throw(thrown)
            except StopIteration as stop:
                return stop.value
            finally:
                self.ns += time.perf_counter_ns() - started
            try:
                sent, thrown = (yield yielded), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as e:  # boundary: what the task is sent (a cancellation) goes to the handler
                sent, thrown = None, e
