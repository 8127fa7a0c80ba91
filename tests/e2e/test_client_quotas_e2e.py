"""Client quotas on a real `skiff playground` with confluent-kafka (librdkafka) clients: a
producer with `producer_byte_rate` and a consumer with `consumer_byte_rate` converge to their
quota within 10 %, while a producer and a consumer of other client ids on the same agent go
far faster (unaffected).

Kafka's rate is a sum over 11 one-second windows, taken over at least 10 s: a new client may
burst up to 10 s of its quota at once, and a window that expires frees its bytes at once, so
the rate a client sees swings with an 11 s period. The rate is therefore measured over two
whole periods (22 s) after the first (11 s), from the client's own delivery and receipt times.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.component.test_client_quotas import kafka_python_admin, kp_alter
from tests.support.agents import SkiffProcess, free_port

QUOTA_BPS = 256 * 1024
VALUE = os.urandom(10 * 1024)  # incompressible; the batch overhead is about 1 % of it
BACKLOG_BYTES = 14 * 1024 * 1024
WARMUP_S = 11.0
MEASURE_S = 33.0
TOLERANCE = 0.10
# Requests of at most this many bytes (the Java client's batches are 16 KiB by default):
# librdkafka's 1 MB batches are 4 s of the quota each, too coarse to measure a rate by within
# 10 % over 22 s.
BATCH_BYTES = 64 * 1024


def _rate(events: list[tuple[float, int]], start: float) -> float:
    begin, end = start + WARMUP_S, start + WARMUP_S + MEASURE_S
    return sum(n for t, n in events if begin <= t < end) / MEASURE_S


def _produce(
    bootstrap: str, topic: str, client_id: str, until: Callable[[], bool]
) -> list[tuple[float, int]]:
    """Produce as fast as the client is let, until `until()`; (ack time, value bytes) per record."""
    acks: list[tuple[float, int]] = []

    def delivered(err: object, msg: object) -> None:
        if err is None:
            acks.append((time.monotonic(), len(VALUE)))

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            "batch.size": BATCH_BYTES,
            "enable.idempotence": False,
            "queue.buffering.max.kbytes": 2048,
        }
    )
    produced = 0
    while not until(produced):
        try:
            p.produce(topic, VALUE, on_delivery=delivered)
        except BufferError:
            p.poll(0.05)
            continue
        produced += len(VALUE)
        p.poll(0)
    assert p.flush(60) == 0
    return acks


def _consume(
    bootstrap: str, topic: str, client_id: str, until: Callable[[int], bool]
) -> list[tuple[float, int]]:
    """Read the topic from its start until `until(bytes so far)`; (receipt time, value bytes)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "fetch.max.bytes": BATCH_BYTES,
            "max.partition.fetch.bytes": BATCH_BYTES,
            "message.max.bytes": BATCH_BYTES,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[float, int]] = []
    total = 0
    try:
        while not until(total):
            msg = c.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            n = len(msg.value() or b"")
            total += n
            got.append((time.monotonic(), n))
    finally:
        c.close()
    return got


def test_quotas_hold_their_clients_and_leave_others_alone(
    tmp_path: Path, spawn_skiff: Callable[..., SkiffProcess]
) -> None:
    pg = spawn_skiff(
        "playground",
        "--data-dir",
        str(tmp_path / "data"),
        "--port",
        "{port}",
        "--metadata-port",
        str(free_port()),
    )
    b = pg.bootstrap
    backlog, slow_topic, tag = (
        f"backlog-{uuid.uuid4().hex[:6]}",
        f"slow-{uuid.uuid4().hex[:6]}",
        uuid.uuid4().hex[:6],
    )

    # unaffected: a producer without a quota fills the backlog far above the quota's rate
    start = time.monotonic()
    free_acks = _produce(b, backlog, f"free-producer-{tag}", lambda n: n >= BACKLOG_BYTES)
    free_rate = sum(n for _, n in free_acks) / (max(t for t, _ in free_acks) - start)
    assert free_rate > 4 * QUOTA_BPS, f"the unthrottled producer managed only {free_rate:.0f} B/s"

    admin = kafka_python_admin(b)
    try:
        for client, key in (
            (f"slow-producer-{tag}", "producer_byte_rate"),
            (f"slow-consumer-{tag}", "consumer_byte_rate"),
        ):
            resp = kp_alter(admin, {"client-id": client}, {key: float(QUOTA_BPS)})
            assert [e.error_code for e in resp.entries] == [0]
    finally:
        admin.close()

    start = time.monotonic()
    end = start + WARMUP_S + MEASURE_S + 1.0
    results: dict[str, list[tuple[float, int]]] = {}

    def run(name: str, work: Callable[[], list[tuple[float, int]]]) -> None:
        results[name] = work()

    threads = [
        threading.Thread(
            target=run,
            args=(
                "producer",
                lambda: _produce(b, slow_topic, f"slow-producer-{tag}", lambda _: time.monotonic() > end),
            ),
        ),
        threading.Thread(
            target=run,
            args=(
                "consumer",
                lambda: _consume(b, backlog, f"slow-consumer-{tag}", lambda _: time.monotonic() > end),
            ),
        ),
        threading.Thread(
            target=run,
            args=(
                "free consumer",
                lambda: _consume(
                    b, backlog, f"free-consumer-{tag}", lambda n: n >= BACKLOG_BYTES or time.monotonic() > end
                ),
            ),
        ),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=WARMUP_S + MEASURE_S + 90)
        assert not t.is_alive(), "a client did not finish"

    producer_rate = _rate(results["producer"], start)
    consumer_rate = _rate(results["consumer"], start)
    free = results["free consumer"]
    free_consumer_rate = sum(n for _, n in free) / (free[-1][0] - start)
    print(f"quota {QUOTA_BPS} B/s: producer {producer_rate:.0f}, consumer {consumer_rate:.0f}, "
          f"free producer {free_rate:.0f}, free consumer {free_consumer_rate:.0f} B/s")  # fmt: skip
    for name in ("producer", "consumer"):  # per second, for the log of a failure
        per_s = [0] * int(WARMUP_S + MEASURE_S + 2)
        for t, n in results[name]:
            per_s[min(int(t - start), len(per_s) - 1)] += n
        print(name, [round(x / 1024) for x in per_s])
    assert abs(producer_rate - QUOTA_BPS) <= TOLERANCE * QUOTA_BPS, producer_rate
    assert abs(consumer_rate - QUOTA_BPS) <= TOLERANCE * QUOTA_BPS, consumer_rate
    assert sum(n for _, n in free) >= BACKLOG_BYTES
    assert free_consumer_rate > 4 * QUOTA_BPS, free_consumer_rate
