"""`skiff agent --workers 2`: one pod on two cores, one file per flush (real processes: the
`skiff metadata` service on PostgreSQL, a moto S3 server, confluent-kafka clients).

Asserted: the pod shows two brokers (port and port + 1) and leads partitions on both; records
produced to partitions of both workers are acked, stored in files that hold both workers'
chunks (the writer's PUTs, counted on its /metrics, are the segment objects in the bucket),
and read back by a consumer group; the pod's /readyz is its workers'; SIGTERM drains every
process and exits 0; a worker killed makes the pod stop with 1 naming it; a killed writer
makes its workers stop by themselves.
"""

from __future__ import annotations

import os
import random
import re
import signal
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families
from skiff.agent.metric_docs import METRIC_DOCS
from skiff.fileformat.segment import read_footer_from_bytes

from tests.e2e.test_clients_roundtrip import consume_all_confluent, create_topic
from tests.e2e.test_cluster import wait_for_brokers
from tests.e2e.test_graceful_shutdown import AGENT_ENV, wait_until
from tests.support.agents import SkiffProcess, agent_args, child_pids
from tests.support.s3servers import S3Bucket, _port_is_free


def free_run(count: int) -> int:
    """A port p with p .. p + count - 1 all free on 127.0.0.1."""
    rng = random.Random()
    for _ in range(5000):
        base = rng.randrange(20000, 60000)
        if all(_port_is_free(base + i) for i in range(count)):
            return base
    raise AssertionError("no run of free ports")


def http(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric(port: int, name: str) -> float:
    status, text = http(port, "/metrics")
    assert status == 200
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert m, f"{name} not in /metrics of :{port}"
    return float(m.group(1))


def gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


class PodUnderTest:
    def __init__(
        self, spawn_skiff: Callable[..., SkiffProcess], bucket: S3Bucket, md_url: str, env: dict[str, str]
    ):
        self.port = free_run(2)
        self.metrics_port = free_run(3)
        self.proc = spawn_skiff(
            *agent_args(bucket.url("data"), md_url),
            "--agent-id",
            f"pod-{uuid.uuid4().hex[:6]}",
            "--workers",
            "2",
            "--metrics-port",
            str(self.metrics_port),
            env={**bucket.env, **AGENT_ENV, **env},
            port=self.port,
        )
        wait_until(lambda: http(self.metrics_port, "/readyz")[0] == 200, "the pod to become ready", 120)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def workers(self) -> list[int]:
        return [
            p
            for p in child_pids(self.proc.proc.pid)
            if "resource_tracker" not in Path(f"/proc/{p}/cmdline").read_text()
        ]


@pytest.fixture
def md_url(spawn_skiff: Callable[..., SkiffProcess], pg_url: str) -> str:
    md = spawn_skiff("metadata", "--db", pg_url, "--port", "{port}")
    return f"http://127.0.0.1:{md.port}"


def test_two_workers_are_two_brokers_writing_one_file_per_flush(
    spawn_skiff: Callable[..., SkiffProcess], moto_s3: S3Bucket, md_url: str
) -> None:
    pod = PodUnderTest(spawn_skiff, moto_s3, md_url, {"SKIFF_FLUSH_INTERVAL_MS": "1000"})
    for port in (pod.port, pod.port + 1):  # each worker hears of the other by its heartbeat
        wait_for_brokers(f"127.0.0.1:{port}", 2)
    admin = AdminClient({"bootstrap.servers": pod.bootstrap})
    brokers = admin.list_topics(timeout=10).brokers
    assert sorted(b.port for b in brokers.values()) == [pod.port, pod.port + 1]
    topic = f"workers-{uuid.uuid4().hex[:6]}"
    create_topic(pod.bootstrap, topic, partitions=8)
    leaders = {p: m.leader for p, m in admin.list_topics(topic, timeout=10).topics[topic].partitions.items()}
    assert len(set(leaders.values())) == 2, f"both workers lead partitions: {leaders}"

    acked: dict[bytes, tuple[int, int]] = {}
    producer = Producer({"bootstrap.servers": pod.bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(2000):
        producer.produce(
            topic,
            key=f"k{i}".encode(),
            value=b"v" * 100,
            partition=i % 8,
            on_delivery=lambda err, m: (
                acked.__setitem__(m.key(), (m.partition(), m.offset())) if err is None else None
            ),
        )
    assert producer.flush(60) == 0
    assert len(acked) == 2000

    # The writer's PUTs are the segment files, and the files hold both workers' partitions.
    s3 = moto_s3.client()
    keys = [
        o["Key"] for o in s3.list_objects_v2(Bucket=moto_s3.name, Prefix="data/segments/").get("Contents", [])
    ]
    assert len(keys) == metric(pod.metrics_port, 'skiff_object_store_requests_total{kind="put",role="agent"}')
    assert metric(pod.metrics_port, "skiff_produce_files_total") == len(keys)
    mixed = 0
    for key in keys:
        _, entries = read_footer_from_bytes(s3.get_object(Bucket=moto_s3.name, Key=key)["Body"].read(), key)
        mixed += len({leaders[e.partition] for e in entries}) == 2
    assert mixed >= 1, "no file holds both workers' chunks"
    assert len(keys) < 2000 / 8, "files per request, not per flush"

    # The writer's /metrics: every family documented (docs/operations.md's table).
    documented = {name for doc in METRIC_DOCS for name in doc.names}
    text = http(pod.metrics_port, "/metrics")[1]
    families = {
        f.name + ("_total" if f.type == "counter" else "") for f in text_string_to_metric_families(text)
    }
    assert "skiff_pod_workers_connected" in families and families <= documented, families - documented
    assert metric(pod.metrics_port, "skiff_pod_workers_connected") == 2

    got = consume_all_confluent(pod.bootstrap, topic, 2000, partitions=8)
    assert {g.key: (g.partition, g.offset) for g in got} == acked
    # Read from the workers' own memory: each kept its chunk rows whole from what it sent.
    for i in range(2):
        ranged = re.search(
            r'^skiff_object_store_requests_total\{kind="get_range",role="agent"\} (\S+)$',
            http(pod.metrics_port + 1 + i, "/metrics")[1],
            re.M,
        )
        assert ranged is None or float(ranged.group(1)) == 0, f"worker {i} read data from the bucket"

    # A transaction over partitions of both workers: its batches go through the writer, its
    # markers are the coordinating worker's; read_committed sees all of it, once committed.
    txn_topic = f"workers-txn-{uuid.uuid4().hex[:6]}"
    create_topic(pod.bootstrap, txn_topic, partitions=8)
    tx = Producer({"bootstrap.servers": pod.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"})
    tx.init_transactions(30)
    tx.begin_transaction()
    for i in range(16):
        tx.produce(txn_topic, key=f"t{i}".encode(), value=b"x", partition=i % 8)
    tx.commit_transaction(30)
    read = consume_all_confluent(pod.bootstrap, txn_topic, 16, partitions=8)  # librdkafka: read_committed
    assert sorted(g.key for g in read) == sorted(f"t{i}".encode() for i in range(16))

    workers = pod.workers()
    assert len(workers) == 2
    pod.proc.proc.send_signal(signal.SIGTERM)
    assert pod.proc.proc.wait(timeout=90) == 0
    log = pod.proc.log.read_text()
    assert log.count("stopped cleanly") == 2, log[-3000:]
    assert "stopped (cleanly)" in log, log[-3000:]
    wait_until(lambda: all(gone(w) for w in workers), "the workers to exit")


def test_a_killed_worker_stops_the_pod_and_a_killed_writer_stops_its_workers(
    spawn_skiff: Callable[..., SkiffProcess], moto_s3: S3Bucket, md_url: str
) -> None:
    pod = PodUnderTest(spawn_skiff, moto_s3, md_url, {})
    victim, other = pod.workers()
    os.kill(victim, signal.SIGKILL)
    assert pod.proc.proc.wait(timeout=90) == 1
    log = pod.proc.log.read_text()
    assert re.search(r"worker pod-\w+-w\d exited \(code -9\): stopping the pod", log), log[-3000:]
    wait_until(lambda: gone(other), "the other worker to drain and exit")

    pod2 = PodUnderTest(spawn_skiff, moto_s3, md_url, {})
    workers = pod2.workers()
    assert len(workers) == 2
    pod2.proc.proc.kill()  # the writer dies without a word
    pod2.proc.proc.wait(timeout=30)
    wait_until(lambda: all(gone(w) for w in workers), "the orphaned workers to stop by themselves")
    assert "lost the pod writer" in pod2.proc.log.read_text()
