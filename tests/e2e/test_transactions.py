"""Transactions with confluent-kafka (librdkafka) against `skiff playground` over TCP.

A transactional producer commits and aborts transactions across two partitions; a
read_committed consumer sees exactly the committed records (and reaches the end of the
log: the markers moved the last stable offset to the high watermark), a read_uncommitted
one sees every record. A second producer instance with the same transactional.id fences
the first (whose commit then fails fatally) and aborts what it left open. A transaction
that outlives `transaction.timeout.ms` is aborted by the coordinator.

Nothing waits on a clock: consumers read until every partition reports end-of-log (a
deadline only bounds a failing test).
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.txn_clients import read_values, txn_producer

PARTITIONS = 2
DEADLINE_S = 60.0


def _topic(bootstrap: str) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(timeout=30)
    return name


def _send(p: Producer, topic: str, values: list[str]) -> None:
    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0


def _read_to_end(bootstrap: str, topic: str, isolation: str) -> tuple[list[str], dict[int, int]]:
    """Every value from offset 0 to the end of each partition (the LSO for read_committed),
    and the end offsets where the consumer stopped."""
    return read_values(bootstrap, topic, isolation, PARTITIONS, DEADLINE_S)


def _high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}"})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS)
        }
    finally:
        c.close()


def test_commit_and_abort_across_partitions(playground: str) -> None:
    topic = _topic(playground)
    p = txn_producer(playground, f"tx-{uuid.uuid4()}")
    p.init_transactions(30)
    committed = [f"a{i}" for i in range(6)]
    aborted = [f"b{i}" for i in range(6)]
    later = [f"c{i}" for i in range(4)]
    p.begin_transaction()
    _send(p, topic, committed)
    p.commit_transaction(30)
    p.begin_transaction()
    _send(p, topic, aborted)
    p.abort_transaction(30)
    p.begin_transaction()
    _send(p, topic, later)
    p.commit_transaction(30)

    got, ends = _read_to_end(playground, topic, "read_committed")
    assert sorted(got) == sorted(committed + later)
    # 16 records + 3 markers on each of the 2 partitions: the LSO is the high watermark
    hwms = _high_watermarks(playground, topic)
    assert ends == hwms and sum(hwms.values()) == 16 + 3 * PARTITIONS
    everything, _ = _read_to_end(playground, topic, "read_uncommitted")
    assert sorted(everything) == sorted(committed + aborted + later)


def test_open_transaction_holds_back_read_committed(playground: str) -> None:
    topic = _topic(playground)
    p = txn_producer(playground, f"tx-{uuid.uuid4()}")
    p.init_transactions(30)
    p.begin_transaction()
    _send(p, topic, ["x0", "x1"])
    got, ends = _read_to_end(playground, topic, "read_committed")
    assert got == [] and ends == {0: 0, 1: 0}  # the LSO is the open transaction's first offset
    seen, _ = _read_to_end(playground, topic, "read_uncommitted")
    assert sorted(seen) == ["x0", "x1"]
    p.commit_transaction(30)
    got, _ = _read_to_end(playground, topic, "read_committed")
    assert sorted(got) == ["x0", "x1"]


def test_a_new_instance_fences_the_old_one(playground: str) -> None:
    topic = _topic(playground)
    txn_id = f"tx-{uuid.uuid4()}"
    old = txn_producer(playground, txn_id)
    old.init_transactions(30)
    old.begin_transaction()
    _send(old, topic, ["zombie0", "zombie1"])
    new = txn_producer(playground, txn_id)
    new.init_transactions(30)  # aborts the old instance's open transaction
    with pytest.raises(KafkaException) as e:
        old.commit_transaction(30)
    err = e.value.args[0]
    assert err.fatal(), err
    assert err.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ), err
    new.begin_transaction()
    _send(new, topic, ["fresh0", "fresh1"])
    new.commit_transaction(30)
    got, _ = _read_to_end(playground, topic, "read_committed")
    assert sorted(got) == ["fresh0", "fresh1"]


def test_transaction_timeout_aborts(playground: str) -> None:
    topic = _topic(playground)
    p = txn_producer(
        playground, f"tx-{uuid.uuid4()}", **{"transaction.timeout.ms": 2000, "socket.timeout.ms": 1000}
    )
    p.init_transactions(30)
    p.begin_transaction()
    _send(p, topic, ["late0", "late1"])
    # The coordinator's scan aborts it: a read_committed consumer then reaches the end of
    # the log (the abort markers moved the LSO to the high watermark) and sees nothing.
    deadline = time.monotonic() + DEADLINE_S
    while True:
        got, ends = _read_to_end(playground, topic, "read_committed")
        assert got == []
        if sum(ends.values()) == 2 + PARTITIONS:  # two records, one ABORT marker per partition
            break
        assert time.monotonic() < deadline, ends
    with pytest.raises(KafkaException):
        p.commit_transaction(30)
    everything, _ = _read_to_end(playground, topic, "read_uncommitted")
    assert sorted(everything) == ["late0", "late1"]


def test_offsets_sent_to_a_transaction_commit_with_it(playground: str) -> None:
    topic = _topic(playground)
    group = f"g-{uuid.uuid4()}"
    consumer = Consumer({"bootstrap.servers": playground, "group.id": group, "enable.auto.commit": False})
    try:
        p = txn_producer(playground, f"tx-{uuid.uuid4()}")
        p.init_transactions(30)
        p.begin_transaction()
        _send(p, topic, ["out0"])
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 5)], consumer.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        assert tp.offset == 5
        p.begin_transaction()
        _send(p, topic, ["out1"])
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 9)], consumer.consumer_group_metadata(), 30)
        p.abort_transaction(30)
        (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        assert tp.offset == 5  # the aborted transaction's offset never became visible
    finally:
        consumer.close()
    got, _ = _read_to_end(playground, topic, "read_committed")
    assert got == ["out0"]


def test_aiokafka_transactional_producer_and_read_committed_consumer(playground: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as AioTP

    topic = _topic(playground)

    async def run() -> tuple[list[str], list[str]]:
        producer = AIOKafkaProducer(bootstrap_servers=playground, transactional_id=f"tx-{uuid.uuid4()}")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(4):
                    await producer.send_and_wait(topic, f"kept{i}".encode(), partition=i % PARTITIONS)
            await producer.begin_transaction()
            for i in range(4):
                await producer.send_and_wait(topic, f"dropped{i}".encode(), partition=i % PARTITIONS)
            await producer.abort_transaction()
        finally:
            await producer.stop()
        seen: dict[str, list[str]] = {}
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = AIOKafkaConsumer(
                bootstrap_servers=playground, isolation_level=isolation, enable_auto_commit=False
            )
            await consumer.start()
            try:
                tps = [AioTP(topic, p) for p in range(PARTITIONS)]
                consumer.assign(tps)
                await consumer.seek_to_beginning(*tps)
                ends = await consumer.end_offsets(tps)  # the LSO for read_committed
                got: list[str] = []
                deadline = time.monotonic() + DEADLINE_S
                while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                    assert time.monotonic() < deadline, (isolation, got)
                    batches = await consumer.getmany(timeout_ms=500)
                    got += [m.value.decode() for ms in batches.values() for m in ms]
                seen[isolation] = got
            finally:
                await consumer.stop()
        return seen["read_committed"], seen["read_uncommitted"]

    committed, everything = asyncio.run(run())
    assert sorted(committed) == [f"kept{i}" for i in range(4)]
    assert sorted(everything) == sorted([f"kept{i}" for i in range(4)] + [f"dropped{i}" for i in range(4)])
