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

from tests.e2e.test_clients_roundtrip import create_topic
from tests.e2e.test_cluster import start_cluster, wait_for_brokers
from tests.support.agents import SkiffProcess
from tests.support.s3servers import S3Bucket
from tests.support.txn_clients import read_values, txn_coordinator_port, txn_producer

PARTITIONS = 3
DEADLINE_S = 120.0


def _read_committed(bootstrap: str, topic: str) -> tuple[list[str], dict[int, int]]:
    """Every record a read_committed consumer gets up to the end of each partition."""
    return read_values(bootstrap, topic, "read_committed", PARTITIONS, DEADLINE_S)


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
    # Every agent names the same coordinator once their routing views agree (an agent hears
    # of the others' readiness by their heartbeats: on a loaded machine, a moment later).
    deadline = time.monotonic() + 60
    while len(named := {txn_coordinator_port(a.bootstrap, txn_id) for a in cluster.agents}) != 1:
        assert time.monotonic() < deadline, f"the agents name different coordinators: {named}"
        time.sleep(0.2)
    (port,) = named
    (victim,) = [a for a in cluster.agents if a.port == port]
    survivors = [a for a in cluster.agents if a is not victim]

    p = txn_producer(bootstrap, txn_id)
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
                "epoch": record["producer_epoch"],
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
            # Not yet complete as seen by this read. One read is not a snapshot across
            # partitions (a partition may reach its end before the markers land and another
            # after), so only what no read may ever show is asserted: records from outside
            # the transaction, or one record twice.
            assert set(got) <= set(first) and len(got) == len(set(got)), (got, ends)
            assert time.monotonic() < deadline, "the prepared transaction was never finished"
        assert sorted(got) == sorted(first)
        state = http.post("/v1/txn/describe", json={"transactional_ids": [txn_id]}).json()[txn_id]
        assert state["state"] == "CompleteCommit"
    assert txn_coordinator_port(survivors[0].bootstrap, txn_id) != victim.port

    # A new instance of the producer goes on through the new coordinator.
    q = txn_producer(survivors_bootstrap, txn_id)
    q.init_transactions(60)
    q.begin_transaction()
    q.produce(topic, value=b"after", partition=0)
    q.commit_transaction(60)
    got, _ = _read_committed(survivors_bootstrap, topic)
    assert sorted(got) == sorted([*first, "after"])
