"""MetadataService: the transactional operations over the metadata tables.

Blocking (SQLAlchemy Core over an `Engine`); `metadata.client.LocalMetadataClient` runs it
in worker threads, `metadata.app` serves it over HTTP. Safe to use from many threads and
from many processes/replicas over one database.

Locking (so that concurrent commits never deadlock and offsets are assigned once):
every operation that changes a partition's offsets or chunks (commit_file,
replace_chunks, delete_topic) first locks the partition rows involved, in one statement
ordered by (topic_id, partition): `SELECT ... ORDER BY ... FOR UPDATE` on PostgreSQL;
on SQLite the transaction starts with `BEGIN IMMEDIATE` (one writer at a time). Producer
state rows are only touched under their partition's lock.

Commit of a file whose chunks all fail: the file row is still recorded, as `deleting`
(with `deleting_since_ms`), so that garbage collection removes the object like any other
unreferenced file. Committing an object key that is already recorded (a retry after a
lost response) changes nothing and answers from what was recorded (see `commit_file`).

The commit path (the hot one) is written per backend: on PostgreSQL three statements per
transaction (lock+read, producer state, one data-modifying-CTE write) whose key lists
travel as arrays, so their text never changes and psycopg prepares them; on SQLite raw
executemany. Concurrent commits in one process are grouped into one transaction
(`metadata.group_commit`). Planning (offsets, idempotence) is pure: `metadata.commit_plan`.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    delete,
    exists,
    func,
    insert,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.exc import IntegrityError

from metadata import bitmaps, configs, group_leases, idempotence
from metadata.commit_feed import NOTIFY_CHANNEL, CommitFeed, PgCommitListener, notify_payload
from metadata.commit_plan import (
    CommitPlan,
    PartitionRow,
    PKey,
    ProducerStates,
    RecordedChunk,
    Run,
    TKey,
    TopicIndex,
    answer_recommit,
    plan_commit,
    producer_keys,
    topic_flags,
)
from metadata.db import create_engine_for, is_postgresql, read_tx, upgrade_to_head, write_tx
from metadata.errors import (
    CONFLICT,
    INVALID_CONFIG,
    INVALID_PARTITIONS,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    NONE,
    OFFSET_OUT_OF_RANGE,
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_OR_PARTITION,
    ConflictError,
    MetadataError,
)
from metadata.group_commit import GroupCommitter
from metadata.group_lease_types import LeaseGrant, LeaseToken
from metadata.schema import (
    FILE_DELETING,
    FILE_LIVE,
    PRODUCER_ID_SEQUENCE,
    agents,
    chunks,
    files,
    group_offsets,
    partitions,
    producer_state,
    sequences,
    topics,
)
from metadata.types import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AgentInfo,
    ChunkLocation,
    ChunkResult,
    ChunkSpec,
    FetchQuery,
    FileSpec,
    GroupOffset,
    OffsetAnswer,
    OffsetQuery,
    OutputChunk,
    PartitionFetchInfo,
    PartitionKey,
    PartitionState,
    Topic,
)

Clock = Callable[[], int]
Key = tuple[uuid.UUID, int]
KeyT = TypeVar("KeyT")

DEFAULT_AGENT_TTL_MS = 10_000
# Kafka has no limit; creating a topic inserts one row per partition, so we keep one.
MAX_PARTITIONS_PER_TOPIC = 100_000
# SQLite allows 32766 bound parameters per statement; key lists are split below that.
_SQLITE_KEYS_PER_STATEMENT = 4000
_IDS_PER_STATEMENT = 1000
_I32 = 2**31
_I64 = 2**63
# find_chunks reads chunk rows in pages: the first page is small (most fetches need one
# or two chunks), later pages grow; the total read is bounded by the fetch size.
_FIND_FIRST_PAGE = 4
_FIND_MAX_PAGE = 256

# PostgreSQL fast paths: key lists travel as arrays (one parameter per column, whatever
# the number of partitions) and are joined with unnest; the statement text never changes,
# so psycopg prepares it once per connection.
# Returns one row: a JSON array of [ordinal of the key in the request, log start, hwm],
# so that a hundred partitions cost one row to fetch and one json.loads. The CTE locks
# the rows in (topic_id, partition) order (MATERIALIZED: FOR UPDATE cannot go with the
# aggregate in one SELECT).
_PG_LOCK_PARTITIONS = text(
    "WITH l AS MATERIALIZED (SELECT k.i, p.log_start_offset, p.high_watermark FROM partitions AS p "
    "JOIN unnest(CAST(:tids AS uuid[]), CAST(:parts AS int[])) WITH ORDINALITY AS k(t, p, i) "
    "ON p.topic_id = k.t AND p.partition = k.p "
    "ORDER BY p.topic_id, p.partition FOR UPDATE OF p) "
    "SELECT CAST(json_agg(json_build_array(i, log_start_offset, high_watermark)) AS text) FROM l"
)
# SQLite fast paths for commit_file (raw driver SQL: the key lists travel as one JSON
# parameter, rows as executemany tuples). Topic ids are stored as 32 hex digits.
_SQ_READ_PARTITIONS = (
    "SELECT k.key, p.log_start_offset, p.high_watermark FROM json_each(?) AS k "
    "JOIN partitions AS p ON p.topic_id = json_extract(k.value, '$[0]') "
    "AND p.partition = json_extract(k.value, '$[1]')"
)
_SQ_READ_PRODUCERS = (
    "SELECT k.key, s.producer_epoch, s.batches FROM json_each(?) AS k "
    "JOIN producer_state AS s ON s.topic_id = json_extract(k.value, '$[0]') "
    "AND s.partition = json_extract(k.value, '$[1]') AND s.producer_id = json_extract(k.value, '$[2]')"
)
_SQ_INSERT_CHUNKS = (
    "INSERT INTO chunks (file_id, topic_id, partition, byte_position, byte_length, base_offset, last_offset, "
    "record_count, batch_count, max_timestamp, offsets_absolute, present_offsets) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL)"
)
_SQ_SET_HWM = "UPDATE partitions SET high_watermark = ? WHERE topic_id = ? AND partition = ?"
_SQ_UPSERT_PRODUCER = (
    "INSERT INTO producer_state (topic_id, partition, producer_id, producer_epoch, batches, last_update_ms) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (topic_id, partition, producer_id) DO UPDATE SET "
    "producer_epoch = excluded.producer_epoch, batches = excluded.batches, last_update_ms = excluded.last_update_ms"
)
# commit_file's first statement: lock the partitions (as _PG_LOCK_PARTITIONS), read the
# configs of their topics, and whether the object key is already recorded.
_PG_COMMIT_READ = text(
    "WITH l AS MATERIALIZED (SELECT k.i, p.log_start_offset, p.high_watermark FROM partitions AS p "
    "JOIN unnest(CAST(:tids AS uuid[]), CAST(:parts AS int[])) WITH ORDINALITY AS k(t, p, i) "
    "ON p.topic_id = k.t AND p.partition = k.p "
    "ORDER BY p.topic_id, p.partition FOR UPDATE OF p) "
    "SELECT (SELECT CAST(json_agg(json_build_array(i, log_start_offset, high_watermark)) AS text) FROM l), "
    "(SELECT CAST(json_agg(json_build_array(t.topic_id, t.configs)) AS text) FROM topics AS t "
    "WHERE t.topic_id = ANY(CAST(:topic_ids AS uuid[]))), "
    "EXISTS (SELECT 1 FROM files AS f WHERE f.object_key = ANY(CAST(:keys AS text[])))"
)
# commit_file's writes for a group of files, one statement: the file rows, their chunk
# rows (c_file: the 1-based position of the chunk's file in f_keys), the new high
# watermarks and the producer state upserts (empty arrays insert/update nothing).
_PG_WRITE_COMMIT = text(
    "WITH fk AS (SELECT * FROM unnest(CAST(:f_keys AS text[]), CAST(:f_sizes AS bigint[]), "
    "CAST(:f_levels AS int[]), CAST(:f_states AS text[]), CAST(:f_writers AS text[])) WITH ORDINALITY "
    "AS k(key, size, level, state, writer, i)), "
    "f AS (INSERT INTO files (object_key, size_bytes, level, state, writer, created_ms, committed_ms, "
    "deleting_since_ms) SELECT key, size, level, state, writer, :now, :now, "
    "CASE WHEN state = 'deleting' THEN CAST(:now AS bigint) END FROM fk RETURNING id, object_key), "
    "c AS (INSERT INTO chunks (file_id, topic_id, partition, byte_position, byte_length, base_offset, last_offset, "
    "record_count, batch_count, max_timestamp, offsets_absolute, present_offsets) "
    "SELECT f.id, k.t, k.p, k.pos, k.len, k.base, k.last, k.records, k.batches, k.maxts, false, NULL "
    "FROM unnest(CAST(:c_file AS int[]), CAST(:c_tids AS uuid[]), CAST(:c_parts AS int[]), "
    "CAST(:c_pos AS bigint[]), CAST(:c_len AS bigint[]), CAST(:c_base AS bigint[]), CAST(:c_last AS bigint[]), "
    "CAST(:c_records AS bigint[]), CAST(:c_batches AS int[]), CAST(:c_maxts AS bigint[])) "
    "AS k(fi, t, p, pos, len, base, last, records, batches, maxts) "
    "JOIN fk ON fk.i = k.fi JOIN f ON f.object_key = fk.key), "
    "h AS (UPDATE partitions AS p SET high_watermark = v.hwm "
    "FROM unnest(CAST(:h_tids AS uuid[]), CAST(:h_parts AS int[]), CAST(:h_hwms AS bigint[])) "
    "AS v(topic_id, partition, hwm) WHERE p.topic_id = v.topic_id AND p.partition = v.partition), "
    "s AS (INSERT INTO producer_state (topic_id, partition, producer_id, producer_epoch, batches, last_update_ms) "
    "SELECT k.t, k.p, k.i, k.e, CAST(k.b AS json), :now FROM unnest(CAST(:s_tids AS uuid[]), "
    "CAST(:s_parts AS int[]), CAST(:s_pids AS bigint[]), CAST(:s_epochs AS int[]), CAST(:s_batches AS text[])) "
    "AS k(t, p, i, e, b) "
    "ON CONFLICT (topic_id, partition, producer_id) DO UPDATE SET producer_epoch = EXCLUDED.producer_epoch, "
    "batches = EXCLUDED.batches, last_update_ms = EXCLUDED.last_update_ms) "
    "SELECT count(*) FROM f"
)
_PG_READ_PARTITIONS = text(
    "SELECT p.topic_id, p.partition, p.log_start_offset, p.high_watermark FROM partitions AS p "
    "JOIN unnest(CAST(:tids AS uuid[]), CAST(:parts AS int[])) AS k(t, p) "
    "ON p.topic_id = k.t AND p.partition = k.p"
)
_PG_TOPIC_CONFIGS = text("SELECT topic_id, configs FROM topics WHERE topic_id = ANY(CAST(:tids AS uuid[]))")
_PG_READ_PRODUCERS = text(
    "SELECT CAST(json_agg(json_build_array(k.i, s.producer_epoch, s.batches)) AS text) FROM producer_state AS s "
    "JOIN unnest(CAST(:tids AS uuid[]), CAST(:parts AS int[]), CAST(:pids AS bigint[])) WITH ORDINALITY "
    "AS k(t, p, id, i) ON s.topic_id = k.t AND s.partition = k.p AND s.producer_id = k.id"
)


def _arr(values: Iterable[object]) -> str:
    """A PostgreSQL array literal of numbers or UUIDs, for CAST(:x AS type[]): building the
    text is several times cheaper than letting the driver dump a Python list."""
    return "{" + ",".join(map(str, values)) + "}"


def _uuid_arr(values: Iterable[uuid.UUID]) -> str:
    """Like _arr for UUIDs, formatting each distinct UUID once (a file's chunks share few topics)."""
    seen: dict[uuid.UUID, str] = {}
    out = []
    for v in values:
        t = seen.get(v)
        if t is None:
            t = seen[v] = str(v)
        out.append(t)
    return "{" + ",".join(out) + "}"


def _text_arr(values: Iterable[str]) -> str:
    """A PostgreSQL text[] literal, every element quoted and escaped."""
    return "{" + ",".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values) + "}"


def system_clock() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class _PartitionRow:
    log_start_offset: int
    high_watermark: int
    configs: dict[str, str]


class MetadataService:
    def __init__(
        self,
        engine: Engine,
        *,
        clock: Clock | None = None,
        agent_ttl_ms: int = DEFAULT_AGENT_TTL_MS,
        owns_engine: bool = False,
        group_commit: bool = True,
    ) -> None:
        self.engine = engine
        self.clock: Clock = clock or system_clock
        self.agent_ttl_ms = agent_ttl_ms
        self._owns_engine = owns_engine
        self._pg = is_postgresql(engine)
        self._insert = pg_dialect.insert if self._pg else sqlite_dialect.insert
        self.commit_feed = CommitFeed()
        self._listener: PgCommitListener | None = None
        self._listener_lock = threading.Lock()
        self._combiner: GroupCommitter[tuple[FileSpec, Sequence[ChunkSpec]], list[ChunkResult]] | None = None
        if group_commit:
            self._combiner = GroupCommitter(self._commit_group, max_items=64, max_weight=20_000)

    @classmethod
    def from_url(
        cls,
        db_url: str,
        *,
        clock: Clock | None = None,
        agent_ttl_ms: int = DEFAULT_AGENT_TTL_MS,
        migrate: bool = True,
        group_commit: bool = True,
        **engine_kwargs: Any,
    ) -> MetadataService:
        engine = create_engine_for(db_url, **engine_kwargs)
        try:
            if migrate:
                upgrade_to_head(engine)
        except BaseException:
            engine.dispose()
            raise
        return cls(
            engine, clock=clock, agent_ttl_ms=agent_ttl_ms, owns_engine=True, group_commit=group_commit
        )

    def close(self) -> None:
        if self._listener is not None:
            self._listener.stop()
        if self._owns_engine:
            self.engine.dispose()

    # ------------------------------------------------------------------ helpers

    def _key_batches(self, keys: Sequence[KeyT]) -> Iterable[Sequence[KeyT]]:
        """`keys` in slices small enough for one statement's bound parameters (SQLite's
        limit; PostgreSQL takes them all at once)."""
        if self._pg:
            yield keys
            return
        for i in range(0, len(keys), _SQLITE_KEYS_PER_STATEMENT):
            yield keys[i : i + _SQLITE_KEYS_PER_STATEMENT]

    def _lock_partitions(self, conn: Connection, keys: Iterable[Key]) -> dict[Key, _PartitionRow]:
        """Lock the partition rows (sorted (topic_id, partition) order; FOR UPDATE on PG) and
        read their state and topic configs. Missing keys are absent from the result."""
        ordered = sorted(set(keys))
        if self._pg:
            states: dict[Key, tuple[int, int]] = {}
            doc = conn.execute(
                _PG_LOCK_PARTITIONS,
                {"tids": _uuid_arr(k[0] for k in ordered), "parts": _arr(k[1] for k in ordered)},
            ).scalar()
            for i, ls, hw in json.loads(doc) if doc else ():
                states[ordered[i - 1]] = (ls, hw)
        else:
            # SQLite write transactions start with BEGIN IMMEDIATE: the database is already
            # locked, so locking the rows is just reading them
            states = self._read_partitions(conn, ordered)
        if not states:
            return {}
        configs_by_topic = self._topic_configs(conn, {k[0] for k in states})
        return {k: _PartitionRow(ls, hw, configs_by_topic[k[0]]) for k, (ls, hw) in states.items()}

    def _topic_configs(self, conn: Connection, topic_ids: set[uuid.UUID]) -> dict[uuid.UUID, dict[str, str]]:
        ids = sorted(topic_ids)
        if self._pg:
            rows = conn.execute(_PG_TOPIC_CONFIGS, {"tids": _arr(ids)})
        else:
            rows = conn.execute(select(topics.c.topic_id, topics.c.configs).where(topics.c.topic_id.in_(ids)))
        return {r.topic_id: r.configs for r in rows}

    def _read_partitions(self, conn: Connection, keys: Iterable[Key]) -> dict[Key, tuple[int, int]]:
        uniq = list(set(keys))
        out: dict[Key, tuple[int, int]] = {}
        for batch in self._key_batches(uniq):
            if self._pg:
                rows = conn.execute(
                    _PG_READ_PARTITIONS,
                    {"tids": _uuid_arr(k[0] for k in batch), "parts": _arr(k[1] for k in batch)},
                )
            else:
                rows = conn.execute(
                    select(
                        partitions.c.topic_id,
                        partitions.c.partition,
                        partitions.c.log_start_offset,
                        partitions.c.high_watermark,
                    ).where(tuple_(partitions.c.topic_id, partitions.c.partition).in_(list(batch)))
                )
            for r in rows:
                out[(r.topic_id, r.partition)] = (r.log_start_offset, r.high_watermark)
        return out

    def _mark_orphan_files_deleting(self, conn: Connection, file_ids: Iterable[int], now: int) -> None:
        """Files among `file_ids` that no chunk refers to any more become `deleting`.

        On PostgreSQL the file rows are locked first (in id order, after the partition
        locks), so that two transactions removing the last chunks of one file from
        different partitions serialize here and the second one sees the first one's
        deletions: otherwise each could see the other's chunks and neither would mark it."""
        ids = sorted(set(file_ids))
        for i in range(0, len(ids), _IDS_PER_STATEMENT):
            part = ids[i : i + _IDS_PER_STATEMENT]
            if self._pg:
                conn.execute(
                    select(files.c.id).where(files.c.id.in_(part)).order_by(files.c.id).with_for_update()
                )
            conn.execute(
                update(files)
                .where(
                    files.c.id.in_(part),
                    files.c.state == FILE_LIVE,
                    ~exists().where(chunks.c.file_id == files.c.id),
                )
                .values(state=FILE_DELETING, deleting_since_ms=now)
            )

    @staticmethod
    def _topic_from_row(r: Any) -> Topic:
        return Topic(
            name=r.name, topic_id=r.topic_id, partition_count=r.partition_count, configs=dict(r.configs)
        )

    # ------------------------------------------------------------------ topics

    def create_topic(self, name: str, partition_count: int, configs_: dict[str, str]) -> Topic:
        err = configs.topic_name_error(name)
        if err:
            raise MetadataError(INVALID_TOPIC_EXCEPTION, err)
        if not isinstance(partition_count, int) or partition_count <= 0:
            raise MetadataError(
                INVALID_PARTITIONS, f"Number of partitions must be larger than 0, got {partition_count}"
            )
        if partition_count > MAX_PARTITIONS_PER_TOPIC:
            raise MetadataError(
                INVALID_PARTITIONS,
                f"Number of partitions {partition_count} exceeds {MAX_PARTITIONS_PER_TOPIC}",
            )
        try:
            normalized = configs.validate_configs(configs_)
        except configs.ConfigError as e:
            raise MetadataError(INVALID_CONFIG, str(e)) from None
        topic = Topic(name=name, topic_id=uuid.uuid4(), partition_count=partition_count, configs=normalized)
        now = self.clock()
        try:
            with write_tx(self.engine) as conn:
                if conn.execute(select(topics.c.topic_id).where(topics.c.name == name)).first() is not None:
                    raise MetadataError(TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
                conn.execute(
                    insert(topics).values(
                        topic_id=topic.topic_id,
                        name=name,
                        partition_count=partition_count,
                        configs=normalized,
                        created_ms=now,
                    )
                )
                conn.execute(
                    insert(partitions),
                    [
                        {
                            "topic_id": topic.topic_id,
                            "partition": p,
                            "log_start_offset": 0,
                            "high_watermark": 0,
                        }
                        for p in range(partition_count)
                    ],
                )
        except IntegrityError:  # a concurrent create of the same name won the race
            raise MetadataError(TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.") from None
        return topic

    def delete_topic(self, name: str) -> None:
        now = self.clock()
        with write_tx(self.engine) as conn:
            row = conn.execute(
                select(topics.c.topic_id, topics.c.partition_count)
                .where(topics.c.name == name)
                .with_for_update()
            ).first()
            if row is None:
                raise MetadataError(UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
            tid = row.topic_id
            self._lock_partitions(conn, [(tid, p) for p in range(row.partition_count)])
            file_ids = [
                r[0]
                for r in conn.execute(select(chunks.c.file_id).where(chunks.c.topic_id == tid).distinct())
            ]
            conn.execute(delete(chunks).where(chunks.c.topic_id == tid))
            self._mark_orphan_files_deleting(conn, file_ids, now)
            conn.execute(delete(producer_state).where(producer_state.c.topic_id == tid))
            conn.execute(delete(partitions).where(partitions.c.topic_id == tid))
            conn.execute(delete(topics).where(topics.c.topic_id == tid))
            conn.execute(delete(group_offsets).where(group_offsets.c.topic == name))

    def list_topics(self) -> list[Topic]:
        with read_tx(self.engine) as conn:
            rows = conn.execute(select(topics).order_by(topics.c.name)).all()
        return [self._topic_from_row(r) for r in rows]

    def describe_topics(self, names: Sequence[str]) -> dict[str, Topic]:
        wanted = sorted(set(names))
        out: dict[str, Topic] = {}
        with read_tx(self.engine) as conn:
            for i in range(0, len(wanted), _IDS_PER_STATEMENT):
                for r in conn.execute(
                    select(topics).where(topics.c.name.in_(wanted[i : i + _IDS_PER_STATEMENT]))
                ):
                    out[r.name] = self._topic_from_row(r)
        return out

    def topics_by_id(self, topic_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Topic]:
        wanted = sorted(set(topic_ids))
        out: dict[uuid.UUID, Topic] = {}
        with read_tx(self.engine) as conn:
            for i in range(0, len(wanted), _IDS_PER_STATEMENT):
                q = select(topics).where(topics.c.topic_id.in_(wanted[i : i + _IDS_PER_STATEMENT]))
                for r in conn.execute(q):
                    out[r.topic_id] = self._topic_from_row(r)
        return out

    def alter_topic_configs(
        self, name: str, set_configs: dict[str, str], delete_configs: Sequence[str], replace: bool
    ) -> Topic:
        """replace=True: AlterConfigs (the topic's configs become exactly `set_configs`);
        replace=False: IncrementalAlterConfigs (SET `set_configs`, then DELETE `delete_configs`)."""
        try:
            normalized = configs.validate_configs(set_configs)
            configs.validate_config_names(delete_configs)
        except configs.ConfigError as e:
            raise MetadataError(INVALID_CONFIG, str(e)) from None
        with write_tx(self.engine) as conn:
            row = conn.execute(select(topics).where(topics.c.name == name).with_for_update()).first()
            if row is None:
                raise MetadataError(UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
            if replace:
                new = dict(normalized)
            else:
                new = dict(row.configs)
                new.update(normalized)
                for k in delete_configs:
                    new.pop(k, None)
            conn.execute(update(topics).where(topics.c.topic_id == row.topic_id).values(configs=new))
        return Topic(name=name, topic_id=row.topic_id, partition_count=row.partition_count, configs=new)

    def add_partitions(self, name: str, new_partition_count: int) -> Topic:
        with write_tx(self.engine) as conn:
            row = conn.execute(select(topics).where(topics.c.name == name).with_for_update()).first()
            if row is None:
                raise MetadataError(UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
            cur = row.partition_count
            if not isinstance(new_partition_count, int) or new_partition_count <= cur:
                raise MetadataError(
                    INVALID_PARTITIONS,
                    f"Topic currently has {cur} partitions, which is higher than or equal to the requested "
                    f"{new_partition_count}.",
                )
            if new_partition_count > MAX_PARTITIONS_PER_TOPIC:
                raise MetadataError(
                    INVALID_PARTITIONS, f"Number of partitions exceeds {MAX_PARTITIONS_PER_TOPIC}"
                )
            conn.execute(
                insert(partitions),
                [
                    {"topic_id": row.topic_id, "partition": p, "log_start_offset": 0, "high_watermark": 0}
                    for p in range(cur, new_partition_count)
                ],
            )
            conn.execute(
                update(topics)
                .where(topics.c.topic_id == row.topic_id)
                .values(partition_count=new_partition_count)
            )
        return Topic(
            name=name, topic_id=row.topic_id, partition_count=new_partition_count, configs=dict(row.configs)
        )

    # ------------------------------------------------------------------ produce

    @staticmethod
    def _validate_commit(file: FileSpec, chunk_specs: Sequence[ChunkSpec]) -> None:
        """Refuse a malformed commit as a whole (INVALID_REQUEST) before it joins a group:
        every value must fit its column, so that one bad file cannot fail its group."""

        def bad(msg: str) -> MetadataError:
            return MetadataError(INVALID_REQUEST, f"commit of {file.object_key!r}: {msg}")

        if not file.object_key or "\x00" in file.object_key or len(file.object_key) > 1024:
            raise bad("empty, too long or NUL in the object key")
        if "\x00" in file.writer or len(file.writer) > 255:
            raise bad("writer too long or with NUL")
        if not 0 <= file.size_bytes < _I64 or not 0 <= file.level < _I32:
            raise bad("size or level out of range")
        for c in chunk_specs:
            if not c.batches:
                raise bad(f"chunk {c.topic_id}/{c.partition} has no batches")
            if not -_I32 <= c.partition < _I32:
                raise bad(f"partition {c.partition} out of range")
            for b in c.batches:
                if b.byte_offset < 0 or b.byte_length <= 0 or b.byte_offset + b.byte_length > file.size_bytes:
                    raise bad(f"batch bytes [{b.byte_offset}, +{b.byte_length}) outside the file")
                if not 0 < b.offset_count <= _I32 or not 0 <= b.record_count < _I64:
                    raise bad(f"batch with offset_count {b.offset_count}, record_count {b.record_count}")
                if not -_I64 <= b.max_timestamp < _I64 or not -_I64 <= b.producer_id < _I64:
                    raise bad("batch timestamp or producer id out of range")
                if not -_I32 <= b.producer_epoch < _I32 or not -_I32 <= b.base_sequence < _I32:
                    raise bad("batch producer epoch or sequence out of range")

    def commit_file(self, file: FileSpec, chunk_specs: Sequence[ChunkSpec]) -> list[ChunkResult]:
        """Commit a file just written to the bucket: in ONE transaction, record the file,
        assign offsets to its accepted batches (contiguous per partition, in commit order)
        and insert one chunk row per contiguous run of accepted batches.

        Per batch: unknown topic/partition -> the whole chunk fails with 3 (the others
        commit); a batch larger than the topic's max.message.bytes -> 10; idempotence
        failures -> 45/47 (see metadata.idempotence); a duplicate of a cached batch ->
        success with its original offsets, not stored again (its bytes stay in the file,
        no chunk row points at them). If no batch is stored, the file row is recorded as
        `deleting` (GC removes the object). If the object key was already committed (a
        retry whose first answer was lost), nothing changes and the answer is rebuilt
        from the recorded chunk rows (commit_plan.answer_recommit).

        Group commit: commits that arrive while another is running (other threads of this
        process) are committed together in the next transaction, in arrival order, each
        with exactly the outcome it would have had alone; they share the partition locks,
        the statements and the fsync. A database error fails every file of the group
        (none of them is recorded; each caller may retry)."""
        self._validate_commit(file, chunk_specs)
        if self._combiner is None:
            return self._commit_group([(file, chunk_specs)])[0]
        return self._combiner.submit((file, chunk_specs), sum(len(c.batches) for c in chunk_specs))

    def _commit_group(self, items: list[tuple[FileSpec, Sequence[ChunkSpec]]]) -> list[list[ChunkResult]]:
        """Commit several files in one transaction; files already recorded (or a key twice
        in the group) make it fall back to one transaction per file."""
        if len({f.object_key for f, _ in items}) == len(items):
            try:
                out = self._commit_tx(items)
            except IntegrityError as e:
                # A concurrent commit of one of the object keys (another replica) won the
                # unique index: this transaction rolled back; go on file by file.
                if "object_key" not in str(e.orig):
                    raise
                out = None
            if out is not None:
                return out
        results = []
        for item in items:
            try:
                one = self._commit_tx([item])
            except IntegrityError as e:
                if "object_key" not in str(e.orig):
                    raise
                one = self._commit_tx([item])  # now it is recorded: answered as a re-commit
            assert one is not None
            results.extend(one)
        return results

    def _commit_tx(self, items: list[tuple[FileSpec, Sequence[ChunkSpec]]]) -> list[list[ChunkResult]] | None:
        """One transaction: lock the partitions of all files (sorted (topic id, partition)
        order), read their state and their producers' state, plan each file in order,
        write everything. None (nothing written) if some object key is already recorded
        and there are several files; with one file, the answer of a re-commit."""
        now = self.clock()
        tindex = TopicIndex({c.topic_id for _, specs in items for c in specs})
        spec_keys = [[(tindex.index[c.topic_id], c.partition) for c in specs] for _, specs in items]
        keys = sorted(
            {k for ks in spec_keys for k in ks}
        )  # (topic index, partition) sorts as (id, partition)
        object_keys = [f.object_key for f, _ in items]
        with write_tx(self.engine) as conn:
            locked, existing = self._lock_for_commit(conn, tindex, keys, object_keys)
            pkeys = producer_keys(
                [c for _, specs in items for c in specs], [k for ks in spec_keys for k in ks], locked
            )
            pstate = self._load_producer_state(conn, tindex, pkeys)
            if existing:
                if len(items) > 1:
                    return None
                file, specs = items[0]
                return [self._answer_recommit(conn, file, specs, spec_keys[0], tindex, locked, pstate)]
            plans = []
            for (_, specs), ks in zip(items, spec_keys, strict=True):
                plan = plan_commit(specs, ks, locked, pstate, now)
                for k, hwm in plan.hwms.items():  # the next file of the group goes on from here
                    locked[k].high_watermark = hwm
                plans.append(plan)
            self._write_commit(conn, [f for f, _ in items], plans, tindex, locked, pstate, now)
            moved = [(tindex.ids[k[0]], k[1]) for p in plans for k in p.hwms]
            if self._pg and moved:
                # Delivered to every replica's listener if (and only if) this commits.
                conn.execute(
                    text("SELECT pg_notify(:channel, :payload)"),
                    {"channel": NOTIFY_CHANNEL, "payload": notify_payload(moved)},
                )
        self.commit_feed.publish(moved)
        return [p.results for p in plans]

    def _lock_for_commit(
        self, conn: Connection, tindex: TopicIndex, keys: list[TKey], object_keys: list[str]
    ) -> tuple[dict[TKey, PartitionRow], bool]:
        """Lock the partitions and read their state (and their topics' flags); and whether
        any of the object keys is recorded already."""
        locked: dict[TKey, PartitionRow] = {}
        if self._pg:
            locked_doc, configs_doc, existing = conn.execute(
                _PG_COMMIT_READ,
                {
                    "tids": "{" + ",".join(tindex.text[k[0]] for k in keys) + "}",
                    "parts": _arr(k[1] for k in keys),
                    "topic_ids": "{" + ",".join(tindex.text) + "}",
                    "keys": _text_arr(object_keys),
                },
            ).one()
            flags = {tindex.index[uuid.UUID(t)]: topic_flags(c) for t, c in json.loads(configs_doc or "[]")}
            for i, log_start, hwm in json.loads(locked_doc) if locked_doc else ():
                k = keys[i - 1]
                locked[k] = PartitionRow(log_start, hwm, *flags[k[0]])
            return locked, bool(existing)
        hexes = [t.hex for t in tindex.ids]  # SQLAlchemy's Uuid on SQLite: 32 hex digits
        found = conn.exec_driver_sql(
            _SQ_READ_PARTITIONS, (json.dumps([[hexes[k[0]], k[1]] for k in keys]),)
        ).all()
        topic_configs = self._topic_configs(conn, {tindex.ids[keys[i][0]] for i, _, _ in found})
        sq_flags = {tindex.index[t]: topic_flags(c) for t, c in topic_configs.items()}
        for i, log_start, hwm in found:
            k = keys[i]
            locked[k] = PartitionRow(log_start, hwm, *sq_flags[k[0]])
        existing_row = conn.execute(
            select(files.c.id).where(files.c.object_key.in_(object_keys)).limit(1)
        ).first()
        return locked, existing_row is not None

    def _load_producer_state(self, conn: Connection, tindex: TopicIndex, pkeys: list[PKey]) -> ProducerStates:
        """State of the given (partition, producer) pairs; None where there is none."""
        out: ProducerStates = dict.fromkeys(pkeys)
        if not pkeys:
            return out
        make = idempotence.CachedBatch.from_json
        if self._pg:
            params = {
                "tids": "{" + ",".join(tindex.text[k[0]] for k in pkeys) + "}",
                "parts": _arr(k[1] for k in pkeys),
                "pids": _arr(k[2] for k in pkeys),
            }
            doc = conn.execute(_PG_READ_PRODUCERS, params).scalar()
            for i, epoch, batches in json.loads(doc) if doc else ():
                out[pkeys[i - 1]] = idempotence.ProducerEntry(epoch, [make(b) for b in batches])
            return out
        hexes = [t.hex for t in tindex.ids]
        doc = json.dumps([[hexes[k[0]], k[1], k[2]] for k in pkeys])
        for i, epoch, batches in conn.exec_driver_sql(_SQ_READ_PRODUCERS, (doc,)):
            out[pkeys[i]] = idempotence.ProducerEntry(epoch, [make(b) for b in json.loads(batches)])
        return out

    def _write_commit(
        self,
        conn: Connection,
        file_specs: list[FileSpec],
        plans: list[CommitPlan],
        tindex: TopicIndex,
        locked: dict[TKey, PartitionRow],
        pstate: ProducerStates,
        now: int,
    ) -> None:
        """The writes of a group: file rows (`deleting` for a file that stored nothing),
        chunk rows, the new high watermarks, the changed producer state. PostgreSQL: ONE
        statement (data-modifying CTEs over arrays); SQLite: a few executemany."""
        hwms: dict[TKey, int] = {}
        changed: dict[PKey, None] = {}
        for plan in plans:
            hwms.update(plan.hwms)
            changed.update(dict.fromkeys(plan.changed))
        entries = []
        for k in changed:
            e = pstate[k]
            assert e is not None
            entries.append((k, e))
        if not self._pg:
            self._write_commit_sqlite(conn, file_specs, plans, tindex, hwms, entries, now)
            return
        text_ = tindex.text
        c_file: list[int] = []
        runs: list[Run] = []
        for i, plan in enumerate(plans, start=1):
            c_file.extend([i] * len(plan.runs))
            runs.extend(plan.runs)
        conn.execute(
            _PG_WRITE_COMMIT,
            {
                "now": now,
                "f_keys": _text_arr(f.object_key for f in file_specs),
                "f_sizes": _arr(f.size_bytes for f in file_specs),
                "f_levels": _arr(f.level for f in file_specs),
                "f_states": "{" + ",".join(FILE_LIVE if p.runs else FILE_DELETING for p in plans) + "}",
                "f_writers": _text_arr(f.writer for f in file_specs),
                "c_file": _arr(c_file),
                "c_tids": "{" + ",".join(text_[r.tix] for r in runs) + "}",
                "c_parts": _arr(r.partition for r in runs),
                "c_pos": _arr(r.byte_position for r in runs),
                "c_len": _arr(r.byte_length for r in runs),
                "c_base": _arr(r.base_offset for r in runs),
                "c_last": _arr(r.last_offset for r in runs),
                "c_records": _arr(r.record_count for r in runs),
                "c_batches": _arr(r.batch_count for r in runs),
                "c_maxts": _arr(r.max_timestamp for r in runs),
                "h_tids": "{" + ",".join(text_[k[0]] for k in hwms) + "}",
                "h_parts": _arr(k[1] for k in hwms),
                "h_hwms": _arr(hwms.values()),
                "s_tids": "{" + ",".join(text_[k[0]] for k, _ in entries) + "}",
                "s_parts": _arr(k[1] for k, _ in entries),
                "s_pids": _arr(k[2] for k, _ in entries),
                "s_epochs": _arr(e.epoch for _, e in entries),
                # text[] of JSON documents: [[first_seq, last_seq, base, last, append_time], ...]
                "s_batches": "{"
                + ",".join('"' + json.dumps(e.batches, separators=(",", ":")) + '"' for _, e in entries)
                + "}",
            },
        )

    def _write_commit_sqlite(
        self,
        conn: Connection,
        file_specs: list[FileSpec],
        plans: list[CommitPlan],
        tindex: TopicIndex,
        hwms: dict[TKey, int],
        entries: list[tuple[PKey, idempotence.ProducerEntry]],
        now: int,
    ) -> None:
        hexes = [t.hex for t in tindex.ids]
        for f, plan in zip(file_specs, plans, strict=True):
            file_id = conn.execute(
                insert(files)
                .values(
                    object_key=f.object_key,
                    size_bytes=f.size_bytes,
                    level=f.level,
                    state=FILE_LIVE if plan.runs else FILE_DELETING,
                    writer=f.writer,
                    created_ms=now,
                    committed_ms=now,
                    deleting_since_ms=None if plan.runs else now,
                )
                .returning(files.c.id)
            ).scalar_one()
            if plan.runs:
                self._insert_runs(conn, file_id, hexes, plan.runs)
        if hwms:
            self._set_high_watermarks(conn, hexes, hwms)
        if entries:
            conn.exec_driver_sql(
                _SQ_UPSERT_PRODUCER,
                [
                    (hexes[k[0]], k[1], k[2], e.epoch, json.dumps(e.batches, separators=(",", ":")), now)
                    for k, e in entries
                ],
            )

    def _insert_runs(self, conn: Connection, file_id: int, hexes: list[str], runs: list[Run]) -> None:
        """SQLite: the chunk rows of a file (executemany)."""
        conn.exec_driver_sql(
            _SQ_INSERT_CHUNKS,
            [
                (
                    file_id,
                    hexes[r.tix],
                    r.partition,
                    r.byte_position,
                    r.byte_length,
                    r.base_offset,
                    r.last_offset,
                    r.record_count,
                    r.batch_count,
                    r.max_timestamp,
                )
                for r in runs
            ],
        )

    def _set_high_watermarks(self, conn: Connection, hexes: list[str], hwms: dict[TKey, int]) -> None:
        """SQLite (PostgreSQL sets them in _write_commit's single statement)."""
        conn.exec_driver_sql(_SQ_SET_HWM, [(h, hexes[k[0]], k[1]) for k, h in hwms.items()])

    def _answer_recommit(
        self,
        conn: Connection,
        file: FileSpec,
        chunk_specs: Sequence[ChunkSpec],
        spec_keys: Sequence[TKey],
        tindex: TopicIndex,
        locked: dict[TKey, PartitionRow],
        pstate: ProducerStates,
    ) -> list[ChunkResult]:
        rows = conn.execute(
            select(
                chunks.c.topic_id,
                chunks.c.partition,
                chunks.c.byte_position,
                chunks.c.byte_length,
                chunks.c.base_offset,
            )
            .join(files, files.c.id == chunks.c.file_id)
            .where(files.c.object_key == file.object_key)
        ).all()
        recorded = {
            (tindex.index[r.topic_id], r.partition, r.byte_position): RecordedChunk(
                r.byte_position, r.byte_length, r.base_offset
            )
            for r in rows
            if r.topic_id in tindex.index
        }
        return answer_recommit(file.object_key, chunk_specs, spec_keys, locked, pstate, recorded)

    def init_producer_id(self) -> tuple[int, int]:
        """A fresh producer id with epoch 0, from the `producer_id` counter row."""
        with write_tx(self.engine) as conn:
            value = conn.execute(
                update(sequences)
                .where(sequences.c.name == PRODUCER_ID_SEQUENCE)
                .values(next_value=sequences.c.next_value + 1)
                .returning(sequences.c.next_value)
            ).scalar()
            if value is None:
                conn.execute(insert(sequences).values(name=PRODUCER_ID_SEQUENCE, next_value=1))
                value = 1
        return int(value) - 1, 0

    # ------------------------------------------------------------------ fetch

    def partition_states(self, keys: Sequence[PartitionKey]) -> list[PartitionState]:
        with read_tx(self.engine) as conn:
            states = self._read_partitions(conn, [(k.topic_id, k.partition) for k in keys])
        out = []
        for k in keys:
            s = states.get((k.topic_id, k.partition))
            out.append(PartitionState(NONE, s[0], s[1]) if s else PartitionState(UNKNOWN_TOPIC_OR_PARTITION))
        return out

    def ensure_commit_listener(self) -> None:
        """On PostgreSQL, start (once) the thread that publishes other replicas' commits
        into `commit_feed` (see metadata.commit_feed); on SQLite every writer is in this
        process, so the feed already sees every commit."""
        if not self._pg or self._listener is not None:
            return
        with self._listener_lock:
            if self._listener is not None:
                return
            dsn = self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)

            def connect() -> object:
                import psycopg

                return psycopg.connect(dsn, autocommit=True, connect_timeout=10)

            self._listener = PgCommitListener(self.commit_feed, connect)
            self._listener.start()

    _LOC_COLS = (
        chunks.c.id,
        files.c.object_key,
        chunks.c.byte_position,
        chunks.c.byte_length,
        chunks.c.base_offset,
        chunks.c.last_offset,
        chunks.c.record_count,
        chunks.c.max_timestamp,
        chunks.c.offsets_absolute,
        chunks.c.present_offsets,
    )

    @staticmethod
    def _location(r: Any) -> ChunkLocation:
        return ChunkLocation(
            chunk_id=r.id,
            object_key=r.object_key,
            byte_position=r.byte_position,
            byte_length=r.byte_length,
            base_offset=r.base_offset,
            last_offset=r.last_offset,
            record_count=r.record_count,
            max_timestamp=r.max_timestamp,
            offsets_absolute=bool(r.offsets_absolute),
            present_offsets=bytes(r.present_offsets) if r.present_offsets is not None else None,
        )

    def find_chunks(self, queries: Sequence[FetchQuery]) -> list[PartitionFetchInfo]:
        """Where the records from each query's offset onwards live: from the chunk holding
        the offset (or the next present offset, for compacted chunks) onward, until the
        chunks' byte lengths add up to max_bytes; always at least one chunk when the offset
        is below the high watermark. Reads at most a few pages of the chunk index per
        query, however far behind the reader is."""
        out: list[PartitionFetchInfo] = []
        with read_tx(self.engine) as conn:
            states = self._read_partitions(conn, [(q.topic_id, q.partition) for q in queries])
            for q in queries:
                s = states.get((q.topic_id, q.partition))
                if s is None:
                    out.append(PartitionFetchInfo(UNKNOWN_TOPIC_OR_PARTITION))
                    continue
                log_start, hwm = s
                if q.offset < log_start or q.offset > hwm:
                    out.append(PartitionFetchInfo(OFFSET_OUT_OF_RANGE, log_start, hwm))
                    continue
                if q.offset == hwm:
                    out.append(PartitionFetchInfo(NONE, log_start, hwm))
                    continue
                locs = self._chunks_from(conn, q.topic_id, q.partition, q.offset, hwm, q.max_bytes)
                out.append(PartitionFetchInfo(NONE, log_start, hwm, tuple(locs)))
        return out

    def _chunks_from(
        self, conn: Connection, tid: uuid.UUID, part: int, offset: int, hwm: int, max_bytes: int
    ) -> list[ChunkLocation]:
        locs: list[ChunkLocation] = []
        total = 0
        cursor = offset  # next page: chunks with last_offset >= cursor
        page = _FIND_FIRST_PAGE
        while True:
            rows = conn.execute(
                select(*self._LOC_COLS)
                .join(files, files.c.id == chunks.c.file_id)
                .where(
                    chunks.c.topic_id == tid,
                    chunks.c.partition == part,
                    chunks.c.last_offset >= cursor,
                    chunks.c.base_offset < hwm,
                )
                .order_by(chunks.c.last_offset)
                .limit(page)
            ).all()
            for r in rows:
                loc = self._location(r)
                if loc.present_offsets is not None and bitmaps.next_present_in_chunk(loc, offset) is None:
                    continue  # compacted: nothing left at or after the offset in this chunk
                locs.append(loc)
                total += loc.byte_length
                if total >= max_bytes:
                    return locs
            if len(rows) < page:
                return locs
            cursor = rows[-1].last_offset + 1
            page = min(page * 4, _FIND_MAX_PAGE)

    def list_offsets(self, queries: Sequence[OffsetQuery]) -> list[OffsetAnswer]:
        """EARLIEST (-2): log start; LATEST (-1): high watermark (timestamp -1 for both).
        MAX_TIMESTAMP (-3): approximated per chunk: the last present offset of the chunk
        with the greatest max_timestamp (earliest such chunk on ties), with that timestamp.
        A timestamp: the first chunk (in offset order) whose max_timestamp >= it; answers
        its first present offset >= log start and its max_timestamp; the agent refines the
        answer inside the chunk. No such chunk: offset -1, timestamp -1."""
        out: list[OffsetAnswer] = []
        with read_tx(self.engine) as conn:
            states = self._read_partitions(conn, [(q.topic_id, q.partition) for q in queries])
            for q in queries:
                s = states.get((q.topic_id, q.partition))
                if s is None:
                    out.append(OffsetAnswer(UNKNOWN_TOPIC_OR_PARTITION))
                    continue
                log_start, hwm = s
                if q.timestamp == EARLIEST_TIMESTAMP or q.timestamp == -4:  # -4: EARLIEST_LOCAL
                    out.append(OffsetAnswer(NONE, log_start, -1))
                elif q.timestamp == LATEST_TIMESTAMP:
                    out.append(OffsetAnswer(NONE, hwm, -1))
                elif q.timestamp == MAX_TIMESTAMP:
                    out.append(self._max_timestamp(conn, q, log_start, hwm))
                elif q.timestamp < 0:
                    out.append(OffsetAnswer(INVALID_REQUEST))
                else:
                    out.append(self._offset_for_timestamp(conn, q, log_start, hwm))
        return out

    def _partition_chunks(self, q: OffsetQuery, log_start: int, hwm: int) -> Any:
        return (
            select(*self._LOC_COLS)
            .join(files, files.c.id == chunks.c.file_id)
            .where(
                chunks.c.topic_id == q.topic_id,
                chunks.c.partition == q.partition,
                chunks.c.last_offset >= log_start,
                chunks.c.base_offset < hwm,
            )
        )

    def _max_timestamp(self, conn: Connection, q: OffsetQuery, log_start: int, hwm: int) -> OffsetAnswer:
        stmt = self._partition_chunks(q, log_start, hwm).order_by(
            chunks.c.max_timestamp.desc(), chunks.c.last_offset
        )
        for r in conn.execute(stmt.execution_options(yield_per=16)):
            loc = self._location(r)
            last = bitmaps.last_present_in_chunk(loc)
            if last is not None and last >= log_start:
                return OffsetAnswer(NONE, last, loc.max_timestamp)
        return OffsetAnswer(NONE, -1, -1)

    def _offset_for_timestamp(
        self, conn: Connection, q: OffsetQuery, log_start: int, hwm: int
    ) -> OffsetAnswer:
        stmt = (
            self._partition_chunks(q, log_start, hwm)
            .where(chunks.c.max_timestamp >= q.timestamp)
            .order_by(chunks.c.last_offset)
        )
        for r in conn.execute(stmt.execution_options(yield_per=16)):
            loc = self._location(r)
            first = bitmaps.next_present_in_chunk(loc, log_start)
            if first is not None:
                return OffsetAnswer(NONE, first, loc.max_timestamp)
        return OffsetAnswer(NONE, -1, -1)

    # ------------------------------------------------------------------ compaction

    def replace_chunks(
        self, input_chunk_ids: Sequence[int], file: FileSpec, outputs: Sequence[OutputChunk]
    ) -> None:
        """The compactor's atomic swap: delete the input chunks and record `file` with the
        `outputs` chunks (absolute offsets), in one transaction.

        Compare-and-set: if any input chunk no longer exists (another compactor, retention
        or a topic deletion got there first) nothing changes and ConflictError (code 22,
        HTTP 409) is raised. Outputs must lie within the inputs' offset range of their
        partition, must not overlap each other nor any chunk that remains, must not hold
        more records than the inputs, and their bitmaps must match their ranges and counts;
        otherwise MetadataError(INVALID_REQUEST) and nothing changes. Offsets never change.
        Input files left without chunks become `deleting` (GC deletes them after a grace)."""
        ids = sorted(set(input_chunk_ids))
        if not ids:
            raise MetadataError(INVALID_REQUEST, "replace_chunks needs at least one input chunk")
        if not file.object_key or file.size_bytes < 0:
            raise MetadataError(INVALID_REQUEST, "bad output file")
        for o in outputs:
            if o.byte_position < 0 or o.byte_length < 0 or o.byte_position + o.byte_length > file.size_bytes:
                raise MetadataError(INVALID_REQUEST, f"output chunk bytes outside the file: {o}")
            if o.last_offset < o.base_offset or o.base_offset < 0 or o.record_count < 0 or o.batch_count < 0:
                raise MetadataError(INVALID_REQUEST, f"bad output chunk offsets/counts: {o}")
            if o.last_offset - o.base_offset > bitmaps.MAX_RELATIVE_OFFSET:
                raise MetadataError(INVALID_REQUEST, "output chunk spans more than 2^32 offsets")
            err = bitmaps.check_chunk_bitmap(o.base_offset, o.last_offset, o.present_offsets, o.record_count)
            if err:
                raise MetadataError(INVALID_REQUEST, f"output chunk {o.topic_id}/{o.partition}: {err}")
        now = self.clock()
        try:
            with write_tx(self.engine) as conn:
                self._replace_locked(conn, ids, file, outputs, now)
        except IntegrityError as e:
            raise MetadataError(
                INVALID_REQUEST, f"replace_chunks refused by the database: {e.orig}"
            ) from None

    def _replace_locked(
        self, conn: Connection, ids: list[int], file: FileSpec, outputs: Sequence[OutputChunk], now: int
    ) -> None:
        c = chunks.c
        sel = select(c.id, c.file_id, c.topic_id, c.partition, c.base_offset, c.last_offset, c.record_count)

        def read_inputs() -> list[Any]:
            rows: list[Any] = []
            for i in range(0, len(ids), _IDS_PER_STATEMENT):
                rows.extend(conn.execute(sel.where(c.id.in_(ids[i : i + _IDS_PER_STATEMENT]))).all())
            return rows

        first = read_inputs()
        if len(first) != len(ids):
            raise ConflictError(CONFLICT, f"{len(ids) - len(first)} input chunk(s) no longer exist")
        self._lock_partitions(conn, [(r.topic_id, r.partition) for r in first])
        rows = read_inputs()  # again, under the partition locks
        if len(rows) != len(ids):
            raise ConflictError(CONFLICT, f"{len(ids) - len(rows)} input chunk(s) no longer exist")

        spans: dict[Key, tuple[int, int, int]] = {}  # min base, max last, records
        for r in rows:
            k = (r.topic_id, r.partition)
            lo, hi, n = spans.get(k, (r.base_offset, r.last_offset, 0))
            spans[k] = (min(lo, r.base_offset), max(hi, r.last_offset), n + r.record_count)
        by_part: dict[Key, list[OutputChunk]] = defaultdict(list)
        for o in outputs:
            k = (o.topic_id, o.partition)
            if k not in spans:
                raise MetadataError(
                    INVALID_REQUEST, f"output chunk for {k[0]}/{k[1]}, which has no input chunk"
                )
            lo, hi, _ = spans[k]
            if o.base_offset < lo or o.last_offset > hi:
                raise MetadataError(
                    INVALID_REQUEST,
                    f"output [{o.base_offset}, {o.last_offset}] of {k[0]}/{k[1]} is outside the inputs' [{lo}, {hi}]",
                )
            by_part[k].append(o)
        for k, outs in by_part.items():
            outs.sort(key=lambda o: o.base_offset)
            for a, b in zip(outs, outs[1:], strict=False):
                if b.base_offset <= a.last_offset:
                    raise MetadataError(INVALID_REQUEST, f"output chunks of {k[0]}/{k[1]} overlap")
            if sum(o.record_count for o in outs) > spans[k][2]:
                raise MetadataError(
                    INVALID_REQUEST, f"outputs of {k[0]}/{k[1]} hold more records than the inputs"
                )

        for i in range(0, len(ids), _IDS_PER_STATEMENT):
            conn.execute(delete(chunks).where(c.id.in_(ids[i : i + _IDS_PER_STATEMENT])))
        for k, outs in by_part.items():
            for o in outs:
                nxt = conn.execute(
                    select(c.base_offset)
                    .where(c.topic_id == k[0], c.partition == k[1], c.last_offset >= o.base_offset)
                    .order_by(c.last_offset)
                    .limit(1)
                ).scalar()
                if nxt is not None and nxt <= o.last_offset:
                    raise MetadataError(
                        INVALID_REQUEST,
                        f"output [{o.base_offset}, {o.last_offset}] of {k[0]}/{k[1]} overlaps a remaining chunk",
                    )

        state = FILE_LIVE if outputs else FILE_DELETING
        file_id = conn.execute(
            insert(files)
            .values(
                object_key=file.object_key,
                size_bytes=file.size_bytes,
                level=file.level,
                state=state,
                writer=file.writer,
                created_ms=now,
                committed_ms=now,
                deleting_since_ms=None if outputs else now,
            )
            .returning(files.c.id)
        ).scalar_one()
        if outputs:
            conn.execute(
                insert(chunks),
                [
                    {
                        "file_id": file_id,
                        "topic_id": o.topic_id,
                        "partition": o.partition,
                        "byte_position": o.byte_position,
                        "byte_length": o.byte_length,
                        "base_offset": o.base_offset,
                        "last_offset": o.last_offset,
                        "record_count": o.record_count,
                        "batch_count": o.batch_count,
                        "max_timestamp": o.max_timestamp,
                        "offsets_absolute": True,
                        "present_offsets": o.present_offsets,
                    }
                    for o in outputs
                ],
            )
        self._mark_orphan_files_deleting(conn, {r.file_id for r in rows}, now)

    # ------------------------------------------------------------------ consumer groups

    def commit_offsets(
        self, group_id: str, offsets: Sequence[GroupOffset], lease: LeaseToken | None = None
    ) -> None:
        """Upsert committed offsets; with `lease`, only while it is the group's current
        coordinator lease (checked in this transaction, else NOT_COORDINATOR)."""
        if not offsets:
            return
        now = self.clock()
        latest: dict[tuple[str, int], GroupOffset] = {}
        for o in offsets:  # the last one wins if a partition is listed twice
            latest[(o.topic, o.partition)] = o
        rows = [
            {
                "group_id": group_id,
                "topic": o.topic,
                "partition": o.partition,
                "committed_offset": o.offset,
                "metadata": o.metadata,
                "leader_epoch": o.leader_epoch,
                "commit_time_ms": now,
            }
            for o in latest.values()
        ]
        stmt = self._insert(group_offsets)
        stmt = stmt.on_conflict_do_update(
            index_elements=[group_offsets.c.group_id, group_offsets.c.topic, group_offsets.c.partition],
            set_={
                "committed_offset": stmt.excluded.committed_offset,
                "metadata": stmt.excluded.metadata,
                "leader_epoch": stmt.excluded.leader_epoch,
                "commit_time_ms": stmt.excluded.commit_time_ms,
            },
        )
        with write_tx(self.engine) as conn:
            if lease is not None:
                group_leases.check(conn, group_id, lease, now)
            conn.execute(stmt, rows)

    def fetch_offsets(self, group_id: str, topics_: Sequence[str] | None) -> list[GroupOffset]:
        g = group_offsets.c
        stmt = select(g.topic, g.partition, g.committed_offset, g.metadata, g.leader_epoch).where(
            g.group_id == group_id
        )
        if topics_ is not None:
            if not topics_:
                return []
            stmt = stmt.where(g.topic.in_(sorted(set(topics_))))
        with read_tx(self.engine) as conn:
            rows = conn.execute(stmt.order_by(g.topic, g.partition)).all()
        return [
            GroupOffset(r.topic, r.partition, r.committed_offset, r.metadata, r.leader_epoch) for r in rows
        ]

    def delete_group_offsets(self, group_id: str) -> None:
        """Forget a group's committed offsets (DeleteGroups)."""
        with write_tx(self.engine) as conn:
            conn.execute(delete(group_offsets).where(group_offsets.c.group_id == group_id))

    def delete_partition_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]]) -> None:
        """Forget the committed offsets of some (topic, partition)s of a group, in one
        transaction (OffsetDelete); partitions without a commit are ignored."""
        keys = sorted(set(partitions))
        if not keys:
            return
        g = group_offsets.c
        with write_tx(self.engine) as conn:
            for batch in self._key_batches(keys):
                conn.execute(
                    delete(group_offsets).where(
                        g.group_id == group_id, tuple_(g.topic, g.partition).in_(batch)
                    )
                )

    def groups_with_offsets(self, group_ids: Sequence[str] | None) -> list[str]:
        """The group ids (of `group_ids`, or all when None) that have committed offsets, sorted."""
        g = group_offsets.c
        stmt = select(g.group_id).distinct()
        if group_ids is not None:
            if not group_ids:
                return []
            stmt = stmt.where(g.group_id.in_(sorted(set(group_ids))))
        with read_tx(self.engine) as conn:
            return [r[0] for r in conn.execute(stmt.order_by(g.group_id)).all()]

    # ------------------------------------------------------------------ agents

    def heartbeat_agent(self, agent: AgentInfo) -> None:
        """Register or refresh an agent; last_heartbeat_ms is the service's clock. A live
        agent id heartbeated from another address is refused (metadata.group_leases)."""
        with write_tx(self.engine) as conn:
            group_leases.heartbeat_agent(conn, agent, self.clock(), self.agent_ttl_ms)

    def live_agents(self) -> list[AgentInfo]:
        """Agents that heartbeated within the TTL, by agent id; expired ones are deleted."""
        cutoff = self.clock() - self.agent_ttl_ms
        with read_tx(self.engine) as conn:
            rows = conn.execute(select(agents).order_by(agents.c.agent_id)).all()
        live = [
            AgentInfo(r.agent_id, r.host, r.port, r.zone, r.last_heartbeat_ms)
            for r in rows
            if r.last_heartbeat_ms >= cutoff
        ]
        if len(live) != len(rows):
            with write_tx(self.engine) as conn:
                conn.execute(delete(agents).where(agents.c.last_heartbeat_ms < cutoff))
        return live

    # ------------------------------------------------------------------ operators and tests

    def partition_chunks(self, topic_id: uuid.UUID, partition: int) -> list[ChunkLocation]:
        """Every chunk of a partition in offset order (operators, tests, compaction planning)."""
        with read_tx(self.engine) as conn:
            rows = conn.execute(
                select(*self._LOC_COLS)
                .join(files, files.c.id == chunks.c.file_id)
                .where(chunks.c.topic_id == topic_id, chunks.c.partition == partition)
                .order_by(chunks.c.last_offset)
            ).all()
        return [self._location(r) for r in rows]

    def file_states(self, object_keys: Sequence[str]) -> dict[str, str]:
        """object key -> live | deleting, for the keys that are recorded."""
        with read_tx(self.engine) as conn:
            rows = conn.execute(
                select(files.c.object_key, files.c.state).where(files.c.object_key.in_(list(object_keys)))
            ).all()
        return {r.object_key: r.state for r in rows}

    def count_rows(self) -> dict[str, int]:
        """Rows per table (tests, operators)."""
        out = {}
        with read_tx(self.engine) as conn:
            for t in (topics, partitions, files, chunks, producer_state, group_offsets, agents):
                out[t.name] = int(conn.execute(select(func.count()).select_from(t)).scalar_one())
        return out

    # ------------------------------------------------------------------ group coordinator leases

    def acquire_group_lease(self, group_id: str, agent_id: str, ttl_ms: int) -> LeaseGrant:
        with write_tx(self.engine) as conn:
            return group_leases.acquire(conn, group_id, agent_id, self.clock(), ttl_ms)

    def renew_group_leases(self, agent_id: str, leases: Sequence[tuple[str, int]], ttl_ms: int) -> list[str]:
        with write_tx(self.engine) as conn:
            return group_leases.renew(conn, agent_id, leases, self.clock(), ttl_ms)

    def release_group_leases(self, agent_id: str, leases: Sequence[tuple[str, int]]) -> None:
        with write_tx(self.engine) as conn:
            group_leases.release(conn, agent_id, leases)

    def confirm_group_generation(
        self, group_id: str, lease: LeaseToken, ttl_ms: int, group_state: str
    ) -> None:
        with write_tx(self.engine) as conn:
            group_leases.confirm(conn, group_id, lease, self.clock(), ttl_ms, group_state)


__all__ = ["MetadataService", "system_clock", "DEFAULT_AGENT_TTL_MS"]
