"""Topics: create, delete, list, describe, alter configs, add partitions.

A topic row holds its name, id, partition count and the configs set explicitly on it
(`metadata.configs` validates them and knows the defaults); each partition has a row
holding its log start offset and high watermark. Deleting a topic locks its partitions
(as every operation that changes chunks does), deletes its chunks, producer state,
partitions and group offsets, and marks the files left without chunks `deleting`.

Deleting a topic also deletes, in the same transaction, its partitions' transaction rows:
`txn_open` (which held their last stable offset), `txn_aborted`, and the offsets staged
for it by unfinished transactions (`txn_offsets`, by topic name), so that a topic
re-created with that name (a new topic id) inherits none of them. A transaction that
included the deleted topic still completes: its `transactions` row keeps naming the old
topic id, and the markers for those partitions are refused by the commit path
(UNKNOWN_TOPIC_OR_PARTITION for those chunks only) while the file's other markers are
stored and its `completes` applied.

`create_topics` creates up to `MAX_TOPICS_PER_CREATE_BATCH` topics in one transaction: each is
validated as `create_topic` validates it (one owner, `_new_topic`), the names that exist are
read in one query per `IDS_PER_STATEMENT` names, and the new topics and their partitions are
inserted with one statement each. Per-topic errors are reported in the topic's result. If a
concurrent create wins a name (IntegrityError), the batch is retried topic by topic so that
only that topic gets TOPIC_ALREADY_EXISTS.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from skiff.metadata import configs
from skiff.metadata.db import read_tx, write_tx
from skiff.metadata.errors import (
    INVALID_CONFIG,
    INVALID_PARTITIONS,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_OR_PARTITION,
    MetadataError,
)
from skiff.metadata.rows import IDS_PER_STATEMENT, Db, mark_orphan_files_deleting, topic_from_row
from skiff.metadata.schema import (
    chunks,
    compaction_state,
    group_offsets,
    partitions,
    producer_state,
    topics,
    txn_aborted,
    txn_offsets,
    txn_open,
)
from skiff.metadata.types import MAX_TOPICS_PER_CREATE_BATCH, NewTopic, Topic, TopicCreation
from sqlalchemy import Connection, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

# Kafka has no limit; creating a topic inserts one row per partition, so we keep one.
MAX_PARTITIONS_PER_TOPIC = 100_000


def _exists(name: str) -> TopicCreation:
    return TopicCreation(name, None, TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")


def _new_topic(name: str, partition_count: int, configs_: dict[str, str]) -> Topic:
    """The topic to insert (a new id, normalized configs); MetadataError if it is invalid."""
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
    return Topic(name=name, topic_id=uuid.uuid4(), partition_count=partition_count, configs=normalized)


class TopicAdmin:
    def __init__(self, db: Db) -> None:
        self._db = db

    def create_topic(self, name: str, partition_count: int, configs_: dict[str, str]) -> Topic:
        topic = _new_topic(name, partition_count, configs_)
        try:
            with write_tx(self._db.engine) as conn:
                if conn.execute(select(topics.c.topic_id).where(topics.c.name == name)).first() is not None:
                    raise MetadataError(TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
                self._insert(conn, [topic])
        except IntegrityError:  # a concurrent create of the same name won the race
            raise MetadataError(TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.") from None
        return topic

    def create_topics(self, new: Sequence[NewTopic]) -> list[TopicCreation]:
        """Each topic as `create_topic` would create it, in one transaction (see the module
        docstring); per-topic errors in its result, in the order of `new`."""
        if len(new) > MAX_TOPICS_PER_CREATE_BATCH:
            raise MetadataError(
                INVALID_REQUEST, f"{len(new)} topics in one create, over {MAX_TOPICS_PER_CREATE_BATCH}"
            )
        results: list[TopicCreation | None] = [None] * len(new)
        valid: list[tuple[int, Topic]] = []
        for i, t in enumerate(new):
            try:
                valid.append((i, _new_topic(t.name, t.partition_count, t.configs)))
            except MetadataError as e:
                results[i] = TopicCreation(t.name, None, e.error_code, e.message)
        try:
            with write_tx(self._db.engine) as conn:
                names = sorted({topic.name for _, topic in valid})
                existing: set[str] = set()
                for j in range(0, len(names), IDS_PER_STATEMENT):
                    q = select(topics.c.name).where(topics.c.name.in_(names[j : j + IDS_PER_STATEMENT]))
                    existing.update(r[0] for r in conn.execute(q))
                created: list[Topic] = []
                for i, topic in valid:
                    if topic.name in existing:  # also a second copy of a name in this batch
                        results[i] = _exists(topic.name)
                    else:
                        existing.add(topic.name)
                        created.append(topic)
                        results[i] = TopicCreation(topic.name, topic)
                self._insert(conn, created)
        except IntegrityError:
            # A concurrent create took one of the names: create them one by one, so that only
            # that topic gets TOPIC_ALREADY_EXISTS.
            for i, topic in valid:
                try:
                    results[i] = TopicCreation(
                        topic.name, self.create_topic(topic.name, topic.partition_count, topic.configs)
                    )
                except MetadataError as e:
                    results[i] = TopicCreation(topic.name, None, e.error_code, e.message)
        return [r for r in results if r is not None]

    def _insert(self, conn: Connection, new: Sequence[Topic]) -> None:
        """The rows of topics just checked to be absent: the topic and its partitions."""
        if not new:
            return
        now = self._db.clock()
        conn.execute(
            insert(topics),
            [
                {
                    "topic_id": t.topic_id,
                    "name": t.name,
                    "partition_count": t.partition_count,
                    "configs": t.configs,
                    "created_ms": now,
                }
                for t in new
            ],
        )
        conn.execute(
            insert(partitions),
            [
                {"topic_id": t.topic_id, "partition": p, "log_start_offset": 0, "high_watermark": 0}
                for t in new
                for p in range(t.partition_count)
            ],
        )

    def delete_topic(self, name: str) -> None:
        now = self._db.clock()
        with write_tx(self._db.engine) as conn:
            row = conn.execute(
                select(topics.c.topic_id, topics.c.partition_count)
                .where(topics.c.name == name)
                .with_for_update()
            ).first()
            if row is None:
                raise MetadataError(UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
            tid = row.topic_id
            self._db.dialect.lock_partitions(conn, [(tid, p) for p in range(row.partition_count)])
            file_ids = [
                r[0]
                for r in conn.execute(select(chunks.c.file_id).where(chunks.c.topic_id == tid).distinct())
            ]
            conn.execute(delete(chunks).where(chunks.c.topic_id == tid))
            mark_orphan_files_deleting(self._db, conn, file_ids, now)
            conn.execute(delete(producer_state).where(producer_state.c.topic_id == tid))
            conn.execute(delete(compaction_state).where(compaction_state.c.topic_id == tid))
            conn.execute(delete(partitions).where(partitions.c.topic_id == tid))
            conn.execute(delete(topics).where(topics.c.topic_id == tid))
            conn.execute(delete(group_offsets).where(group_offsets.c.topic == name))
            conn.execute(delete(txn_open).where(txn_open.c.topic_id == tid))
            conn.execute(delete(txn_aborted).where(txn_aborted.c.topic_id == tid))
            conn.execute(delete(txn_offsets).where(txn_offsets.c.topic == name))

    def list_topics(self) -> list[Topic]:
        with read_tx(self._db.engine) as conn:
            rows = conn.execute(select(topics).order_by(topics.c.name)).all()
        return [topic_from_row(r) for r in rows]

    def describe_topics(self, names: Sequence[str]) -> dict[str, Topic]:
        wanted = sorted(set(names))
        out: dict[str, Topic] = {}
        with read_tx(self._db.engine) as conn:
            for i in range(0, len(wanted), IDS_PER_STATEMENT):
                for r in conn.execute(
                    select(topics).where(topics.c.name.in_(wanted[i : i + IDS_PER_STATEMENT]))
                ):
                    out[r.name] = topic_from_row(r)
        return out

    def topics_by_id(self, topic_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Topic]:
        wanted = sorted(set(topic_ids))
        out: dict[uuid.UUID, Topic] = {}
        with read_tx(self._db.engine) as conn:
            for i in range(0, len(wanted), IDS_PER_STATEMENT):
                q = select(topics).where(topics.c.topic_id.in_(wanted[i : i + IDS_PER_STATEMENT]))
                for r in conn.execute(q):
                    out[r.topic_id] = topic_from_row(r)
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
        with write_tx(self._db.engine) as conn:
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
        with write_tx(self._db.engine) as conn:
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
