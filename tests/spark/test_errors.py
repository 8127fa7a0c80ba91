"""Errors a data engineer can act on, raised by the code Spark runs on the driver
(`SkiffBatchReader.partitions`, the stream reader's offsets) and on executors
(`read_partition`), called directly: no SparkSession, so each case costs milliseconds.
(tests/spark/test_batch_read.py checks a few of them through Spark, as PythonExceptions.)
Against the Spark test cluster's metadata process and bucket, and moto's S3 server."""

from __future__ import annotations

import json

import pytest
from skiff.fileformat.objectstore import open_store
from skiff.spark.options import parse_options
from skiff.spark.planner import SkiffSourceError
from skiff.spark.source import SkiffBatchReader, read_partition
from skiff.spark.stream import SkiffStreamReader

from tests.spark.conftest import Cluster
from tests.support.s3servers import S3Bucket


def _plan(cluster: Cluster, **options: str) -> list:
    opts = parse_options({"metadata.url": cluster.metadata_url, "bucket": cluster.bucket, **options})
    return list(SkiffBatchReader(opts).partitions())


def test_unknown_topic_and_partition(cluster: Cluster) -> None:
    with pytest.raises(SkiffSourceError, match=r"^unknown topic\(s\): no-such-topic$"):
        _plan(cluster, subscribe="wide,no-such-topic")
    with pytest.raises(SkiffSourceError, match="^unknown topic: nope$"):
        _plan(cluster, assign=json.dumps({"wide": [0], "nope": [0]}))
    with pytest.raises(SkiffSourceError, match="topic wide has 3 partitions; partition 3 does not exist"):
        _plan(cluster, assign=json.dumps({"wide": [3]}))


def test_unreachable_metadata_names_the_url_and_the_option() -> None:
    # port 9 (discard) on loopback: nothing listens there
    opts = parse_options({"metadata.url": "http://127.0.0.1:9", "subscribe": "wide", "bucket": "file:///x"})
    with pytest.raises(SkiffSourceError) as err:
        SkiffBatchReader(opts).partitions()
    assert "cannot reach the Skiff metadata service at http://127.0.0.1:9" in str(err.value)
    assert "metadata.url" in str(err.value)


@pytest.mark.parametrize(
    ("option", "given", "not_assigned", "missing"),
    [
        # a partition the topic does not have
        ("startingOffsets", {"wide": {"0": 1, "1": 1, "2": 1, "3": 1}}, ["wide-3"], []),
        # a topic the query does not subscribe to, and partitions left out
        ("endingOffsets", {"wide": {"0": 5}, "logappend": {"0": 5}}, ["logappend-0"], ["wide-1", "wide-2"]),
        ("startingOffsetsByTimestamp", {"wide": {"1": 0}}, [], ["wide-0", "wide-2"]),
    ],
)
def test_offsets_json_naming_the_wrong_partitions(
    cluster: Cluster, option: str, given: dict, not_assigned: list[str], missing: list[str]
) -> None:
    expected = (
        f"{option} must name exactly the assigned partitions: not assigned {not_assigned}, missing {missing}"
    )
    with pytest.raises(SkiffSourceError) as err:
        _plan(cluster, subscribe="wide", **{option: json.dumps(given)})
    assert str(err.value) == expected
    # a streaming query checks its starting offsets the same way
    if option.startswith("starting"):
        opts = parse_options(
            {"metadata.url": cluster.metadata_url, "subscribe": "wide", option: json.dumps(given)},
            streaming=True,
        )
        with pytest.raises(SkiffSourceError) as stream_err:
            SkiffStreamReader(opts).initialOffset()
        assert str(stream_err.value) == expected


def test_missing_credentials_on_executors(
    cluster: Cluster, moto_s3: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `wide` topic's objects copied to an S3 bucket: an executor without AWS
    credentials fails naming the bucket, the cause and the settings to fix; with them it
    reads every record."""
    tasks = _plan(cluster, subscribe="wide")
    source = open_store(cluster.bucket)
    moto_s3.setenv(monkeypatch)
    target = open_store(moto_s3.url())
    for key in {c.object_key for t in tasks for c in t.task.chunks}:
        target.put(key, source.get(key))
    for t in tasks:
        t.bucket = moto_s3.url()

    rows = sorted(
        (r["partition"], r["offset"]) for t in tasks for b in read_partition(t) for r in b.to_pylist()
    )
    assert rows == sorted((r[3], r[4]) for r in cluster.produced.rows["wide"])

    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var)
    with pytest.raises(SkiffSourceError) as err:
        list(read_partition(tasks[0]))
    message = str(err.value)
    assert f"from the bucket {moto_s3.url()}" in message
    assert "no usable AWS credentials" in message
    assert "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY" in message
