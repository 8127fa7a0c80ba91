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
