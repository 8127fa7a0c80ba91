"""What the metadata database says at scrape time: leases held, consumer lag, compaction
backlog, bucket storage and its cost. For the metadata service's /metrics
(metadata.server.metrics), recomputed at most every `ttl_s` (`ScrapeCache`), each a
bounded query in one read transaction:

- leases: compaction leases (partitions under an unexpired job lease) and group
  coordinator leases (unexpired), `skiff_metadata_leases{kind}`;
- consumer lag, per (group, topic) of the committed offsets: `skiff_consumer_lag_sum` and
  `skiff_consumer_lag_max` (over the partitions with a committed offset: high watermark
  minus committed offset, 0 when the offset is at or past it), and per group
  `skiff_consumer_committed_offset_age_seconds` (seconds since the group's latest
  commit). At most `MAX_LAG_SERIES` (group, topic) pairs are exported, largest total lag
  first; `skiff_consumer_lag_pairs` says how many there are in all (more than the cap:
  some were left out). Offsets committed for a topic that no longer exists are skipped;
- compaction backlog, from the planner's own question (`compaction_candidates` with the
  default merge rules, at most `MAX_CANDIDATES`): partitions eligible now by kind
  (`clean`: compacted topics past min.cleanable.dirty.ratio or max.compaction.lag.ms;
  `merge`: small level-0 chunks to merge), those forced by max.compaction.lag.ms, their
  dirty bytes and the highest dirty ratio;
- bucket storage: files and bytes by state (`live`, `deleting`), and the storage cost per
  hour at the configured price (fileformat.objectstore.pricing);
- who the bill belongs to (metadata.server.cost_queries): each topic's share of the agents'
  PUTs and its storage (the `MAX_COST_TOPICS` most costly), and the requests every process
  reported over the last hour by role (metadata.usage), with their cost.

With several metadata replicas each exports the same database-derived values: aggregate
them with `max by (...)` (the dashboard and the alert rules do).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from skiff.fileformat.objectstore.pricing import Prices
from skiff.metadata.db import read_tx
from skiff.metadata.schema import compaction_state, files, group_leases, group_offsets, partitions, topics
from skiff.metadata.server.cost_queries import HOUR_MS, topic_costs, usage_usd
from skiff.metadata.server.metric_docs import MAX_LAG_SERIES
from skiff.metadata.server.table_freshness import TableFreshness
from skiff.metadata.service import MetadataService
from skiff.metadata.types import StoreUsage
from skiff.metadata.usage import MINUTE_MS, USAGE_ROLES
from sqlalchemy import Connection, case, func, select

MAX_CANDIDATES = 10_000  # compaction candidates counted


class ScrapeCache:
    """The families below, computed at most every `ttl_s` (thread-safe: scrapes run in
    the server's thread pool)."""

    def __init__(
        self,
        svc: MetadataService,
        ttl_s: float,
        prices: Prices | None = None,
        tables: TableFreshness | None = None,
    ) -> None:
        self._svc = svc
        self._tables = tables
        self._ttl_s = ttl_s
        self._prices = prices or Prices.from_env()
        self._lock = threading.Lock()
        self._at = -float("inf")
        self._families: list[Metric] = []

    def families(self) -> list[Metric]:
        with self._lock:
            now = time.monotonic()
            if now - self._at >= self._ttl_s:
                self._families = list(self._compute())
                self._at = now
            return self._families

    def _compute(self) -> Iterator[Metric]:
        now_ms = self._svc.clock()
        with read_tx(self._svc.engine) as conn:
            yield from lease_families(conn, now_ms)
            yield from lag_families(conn, now_ms)
            yield from storage_families(conn, self._prices)
            yield from topic_cost_families(conn, now_ms, self._prices)
        yield from usage_families(self._svc, now_ms, self._prices)
        yield from compaction_families(self._svc)
        if self._tables is not None:
            yield from table_families(self._tables, now_ms)


def lease_families(conn: Connection, now_ms: int) -> Iterator[Metric]:
    compaction = conn.execute(
        select(func.count())
        .select_from(compaction_state)
        .where(compaction_state.c.lease_token.is_not(None), compaction_state.c.lease_expires_ms > now_ms)
    ).scalar_one()
    groups = conn.execute(
        select(func.count()).select_from(group_leases).where(group_leases.c.expires_ms > now_ms)
    ).scalar_one()
    leases = GaugeMetricFamily(
        "skiff_metadata_leases",
        "Unexpired leases: compaction (partitions under a job's lease), group (coordinator leases)",
        labels=["kind"],
    )
    leases.add_metric(["compaction"], compaction)
    leases.add_metric(["group"], groups)
    yield leases


def lag_rows(conn: Connection, limit: int = MAX_LAG_SERIES) -> tuple[list[Any], int]:
    """(group, topic, lag sum, lag max, latest commit ms) for the `limit` pairs with the
    largest total lag, and the number of pairs in all."""
    hw, committed = partitions.c.high_watermark, group_offsets.c.committed_offset
    # A negative committed offset is a client's sentinel (-1, or -2 "earliest" as KafkaJS
    # commits), not a position: it counts as no lag rather than as high watermark + 2.
    lag = case(((committed >= 0) & (hw > committed), hw - committed), else_=0)
    joined = group_offsets.join(topics, topics.c.name == group_offsets.c.topic).join(
        partitions,
        (partitions.c.topic_id == topics.c.topic_id) & (partitions.c.partition == group_offsets.c.partition),
    )
    per_pair = (
        select(
            group_offsets.c.group_id,
            group_offsets.c.topic,
            func.sum(lag).label("lag_sum"),
            func.max(lag).label("lag_max"),
            func.max(group_offsets.c.commit_time_ms).label("last_commit_ms"),
        )
        .select_from(joined)
        .group_by(group_offsets.c.group_id, group_offsets.c.topic)
    )
    rows = list(
        conn.execute(
            per_pair.order_by(func.sum(lag).desc(), group_offsets.c.group_id, group_offsets.c.topic).limit(
                limit
            )
        )
    )
    total = conn.execute(select(func.count()).select_from(per_pair.subquery())).scalar_one()
    return rows, int(total)


def lag_families(conn: Connection, now_ms: int) -> Iterator[Metric]:
    rows, total = lag_rows(conn)
    lag_sum = GaugeMetricFamily(
        "skiff_consumer_lag_sum",
        "Records between a group's committed offsets and the high watermarks, summed over the topic's partitions",
        labels=["group", "topic"],
    )
    lag_max = GaugeMetricFamily(
        "skiff_consumer_lag_max",
        "The largest lag of one partition of the topic for the group",
        labels=["group", "topic"],
    )
    last_commit: dict[str, int] = {}
    for r in rows:
        lag_sum.add_metric([r.group_id, r.topic], int(r.lag_sum or 0))
        lag_max.add_metric([r.group_id, r.topic], int(r.lag_max or 0))
        last_commit[r.group_id] = max(last_commit.get(r.group_id, 0), int(r.last_commit_ms))
    age = GaugeMetricFamily(
        "skiff_consumer_committed_offset_age_seconds",
        "Seconds since the group's latest offset commit",
        labels=["group"],
    )
    for group, ms in sorted(last_commit.items()):
        age.add_metric([group], max(0.0, (now_ms - ms) / 1000))
    yield lag_sum
    yield lag_max
    yield age
    yield GaugeMetricFamily(
        "skiff_consumer_lag_pairs",
        f"(group, topic) pairs with committed offsets; at most {MAX_LAG_SERIES} are exported",
        value=total,
    )


def storage_families(conn: Connection, prices: Prices) -> Iterator[Metric]:
    stored = GaugeMetricFamily(
        "skiff_bucket_stored_bytes", "Bytes of the files metadata records, by state", labels=["state"]
    )
    counted = GaugeMetricFamily("skiff_bucket_files", "Files metadata records, by state", labels=["state"])
    total_bytes = 0
    by_state = {
        r.state: (int(r.n), int(r.b or 0))
        for r in conn.execute(
            select(files.c.state, func.count().label("n"), func.sum(files.c.size_bytes).label("b")).group_by(
                files.c.state
            )
        )
    }
    for state in sorted({"live", "deleting", *by_state}):
        n, b = by_state.get(state, (0, 0))
        counted.add_metric([state], n)
        stored.add_metric([state], b)
        total_bytes += b
    yield counted
    yield stored
    yield GaugeMetricFamily(
        "skiff_bucket_storage_cost_usd_per_hour",
        "Storage cost estimate of the recorded files at the configured price per GB-month",
        value=prices.storage_usd_per_hour(total_bytes),
    )


def topic_cost_families(conn: Connection, now_ms: int, prices: Prices) -> Iterator[Metric]:
    """Each topic's share of the bill (metadata.server.cost_queries), the most costly
    `MAX_COST_TOPICS` topics."""
    put = GaugeMetricFamily(
        "skiff_topic_put_cost_usd_per_hour",
        "A topic's share of the agents' PUT cost over the last hour (by its bytes in each file)",
        labels=["topic"],
    )
    storage = GaugeMetricFamily(
        "skiff_topic_storage_cost_usd_per_hour",
        "A topic's storage cost at the configured price",
        labels=["topic"],
    )
    written = GaugeMetricFamily(
        "skiff_topic_written_bytes_last_hour",
        "A topic's bytes in the agents' files of the last hour",
        labels=["topic"],
    )
    for c in topic_costs(conn, now_ms, prices):
        put.add_metric([c.topic], c.put_usd_per_hour)
        storage.add_metric([c.topic], c.storage_usd_per_hour)
        written.add_metric([c.topic], c.written_bytes)
    yield from (put, storage, written)


def usage_families(svc: MetadataService, now_ms: int, prices: Prices) -> Iterator[Metric]:
    """The object-store requests the cluster's processes reported over the last hour, by role
    (metadata.usage): agents, compactors and Spark executors (`reader`)."""
    totals = svc.usage.usage_totals(now_ms - now_ms % MINUTE_MS - HOUR_MS)
    requests = GaugeMetricFamily(
        "skiff_cluster_object_store_requests_last_hour",
        "Object-store requests reported by the cluster's processes over the last hour",
        labels=["role", "kind"],
    )
    moved = GaugeMetricFamily(
        "skiff_cluster_object_store_bytes_last_hour",
        "Bytes to (`out`) and from (`in`) the object store reported over the last hour",
        labels=["role", "direction"],
    )
    cost = GaugeMetricFamily(
        "skiff_cluster_object_store_cost_usd_per_hour",
        "Request cost of the last hour's reported usage at the configured prices",
        labels=["role"],
    )
    for role in USAGE_ROLES:
        u = totals.get(role, StoreUsage())
        for kind in ("puts", "gets", "heads", "lists", "deletes", "errors"):
            requests.add_metric([role, kind.removesuffix("s")], getattr(u, kind))
        moved.add_metric([role, "out"], u.bytes_out)
        moved.add_metric([role, "in"], u.bytes_in)
        cost.add_metric([role], usage_usd(u, prices))
    yield from (requests, moved, cost)


def table_families(tables: TableFreshness, now_ms: int) -> Iterator[Metric]:
    """How far each topic's Iceberg table is behind (metadata.server.table_freshness)."""
    behind = GaugeMetricFamily(
        "skiff_table_behind_offsets",
        "Offsets committed to the topic and not yet in its table",
        labels=["table"],
    )
    fresh = GaugeMetricFamily(
        "skiff_table_freshness_seconds",
        "Age of the oldest committed record not yet in the table (0: caught up)",
        labels=["table"],
    )
    age = GaugeMetricFamily(
        "skiff_table_snapshot_age_seconds", "Seconds since the table's last snapshot", labels=["table"]
    )
    for t in tables.states(now_ms):
        behind.add_metric([t.table], t.behind_offsets)
        fresh.add_metric([t.table], t.freshness_s)
        if t.snapshot_age_s is not None:
            age.add_metric([t.table], t.snapshot_age_s)
    yield from (behind, fresh, age)


def compaction_families(svc: MetadataService) -> Iterator[Metric]:
    candidates = svc.compaction_candidates(None, None, MAX_CANDIDATES)
    eligible = GaugeMetricFamily(
        "skiff_compaction_partitions_eligible",
        "Partitions the planner would compact now: clean (compacted topics) or merge (level-0 chunks)",
        labels=["kind"],
    )
    cleans = [c for c in candidates if c.compact]
    eligible.add_metric(["clean"], len(cleans))
    eligible.add_metric(["merge"], len(candidates) - len(cleans))
    yield eligible
    yield GaugeMetricFamily(
        "skiff_compaction_partitions_forced",
        "Compacted partitions whose dirty data is older than max.compaction.lag.ms",
        value=sum(1 for c in cleans if c.forced),
    )
    yield GaugeMetricFamily(
        "skiff_compaction_dirty_bytes",
        "Bytes the eligible partitions' jobs would consume (cleanable dirty bytes; merge inputs)",
        value=sum(c.cleanable_bytes for c in candidates),
    )
    yield GaugeMetricFamily(
        "skiff_compaction_dirty_ratio_max",
        "The highest dirty ratio among eligible compacted partitions (0 without any)",
        value=max((c.dirty_ratio for c in cleans), default=0.0),
    )
