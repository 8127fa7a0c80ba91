"""Filter pushdown (`skiff.spark.pushdown`): filters on partition, offset and timestamp prune
the plan, and a filtered query still answers exactly what a full scan plus the filter does.

The truth is the same query with option pushFilters=false (no pushdown: every chunk read,
Spark filters) and the producer's delivery reports; what is read is the planned chunks'
bytes (the executors GET exactly those ranges), asked of the reader Spark would use.
"""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    Not,
)
from skiff.fileformat.chunk_reader import ChunkLocation
from skiff.spark.options import parse_options
from skiff.spark.pushdown import ScanBounds, bounds_of, chunk_may_match
from skiff.spark.source import SkiffBatchReader, SkiffDataSource, SkiffInputPartition, SkiffPushdownReader

from tests.spark.conftest import T0, Cluster

UTC = datetime.UTC


def at_ms(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=UTC)


def test_bounds_of_the_filters_spark_pushes() -> None:
    bounds = bounds_of(
        [
            In(("partition",), (0, 2, 5)),
            LessThan(("partition",), 5),
            GreaterThanOrEqual(("offset",), 10),
            LessThanOrEqual(("offset",), 40),
            GreaterThan(("offset",), 11),
            GreaterThan(("timestamp",), at_ms(T0)),
            GreaterThanOrEqual(("timestamp",), at_ms(T0 - 5)),
            LessThan(("timestamp",), at_ms(T0 + 9)),
            LessThanOrEqual(("timestamp",), at_ms(T0 + 7)),
            EqualTo(("key",), b"k"),  # another column: ignored
            Not(EqualTo(("partition",), 0)),  # a negation: ignored (Spark applies it)
            EqualTo(("timestamp",), datetime.datetime(2024, 1, 1)),  # naive: ignored
        ]
    )
    assert bounds == ScanBounds(
        partitions=frozenset({0, 2, 5}),
        partition_min=0,
        partition_max=4,
        offset_min=12,
        offset_max=40,
        timestamp_min_us=T0 * 1000 + 1,
        timestamp_max_us=(T0 + 7) * 1000,
    )
    assert bounds_of([EqualTo(("value",), b"x")]) == ScanBounds()
    assert bounds_of([EqualTo(("timestamp",), at_ms(T0))]) == ScanBounds(
        timestamp_min_us=T0 * 1000, timestamp_max_us=T0 * 1000
    )


def chunk(min_ms: int | None, max_ms: int) -> ChunkLocation:
    return ChunkLocation(1, "f", 0, 100, 0, 9, 10, max_ms, min_timestamp=min_ms)


def test_a_chunk_is_left_out_only_when_its_time_range_misses_the_bounds() -> None:
    """A record at t ms reads as t * 1000 us; a chunk with no min (NULL: written before
    metadata kept it) is never left out by an upper bound."""
    upto = ScanBounds(timestamp_max_us=(T0 + 10) * 1000)
    assert chunk_may_match(chunk(T0 + 10, T0 + 50), upto)  # its oldest record is at the bound
    assert not chunk_may_match(chunk(T0 + 11, T0 + 50), upto)
    assert chunk_may_match(chunk(None, T0 + 50), upto)
    assert chunk_may_match(chunk(None, T0 + 50), ScanBounds(timestamp_max_us=0))
    since = ScanBounds(timestamp_min_us=(T0 + 50) * 1000)
    assert chunk_may_match(chunk(None, T0 + 50), since)
    assert not chunk_may_match(chunk(T0, T0 + 49), since)
    # an interval: both ends count
    window = ScanBounds(timestamp_min_us=(T0 + 20) * 1000, timestamp_max_us=(T0 + 30) * 1000)
    assert chunk_may_match(chunk(T0 + 30, T0 + 40), window)
    assert chunk_may_match(chunk(T0, T0 + 20), window)
    assert not chunk_may_match(chunk(T0 + 31, T0 + 40), window)
    assert not chunk_may_match(chunk(T0, T0 + 19), window)
    # a sub-millisecond bound: a record at T0 + 30 ms is after T0 + 29.999 ms
    assert not chunk_may_match(chunk(T0 + 30, T0 + 40), ScanBounds(timestamp_max_us=(T0 + 30) * 1000 - 1))


def frame(spark, cluster: Cluster, push: bool, topic: str = "wide"):  # type: ignore[no-untyped-def]
    return (
        spark.read.format("skiff")
        .option("metadata.url", cluster.metadata_url)
        .option("subscribe", topic)
        .option("pushFilters", str(push).lower())
        .load()
    )


def planned_bytes(cluster: Cluster, filters: list) -> tuple[int, int]:  # type: ignore[type-arg]
    """(chunks, bytes) the batch query plans to read with `filters` pushed."""
    opts = parse_options({"metadata.url": cluster.metadata_url, "subscribe": "wide"})
    reader = SkiffPushdownReader(opts)
    assert list(reader.pushFilters(filters)) == filters  # every filter stays Spark's to apply
    parts = [p for p in reader.partitions() if isinstance(p, SkiffInputPartition)]
    chunks = [c for p in parts for c in p.task.chunks]
    return len(chunks), sum(c.byte_length for c in chunks)


def test_reader_chosen_by_option(cluster: Cluster) -> None:
    source = SkiffDataSource({"metadata.url": cluster.metadata_url, "subscribe": "wide"})
    assert isinstance(source.reader(None), SkiffPushdownReader)  # type: ignore[arg-type]
    source = SkiffDataSource(
        {"metadata.url": cluster.metadata_url, "subscribe": "wide", "pushFilters": "false"}
    )
    reader = source.reader(None)  # type: ignore[arg-type]
    assert type(reader) is SkiffBatchReader


def test_timestamp_lower_bound_reads_fewer_chunks(cluster: Cluster) -> None:
    full = planned_bytes(cluster, [])
    # `wide` went out in 4 flushes of 75 records (T0 + 1000 * i): the last flush's chunks only
    late = planned_bytes(cluster, [GreaterThanOrEqual(("timestamp",), at_ms(T0 + 1000 * 280))])
    assert 0 < late[0] < full[0] and late[1] < full[1] / 2
    assert planned_bytes(cluster, [GreaterThan(("timestamp",), at_ms(T0 + 1000 * 300))]) == (0, 0)


def test_timestamp_upper_bound_reads_fewer_chunks(cluster: Cluster) -> None:
    full = planned_bytes(cluster, [])
    # the first flush's chunks only (records T0 .. T0 + 74 s)
    early = planned_bytes(cluster, [LessThan(("timestamp",), at_ms(T0 + 1000 * 20))])
    assert 0 < early[0] < full[0] and early[1] < full[1] / 2
    assert planned_bytes(cluster, [LessThan(("timestamp",), at_ms(T0))]) == (0, 0)
    assert planned_bytes(cluster, [LessThanOrEqual(("timestamp",), at_ms(T0))])[0] > 0
    window = [
        GreaterThanOrEqual(("timestamp",), at_ms(T0 + 1000 * 150)),
        LessThanOrEqual(("timestamp",), at_ms(T0 + 1000 * 160)),
    ]
    assert 0 < planned_bytes(cluster, window)[1] < full[1] / 2


def test_partition_and_offset_bounds_prune_tasks(cluster: Cluster) -> None:
    full = planned_bytes(cluster, [])
    one = planned_bytes(cluster, [EqualTo(("partition",), 1)])
    assert 0 < one[1] < full[1] / 2
    assert planned_bytes(cluster, [In(("partition",), (7, 8))]) == (0, 0)
    head = planned_bytes(cluster, [LessThan(("offset",), 5)])
    assert 0 < head[1] < full[1] / 2


FILTERS = [
    "partition = 1",
    "partition in (0, 2) and offset between 10 and 40",
    "offset > 90 or partition = 0",
    f"timestamp >= timestamp_millis({T0 + 1000 * 280})",
    f"timestamp > timestamp_millis({T0 + 1000 * 150}) and timestamp < timestamp_millis({T0 + 1000 * 200})",
    f"timestamp <= timestamp_millis({T0 + 1000 * 74})",
    f"timestamp < timestamp_millis({T0 + 1000 * 75}) or partition = 2",
    f"partition = 2 and timestamp >= timestamp_millis({T0 + 1000 * 100}) and offset < 60",
    "offset = 1000",
    "key = cast('k7' as binary) and partition = 1",
]


@pytest.mark.parametrize("condition", FILTERS)
def test_filtered_query_is_exact(spark, cluster: Cluster, condition: str) -> None:  # type: ignore[no-untyped-def]
    columns = ["partition", "offset", "timestamp", "key", "value"]
    pushed = frame(spark, cluster, True).where(condition).select(*columns).collect()
    plain = frame(spark, cluster, False).where(condition).select(*columns).collect()
    got = sorted((r.partition, r.offset, r.key, r.value) for r in pushed)
    assert got == sorted((r.partition, r.offset, r.key, r.value) for r in plain)
    # and both against what the producer was told (partition, offset, key, value)
    truth = {(r[3], r[4]): r for r in cluster.produced.rows["wide"]}
    for partition, offset, key, value in got:
        assert truth[(partition, offset)][:2] == (key, value)


def executor_read(cluster: Cluster, filters: list) -> tuple[dict[str, int], int, list[tuple[int, int, int]]]:  # type: ignore[type-arg]
    """The executors' reads of the planned tasks through one store: (its requests, bytes
    received, the (partition, offset, timestamp ms) rows decoded)."""
    from skiff.fileformat.objectstore import open_store
    from skiff.spark.executor import read_task

    opts = parse_options({"metadata.url": cluster.metadata_url, "subscribe": "wide"})
    reader = SkiffPushdownReader(opts)
    reader.pushFilters(filters)
    store = open_store(cluster.bucket)
    rows = []
    for part in reader.partitions():
        assert isinstance(part, SkiffInputPartition)
        for batch in read_task(
            part.task, part.bucket, include_headers=False, fail_on_data_loss=True, store=store
        ):
            d = batch.to_pydict()
            # epoch milliseconds whatever the column's unit (no local-time conversion)
            stamps = batch.column("timestamp").cast(pa.timestamp("ms")).cast(pa.int64()).to_pylist()
            rows += list(zip(d["partition"], d["offset"], stamps, strict=True))
    snap = store.stats.snapshot()
    return dict(snap.requests), snap.bytes_in, rows


def test_executors_get_fewer_bytes_and_every_matching_row(cluster: Cluster) -> None:
    bound_ms = T0 + 1000 * 280
    full_requests, full_bytes, full_rows = executor_read(cluster, [])
    requests, got_bytes, rows = executor_read(cluster, [GreaterThanOrEqual(("timestamp",), at_ms(bound_ms))])
    assert sum(requests.values()) < sum(full_requests.values())
    assert got_bytes < full_bytes / 2
    wanted = sorted(r for r in full_rows if r[2] >= bound_ms)
    assert len(wanted) == 20
    assert sorted(r for r in rows if r[2] >= bound_ms) == wanted
    # and an upper bound: every row at or before it, from fewer bytes
    upto_ms = T0 + 1000 * 19
    requests, got_bytes, rows = executor_read(cluster, [LessThanOrEqual(("timestamp",), at_ms(upto_ms))])
    assert got_bytes < full_bytes / 2
    wanted = sorted(r for r in full_rows if r[2] <= upto_ms)
    assert len(wanted) == 20
    assert sorted(r for r in rows if r[2] <= upto_ms) == wanted


def test_session_setting_and_reads_without_it(spark, cluster: Cluster) -> None:  # type: ignore[no-untyped-def]
    from skiff.spark.session import FILTER_PUSHDOWN_KEY

    assert spark.conf.get(FILTER_PUSHDOWN_KEY) == "true"  # skiff_session() turned it on
    spark.conf.set(FILTER_PUSHDOWN_KEY, "false")
    try:
        # Spark refuses a source taking filters with the setting off; pushFilters=false reads
        with pytest.raises(Exception, match="DATA_SOURCE_PUSHDOWN_DISABLED"):
            frame(spark, cluster, True).where("partition = 1").count()
        assert frame(spark, cluster, False).where("partition = 1").count() == 100
    finally:
        spark.conf.set(FILTER_PUSHDOWN_KEY, "true")
