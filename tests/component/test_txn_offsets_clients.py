"""Offsets in transactions with a real client (confluent-kafka / librdkafka): a
read_committed consumer's `committed()` sends OffsetFetch with require_stable, is answered
UNSTABLE_OFFSET_COMMIT while a transactional producer's `send_offsets_to_transaction` is
pending, retries, and returns the transaction's offset once it commits; a read_uncommitted
consumer is answered the committed offset at once."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.component.fake_metadata import AgentHarness

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

        # the agent tells us when it has answered UNSTABLE_OFFSET_COMMIT for the partition
        answered_unstable = threading.Event()
        lookup = h.metadata.unstable_txn_offsets

        async def spy(group_id: str, topics: Sequence[str] | None) -> set[tuple[str, int]]:
            found = await lookup(group_id, topics)
            if group_id == group and (topic, 0) in found:
                answered_unstable.set()
            return found

        h.metadata.unstable_txn_offsets = spy  # type: ignore[method-assign]
        try:
            with ThreadPoolExecutor(1) as pool:
                pending = pool.submit(waiting.committed, [tp], 60)
                assert answered_unstable.wait(TIMEOUT_S)  # librdkafka asked with require_stable
                producer.commit_transaction(TIMEOUT_S)
                (got,) = pending.result(60)  # it retried until the transaction committed
        finally:
            del h.metadata.unstable_txn_offsets
        assert got.offset == 5 and got.error is None
        (got,) = plain.committed([tp], timeout=TIMEOUT_S)
        assert got.offset == 5
    finally:
        plain.close()
        waiting.close()
