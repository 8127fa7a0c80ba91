"""`__consumer_offsets` as a lag tool reads it (issue 23 item 5), against `skiff playground`: a
group commits with confluent-kafka; a kafka-python consumer of the internal topic sees the
commit as Kafka's own records (OffsetCommitKey v1 / OffsetCommitValue v3, decoded here from
Kafka's schema, independently of the agent's encoder) in the group's partition (Kafka's
rule: Java hash of the group id modulo 50), then sees the next commit when it comes, and
nothing twice. The topic is listed as internal; writes to it are refused as Kafka refuses
them."""

from __future__ import annotations

import struct
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName

from tests.support.kafka_wire import send_request

INTERNAL = "__consumer_offsets"
DEADLINE_S = 30


def _java_partition(group: str) -> int:
    data = group.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(2**31) else abs(signed)) % 50


def _string(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">h", buf, pos)
    return buf[pos + 2 : pos + 2 + n].decode(), pos + 2 + n


def decode_key(key: bytes) -> tuple[int, str, str, int]:
    """OffsetCommitKey: version int16, group string, topic string, partition int32."""
    (version,) = struct.unpack_from(">h", key, 0)
    group, pos = _string(key, 2)
    topic, pos = _string(key, pos)
    (partition,) = struct.unpack_from(">i", key, pos)
    assert pos + 4 == len(key)
    return version, group, topic, partition


def decode_value(value: bytes) -> dict[str, Any]:
    """OffsetCommitValue v3: version, offset int64, leaderEpoch int32, metadata string, commitTimestamp int64."""
    version, offset, leader_epoch = struct.unpack_from(">hqi", value, 0)
    metadata, pos = _string(value, 14)
    (commit_ts,) = struct.unpack_from(">q", value, pos)
    assert pos + 8 == len(value)
    return {
        "version": version,
        "offset": offset,
        "leader_epoch": leader_epoch,
        "metadata": metadata,
        "ts": commit_ts,
    }


def _commit_with_a_group(bootstrap: str, topic: str, group: str, upto: int) -> None:
    """A confluent-kafka consumer in `group` reads partition 0 (from its committed offset)
    up to offset `upto` and commits `upto`."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([CTopicPartition(topic, 0)])
        last = -1
        deadline = time.monotonic() + DEADLINE_S
        while last < upto - 1 and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                last = msg.offset()
        assert last == upto - 1
        consumer.commit(offsets=[CTopicPartition(topic, 0, upto, "by-e2e")], asynchronous=False)
    finally:
        consumer.close()


def _read_commits(consumer: Any, group: str, want: int) -> list[tuple[int, tuple[Any, ...], dict[str, Any]]]:
    """(log offset, key, value) of the group's commits, polling until `want` were seen."""
    out: list[tuple[int, tuple[Any, ...], dict[str, Any]]] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(out) < want and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            for r in records:
                key = decode_key(r.key)
                if key[1] == group:
                    out.append((r.offset, key, decode_value(r.value)))
    return out


def test_a_consumer_of_consumer_offsets_sees_a_groups_commits(playground: str) -> None:
    from kafka import KafkaConsumer, TopicPartition

    topic, group = f"orders-{uuid.uuid4().hex[:8]}", f"lag-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": playground})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": playground})
    for i in range(5):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    _commit_with_a_group(playground, topic, group, 3)

    tp = TopicPartition(INTERNAL, _java_partition(group))
    reader = KafkaConsumer(bootstrap_servers=playground, group_id=None, enable_auto_commit=False)
    try:
        reader.assign([tp])
        reader.seek_to_beginning(tp)
        ((log_offset, key, value),) = _read_commits(reader, group, 1)
        assert key == (1, group, topic, 0)
        assert value["version"] == 3 and value["offset"] == 3
        # stored as the client sent it: confluent-kafka sends the C string's terminating NUL too
        assert value["metadata"].rstrip("\x00") == "by-e2e"
        assert value["leader_epoch"] >= -1 and value["ts"] > 0
        assert reader.end_offsets([tp])[tp] >= log_offset + 1
        # the next commit of the group comes after it, and the first is not read again
        _commit_with_a_group(playground, topic, group, 5)
        ((next_offset, key, value),) = _read_commits(reader, group, 1)
        assert next_offset > log_offset and key == (1, group, topic, 0) and value["offset"] == 5
    finally:
        reader.close()


def test_consumer_offsets_is_listed_internal_and_refuses_writes(playground: str) -> None:
    everything = send_request(
        playground,
        MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        ),
    ).parse()
    named = send_request(
        playground,
        MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=TopicName(INTERNAL)),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
    ).parse()
    for resp in (everything, named):
        (entry,) = [t for t in resp.topics if t.name == INTERNAL]
        assert entry.error_code == ErrorCode.none and entry.is_internal and len(entry.partitions) == 50
    assert not any(t.is_internal for t in everything.topics if t.name != INTERNAL)

    admin = AdminClient({"bootstrap.servers": playground})
    with pytest.raises(KafkaException) as created:
        admin.create_topics([NewTopic(INTERNAL, 1)])[INTERNAL].result(30)
    assert created.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": playground, "message.send.max.retries": 0})
    producer.produce(INTERNAL, value=b"forged", partition=0, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_EXCEPTION]  # INVALID_TOPIC_EXCEPTION (17)
