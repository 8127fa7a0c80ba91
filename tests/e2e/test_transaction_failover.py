"""A transaction's coordinator agent dies between EndTxn and its markers; the next
coordinator finishes it. Three agents (`skiff metadata` on PostgreSQL, a moto S3 bucket).

The transaction's coordinator X is found with a raw FindCoordinator (key type 1: every
agent names the same one). A confluent-kafka producer bootstrapped with all agents opens a
transaction over three partitions and produces. Then the test does what X does first on
EndTxn(commit), the durable PREPARE_COMMIT (metadata's `/v1/txn/end`), and SIGKILLs X before
any marker is written. Until the markers exist a read_committed consumer is held at the
open transaction; once X has left the survivors' routing view the new coordinator's scan
finds the prepared transaction and writes the COMMIT markers: the consumer then reads every
record, and a new producer instance with the same transactional.id commits more on the
survivors.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.static.primitive import i8

from tests.e2e.test_clients_roundtrip import create_topic
from tests.e2e.test_cluster import start_cluster, wait_for_brokers
from tests.support.agents import SkiffProcess
from tests.support.kafka_wire import send_request
from tests.support.s3servers import S3Bucket

PARTITIONS = 3
DEADLINE_S = 120.0


def _txn_coordinator_port(bootstrap: str, txn_id: str) -> int:
    resp = send_request(bootstrap, FindCoordinatorRequest(key_type=i8(1), coordinator_keys=(txn_id,))).parse()
    (c,) = resp.coordinators
    assert c.error_code == 0, c
    return int(c.port)


def _read_committed(bootstrap: str, topic: str) -> tuple[list[str], dict[int, int]]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 100,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    values: list[str] = []
    ends: dict[int, int] = {}
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(ends) < PARTITIONS:
            assert time.monotonic() < deadline, (ends, values)
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                ends[m.partition()] = m.offset()
                continue
            values.append(m.value().decode())
    finally:
        c.close()
    return values, ends


def test_the_next_coordinator_finishes_a_prepared_transaction(
    spawn_skiff: Callable[..., SkiffProcess],
    moto_s3: S3Bucket,
    pg_url: str,
    request: pytest.FixtureRequest,
) -> None:
    cluster = start_cluster(spawn_skiff, moto_s3, pg_url, n_agents=3)
    request.addfinalizer(lambda: [p.kill(signal.SIGKILL) for p in [*cluster.agents, cluster.metadata]])
    for a in cluster.agents:
        wait_for_brokers(a.bootstrap, 3, timeout_s=60)
    bootstrap = ",".join(a.bootstrap for a in cluster.agents)
    topic = f"txfo-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS)
    txn_id = f"tx-{uuid.uuid4()}"
    port = _txn_coordinator_port(cluster.agents[0].bootstrap, txn_id)
    assert {_txn_coordinator_port(a.bootstrap, txn_id) for a in cluster.agents} == {port}
    (victim,) = [a for a in cluster.agents if a.port == port]
    survivors = [a for a in cluster.agents if a is not victim]

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5})
    p.init_transactions(60)
    p.begin_transaction()
    first = [f"v{i}" for i in range(9)]
    for i, v in enumerate(first):
        p.produce(topic, value=v.encode(), partition=i % PARTITIONS)
    assert p.flush(60) == 0

    # EndTxn's first step, then the coordinator dies before writing any marker.
    with httpx.Client(base_url=cluster.metadata_url, timeout=30) as http:
        (record,) = [r for r in http.post("/v1/txn/list", json={}).json() if r["transactional_id"] == txn_id]
        end = http.post(
            "/v1/txn/end",
            json={
                "transactional_id": txn_id,
                "producer_id": record["producer_id"],
                "producer_epoch": record["producer_epoch"],
                "commit": True,
            },
        ).json()
        assert end["error"] == 0 and end["write_markers"] and end["record"]["state"] == "PrepareCommit"
        victim.kill(signal.SIGKILL)
        survivors_bootstrap = ",".join(a.bootstrap for a in survivors)
        deadline = time.monotonic() + DEADLINE_S
        while True:
            got, ends = _read_committed(survivors_bootstrap, topic)
            if sum(ends.values()) == len(first) + PARTITIONS:  # the COMMIT markers are in
                break
            assert got == [] and sum(ends.values()) == 0, (got, ends)  # held at the open transaction
            assert time.monotonic() < deadline, "the prepared transaction was never finished"
        assert sorted(got) == sorted(first)
        state = http.post("/v1/txn/describe", json={"transactional_ids": [txn_id]}).json()[txn_id]
        assert state["state"] == "CompleteCommit"
    assert _txn_coordinator_port(survivors[0].bootstrap, txn_id) != victim.port

    # A new instance of the producer goes on through the new coordinator.
    q = Producer({"bootstrap.servers": survivors_bootstrap, "transactional.id": txn_id, "linger.ms": 5})
    q.init_transactions(60)
    q.begin_transaction()
    q.produce(topic, value=b"after", partition=0)
    q.commit_transaction(60)
    got, _ = _read_committed(survivors_bootstrap, topic)
    assert sorted(got) == sorted([*first, "after"])
