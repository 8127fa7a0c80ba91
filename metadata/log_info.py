"""What Kafka's admin APIs ask of a partition beyond its offsets, read from the metadata
database: the bytes it holds in the bucket (DescribeLogDirs: the sum of its live chunks'
byte lengths, which is what it occupies in the bucket's files) and its producers
(DescribeProducers: the `producer_state` rows the commit path keeps for idempotence, with
the open transaction of each from `txn_open`).

Both read in one read transaction per call, by (topic id, partition) in batches of
`IDS_PER_STATEMENT` (an indexed prefix of the chunk index and of `producer_state`'s
primary key). The
producer answer is bounded (`MAX_PRODUCERS` rows per call, in (topic, partition, producer)
order): `producer_state` keeps every producer that ever wrote a partition, where Kafka
forgets a producer `producer.id.expiration.ms` after its last write.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from skiff.metadata.db import read_tx
from skiff.metadata.rows import IDS_PER_STATEMENT, Db
from skiff.metadata.schema import chunks, producer_state, txn_open
from skiff.metadata.types import ActiveProducer, PartitionKey
from sqlalchemy import and_, func, select, tuple_

MAX_PRODUCERS = 10_000


def _key_batches(keys: Sequence[PartitionKey]) -> list[list[tuple[uuid.UUID, int]]]:
    pairs = sorted({(k.topic_id, int(k.partition)) for k in keys})
    return [pairs[i : i + IDS_PER_STATEMENT] for i in range(0, len(pairs), IDS_PER_STATEMENT)]


class LogInfo:
    def __init__(self, db: Db) -> None:
        self._db = db

    def partition_sizes(self, keys: Sequence[PartitionKey]) -> list[int]:
        """The bytes of each partition's chunks (0 for a partition with none, or unknown)."""
        c = chunks.c
        sizes: dict[tuple[uuid.UUID, int], int] = {}
        with read_tx(self._db.engine) as conn:
            for batch in _key_batches(keys):
                stmt = (
                    select(c.topic_id, c.partition, func.sum(c.byte_length))
                    .where(tuple_(c.topic_id, c.partition).in_(batch))
                    .group_by(c.topic_id, c.partition)
                )
                sizes.update({(r[0], int(r[1])): int(r[2]) for r in conn.execute(stmt)})
        return [sizes.get((k.topic_id, k.partition), 0) for k in keys]

    def describe_producers(self, keys: Sequence[PartitionKey]) -> list[ActiveProducer]:
        """The producers of the partitions, in (topic, partition, producer id) order: each
        one's epoch, last sequence (of its newest batch), last commit time and open
        transaction. At most MAX_PRODUCERS."""
        s, o = producer_state.c, txn_open.c
        out: list[ActiveProducer] = []
        with read_tx(self._db.engine) as conn:
            for batch in _key_batches(keys):
                stmt = (
                    select(s.topic_id, s.partition, s.producer_id, s.producer_epoch, s.batches)
                    .add_columns(s.last_update_ms, o.first_offset)
                    .outerjoin(
                        txn_open,
                        and_(
                            o.topic_id == s.topic_id,
                            o.partition == s.partition,
                            o.producer_id == s.producer_id,
                        ),
                    )
                    .where(tuple_(s.topic_id, s.partition).in_(batch))
                    .order_by(s.topic_id, s.partition, s.producer_id)
                    .limit(MAX_PRODUCERS - len(out))
                )
                for r in conn.execute(stmt):
                    batches = r.batches or []
                    out.append(
                        ActiveProducer(
                            r.topic_id,
                            int(r.partition),
                            int(r.producer_id),
                            int(r.producer_epoch),
                            int(batches[-1][1]) if batches else -1,
                            int(r.last_update_ms),
                            -1 if r.first_offset is None else int(r.first_offset),
                        )
                    )
                if len(out) >= MAX_PRODUCERS:
                    break
        return out[:MAX_PRODUCERS]
