"""The transaction coordinator agent SIGKILLed inside its real EndTxn handling, between the
durable PREPARE_COMMIT / PREPARE_ABORT and the markers; the next coordinator completes it.

Three agents (`skiff metadata` on PostgreSQL, a moto S3 bucket). The transactional ids are
chosen so that agent-0 coordinates the committed one and agent-1 the aborted one (the
rendezvous hash FindCoordinator uses; checked against FindCoordinator), and each of those
two agents runs with the test hook `SKIFF_TXN_PAUSE_BEFORE_MARKERS=<its id>`
(agent.transactions.pause_hook): its EndTxn handler makes the PREPARE_* durable, logs the hook's line
and waits. For each case a confluent-kafka transactional producer produces 9 records over 3
partitions and calls commit_transaction() / abort_transaction() in a thread; once the line is
in the coordinator's log, read_committed consumers are still held at the open transaction
(no marker was written), and the test SIGKILLs the coordinator. Then:

- the killed agent never answers EndTxn; librdkafka retries it against the new coordinator
  (CONCURRENT_TRANSACTIONS while the transaction is prepared, success once the survivors'
  re-drive scan has completed it): commit_transaction() / abort_transaction() returns
  without an error;
- a read_committed consumer on the survivors sees every record of the committed transaction
  once (and none of the aborted one), up to the high watermark;
- DescribeTransactions on a survivor answers CompleteCommit / CompleteAbort;
- a new producer with the same transactional.id inits and commits more on the survivors.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.types import TransactionalId
from skiff.agent import routing
from skiff.agent.transactions.coordinator import txn_key
from skiff.agent.transactions.pause_hook import ENV as PAUSE_ENV
from skiff.agent.transactions.pause_hook import MARKER as PAUSE_MARKER

from tests.e2e.test_clients_roundtrip import create_topic
from tests.e2e.test_cluster import wait_for_brokers
from tests.support.agents import SkiffProcess, agent_args
from tests.support.kafka_wire import send_request
from tests.support.s3servers import S3Bucket
from tests.support.txn_clients import read_values, txn_coordinator_port, txn_producer

PARTITIONS = 3
RECORDS = 9
DEADLINE_S = 120.0
AGENT_IDS = ("agent-0", "agent-1", "agent-2")


def _txn_id_coordinated_by(agent_id: str) -> str:
    while True:
        txn_id = f"tx-{uuid.uuid4()}"
        if routing.rendezvous_owner(txn_key(txn_id), AGENT_IDS) == agent_id:
            return txn_id


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _describe_state(bootstrap: str, txn_id: str) -> str:
    """DescribeTransactions v0's state for one id. Read by hand up to the state: kio refuses
    to parse the -1 start time Kafka (and Skiff) answer for a transaction not in progress."""
    body = send_request(
        bootstrap, DescribeTransactionsRequest(transactional_ids=(TransactionalId(txn_id),))
    ).body
    count, pos = _uvarint(body, 4)  # after throttle_time_ms (int32); compact array: n + 1
    assert count == 2, body
    error_code = int.from_bytes(body[pos : pos + 2], "big", signed=True)
    assert error_code == 0, body
    n, pos = _uvarint(body, pos + 2)  # transactional_id, a compact string
    assert body[pos : pos + n - 1].decode() == txn_id
    n, pos = _uvarint(body, pos + n - 1)  # transaction_state
    return body[pos : pos + n - 1].decode()


def _read_committed(bootstrap: str, topic: str) -> tuple[list[str], dict[int, int]]:
    """Every record a read_committed consumer gets up to the end of each partition."""
    return read_values(bootstrap, topic, "read_committed", PARTITIONS, DEADLINE_S)


def _wait_for_line(proc: SkiffProcess, line: str, worker: threading.Thread) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while line not in proc.log.read_text(errors="replace"):
        assert worker.is_alive(), "EndTxn returned before the coordinator paused"
        assert proc.alive(), proc.log.read_text(errors="replace")
        assert time.monotonic() < deadline, f"no {line!r} in {proc.log}"
        time.sleep(0.05)  # polling the log file (no event crosses the process boundary)


def _kill_inside_end_txn(
    victim: SkiffProcess, survivors: list[SkiffProcess], txn_id: str, commit: bool
) -> tuple[str, list[str]]:
    """Produce RECORDS records in a transaction, end it, SIGKILL the coordinator while it is
    paused before the markers; returns the topic and the values produced."""
    bootstrap = ",".join(a.bootstrap for a in [victim, *survivors])
    survivors_bootstrap = ",".join(a.bootstrap for a in survivors)
    assert {txn_coordinator_port(a.bootstrap, txn_id) for a in [victim, *survivors]} == {victim.port}
    topic = f"txkill-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS)

    p = txn_producer(bootstrap, txn_id)
    p.init_transactions(60)
    p.begin_transaction()
    values = [f"{'c' if commit else 'a'}{i}" for i in range(RECORDS)]
    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), partition=i % PARTITIONS)
    assert p.flush(60) == 0

    outcome: dict[str, Any] = {}

    def end() -> None:
        try:
            (p.commit_transaction if commit else p.abort_transaction)(DEADLINE_S)
            outcome["ok"] = True
        except Exception as exc:  # recorded and asserted in the test's thread
            outcome["error"] = exc

    worker = threading.Thread(target=end, name="end-txn", daemon=True)
    worker.start()
    _wait_for_line(victim, f"{PAUSE_MARKER}, transactional id {txn_id},", worker)
    state = "PrepareCommit" if commit else "PrepareAbort"
    assert _describe_state(survivors[0].bootstrap, txn_id) == state  # durable, no marker yet
    got, ends = _read_committed(survivors_bootstrap, topic)
    assert got == [] and sum(ends.values()) == 0, (got, ends)  # held at the open transaction
    victim.kill(signal.SIGKILL)

    worker.join(DEADLINE_S + 30)
    assert not worker.is_alive()
    # librdkafka retries EndTxn through the new coordinator until the transaction is complete
    assert outcome == {"ok": True}, outcome
    return topic, values


def _read_until_markers(bootstrap: str, topic: str) -> list[str]:
    """Read committed until the markers are in (one control record per partition)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        got, ends = _read_committed(bootstrap, topic)
        if sum(ends.values()) == RECORDS + PARTITIONS:
            return got
        assert time.monotonic() < deadline, ("the prepared transaction was never finished", got, ends)


def _new_instance_commits(bootstrap: str, txn_id: str, topic: str, value: str) -> None:
    q = txn_producer(bootstrap, txn_id)
    q.init_transactions(60)
    q.begin_transaction()
    q.produce(topic, value=value.encode(), partition=0)
    q.commit_transaction(60)


def test_coordinator_killed_between_end_txn_and_markers(
    spawn_skiff: Callable[..., SkiffProcess],
    moto_s3: S3Bucket,
    pg_url: str,
    request: pytest.FixtureRequest,
) -> None:
    commit_id = _txn_id_coordinated_by("agent-0")
    abort_id = _txn_id_coordinated_by("agent-1")  # still agent-1's once agent-0 is gone
    md = spawn_skiff("metadata", "--db", pg_url, "--port", "{port}")
    env = {
        **moto_s3.env,
        "SKIFF_HEARTBEAT_INTERVAL_MS": "500",
        "SKIFF_AGENT_TTL_MS": "3000",
        "SKIFF_TOPIC_CACHE_TTL_MS": "1000",
    }
    hooks = {"agent-0": {PAUSE_ENV: commit_id}, "agent-1": {PAUSE_ENV: abort_id}}
    agents = [
        spawn_skiff(
            *agent_args(moto_s3.url("data"), f"http://127.0.0.1:{md.port}"),
            "--agent-id",
            agent_id,
            env={**env, **hooks.get(agent_id, {})},
        )
        for agent_id in AGENT_IDS
    ]
    request.addfinalizer(lambda: [p.kill(signal.SIGKILL) for p in [*agents, md]])
    for a in agents:
        wait_for_brokers(a.bootstrap, 3, timeout_s=60)
    a0, a1, a2 = agents

    # 1. commit: agent-0 dies inside EndTxn(commit); agent-1 or agent-2 completes it
    topic, values = _kill_inside_end_txn(a0, [a1, a2], commit_id, commit=True)
    survivors = f"{a1.bootstrap},{a2.bootstrap}"
    got = _read_until_markers(survivors, topic)
    assert sorted(got) == sorted(values)  # every record, once
    assert _describe_state(a1.bootstrap, commit_id) == "CompleteCommit"
    assert txn_coordinator_port(a2.bootstrap, commit_id) != a0.port
    _new_instance_commits(survivors, commit_id, topic, "after")
    got, _ = _read_committed(survivors, topic)
    assert sorted(got) == sorted([*values, "after"])

    # 2. abort: agent-1 dies inside EndTxn(abort); agent-2 completes it
    topic, _values = _kill_inside_end_txn(a1, [a2], abort_id, commit=False)
    assert _read_until_markers(a2.bootstrap, topic) == []  # never visible to read_committed
    assert _describe_state(a2.bootstrap, abort_id) == "CompleteAbort"
    _new_instance_commits(a2.bootstrap, abort_id, topic, "after-abort")
    got, _ = _read_committed(a2.bootstrap, topic)
    assert got == ["after-abort"]
