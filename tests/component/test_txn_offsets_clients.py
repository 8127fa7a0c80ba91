"""Offsets in transactions with real clients (confluent-kafka / librdkafka, and Kafka's Java
consumer): a read_committed consumer's `committed()` sends OffsetFetch with require_stable,
is answered UNSTABLE_OFFSET_COMMIT while a transaction's staged offsets are pending,
retries, and returns the transaction's offset once it commits; a read_uncommitted consumer
is answered the committed offset at once. A transactional producer that sends the group
metadata of a consumer that has left the group gets an abortable error (KIP-447)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from skiff.metadata.types import GroupOffset

from tests.component.fake_metadata import AgentHarness
from tests.component.test_txn_offsets_stable import _add_offsets, _end, _init, _txn_commit
from tests.support.java_client import JavaClient

TIMEOUT_S = 30


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentHarness]:
    h = AgentHarness(
        tmp_path_factory.mktemp("txn-offsets-clients"), group_initial_rebalance_delay_ms=0
    ).start()
    yield h
    h.stop()


def _consumer(h: AgentHarness, group: str, isolation: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": h.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )


class UnstableSpy:
    """Wraps the agent's metadata call for OffsetFetch with require_stable: `answered` is set
    once it found `(topic, partition)` of `group` unstable (so answered UNSTABLE_OFFSET_COMMIT)."""

    def __init__(self, h: AgentHarness, group: str, key: tuple[str, int]) -> None:
        self.h, self.group, self.key = h, group, key
        self.answered = threading.Event()
        self.lookup = h.metadata.fetch_stable_offsets

    async def __call__(
        self, group_id: str, topics: Sequence[str] | None
    ) -> tuple[list[GroupOffset], set[tuple[str, int]]]:
        found = await self.lookup(group_id, topics)
        if group_id == self.group and self.key in found[1]:
            self.answered.set()
        return found

    def __enter__(self) -> UnstableSpy:
        self.h.metadata.fetch_stable_offsets = self  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        del self.h.metadata.fetch_stable_offsets


def test_read_committed_committed_waits_for_the_transaction(harness: AgentHarness) -> None:
    h = harness
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    h.call(h.metadata.create_topic(topic, 1, {}))
    tp = TopicPartition(topic, 0)
    plain = _consumer(h, group, "read_uncommitted")
    waiting = _consumer(h, group, "read_committed")
    producer = Producer({"bootstrap.servers": h.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"})
    try:
        plain.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [TopicPartition(topic, 0, 5)], plain.consumer_group_metadata(), TIMEOUT_S
        )
        # read_uncommitted: no require_stable, the committed offset at once
        (got,) = plain.committed([tp], timeout=TIMEOUT_S)
        assert got.offset == 2 and got.error is None

        with UnstableSpy(h, group, (topic, 0)) as spy, ThreadPoolExecutor(1) as pool:
            pending = pool.submit(waiting.committed, [tp], 60)
            assert spy.answered.wait(TIMEOUT_S)  # librdkafka asked with require_stable
            producer.commit_transaction(TIMEOUT_S)
            (got,) = pending.result(60)  # it retried until the transaction committed
        assert got.offset == 5 and got.error is None
        (got,) = plain.committed([tp], timeout=TIMEOUT_S)
        assert got.offset == 5
    finally:
        plain.close()
        waiting.close()


def test_java_read_committed_consumer_retries_unstable_offsets(
    harness: AgentHarness, java_client: JavaClient
) -> None:
    h = harness
    topic, group, txn = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}", f"tx-{uuid.uuid4().hex[:8]}"
    h.call(h.metadata.create_topic(topic, 1, {}))
    member = java_client.group_member(h.bootstrap, topic, group, props={"isolation.level": "read_committed"})
    try:
        pid, epoch = _init(h, txn)
        _add_offsets(h, txn, pid, epoch, group)
        assert set(_txn_commit(h, txn, pid, epoch, group, {(topic, 0): 7}).values()) == {0}
        with UnstableSpy(h, group, (topic, 0)) as spy, ThreadPoolExecutor(1) as pool:
            pending = pool.submit(member.call, "committed")
            assert spy.answered.wait(TIMEOUT_S)  # the Java consumer asked with require_stable
            _end(h, txn, pid, epoch, True)
            answer = pending.result(90)  # UnstableOffsetCommitException is retried inside
        assert answer["offsets"] == {"0": 7}
    finally:
        member.close()


def test_a_consumer_that_left_its_group_cannot_commit_offsets_in_a_transaction(harness: AgentHarness) -> None:
    """KIP-447: the producer sends the consumer's group metadata (generation, member id) with
    its offsets; once that consumer has left the group, the transaction can only abort."""
    h = harness
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    h.call(h.metadata.create_topic(topic, 1, {}))
    consumer = _consumer(h, group, "read_committed")
    producer = Producer({"bootstrap.servers": h.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"})
    consumer.subscribe([topic])
    while not consumer.assignment():  # joins the group: a real generation and member id
        consumer.poll(0.2)
    live = consumer.consumer_group_metadata()
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, 3)], live, TIMEOUT_S)
    producer.commit_transaction(TIMEOUT_S)
    consumer.close()  # leaves the group: its member id is gone

    producer.begin_transaction()
    with pytest.raises(KafkaException) as refused:
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 8)], live, TIMEOUT_S)
    error = refused.value.args[0]
    assert error.txn_requires_abort() and not error.fatal(), error
    producer.abort_transaction(TIMEOUT_S)
    reader = _consumer(h, group, "read_committed")
    try:
        (got,) = reader.committed([TopicPartition(topic, 0)], timeout=TIMEOUT_S)
        assert got.offset == 3  # the zombie's offsets never reached the group
    finally:
        reader.close()
