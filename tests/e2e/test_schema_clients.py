"""Confluent's own serializers through Skiff, real processes: `skiff metadata` (its URL is the
registry URL) and `skiff agent` over a moto S3 bucket, confluent-kafka's AvroSerializer /
AvroDeserializer, JSONSerializer / JSONDeserializer and ProtobufSerializer /
ProtobufDeserializer round-tripping records through the agent; an incompatible schema refused
by the registry with Confluent's 409; topics with broker-side validation refusing plain bytes
with INVALID_RECORD (the client sees the code) and admitting the serializers' output, by topic
name and by record name; and the same with authentication on: the serializers register with a
writer token sent as HTTP basic auth, the agent validates with its agent token.

Confluent's Java serializers (KafkaAvroSerializer) are not tested: their jars are not on this
machine (tests/java has Apache Kafka's Java client only).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, record_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from tests.support.agents import SkiffProcess, agent_args
from tests.support.java_client import JavaClient
from tests.support.s3servers import S3Bucket

USER_AVRO = (
    '{"type":"record","name":"User","namespace":"skiff.e2e","fields":[{"name":"name","type":"string"},'
    '{"name":"age","type":"int","default":0}]}'
)
# A new field without a default: BACKWARD (the default level) refuses it.
USER_AVRO_BAD = USER_AVRO.replace(
    '{"name":"age","type":"int","default":0}', '{"name":"email","type":"string"}'
)
USER_JSON = (
    '{"title":"skiff.e2e.User","type":"object","properties":{"name":{"type":"string"},'
    '"age":{"type":"integer"}},"required":["name"]}'
)
USERS = [{"name": f"user-{i}", "age": i} for i in range(5)]
TOKENS = {role: f"{role}-{uuid.uuid4().hex}" for role in ("agent", "writer", "reader", "admin")}


@dataclass
class Cluster:
    bootstrap: str
    registry_url: str
    clients: list[SchemaRegistryClient] = field(default_factory=list)

    def registry(self, token: str | None = None) -> SchemaRegistryClient:
        conf: dict[str, Any] = {"url": self.registry_url}
        if token is not None:
            conf["basic.auth.user.info"] = f"producer:{token}"
        client = SchemaRegistryClient(conf)
        self.clients.append(client)
        return client

    def close(self) -> None:
        for client in self.clients:
            client.close()


def start_cluster(
    spawn_skiff: Callable[..., SkiffProcess], bucket: S3Bucket, tmp_path: Path, *, auth: bool
) -> Cluster:
    metadata_args = ["metadata", "--db", f"sqlite:///{tmp_path / 'm.db'}", "--port", "{port}"]
    agent_env = {**bucket.env, "SKIFF_FLUSH_INTERVAL_MS": "20"}
    agent_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SKIFF_METADATA_TOKEN")},
        **agent_env,
    }
    if auth:
        tokens = tmp_path / "tokens"
        tokens.write_text("".join(f"{role}:{token}\n" for role, token in TOKENS.items()))
        metadata_args += ["--tokens-file", str(tokens)]
        agent_env["SKIFF_METADATA_TOKEN"] = TOKENS["agent"]
    metadata = spawn_skiff(*metadata_args)
    url = f"http://127.0.0.1:{metadata.port}"
    agent = spawn_skiff(*agent_args(bucket.url("data"), url), env=agent_env)
    return Cluster(agent.bootstrap, url)


@pytest.fixture
def cluster(spawn_skiff: Callable[..., SkiffProcess], moto_s3: S3Bucket, tmp_path: Path) -> Iterator[Cluster]:
    c = start_cluster(spawn_skiff, moto_s3, tmp_path, auth=False)
    yield c
    c.close()


def create_topic(bootstrap: str, name: str, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=config or {})])[name].result(timeout=30)


def produce(bootstrap: str, topic: str, values: list[bytes | None]) -> list[KafkaError | None]:
    """Each record's delivery error (None: acked), in order."""
    outcomes: list[KafkaError | None] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "retries": 0})
    for v in values:
        p.produce(topic, key=b"k", value=v, on_delivery=lambda err, _msg: outcomes.append(err))
    assert p.flush(60) == 0
    return outcomes


def consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}", "enable.auto.commit": False}
    )
    out: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        while len(out) < count:
            m = c.poll(30)
            assert m is not None, f"consumed {len(out)} of {count}"
            assert m.error() is None, m.error()
            out.append(m.value())
    finally:
        c.close()
    return out


def round_trip(
    cluster: Cluster,
    topic: str,
    serialize: Callable[..., bytes],
    deserialize: Callable[..., Any],
    objs: list[Any],
) -> list[Any]:
    ctx = SerializationContext(topic, MessageField.VALUE)
    create_topic(cluster.bootstrap, topic)
    assert produce(cluster.bootstrap, topic, [serialize(o, ctx) for o in objs]) == [None] * len(objs)
    return [deserialize(v, ctx) for v in consume(cluster.bootstrap, topic, len(objs))]


def order_message_class() -> Any:
    """A Protobuf message class built from a descriptor (what protoc's generated module does)."""
    f = descriptor_pb2.FileDescriptorProto(name="skiff_e2e_order.proto", package="skiff.e2e", syntax="proto3")
    m = f.message_type.add(name="Order")
    m.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=1)
    m.field.add(name="qty", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT32, label=1)
    line = m.nested_type.add(name="Line")
    line.field.add(name="sku", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("skiff.e2e.Order"))


def test_avro_round_trip_and_an_incompatible_schema(cluster: Cluster) -> None:
    sr = cluster.registry()
    got = round_trip(cluster, "users-avro", AvroSerializer(sr, USER_AVRO), AvroDeserializer(sr), USERS)
    assert got == USERS
    latest = sr.get_latest_version("users-avro-value")
    assert (latest.version, latest.schema.schema_type) == (1, "AVRO")
    bad = AvroSerializer(sr, USER_AVRO_BAD)
    with pytest.raises(SchemaRegistryError) as refused:
        bad({"name": "x", "email": "x@example.com"}, SerializationContext("users-avro", MessageField.VALUE))
    assert (refused.value.http_status_code, refused.value.error_code) == (409, 409)
    assert sr.get_versions("users-avro-value") == [1]


def test_json_round_trip(cluster: Cluster) -> None:
    sr = cluster.registry()
    got = round_trip(cluster, "users-json", JSONSerializer(USER_JSON, sr), JSONDeserializer(USER_JSON), USERS)
    assert got == USERS
    assert sr.get_latest_version("users-json-value").schema.schema_type == "JSON"


def test_protobuf_round_trip(cluster: Cluster) -> None:
    sr = cluster.registry()
    order = order_message_class()
    objs = [order(id=f"o-{i}", qty=i) for i in range(5)]
    serializer = ProtobufSerializer(order, sr, {"use.deprecated.format": False})
    deserializer = ProtobufDeserializer(order, {"use.deprecated.format": False})
    got = round_trip(cluster, "orders-proto", serializer, deserializer, objs)
    assert got == objs
    assert sr.get_latest_version("orders-proto-value").schema.schema_type == "PROTOBUF"


def _refused_with_invalid_record(errors: list[KafkaError | None]) -> None:
    assert errors and all(e is not None and e.code() == KafkaError.INVALID_RECORD for e in errors), errors


def test_validation_refuses_plain_bytes_and_admits_serializer_output(cluster: Cluster) -> None:
    sr = cluster.registry()
    topic = "validated"
    create_topic(cluster.bootstrap, topic, {"confluent.value.schema.validation": "true"})
    ctx = SerializationContext(topic, MessageField.VALUE)
    _refused_with_invalid_record(produce(cluster.bootstrap, topic, [b'{"name": "plain json"}']))
    framed = AvroSerializer(sr, USER_AVRO)(USERS[0], ctx)
    assert produce(cluster.bootstrap, topic, [framed, None]) == [None, None]  # a tombstone passes
    # an id registered under another subject only is not this topic's
    json_framed = JSONSerializer(USER_JSON, sr)(
        USERS[2], SerializationContext("users-json", MessageField.VALUE)
    )
    _refused_with_invalid_record(produce(cluster.bootstrap, topic, [json_framed]))
    assert consume(cluster.bootstrap, topic, 1) == [framed]

    by_record = "validated-by-record"
    create_topic(
        cluster.bootstrap,
        by_record,
        {
            "confluent.value.schema.validation": "true",
            "confluent.value.subject.name.strategy": "RecordNameStrategy",
        },
    )
    record_ctx = SerializationContext(by_record, MessageField.VALUE)
    serializer = AvroSerializer(sr, USER_AVRO, conf={"subject.name.strategy": record_subject_name_strategy})
    assert produce(cluster.bootstrap, by_record, [serializer(USERS[3], record_ctx)]) == [None]
    assert sr.get_subjects().count("skiff.e2e.User") == 1
    # the topic-named serializer's subject (validated-by-record-value) is not the record's
    order = order_message_class()
    protobuf = ProtobufSerializer(order, sr, {"use.deprecated.format": False})
    _refused_with_invalid_record(produce(cluster.bootstrap, by_record, [protobuf(order(id="x"), record_ctx)]))


def test_with_authentication(
    spawn_skiff: Callable[..., SkiffProcess], moto_s3: S3Bucket, tmp_path: Path
) -> None:
    cluster = start_cluster(spawn_skiff, moto_s3, tmp_path, auth=True)
    try:
        _secured(cluster)
    finally:
        cluster.close()


def _secured(cluster: Cluster) -> None:
    writer = cluster.registry(TOKENS["writer"])
    got = round_trip(
        cluster, "users-auth", AvroSerializer(writer, USER_AVRO), AvroDeserializer(writer), USERS
    )
    assert got == USERS
    reader = cluster.registry(TOKENS["reader"])
    assert reader.get_subjects() == ["users-auth-value"]
    with pytest.raises(SchemaRegistryError) as denied:
        reader.register_schema("other-value", Schema(USER_AVRO, "AVRO"))
    assert denied.value.http_status_code == 403
    with pytest.raises(SchemaRegistryError) as anonymous:
        cluster.registry().get_subjects()
    assert anonymous.value.http_status_code == 401
    # the agent validates with its own token (the agent role reads the registry)
    topic = "validated-auth"
    create_topic(cluster.bootstrap, topic, {"confluent.value.schema.validation": "true"})
    _refused_with_invalid_record(produce(cluster.bootstrap, topic, [b"plain"]))
    framed = AvroSerializer(writer, USER_AVRO)(USERS[0], SerializationContext(topic, MessageField.VALUE))
    assert produce(cluster.bootstrap, topic, [framed]) == [None]


def test_the_refusal_and_its_message_reach_the_clients(cluster: Cluster, java_client: JavaClient) -> None:
    """librdkafka reports INVALID_RECORD (not retriable) with its own text for the code; Apache
    Kafka's Java client carries the broker's message: which record, and why."""
    topic = "validated-message"
    create_topic(cluster.bootstrap, topic, {"confluent.value.schema.validation": "true"})
    (err,) = produce(cluster.bootstrap, topic, [b"plain"])
    assert err is not None and err.code() == KafkaError.INVALID_RECORD and not err.retriable()
    result = java_client.run_raw(
        "produce", "--bootstrap", cluster.bootstrap, "--topic", topic, "--count", "2", "--idempotent", "false"
    )
    assert result.returncode == 1
    errors = [line["error"] for line in result.lines if line.get("type") == "ack"]
    assert len(errors) == 2
    assert all(e.startswith("org.apache.kafka.common.InvalidRecordException") for e in errors), errors
    assert any(
        "value of 3 bytes has no schema id (the wire format starts with 5 bytes)" in e for e in errors
    ), errors
