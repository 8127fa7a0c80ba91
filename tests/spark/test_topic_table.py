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
