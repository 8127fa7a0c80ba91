"""`skiff.spark.tables.read_topic_table`: a topic's Iceberg table (materialized by a real
`skiff compact --once`) plus the records produced after it, as one DataFrame: every produced
record exactly once, the materialized part read from the table's Parquet files."""

from __future__ import annotations

import subprocess
from pathlib import Path

from skiff.spark.tables import read_topic_table

from tests.spark.conftest import Cluster
from tests.spark.test_stream import _produce
from tests.support.agents import skiff_command


def _materialize(cluster: Cluster, topic: str) -> None:
    done = subprocess.run(
        [
            *skiff_command(),
            "compact",
            "--metadata",
            cluster.metadata_url,
            "--table-catalog",
            f"sqlite:///{cluster.db_path}",
            "--topic",
            topic,
            "--once",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr


def test_table_plus_tail_holds_every_record_once(
    spark, cluster: Cluster, bootstrap: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic("tabled", 2, 1, config={"skiff.table.enabled": "true"})
    for fut in admin.create_topics([topic]).values():
        fut.result(30)
    first = _produce(bootstrap, "tabled", [(i % 2, f"a-{i}".encode()) for i in range(100)])
    _materialize(cluster, "tabled")
    second = _produce(bootstrap, "tabled", [(i % 2, f"b-{i}".encode()) for i in range(40)])

    df = read_topic_table(
        spark, "tabled", metadata_url=cluster.metadata_url, catalog_uri=f"sqlite:///{cluster.db_path}"
    )
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    rows = sorted((r["partition"], r["offset"], bytes(r["value"])) for r in df.collect())
    assert rows == sorted(first + second)  # every record, none twice
    assert any(f.endswith(".parquet") for f in df.inputFiles())  # the table part is Parquet
    assert {r["topic"] for r in df.select("topic").distinct().collect()} == {"tabled"}


def _produce_keyed(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for key, value in records:
        p.produce(topic, value, key=key, partition=0)
    assert p.flush(30) == 0


def test_compacted_topic_table_reads_the_latest_value_per_key(
    spark, cluster: Cluster, bootstrap: str
) -> None:  # type: ignore[no-untyped-def]
    """A compacted topic's table holds the latest value per key (a tombstone deletes its key):
    Spark (through read_topic_table, the table's Parquet files) and pyiceberg read the same rows."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyiceberg.catalog.sql import SqlCatalog
    from skiff.fileformat.tables_layout import catalog_properties, warehouse_for

    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"cleanup.policy": "compact", "skiff.table.enabled": "true"}
    for fut in admin.create_topics([NewTopic("tabled-compact", 1, 1, config=config)]).values():
        fut.result(30)
    _produce_keyed(bootstrap, "tabled-compact", [(b"k%d" % (i % 5), b"v%d" % i) for i in range(20)])
    _produce_keyed(bootstrap, "tabled-compact", [(b"k1", None)])  # a tombstone: k1 goes
    _materialize(cluster, "tabled-compact")

    df = read_topic_table(
        spark, "tabled-compact", metadata_url=cluster.metadata_url, catalog_uri=f"sqlite:///{cluster.db_path}"
    )
    got = sorted((bytes(r["key"]), bytes(r["value"])) for r in df.collect())
    assert got == [(b"k0", b"v15"), (b"k2", b"v17"), (b"k3", b"v18"), (b"k4", b"v19")]
    catalog = SqlCatalog(
        "skiff", **catalog_properties(f"sqlite:///{cluster.db_path}", warehouse_for(cluster.bucket))
    )
    try:
        rows = catalog.load_table("skiff.tabled-compact").scan().to_arrow().to_pylist()
    finally:
        catalog.engine.dispose()
    assert sorted((r["key"], r["value"]) for r in rows) == got


ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}


def test_typed_table_plus_typed_tail(spark, cluster: Cluster, bootstrap: str) -> None:  # type: ignore[no-untyped-def]
    """A topic with an Avro value schema: the table's `value` is a struct, so the tail is
    decoded with the same schema (no option needed) and the union has one struct column; a
    record that does not decode (a dead letter in the table) is in neither part."""
    import json

    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic("typed-tabled", 1, 1, config={"skiff.table.enabled": "true"})
    for fut in admin.create_topics([topic]).values():
        fut.result(30)
    sr = SchemaRegistryClient({"url": cluster.metadata_url})
    ser = AvroSerializer(sr, json.dumps(ORDER))
    ctx = SerializationContext("typed-tabled", MessageField.VALUE)

    def orders(ids: range) -> list[tuple[int, bytes]]:
        return [(0, ser({"id": i, "item": f"i{i}"}, ctx)) for i in ids]

    _produce(bootstrap, "typed-tabled", [*orders(range(0, 5)), (0, b"not framed")])
    _materialize(cluster, "typed-tabled")
    _produce(bootstrap, "typed-tabled", [*orders(range(5, 8)), (0, b"not framed either")])
    sr.close()

    df = read_topic_table(
        spark, "typed-tabled", metadata_url=cluster.metadata_url, catalog_uri=f"sqlite:///{cluster.db_path}"
    )
    assert dict(df.dtypes)["value"] == "struct<id:bigint,item:string>"
    rows = sorted((r["offset"], r["value"]["id"], r["value"]["item"]) for r in df.collect())
    assert rows == [(o, i, f"i{i}") for o, i in zip([0, 1, 2, 3, 4, 6, 7, 8], range(8), strict=True)]
    assert any(f.endswith(".parquet") for f in df.inputFiles())  # the first part from the table
