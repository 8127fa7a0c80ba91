"""Prometheus metrics of the maintenance work done in this process: compaction jobs,
retention, garbage collection, and the compactor's object-store requests.

The runner (`compactor.runner`) counts into the process-wide metrics below as jobs and
passes end; whichever process runs the work exports them through its own /metrics:

- an agent with the compaction role, and the playground: the agent's collector yields
  `families()` of its background maintenance loop (`MaintenanceLoop.metric_families`) and
  adds the loop's store to its object-store families with `role="compactor"`;
- `skiff compact`: `--metrics-port` serves them while it runs, `--pushgateway URL`
  pushes them when it ends (cli/compact.py).

Counters are prometheus-client objects outside any registry (`registry=None`): one set per
process, whatever number of loops runs in it (tests). Families (documented in
docs/operations.md's metrics table, `agent.metrics.METRIC_DOCS`):

- `skiff_compaction_jobs_total{outcome}`: `started`, `finished`, `failed`;
- `skiff_compaction_input_bytes_total`, `..._output_bytes_total`, `..._input_records_total`,
  `..._output_records_total`, `..._records_removed_total`: of the finished jobs;
- `skiff_compaction_gets_per_input_file`: histogram, per input file of a finished job, the
  GETs its streams made (2 is the design: one per pass);
- `skiff_compaction_last_success_timestamp_seconds`: when a pass's compaction last ran
  without a failed job (also recorded in metadata as task `compaction`, whose age the
  metadata service exports);
- `skiff_retention_chunks_deleted_total`, `skiff_retention_bytes_deleted_total`;
- `skiff_gc_files_deleted_total`, `skiff_gc_orphans_deleted_total`;
- topics' Iceberg tables (compactor.tables): `skiff_table_records_total` and
  `skiff_table_input_bytes_total` (records and chunk bytes materialized),
  `skiff_table_commits_total`, `skiff_table_commit_record_age_seconds{table}` (at each commit, its
  wall time minus the newest record's timestamp in it), `skiff_table_dead_letters_total`,
  `skiff_table_files_rewritten_total`, `skiff_table_snapshots_expired_total`,
  `skiff_table_orphans_deleted_total`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import Metric
from skiff.compactor.plan import JobStats

GETS_BUCKETS = (1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0, 32.0)

JOBS = Counter(
    "skiff_compaction_jobs",
    "Compaction jobs by outcome: started, finished, failed",
    ["outcome"],
    registry=None,
)
INPUT_BYTES = Counter("skiff_compaction_input_bytes", "Bytes of finished jobs' input files", registry=None)
OUTPUT_BYTES = Counter("skiff_compaction_output_bytes", "Bytes of finished jobs' output files", registry=None)
INPUT_RECORDS = Counter("skiff_compaction_input_records", "Records read by finished jobs", registry=None)
OUTPUT_RECORDS = Counter("skiff_compaction_output_records", "Records written by finished jobs", registry=None)
RECORDS_REMOVED = Counter(
    "skiff_compaction_records_removed",
    "Records finished jobs dropped (superseded keys, expired tombstones, aborted data, markers)",
    registry=None,
)
GETS_PER_INPUT_FILE = Histogram(
    "skiff_compaction_gets_per_input_file",
    "GETs made per input file of a finished job",
    buckets=GETS_BUCKETS,
    registry=None,
)
LAST_SUCCESS = Gauge(
    "skiff_compaction_last_success_timestamp_seconds",
    "Unix time of the last pass whose compaction ran without a failed job (0: none yet)",
    registry=None,
)
RETENTION_CHUNKS = Counter("skiff_retention_chunks_deleted", "Chunks dropped by retention", registry=None)
RETENTION_BYTES = Counter(
    "skiff_retention_bytes_deleted", "Bytes of chunks dropped by retention", registry=None
)
GC_FILES = Counter("skiff_gc_files_deleted", "Replaced files whose objects GC deleted", registry=None)
GC_ORPHANS = Counter("skiff_gc_orphans_deleted", "Orphan objects GC deleted", registry=None)

TABLE_RECORDS = Counter("skiff_table_records", "Records materialized into topics' tables", registry=None)
TABLE_INPUT_BYTES = Counter(
    "skiff_table_input_bytes", "Chunk bytes read to materialize topics' tables", registry=None
)
TABLE_COMMITS = Counter("skiff_table_commits", "Snapshots committed to topics' tables", registry=None)
TABLE_RECORD_AGE = Gauge(
    "skiff_table_commit_record_age_seconds",
    "At a table's last commit: its wall time minus the newest record's timestamp it added",
    ["table"],
    registry=None,
)
TABLE_DEAD_LETTERS = Counter(
    "skiff_table_dead_letters", "Records written to a dead-letter table instead of their table", registry=None
)
TABLE_FILES_REWRITTEN = Counter(
    "skiff_table_files_rewritten", "Small table data files replaced by compaction", registry=None
)
TABLE_SNAPSHOTS_EXPIRED = Counter("skiff_table_snapshots_expired", "Table snapshots expired", registry=None)
TABLE_ORPHANS = Counter(
    "skiff_table_orphans_deleted", "Table files no live snapshot needed, deleted", registry=None
)

ALL = (
    JOBS,
    INPUT_BYTES,
    OUTPUT_BYTES,
    INPUT_RECORDS,
    OUTPUT_RECORDS,
    RECORDS_REMOVED,
    GETS_PER_INPUT_FILE,
    LAST_SUCCESS,
    RETENTION_CHUNKS,
    RETENTION_BYTES,
    GC_FILES,
    GC_ORPHANS,
    TABLE_RECORDS,
    TABLE_INPUT_BYTES,
    TABLE_COMMITS,
    TABLE_RECORD_AGE,
    TABLE_DEAD_LETTERS,
    TABLE_FILES_REWRITTEN,
    TABLE_SNAPSHOTS_EXPIRED,
    TABLE_ORPHANS,
)
for _outcome in ("started", "finished", "failed"):  # exported from 0
    JOBS.labels(_outcome)


def job_started() -> None:
    JOBS.labels("started").inc()


def job_failed() -> None:
    JOBS.labels("failed").inc()


def job_finished(stats: JobStats) -> None:
    JOBS.labels("finished").inc()
    INPUT_BYTES.inc(stats.bytes_in)
    OUTPUT_BYTES.inc(stats.bytes_out)
    INPUT_RECORDS.inc(stats.records_in)
    OUTPUT_RECORDS.inc(stats.records_out)
    RECORDS_REMOVED.inc(max(0, stats.records_in - stats.records_out))
    for gets in stats.gets_per_input_file.values():
        GETS_PER_INPUT_FILE.observe(gets)


def compaction_succeeded(clock_s: float | None = None) -> None:
    LAST_SUCCESS.set(time.time() if clock_s is None else clock_s)


def retention_done(chunks: int, nbytes: int) -> None:
    RETENTION_CHUNKS.inc(chunks)
    RETENTION_BYTES.inc(nbytes)


def gc_done(files: int, orphans: int) -> None:
    GC_FILES.inc(files)
    GC_ORPHANS.inc(orphans)


def table_committed(table: str, records: int, input_bytes: int, newest_ms: int | None) -> None:
    TABLE_RECORDS.inc(records)
    TABLE_INPUT_BYTES.inc(input_bytes)
    TABLE_COMMITS.inc()
    if newest_ms is not None:
        TABLE_RECORD_AGE.labels(table).set(max(0.0, time.time() - newest_ms / 1000))


def table_upkeep(files_rewritten: int, snapshots_expired: int, orphans: int) -> None:
    TABLE_FILES_REWRITTEN.inc(files_rewritten)
    TABLE_SNAPSHOTS_EXPIRED.inc(snapshots_expired)
    TABLE_ORPHANS.inc(orphans)


def families() -> Iterator[Metric]:
    """The families above, without `_created` series (no query uses them)."""
    for metric in ALL:
        for family in metric.collect():
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family
