"""Several agents as real processes on one bucket (a real S3 server) and one metadata
service (`skiff metadata` on PostgreSQL), with real clients spread over them; an agent
killed with SIGKILL mid-produce; the S3 server and the metadata service pausing."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from tests.e2e.clientcheck import check_consumed, make_messages
from tests.e2e.test_clients_roundtrip import consume_all_confluent, create_topic
from tests.support.agents import SkiffProcess, agent_args
from tests.support.s3servers import S3Bucket, S3Server, start_moto
from tests.support.spies import Hits

# Records acked before the kill, and again after it, by the kill test's producer.
ACKED_EACH_SIDE_OF_THE_KILL = 200


@dataclass
class Cluster:
    metadata: SkiffProcess
    agents: list[SkiffProcess]

    @property
    def metadata_url(self) -> str:
        return f"http://127.0.0.1:{self.metadata.port}"


def start_cluster(
    spawn_skiff: Callable[..., SkiffProcess],
    bucket: S3Bucket,
    db_url: str,
    n_agents: int = 2,
    extra_env: dict[str, str] | None = None,
) -> Cluster:
    md = spawn_skiff("metadata", "--db", db_url, "--port", "{port}")
    env = {
        **bucket.env,
        "SKIFF_HEARTBEAT_INTERVAL_MS": "500",
        "SKIFF_AGENT_TTL_MS": "3000",
        "SKIFF_TOPIC_CACHE_TTL_MS": "1000",
        # group coordinator leases lapse as fast as dead agents leave the routing view
        "SKIFF_GROUP_LEASE_TTL_MS": "3000",
        "SKIFF_GROUP_LEASE_RENEW_INTERVAL_MS": "500",
        **(extra_env or {}),
    }
    agents = [
        spawn_skiff(
            *agent_args(bucket.url("data"), f"http://127.0.0.1:{md.port}"),
            "--agent-id",
            f"agent-{i}",
            env=env,
        )
        for i in range(n_agents)
    ]
    return Cluster(md, agents)


def wait_for_brokers(bootstrap: str, count: int, timeout_s: float = 20) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    seen = 0
    while time.monotonic() < deadline:
        seen = len(admin.list_topics(timeout=5).brokers)
        if seen == count:
            return
        time.sleep(0.3)
    pytest.fail(f"expected {count} brokers in Metadata, saw {seen}")


def produce_confluent(bootstrap: str, topic: str, msgs: list, **conf: object) -> list[tuple[int, int]]:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", **conf})
    errors: list[object] = []
    for m in msgs:
        p.produce(
            topic,
            key=m.key,
            value=m.value,
            partition=m.partition,
            headers=list(m.headers),
            on_delivery=lambda err, _m: errors.append(err) if err else None,
        )
        p.poll(0)
    assert p.flush(120) == 0
    assert not errors, errors[:3]
    return []


@pytest.mark.parametrize("store", ["moto", "seaweedfs"])
def test_two_agents_one_bucket_clients_spread(
    spawn_skiff: Callable[..., SkiffProcess], request: pytest.FixtureRequest, pg_url: str, store: str
) -> None:
    bucket: S3Bucket = request.getfixturevalue("moto_s3" if store == "moto" else "seaweed_s3")
    cluster = start_cluster(spawn_skiff, bucket, pg_url)
    a, b = cluster.agents
    wait_for_brokers(a.bootstrap, 2)
    wait_for_brokers(b.bootstrap, 2)
    topic = f"spread-{uuid.uuid4().hex[:6]}"
    create_topic(a.bootstrap, topic, partitions=6)
    first = make_messages(300, 6, seed=topic + "a")
    second = make_messages(300, 6, seed=topic + "b")
    # clients bootstrapped on different agents; each also follows the spread leadership
    produce_confluent(a.bootstrap, topic, first)
    produce_confluent(b.bootstrap, topic, second)
    # per partition, the first client's records come first, then the second's
    expected = [
        m
        for p in range(6)
        for m in [*(x for x in first if x.partition == p), *(x for x in second if x.partition == p)]
    ]
    check_consumed(expected, consume_all_confluent(b.bootstrap, topic, 600, partitions=6))
    check_consumed(expected, consume_all_confluent(a.bootstrap, topic, 600, partitions=6))
    # the bucket really holds the data: one or more segment files, and nothing else but each
    # agent's readiness probe object (agent.health)
    keys = [o["Key"] for o in bucket.client().list_objects_v2(Bucket=bucket.name).get("Contents", [])]
    probes = [k for k in keys if k.startswith("data/_skiff/readiness/")]
    segments = [k for k in keys if k not in probes]
    assert len(probes) == 2
    assert segments and all(k.startswith("data/segments/") and k.endswith(".seg") for k in segments)


def test_agent_killed_mid_produce_loses_no_acked_record(
    spawn_skiff: Callable[..., SkiffProcess], moto_s3: S3Bucket, pg_url: str
) -> None:
    cluster = start_cluster(spawn_skiff, moto_s3, pg_url)
    a, b = cluster.agents
    wait_for_brokers(b.bootstrap, 2)
    topic = f"kill-{uuid.uuid4().hex[:6]}"
    create_topic(b.bootstrap, topic, partitions=4)
    acked: dict[bytes, tuple[int, int]] = {}
    lock = threading.Lock()
    stop = threading.Event()
    acks = Hits()  # one hit per acked record: the test waits for acks, not for a fixed time

    def on_delivery(err: object, m: object) -> None:
        if err is None:
            with lock:
                acked[m.key()] = (m.partition(), m.offset())  # type: ignore[attr-defined]
            acks.hit()

    def produce_loop() -> None:
        p = Producer(
            {
                "bootstrap.servers": b.bootstrap,
                "linger.ms": 5,
                "acks": "all",
                "enable.idempotence": True,
                "message.timeout.ms": 60000,
            }
        )
        i = 0
        while not stop.is_set():
            try:
                p.produce(
                    topic,
                    key=f"k{i}".encode(),
                    value=os.urandom(200),
                    partition=i % 4,
                    on_delivery=on_delivery,
                )
                i += 1
            except BufferError:
                p.poll(0.05)
            p.poll(0)
        p.flush(90)

    t = threading.Thread(target=produce_loop)
    t.start()
    acks.wait_for(ACKED_EACH_SIDE_OF_THE_KILL, timeout_s=60)
    with lock:
        before = len(acked)
    a.kill(signal.SIGKILL)
    # producing goes on through the surviving agent: more records are acked after the kill
    acks.wait_for(acks.count + ACKED_EACH_SIDE_OF_THE_KILL, timeout_s=90)
    stop.set()
    t.join(120)
    assert not t.is_alive()
    assert before > 0, "nothing was acked before the kill"
    with lock:
        assert len(acked) > before, "producing did not continue on the surviving agent"
        snapshot = dict(acked)
    got = consume_all_confluent(b.bootstrap, topic, len(snapshot), partitions=4)
    by_key = {g.key: (g.partition, g.offset) for g in got}
    missing = [k for k, where in snapshot.items() if by_key.get(k) != where]
    assert not missing, f"{len(missing)} acked records missing or moved, e.g. {missing[:3]}"


def test_s3_and_metadata_pauses_are_survived(
    spawn_skiff: Callable[..., SkiffProcess], pg_url: str, tmp_path: Path
) -> None:
    # a private S3 server, so pausing it does not disturb other tests
    (tmp_path / "moto").mkdir()
    server: S3Server = start_moto(tmp_path / "moto")
    try:
        bucket = S3Bucket(server, server.new_bucket())
        # short client timeouts so that a 4 s pause turns into failed requests, not waits
        cluster = start_cluster(
            spawn_skiff,
            bucket,
            pg_url,
            n_agents=1,
            extra_env={
                "SKIFF_S3_READ_TIMEOUT_MS": "1000",
                "SKIFF_S3_MAX_ATTEMPTS": "2",
                "SKIFF_METADATA_TIMEOUT_MS": "1000",
            },
        )
        (a,) = cluster.agents
        topic = f"pause-{uuid.uuid4().hex[:6]}"
        create_topic(a.bootstrap, topic, partitions=2)
        msgs = make_messages(400, 2, seed=topic)
        p = Producer(
            {
                "bootstrap.servers": a.bootstrap,
                "linger.ms": 5,
                "acks": "all",
                "enable.idempotence": True,
                "message.timeout.ms": 120000,
            }
        )
        errors: list[object] = []
        for i, m in enumerate(msgs):
            if i == 100:
                os.kill(server.process.pid, signal.SIGSTOP)
                threading.Timer(8, os.kill, (server.process.pid, signal.SIGCONT)).start()
            if i == 250:
                p.flush(120)
                os.kill(cluster.metadata.proc.pid, signal.SIGSTOP)
                threading.Timer(4, os.kill, (cluster.metadata.proc.pid, signal.SIGCONT)).start()
            p.produce(
                topic,
                key=m.key,
                value=m.value,
                partition=m.partition,
                headers=list(m.headers),
                on_delivery=lambda err, _m: errors.append(err) if err else None,
            )
            p.poll(0)
            time.sleep(0.005)
        assert p.flush(180) == 0
        assert not errors, errors[:3]
        check_consumed(msgs, consume_all_confluent(a.bootstrap, topic, len(msgs), partitions=2))
        # the pauses really caused failed flushes that the clients retried through
        log = a.log.read_text()
        assert "failed" in log and "PUT" in log, log[-2000:]
        assert "metadata unavailable" in log, log[-2000:]
    finally:
        server.process.stop()
