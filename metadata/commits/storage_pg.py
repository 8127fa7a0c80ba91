"""The PostgreSQL `Dialect` (see metadata.commits.storage): psycopg 3, row locks, arrays.

Key lists travel as arrays (one parameter per column, whatever the number of
partitions) and are joined with unnest; the statement text never changes, so psycopg
prepares it once per connection. Arrays are passed as literals built here
(`_arr`, `_uuid_arr`, `_text_arr`): several times cheaper than letting the driver dump
Python lists. Answers with many rows come back as one JSON document (json_agg), so that
a hundred partitions cost one row to fetch and one json.loads.

The commit path is three statements per transaction: lock+read (partitions, topic
configs, whether the object keys exist), producer state, and one data-modifying CTE that
writes everything; then pg_notify for the other replicas' commit listeners.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence

from skiff.metadata.commits import idempotence
from skiff.metadata.commits.feed import NOTIFY_CHANNEL, CommitFeed, PgCommitListener, notify_payload
from skiff.metadata.commits.plan import (
    CommitPlan,
    PartitionRow,
    PKey,
    ProducerStates,
    Run,
    TKey,
    TopicIndex,
    topic_flags,
)
from skiff.metadata.commits.storage import Key, KeyT
from skiff.metadata.schema import FILE_DELETING, FILE_LIVE, files
from skiff.metadata.types import FileSpec
from sqlalchemy import Connection, Engine, select, text

# Lock partitions: the CTE locks the rows in (topic_id, partition) order (MATERIALIZED:
# FOR UPDATE cannot go with the aggregate in one SELECT); one row back, a JSON array of
# [ordinal of the key in the request, log start, hwm].
_PG_LOCK_PARTITIONS = text(
    "WITH l AS MATERIALIZED (SELECT k.i, p.log_start_offset, p.high_watermark FROM partitions AS p "
    "JOIN unnest(CAST(:tids AS uuid[]), CAST(:parts AS int[])) WITH ORDINALITY AS k(t, p, i) "
    "ON p.topic_id = k.t AND p.partition = k.p "
    "ORDER BY p.topic_id, p.partition FOR UPDATE OF p) "
    "SELECT CAST(json_agg(json_build_array(i, log_start_offset, high_watermark)) AS text) FROM l"
)
# The commit path's first statement: lock the partitions (as _PG_LOCK_PARTITIONS), read the
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
# Answers the new chunk ids as one JSON array of [file position, byte position, id]
# (RETURNING order is unspecified, so each id says which run it belongs to).
_PG_WRITE_COMMIT = text(
    "WITH fk AS (SELECT * FROM unnest(CAST(:f_keys AS text[]), CAST(:f_sizes AS bigint[]), "
    "CAST(:f_levels AS int[]), CAST(:f_states AS text[]), CAST(:f_writers AS text[])) WITH ORDINALITY "
    "AS k(key, size, level, state, writer, i)), "
    "f AS (INSERT INTO files (object_key, size_bytes, level, state, writer, created_ms, committed_ms, "
    "deleting_since_ms) SELECT key, size, level, state, writer, :now, :now, "
    "CASE WHEN state = 'deleting' THEN CAST(:now AS bigint) END FROM fk RETURNING id, object_key), "
    "c AS (INSERT INTO chunks (file_id, topic_id, partition, byte_position, byte_length, base_offset, last_offset, "
    "record_count, batch_count, max_timestamp, min_timestamp, offsets_absolute, present_offsets) "
    "SELECT f.id, k.t, k.p, k.pos, k.len, k.base, k.last, k.records, k.batches, k.maxts, k.mints, false, NULL "
    "FROM unnest(CAST(:c_file AS int[]), CAST(:c_tids AS uuid[]), CAST(:c_parts AS int[]), "
    "CAST(:c_pos AS bigint[]), CAST(:c_len AS bigint[]), CAST(:c_base AS bigint[]), CAST(:c_last AS bigint[]), "
    "CAST(:c_records AS bigint[]), CAST(:c_batches AS int[]), CAST(:c_maxts AS bigint[]), "
    "CAST(:c_mints AS bigint[])) AS k(fi, t, p, pos, len, base, last, records, batches, maxts, mints) "
    "JOIN fk ON fk.i = k.fi JOIN f ON f.object_key = fk.key RETURNING id, file_id, byte_position), "
    "h AS (UPDATE partitions AS p SET high_watermark = v.hwm "
    "FROM unnest(CAST(:h_tids AS uuid[]), CAST(:h_parts AS int[]), CAST(:h_hwms AS bigint[])) "
    "AS v(topic_id, partition, hwm) WHERE p.topic_id = v.topic_id AND p.partition = v.partition), "
    "s AS (INSERT INTO producer_state (topic_id, partition, producer_id, producer_epoch, batches, last_update_ms) "
    "SELECT k.t, k.p, k.i, k.e, CAST(k.b AS json), :now FROM unnest(CAST(:s_tids AS uuid[]), "
    "CAST(:s_parts AS int[]), CAST(:s_pids AS bigint[]), CAST(:s_epochs AS int[]), CAST(:s_batches AS text[])) "
    "AS k(t, p, i, e, b) "
    "ON CONFLICT (topic_id, partition, producer_id) DO UPDATE SET producer_epoch = EXCLUDED.producer_epoch, "
    "batches = EXCLUDED.batches, last_update_ms = EXCLUDED.last_update_ms) "
    "SELECT CAST(json_agg(json_build_array(fk.i, c.byte_position, c.id)) AS text) "
    "FROM c JOIN f ON f.id = c.file_id JOIN fk ON fk.key = f.object_key"
)
_PG_READ_PARTITIONS = text(
    "SELECT p.topic_id, p.partition, p.log_start_offset, p.high_watermark FROM partitions AS p "
    "JOIN unnest(CAST(:tids AS uuid[]), CAST(:parts AS int[])) AS k(t, p) "
    "ON p.topic_id = k.t AND p.partition = k.p"
)
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


class PgDialect:
    name = "postgresql"

    def key_batches(self, keys: Sequence[KeyT]) -> Iterable[Sequence[KeyT]]:
        yield keys  # arrays: any number of keys in one statement

    def read_partitions(self, conn: Connection, keys: Iterable[Key]) -> dict[Key, tuple[int, int]]:
        uniq = list(set(keys))
        rows = conn.execute(
            _PG_READ_PARTITIONS, {"tids": _uuid_arr(k[0] for k in uniq), "parts": _arr(k[1] for k in uniq)}
        )
        return {(r.topic_id, r.partition): (r.log_start_offset, r.high_watermark) for r in rows}

    def lock_partitions(self, conn: Connection, keys: Iterable[Key]) -> dict[Key, tuple[int, int]]:
        ordered = sorted(set(keys))
        doc = conn.execute(
            _PG_LOCK_PARTITIONS,
            {"tids": _uuid_arr(k[0] for k in ordered), "parts": _arr(k[1] for k in ordered)},
        ).scalar()
        return {ordered[i - 1]: (ls, hw) for i, ls, hw in (json.loads(doc) if doc else ())}

    def lock_files(self, conn: Connection, file_ids: Sequence[int]) -> None:
        conn.execute(
            select(files.c.id).where(files.c.id.in_(list(file_ids))).order_by(files.c.id).with_for_update()
        )

    def commit_listener(self, feed: CommitFeed, engine: Engine) -> PgCommitListener | None:
        dsn = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)

        def connect() -> object:
            import psycopg

            return psycopg.connect(dsn, autocommit=True, connect_timeout=10)

        return PgCommitListener(feed, connect)

    # ------------------------------------------------------------------ the commit path

    def lock_for_commit(
        self, conn: Connection, tindex: TopicIndex, keys: list[TKey], object_keys: list[str]
    ) -> tuple[dict[TKey, PartitionRow], bool]:
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
        locked: dict[TKey, PartitionRow] = {}
        for i, log_start, hwm in json.loads(locked_doc) if locked_doc else ():
            k = keys[i - 1]
            locked[k] = PartitionRow(log_start, hwm, *flags[k[0]])
        return locked, bool(existing)

    def load_producer_state(self, conn: Connection, tindex: TopicIndex, pkeys: list[PKey]) -> ProducerStates:
        out: ProducerStates = dict.fromkeys(pkeys)
        if not pkeys:
            return out
        make = idempotence.CachedBatch.from_json
        params = {
            "tids": "{" + ",".join(tindex.text[k[0]] for k in pkeys) + "}",
            "parts": _arr(k[1] for k in pkeys),
            "pids": _arr(k[2] for k in pkeys),
        }
        doc = conn.execute(_PG_READ_PRODUCERS, params).scalar()
        for i, epoch, batches in json.loads(doc) if doc else ():
            out[pkeys[i - 1]] = idempotence.ProducerEntry(epoch, [make(b) for b in batches])
        return out

    def write_commit(
        self,
        conn: Connection,
        file_specs: list[FileSpec],
        plans: list[CommitPlan],
        tindex: TopicIndex,
        hwms: dict[TKey, int],
        entries: list[tuple[PKey, idempotence.ProducerEntry]],
        now: int,
    ) -> list[list[int]]:
        text_ = tindex.text
        c_file: list[int] = []
        runs: list[Run] = []
        for i, plan in enumerate(plans, start=1):
            c_file.extend([i] * len(plan.runs))
            runs.extend(plan.runs)
        doc = conn.execute(
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
                "c_mints": _arr("NULL" if r.min_timestamp is None else r.min_timestamp for r in runs),
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
        ).scalar()
        ids = {(i, pos): cid for i, pos, cid in json.loads(doc)} if doc else {}
        return [[ids[(i, r.byte_position)] for r in plan.runs] for i, plan in enumerate(plans, start=1)]

    def notify_committed(self, conn: Connection, moved: list[Key]) -> None:
        if moved:  # delivered to every replica's listener if (and only if) this commits
            conn.execute(
                text("SELECT pg_notify(:channel, :payload)"),
                {"channel": NOTIFY_CHANNEL, "payload": notify_payload(moved)},
            )
