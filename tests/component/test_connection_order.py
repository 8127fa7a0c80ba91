"""One connection's state-changing requests take effect in the order it sent them (issue 11
item 9), with a real client: confluent-kafka commits asynchronously, then reads back."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.component.fake_metadata import AgentHarness

COMMITS = 100
ROUNDS = 5


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentHarness]:
    h = AgentHarness(tmp_path_factory.mktemp("order")).start()
    yield h
    h.stop()


def test_async_commits_then_committed_reads_back_the_last_one(harness: AgentHarness) -> None:
    """librdkafka pipelines OffsetCommits on the coordinator connection; each is confirmed,
    and the offset read back afterwards must be the last one sent (its test 0030)."""
    assert harness.metadata is not None
    topic = f"order-{uuid.uuid4().hex[:8]}"
    harness.call(harness.metadata.create_topic(topic, 2, {}))
    confirmed: list[int] = []

    def on_commit(err: object, partitions: list[TopicPartition]) -> None:
        assert err is None, err
        confirmed.extend(p.offset for p in partitions if p.partition == 0)

    consumer = Consumer(
        {
            "bootstrap.servers": harness.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "on_commit": on_commit,
        }
    )
    try:
        for round_ in range(ROUNDS):
            base = round_ * 1000
            for i in range(1, COMMITS + 1):
                consumer.commit(
                    offsets=[TopicPartition(topic, 0, base + i), TopicPartition(topic, 1, base + 2 * i)],
                    asynchronous=True,
                )
            while len(confirmed) < (round_ + 1) * COMMITS:
                consumer.poll(1.0)  # serves the commit callbacks
            assert confirmed[-COMMITS:] == [base + i for i in range(1, COMMITS + 1)]
            got = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
            assert [(p.partition, p.offset) for p in got] == [(0, base + COMMITS), (1, base + 2 * COMMITS)]
    finally:
        consumer.close()
