"""Kafka's own Java message classes judge the agent's Produce and Fetch responses.

For every version the agent advertises (Produce 3-9, Fetch 4-12), a raw request goes to
`skiff playground`; kafka-clients' generated classes must parse each response with no
bytes left over and write it back byte for byte (no default-valued tagged field), and
every record batch inside a Fetch response must pass its CRC and decode.
(The admin APIs get the same treatment in tests/component/test_admin_apis.py.)
"""

from __future__ import annotations

import datetime
import uuid

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import TopicName
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64
from skiff.agent import protocol
from skiff.fileformat.batch_header import Compression
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record

from tests.support.java_client import JavaClient
from tests.support.kafka_wire import KafkaWire


def test_produce_and_fetch_responses_of_every_version_satisfy_kafka(
    playground: str, java_client: JavaClient
) -> None:
    topic = f"oracle-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": playground})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    items: list[tuple[int, int, bytes]] = []
    with KafkaWire(playground) as wire:
        for version in range(3, 10):
            batch = build_batch(
                [
                    Record(i, 1_700_000_000_000 + i, f"k{i}".encode(), b"v" * i, (("h", b"x"),))
                    for i in range(5)
                ],
                compression=Compression.GZIP if version % 2 else Compression.NONE,
            )
            latest = ProduceRequest(
                transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
                topic_data=(TopicProduceData(name=TopicName(topic), partition_data=(
                    PartitionProduceData(index=i32(version % 2), records=Records.parse(batch)),
                    PartitionProduceData(index=i32(7), records=Records.parse(batch)),  # no such partition
                )),),
            )  # fmt: skip
            raw = wire.request(protocol.convert(latest, protocol.request_schema(0, version)))
            items.append(raw.oracle_item)
        for version in range(4, 13):
            latest_fetch = FetchRequest(
                max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=10)), min_bytes=i32(1),
                max_bytes=i32(1 << 20), isolation_level=i8(0),
                topics=(FetchTopic(topic=TopicName(topic), partitions=(
                    FetchPartition(partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20)),
                    FetchPartition(partition=i32(1), fetch_offset=i64(2), partition_max_bytes=i32(1 << 20)),
                    FetchPartition(partition=i32(1), fetch_offset=i64(10_000), partition_max_bytes=i32(100)),
                )),),
                forgotten_topics_data=(),
            )  # fmt: skip
            raw = wire.request(protocol.convert(latest_fetch, protocol.request_schema(1, version)))
            items.append(raw.oracle_item)
    results = java_client.api_oracle(items)
    bad = [
        (key, version, r)
        for (key, version, _), r in zip(items, results, strict=True)
        if not r["ok"] or r["remaining"] or not r["roundtrip"] or r["unknown_tagged_fields"]
    ]
    assert not bad, bad[:3]
    fetched = [r for (key, _, _), r in zip(items, results, strict=True) if key == 1]
    assert len(fetched) == 9
    # every fetch returned real batches, and the oracle checked their CRCs and records
    assert all(r.get("batches", 0) >= 2 and r.get("records", 0) >= 10 for r in fetched), fetched[:2]
