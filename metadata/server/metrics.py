"""The metadata service's Prometheus metrics: `GET /metrics` (reader role).

`MetadataMetrics` is built once per app (`create_app`); it owns:

- `HttpMetricsMiddleware` (the outermost ASGI middleware, so refusals by authentication are
  seen too): per request, `skiff_metadata_http_requests_total{route,role,status}` and
  `skiff_metadata_http_request_duration_seconds{route}`. `route` is the route's path
  template (every route of the service has a fixed path: names travel in bodies), a
  request to no route counts as `other`; `role` is the caller's token roles joined by `+`
  (`agent`, `agent+compactor`, ...) or `none` (authentication off, a public path, a
  refused token); `status` the HTTP status. So the label sets are bounded by the routes,
  the role combinations and the statuses the service answers.
- the commit counters `skiff_metadata_commits_total`, `..._commit_records_total` and
  `..._commit_bytes_total`: file commits answered (over HTTP or in-process), records
  stored by them, and the committed files' bytes. Counted around the service's commit
  path (`CommitPath.commit_file`, wrapped once per service), so group commits count
  each file;
- `skiff_metadata_db_transaction_duration_seconds{kind}` (`read`, `write`): every
  transaction of the service's engine (`metadata.db.observe_transactions`), and the
  connection pool's gauges read at scrape time;
- what the database says at scrape time (metadata.server.metrics_queries: leases,
  consumer lag, compaction backlog, bucket storage and its cost), cached for
  `SCRAPE_CACHE_S` so that several scrapers cost one set of queries;
- and the families the service had before: seconds since each maintenance task last
  succeeded, requests refused by authentication, the commit path's object checks.

Histograms are prometheus-client `Histogram`s of this app (not of the process's default
registry); counters are plain integers under a lock, exposed by a collector.
Documentation of every family: metadata.server.metric_docs (rendered with the agent's
table by `python -m skiff.agent.metrics --doc`).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, MutableMapping, Sequence
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from skiff.metadata.build_info import build_info_family
from skiff.metadata.db import observe_transactions
from skiff.metadata.server import metrics_queries
from skiff.metadata.server.auth import MetadataAuth, allow, iter_routes
from skiff.metadata.server.bucket import LazyBucket
from skiff.metadata.server.iceberg_rest import CatalogRows
from skiff.metadata.server.table_freshness import TableFreshness
from skiff.metadata.service import MetadataService
from skiff.metadata.types import ChunkResult, ChunkSpec, FileSpec
from skiff.metadata.wire.roles import READER

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SCRAPE_CACHE_S = 10.0  # database-derived families are recomputed at most this often
OTHER_ROUTE = "other"  # a request that matched no route (its raw path is never a label)
CALLER_SCOPE_KEY = "skiff.caller"  # where metadata.server.auth leaves the authenticated caller

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class CommitCounter:
    """File commits, the records they stored and the files' bytes (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.files = 0
        self.records = 0
        self.bytes = 0

    def count(self, file: FileSpec, specs: Sequence[ChunkSpec], results: Sequence[ChunkResult]) -> None:
        records = 0
        for spec, result in zip(specs, results, strict=False):
            if result.error_code:
                continue
            for batch, answer in zip(spec.batches, result.batches, strict=False):
                if answer.error_code == 0 and not answer.duplicate:
                    records += batch.record_count
        with self._lock:
            self.files += 1
            self.records += records
            self.bytes += file.size_bytes


def commit_counter(svc: MetadataService) -> CommitCounter:
    """The service's commit counter, installed around its commit path on first use (the
    playground's agent commits in-process, not over HTTP: both are counted here)."""
    commits = svc.commits
    existing = getattr(commits, "_skiff_commit_counter", None)
    if isinstance(existing, CommitCounter):
        return existing
    counter = CommitCounter()
    inner = commits.commit_file

    def commit_file(file: FileSpec, chunk_specs: Sequence[ChunkSpec]) -> list[ChunkResult]:
        results = inner(file, chunk_specs)
        counter.count(file, chunk_specs, results)
        return results

    setattr(commits, "commit_file", commit_file)  # noqa: B010 - an instance attribute over the method
    setattr(commits, "_skiff_commit_counter", counter)  # noqa: B010
    return counter


class MetadataMetrics:
    """The metrics of one app over `svc` (see the module docstring)."""

    def __init__(self, svc: MetadataService, auth: MetadataAuth) -> None:
        self.svc = svc
        self.auth = auth
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, str, str]] = Counter()
        self.http_latency = Histogram(
            "skiff_metadata_http_request_duration_seconds",
            "HTTP requests to the metadata service by route template: receipt to response",
            ["route"],
            buckets=LATENCY_BUCKETS_S,
            registry=None,
        )
        self.tx_latency = Histogram(
            "skiff_metadata_db_transaction_duration_seconds",
            "Database transactions of the service: connection wait to commit or rollback",
            ["kind"],
            buckets=LATENCY_BUCKETS_S,
            registry=None,
        )
        self._tx_children = {kind: self.tx_latency.labels(kind) for kind in ("read", "write")}
        self._route_children: dict[str, Any] = {}
        self.commits = commit_counter(svc)
        observe_transactions(svc.engine, self.observe_transaction)
        self.known_paths: frozenset[str] = frozenset()
        tables = TableFreshness(CatalogRows(LazyBucket(svc)))  # the topics' Iceberg tables
        self.cache = metrics_queries.ScrapeCache(svc, SCRAPE_CACHE_S, tables=tables)
        self.registry = CollectorRegistry()
        self.registry.register(_Collector(self))

    def learn_routes(self, app: FastAPI) -> None:
        """The route paths that may be labels (read once the routes are declared)."""
        self.known_paths = frozenset(path for path, _ in iter_routes(app.routes))

    def observe_transaction(self, kind: str, seconds: float) -> None:
        child = self._tx_children.get(kind)
        if child is not None:
            child.observe(seconds)

    def observe_request(self, route: str, role: str, status: int, seconds: float) -> None:
        child = self._route_children.get(route)
        if child is None:
            child = self._route_children[route] = self.http_latency.labels(route)
        child.observe(seconds)
        with self._lock:
            self.requests[(route, role, str(status))] += 1

    def route_of(self, scope: Scope) -> str:
        route = scope.get("route")
        path = getattr(route, "path", None)
        if isinstance(path, str):
            return path
        raw = scope.get("path", "")
        return raw if raw in self.known_paths else OTHER_ROUTE

    def exposition(self) -> bytes:
        """The whole /metrics text: the collector's families, then the hand-written ones."""
        now_ms = self.svc.clock()
        lines = [
            "# HELP skiff_maintenance_last_success_age_seconds Seconds since the task last succeeded.",
            "# TYPE skiff_maintenance_last_success_age_seconds gauge",
        ]
        for task, ms in sorted(self.svc.last_successes().items()):
            lines.append(
                f'skiff_maintenance_last_success_age_seconds{{task="{task}"}} {(now_ms - ms) / 1000:.3f}'
            )
        lines.extend(self.auth.metrics_lines())
        lines.extend(self.svc.commits.object_check_metrics_lines())
        return generate_latest(self.registry) + ("\n".join(lines) + "\n").encode()

    def router(self) -> APIRouter:
        """`GET /metrics` (reader role): Prometheus text."""
        router = APIRouter(dependencies=[allow(READER)])

        @router.get("/metrics", tags=["health"])
        def metrics() -> Response:
            """Prometheus text: HTTP requests, commits, database time and pool, leases,
            consumer lag, compaction backlog, bucket storage, maintenance ages,
            authentication refusals and the commit path's object checks."""
            return Response(self.exposition(), media_type="text/plain; version=0.0.4")

        return router


def caller_role(scope: Scope) -> str:
    """The caller's token roles joined by `+`, or `none`."""
    caller = scope.get(CALLER_SCOPE_KEY)
    roles = getattr(caller, "roles", None)
    return "+".join(sorted(roles)) if roles else "none"


class HttpMetricsMiddleware:
    """Times and counts every HTTP request (outermost: the status is what the client got)."""

    def __init__(self, app: ASGIApp, metrics: MetadataMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # an exception escaping the app is answered 500 by the server

        async def send_with_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        finally:
            m = self.metrics
            m.observe_request(m.route_of(scope), caller_role(scope), status, time.perf_counter() - started)


def install(app: FastAPI, svc: MetadataService, auth: MetadataAuth) -> MetadataMetrics:
    """Serve /metrics on `app`; call `add_middleware(app, metrics)` after every other
    middleware (it must be the outermost)."""
    metrics = MetadataMetrics(svc, auth)
    app.include_router(metrics.router())
    return metrics


def add_middleware(app: FastAPI, metrics: MetadataMetrics) -> None:
    metrics.learn_routes(app)
    app.add_middleware(HttpMetricsMiddleware, metrics=metrics)


class _Collector(Collector):
    def __init__(self, metrics: MetadataMetrics) -> None:
        self._m = metrics

    def collect(self) -> Iterator[Metric]:
        m = self._m
        yield build_info_family()
        yield from _http_families(m)
        yield from _commit_families(m.commits)
        yield from _pool_families(m.svc)
        yield from m.cache.families()
        for histogram in (m.http_latency, m.tx_latency):
            for family in histogram.collect():
                family.samples = [s for s in family.samples if not s.name.endswith("_created")]
                yield family


def _http_families(m: MetadataMetrics) -> Iterator[Metric]:
    requests = CounterMetricFamily(
        "skiff_metadata_http_requests",
        "HTTP requests by route template, caller role and status",
        labels=["route", "role", "status"],
    )
    with m._lock:
        counts = sorted(m.requests.items())
    for (route, role, status), n in counts:
        requests.add_metric([route, role, status], n)
    yield requests


def _commit_families(c: CommitCounter) -> Iterator[Metric]:
    yield CounterMetricFamily("skiff_metadata_commits", "File commits answered", value=c.files)
    yield CounterMetricFamily(
        "skiff_metadata_commit_records", "Records stored by file commits", value=c.records
    )
    yield CounterMetricFamily("skiff_metadata_commit_bytes", "Bytes of the files committed", value=c.bytes)


def _pool_families(svc: MetadataService) -> Iterator[Metric]:
    """The SQLAlchemy pool: connections checked out, and the pool's size (QueuePool; a
    pool without these numbers, such as an in-memory SQLite's static pool, reports 0/1)."""
    pool: Any = svc.engine.pool
    in_use = pool.checkedout() if hasattr(pool, "checkedout") else 0
    size = pool.size() if hasattr(pool, "size") else 1
    connections = GaugeMetricFamily(
        "skiff_metadata_db_pool_connections",
        "Database pool connections: in use (checked out) and the pool's size",
        labels=["state"],
    )
    connections.add_metric(["in_use"], in_use)
    connections.add_metric(["size"], size)
    yield connections
