"""The streaming reader as Spark before 4.2 drives it: no admission control, so
`latestOffset()` comes without a start or a limit and the reader applies
`maxOffsetsPerTrigger` itself. Spark 4.3 (installed) never takes this path, so these tests
make Spark's calls directly, in the order its MicroBatchExecution makes them for a source
without admission control, against the real metadata process and bucket of the Spark test
cluster (no SparkSession needed). Topic `wide`: 3 partitions of 100 records each."""

from __future__ import annotations

from typing import Any

import pytest
from skiff.spark import stream
from skiff.spark.options import parse_options
from skiff.spark.source import read_partition
from skiff.spark.stream import SkiffStreamReader, parse_offsets

from tests.spark.conftest import Cluster

LIMIT = 30


@pytest.fixture
def old_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """pyspark before 4.2 has no ReadLimit classes: the module's import fallback."""
    monkeypatch.setattr(stream, "ReadMaxRows", None)
    monkeypatch.setattr(stream, "ReadAllAvailable", None)


def _reader(cluster: Cluster) -> SkiffStreamReader:
    opts = parse_options(
        {
            "metadata.url": cluster.metadata_url,
            "subscribe": "wide",
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": str(LIMIT),
        },
        streaming=True,
    )
    return SkiffStreamReader(opts)


def _read(reader: SkiffStreamReader, start: dict, end: dict) -> list[tuple[int, int, bytes]]:
    """Plan a micro-batch and run its tasks as executors would: (partition, offset, value)s."""
    out = []
    for task in reader.partitions(start, end):
        for batch in read_partition(task):
            d = batch.to_pydict()
            out.extend(zip(d["partition"], d["offset"], d["value"], strict=True))
    return out


def _run_batches(reader: SkiffStreamReader, start: dict) -> tuple[list[Any], list[int], dict]:
    """Spark < 4.2's loop: latestOffset(), and while it moved, partitions(start, end), read,
    commit(end). Answers the rows, each batch's size and the last end."""
    rows: list[Any] = []
    sizes = []
    while True:
        end = reader.latestOffset()
        if parse_offsets(end) == parse_offsets(start):
            return rows, sizes, end
        batch = _read(reader, start, end)
        sizes.append(len(batch))
        rows.extend(batch)
        reader.commit(end)
        start = end


def _wide(cluster: Cluster, first_offset: dict[int, int]) -> list[tuple[int, int, bytes]]:
    rows = cluster.produced.rows["wide"]  # (key, value, topic, partition, offset, ...)
    return sorted((r[3], r[4], r[1]) for r in rows if r[4] >= first_offset[r[3]])


def test_old_spark_has_no_default_read_limit(cluster: Cluster, old_spark: None) -> None:
    assert _reader(cluster).getDefaultReadLimit() is None


def test_new_query_first_batch_takes_all_available(cluster: Cluster, old_spark: None) -> None:
    # A new query: Spark < 4.2 asks latestOffset() first, then initialOffset() for the start.
    reader = _reader(cluster)
    end = reader.latestOffset()
    assert end == {"wide": {"0": 100, "1": 100, "2": 100}}  # unlimited: see the next tests
    start = reader.initialOffset()
    assert start == {"wide": {"0": 0, "1": 0, "2": 0}}
    rows = _read(reader, start, end)
    assert sorted(rows) == _wide(cluster, {0: 0, 1: 0, 2: 0})
    reader.commit(end)
    assert reader.latestOffset() == end  # nothing new: the same offsets, no batch


def test_restart_replaying_an_unfinished_batch_then_limits_itself(cluster: Cluster, old_spark: None) -> None:
    # Restarted from a checkpoint whose last batch (10..20 per partition) was planned but not
    # committed: Spark replays it (partitions(start, end)), commits it, then asks latestOffset().
    reader = _reader(cluster)
    start = {"wide": {"0": 10, "1": 10, "2": 10}}
    end = {"wide": {"0": 20, "1": 20, "2": 20}}
    replayed = _read(reader, start, end)
    reader.commit(end)
    assert sorted(replayed) == [r for r in _wide(cluster, {0: 10, 1: 10, 2: 10}) if r[1] < 20]
    rows, sizes, last = _run_batches(reader, end)
    # 80 left per partition; 30 per batch shared by backlog: 10 each, then the tail
    assert sizes == [30] * 8
    assert last == {"wide": {"0": 100, "1": 100, "2": 100}}
    assert sorted(replayed + rows) == _wide(cluster, {0: 10, 1: 10, 2: 10})  # each record once


def test_restart_after_a_committed_batch_never_goes_behind_the_checkpoint(
    cluster: Cluster, old_spark: None
) -> None:
    # Restarted after batch (.., {50, 60, 70}) was committed: Spark < 4.2 calls nothing but
    # latestOffset() and then plans from the checkpoint's offsets. Counting a limit from the
    # starting offsets (earliest) would answer offsets behind the checkpoint.
    reader = _reader(cluster)
    checkpoint = {"wide": {"0": 50, "1": 60, "2": 70}}
    end = reader.latestOffset()
    assert all(end["wide"][p] >= checkpoint["wide"][p] for p in checkpoint["wide"])
    rows = _read(reader, checkpoint, end)
    reader.commit(end)
    assert sorted(rows) == _wide(cluster, {0: 50, 1: 60, 2: 70})
    more, sizes, _ = _run_batches(reader, end)
    assert more == [] and sizes == []
