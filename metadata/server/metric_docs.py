"""The documentation of every family the metadata service's /metrics exports, and
`MetricDoc`, the row type of docs/operations.md's metrics table. Rendered with the agent's
and the maintenance work's by `python -m skiff.agent.metrics --doc`;
tests/component/test_metadata_metrics.py checks these rows against a running service's
exposition (metadata.server.metrics)."""

from __future__ import annotations

from typing import NamedTuple

METADATA = "metadata"
MAX_LAG_SERIES = 500  # (group, topic) pairs the lag families export (metadata.server.metrics_queries)


class MetricDoc(NamedTuple):
    """One row of the metrics table: metrics sharing a type and labels."""

    names: tuple[str, ...]  # as exported: counters with `_total`
    type: str  # counter, gauge or histogram
    labels: str  # comma-separated label names ("" for none)
    meaning: str
    exported_by: str = "agent"  # the process whose /metrics has it


METADATA_METRIC_DOCS: tuple[MetricDoc, ...] = (
    MetricDoc(
        ("skiff_build_info",),
        "gauge",
        "version",
        "1, labelled with the Skiff version the process runs (`skiff --version`); during a rolling "
        "upgrade `count by (version) (skiff_build_info)` shows how far it got",
        "agent, metadata",
    ),
    MetricDoc(
        ("skiff_metadata_http_requests_total",),
        "counter",
        "route,role,status",
        "HTTP requests by route template (`/v1/commit-file`, ...; `other` for no route), the caller's token "
        "roles (`agent`, `agent+compactor`, ...; `none` without authentication) and HTTP status; 5xx are "
        "the service's errors (503: the database unavailable)",
        METADATA,
    ),
    MetricDoc(
        ("skiff_metadata_http_request_duration_seconds",),
        "histogram",
        "route",
        "HTTP requests from receipt to response, by route template (agents' commit long polls sit near "
        "their wait); buckets 1 ms to 10 s",
        METADATA,
    ),
    MetricDoc(
        (
            "skiff_metadata_commits_total",
            "skiff_metadata_commit_records_total",
            "skiff_metadata_commit_bytes_total",
        ),
        "counter",
        "",
        "file commits answered by this replica (over HTTP or in-process), the records they stored "
        "(duplicates and refused batches aside) and the committed files' bytes",
        METADATA,
    ),
    MetricDoc(
        ("skiff_metadata_db_transaction_duration_seconds",),
        "histogram",
        "kind",
        "database transactions by kind (`read`, `write`), from asking for a connection (and, on SQLite, "
        "the process's write lock) to commit or rollback; a commit's group transaction counts once",
        METADATA,
    ),
    MetricDoc(
        ("skiff_metadata_db_pool_connections",),
        "gauge",
        "state",
        "database pool: connections checked out (`in_use`) and the pool's size (`size`; overflow "
        "connections beyond it show as `in_use` above `size`)",
        METADATA,
    ),
    MetricDoc(
        ("skiff_metadata_leases",),
        "gauge",
        "kind",
        "unexpired leases: `compaction` (partitions under a compactor job's lease), `group` "
        "(consumer group coordinator leases)",
        METADATA,
    ),
    MetricDoc(
        ("skiff_consumer_lag_sum", "skiff_consumer_lag_max"),
        "gauge",
        "group,topic",
        "records between a group's committed offsets and the high watermarks of the topic's partitions "
        "(those with a committed offset), summed and the largest one partition's; at most "
        f"{MAX_LAG_SERIES} (group, topic) pairs, largest total lag first",
        METADATA,
    ),
    MetricDoc(
        ("skiff_consumer_committed_offset_age_seconds",),
        "gauge",
        "group",
        "seconds since the group's latest offset commit (groups of the exported pairs)",
        METADATA,
    ),
    MetricDoc(
        ("skiff_consumer_lag_pairs",),
        "gauge",
        "",
        f"(group, topic) pairs with committed offsets; above {MAX_LAG_SERIES}, the pairs with the least "
        "lag are not exported",
        METADATA,
    ),
    MetricDoc(
        ("skiff_compaction_partitions_eligible",),
        "gauge",
        "kind",
        "partitions the planner would give a job now (default merge rules): `clean` (compacted topics past "
        "`min.cleanable.dirty.ratio` or `max.compaction.lag.ms`), `merge` (small level-0 chunks); "
        "partitions under a lease are not counted",
        METADATA,
    ),
    MetricDoc(
        ("skiff_compaction_partitions_forced",),
        "gauge",
        "",
        "compacted partitions whose dirty data is older than `max.compaction.lag.ms` (compaction is behind)",
        METADATA,
    ),
    MetricDoc(
        ("skiff_compaction_dirty_bytes",),
        "gauge",
        "",
        "bytes the eligible partitions' jobs would consume: cleanable dirty bytes, merge inputs",
        METADATA,
    ),
    MetricDoc(
        ("skiff_compaction_dirty_ratio_max",),
        "gauge",
        "",
        "the highest dirty ratio (dirty / (clean + dirty) bytes) among eligible compacted partitions",
        METADATA,
    ),
    MetricDoc(
        ("skiff_bucket_files", "skiff_bucket_stored_bytes"),
        "gauge",
        "state",
        "files metadata records and their bytes, by state (`live`; `deleting`: replaced or dropped, "
        "waiting for GC's grace)",
        METADATA,
    ),
    MetricDoc(
        ("skiff_bucket_storage_cost_usd_per_hour",),
        "gauge",
        "",
        "storage cost estimate of the recorded files, at `SKIFF_PRICE_STORAGE_GB_MONTH_USD` (default "
        "0.023 USD per GB-month, S3 Standard; 730 h a month)",
        METADATA,
    ),
    MetricDoc(
        ("skiff_topic_put_cost_usd_per_hour",),
        "gauge",
        "topic",
        "a topic's share of the agents' PUT cost over the last hour: each agent file's one PUT shared among "
        "its topics by their bytes in it (at most 100 topics, the most costly; docs/operations.md)",
        METADATA,
    ),
    MetricDoc(
        ("skiff_topic_storage_cost_usd_per_hour",),
        "gauge",
        "topic",
        "a topic's storage cost: the bytes of its chunks at the configured storage price (same 100 topics)",
        METADATA,
    ),
    MetricDoc(
        ("skiff_topic_written_bytes_last_hour",),
        "gauge",
        "topic",
        "a topic's bytes in the files agents committed over the last hour (same 100 topics)",
        METADATA,
    ),
    MetricDoc(
        ("skiff_cluster_object_store_requests_last_hour",),
        "gauge",
        "role,kind",
        "object-store requests reported over the last hour by the cluster's processes, by role (`agent`, "
        "`compactor`, `reader`: Spark executors) and kind (`put`, `get`, `head`, `list`, `delete`, `error`)",
        METADATA,
    ),
    MetricDoc(
        ("skiff_cluster_object_store_bytes_last_hour",),
        "gauge",
        "role,direction",
        "bytes sent to (`out`) and received from (`in`) the object store over the last hour, as reported",
        METADATA,
    ),
    MetricDoc(
        ("skiff_cluster_object_store_cost_usd_per_hour",),
        "gauge",
        "role",
        "the request cost of the last hour's reported usage at the configured prices, by role",
        METADATA,
    ),
    MetricDoc(
        ("skiff_table_behind_offsets",),
        "gauge",
        "table",
        "offsets committed to a topic with `skiff.table.enabled` and not yet in its Iceberg table (at most 200 "
        "tables)",
        METADATA,
    ),
    MetricDoc(
        ("skiff_table_freshness_seconds",),
        "gauge",
        "table",
        "age of the oldest committed record the table lacks (its file's commit time; 0 when caught up): what a "
        "reader of the table does not see yet",
        METADATA,
    ),
    MetricDoc(
        ("skiff_table_snapshot_age_seconds",),
        "gauge",
        "table",
        "seconds since the table's last snapshot (tables with one)",
        METADATA,
    ),
    MetricDoc(
        ("skiff_maintenance_last_success_age_seconds",),
        "gauge",
        "task",
        "seconds since a maintenance task last succeeded: `retention`, `compaction` (a pass's compaction "
        "with no failed job), `gc`, `orphans`",
        METADATA,
    ),
    MetricDoc(
        ("skiff_metadata_requests_refused_total",),
        "counter",
        "reason",
        "requests refused by authentication or authorization: `missing`, `invalid` (token), `forbidden` "
        "(role), `agent_id` (a bound token acting for another agent)",
        METADATA,
    ),
    MetricDoc(
        ("skiff_metadata_commit_object_checks_total",),
        "counter",
        "outcome",
        "the commit path's HEAD of each committed object (when the service knows its bucket), by outcome",
        METADATA,
    ),
    MetricDoc(
        ("skiff_metadata_commit_object_check_seconds",),
        "histogram",
        "",
        "duration of those HEADs",
        METADATA,
    ),
)
