"""`kafka.isolation.level` with local Spark, on data written by confluent-kafka's
transactional producers through a live agent.

Two transactional producers (A and B) and an idempotent non-transactional one write to a
2-partition topic so that committed and aborted transactions interleave with each other
and with plain records (B's aborted transaction spans A's committed one; an aborted
transaction spans several batches with plain records between them), then B leaves a
transaction open, and plain records follow it. The truth is the delivery reports.

- read_uncommitted (the default, as Spark's Kafka source): every data record at its
  offset, open and aborted transactions included, and never a marker;
- read_committed: exactly the committed and non-transactional records below each
  partition's last stable offset (the open transaction's first offset), also when the
  ranges are split into tasks in the middle of transactions; `latest` is the LSO and an
  ending offset above it is an error;
- a lost ABORT marker (failOnDataLoss=false, its object deleted from the bucket): on a
  topic of its own, producer C aborts a transaction then commits one; C's committed
  records are still read (the aborted range ends at the marker's offset metadata
  knows), and the aborted ones are not;
- streaming (Trigger.AvailableNow, small micro-batches): the same records; after B
  commits, a restart from the checkpoint reads the rest, each record once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import Cluster, drain

TOPIC = "txn-mixed"
PARTITIONS = 2
LOST_TOPIC = "txn-lost-marker"


@dataclass
class TxnData:
    # label -> (partition, offset, value) of every record sent with that label
    records: dict[str, list[tuple[int, int, bytes]]] = field(default_factory=dict)
    committed_labels: set[str] = field(default_factory=set)
    open_producer: Any = None

    def rows(self, labels: set[str]) -> list[tuple[int, int, bytes]]:
        return sorted(r for label in labels for r in self.records[label])

    @property
    def everything(self) -> list[tuple[int, int, bytes]]:
        return self.rows(set(self.records))

    def last_stable_offsets(self) -> dict[int, int]:
        """The open transaction's first offset in each partition."""
        return {p: min(o for q, o, _ in self.records["b3"] if q == p) for p in range(PARTITIONS)}

    def committed_below_lso(self) -> list[tuple[int, int, bytes]]:
        lso = self.last_stable_offsets()
        return [r for r in self.rows(self.committed_labels) if r[1] < lso[r[0]]]


@pytest.fixture(scope="module")
def txn_data(bootstrap: str) -> Iterator[TxnData]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    data = TxnData()

    def producer(txn: str | None) -> Producer:
        config: dict[str, Any] = {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
        if txn is not None:
            # far longer than the module runs: the open transaction must stay open
            config |= {"transactional.id": f"{txn}-{uuid.uuid4().hex[:6]}", "transaction.timeout.ms": 600_000}
        p = Producer(config)
        if txn is not None:
            p.init_transactions(30)
        return p

    def send(p: Producer, label: str, n: int) -> None:
        rows = data.records.setdefault(label, [])

        def report(err, msg) -> None:  # type: ignore[no-untyped-def]
            assert err is None, err
            rows.append((msg.partition(), msg.offset(), msg.value()))

        start = len(rows)
        for i in range(start, start + n):
            p.produce(TOPIC, f"{label}-{i}".encode(), partition=i % PARTITIONS, on_delivery=report)
        assert p.flush(30) == 0

    plain, a, b = producer(None), producer("A"), producer("B")
    send(plain, "n0", 4)
    a.begin_transaction()
    send(a, "a1", 4)
    send(plain, "n1", 2)
    b.begin_transaction()
    send(b, "b1", 4)  # aborted, spanning A's commit and plain records
    a.commit_transaction(30)
    send(plain, "n2", 2)
    b.abort_transaction(30)
    a.begin_transaction()
    send(a, "a2", 4)
    a.abort_transaction(30)
    b.begin_transaction()
    send(b, "b2", 6)
    b.commit_transaction(30)
    send(plain, "n3", 2)
    a.begin_transaction()
    send(a, "a3", 4)  # aborted over several batches with plain records between them
    send(plain, "n4", 2)
    send(a, "a3", 4)
    a.abort_transaction(30)
    b.begin_transaction()
    send(b, "b3", 4)  # left open: it holds back the last stable offset
    send(plain, "n5", 4)
    data.committed_labels = {"n0", "n1", "n2", "n3", "n4", "n5", "a1", "b2"}
    data.open_producer = b
    yield data
    if "b3" not in data.committed_labels:  # a test stopped before committing it
        b.abort_transaction(30)
    data.open_producer = None
    del plain, a, b  # before the agent stops: no reconnect noise


def _load(spark, cluster: Cluster, **options: str):  # type: ignore[no-untyped-def]
    reader = (
        spark.read.format("skiff").option("metadata.url", cluster.metadata_url).option("subscribe", TOPIC)
    )
    for k, v in options.items():
        reader = reader.option(k.replace("_", "."), v)
    return reader.load()


def _rows(df) -> list[tuple[int, int, bytes]]:  # type: ignore[no-untyped-def]
    return sorted((r.partition, r.offset, bytes(r.value)) for r in df.collect())


def test_read_uncommitted_is_the_default_and_returns_every_data_record(
    spark, cluster: Cluster, txn_data: TxnData
) -> None:
    everything = txn_data.everything
    default = _rows(_load(spark, cluster))
    assert default == everything  # open and aborted transactions too, no marker
    assert _rows(_load(spark, cluster, kafka_isolation_level="read_uncommitted")) == everything
    # the markers are offsets too: the data records leave holes where they are
    offsets = {(p, o) for p, o, _ in everything}
    span = {(p, o) for p in range(PARTITIONS) for o in range(max(o for q, o, _ in everything if q == p) + 1)}
    assert len(span - offsets) >= 2 * 5  # five completed transactions wrote a marker per partition


def test_read_committed_returns_committed_records_below_the_lso(
    spark, cluster: Cluster, txn_data: TxnData
) -> None:
    want = txn_data.committed_below_lso()
    assert {v.split(b"-")[0] for _, _, v in want} == {b"n0", b"n1", b"n2", b"n3", b"n4", b"a1", b"b2"}
    got = _rows(_load(spark, cluster, kafka_isolation_level="READ_COMMITTED"))
    assert got == want
    # tasks cut in the middle of transactions: each carries its aborted ranges
    split = _load(spark, cluster, kafka_isolation_level="read_committed", minPartitions="9")
    assert split.rdd.getNumPartitions() >= 9
    assert _rows(split) == want


def test_read_committed_latest_is_the_lso(spark, cluster: Cluster, txn_data: TxnData) -> None:
    import json

    lso = txn_data.last_stable_offsets()
    at_lso = json.dumps({TOPIC: {str(p): o for p, o in lso.items()}})
    explicit = _load(spark, cluster, kafka_isolation_level="read_committed", endingOffsets=at_lso)
    assert _rows(explicit) == txn_data.committed_below_lso()
    above = json.dumps({TOPIC: {str(p): o + 1 for p, o in lso.items()}})
    with pytest.raises(Exception, match="is above the last stable offset"):
        _load(spark, cluster, kafka_isolation_level="read_committed", endingOffsets=above).collect()
    # read_uncommitted may read past it, up to the high watermark
    assert len(_rows(_load(spark, cluster, endingOffsets=above))) > len(txn_data.committed_below_lso())


def test_plans_carry_the_aborted_transactions_and_end_at_the_lso(cluster: Cluster, txn_data: TxnData) -> None:
    """The driver's side without Spark: tasks end at the LSO and carry the aborted
    transactions of their ranges; the stream reader's latest offsets are the LSOs."""
    from skiff.spark.options import parse_options
    from skiff.spark.source import SkiffBatchReader
    from skiff.spark.stream import SkiffStreamReader

    base = {
        "metadata.url": cluster.metadata_url,
        "subscribe": TOPIC,
        "kafka.isolation.level": "read_committed",
    }
    lso = txn_data.last_stable_offsets()
    parts = SkiffBatchReader(parse_options({**base, "minPartitions": "6"})).partitions()
    tasks = [part.task for part in parts]  # type: ignore[attr-defined]
    assert {p: max(t.until_offset for t in tasks if t.partition == p) for p in range(PARTITIONS)} == lso
    # b1, a2 and a3 were aborted, each on both partitions; every task knows those it overlaps
    assert len({(t.partition, a) for t in tasks for a in t.aborted}) == 3 * PARTITIONS
    data_offsets = {(p, o) for p, o, _ in txn_data.everything}
    for t in tasks:
        assert all(first < t.until_offset for _, first, _ in t.aborted)
        # each with its ABORT marker's offset: after its first, and no data record's
        assert all(first < last and (t.partition, last) not in data_offsets for _, first, last in t.aborted)
    uncommitted = SkiffBatchReader(parse_options({**base, "kafka.isolation.level": "read_uncommitted"}))
    assert all(not part.task.aborted for part in uncommitted.partitions())  # type: ignore[attr-defined]

    reader = SkiffStreamReader(parse_options({**base, "startingOffsets": "earliest"}, streaming=True))
    start = reader.initialOffset()
    assert reader.latestOffset(start, None) == {TOPIC: {str(p): o for p, o in lso.items()}}
    assert reader.reportLatestOffset() == {TOPIC: {str(p): o for p, o in lso.items()}}


@pytest.fixture(scope="module")
def lost_marker(bootstrap: str) -> dict[str, list[tuple[int, int, bytes]]]:
    """Producer C, on a 1-partition topic of its own: a transaction aborted, then one
    committed. The records sent, by label ("aborted", "committed")."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # held: the future needs it alive
    admin.create_topics([NewTopic(LOST_TOPIC, 1, 1)])[LOST_TOPIC].result(30)
    p = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "transactional.id": f"C-{uuid.uuid4().hex[:6]}"}
    )
    p.init_transactions(30)
    records: dict[str, list[tuple[int, int, bytes]]] = {}
    for label, commit in (("aborted", False), ("committed", True)):
        rows = records.setdefault(label, [])

        def report(err, msg, rows=rows) -> None:  # type: ignore[no-untyped-def]
            assert err is None, err
            rows.append((msg.partition(), msg.offset(), msg.value()))

        p.begin_transaction()
        for i in range(3):
            p.produce(LOST_TOPIC, f"{label}-{i}".encode(), partition=0, on_delivery=report)
            assert p.flush(30) == 0  # a batch each
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    del p
    return records


def test_a_lost_abort_marker_loses_nothing_more(
    spark, cluster: Cluster, lost_marker: dict[str, list[tuple[int, int, bytes]]]
) -> None:
    """The object holding C's ABORT marker (alone: markers get a file of their own) is
    deleted. With failOnDataLoss=false the read skips it and still returns C's committed
    transaction, which a range left open until C's next marker would drop."""
    import asyncio

    from skiff.fileformat.objectstore import open_store
    from skiff.metadata.types import FetchQuery
    from skiff.metadata.wire.http_client import HttpMetadataClient

    async def marker_chunk():  # type: ignore[no-untyped-def]
        client = HttpMetadataClient(cluster.metadata_url)
        try:
            topic = (await client.describe_topics([LOST_TOPIC]))[LOST_TOPIC]
            (info,) = await client.find_chunks([FetchQuery(topic.topic_id, 0, 0, 1 << 30, isolation_level=1)])
            ((_, first, marker),) = info.aborted_ranges
            (chunk,) = [c for c in info.chunks if c.base_offset <= marker <= c.last_offset]
            return first, marker, chunk, await client.file_chunks(chunk.object_key)
        finally:
            await client.close()

    first, marker, chunk, held = asyncio.run(marker_chunk())
    aborted_offsets = [o for _, o, _ in lost_marker["aborted"]]
    assert first == min(aborted_offsets) and marker > max(aborted_offsets)
    # the object holds that marker only: deleting it loses nothing any other test reads
    assert [(c.topic_name, c.location.base_offset, c.location.last_offset) for c in held.chunks] == [
        (LOST_TOPIC, marker, marker)
    ]
    open_store(cluster.bucket).delete(chunk.object_key)

    committed = {"subscribe": LOST_TOPIC, "kafka_isolation_level": "read_committed"}
    with pytest.raises(Exception, match="is gone from the bucket"):
        _load(spark, cluster, **committed).collect()
    assert _rows(_load(spark, cluster, **committed, failOnDataLoss="false")) == sorted(
        lost_marker["committed"]
    )


def _drain(spark, cluster: Cluster, checkpoint: Path, sink: Path) -> list[int]:  # type: ignore[no-untyped-def]
    """Small micro-batches (7 offsets), so that they are cut inside transactions."""
    options = {"kafka.isolation.level": "read_committed", "maxOffsetsPerTrigger": "7"}
    return drain(spark, cluster, TOPIC, checkpoint, sink, options)


def test_streaming_read_committed_stops_at_the_lso_then_reads_the_commit(
    spark, cluster: Cluster, txn_data: TxnData, tmp_path: Path
) -> None:
    """Last in the module: it commits the open transaction."""
    checkpoint, sink = tmp_path / "checkpoint", tmp_path / "sink"
    first = _drain(spark, cluster, checkpoint, sink)
    assert len(first) > 1  # several micro-batches, cut inside transactions
    got = sorted((r.partition, r.offset, bytes(r.value)) for r in spark.read.parquet(str(sink)).collect())
    assert got == txn_data.committed_below_lso()

    txn_data.open_producer.commit_transaction(30)  # the markers move the LSO to the end
    txn_data.committed_labels.add("b3")
    _drain(spark, cluster, checkpoint, sink)
    got = sorted((r.partition, r.offset, bytes(r.value)) for r in spark.read.parquet(str(sink)).collect())
    assert got == txn_data.rows(txn_data.committed_labels)  # each committed record once
