"""Structured Streaming with local Spark: two waves of produces through a live agent, each
drained by a Trigger.AvailableNow query into a parquet sink, restarted from its checkpoint
in between; every record lands exactly once. Also: the bucket URL from metadata, offset
arithmetic (Spark's rate limit) and the error when no bucket is known anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest
from skiff.spark.options import parse_options
from skiff.spark.planner import SkiffSourceError, resolve_bucket
from skiff.spark.stream import offsets_json, parse_offsets, rate_limit

from tests.spark.conftest import Cluster, drain


def _produce(bootstrap: str, topic: str, records: list[tuple[int, bytes]]) -> list[tuple[int, int, bytes]]:
    """Send (partition, value)s; answer (partition, offset, value) from delivery reports."""
    from confluent_kafka import Producer

    sent: list[tuple[int, int, bytes]] = []

    def report(err, msg) -> None:  # type: ignore[no-untyped-def]
        assert err is None, err
        sent.append((msg.partition(), msg.offset(), msg.value()))

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for partition, value in records:
        p.produce(topic, value, partition=partition, on_delivery=report)
    assert p.flush(30) == 0
    return sent


def _drain(spark, cluster: Cluster, checkpoint: Path, sink: Path) -> list[int]:  # type: ignore[no-untyped-def]
    return drain(spark, cluster, "stream", checkpoint, sink, {"maxOffsetsPerTrigger": "40"})


def test_two_waves_with_a_restart_land_exactly_once(
    spark, cluster: Cluster, bootstrap: str, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic("stream", 2, 1)]).values():
        fut.result(30)
    checkpoint, sink = tmp_path / "checkpoint", tmp_path / "sink"

    wave1 = _produce(bootstrap, "stream", [(i % 2, f"w1-{i}".encode()) for i in range(100)])
    batches1 = _drain(spark, cluster, checkpoint, sink)
    # maxOffsetsPerTrigger=40 through admission control: 100 records take 3 micro-batches
    assert batches1 == [40, 40, 20]

    # between the runs a partition is added: the restarted query reads it from its earliest offset
    for fut in admin.create_partitions([NewPartitions("stream", 3)]).values():
        fut.result(30)
    wave2 = _produce(bootstrap, "stream", [(i % 3, f"w2-{i}".encode()) for i in range(60)])
    batches2 = _drain(spark, cluster, checkpoint, sink)  # a new query on the same checkpoint
    assert sum(batches2) == 60 and max(batches2) <= 40

    got = sorted((r.partition, r.offset, bytes(r.value)) for r in spark.read.parquet(str(sink)).collect())
    assert got == sorted(wave1 + wave2)  # every record, once
    assert {p for p, _, _ in got} == {0, 1, 2}

    # nothing new: a third run reads nothing and writes nothing
    assert _drain(spark, cluster, checkpoint, sink) == []
    assert spark.read.parquet(str(sink)).count() == 160


def test_batch_read_takes_the_bucket_from_metadata(spark, cluster: Cluster) -> None:
    df = (
        spark.read.format("skiff")
        .option("metadata.url", cluster.metadata_url)
        .option("subscribe", "logappend")
        .load()
    )
    assert sorted(bytes(r.value) for r in df.select("value").collect()) == sorted(
        r[1] for r in cluster.produced.rows["logappend"]
    )


def test_no_bucket_anywhere_is_a_clear_error() -> None:
    class NoBucket:
        base_url = "http://metadata:9093"

        def bucket_url(self) -> None:
            return None

    opts = parse_options({"metadata.url": "http://metadata:9093", "subscribe": "t"})
    with pytest.raises(SkiffSourceError, match="skiff metadata --bucket"):
        resolve_bucket(NoBucket(), opts)  # type: ignore[arg-type]
    with_option = parse_options({"metadata.url": "http://m", "subscribe": "t", "bucket": "file:///b"})
    assert resolve_bucket(NoBucket(), with_option) == "file:///b"  # type: ignore[arg-type]


def test_rate_limit_shares_like_spark() -> None:
    begin = {("a", 0): 0, ("a", 1): 100, ("b", 0): 5}
    until = {("a", 0): 90, ("a", 1): 109, ("b", 0): 6}
    # backlogs 90, 9, 1 (total 100) share 10: floor(9), floor(0.9)->ceil 1, ceil(0.1) = 1
    assert rate_limit(10, begin, until) == {("a", 0): 9, ("a", 1): 101, ("b", 0): 6}
    assert rate_limit(1000, begin, until) == until
    assert rate_limit(10, until, until) == until  # nothing to read


def test_offsets_round_trip_as_spark_kafka_json() -> None:
    offsets = {("orders", 1): 40, ("orders", 0): 23, ("audit", 0): 7}
    as_json = offsets_json(offsets)
    assert as_json == {"audit": {"0": 7}, "orders": {"0": 23, "1": 40}}
    assert parse_offsets(as_json) == offsets
