"""Consumer lag from the metadata database at scrape time (metadata.server.metrics_queries),
on SQLite and PostgreSQL, with the injected clock:

- per (group, topic): the sum and the max over partitions of high watermark minus
  committed offset (0 for an offset at or past the watermark), only over partitions with
  a committed offset; per group, seconds since its latest commit;
- offsets of a deleted (unknown) topic are left out;
- the number of pairs is bounded: past the cap, the largest lags are kept and
  `skiff_consumer_lag_pairs` still counts every pair.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from skiff.metadata.db import read_tx
from skiff.metadata.server import metrics_queries
from skiff.metadata.service import MetadataService
from skiff.metadata.types import BatchSpec, ChunkSpec, FileSpec, GroupOffset

from tests.support.metadata_fixtures import FakeClock


def produce(svc: MetadataService, topic: str, partition: int, records: int, key: str) -> None:
    t = svc.describe_topics([topic])[topic]
    batch = BatchSpec(0, 70, records, records, 0)
    svc.commit_file(FileSpec(key, 70, 0), [ChunkSpec(t.topic_id, partition, (batch,))])


def families(svc: MetadataService) -> dict[str, Any]:
    with read_tx(svc.engine) as conn:
        found: Iterator[Any] = metrics_queries.lag_families(conn, svc.clock())
        return {f.name: {tuple(sorted(s.labels.items())): s.value for s in f.samples} for f in found}


def test_lag_sum_and_max_per_group_and_topic_and_commit_age(
    metadata_service: MetadataService, clock: FakeClock
) -> None:
    svc = metadata_service
    svc.create_topic("orders", 3, {})
    svc.create_topic("other", 1, {})
    produce(svc, "orders", 0, 100, "f0")
    produce(svc, "orders", 1, 40, "f1")
    produce(svc, "orders", 2, 10, "f2")
    produce(svc, "other", 0, 5, "f3")
    # partition 2 has no committed offset: not counted; partition 1 is past nothing
    svc.commit_offsets("g1", [GroupOffset("orders", 0, 70), GroupOffset("orders", 1, 40)])
    # -2 is a client's "earliest" sentinel (KafkaJS's resetOffsets), stored as sent: no lag
    svc.commit_offsets("g1", [GroupOffset("orders", 2, -2)])
    clock.advance(5_000)
    svc.commit_offsets("g2", [GroupOffset("other", 0, 0)])
    clock.advance(2_500)

    m = families(svc)
    assert m["skiff_consumer_lag_sum"] == {
        (("group", "g1"), ("topic", "orders")): 30,
        (("group", "g2"), ("topic", "other")): 5,
    }
    assert m["skiff_consumer_lag_max"][(("group", "g1"), ("topic", "orders"))] == 30
    assert m["skiff_consumer_committed_offset_age_seconds"] == {
        (("group", "g1"),): 7.5,
        (("group", "g2"),): 2.5,
    }
    assert m["skiff_consumer_lag_pairs"] == {(): 2}


def test_deleted_topics_are_skipped_and_the_pairs_are_capped(metadata_service: MetadataService) -> None:
    svc = metadata_service
    svc.create_topic("a", 1, {})
    svc.create_topic("gone", 1, {})
    produce(svc, "a", 0, 50, "f0")
    for i in range(5):
        svc.commit_offsets(f"g{i}", [GroupOffset("a", 0, 10 * i)])
    svc.commit_offsets("g0", [GroupOffset("gone", 0, 0)])
    svc.delete_topic("gone")

    with read_tx(svc.engine) as conn:
        rows, total = metrics_queries.lag_rows(conn, limit=2)
    assert total == 5
    assert [(r.group_id, int(r.lag_sum)) for r in rows] == [("g0", 50), ("g1", 40)]
