"""Real Kafka clients against `skiff playground` over TCP: every codec and acks setting.

Each client produces to a multi-partition topic with keys, null keys, headers and
tombstones, then consumes everything back; `clientcheck.check_consumed` demands exact
bytes, contiguous offsets, per-partition order, nothing missing or duplicated.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.e2e.clientcheck import Got, Msg, check_consumed, make_messages

PARTITIONS = 4
COUNT = 240


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, partitions, 1)])[name]
    fut.result(timeout=30)


def consume_all_confluent(
    bootstrap: str, topic: str, expected: int, partitions: int = PARTITIONS
) -> list[Got]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 200,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[Got] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                continue
            got.append(Got(m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers() or ())))
    finally:
        c.close()
    return got


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_confluent_kafka_roundtrip(playground: str, codec: str, acks: str) -> None:
    topic = f"ck-{codec}-{acks}-{uuid.uuid4().hex[:6]}"
    create_topic(playground, topic)
    msgs = make_messages(COUNT, PARTITIONS, seed=topic)
    p = Producer(
        {
            "bootstrap.servers": playground,
            "compression.codec": codec,
            "acks": acks,
            "linger.ms": 5,
            "enable.idempotence": acks == "all",
        }
    )
    delivered: list[tuple[int, int]] = []
    errors: list[object] = []

    def on_delivery(err: object, m: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((m.partition(), m.offset()))  # type: ignore[attr-defined]

    for m in msgs:
        p.produce(
            topic,
            key=m.key,
            value=m.value,
            partition=m.partition,
            headers=list(m.headers),
            on_delivery=on_delivery,
        )
        p.poll(0)
    assert p.flush(60) == 0
    assert not errors
    if acks != "0":
        # offsets reported at produce time are the ones consumers see
        per_partition: dict[int, list[int]] = {}
        for part, off in delivered:
            per_partition.setdefault(part, []).append(off)
        for part, offs in per_partition.items():
            assert sorted(offs) == list(range(len(offs))), f"partition {part}: {offs[:10]}"
    check_consumed(msgs, consume_all_confluent(playground, topic, COUNT))


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_roundtrip(playground: str, codec: str | None) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import TopicPartition as KTP

    topic = f"kp-{codec}-{uuid.uuid4().hex[:6]}"
    create_topic(playground, topic)
    msgs = make_messages(COUNT, PARTITIONS, seed=topic)
    producer = KafkaProducer(bootstrap_servers=playground, compression_type=codec, acks="all", linger_ms=5)
    futures = [
        producer.send(topic, key=m.key, value=m.value, partition=m.partition, headers=list(m.headers))
        for m in msgs
    ]
    producer.flush(60)
    for f in futures:
        f.get(timeout=60)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=playground, enable_auto_commit=False, fetch_max_wait_ms=200)
    consumer.assign([KTP(topic, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    got: list[Got] = []
    deadline = time.monotonic() + 60
    while len(got) < COUNT and time.monotonic() < deadline:
        for tp, records in consumer.poll(timeout_ms=500).items():
            got.extend(
                Got(tp.partition, r.offset, r.key, r.value, tuple((k, v) for k, v in r.headers))
                for r in records
            )
    consumer.close()
    check_consumed(msgs, got)


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_aiokafka_roundtrip(playground: str, codec: str | None) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    topic = f"aio-{codec}-{uuid.uuid4().hex[:6]}"
    create_topic(playground, topic)
    msgs = make_messages(COUNT, PARTITIONS, seed=topic)

    async def run() -> list[Got]:
        producer = AIOKafkaProducer(
            bootstrap_servers=playground, compression_type=codec, acks="all", linger_ms=5
        )
        await producer.start()
        try:
            futs = [
                await producer.send(
                    topic, key=m.key, value=m.value, partition=m.partition, headers=list(m.headers)
                )
                for m in msgs
            ]
            await asyncio.gather(*futs)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=playground, enable_auto_commit=False, fetch_max_wait_ms=200
        )
        await consumer.start()
        got: list[Got] = []
        try:
            consumer.assign([ATP(topic, p) for p in range(PARTITIONS)])
            await consumer.seek_to_beginning()
            deadline = time.monotonic() + 60
            while len(got) < COUNT and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                for tp, records in batch.items():
                    got.extend(
                        Got(tp.partition, r.offset, r.key, r.value, tuple((k, v) for k, v in r.headers))
                        for r in records
                    )
        finally:
            await consumer.stop()
        return got

    check_consumed(msgs, asyncio.run(run()))


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_roundtrip(playground: str, codec: str) -> None:
    topic = f"kcat-{codec}-{uuid.uuid4().hex[:6]}"
    create_topic(playground, topic, partitions=2)
    # kcat sends one line per message; keys after the delimiter
    lines = [f"key{i}:value-{i}-" + "x" * (i % 50) for i in range(200)]
    for part in (0, 1):
        subprocess.run(
            [
                "kcat",
                "-b",
                playground,
                "-t",
                topic,
                "-P",
                "-K",
                ":",
                "-p",
                str(part),
                "-z",
                codec,
                "-X",
                "acks=all",
            ],
            input="\n".join(lines[part::2]).encode(),
            check=True,
            timeout=60,
        )
    out = subprocess.run(
        ["kcat", "-b", playground, "-t", topic, "-C", "-e", "-f", "%p|%o|%k|%s\\n"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    got = [
        Got(int(p), int(o), k.encode(), v.encode(), ())
        for p, o, k, v in (line.split("|", 3) for line in out.splitlines() if line)
    ]
    sent = [
        Msg(part, line.split(":", 1)[0].encode(), line.split(":", 1)[1].encode(), ())
        for part in (0, 1)
        for line in lines[part::2]
    ]
    check_consumed(sent, got)


def test_playground_data_survives_restart(spawn_skiff, tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "data"
    first = spawn_skiff("playground", "--data-dir", str(data), "--port", "{port}", "--metadata-port", "0")
    topic = f"restart-{uuid.uuid4().hex[:6]}"
    create_topic(first.bootstrap, topic)
    msgs = make_messages(120, PARTITIONS, seed=topic)
    p = Producer({"bootstrap.servers": first.bootstrap, "acks": "all"})
    for m in msgs:
        p.produce(topic, key=m.key, value=m.value, partition=m.partition, headers=list(m.headers))
    assert p.flush(60) == 0
    first.kill(signal.SIGTERM)
    assert first.proc.returncode == 0, first.log.read_text()[-2000:]
    second = spawn_skiff("playground", "--data-dir", str(data), "--port", "{port}", "--metadata-port", "0")
    check_consumed(msgs, consume_all_confluent(second.bootstrap, topic, len(msgs)))
