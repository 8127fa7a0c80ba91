"""Smoke tests of the Java client harness (tests/support/java_client.py) and of the raw-wire
helper plus the Java API oracle (tests/support/kafka_wire.py).

Every test takes a `bootstrap` address: a `skiff playground` process (tests/support/agents.py).
The Java client is the reference Kafka client (idempotence on by default).
"""

from __future__ import annotations

import datetime
import uuid
from collections import defaultdict
from typing import Any

import kio.schema.fetch.v4.request as fetch_v4
import kio.schema.fetch.v12.request as fetch_v12
import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.metadata.v1.request import MetadataRequest as MetadataRequestV1
from kio.schema.metadata.v12.request import MetadataRequest as MetadataRequestV12
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from tests.support.java_client import JavaClient
from tests.support.kafka_wire import KafkaWire

pytestmark = pytest.mark.slow


@pytest.fixture
def bootstrap(playground: str) -> str:
    return playground


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _check_acks(acks: list[dict[str, Any]], partitions: int, count: int) -> dict[tuple[int, int], str]:
    """Every record acked, on partition index % partitions, offsets 0..n-1 per partition in send order."""
    assert [a["index"] for a in acks] == list(range(count))
    by_partition: dict[int, list[int]] = defaultdict(list)
    where: dict[tuple[int, int], str] = {}
    for a in acks:
        assert "error" not in a, a
        assert a["partition"] == a["index"] % partitions
        by_partition[a["partition"]].append(a["offset"])
        where[(a["partition"], a["offset"])] = a["key"]
    for p, offsets in by_partition.items():
        assert offsets == list(range(len(offsets))), f"partition {p}: {offsets}"
    return where


def test_admin_operations(java_client: JavaClient, bootstrap: str) -> None:
    topic = _topic("admin")
    created = java_client.admin(bootstrap, "create-topic", topic, 3)
    assert created["type"] == "created" and created["topic"] == topic and created["partitions"] == 3

    assert topic in java_client.admin(bootstrap, "list-topics")["topics"]

    described = java_client.admin(bootstrap, "describe-topic", topic)
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    assert all(p["leader"] is not None for p in described["partitions"])

    cluster = java_client.admin(bootstrap, "describe-cluster")
    assert cluster["cluster_id"] and cluster["nodes"]
    assert all(n["host"] and n["port"] > 0 for n in cluster["nodes"])

    configs = java_client.admin(bootstrap, "describe-configs", topic)
    assert configs["type"] == "configs" and isinstance(configs["configs"], dict)

    offsets = java_client.admin(bootstrap, "list-offsets", topic)
    assert [(p["earliest"], p["latest"]) for p in offsets["partitions"]] == [(0, 0)] * 3

    assert java_client.admin(bootstrap, "delete-topic", topic) == {"type": "deleted", "topic": topic}
    assert topic not in java_client.admin(bootstrap, "list-topics")["topics"]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_then_consume(java_client: JavaClient, bootstrap: str, codec: str) -> None:
    topic = _topic(f"pc-{codec}")
    partitions, count = 3, 30
    java_client.admin(bootstrap, "create-topic", topic, partitions)

    produced = java_client.produce(
        bootstrap, topic, partitions=partitions, count=count, codec=codec, headers=True, value_size=64
    )
    summary = produced.one("summary")
    assert summary["acked"] == count and summary["failed"] == 0
    where = _check_acks(produced.of_type("ack"), partitions, count)

    consumed = java_client.consume(bootstrap, topic, partitions=partitions, expect=count)
    records = consumed.of_type("record")
    assert len(records) == count
    assert consumed.one("summary")["count"] == count
    for r in records:
        assert where[(r["partition"], r["offset"])] == r["key"]
        i = int(r["key"].removeprefix("k-"))
        assert r["value"].startswith(f"v-{i}-") and r["value_size"] == 64
        assert r["headers"] == [["idx", str(i)], ["src", "skiff-java"], ["nil", None]]
        assert r["timestamp_type"] == "CreateTime"


@pytest.mark.parametrize(("acks", "idempotent"), [("0", False), ("1", False), ("all", False), ("all", True)])
def test_produce_acks(java_client: JavaClient, bootstrap: str, acks: str, idempotent: bool) -> None:
    topic = _topic(f"acks{acks}")
    java_client.admin(bootstrap, "create-topic", topic, 2)
    produced = java_client.produce(
        bootstrap, topic, partitions=2, count=10, acks=acks, idempotent=idempotent, key_prefix="a"
    )
    acked = produced.of_type("ack")
    assert len(acked) == 10 and all("error" not in a for a in acked)
    if acks == "0":
        assert {a["offset"] for a in acked} == {-1}  # acks=0: the client never learns the offsets
    else:
        _check_acks(acked, 2, 10)
    consumed = java_client.consume(bootstrap, topic, partitions=2, expect=10)
    assert sorted(r["key"] for r in consumed.of_type("record")) == sorted(f"a-{i}" for i in range(10))


def test_failures_are_reported(java_client: JavaClient) -> None:
    bad_usage = java_client.run_raw("produce", "--topic", "t")
    assert bad_usage.returncode == 2 and bad_usage.error and "--bootstrap" in bad_usage.error["message"]
    # Nothing listens on port 1: the admin call must fail (exit 1), not hang.
    down = java_client.run_raw("admin", "--bootstrap", "127.0.0.1:1", "--timeout-ms", 3000, "list-topics")
    assert down.returncode == 1 and down.error and down.error["kind"] == "failure"


def test_api_oracle_on_captured_responses(java_client: JavaClient, bootstrap: str) -> None:
    with KafkaWire(bootstrap) as wire:
        captured = [
            wire.request(ApiVersionsRequestV0()),
            wire.request(
                ApiVersionsRequestV3(client_software_name="skiff-test", client_software_version="0")
            ),
            wire.request(MetadataRequestV1(topics=None)),
            wire.request(
                MetadataRequestV12(
                    topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
                )
            ),
        ]
    for raw in captured:
        raw.parse()  # kio agrees the bytes are one whole response

    good = [raw.oracle_item for raw in captured]
    key, version, body = captured[1].oracle_item
    mangled = [(key, version, body[:-5]), (key, version, body + b"\x00"), (key, 99, body)]
    results = java_client.api_oracle(good + mangled)

    for raw, result in zip(captured, results[: len(good)], strict=True):
        assert result["ok"], result
        assert result["api_key"] == raw.api_key and result["api_version"] == raw.api_version
        assert result["remaining"] == 0 and isinstance(result["roundtrip"], bool)
    truncated, trailing, unsupported = results[len(good) :]
    assert not truncated["ok"] and truncated["error"]
    assert not trailing["ok"] and trailing["remaining"] == 1
    assert not unsupported["ok"] and unsupported["unsupported_by_oracle"]

    # kind="request" parses request bodies instead (an empty ApiVersions v0 request is valid).
    request_check = java_client.api_oracle([(18, 0, b"")], kind="request")
    assert request_check[0]["ok"], request_check


def _fetch_requests(topic: str, partitions: int) -> list[Any]:
    """Fetch v4 (oldest Kafka 4 accepts) and v12 (last with topic names), all partitions from 0."""
    wait, big = i32Timedelta.parse(datetime.timedelta(milliseconds=10)), i32(1 << 20)
    v4 = fetch_v4.FetchRequest(
        replica_id=BrokerId(-1), max_wait=wait, min_bytes=i32(1), max_bytes=big, isolation_level=i8(0),
        topics=(fetch_v4.FetchTopic(topic=TopicName(topic), partitions=tuple(
            fetch_v4.FetchPartition(partition=i32(p), fetch_offset=i64(0), partition_max_bytes=big)
            for p in range(partitions)
        )),),
    )  # fmt: skip
    v12 = fetch_v12.FetchRequest(
        cluster_id=None, replica_id=BrokerId(-1), max_wait=wait, min_bytes=i32(1), max_bytes=big,
        isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1), forgotten_topics_data=(), rack_id="",
        topics=(fetch_v12.FetchTopic(topic=TopicName(topic), partitions=tuple(
            fetch_v12.FetchPartition(
                partition=i32(p), current_leader_epoch=i32(-1), fetch_offset=i64(0), last_fetched_epoch=i32(-1),
                log_start_offset=i64(-1), partition_max_bytes=big,
            )
            for p in range(partitions)
        )),),
    )  # fmt: skip
    return [v4, v12]


def test_api_oracle_checks_fetched_record_batches(java_client: JavaClient, bootstrap: str) -> None:
    topic = _topic("oracle-fetch")
    java_client.admin(bootstrap, "create-topic", topic, 2)
    java_client.produce(bootstrap, topic, partitions=2, count=6, codec="gzip", headers=True)
    java_client.produce(bootstrap, topic, partitions=2, count=4, codec="none", key_prefix="plain")
    with KafkaWire(bootstrap) as wire:
        fetched = [wire.request(req) for req in _fetch_requests(topic, 2)]

    body = fetched[1].body
    at = body.rfind(b"v-3")  # a value in the uncompressed batch: corrupting it breaks that batch's CRC
    assert at > 0
    corrupt = (1, 12, body[:at] + b"X" + body[at + 1 :])
    results = java_client.api_oracle([raw.oracle_item for raw in fetched] + [corrupt], show=True)
    for result in results[:2]:
        assert result["ok"], result
        assert result["records"] == 10 and result["batches"] >= 2
        assert {(t, p) for t, p, _base, _last in result["batch_offsets"]} == {(topic, 0), (topic, 1)}
    assert not results[2]["ok"] and "invalid record batch" in results[2]["error"], results[2]
