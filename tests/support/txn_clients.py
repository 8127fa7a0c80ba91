"""Client helpers the transactional end-to-end tests share (confluent-kafka / librdkafka).

- `txn_producer`: a transactional producer (`transactional.id`, `linger.ms` 5, plus extras).
- `read_to_end`: an unsubscribed consumer assigned every partition from offset 0, with
  `enable.partition.eof`, polls until each partition has reported end-of-log (for
  read_committed that is the last stable offset) and returns the messages and, per
  partition, the offset where it stopped. Nothing waits on a clock: the deadline only bounds
  a failing test.
- `read_values`: the same, the values decoded as text.
- `txn_coordinator_port`: the port of a transactional id's coordinator, from a raw
  FindCoordinator (key type 1).
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.static.primitive import i8

from tests.support.kafka_wire import send_request


def txn_producer(bootstrap: str, txn_id: str, **extra: object) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **extra})


def read_to_end(
    bootstrap: str, topic: str, isolation: str, partitions: int, deadline_s: float
) -> tuple[list[Message], dict[int, int]]:
    """Every message from offset 0 to the end of each of `partitions` partitions (the LSO
    for read_committed), and the end offsets where the consumer stopped."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 100,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    messages: list[Message] = []
    ends: dict[int, int] = {}
    deadline = time.monotonic() + deadline_s
    try:
        while len(ends) < partitions:
            assert time.monotonic() < deadline, (
                f"no end of log on every partition: {ends}, {len(messages)} read"
            )
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                ends[m.partition()] = m.offset()
                continue
            messages.append(m)
    finally:
        c.close()
    return messages, ends


def read_values(
    bootstrap: str, topic: str, isolation: str, partitions: int, deadline_s: float
) -> tuple[list[str], dict[int, int]]:
    """`read_to_end` with each message's value decoded."""
    messages, ends = read_to_end(bootstrap, topic, isolation, partitions, deadline_s)
    return [m.value().decode() for m in messages], ends


def txn_coordinator_port(bootstrap: str, txn_id: str) -> int:
    resp = send_request(bootstrap, FindCoordinatorRequest(key_type=i8(1), coordinator_keys=(txn_id,))).parse()
    (c,) = resp.coordinators
    assert c.error_code == 0, c
    return int(c.port)
