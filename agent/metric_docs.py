"""The documentation of every metric family Skiff exports, and the Markdown table of
docs/operations.md's Monitoring section generated from it: `python -m skiff.agent.metrics
--doc` prints the table, `--write docs/operations.md` replaces it between its markers.

Rows (`MetricDoc`: names, type, labels, the process exporting them, meaning) come from three
places: the agent's own families (`AGENT_METRIC_DOCS`, agent.metrics), the maintenance work's
(`MAINTENANCE_METRIC_DOCS`, compactor.metrics: exported by an agent with the compaction role,
the playground and `skiff compact`) and the metadata service's
(`metadata.server.metric_docs`). Tests check each against a running process's exposition
(tests/component/test_metrics_doc.py, test_metadata_metrics.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from skiff.metadata.server.metric_docs import METADATA_METRIC_DOCS, MetricDoc

AGENT_AND_COMPACTOR = "agent, `skiff compact`"
MAINTENANCE = "agent (compaction role), playground, `skiff compact`"

# The documentation of every family an agent exports (`python -m skiff.agent.metrics --doc`
# renders it; tests/component/test_metrics_doc.py checks it against a running agent's
# exposition and docs/operations.md against it).
AGENT_METRIC_DOCS: tuple[MetricDoc, ...] = (
    MetricDoc(
        ("skiff_object_store_requests_total",),
        "counter",
        "role,kind",
        "PUT/GET/range/delete/list/head requests (what the bucket bills), by role (`agent`: produce and "
        "fetch; `compactor`: an agent's compaction role, `skiff compact`) and kind (`put`, "
        "`create_if_absent`, `get`, `get_range`, `stream_get`, `head`, `list` (a page), `delete` (a batch "
        "of up to 1000 keys))",
        AGENT_AND_COMPACTOR,
    ),
    MetricDoc(
        ("skiff_object_store_errors_total",),
        "counter",
        "role,kind",
        "failed requests (counted in the requests too: a failed GET still costs a GET)",
        AGENT_AND_COMPACTOR,
    ),
    MetricDoc(
        ("skiff_object_store_retries_total",),
        "counter",
        "role",
        "extra attempts made by the S3 client's retry policy",
        AGENT_AND_COMPACTOR,
    ),
    MetricDoc(
        ("skiff_object_store_bytes_total",),
        "counter",
        "role,direction",
        "bytes to (`out`) and from (`in`) the bucket",
        AGENT_AND_COMPACTOR,
    ),
    MetricDoc(
        ("skiff_object_store_request_cost_usd_total",),
        "counter",
        "role",
        "estimated request cost since the process started, USD, at the configured prices (defaults: S3 "
        "Standard list prices, 0.005 USD per 1,000 PUT/LIST, 0.0004 USD per 1,000 GET/HEAD; "
        "[Monitoring](#monitoring))",
        AGENT_AND_COMPACTOR,
    ),
    MetricDoc(
        ("skiff_object_store_cost_usd_per_hour",),
        "gauge",
        "role",
        "estimated request cost per hour over the last hour of scrapes (since start when younger)",
        AGENT_AND_COMPACTOR,
    ),
    MetricDoc(
        ("skiff_object_store_cost_usd_per_gib_written",),
        "gauge",
        "role",
        "estimated request cost per GiB written to the bucket since start (reads included: the bill of "
        "moving a GiB through the system)",
        AGENT_AND_COMPACTOR,
    ),
    MetricDoc(
        ("skiff_produce_files_total", "skiff_produce_file_bytes_total"),
        "counter",
        "",
        "segment files committed and their size",
    ),
    MetricDoc(
        ("skiff_produce_flush_failures_total",),
        "counter",
        "",
        "flushes whose PUT or commit failed (producers got retriable errors)",
    ),
    MetricDoc(
        ("skiff_pod_workers_connected",),
        "gauge",
        "",
        "worker processes connected to the pod's writer (`skiff agent --workers N`: N while all run)",
        "agent with `--workers` (the writer, on `metrics_port`)",
    ),
    MetricDoc(
        ("skiff_produce_buffered_bytes",),
        "gauge",
        "",
        "produce bytes waiting for a flush (near `max_buffered_bytes` = back-pressure)",
    ),
    MetricDoc(
        ("skiff_produce_stage_seconds_total",),
        "counter",
        "stage",
        "where the produce buffer's files spend their time, summed over files and the longest one file spent, by stage: `open` (first batch to seal), `queued` (seal to PUT start), `put`, `ordered` (waiting for the previous file's commit), `commit`, `resolve` (acks released); `rate(..._total[5m]) / rate(skiff_produce_files_total[5m])` is the mean per file",
    ),
    MetricDoc(
        ("skiff_produce_stage_max_seconds",),
        "gauge",
        "stage",
        "where the produce buffer's files spend their time, summed over files and the longest one file spent, by stage: `open` (first batch to seal), `queued` (seal to PUT start), `put`, `ordered` (waiting for the previous file's commit), `commit`, `resolve` (acks released); `rate(..._total[5m]) / rate(skiff_produce_files_total[5m])` is the mean per file",
    ),
    MetricDoc(
        ("skiff_produce_post_seal_estimate_seconds",),
        "gauge",
        "",
        "the learned part of the seal lead: p95 of recent files' seal-to-commit time (files are sealed this much, plus the clients' linger up to `flush_seal_lead_max_ms`, before `flush_interval_ms`)",
    ),
    MetricDoc(
        ("skiff_produce_requests_inline_total",),
        "counter",
        "",
        "Produce requests handled on the synchronous path (the others waited for a topic load, a transaction check, buffer room or an earlier request of their connection)",
    ),
    MetricDoc(
        ("skiff_responses_encoded_sliced_total", "skiff_response_encode_yields_total"),
        "counter",
        "",
        "large responses encoded in slices, and the turns they gave the event loop",
    ),
    MetricDoc(
        ("skiff_authorization_denied_total",),
        "counter",
        "api,resource",
        "ACL checks refused, by Kafka API and resource type (`topic`, `group`, `cluster`, `transactional_id`): a request naming three refused topics counts three",
    ),
    MetricDoc(
        ("skiff_schema_validation_refused_records_total",),
        "counter",
        "topic",
        "records refused by broker-side schema validation (no schema id, or one not registered under the "
        "topic's subject), by topic: the first 1000 topics by name, the rest as `_other`",
    ),
    MetricDoc(
        ("skiff_schema_cache_hits_total", "skiff_schema_cache_misses_total"),
        "counter",
        "cache",
        "schema validation's lookups answered from the agent's registry cache or not, by cache (`subject`: "
        "a subject's ids; `schema`: a schema id's record names), one per distinct header per batch",
    ),
    MetricDoc(
        ("skiff_schema_registry_fetches_total", "skiff_schema_registry_fetch_failures_total"),
        "counter",
        "",
        "calls made by schema validation to the registry (a subject's ids, a schema by id), and those that "
        "failed (the batch then gets the retriable REQUEST_TIMED_OUT)",
    ),
    MetricDoc(
        ("skiff_quota_throttle_time_seconds_total",),
        "counter",
        "type",
        "throttle time told to clients over a client quota (`produce`, `fetch`, `request`; their connections are muted that long): its rate is how throttled the clients of this agent are",
    ),
    MetricDoc(
        ("skiff_quota_throttled_responses_total",),
        "counter",
        "type",
        "responses that carried a client quota's throttle time, by quota type",
    ),
    MetricDoc(
        ("skiff_quota_throttled_clients",),
        "gauge",
        "type",
        "clients throttled now, by quota type: a user, a client id, or both, as their quota resolves (the entity that shares one rate)",
    ),
    MetricDoc(
        ("skiff_fetch_cache_hits_total", "skiff_fetch_cache_misses_total", "skiff_fetch_cache_loads_total"),
        "counter",
        "",
        "read cache (`fileformat.objectstore.range_cache`): ranges answered from memory, not, and loads from the bucket",
    ),
    MetricDoc(
        ("skiff_fetch_cache_to_end_loads_total", "skiff_fetch_cache_to_end_skipped_total"),
        "counter",
        "",
        "cold files a connection's first fetch read to their end in one GET (`fetch_first_read_object_bytes`), "
        "and those read by their needed ranges instead for lack of in-flight room",
    ),
    MetricDoc(("skiff_fetch_cache_bytes",), "gauge", "", "bytes held by the read cache"),
    MetricDoc(("skiff_connections",), "gauge", "", "open client connections"),
    MetricDoc(
        ("skiff_connections_refused_total",),
        "counter",
        "reason",
        "connections closed at accept: `max_connections` or `max_connections_per_ip` reached",
    ),
    MetricDoc(
        ("skiff_connections_muted",),
        "gauge",
        "",
        "connections not read right now because their byte budget (or the agent's) is full",
    ),
    MetricDoc(
        ("skiff_connection_held_bytes", "skiff_request_bytes_in_flight"),
        "gauge",
        "",
        "bytes charged to all connections' budgets; request bytes being handled (against `queued_max_request_bytes`)",
    ),
    MetricDoc(
        ("skiff_request_read_timeouts_total",),
        "counter",
        "",
        "connections closed because a request's body did not arrive within `request_read_timeout_ms`",
    ),
    MetricDoc(
        ("skiff_requests_total",), "counter", "api", "Kafka requests read, by API (`produce`, `fetch`, ...)"
    ),
    MetricDoc(
        ("skiff_client_zone_bytes_total",),
        "counter",
        "direction,client_zone",
        "bytes served to clients: `in` Produce requests received, `out` Fetch responses sent, by the "
        "client's zone (its `client.rack` or `client.id` `az=`) against this agent's: `same`, `other` "
        "(cross-zone traffic), `unknown` (the client or the agent states no zone)",
    ),
    MetricDoc(
        ("skiff_find_coordinator_answers_total",),
        "counter",
        "client_zone",
        "FindCoordinator answers (groups and transactional ids) by the named agent's zone against the "
        "client's: `same`, `other` (a group coordinated in another zone, or the client's zone has no "
        "ready agent), `unknown` (either states no zone)",
    ),
    MetricDoc(
        ("skiff_group_lease_holder_lookups_total",),
        "counter",
        "",
        "reads of group lease holders from metadata (FindCoordinator and group requests, on a cache "
        "miss; cached 3 s, 1 s for a group nobody holds)",
    ),
    MetricDoc(
        ("skiff_fetch_followed_partitions",),
        "gauge",
        "",
        "partitions whose commits through other agents this agent follows",
    ),
    MetricDoc(
        ("skiff_fetch_commit_long_polls_total",),
        "counter",
        "",
        "answered long polls of metadata for the commits of followed partitions",
    ),
    MetricDoc(
        ("skiff_fetch_delayed_completed_total",),
        "counter",
        "by",
        'long-poll fetch waits that parked and then completed (a fetch woken with fewer than `min.bytes` parks and counts again), `by="wake"` (a commit moved a watermark they waited on) or `by="expiry"` (their max wait ran out: normal for consumers of idle partitions; many expiries while records are being produced to the consumed partitions mean commits are not reaching waiting fetches)',
    ),
    MetricDoc(
        ("skiff_purgatory_delayed", "skiff_purgatory_watched"),
        "gauge",
        "purgatory",
        "operations waiting in the `fetch`, `heartbeat` and `rebalance` purgatories; their watcher-list entries",
    ),
    MetricDoc(("skiff_groups",), "gauge", "", "consumer groups held in memory by this agent's coordinator"),
    MetricDoc(
        ("skiff_group_protocol_conversions_total",),
        "counter",
        "direction",
        'groups converted by the online upgrade (`direction="upgrade"`: a consumer-protocol member joined a Stable classic group) or downgrade (`"downgrade"`: only classic members were left); see docs/consumer-groups.md',
    ),
    MetricDoc(
        ("skiff_agent_ready",),
        "gauge",
        "",
        "1 when the agent is ready (`/readyz` answers 200: its last probe wrote and read the bucket and reached metadata, and it is not shutting down), else 0; an agent at 0 leads no partitions and coordinates nothing",
    ),
    MetricDoc(
        ("skiff_readiness_probe_failures_total",),
        "counter",
        "dependency",
        "readiness probes that found `bucket` (the PUT/GET of the probe object) or `metadata` failing",
    ),
    MetricDoc(
        ("skiff_tls_handshake_failures_total",),
        "counter",
        "listener",
        "on SSL and SASL_SSL listeners: TLS handshakes that failed or timed out (`ssl_handshake_timeout_ms`): plaintext sent to a TLS port, a certificate one side refused",
    ),
    MetricDoc(
        ("skiff_failed_authentication_total",),
        "counter",
        "listener,mechanism",
        "on SASL listeners, per enabled mechanism: logins refused with SASL_AUTHENTICATION_FAILED (wrong password, unknown user, malformed exchange); Kafka's `failed-authentication-total` (which also counts TLS failures: add the metric above)",
    ),
    MetricDoc(
        ("skiff_successful_authentication_total",),
        "counter",
        "listener,mechanism",
        "on SASL listeners: logins and re-authentications completed (Kafka's `successful-authentication-total`)",
    ),
    MetricDoc(
        ("skiff_produce_ack_latency_seconds",),
        "histogram",
        "acks",
        "Produce requests by acks (`0`, `1`, `all`), from the handler receiving the decoded request to its "
        "response being ready (acks=1/all: the file's PUT and commit included; acks=0: the append); "
        "aimed at `flush_interval_ms` (250 ms by default); buckets 1 ms to 10 s",
    ),
    MetricDoc(
        ("skiff_produce_append_latency_seconds",),
        "histogram",
        "",
        "end-to-end append latency of CreateTime batches: from each batch's oldest record timestamp (the "
        "producer's clock) to the commit of the file holding it (the agent's clock; skew making it negative "
        "counts as 0); producer linger and batching included; LogAppendTime batches are not observed; "
        "buckets 1 ms to 300 s",
    ),
    MetricDoc(
        ("skiff_fetch_latency_seconds",),
        "histogram",
        "",
        "Fetch requests, from the handler receiving the request to its response, long-poll wait "
        "included (an idle consumer's fetches sit near its `fetch.max.wait.ms`); buckets 1 ms to 30 s",
    ),
    MetricDoc(
        ("skiff_object_store_request_duration_seconds",),
        "histogram",
        "operation",
        "the agent's object-store calls below its range cache (cache hits are not requests), by operation "
        "(`put`, `get`, `range`, `stream`, `delete`, `list`, `head`, `create`): `range` is one ranged read "
        "(coalesced ranges read concurrently count once, until the last answers), `stream` the time to "
        "the first byte, `list` a whole listing, `delete` a batch of up to 1000 keys; failed calls "
        "included; buckets 1 ms to 10 s",
    ),
    MetricDoc(
        ("skiff_metadata_call_duration_seconds",),
        "histogram",
        "operation",
        "every metadata call of the agent, over HTTP or in-process (the playground), by declared "
        "operation name (`commit_file`, `heartbeat_agent`, `expire_txns`, ...: at most the operations of "
        "`metadata.wire.operations`); failed calls included; buckets 1 ms to 10 s",
    ),
    MetricDoc(
        ("skiff_produce_file_size_bytes",),
        "histogram",
        "",
        "each committed segment file's size; buckets by powers of 4 from 1 KiB to 64 MiB (files are "
        "sealed at `flush_max_bytes`, 8 MiB by default)",
    ),
    MetricDoc(
        ("skiff_produce_file_records",),
        "histogram",
        "",
        "records in each committed segment file; buckets by powers of 10 from 1 to 10^7",
    ),
)


MAINTENANCE_METRIC_DOCS: tuple[MetricDoc, ...] = (
    MetricDoc(
        ("skiff_compaction_jobs_total",),
        "counter",
        "outcome",
        "compaction jobs `started`, `finished`, `failed` (a failed job's partitions are planned again)",
        MAINTENANCE,
    ),
    MetricDoc(
        (
            "skiff_compaction_input_bytes_total",
            "skiff_compaction_output_bytes_total",
            "skiff_compaction_input_records_total",
            "skiff_compaction_output_records_total",
            "skiff_compaction_records_removed_total",
        ),
        "counter",
        "",
        "finished jobs' input and output files' bytes, the records read and written, and the records "
        "dropped (superseded keys, expired tombstones, aborted transactions' data and markers)",
        MAINTENANCE,
    ),
    MetricDoc(
        ("skiff_compaction_gets_per_input_file",),
        "histogram",
        "",
        "per input file of a finished job, the GETs its streams made (2 by design: one per pass; "
        "more means a stream was reopened)",
        MAINTENANCE,
    ),
    MetricDoc(
        ("skiff_compaction_last_success_timestamp_seconds",),
        "gauge",
        "",
        "Unix time of this process's last pass whose compaction had no failed job (0: none yet); "
        'across processes, metadata\'s `skiff_maintenance_last_success_age_seconds{task="compaction"}`',
        MAINTENANCE,
    ),
    MetricDoc(
        ("skiff_retention_chunks_deleted_total", "skiff_retention_bytes_deleted_total"),
        "counter",
        "",
        "chunks (and their bytes) dropped by `retention.ms` / `retention.bytes` / the log start offset",
        MAINTENANCE,
    ),
    MetricDoc(
        ("skiff_gc_files_deleted_total", "skiff_gc_orphans_deleted_total"),
        "counter",
        "",
        "objects deleted by garbage collection: replaced or dropped files past their grace, and orphans "
        "(objects no metadata row names, older than the orphan grace)",
        MAINTENANCE,
    ),
    MetricDoc(
        ("skiff_table_records_total", "skiff_table_input_bytes_total", "skiff_table_commits_total"),
        "counter",
        "",
        "topics' Iceberg tables: records materialized, the chunk bytes read for them, snapshots committed "
        "(docs/tables.md)",
        MAINTENANCE,
    ),
    MetricDoc(
        ("skiff_table_commit_record_age_seconds",),
        "gauge",
        "table",
        "at the table's last commit: its wall time minus the newest record's timestamp it added",
        MAINTENANCE,
    ),
    MetricDoc(
        ("skiff_table_dead_letters_total",),
        "counter",
        "",
        "records written to a topic's dead-letter table (they could not be written to its table)",
        MAINTENANCE,
    ),
    MetricDoc(
        (
            "skiff_table_files_rewritten_total",
            "skiff_table_snapshots_expired_total",
            "skiff_table_orphans_deleted_total",
        ),
        "counter",
        "",
        "table upkeep: small data files rewritten, snapshots expired by `skiff.table.snapshot.retention.ms`, "
        "files no live snapshot needs deleted",
        MAINTENANCE,
    ),
)

# Every family of the three /metrics endpoints, in the table's order.
METRIC_DOCS: tuple[MetricDoc, ...] = AGENT_METRIC_DOCS + MAINTENANCE_METRIC_DOCS + METADATA_METRIC_DOCS

TABLE_BEGIN = "<!-- metrics table: generated by `python -m skiff.agent.metrics --doc`; edit METRIC_DOCS -->"
TABLE_END = "<!-- end of metrics table -->"


def render_metrics_table() -> str:
    """METRIC_DOCS as a Markdown table, between its markers."""
    lines = [TABLE_BEGIN, "| metric | type | labels | exported by | meaning |", "|---|---|---|---|---|"]
    for doc in METRIC_DOCS:
        names = ", ".join(f"`{n}`" for n in doc.names)
        labels = ", ".join(f"`{label}`" for label in doc.labels.split(",") if label)
        lines.append(f"| {names} | {doc.type} | {labels} | {doc.exported_by} | {doc.meaning} |")
    return "\n".join([*lines, TABLE_END])


def replace_metrics_table(text: str) -> str:
    """`text` with the table between the markers replaced by the current one."""
    start, end = text.index(TABLE_BEGIN), text.index(TABLE_END) + len(TABLE_END)
    return text[:start] + render_metrics_table() + text[end:]


def _main(argv: Sequence[str] | None = None) -> int:
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python -m skiff.agent.metrics")
    parser.add_argument("--doc", action="store_true", help="print the metrics table (Markdown)")
    parser.add_argument("--write", metavar="PATH", help="replace the table between its markers in PATH")
    args = parser.parse_args(argv)
    if args.write:
        path = Path(args.write)
        path.write_text(replace_metrics_table(path.read_text()))
    elif args.doc:
        print(render_metrics_table())
    else:
        parser.error("--doc or --write PATH")
    return 0
