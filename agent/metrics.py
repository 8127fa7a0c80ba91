"""Prometheus metrics and health of one agent, served over HTTP (`--metrics-port`, default
9100, 0 = off): `GET /metrics`, `GET /healthz` (200 while the process runs) and
`GET /readyz` (200 `ready`, or 503 with the reason: draining, or which of metadata and the
bucket failed and how; `agent.health`, whose probe runs on the agent's own schedule), from
`agent.http_endpoint` in daemon threads, so probes and scrapes never wait for the agent's
event loop.

A custom collector reads the live components at scrape time, so the hot paths keep
plain integer counters and pay nothing per request for metrics:

- `skiff_object_store_requests_total{kind}` / `..._errors_total{kind}` / `..._bytes_total{direction}`
  / `..._retries_total`: from the object store's own request accounting;
- `skiff_produce_files_total`, `skiff_produce_file_bytes_total`, `skiff_produce_flush_failures_total`,
  `skiff_produce_buffered_bytes`: the produce buffer; `skiff_produce_stage_seconds_total{stage}`
  and `skiff_produce_stage_max_seconds{stage}`: where its files' time goes (open, queued,
  put, ordered, commit, resolve: `agent.produce_buffer`); `skiff_produce_post_seal_estimate_seconds`:
  the learned part of the seal lead (`agent.seal_deadline`);
- `skiff_fetch_cache_{hits,misses,loads}_total`, `skiff_fetch_cache_bytes`: the range cache (`fileformat.objectstore.range_cache`);
- `skiff_connections`, `skiff_fetch_followed_partitions`, `skiff_fetch_commit_long_polls`;
- `skiff_fetch_delayed_completed_total{by}`: long-poll fetch waits that parked in the fetch
  purgatory and completed, `by="wake"` (a commit moved a watermark they waited on) or
  `by="expiry"` (their max wait ran out); a fetch woken with fewer than min_bytes parks
  and counts again (`agent.commit_watch`);
- `skiff_authorization_denied_total{api,resource}`: ACL checks refused, by Kafka API and
  resource type (`topic`, `group`, `cluster`, `transactional_id`), counted where handlers
  check (`agent.handlers.authorized`): a request naming three refused topics counts three;
- `skiff_client_zone_bytes_total{direction,client_zone}`: Produce request bytes in and Fetch
  response bytes out, by the client's zone against the agent's (`agent.zones`);
- `skiff_requests_total{api}`: Kafka requests read, by API name (`produce`, `fetch`, ...);
  `skiff_produce_requests_inline_total`: the produce requests among them handled on the
  synchronous path (the others waited for a topic load, a transaction check, buffer room or
  an earlier request of their connection); `skiff_responses_encoded_sliced_total` and
  `skiff_response_encode_yields_total`: large responses encoded in slices, and the turns
  they gave the event loop (`agent.protocol.sliced_encode`);
- the protocol server's bounds (`agent.network.limits`): `skiff_connections_refused_total{reason}`
  (`max_connections`, `max_connections_per_ip`), `skiff_request_read_timeouts_total` (requests
  whose body did not arrive within `request_read_timeout_ms`), `skiff_connections_muted`
  (connections not read while their byte budget is full), `skiff_connection_held_bytes`
  (bytes charged to all connections' budgets) and `skiff_request_bytes_in_flight` (the
  agent-wide request bytes, against `queued_max_request_bytes`);
- `skiff_purgatory_delayed{purgatory}`, `skiff_purgatory_watched{purgatory}` for the
  fetch, heartbeat and rebalance purgatories; `skiff_groups`.
- broker-side schema validation (`agent.schema_cache`): `skiff_schema_validation_refused_records_total{topic}`,
  `skiff_schema_cache_{hits,misses}_total{cache}`, `skiff_schema_registry_fetches_total` and
  `..._fetch_failures_total`;
- `skiff_agent_ready`: 1 when /readyz would answer 200 (agent.health), else 0; and
  `skiff_readiness_probe_failures_total{dependency}` (`bucket`, `metadata`): probes that
  found that dependency failing.

Histograms (seconds, or bytes and records for files) are the exception to "nothing per
request": a latency cannot be read off a counter at scrape time. They are prometheus-client
`Histogram`s of this process (one agent per process in production; agents sharing a
process in tests share them), observed where the time is known:

- `skiff_produce_ack_latency_seconds{acks}` (`0`, `1`, `all`): from the Produce handler
  receiving the decoded request to its response being ready (acks=0: the append);
- `skiff_produce_append_latency_seconds`: CreateTime batches, their oldest record's timestamp
  to the commit of their file (the produce buffer, after the commit);
- `skiff_fetch_latency_seconds`: the Fetch handler, long-poll wait included;
- `skiff_object_store_request_duration_seconds{operation}` (`put`, `get`, `range`,
  `stream`, `delete`, `list`, `head`, `create`): the agent's store calls (`TimedStore`
  wraps the store below the range cache, so cache hits are not requests); `range` is a
  `get_range` or a `get_ranges` call (its GETs run concurrently: until the last answers),
  `stream` the time to the first byte of a `stream_get`, `list` a whole listing;
- `skiff_metadata_call_duration_seconds{operation}`: every metadata operation the agent
  calls, by its declared name (`metadata.wire.operations`, a fixed set), through the
  client's one forwarding point (`observe_call`);
- `skiff_produce_file_size_bytes` and `skiff_produce_file_records`: each committed file.

Buckets: latencies from 1 ms to 10 s (produce acks are aimed at `flush_interval_ms`, 250 ms
by default; S3 requests take 10-100 ms; metadata calls a few ms), fetches up to 30 s (long
polls wait up to the consumer's fetch.max.wait.ms); file sizes by powers of 4 from 1 KiB
to 64 MiB (files are sealed at `flush_max_bytes`, 8 MiB by default), records per file by
powers of 10 up to 10^7.

Documentation: `METRIC_DOCS` (at the end) describes every family (name, type, labels,
meaning); `python -m skiff.agent.metrics --doc` prints it as the Markdown table of
docs/operations.md's Monitoring section and `--write docs/operations.md` replaces that
table between its markers. A test checks the doc is current and that every family a
running agent exports is in METRIC_DOCS with its type and labels.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from skiff.agent.groups.placement import placement_families
from skiff.agent.http_endpoint import HttpEndpoint, serve_collector
from skiff.agent.loop_histogram import LoopHistogram

# The documentation of every family (agent.metric_docs), re-exported for the command below.
from skiff.agent.metric_docs import METRIC_DOCS, _main, render_metrics_table, replace_metrics_table
from skiff.agent.protocol import api_name
from skiff.agent.store_metrics import (
    LATENCY_BUCKETS_S,
    OBJECT_STORE_LATENCY,
    CostTracker,
    TimedStore,
    object_store_families,
    store_snapshots,
)
from skiff.agent.zones import zone_traffic_families
from skiff.fileformat.objectstore.pricing import Prices
from skiff.metadata.build_info import build_info_family

if TYPE_CHECKING:
    from skiff.agent.context import ProduceSink
    from skiff.agent.health import Readiness
    from skiff.agent.network.server import AgentServer
    from skiff.agent.runtime import RunningAgent

log = logging.getLogger(__name__)

FETCH_BUCKETS_S = (*LATENCY_BUCKETS_S, 30.0)
FILE_SIZE_BUCKETS_BYTES = tuple(float(1024 * 4**i) for i in range(9))  # 1 KiB .. 64 MiB
FILE_RECORDS_BUCKETS = tuple(float(10**i) for i in range(8))  # 1 .. 10^7

# Not in prometheus-client's default registry: each agent's collector yields them (see
# the module docstring), so a process may serve several agents' endpoints.
PRODUCE_ACK_LATENCY = LoopHistogram(
    "skiff_produce_ack_latency_seconds",
    "Produce requests: from the handler receiving the request to its response being ready",
    ["acks"],
    buckets=LATENCY_BUCKETS_S,
)
FETCH_LATENCY = LoopHistogram(
    "skiff_fetch_latency_seconds",
    "Fetch requests: from the handler receiving the request to its response (long-poll wait included)",
    buckets=FETCH_BUCKETS_S,
)
METADATA_CALL_LATENCY = Histogram(
    "skiff_metadata_call_duration_seconds",
    "Metadata operations called by the agent, by operation name",
    ["operation"],
    buckets=LATENCY_BUCKETS_S,
    registry=None,
)
PRODUCE_FILE_SIZE = Histogram(
    "skiff_produce_file_size_bytes",
    "Size of each committed segment file",
    buckets=FILE_SIZE_BUCKETS_BYTES,
    registry=None,
)
PRODUCE_FILE_RECORDS = Histogram(
    "skiff_produce_file_records",
    "Records in each committed segment file",
    buckets=FILE_RECORDS_BUCKETS,
    registry=None,
)
APPEND_LATENCY_BUCKETS_S = (*FETCH_BUCKETS_S, 60.0, 300.0)
PRODUCE_APPEND_LATENCY = LoopHistogram(
    "skiff_produce_append_latency_seconds",
    "CreateTime batches: from the oldest record's timestamp to the commit of the file holding it",
    buckets=APPEND_LATENCY_BUCKETS_S,
)
HISTOGRAMS = (
    PRODUCE_ACK_LATENCY,
    PRODUCE_APPEND_LATENCY,
    FETCH_LATENCY,
    OBJECT_STORE_LATENCY,
    METADATA_CALL_LATENCY,
    PRODUCE_FILE_SIZE,
    PRODUCE_FILE_RECORDS,
)
# The children of the bounded label sets, looked up once (labels() takes a lock per call).
_ACKS_LABEL = {0: "0", 1: "1", -1: "all"}
_ACK_CHILDREN = {acks: PRODUCE_ACK_LATENCY.labels(label) for acks, label in _ACKS_LABEL.items()}


def observe_produce_ack(acks: int, seconds: float) -> None:
    """One Produce request's latency (acks values other than 0, 1, -1 are refused before this)."""
    child = _ACK_CHILDREN.get(acks)
    if child is not None:
        child.observe(seconds)


def observe_metadata_call(operation: str, seconds: float) -> None:
    """The metadata clients' `observe_call` hook: one operation's duration."""
    METADATA_CALL_LATENCY.labels(operation).observe(seconds)


def observe_file(size_bytes: int, records: int) -> None:
    """One committed segment file."""
    PRODUCE_FILE_SIZE.observe(size_bytes)
    PRODUCE_FILE_RECORDS.observe(records)


def observe_append(now_ms: int, oldest_timestamps_ms: Iterable[int]) -> None:
    """CreateTime batches just committed: end-to-end append latency, each batch's oldest record's
    timestamp (the producer's clock) to `now_ms` (the agent's); a client clock ahead of the
    agent's counts as 0, not as a negative latency."""
    PRODUCE_APPEND_LATENCY.observe_many([max(0, now_ms - ts) / 1000.0 for ts in oldest_timestamps_ms])


def instrument_metadata_client(metadata: object) -> None:
    """Time every operation of `metadata` if it offers the hook (the HTTP and in-process
    clients do; test fakes need not)."""
    if hasattr(metadata, "observe_call"):
        metadata.observe_call = observe_metadata_call


class AgentCollector(Collector):
    def __init__(self, agent: RunningAgent, prices: Prices | None = None) -> None:
        self._agent = agent
        self._costs = CostTracker(prices or Prices.from_env())

    def collect(self) -> Iterator[Metric]:
        # Each section reads one component; the order is the exposition's.
        a = self._agent
        yield from object_store_families(store_snapshots(a), self._costs)
        yield from background_families(a)
        yield from _produce_buffer_metrics(a.buffer)
        yield from _fetch_cache_metrics(a)
        yield from _request_metrics(a)
        yield from zone_traffic_families(s.zone_traffic for s in a.servers or [a.server])
        placement = a.context.parts.groups.placement
        yield from placement_families([placement] if placement is not None else [])
        yield from _produce_stage_metrics(a.buffer)
        yield from _response_encoding_metrics(a)
        yield from _connection_limit_metrics(a)
        yield from _watch_and_group_metrics(a)
        yield from readiness_metrics(a.readiness)
        yield build_info_family()
        yield from security_metrics(a.servers or [a.server])
        yield from _authorization_metrics(a)
        yield from _schema_validation_metrics(a)
        yield from a.context.quotas.metric_families()  # client quotas (agent.quota_cache)
        for histogram in HISTOGRAMS:
            for family in histogram.collect():  # fresh objects per collect: safe to trim
                # No `_created` series: one more family per histogram that no query uses.
                family.samples = [s for s in family.samples if not s.name.endswith("_created")]
                yield family


def background_families(a: RunningAgent) -> Iterator[Metric]:
    """The families of background tasks that export some (`metric_families()`: the
    compaction role's maintenance loop, compactor.metrics)."""
    for task in a.background:
        families = getattr(task, "metric_families", None)
        if callable(families):
            yield from families()


def produce_buffer_families(buffer: ProduceSink) -> Iterator[Metric]:
    """A produce buffer's families: files, bytes held, stages (a pod writer's /metrics too)."""
    yield from _produce_buffer_metrics(buffer)
    yield from _produce_stage_metrics(buffer)


def _produce_buffer_metrics(buffer: ProduceSink) -> Iterator[Metric]:
    """The produce buffer's files and the bytes it holds."""
    yield CounterMetricFamily(
        "skiff_produce_files", "Segment files written and committed", value=buffer.files_flushed
    )
    yield CounterMetricFamily(
        "skiff_produce_file_bytes", "Bytes of committed segment files", value=buffer.bytes_flushed
    )
    yield CounterMetricFamily(
        "skiff_produce_flush_failures",
        "Flushes that failed (PUT or commit)",
        value=buffer.flush_failures,
    )
    yield GaugeMetricFamily(
        "skiff_produce_buffered_bytes", "Produce bytes held in memory", value=buffer.buffered_bytes
    )


def _fetch_cache_metrics(a: RunningAgent) -> Iterator[Metric]:
    """The range cache (`fileformat.objectstore.range_cache`)."""
    yield CounterMetricFamily(
        "skiff_fetch_cache_hits",
        "Range cache hits (ranges served from cache or from a GET in flight)",
        value=a.cache.hits,
    )
    yield CounterMetricFamily("skiff_fetch_cache_misses", "Range cache misses", value=a.cache.misses)
    yield CounterMetricFamily(
        "skiff_fetch_cache_loads", "Ranged GETs made by the range cache (coalesced)", value=a.cache.loads
    )
    yield CounterMetricFamily(
        "skiff_fetch_cache_to_end_loads",
        "Cold files a connection's first fetch read to their end in one GET (part of the loads)",
        value=a.cache.to_end_loads,
    )
    yield CounterMetricFamily(
        "skiff_fetch_cache_to_end_skipped",
        "Cold files a first fetch read by their needed ranges instead, the in-flight bound having no room",
        value=a.cache.to_end_skipped,
    )
    yield GaugeMetricFamily(
        "skiff_fetch_cache_bytes", "Bytes held by the range cache", value=a.cache.cached_bytes
    )


def _request_metrics(a: RunningAgent) -> Iterator[Metric]:
    """Open connections and the Kafka requests read, by API."""
    yield GaugeMetricFamily("skiff_connections", "Open Kafka connections", value=a.server.connection_count)
    served = CounterMetricFamily("skiff_requests", "Kafka requests read, by API", labels=["api"])
    for api, n in sorted(dict(a.server.requests).items()):
        served.add_metric([api], n)
    yield served


def _produce_stage_metrics(buffer: ProduceSink) -> Iterator[Metric]:
    """Where the produce buffer's files spend their time, and the learned seal lead."""
    stages = CounterMetricFamily(
        "skiff_produce_stage_seconds",
        "Seconds the produce buffer's files spent in each stage, summed over files",
        labels=["stage"],
    )
    longest = GaugeMetricFamily(
        "skiff_produce_stage_max_seconds", "The longest one file spent in each stage", labels=["stage"]
    )
    for stage, seconds in buffer.stage_seconds.items():
        stages.add_metric([stage], seconds)
        longest.add_metric([stage], buffer.stage_max_seconds[stage])
    yield stages
    yield longest
    yield GaugeMetricFamily(
        "skiff_produce_post_seal_estimate_seconds",
        "p95 of recent files' seal-to-commit time: files are sealed this much (plus the "
        "clients' linger, up to flush_seal_lead_max_ms) before flush_interval_ms",
        value=buffer.post_seal_estimate_s,
    )


def _response_encoding_metrics(a: RunningAgent) -> Iterator[Metric]:
    """Produce requests handled inline, and large responses encoded in slices."""
    yield CounterMetricFamily(
        "skiff_produce_requests_inline",
        "Produce requests handled without a task (agent.handlers.produce_inline.start_inline)",
        value=a.server.produce_inline,
    )
    yield CounterMetricFamily(
        "skiff_responses_encoded_sliced",
        "Large responses encoded in slices that yield to the event loop (agent.protocol.sliced_encode)",
        value=a.server.responses_encoded_sliced,
    )
    yield CounterMetricFamily(
        "skiff_response_encode_yields",
        "Turns given to the event loop while encoding large responses",
        value=a.server.encode_slice_yields,
    )


def _connection_limit_metrics(a: RunningAgent) -> Iterator[Metric]:
    """The protocol server's bounds (`agent.network.limits`)."""
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


def _watch_and_group_metrics(a: RunningAgent) -> Iterator[Metric]:
    """Commit following, the purgatories, and the groups this agent coordinates."""
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
    conversions = CounterMetricFamily(
        "skiff_group_protocol_conversions",
        "Groups converted between the classic and the consumer protocol (online upgrade / downgrade)",
        labels=["direction"],
    )
    conversions.add_metric(["upgrade"], groups.upgrades)
    conversions.add_metric(["downgrade"], groups.downgrades)
    yield conversions
    yield CounterMetricFamily(
        "skiff_fetch_commit_long_polls",
        "Answered long polls of metadata for other agents' commits",
        value=a.watch.long_polls,
    )
    parked = CounterMetricFamily(
        "skiff_fetch_delayed_completed",
        "Long-poll fetches that parked and completed, by a wake (a commit) or by expiry (max wait)",
        labels=["by"],
    )
    parked.add_metric(["wake"], a.watch.parked_woken)
    parked.add_metric(["expiry"], a.watch.parked_expired)
    yield parked


def _authorization_metrics(a: RunningAgent) -> Iterator[Metric]:
    """ACL checks refused, by Kafka API and resource type."""
    denied = CounterMetricFamily(
        "skiff_authorization_denied",
        "Authorization checks refused by the ACLs, by Kafka API and resource type (a refused "
        "request counts once per resource it named)",
        labels=["api", "resource"],
    )
    for (api_key, resource), n in sorted(a.context.acls.denied.items()):
        denied.add_metric([api_name(api_key) or str(api_key), resource.name.lower()], n)
    yield denied


def _schema_validation_metrics(a: RunningAgent) -> Iterator[Metric]:
    """Broker-side schema validation (agent.schema_cache): refusals by topic, the cache, the registry calls."""
    schemas = a.context.schemas
    refused = CounterMetricFamily(
        "skiff_schema_validation_refused_records",
        "Records refused by broker-side schema validation, by topic",
        labels=["topic"],
    )
    for topic, n in sorted(schemas.refused_records.items()):
        refused.add_metric([topic], n)
    yield refused
    hits = CounterMetricFamily(
        "skiff_schema_cache_hits", "Schema validation lookups answered from the cache", labels=["cache"]
    )
    misses = CounterMetricFamily(
        "skiff_schema_cache_misses", "Schema validation lookups the cache could not answer", labels=["cache"]
    )
    for cache in sorted(schemas.hits):
        hits.add_metric([cache], schemas.hits[cache])
        misses.add_metric([cache], schemas.misses[cache])
    yield hits
    yield misses
    yield CounterMetricFamily(
        "skiff_schema_registry_fetches", "Schema registry calls made by validation", value=schemas.fetches
    )
    yield CounterMetricFamily(
        "skiff_schema_registry_fetch_failures",
        "Schema registry calls made by validation that failed",
        value=schemas.fetch_failures,
    )


def readiness_metrics(readiness: Readiness | None) -> Iterator[Metric]:
    """`skiff_agent_ready` and `skiff_readiness_probe_failures_total{dependency}`."""
    ready = readiness is not None and readiness.check().ready
    yield GaugeMetricFamily(
        "skiff_agent_ready", "1 when the agent is ready (/readyz answers 200)", value=int(ready)
    )
    failures = CounterMetricFamily(
        "skiff_readiness_probe_failures",
        "Readiness probes that found a dependency failing (bucket: PUT/GET of the probe object)",
        labels=["dependency"],
    )
    if readiness is not None:
        for dependency, n in sorted(readiness.monitor.failures.items()):
            failures.add_metric([dependency], n)
    yield failures


def security_metrics(servers: Iterable[AgentServer]) -> Iterator[Metric]:
    """Per listener, from each server's `ListenerSecurity` (PLAINTEXT servers have none):
    `skiff_tls_handshake_failures_total{listener}` on TLS listeners (handshakes failed or
    timed out: plaintext to a TLS port, a certificate the client or server refused), and on
    SASL listeners `skiff_failed_authentication_total{listener,mechanism}` /
    `skiff_successful_authentication_total{listener,mechanism}` (Kafka's
    failed-/successful-authentication-total; every enabled mechanism is listed, from 0)."""
    tls = CounterMetricFamily(
        "skiff_tls_handshake_failures", "TLS handshakes that failed or timed out", labels=["listener"]
    )
    failed = CounterMetricFamily(
        "skiff_failed_authentication",
        "SASL authentications refused (wrong credentials, unknown user, malformed exchange)",
        labels=["listener", "mechanism"],
    )
    succeeded = CounterMetricFamily(
        "skiff_successful_authentication",
        "SASL authentications completed (logins and re-authentications)",
        labels=["listener", "mechanism"],
    )
    for server in servers:
        sec = server.security
        if sec is None:
            continue
        listener = sec.listener.name
        if sec.ssl_context is not None:
            tls.add_metric([listener], sec.tls_failures)
        if sec.listener.sasl:
            counts = sec.sasl_counts
            for mech in sorted({*sec.sasl_mechanisms, *counts.failed, *counts.succeeded}):
                failed.add_metric([listener, mech], counts.failed[mech])
                succeeded.add_metric([listener, mech], counts.succeeded[mech])
    yield tls
    yield failed
    yield succeeded


def serve_metrics(
    agent: RunningAgent, host: str, port: int, readiness: Readiness | None = None
) -> HttpEndpoint | None:
    """Serve /metrics, /healthz and /readyz in daemon threads. A port already taken is
    logged and the agent runs without the endpoint: in Kubernetes every pod has the port
    to itself (and its probes report the problem), while on one machine a second agent on
    the default port would otherwise refuse to start."""
    registry = CollectorRegistry()
    registry.register(AgentCollector(agent))
    return serve_collector(registry, host, port, readiness)


__all__ = ["METRIC_DOCS", "TimedStore", "render_metrics_table", "replace_metrics_table"]

if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(_main())
