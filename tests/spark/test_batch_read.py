"""Batch reads with local Spark: exact data, every codec, option semantics, compaction
holes, data loss and errors. Data comes from a real Kafka client through a real agent,
stopped before reading (see conftest)."""

from __future__ import annotations

import json

import pytest

from tests.spark.conftest import CODECS, T0, Cluster

COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


def _load(spark, cluster: Cluster, **options):  # type: ignore[no-untyped-def]
    reader = (
        spark.read.format("skiff")
        .option("metadata.url", cluster.metadata_url)
        .option("bucket", cluster.bucket)
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _rows(df, headers: bool = False) -> list[tuple]:  # type: ignore[no-untyped-def]
    cols = COLUMNS + (["headers"] if headers else [])
    out = []
    for r in df.select(*cols).collect():
        row = [r[c] for c in cols]
        row[0] = None if row[0] is None else bytes(row[0])
        row[1] = None if row[1] is None else bytes(row[1])
        row[5] = int(row[5].timestamp() * 1000)
        if headers:
            row[7] = [
                {"key": h["key"], "value": None if h["value"] is None else bytes(h["value"])} for h in row[7]
            ]
        out.append(tuple(row))
    return sorted(out, key=lambda r: (r[2], r[3], r[4]))


def test_every_codec_reads_back_exactly(spark, cluster: Cluster) -> None:
    topics = ",".join(f"codec-{c}" for c in CODECS)
    df = _load(spark, cluster, subscribe=topics, includeHeaders="true")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"),
        ("value", "binary"),
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("timestamp", "timestamp"),
        ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>"),
    ]
    expected = sorted(
        (r for c in CODECS for r in cluster.produced.rows[f"codec-{c}"]), key=lambda r: (r[2], r[3], r[4])
    )
    assert len(expected) == 600
    assert _rows(df, headers=True) == expected


def test_without_headers_the_schema_is_kafkas(spark, cluster: Cluster) -> None:
    df = _load(spark, cluster, subscribe="codec-zstd")
    assert df.columns == COLUMNS
    assert df.count() == 120


def test_log_append_time(spark, cluster: Cluster) -> None:
    rows = _rows(_load(spark, cluster, subscribe="logappend"))
    assert rows == [r[:7] for r in cluster.produced.rows["logappend"]]
    assert {r[6] for r in rows} == {1}
    assert all(r[5] != T0 + i for i, r in enumerate(rows))  # the broker's time, not the producer's


def test_offsets_json_and_sql(spark, cluster: Cluster) -> None:
    df = _load(
        spark,
        cluster,
        subscribe="wide",
        startingOffsets=json.dumps({"wide": {"0": 10, "1": -2, "2": 99}}),
        endingOffsets=json.dumps({"wide": {"0": 20, "1": 5, "2": -1}}),
    )
    df.createOrReplaceTempView("wide_slice")
    got = spark.sql(
        "SELECT partition, min(offset) lo, max(offset) hi, count(*) n FROM wide_slice GROUP BY partition ORDER BY partition"
    ).collect()
    assert [tuple(r) for r in got] == [(0, 10, 19, 10), (1, 0, 4, 5), (2, 99, 99, 1)]


def test_assign_and_pattern(spark, cluster: Cluster) -> None:
    assigned = _rows(_load(spark, cluster, assign=json.dumps({"wide": [2]})))
    assert {r[3] for r in assigned} == {2} and len(assigned) == 100
    by_pattern = _load(spark, cluster, subscribePattern="codec-(gzip|lz4)")
    assert sorted(r.topic for r in by_pattern.select("topic").distinct().collect()) == [
        "codec-gzip",
        "codec-lz4",
    ]
    assert _load(spark, cluster, subscribePattern="codec").count() == 0  # whole-name match, as Java's


def test_timestamps_and_precedence(spark, cluster: Cluster) -> None:
    # wide's record i has timestamp T0 + 1000 i and lives in partition i % 3
    df = _load(
        spark,
        cluster,
        subscribe="wide",
        startingTimestamp=str(T0 + 150_000),
        startingOffsetsByTimestamp=json.dumps({"wide": {"0": 0, "1": 0, "2": 0}}),  # ignored
        startingOffsets="earliest",  # ignored
        endingOffsetsByTimestamp=json.dumps(
            {"wide": {"0": T0 + 160_500, "1": T0 + 200_000, "2": T0 + 10**9}}
        ),
    )
    values = sorted(int(bytes(r.value)[1:]) for r in df.select("value").collect())
    expected = [
        i for i in range(150, 300) if (i % 3 == 0 and i < 161) or (i % 3 == 1 and i < 200) or i % 3 == 2
    ]
    assert values == expected


def test_min_partitions_and_max_records_split_like_spark(spark, cluster: Cluster) -> None:
    plain = _load(spark, cluster, subscribe="wide")
    assert plain.rdd.getNumPartitions() == 3
    split = _load(spark, cluster, subscribe="wide", minPartitions="6")
    assert split.rdd.getNumPartitions() == 6
    # Spark's arithmetic, not an exact count: round(100 / 300 * 7) = 2 parts per partition
    assert _load(spark, cluster, subscribe="wide", minPartitions="7").rdd.getNumPartitions() == 6
    capped = _load(spark, cluster, subscribe="wide", maxRecordsPerPartition="30")
    assert capped.rdd.getNumPartitions() == 12  # 100 offsets per partition: 4 parts of <= 30
    assert sorted(_rows(capped)) == sorted(_rows(plain))
    assert len(_rows(plain)) == 300


def test_compacted_chunk_returns_survivors_at_original_offsets(spark, cluster: Cluster) -> None:
    rows = _rows(_load(spark, cluster, subscribe="compacted"))
    assert [(r[4], r[0], r[1]) for r in rows] == cluster.compacted_survivors
    assert len(rows) == 6 and len(cluster.produced.rows["compacted"]) == 60  # keys k{i*i % 11}: 6 distinct
    offsets = [r[4] for r in rows]
    assert offsets != list(range(offsets[0], offsets[0] + len(offsets)))  # there are holes
    mid = _rows(
        _load(spark, cluster, subscribe="compacted", startingOffsets=json.dumps({"compacted": {"0": 50}}))
    )
    assert [r[4] for r in mid] == [o for o in offsets if o >= 50]


def test_offsets_below_log_start_follow_fail_on_data_loss(spark, cluster: Cluster) -> None:
    start = json.dumps({"trimmed": {"0": 5}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        _load(spark, cluster, subscribe="trimmed", startingOffsets=start).collect()
    rows = _rows(_load(spark, cluster, subscribe="trimmed", startingOffsets=start, failOnDataLoss="false"))
    assert [r[4] for r in rows] == list(range(20, 50))
    assert [r[4] for r in _rows(_load(spark, cluster, subscribe="trimmed"))] == list(range(20, 50))


def test_errors_a_data_engineer_can_act_on(spark, cluster: Cluster) -> None:
    with pytest.raises(Exception, match="unknown topic"):
        _load(spark, cluster, subscribe="no-such-topic").collect()
    with pytest.raises(Exception, match="exactly the assigned partitions"):
        _load(spark, cluster, subscribe="wide", startingOffsets=json.dumps({"wide": {"0": 1}})).collect()
    with pytest.raises(Exception, match="cannot reach the Skiff metadata service"):
        spark.read.format("skiff").option("metadata.url", "http://127.0.0.1:9").option(
            "bucket", cluster.bucket
        ).option("subscribe", "wide").load().collect()
    with pytest.raises(Exception, match="exactly one of the options subscribe"):
        _load(spark, cluster).collect()
    with pytest.raises(Exception, match="cannot be latest"):
        _load(spark, cluster, subscribe="wide", startingOffsets="latest").collect()


def _reader_usage(cluster: Cluster) -> tuple[int, int]:
    """(GETs, bytes in) the cluster's readers reported to metadata (metadata.usage)."""
    from skiff.metadata.service import MetadataService

    svc = MetadataService.from_url(f"sqlite:///{cluster.db_path}")
    try:
        u = svc.usage.usage_totals(0).get("reader")
    finally:
        svc.close()
    return (0, 0) if u is None else (u.gets, u.bytes_in)


def test_executors_report_their_gets_as_the_reader_role(spark, cluster: Cluster) -> None:  # type: ignore[no-untyped-def]
    """Each task's GETs reach metadata (role reader), one ranged GET per chunk read, with the
    bytes; with metadata.reportUsage=false nothing is reported."""
    from skiff.spark.source import SkiffDataSource, SkiffInputPartition

    topics = ",".join(f"codec-{c}" for c in CODECS)
    source = SkiffDataSource(
        {"metadata.url": cluster.metadata_url, "bucket": cluster.bucket, "subscribe": topics}
    )
    planned = [p for p in source.reader(source.schema()).partitions() if isinstance(p, SkiffInputPartition)]
    chunks = sum(len(p.task.chunks) for p in planned)
    chunk_bytes = sum(c.byte_length for p in planned for c in p.task.chunks)
    before = _reader_usage(cluster)
    assert _load(spark, cluster, subscribe=topics).count() > 0
    gets, bytes_in = _reader_usage(cluster)
    assert (gets - before[0], bytes_in - before[1]) == (chunks, chunk_bytes)
    assert _load(spark, cluster, subscribe=topics, **{"metadata.reportUsage": "false"}).count() > 0
    assert _reader_usage(cluster) == (gets, bytes_in)
