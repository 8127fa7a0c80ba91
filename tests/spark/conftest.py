"""Fixtures for the Spark tests: ONE local SparkSession per test run (start-up costs ~18 s)
and ONE data set, produced by a real Kafka client (confluent-kafka) through a real
`skiff agent` process backed by a `skiff metadata` process and a file:// bucket. The agent
is stopped before any test reads: Spark reads the bucket and asks only metadata.

The data set:
- `codec-<name>` for every codec (2 partitions, keys with nulls, values with nulls, headers,
  explicit CreateTime timestamps);
- `logappend` (message.timestamp.type=LogAppendTime);
- `wide` (3 partitions, 300 records with increasing timestamps: option semantics);
- `compacted` (1 partition; after the agent stops, its chunks are replaced with metadata's
  `replace_chunks` by one segment written with absolute offsets and a present-offset bitmap
  holding the latest record of each key, as the compactor's output looks);
- `trimmed` (1 partition; its log start is then moved to 20 in the metadata database, as
  retention or DeleteRecords does, to exercise failOnDataLoss).

Java and pyspark are required: without them these tests fail, they never skip.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.agents import _spawn
from tests.support.s3servers import free_port

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
T0 = 1_700_000_000_000
AGENT_ID = "spark-tests"


@dataclass
class Produced:
    """What the producer was told (delivery reports): the truth to compare with."""

    rows: dict[str, list[tuple]] = field(default_factory=dict)  # topic -> rows sorted by (partition, offset)


@dataclass
class Cluster:
    metadata_url: str
    bucket: str
    db_path: Path
    produced: Produced
    compacted_survivors: list[tuple[int, bytes, bytes]]  # (offset, key, value)
    agent_port: int  # the stopped agent's port and id: a later agent taking both is at once
    agent_id: str  # the same broker to clients and metadata (no wait for the old one to expire)


def drain(  # type: ignore[no-untyped-def]
    spark, cluster: Cluster, topic: str, checkpoint: Path, sink: Path, options: dict[str, str]
) -> list[int]:
    """Run a streaming query on `topic` once with Trigger.AvailableNow, from the earliest
    offsets (or from `checkpoint`'s), into a parquet sink of (partition, offset, value);
    answer each non-empty micro-batch's row count. `options` are the source's further
    options (rate limit, isolation level). No bucket option: metadata knows it."""
    reader = (
        spark.readStream.format("skiff")
        .option("metadata.url", cluster.metadata_url)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    query = (
        reader.load()
        .selectExpr("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(sink))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    if shutil.which("java") is None:
        pytest.fail("java is not on PATH: the Spark tests need Java 17 (scripts/setup.sh installs it)")
    try:
        from pyspark.sql import SparkSession  # noqa: F401
    except ImportError:
        pytest.fail("pyspark is not installed: install the spark extra (pip install -e '.[test,spark]')")
    from skiff.spark import skiff_session

    session = skiff_session(
        "skiff-tests",
        "local[2]",
        {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            # No driver address here: a local session binds to 127.0.0.1 by default
            # (skiff.spark.session), and tests/spark/test_session.py asserts it of this one.
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _produce(bootstrap: str, produced: Produced) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(f"codec-{c}", 2, 1) for c in CODECS]
    topics += [
        NewTopic("logappend", 1, 1, config={"message.timestamp.type": "LogAppendTime"}),
        NewTopic("wide", 3, 1),
        NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact"}),
        NewTopic("trimmed", 1, 1),
    ]
    for fut in admin.create_topics(topics).values():
        fut.result(30)

    def send(topic: str, records: list[tuple], codec: str = "none", batches: int = 1) -> None:
        p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "compression.type": codec,
                "linger.ms": 5,
                "enable.idempotence": True,
            }
        )
        rows = produced.rows.setdefault(topic, [])

        def report(sent_headers, err, msg) -> None:  # type: ignore[no-untyped-def]
            assert err is None, err
            ts_type, ts = msg.timestamp()
            # delivery reports do not carry headers back: the ones sent are the truth
            headers = [{"key": k, "value": v} for k, v in sent_headers]
            rows.append(
                (msg.key(), msg.value(), topic, msg.partition(), msg.offset(), ts, ts_type - 1, headers)
            )

        per = max(len(records) // batches, 1)
        for start in range(0, len(records), per):
            for partition, key, value, ts, headers in records[start : start + per]:
                p.produce(
                    topic,
                    value,
                    key,
                    partition=partition,
                    timestamp=ts,
                    headers=headers,
                    on_delivery=lambda err, msg, h=headers: report(h, err, msg),
                )
            assert p.flush(30) == 0
        rows.sort(key=lambda r: (r[3], r[4]))

    for c in CODECS:
        send(
            f"codec-{c}",
            [
                (
                    i % 2,
                    None if i % 9 == 0 else f"key-{i}".encode(),
                    None if i % 13 == 5 else (f"value-{i}-" * (i % 17)).encode(),
                    T0 + i,
                    [("h1", f"v{i}".encode()), ("empty", b""), ("nul", None)] if i % 3 else [],
                )
                for i in range(120)
            ],
            c,
            batches=3,
        )
    send("logappend", [(0, b"k", f"v{i}".encode(), T0 + i, []) for i in range(10)])
    send(
        "wide",
        [(i % 3, f"k{i}".encode(), f"v{i}".encode(), T0 + 1000 * i, []) for i in range(300)],
        batches=4,
    )
    send(
        "compacted",
        [(0, f"k{(i * i) % 11}".encode(), f"v{i}".encode(), T0 + i, []) for i in range(60)],
        batches=3,
    )
    send("trimmed", [(0, None, f"v{i}".encode(), T0 + i, []) for i in range(50)], batches=2)


def _compact(metadata_url: str, bucket_dir: Path, produced: Produced) -> list[tuple[int, bytes, bytes]]:
    """Replace `compacted`'s chunks by one compactor-style chunk: absolute offsets, only the
    latest record per key, and the bitmap of the offsets present."""
    from skiff.fileformat.objectstore import open_store
    from skiff.fileformat.record_build import build_batch
    from skiff.fileformat.segment import ChunkInput, build_segment
    from skiff.metadata import bitmaps
    from skiff.metadata.types import FetchQuery, FileSpec, OutputChunk
    from skiff.metadata.wire.http_client import HttpMetadataClient

    rows = produced.rows["compacted"]
    latest: dict[bytes, tuple] = {}
    for r in rows:
        latest[r[0]] = r
    survivors = sorted(latest.values(), key=lambda r: r[4])
    base, last = rows[0][4], rows[-1][4]

    async def swap() -> None:
        client = HttpMetadataClient(metadata_url)
        try:
            topic = (await client.describe_topics(["compacted"]))["compacted"]
            (info,) = await client.find_chunks([FetchQuery(topic.topic_id, 0, base, 1 << 30)])
            assert info.chunks and len(info.chunks) >= 2, info
            batch = build_batch(
                [(r[4] - base, r[5], r[0], r[1], []) for r in survivors],
                base_offset=base,
                last_offset_delta=last - base,
            )
            present = bitmaps.from_absolute(base, [r[4] for r in survivors])
            chunk = ChunkInput(
                topic.topic_id,
                0,
                [batch],
                1,
                len(survivors),
                survivors[0][5],
                max(r[5] for r in survivors),
                base,
                last,
                present,
            )
            data, (placement,) = build_segment([chunk], offsets_absolute=True)
            key = f"compacted/{uuid.uuid4().hex}.seg"
            open_store(f"file://{bucket_dir}").put(key, data)
            await client.replace_chunks(
                [c.chunk_id for c in info.chunks],
                FileSpec(key, len(data), level=1, writer="spark-test"),
                [
                    OutputChunk(
                        topic.topic_id,
                        0,
                        placement.data_position,
                        placement.byte_length,
                        base,
                        last,
                        len(survivors),
                        1,
                        max(r[5] for r in survivors),
                        present,
                    )
                ],
            )
        finally:
            await client.close()

    asyncio.run(swap())
    return [(r[4], r[0], r[1]) for r in survivors]


def _trim(db_path: Path, metadata_url: str, log_start: int) -> None:
    """Move `trimmed`'s log start, as retention or DeleteRecords does (metadata has no
    HTTP operation for it yet, so the test writes the row)."""
    from skiff.metadata.wire.http_client import HttpMetadataClient

    async def topic_id() -> uuid.UUID:
        client = HttpMetadataClient(metadata_url)
        try:
            return (await client.describe_topics(["trimmed"]))["trimmed"].topic_id
        finally:
            await client.close()

    tid = asyncio.run(topic_id())
    with sqlite3.connect(db_path) as conn:
        n = conn.execute(
            "UPDATE partitions SET log_start_offset = ? WHERE topic_id = ? AND partition = 0",
            (log_start, tid.hex),
        ).rowcount
        assert n == 1


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("skiff-spark")
    db_path = base / "metadata.db"
    bucket_dir = base / "bucket"
    bucket_dir.mkdir()
    mport, aport = free_port(), free_port()
    # metadata is told the bucket, so queries may leave out the bucket option
    metadata = _spawn(
        [
            "metadata",
            "--db",
            f"sqlite:///{db_path}",
            "--port",
            str(mport),
            "--bucket",
            f"file://{bucket_dir}",
        ],
        mport,
        base / "metadata.log",
    )
    metadata_url = f"http://127.0.0.1:{mport}"
    try:
        agent = _spawn(
            ["agent", "--bucket", f"file://{bucket_dir}", "--metadata", metadata_url, "--port", str(aport)],
            aport,
            base / "agent.log",
            env={"SKIFF_AGENT_ID": AGENT_ID},
        )
        produced = Produced()
        try:
            _produce(agent.bootstrap, produced)
        finally:
            agent.kill(signal.SIGTERM)
        assert not agent.alive()
        survivors = _compact(metadata_url, bucket_dir, produced)
        _trim(db_path, metadata_url, 20)
        yield Cluster(metadata_url, f"file://{bucket_dir}", db_path, produced, survivors, aport, AGENT_ID)
    finally:
        metadata.kill(signal.SIGTERM)


@pytest.fixture(scope="module")
def bootstrap(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A live agent on the cluster's metadata and bucket (the batch tests' agent is stopped).
    It takes the stopped agent's id and port: metadata still lists that agent until its
    heartbeat expires, and this way the listed broker is this one."""
    port = cluster.agent_port
    log = tmp_path_factory.mktemp("stream-agent") / "agent.log"
    agent = _spawn(
        ["agent", "--bucket", cluster.bucket, "--metadata", cluster.metadata_url, "--port", str(port)],
        port,
        log,
        env={"SKIFF_AGENT_ID": cluster.agent_id},
    )
    try:
        yield agent.bootstrap
    finally:
        agent.kill(signal.SIGTERM)
