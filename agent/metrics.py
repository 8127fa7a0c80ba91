"""Prometheus metrics of one agent, served over HTTP (`--metrics-port`, 0 = off).

A custom collector reads the live components at scrape time, so the hot paths keep
plain integer counters and pay nothing per request for metrics:

- `skiff_object_store_requests_total{kind}` / `..._errors_total{kind}` / `..._bytes_total{direction}`
  / `..._retries_total`: from the object store's own request accounting;
- `skiff_produce_files_total`, `skiff_produce_file_bytes_total`, `skiff_produce_flush_failures_total`,
  `skiff_produce_buffered_bytes`: the produce buffer;
- `skiff_fetch_cache_{hits,misses,loads}_total`, `skiff_fetch_cache_bytes`: the range cache (`fileformat.objectstore.range_cache`);
- `skiff_connections`, `skiff_fetch_followed_partitions`, `skiff_fetch_commit_long_polls`;
- `skiff_requests_total{api}`: Kafka requests read, by API name (`produce`, `fetch`, ...);
- the protocol server's bounds (`agent.connection_limits`): `skiff_connections_refused_total{reason}`
  (`max_connections`, `max_connections_per_ip`), `skiff_request_read_timeouts_total` (requests
  whose body did not arrive within `request_read_timeout_ms`), `skiff_connections_muted`
  (connections not read while their byte budget is full), `skiff_connection_held_bytes`
  (bytes charged to all connections' budgets) and `skiff_request_bytes_in_flight` (the
  agent-wide request bytes, against `queued_max_request_bytes`);
- `skiff_purgatory_delayed{purgatory}`, `skiff_purgatory_watched{purgatory}` for the
  fetch, heartbeat and rebalance purgatories; `skiff_groups`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from agent.runtime import RunningAgent


class AgentCollector(Collector):
    def __init__(self, agent: RunningAgent) -> None:
        self._agent = agent

    def collect(self) -> Iterator[Metric]:
        a = self._agent
        snap = a.store.stats.snapshot()
        requests = CounterMetricFamily(
            "skiff_object_store_requests", "Object store requests by kind", labels=["kind"]
        )
        for kind, n in sorted(snap.requests.items()):
            requests.add_metric([kind], n)
        yield requests
        errors = CounterMetricFamily(
            "skiff_object_store_errors", "Failed object store requests", labels=["kind"]
        )
        for kind, n in sorted(snap.errors.items()):
            errors.add_metric([kind], n)
        yield errors
        moved = CounterMetricFamily(
            "skiff_object_store_bytes", "Bytes sent to / received from the store", labels=["direction"]
        )
        moved.add_metric(["out"], snap.bytes_out)
        moved.add_metric(["in"], snap.bytes_in)
        yield moved
        yield CounterMetricFamily(
            "skiff_object_store_retries", "Extra attempts made by the S3 client", value=snap.retries
        )
        yield CounterMetricFamily(
            "skiff_produce_files", "Segment files written and committed", value=a.buffer.files_flushed
        )
        yield CounterMetricFamily(
            "skiff_produce_file_bytes", "Bytes of committed segment files", value=a.buffer.bytes_flushed
        )
        yield CounterMetricFamily(
            "skiff_produce_flush_failures",
            "Flushes that failed (PUT or commit)",
            value=a.buffer.flush_failures,
        )
        yield GaugeMetricFamily(
            "skiff_produce_buffered_bytes", "Produce bytes held in memory", value=a.buffer.buffered_bytes
        )
        yield CounterMetricFamily(
            "skiff_fetch_cache_hits",
            "Range cache hits (ranges served from cache or from a GET in flight)",
            value=a.cache.hits,
        )
        yield CounterMetricFamily("skiff_fetch_cache_misses", "Range cache misses", value=a.cache.misses)
        yield CounterMetricFamily(
            "skiff_fetch_cache_loads", "Ranged GETs made by the range cache (coalesced)", value=a.cache.loads
        )
        yield GaugeMetricFamily(
            "skiff_fetch_cache_bytes", "Bytes held by the range cache", value=a.cache.cached_bytes
        )
        yield GaugeMetricFamily(
            "skiff_connections", "Open Kafka connections", value=a.server.connection_count
        )
        served = CounterMetricFamily("skiff_requests", "Kafka requests read, by API", labels=["api"])
        for api, n in sorted(dict(a.server.requests).items()):
            served.add_metric([api], n)
        yield served
        refused = CounterMetricFamily(
            "skiff_connections_refused",
            "Connections closed at accept because a cap was reached",
            labels=["reason"],
        )
        for reason in ("max_connections", "max_connections_per_ip"):
            refused.add_metric([reason], a.server.connections_refused[reason])
        yield refused
        yield CounterMetricFamily(
            "skiff_request_read_timeouts",
            "Connections closed because a request's body did not arrive within request_read_timeout_ms",
            value=a.server.request_read_timeouts,
        )
        yield GaugeMetricFamily(
            "skiff_connections_muted",
            "Connections not read while their byte budget (or the agent's) is full",
            value=a.server.muted_connections,
        )
        yield GaugeMetricFamily(
            "skiff_connection_held_bytes",
            "Bytes held by connections: requests being handled, reserved fetch responses, unsent responses",
            value=a.server.connection_held_bytes,
        )
        yield GaugeMetricFamily(
            "skiff_request_bytes_in_flight",
            "Request bytes being handled across all connections (bound: queued_max_request_bytes)",
            value=a.server.request_budget.used,
        )
        yield GaugeMetricFamily(
            "skiff_fetch_followed_partitions",
            "Partitions whose commits through other agents this agent follows (long poll on metadata)",
            value=a.watch.followed_partitions,
        )
        groups = a.context.parts.groups
        delayed = GaugeMetricFamily(
            "skiff_purgatory_delayed", "Operations waiting in a purgatory", labels=["purgatory"]
        )
        watched = GaugeMetricFamily(
            "skiff_purgatory_watched",
            "Watcher-list entries of a purgatory (completed ones until purged)",
            labels=["purgatory"],
        )
        for name, p in (
            ("fetch", a.watch.purgatory),
            ("heartbeat", groups.heartbeat_purgatory),
            ("rebalance", groups.rebalance_purgatory),
        ):
            delayed.add_metric([name], p.delayed)
            watched.add_metric([name], p.watched)
        yield delayed
        yield watched
        yield GaugeMetricFamily(
            "skiff_groups", "Groups held by this agent's coordinator", value=len(groups.list_groups())
        )
        yield CounterMetricFamily(
            "skiff_fetch_commit_long_polls",
            "Answered long polls of metadata for other agents' commits",
            value=a.watch.long_polls,
        )


def serve_metrics(agent: RunningAgent, host: str, port: int) -> CollectorRegistry:
    """Start the /metrics HTTP endpoint in a daemon thread."""
    registry = CollectorRegistry()
    registry.register(AgentCollector(agent))
    start_http_server(port, addr=host, registry=registry)
    return registry
