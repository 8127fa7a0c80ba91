"""Typed reads through the schema registry, end to end: records produced by confluent-kafka's
AvroSerializer, JSONSerializer and ProtobufSerializer (schema.registry.url = the metadata
service's URL) through a real agent, two schema versions in each topic plus a record that is
not in the registry's wire format and a tombstone; Spark reads `value` as the reader
schema's struct (latest or pinned version) in batch and streaming queries, `_error` says
why a row did not decode, `onDecodeError=fail` fails naming topic/partition/offset, and a
query whose topics' reader types differ is refused. One Spark session (tests/spark/conftest.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.spark.conftest import Cluster
from tests.unit.test_values_protobuf import message_class

AVRO_V1 = {"type": "record", "name": "User", "namespace": "t", "fields": [{"name": "name", "type": "string"}]}
AVRO_V2 = {
    "type": "record",
    "name": "User",
    "namespace": "t",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int", "default": 0}],
}
ORDER = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
JSON_V1 = {"type": "object", "properties": {"name": {"type": "string"}}}
JSON_V2 = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}
PROTO_V1 = 'syntax = "proto3"; package t; message User { string name = 1; }'
PROTO_V2 = 'syntax = "proto3"; package t; message User { string name = 1; int32 age = 2; }'
RAW = b"not from a registry serializer"


@dataclass
class Topics:
    json_ids: tuple[int, int]  # the JSON subject's schema ids (v1, v2)


def _send(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value in records:
        producer.produce(topic, value, key, partition=0)
    assert producer.flush(30) == 0


def _ser(serializer: object, topic: str, obj: object, field: str = MessageField.VALUE) -> bytes:
    out = serializer(obj, SerializationContext(topic, field))  # type: ignore[operator]
    assert isinstance(out, bytes)
    return out


@pytest.fixture(scope="module")
def topics(cluster: Cluster, bootstrap: str) -> Iterator[Topics]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = ["typed-avro", "typed-avro2", "typed-json", "typed-proto"]
    for fut in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        fut.result(30)
    sr = SchemaRegistryClient({"url": cluster.metadata_url})
    try:
        key_ser = AvroSerializer(sr, '"string"')
        v1, v2 = AvroSerializer(sr, json.dumps(AVRO_V1)), AvroSerializer(sr, json.dumps(AVRO_V2))
        avro = [
            (
                _ser(key_ser, "typed-avro", f"k{i}", MessageField.KEY),
                _ser(v1, "typed-avro", {"name": f"a{i}"}),
            )
            for i in range(3)
        ]
        avro += [
            (
                _ser(key_ser, "typed-avro", f"k{i}", MessageField.KEY),
                _ser(v2, "typed-avro", {"name": f"b{i}", "age": 30 + i}),
            )
            for i in range(3, 6)
        ]
        avro += [(b"raw-key", RAW), (_ser(key_ser, "typed-avro", "k7", MessageField.KEY), None)]
        _send(bootstrap, "typed-avro", avro)
        _send(
            bootstrap,
            "typed-avro2",
            [(None, _ser(AvroSerializer(sr, json.dumps(ORDER)), "typed-avro2", {"id": 1}))],
        )

        sr.set_compatibility("typed-json-value", "NONE")
        j1 = JSONSerializer(json.dumps(JSON_V1), sr, to_dict=lambda obj, ctx: obj)
        j2 = JSONSerializer(json.dumps(JSON_V2), sr, to_dict=lambda obj, ctx: obj)
        records = [(None, _ser(j1, "typed-json", {"name": f"a{i}"})) for i in range(3)]
        records += [(None, _ser(j2, "typed-json", {"name": f"b{i}", "age": 30 + i})) for i in range(3, 6)]
        ids = tuple(sr.get_version("typed-json-value", v).schema_id for v in (1, 2))
        # framed with a registered id, but the age is a string: does not fit the reader schema
        records += [(None, RAW), (None, b"\x00" + ids[1].to_bytes(4, "big") + b'{"name": "c", "age": "x"}')]
        _send(bootstrap, "typed-json", records)

        user1, user2 = message_class(PROTO_V1, "t.User"), message_class(PROTO_V2, "t.User")
        p1 = ProtobufSerializer(user1, sr, {"use.deprecated.format": False})
        p2 = ProtobufSerializer(user2, sr, {"use.deprecated.format": False})
        records = [(None, _ser(p1, "typed-proto", user1(name=f"a{i}"))) for i in range(3)]
        records += [(None, _ser(p2, "typed-proto", user2(name=f"b{i}", age=30 + i))) for i in range(3, 6)]
        records += [(None, RAW), (None, None)]
        _send(bootstrap, "typed-proto", records)
        yield Topics(ids)  # type: ignore[arg-type]
    finally:
        sr.close()


def _read(spark, cluster: Cluster, topic: str, **options: str):  # type: ignore[no-untyped-def]
    reader = (
        spark.read.format("skiff").option("metadata.url", cluster.metadata_url).option("subscribe", topic)
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


V2_ROWS = [("a0", 0), ("a1", 0), ("a2", 0), ("b3", 33), ("b4", 34), ("b5", 35)]


def test_avro_batch_two_versions_with_the_latest_reader(spark, cluster: Cluster, topics: Topics) -> None:  # type: ignore[no-untyped-def]
    df = _read(spark, cluster, "typed-avro", valueFormat="avro", keyFormat="avro")
    assert df.schema["value"].dataType.simpleString() == "struct<name:string,age:int>"
    assert df.schema["key"].dataType.simpleString() == "string"
    rows = df.orderBy("offset").selectExpr("key", "value.name", "value.age", "_error").collect()
    assert [(r["name"], r["age"]) for r in rows[:6]] == V2_ROWS
    assert [r["key"] for r in rows] == ["k0", "k1", "k2", "k3", "k4", "k5", None, "k7"]
    assert all(r["_error"] is None for r in rows[:6]) and rows[7]["_error"] is None  # a tombstone is no error
    assert (rows[6]["name"], rows[7]["name"]) == (None, None)
    assert rows[6]["_error"] == (
        "key: not in Confluent's wire format (no magic byte 0 and schema id); "
        "value: not in Confluent's wire format (no magic byte 0 and schema id)"
    )
    assert df.selectExpr("sum(value.age)").first()[0] == 102


def test_avro_batch_with_a_pinned_older_reader(spark, cluster: Cluster, topics: Topics) -> None:  # type: ignore[no-untyped-def]
    df = _read(spark, cluster, "typed-avro", valueFormat="avro", valueSchemaVersion="1")
    assert df.schema["value"].dataType.simpleString() == "struct<name:string>"
    assert df.schema["key"].dataType.simpleString() == "binary"
    names = [r[0] for r in df.orderBy("offset").selectExpr("value.name").collect()]
    assert names == ["a0", "a1", "a2", "b3", "b4", "b5", None, None]


def test_json_batch(spark, cluster: Cluster, topics: Topics) -> None:  # type: ignore[no-untyped-def]
    df = _read(spark, cluster, "typed-json", valueFormat="json")
    assert df.schema["value"].dataType.simpleString() == "struct<name:string,age:bigint>"
    rows = df.orderBy("offset").selectExpr("value.name", "value.age", "_error").collect()
    # JSON has no resolution: a v1 record has no age (null, not a default)
    assert [(r[0], r[1]) for r in rows[:6]] == [
        ("a0", None),
        ("a1", None),
        ("a2", None),
        ("b3", 33),
        ("b4", 34),
        ("b5", 35),
    ]
    assert "wire format" in rows[6]["_error"]
    assert rows[7]["_error"].startswith("value: does not fit the reader schema")
    assert rows[7]["name"] is None


def test_protobuf_batch(spark, cluster: Cluster, topics: Topics) -> None:  # type: ignore[no-untyped-def]
    df = _read(spark, cluster, "typed-proto", valueFormat="protobuf")
    assert df.schema["value"].dataType.simpleString() == "struct<name:string,age:int>"
    rows = df.orderBy("offset").selectExpr("value.name", "value.age", "_error").collect()
    assert [(r[0], r[1]) for r in rows[:6]] == V2_ROWS
    assert "wire format" in rows[6]["_error"]
    assert (rows[7][0], rows[7]["_error"]) == (None, None)


def test_on_decode_error_fail_names_the_record(spark, cluster: Cluster, topics: Topics) -> None:  # type: ignore[no-untyped-def]
    df = _read(spark, cluster, "typed-avro", valueFormat="avro", onDecodeError="fail")
    assert "_error" not in df.columns
    with pytest.raises(
        Exception,
        match=r"cannot decode the value of typed-avro-0 at offset 6: not in Confluent's wire format",
    ):
        df.collect()
    # the rows before it read fine
    ok = _read(
        spark,
        cluster,
        "typed-avro",
        valueFormat="avro",
        onDecodeError="fail",
        endingOffsets='{"typed-avro": {"0": 6}}',
    )
    assert ok.count() == 6


def test_refusals(spark, cluster: Cluster, topics: Topics) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(Exception, match="one query reads one value type"):
        _read(spark, cluster, "typed-avro,typed-avro2", valueFormat="avro")
    with pytest.raises(Exception, match="is a AVRO schema, but option valueFormat is json"):
        _read(spark, cluster, "typed-avro", valueFormat="json")
    with pytest.raises(Exception, match="no schema is registered under the subject wide-value"):
        _read(spark, cluster, "wide", valueFormat="avro")
    with pytest.raises(Exception, match="subject typed-avro-value has no version 9"):
        _read(spark, cluster, "typed-avro", valueFormat="avro", valueSchemaVersion="9")
    # one subject for both topics: the same reader type, so one query reads both
    both = _read(
        spark, cluster, "typed-avro,typed-avro2", valueFormat="avro", valueSubject="typed-avro2-value"
    )
    assert both.schema["value"].dataType.simpleString() == "struct<id:bigint>"
    errors = [r[0] for r in both.where("topic = 'typed-avro'").select("_error").collect()]
    assert all(e is None or "not one of the subject's schemas" in e or "wire format" in e for e in errors)


def test_streaming_typed(spark, cluster: Cluster, topics: Topics, tmp_path) -> None:  # type: ignore[no-untyped-def]
    query = (
        spark.readStream.format("skiff")
        .option("metadata.url", cluster.metadata_url)
        .option("subscribe", "typed-avro")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "3")
        .option("valueFormat", "avro")
        .load()
        .selectExpr("offset", "value.name AS name", "value.age AS age", "_error")
        .writeStream.format("memory")
        .queryName("typed_stream")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    assert len([p for p in query.recentProgress if p["numInputRows"]]) == 3
    rows = spark.sql("SELECT name, age, _error FROM typed_stream ORDER BY offset").collect()
    assert [(r[0], r[1]) for r in rows[:6]] == V2_ROWS
    assert "wire format" in rows[6][2] and rows[7][2] is None
