"""An exactly-once pipeline survives SIGKILLed workers: two agents (`skiff metadata` on
PostgreSQL, a moto S3 bucket), an input topic of N keyed records, and a worker process that turns each input record into one
output record: the Java client's `txn-transform` (kafka-clients 4.3), or its confluent-kafka
twin tests/e2e/txn_worker.py (librdkafka); either has a read_committed consumer with its
partitions assigned by hand, a transactional producer, and sends the consumed offsets to
each transaction with the consumer's group metadata.

1. Worker 1 commits two rounds; round 3's records are written (flushed) and its offsets sent
   but not committed when it is SIGKILLed (it says "paused" at that point: the kill always
   lands in an open transaction that has data in the log).
2. Worker 2 (same transactional.id, same group) starts: its InitProducerId bumps the epoch and
   aborts worker 1's open transaction; it resumes from the committed offsets. It is SIGKILLed
   as soon as it reports its second committed round, wherever it is then (usually inside its
   next transaction, possibly mid-commit).
3. Worker 3 runs until its positions reach the input's end offsets.

A read_committed consumer then sees every input record exactly once in the output (count, and
identity: key, value and the source partition/offset each output record names), the aborted
writes are in the log (read_uncommitted sees more), and the group's committed offsets are the
input's end offsets. Synchronisation is on the workers' progress lines, never on a clock.
"""

from __future__ import annotations

import signal
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.e2e.test_clients_roundtrip import create_topic
from tests.e2e.test_cluster import start_cluster, wait_for_brokers
from tests.e2e.test_txn_java import PARTITIONS, end_offsets, read_to_end
from tests.support.agents import SkiffProcess
from tests.support.java_client import JavaClient, JavaStream
from tests.support.s3servers import S3Bucket

pytestmark = pytest.mark.slow

RECORDS = 600
BATCH = 25


def _produce_inputs(bootstrap: str, topic: str) -> dict[str, int]:
    """RECORDS keyed records (key "key-i", value "val-i"), librdkafka's key hashing; {key: partition}."""
    where: dict[str, int] = {}

    def ack(err: object, msg: object) -> None:
        assert err is None, err
        where[msg.key().decode()] = msg.partition()  # type: ignore[attr-defined]

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(RECORDS):
        p.produce(topic, key=f"key-{i}".encode(), value=f"val-{i}".encode(), on_delivery=ack)
    assert p.flush(60) == 0
    assert len(where) == RECORDS
    return where


@pytest.mark.parametrize("worker_kind", ["java", "python"])
def test_killed_workers_leave_every_record_exactly_once(
    worker_kind: str,
    java_client: JavaClient,
    spawn_skiff: Callable[..., SkiffProcess],
    moto_s3: S3Bucket,
    pg_url: str,
    request: pytest.FixtureRequest,
) -> None:
    cluster = start_cluster(spawn_skiff, moto_s3, pg_url, n_agents=2)
    request.addfinalizer(lambda: [p.kill(signal.SIGKILL) for p in [*cluster.agents, cluster.metadata]])
    for a in cluster.agents:
        wait_for_brokers(a.bootstrap, 2, timeout_s=60)
    bootstrap = ",".join(a.bootstrap for a in cluster.agents)
    src, dst = f"eos-in-{uuid.uuid4().hex[:8]}", f"eos-out-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, src, PARTITIONS)
    create_topic(bootstrap, dst, PARTITIONS)
    where = _produce_inputs(bootstrap, src)
    group, txn_id = f"eos-{uuid.uuid4().hex[:8]}", f"eos-tx-{uuid.uuid4()}"

    def worker(
        *, max_records: int | None = None, pause_before_commit: int | None = None, until_end: bool = False
    ) -> JavaStream:
        args = java_client.txn_transform_args(
            bootstrap,
            input_topic=src,
            output_topic=dst,
            group=group,
            transactional_id=txn_id,
            batch=BATCH,
            assign=True,
            timeout_ms=240_000,
            max_records=max_records,
            pause_before_commit=pause_before_commit,
            until_end=until_end,
        )
        if worker_kind == "python":  # the same options (it always assigns), the same JSON lines
            options = [str(a) for a in args[1:] if a != "--assign"]
            w = JavaStream([sys.executable, str(Path(__file__).with_name("txn_worker.py")), *options])
        else:
            w = java_client.start(*args)
        request.addfinalizer(w.close)
        return w

    w1 = worker(max_records=RECORDS, pause_before_commit=3)
    assert w1.wait_for("round", round=2)["outcome"] == "committed"
    paused = w1.wait_for("paused", round=3)
    w1.kill()
    assert w1.proc.returncode == -signal.SIGKILL

    w2 = worker(max_records=RECORDS)
    w2.wait_for("ready")
    w2.wait_for("round", round=2)
    w2.kill()
    assert w2.proc.returncode == -signal.SIGKILL

    w3 = worker(until_end=True)
    assert w3.finish(timeout_s=300) == 0, w3.stderr_tail()
    (summary,) = w3.of_type("summary")
    assert summary["aborted_rounds"] == 0
    # What the killed workers reported committed plus what worker 3 did is the input, short of at
    # most one round worker 2 committed but was killed before reporting.
    w1.finish()
    w2.finish()
    reported = [max((r["committed_total"] for r in w.of_type("round")), default=0) for w in (w1, w2)]
    assert reported[0] > 0 and reported[1] > 0, reported
    assert 0 <= RECORDS - (sum(reported) + summary["committed_total"]) <= BATCH, (reported, summary)

    out = read_to_end(bootstrap, dst, "read_committed")
    keys = Counter(k for k, _, _ in out)
    assert len(out) == RECORDS and set(keys) == set(where), (len(out), [k for k, n in keys.items() if n > 1])
    for key, value, (src_partition, _) in out:
        assert value == "T-val-" + key.removeprefix("key-")
        assert src_partition == where[key]
    assert len({s for _, _, s in out}) == RECORDS  # each source (partition, offset) once
    everything = read_to_end(bootstrap, dst, "read_uncommitted")
    assert len(everything) >= RECORDS + paused["count"]  # worker 1's round 3 is in the log, aborted
    ends = end_offsets(bootstrap, src)
    assert sum(ends.values()) == RECORDS
    got = java_client.admin(bootstrap, "group-offsets", group)
    assert {o["partition"]: o["offset"] for o in got["offsets"] if o["topic"] == src} == ends
