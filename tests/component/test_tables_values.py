"""Typed table values (compactor.tables_values), over real parts: `skiff agent` on a file://
bucket, the metadata HTTP service (with its schema registry) on SQLite in this process,
confluent-kafka's AvroSerializer registering the schemas, `run_pass` in this process, the
table read back with pyiceberg.

- Values of a topic with a registered Avro value schema become a struct column; a record
  that is not from a registry serializer goes to `skiff.<table>_dead_letters` with its
  offset and the error (and the dead-letter metric counts it), the rest of the topic is
  written.
- A compatible v2 (an added optional field) evolves the table in the snapshot that writes
  its first rows: the snapshot before has the old schema, v1 rows read the new field as
  null, v2 rows have it; a second pass writes no dead letter twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from skiff.compactor import metrics
from skiff.compactor.runner import RunnerConfig, run_pass
from skiff.compactor.tables import TablesConfig
from skiff.fileformat.objectstore import open_store
from skiff.fileformat.tables_layout import warehouse_for
from skiff.metadata.service import MetadataService
from skiff.metadata.wire.http_client import HttpMetadataClient

from tests.component.test_tables import _load, _start
from tests.e2e.test_compaction_cli import ShiftedClock, metadata_server  # noqa: F401 (fixture)
from tests.support.agents import SkiffProcess

V1 = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}
V2 = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "qty", "type": ["null", "long"], "default": None},
    ],
}
RAW = b"not from a registry serializer"


def _send(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for value in values:
        producer.produce(topic, value, key=b"k", partition=0)
    assert producer.flush(30) == 0


def _ser(serializer: AvroSerializer, topic: str, obj: dict[str, object]) -> bytes:
    out = serializer(obj, SerializationContext(topic, MessageField.VALUE))
    assert isinstance(out, bytes)
    return out


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_typed_values_evolution_and_dead_letters(
    metadata_server: tuple[str, MetadataService, ShiftedClock],  # noqa: F811 (first: torn down after the agent)
    spawn_skiff: Callable[..., SkiffProcess],
    tmp_path: Path,
    anyio_backend: str,
) -> None:
    metadata_url, _svc, _clock = metadata_server
    db_url = f"sqlite:///{tmp_path / 'm.db'}"
    bucket_url = f"file://{tmp_path / 'bucket'}"
    bootstrap = _start(spawn_skiff, metadata_url, bucket_url)
    topic = "orders"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"skiff.table.enabled": "true"})])[topic].result(30)
    sr = SchemaRegistryClient({"url": metadata_url})
    v1 = AvroSerializer(sr, json.dumps(V1))
    _send(bootstrap, topic, [_ser(v1, topic, {"id": i, "item": f"a{i}"}) for i in range(4)] + [RAW])

    md = HttpMetadataClient(metadata_url)
    store = open_store(bucket_url)
    config = RunnerConfig(
        tables=TablesConfig(db_url, warehouse_for(bucket_url)),
        retention=False,
        gc=False,
        expire_offsets=False,
    )
    dead_before = metrics.TABLE_DEAD_LETTERS._value.get()
    try:
        first = await run_pass(md, store, config)
        assert first.tables_failed == 0
        table = _load(db_url, topic)
        rows = sorted((r["offset"], r["value"]) for r in table.scan().to_arrow().to_pylist())
        assert rows == [(i, {"id": i, "item": f"a{i}"}) for i in range(4)]
        dead = _load(db_url, f"{topic}_dead_letters").scan().to_arrow().to_pylist()
        assert [(d["offset"], d["value"]) for d in dead] == [(4, RAW)]
        assert dead[0]["error"]
        assert metrics.TABLE_DEAD_LETTERS._value.get() == dead_before + 1
        old_schema = table.schema().schema_id

        v2 = AvroSerializer(sr, json.dumps(V2))
        _send(
            bootstrap,
            topic,
            [_ser(v2, topic, {"id": i, "item": f"b{i}", "qty": i * 10}) for i in range(5, 7)],
        )
        second = await run_pass(md, store, config)
        assert second.tables_failed == 0
    finally:
        await md.close()
        sr.close()

    table = _load(db_url, topic)
    rows = sorted((r["offset"], r["value"]) for r in table.scan().to_arrow().to_pylist())
    want = [(i, {"id": i, "item": f"a{i}", "qty": None}) for i in range(4)]
    want += [(i, {"id": i, "item": f"b{i}", "qty": i * 10}) for i in range(5, 7)]
    assert rows == want
    current = table.current_snapshot()
    assert current.schema_id != old_schema  # evolved in the snapshot of the first v2 rows
    assert table.snapshot_by_id(current.parent_snapshot_id).schema_id == old_schema
    assert len(_load(db_url, f"{topic}_dead_letters").scan().to_arrow()) == 1
    assert metrics.TABLE_DEAD_LETTERS._value.get() == dead_before + 1


KEY = {"type": "record", "name": "OrderKey", "fields": [{"name": "id", "type": "long"}]}


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_typed_keys_and_their_dead_letters(
    metadata_server: tuple[str, MetadataService, ShiftedClock],  # noqa: F811 (first: torn down after the agent)
    spawn_skiff: Callable[..., SkiffProcess],
    tmp_path: Path,
    anyio_backend: str,
) -> None:
    """A delete-policy topic with `<topic>-key` and `<topic>-value` schemas: the table's `key`
    is the key's struct (null keys stay null), a record whose key does not decode is a dead
    letter with its raw key and a `key: ` error, the rest is written."""
    metadata_url, _svc, _clock = metadata_server
    db_url = f"sqlite:///{tmp_path / 'm.db'}"
    bucket_url = f"file://{tmp_path / 'bucket'}"
    bootstrap = _start(spawn_skiff, metadata_url, bucket_url)
    topic = "keyed"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"skiff.table.enabled": "true"})])[topic].result(30)
    sr = SchemaRegistryClient({"url": metadata_url})
    keys, values = AvroSerializer(sr, json.dumps(KEY)), AvroSerializer(sr, json.dumps(V1))
    key_of = SerializationContext(topic, MessageField.KEY)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(5):
        key = keys({"id": i}, key_of) if i < 3 else (RAW if i == 3 else None)
        producer.produce(topic, _ser(values, topic, {"id": i, "item": f"a{i}"}), key=key, partition=0)
    assert producer.flush(30) == 0

    md = HttpMetadataClient(metadata_url)
    store = open_store(bucket_url)
    config = RunnerConfig(
        tables=TablesConfig(db_url, warehouse_for(bucket_url)),
        retention=False,
        gc=False,
        expire_offsets=False,
    )
    dead_before = metrics.TABLE_DEAD_LETTERS._value.get()
    try:
        assert (await run_pass(md, store, config)).tables_failed == 0
    finally:
        await md.close()
        sr.close()

    table = _load(db_url, topic)
    assert str(table.schema().find_field("key").field_type).startswith("struct")
    rows = sorted((r["offset"], r["key"], r["value"]["id"]) for r in table.scan().to_arrow().to_pylist())
    assert rows == [(0, {"id": 0}, 0), (1, {"id": 1}, 1), (2, {"id": 2}, 2), (4, None, 4)]
    dead = _load(db_url, f"{topic}_dead_letters").scan().to_arrow().to_pylist()
    assert [(d["offset"], d["key"]) for d in dead] == [(3, RAW)]
    assert dead[0]["error"].startswith("key: ")
    assert metrics.TABLE_DEAD_LETTERS._value.get() == dead_before + 1
