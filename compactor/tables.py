"""Topics as Apache Iceberg tables: the materializer, a step of the maintenance pass.

For every topic with `skiff.table.enabled=true` (metadata.configs) the pass appends the
records committed since the table's last snapshot to an Iceberg table (pyiceberg, Arrow in,
Parquet out) in pyiceberg's SQL catalog over the metadata database (`TablesConfig.catalog_uri`;
catalog `skiff`, namespace `skiff`, table `skiff.table.name` or the topic's name), its files
under the bucket's own prefix `tables/` (`TABLES_PREFIX`; the garbage collector's orphan scan
leaves it alone).

Exactly once. Each append's snapshot carries, in its summary, `skiff.offsets`: JSON
{partition: next offset} of everything the table holds. A run reads it from the table's
current snapshot, reads each partition's committed records from there up to the last stable
offset (`compactor.tables_read`: transaction markers and aborted transactions never), writes
the Parquet files, then commits the snapshot with the new offsets. The commit is the SQL
catalog's compare-and-swap of the table's metadata location, and the snapshot is refused if
the table changed since it was loaded, so a run that dies after writing its files and before
the commit leaves only unreferenced files (the next run reads the same records again and
writes them once), and two runs that overlap cannot both commit the same records. Records
retention removed before they were materialized are skipped (a warning says which).

Leases: a topic is materialized under a compaction lease on all its partitions
(`claim_compaction_job`, renewed every third of `lease_ms`), so one materializer works on it at a time and compaction does not
swap its chunks meanwhile; a busy topic is left for the next pass. A commit holds at most
`max_commit_bytes` of chunks; a run commits until it reaches the offsets it saw at its start.
`paced` (the maintenance loop) skips a topic committed less than
`skiff.table.commit.interval.ms` ago; a single pass (`skiff compact --once`) does not.

The roles around it, one module each: `tables_read` (committed records as Arrow),
`tables_values` (values, and keys of delete-policy topics, decoded through the schema
registry; records that do not decode go to `skiff.<table>_dead_letters`, committed first
with its own offsets), `tables_commit` (one transaction per commit: append, or upsert by
key for a compacted topic), `tables_retention` (after the commits, under the lease: small
files rewritten, snapshots expired, orphan files deleted), `tables_pause` (the crash
tests' hook).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from skiff.compactor import metrics
from skiff.compactor.gc import DEFAULT_ORPHAN_GRACE_MS
from skiff.compactor.tables_commit import commit_batch
from skiff.compactor.tables_read import ARROW_SCHEMA, RangeRead, read_ranges
from skiff.compactor.tables_retention import (
    DEFAULT_MIN_SMALL_FILES,
    DEFAULT_SMALL_FILE_BYTES,
    UpkeepStats,
    delete_orphans,
    expire_snapshots,
    rewrite_small_files,
)
from skiff.compactor.tables_values import (
    DEAD_LETTER_SCHEMA,
    ValueSchemas,
    key_schemas,
    split_dead_letters,
    table_column_is_raw,
    value_schemas,
)
from skiff.fileformat.chunk_reader import ChunkLocation
from skiff.fileformat.objectstore import ObjectStore
from skiff.fileformat.tables_layout import (
    CATALOG_NAME,
    NAMESPACE,
    TABLES_PREFIX,
    catalog_properties,
    covered_offsets,
    offsets_summary,
    table_name_for,
)
from skiff.metadata import configs
from skiff.metadata.types import FetchQuery, PartitionKey, PartitionState, Topic
from skiff.metadata.wire.operations import CompactorClient

log = logging.getLogger(__name__)

READ_COMMITTED_LEVEL = 1
FIND_CHUNKS_PAGE_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_COMMIT_BYTES = 256 * 1024 * 1024
DEFAULT_LEASE_MS = 120_000
DEAD_LETTERS_SUFFIX = "_dead_letters"
DEFAULT_ROW_GROUP_ROWS = 131_072  # measured: docs/benchmarks.md, "The tables' Parquet row groups"
MAX_COMMITS_PER_TOPIC = 10_000  # a safety net: each commit advances at least one partition


@dataclass(frozen=True)
class TablesConfig:
    catalog_uri: str  # SQLAlchemy URL of the metadata database (sqlite:///..., postgresql://...)
    warehouse: str  # the bucket URL + "/tables" (s3://bucket/prefix/tables, file:///.../tables)
    holder: str = "materializer"
    lease_ms: int = DEFAULT_LEASE_MS
    max_commit_bytes: int = DEFAULT_MAX_COMMIT_BYTES
    paced: bool = False  # respect skiff.table.commit.interval.ms (the maintenance loop)
    topic: str | None = None  # only this topic
    # upkeep (compactor.tables_retention): small-file rewrite thresholds, the orphans' grace
    small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES
    min_small_files: int = DEFAULT_MIN_SMALL_FILES
    orphan_grace_ms: int = DEFAULT_ORPHAN_GRACE_MS
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS  # a new table's Parquet row groups (table_properties)
    # The test hook (compactor.tables_pause): called with (stage, table) at each stage of
    # each commit: "after_parquet", "before_commit", "after_commit".
    hook: Callable[[str, str], None] | None = None


@dataclass
class TablesSummary:
    topics: int = 0
    commits: int = 0
    records: int = 0
    failed: int = 0
    skipped_busy: int = 0
    per_table: dict[str, int] = field(default_factory=dict)


def open_catalog(config: TablesConfig) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(CATALOG_NAME, **catalog_properties(config.catalog_uri, config.warehouse))
    catalog.create_namespace_if_not_exists(NAMESPACE)
    return catalog


def table_name(topic: Topic) -> str:
    return table_name_for(topic.name, configs.config_value(topic.configs, configs.TABLE_NAME))


def table_properties(row_group_rows: int) -> dict[str, str]:
    """A new table's Parquet write settings (pyiceberg's `write.*` properties): zstd, and
    row groups of at most `row_group_rows` rows, so that engines split a large data file
    into parallel reads (pyiceberg's default, 1,048,576 rows, makes a commit's file one or
    two splits: Spark read such a table at 1.21 of its own Parquet's rate, at 1.86 with
    131,072-row groups; docs/benchmarks.md)."""
    return {
        "write.parquet.compression-codec": "zstd",
        "write.parquet.row-group-limit": str(row_group_rows),
    }


def ensure_table(
    catalog: Any,
    name: str,
    spec: str,
    schema: pa.Schema = ARROW_SCHEMA,
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
) -> Any:
    """Load `skiff.<name>`, or create it with `schema`, the partition spec and the Parquet
    write settings (`table_properties`; a table keeps the ones it was created with)."""
    from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError
    from pyiceberg.transforms import parse_transform

    ident = (NAMESPACE, name)
    try:
        return catalog.load_table(ident)
    except NoSuchTableError:
        pass
    tx = catalog.create_table_transaction(ident, schema=schema, properties=table_properties(row_group_rows))
    fields = configs.parse_partition_spec(spec)
    if fields:
        with tx.update_spec() as update:
            for transform, column in fields:
                update.add_field(column, parse_transform(transform), f"{column}_{transform}")
    try:
        tx.commit_transaction()
    except TableAlreadyExistsError:  # another materializer created it meanwhile
        pass
    return catalog.load_table(ident)


def committed_offsets(table: Any) -> dict[int, int]:
    """{partition: next offset} the table's current snapshot covers ({} when empty)."""
    snap = table.current_snapshot()
    return {} if snap is None or snap.summary is None else covered_offsets(snap.summary.additional_properties)


def _last_commit_ms(table: Any) -> int:
    snap = table.current_snapshot()
    return int(snap.timestamp_ms) if snap is not None else 0


async def _partition_states(md: CompactorClient, topic: Topic) -> list[PartitionState]:
    keys = [PartitionKey(topic.topic_id, p) for p in range(topic.partition_count)]
    return await md.partition_states(keys)


async def plan_commit(
    md: CompactorClient,
    topic: Topic,
    done: dict[int, int],
    ends: dict[int, int],
    max_bytes: int,
) -> tuple[list[RangeRead], dict[int, int]]:
    """The ranges of one commit (at most about `max_bytes` of chunks) and the offsets the
    table covers after it. Offsets below a partition's log start are gone: skipped."""
    reads: list[RangeRead] = []
    after = dict(done)
    budget = max_bytes
    for p in sorted(ends):
        start, end = done.get(p, 0), ends[p]
        if start >= end or budget <= 0:
            continue
        (info,) = await md.find_chunks(
            [FetchQuery(topic.topic_id, p, start, min(budget, FIND_CHUNKS_PAGE_BYTES), READ_COMMITTED_LEVEL)]
        )
        if info.error_code and info.log_start_offset > start:
            log.warning(
                "tables: %s-%d offsets %d to %d are gone before materializing",
                topic.name,
                p,
                start,
                info.log_start_offset - 1,
            )
            after[p] = min(info.log_start_offset, end)
            continue
        if info.error_code:
            raise RuntimeError(
                f"{topic.name}-{p}: find_chunks from {start} answered Kafka error {info.error_code}"
            )
        chunks = tuple(c for c in info.chunks if c.base_offset < end)
        until = _until(chunks, start, end)
        # a gap (retention, DeleteRecords); on a compacted topic, also the records compaction removed
        if chunks and chunks[0].base_offset > start and not configs.is_compacted(topic.configs):
            log.warning(
                "tables: %s-%d offsets %d to %d are gone before materializing",
                topic.name,
                p,
                start,
                chunks[0].base_offset - 1,
            )
        if until <= start:
            continue
        budget -= sum(c.byte_length for c in chunks)
        aborted = tuple((pid, first, last) for pid, first, last in info.aborted_ranges if first < until)
        reads.append(RangeRead(p, start, until, chunks, aborted))
        after[p] = until
    return reads, after


def _until(chunks: Sequence[ChunkLocation], start: int, end: int) -> int:
    """Where this commit stops in the partition: the end, or after the last chunk answered."""
    if not chunks:
        return start
    return min(end, chunks[-1].last_offset + 1)


async def materialize_topic(
    md: CompactorClient, store: ObjectStore, topic: Topic, config: TablesConfig
) -> int:
    """Commit the topic's records up to its last stable offsets as of now; the records added."""
    catalog = await asyncio.to_thread(open_catalog, config)
    try:
        return await _materialize(md, store, topic, config, catalog)
    finally:
        catalog.engine.dispose()  # the catalog's pooled connections: one catalog per topic and pass


async def _materialize(
    md: CompactorClient, store: ObjectStore, topic: Topic, config: TablesConfig, catalog: Any
) -> int:
    name = table_name(topic)
    spec = configs.config_value(topic.configs, configs.TABLE_PARTITION_SPEC)
    upsert = configs.is_compacted(topic.configs)  # latest value per key (compactor.tables_commit)
    # None: raw bytes (compactor.tables_values); a compacted topic's keys stay raw (the upsert's)
    typed = {"value": await value_schemas(md, topic.name)}
    typed["key"] = None if upsert else await key_schemas(md, topic.name)
    table = await asyncio.to_thread(
        ensure_table, catalog, name, spec, _table_schema(typed), config.row_group_rows
    )
    interval_ms = configs.config_int(topic.configs, configs.TABLE_COMMIT_INTERVAL_MS)
    if config.paced and time.time() * 1000 - _last_commit_ms(table) < interval_ms:
        return 0
    decoders = {
        column: schemas.decoder()
        for column, schemas in typed.items()
        if schemas is not None and not table_column_is_raw(table, column)
    }
    states = await _partition_states(md, topic)
    ends = {p: s.last_stable_offset for p, s in enumerate(states) if not s.error_code}
    records = 0
    for _ in range(MAX_COMMITS_PER_TOPIC):
        table = await asyncio.to_thread(catalog.load_table, (NAMESPACE, name))
        done = committed_offsets(table)
        for p, s in enumerate(states):
            done.setdefault(p, max(s.log_start_offset, 0))
        reads, after = await plan_commit(md, topic, done, ends, config.max_commit_bytes)
        if not reads:
            break
        data = await asyncio.to_thread(read_ranges, store, reads)
        if decoders:
            data, dead = await asyncio.to_thread(split_dead_letters, data, decoders)
            if dead.num_rows:  # committed first: its own offsets skip them on a rerun
                added = await asyncio.to_thread(commit_dead_letters, catalog, name, dead, after)
                metrics.TABLE_DEAD_LETTERS.inc(added)
        commit = functools.partial(commit_batch, upsert=upsert, evolve=bool(decoders), hook=config.hook)
        await asyncio.to_thread(commit, table, data, after)
        records += data.num_rows
        newest = pc.max(data.column("timestamp")).value if data.num_rows else None
        input_bytes = sum(c.byte_length for r in reads for c in r.chunks)
        metrics.table_committed(name, data.num_rows, input_bytes, newest // 1000 if newest else None)
    retention_ms = configs.config_int(topic.configs, configs.TABLE_SNAPSHOT_RETENTION_MS)
    for kept in (name, name + DEAD_LETTERS_SUFFIX):  # the dead-letter table has the same retention
        if await asyncio.to_thread(catalog.table_exists, (NAMESPACE, kept)):
            table = await asyncio.to_thread(catalog.load_table, (NAMESPACE, kept))
            await asyncio.to_thread(upkeep, table, store, config, retention_ms)
    return records


def _table_schema(typed: dict[str, ValueSchemas | None]) -> pa.Schema:
    """The Arrow schema of a new table: raw columns, or the registry's types where typed."""
    schema = ARROW_SCHEMA
    for column, schemas in typed.items():
        if schemas is not None:
            schema = schema.set(schema.get_field_index(column), pa.field(column, schemas.arrow_type()))
    return schema


def commit_dead_letters(catalog: Any, name: str, dead: pa.Table, offsets: dict[int, int]) -> int:
    """Append to `skiff.<name>_dead_letters` the rows it does not hold yet (its snapshots
    carry the offsets they cover); the rows added."""
    table = ensure_table(catalog, name + DEAD_LETTERS_SUFFIX, "", DEAD_LETTER_SCHEMA)
    done = committed_offsets(table)
    fresh = [
        o >= done.get(p, 0)
        for p, o in zip(dead["partition"].to_pylist(), dead["offset"].to_pylist(), strict=True)
    ]
    rows = dead.filter(pa.array(fresh, pa.bool_()))
    tx = table.transaction()
    tx.append(rows, snapshot_properties=offsets_summary(offsets))
    tx.commit_transaction()
    return int(rows.num_rows)


def upkeep(table: Any, store: ObjectStore, config: TablesConfig, retention_ms: int) -> UpkeepStats:
    """Small files rewritten, then old snapshots expired, then orphans deleted (in this
    order: the rewritten files become orphans once the snapshots naming them expire)."""
    stats = UpkeepStats()
    stats.files_rewritten = rewrite_small_files(table, config.small_file_bytes, config.min_small_files)
    if stats.files_rewritten:
        table = table.refresh()
    now_ms = int(time.time() * 1000)
    stats.snapshots_expired = expire_snapshots(table, retention_ms, now_ms)
    if stats.snapshots_expired:
        table = table.refresh()
    bucket_url = config.warehouse.removesuffix("/" + TABLES_PREFIX.rstrip("/"))
    stats.orphans_deleted = delete_orphans(table, store, bucket_url, config.orphan_grace_ms, now_ms)
    metrics.table_upkeep(stats.files_rewritten, stats.snapshots_expired, stats.orphans_deleted)
    return stats


async def materialize_all(md: CompactorClient, store: ObjectStore, config: TablesConfig) -> TablesSummary:
    """Every table-enabled topic (or `config.topic`), each under its lease; one topic's
    failure is logged and counted, never raised."""
    summary = TablesSummary()
    for topic in await md.list_topics():
        if not configs.table_enabled(topic.configs) or (config.topic and topic.name != config.topic):
            continue
        summary.topics += 1
        keys = [PartitionKey(topic.topic_id, p) for p in range(topic.partition_count)]
        lease = await md.claim_compaction_job(keys, config.holder, config.lease_ms)
        if lease is None:
            summary.skipped_busy += 1
            continue
        renewer = asyncio.create_task(_renew(md, lease.token, config.lease_ms))
        try:
            n = await materialize_topic(md, store, topic, config)
        except Exception as exc:  # boundary: one topic's failure must not stop the pass
            summary.failed += 1
            log.warning("tables: materializing topic %s failed: %s", topic.name, exc, exc_info=True)
            continue
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            await md.release_compaction_lease(lease.token)
        summary.records += n
        summary.per_table[table_name(topic)] = n
        if n:
            log.info(
                "tables: holder %s appended %d record(s) of %s to %s.%s",
                config.holder,
                n,
                topic.name,
                NAMESPACE,
                table_name(topic),
            )
    return summary


async def _renew(md: CompactorClient, token: str, lease_ms: int) -> None:
    """Renew every third of the lease's lifetime while the topic is materialized (a lost
    lease is logged: the catalog's compare-and-swap still keeps each record once)."""
    while True:
        await asyncio.sleep(lease_ms / 3000)
        try:
            await md.renew_compaction_lease(token, lease_ms)
        except Exception as exc:  # boundary: the renewal task must not die
            log.warning("tables: renewing lease failed: %s", exc)
