"""Graceful shutdown and rolling restarts of real `skiff agent` processes (PostgreSQL
metadata via `skiff metadata`, a moto S3 server), with confluent-kafka clients.

What is asserted, and why it is what Kafka promises:

- SIGTERM mid-produce: the agent exits 0 with "stopped cleanly"; every produce the client
  sent is acked or failed with a retriable error (a closed connection or a timeout); every
  acked record is in the log at its acked partition and offset.
- rolling restart (two agents, each SIGTERMed and replaced in turn) under a steady
  idempotent producer and a consuming group: no delivery report carries an error (the
  idempotent producer retries through the restarts); every acked record is in the log at
  its acked (partition, offset), and no key is in the log twice (idempotence: retries are
  not duplicated); the group consumed every acked record. The group may see a record more
  than once (at-least-once: after a rebalance a partition is read again from its last
  committed offset), so what is asserted of it is coverage, and that everything it read
  is a record of the log at that (partition, offset).
"""

from __future__ import annotations

import re
import signal
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.e2e.test_clients_roundtrip import consume_all_confluent, create_topic
from tests.e2e.test_cluster import wait_for_brokers
from tests.support.agents import SkiffProcess, agent_args
from tests.support.s3servers import S3Bucket, free_port

AGENT_ENV = {
    "SKIFF_HEARTBEAT_INTERVAL_MS": "500",
    "SKIFF_AGENT_TTL_MS": "3000",
    "SKIFF_TOPIC_CACHE_TTL_MS": "1000",
    "SKIFF_GROUP_LEASE_TTL_MS": "3000",
    "SKIFF_GROUP_LEASE_RENEW_INTERVAL_MS": "500",
}


@dataclass
class Agent:
    proc: SkiffProcess
    agent_id: str
    port: int
    http_port: int

    def http(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def metric(self, name: str) -> float:
        status, text = self.http("/metrics")
        assert status == 200
        m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
        assert m, f"{name} not in /metrics"
        return float(m.group(1))


def spawn_agent(
    spawn_skiff: Callable[..., SkiffProcess],
    bucket: S3Bucket,
    metadata_url: str,
    agent_id: str,
    *,
    port: int | None = None,
    env: dict[str, str] | None = None,
) -> Agent:
    proc = spawn_skiff(
        *agent_args(bucket.url("data"), metadata_url),
        "--agent-id",
        agent_id,
        "--metrics-port",
        "{metrics_port}",
        env={**bucket.env, **AGENT_ENV, **(env or {})},
        port=port,
    )
    assert proc.metrics_port is not None
    agent = Agent(proc, agent_id, proc.port, proc.metrics_port)
    wait_until(lambda: agent.http("/readyz")[0] == 200, "the agent to become ready")
    return agent


def wait_until(cond: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if cond():
                return
        except OSError:
            pass
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def sigterm_and_wait(agent: Agent, timeout_s: float = 60) -> int:
    agent.proc.proc.send_signal(signal.SIGTERM)
    return agent.proc.proc.wait(timeout=timeout_s)


@dataclass
class Deliveries:
    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    errors: list[KafkaError] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_delivery(self, err: KafkaError | None, m: object) -> None:
        with self.lock:
            if err is None:
                self.acked[m.key()] = (m.partition(), m.offset())  # type: ignore[attr-defined]
            else:
                self.errors.append(err)

    def count(self) -> int:
        with self.lock:
            return len(self.acked)


class SteadyProducer(threading.Thread):
    """Produces keyed records round-robin over the partitions until stopped, then flushes."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, **conf: object) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.partitions = partitions
        self.deliveries = Deliveries()
        self.sent = 0
        self.stop = threading.Event()
        self.unflushed = -1
        self.conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", **conf}

    def run(self) -> None:
        p = Producer(self.conf)
        while not self.stop.is_set():
            try:
                p.produce(
                    self.topic,
                    key=f"k{self.sent}".encode(),
                    value=f"v{self.sent}".encode() * 10,
                    partition=self.sent % self.partitions,
                    on_delivery=self.deliveries.on_delivery,
                )
                self.sent += 1
            except BufferError:
                p.poll(0.05)
            p.poll(0.002)
        self.unflushed = p.flush(180)

    def finish(self) -> None:
        self.stop.set()
        self.join(240)
        assert not self.is_alive(), "the producer did not finish flushing"


def log_records(bootstrap: str, topic: str, expected: int, partitions: int) -> dict[tuple[int, int], bytes]:
    got = consume_all_confluent(bootstrap, topic, expected, partitions=partitions)
    return {(g.partition, g.offset): g.key for g in got}


def test_sigterm_mid_produce_acks_or_fails_retriably_and_loses_nothing(
    spawn_skiff: Callable[..., SkiffProcess], moto_s3: S3Bucket, pg_url: str
) -> None:
    md = spawn_skiff("metadata", "--db", pg_url, "--port", "{port}")
    md_url = f"http://127.0.0.1:{md.port}"
    # agent a holds produce for 3 s before it writes a file: at SIGTERM it surely has some
    a = spawn_agent(spawn_skiff, moto_s3, md_url, "gs-a", env={"SKIFF_FLUSH_INTERVAL_MS": "3000"})
    b = spawn_agent(spawn_skiff, moto_s3, md_url, "gs-b")
    wait_for_brokers(a.proc.bootstrap, 2)
    # an agent that is not ready (its first probe can time out on a loaded machine) leads no
    # partition, and the producer would then send nothing to a for its metadata's lifetime
    wait_until(lambda: a.http("/readyz")[0] == b.http("/readyz")[0] == 200, "both agents ready")
    topic = f"sigterm-{uuid.uuid4().hex[:6]}"
    create_topic(b.proc.bootstrap, topic, partitions=4)
    producer = SteadyProducer(a.proc.bootstrap, topic, 4, **{"message.timeout.ms": 60000})
    producer.start()
    wait_until(lambda: a.metric("skiff_produce_buffered_bytes") > 0, "agent a to buffer produce")
    acked_before = producer.deliveries.count()
    assert sigterm_and_wait(a) == 0
    log = a.proc.log.read_text()
    assert "stopped cleanly" in log, log[-3000:]
    wait_until(lambda: producer.deliveries.count() > acked_before + 100, "produce to go on through b")
    producer.finish()
    assert producer.unflushed == 0
    d = producer.deliveries
    assert all(e.retriable() for e in d.errors), [str(e) for e in d.errors if not e.retriable()][:3]
    assert len(d.acked) + len(d.errors) == producer.sent
    in_log = log_records(b.proc.bootstrap, topic, len(d.acked), 4)
    missing = [k for k, where in d.acked.items() if in_log.get(where) != k]
    assert not missing, f"{len(missing)} acked records not in the log where acked, e.g. {missing[:3]}"


def test_sigterm_turns_readyz_503_first_flushes_held_produce_and_answers_a_long_poll(
    spawn_skiff: Callable[..., SkiffProcess], moto_s3: S3Bucket, pg_url: str
) -> None:
    md = spawn_skiff("metadata", "--db", pg_url, "--port", "{port}")
    # produce would be held 60 s in the buffer; a consumer's fetches long-poll for 8 s
    a = spawn_agent(
        spawn_skiff, moto_s3, f"http://127.0.0.1:{md.port}", "rz-a", env={"SKIFF_FLUSH_INTERVAL_MS": "60000"}
    )
    assert a.http("/healthz") == (200, "ok\n")
    assert a.http("/readyz") == (200, "ready\n")
    topic, idle = f"rz-{uuid.uuid4().hex[:6]}", f"rz-idle-{uuid.uuid4().hex[:6]}"
    create_topic(a.proc.bootstrap, topic, partitions=1)
    create_topic(a.proc.bootstrap, idle, partitions=1)
    c = Consumer({"bootstrap.servers": a.proc.bootstrap, "group.id": "rz", "fetch.wait.max.ms": 8000})
    c.assign([TopicPartition(idle, 0, 0)])
    c.poll(1)  # the first fetch is now parked in the agent's fetch purgatory
    deliveries = Deliveries()
    p = Producer({"bootstrap.servers": a.proc.bootstrap, "acks": "all"})
    p.produce(topic, key=b"held", value=b"x", on_delivery=deliveries.on_delivery)
    p.poll(0)
    wait_until(lambda: a.metric("skiff_produce_buffered_bytes") > 0, "the record to be buffered")
    a.proc.proc.send_signal(signal.SIGTERM)
    # the drain waits for the parked fetch; /readyz says so meanwhile, /healthz stays up
    wait_until(lambda: a.http("/readyz")[0] == 503, "/readyz to turn 503")
    assert a.http("/readyz") == (503, "not ready: draining\n")
    assert a.http("/healthz") == (200, "ok\n")
    # the 60 s buffer was committed at the SIGTERM: the record is acked, not dropped
    assert p.flush(30) == 0
    assert deliveries.count() == 1 and not deliveries.errors
    assert a.proc.proc.wait(timeout=60) == 0
    c.close()
    assert "stopped cleanly" in a.proc.log.read_text()


def test_metadata_down_makes_readyz_503(
    spawn_skiff: Callable[..., SkiffProcess], moto_s3: S3Bucket, pg_url: str
) -> None:
    md = spawn_skiff("metadata", "--db", pg_url, "--port", "{port}")
    a = spawn_agent(spawn_skiff, moto_s3, f"http://127.0.0.1:{md.port}", "rz-md")
    md.kill(signal.SIGKILL)
    wait_until(lambda: a.http("/readyz")[0] == 503, "/readyz to turn 503")
    status, body = a.http("/readyz")
    assert status == 503 and "metadata" in body, body
    assert a.http("/healthz") == (200, "ok\n")


def test_rolling_restart_loses_nothing_under_idempotent_produce_and_a_group(
    spawn_skiff: Callable[..., SkiffProcess], moto_s3: S3Bucket, pg_url: str
) -> None:
    md = spawn_skiff("metadata", "--db", pg_url, "--port", "{port}")
    md_url = f"http://127.0.0.1:{md.port}"
    agents = [spawn_agent(spawn_skiff, moto_s3, md_url, f"roll-{i}") for i in range(2)]
    bootstrap = ",".join(a.proc.bootstrap for a in agents)
    wait_for_brokers(agents[0].proc.bootstrap, 2)
    topic = f"roll-{uuid.uuid4().hex[:6]}"
    partitions = 4
    create_topic(agents[0].proc.bootstrap, topic, partitions=partitions)

    consumed: dict[tuple[int, int], bytes] = {}
    consumed_keys: set[bytes] = set()
    consumer_errors: list[str] = []
    stop_consuming = threading.Event()

    def consume() -> None:
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"roll-{topic}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 500,
                "fetch.wait.max.ms": 200,
                "session.timeout.ms": 10000,
            }
        )
        c.subscribe([topic])
        try:
            while not stop_consuming.is_set():
                m = c.poll(0.2)
                if m is None:
                    continue
                if m.error():
                    if not m.error().retriable() and m.error().code() != KafkaError._PARTITION_EOF:
                        consumer_errors.append(str(m.error()))
                    continue
                consumed[(m.partition(), m.offset())] = m.key()
                consumed_keys.add(m.key())
        finally:
            c.close()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    producer = SteadyProducer(bootstrap, topic, partitions, **{"enable.idempotence": True})
    producer.start()
    wait_until(lambda: producer.deliveries.count() > 200, "produce to start")

    for i, old in enumerate(list(agents)):
        assert sigterm_and_wait(old) == 0, old.proc.log.read_text()[-3000:]
        assert "stopped cleanly" in old.proc.log.read_text()
        acked = producer.deliveries.count()
        # a replacement with the same identity and address, as a restarted pod of a StatefulSet
        agents[i] = spawn_agent(spawn_skiff, moto_s3, md_url, old.agent_id, port=old.port)
        wait_for_brokers(agents[i].proc.bootstrap, 2)
        wait_until(lambda a=acked: producer.deliveries.count() > a + 200, "produce to go on after a restart")

    producer.finish()
    d = producer.deliveries
    assert producer.unflushed == 0
    assert not d.errors, [str(e) for e in d.errors[:3]]
    assert len(d.acked) == producer.sent
    wait_until(lambda: set(d.acked) <= consumed_keys, "the group to consume every acked record", 90)
    stop_consuming.set()
    consumer.join(60)
    assert not consumer_errors, consumer_errors[:3]

    in_log = log_records(agents[0].proc.bootstrap, topic, len(d.acked), partitions)
    missing = [k for k, where in d.acked.items() if in_log.get(where) != k]
    assert not missing, f"{len(missing)} acked records not in the log where acked, e.g. {missing[:3]}"
    keys_in_log = list(in_log.values())
    assert len(keys_in_log) == len(set(keys_in_log)), "a retried produce was written twice"
    assert all(in_log.get(where) == k for where, k in consumed.items()), (
        "the group read something not in the log"
    )


def test_shutdown_past_its_timeout_exits_1_and_says_what_it_abandoned(
    spawn_skiff: Callable[..., SkiffProcess], moto_s3: S3Bucket, pg_url: str
) -> None:
    md = spawn_skiff("metadata", "--db", pg_url, "--port", "{port}")
    a = spawn_agent(
        spawn_skiff, moto_s3, f"http://127.0.0.1:{md.port}", "to-a", env={"SKIFF_SHUTDOWN_TIMEOUT_MS": "300"}
    )
    idle = f"to-idle-{uuid.uuid4().hex[:6]}"
    create_topic(a.proc.bootstrap, idle, partitions=1)
    # a fetch parked for 20 s holds the drain past its 300 ms
    c = Consumer({"bootstrap.servers": a.proc.bootstrap, "group.id": "to", "fetch.wait.max.ms": 20000})
    c.assign([TopicPartition(idle, 0, 0)])
    c.poll(1)
    wait_until(lambda: a.metric('skiff_purgatory_delayed{purgatory="fetch"}') > 0, "a parked fetch")
    assert sigterm_and_wait(a) == 1
    c.close()
    log = a.proc.log.read_text()
    m = re.search(
        r"shutdown_timeout_ms=300 passed; abandoning \d+ buffered produce bytes .* (\d+) connections", log
    )
    assert m and int(m.group(1)) >= 1, log[-2000:]


def test_playground_sigterm_commits_held_produce_and_exits_0(
    spawn_skiff: Callable[..., SkiffProcess], tmp_path: Path
) -> None:
    http_port = free_port()
    data = str(tmp_path / "pg-data")

    def start() -> SkiffProcess:
        return spawn_skiff(
            "playground",
            "--data-dir",
            data,
            "--port",
            "{port}",
            "--metadata-port",
            str(free_port()),
            env={"SKIFF_METRICS_PORT": str(http_port), "SKIFF_FLUSH_INTERVAL_MS": "60000"},
        )

    pg = start()
    play = Agent(pg, "playground", pg.port, http_port)
    wait_until(lambda: play.http("/readyz")[0] == 200, "the playground to become ready")
    create_topic(pg.bootstrap, "held", partitions=1)
    deliveries = Deliveries()
    p = Producer({"bootstrap.servers": pg.bootstrap, "acks": "all"})
    p.produce("held", key=b"k", value=b"v", on_delivery=deliveries.on_delivery)
    p.poll(0)
    wait_until(lambda: play.metric("skiff_produce_buffered_bytes") > 0, "the record to be buffered")
    pg.proc.send_signal(signal.SIGTERM)
    assert p.flush(30) == 0 and deliveries.acked == {b"k": (0, 0)}
    assert pg.proc.wait(timeout=60) == 0
    assert "stopped cleanly" in pg.log.read_text()
    again = start()
    got = consume_all_confluent(again.bootstrap, "held", 1, partitions=1)
    assert [(g.offset, g.key) for g in got] == [(0, b"k")]
