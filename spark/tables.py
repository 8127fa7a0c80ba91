"""A topic read as its Iceberg table plus the fresh tail: `read_topic_table(spark, topic, ...)`.

The materializer (`skiff compact`, compactor.tables) keeps an Apache Iceberg table of each
topic with `skiff.table.enabled=true`, each snapshot recording the offsets it covers
(fileformat.tables_layout). This helper loads the table's current snapshot through pyiceberg's
SQL catalog over the metadata database (`catalog_uri`), reads its Parquet data files with
Spark's own Parquet reader (columnar, at Parquet's speed), reads the records committed since
with the skiff source (`startingOffsets` = the offsets the snapshot covers; partitions the
table has not reached yet from the earliest), and returns the union with the source's
columns (`key`, `value`, `topic`, `partition`, `offset`, `timestamp`, `timestampType`, and
`headers` with `includeHeaders`). Nothing is read twice and nothing is missed: the snapshot is
loaded first, so the tail starts exactly where it ends.

A table whose current snapshot has delete files (merge-on-read deletes) cannot be read as
plain Parquet: then its rows come through pyiceberg (`scan().to_arrow()`, which applies the
deletes) into Spark instead, correct but not at Parquet's speed. Parquet paths are the
table's own (`file://`; an `s3://` path is mapped to hadoop-aws's `s3a://` by `spark_path`, and the
session needs hadoop-aws on its classpath and the `s3a_settings` of the AWS variables). For a compacted topic the table holds the latest value per key up
to its offsets and the tail holds every record after them: deduplicate by key if needed.

A typed table (values, or keys, decoded through the schema registry by the materializer)
gets a typed tail: the skiff source decodes the same side with the subject's latest schema
(`valueFormat`/`keyFormat` set from the registry unless `options` set them), and tail
records that do not decode are left out as the table leaves its dead letters out.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from skiff.fileformat.tables_layout import (
    CATALOG_NAME,
    NAMESPACE,
    catalog_properties,
    covered_offsets,
    table_name_for,
    warehouse_for,
)
from skiff.metadata import configs
from skiff.spark.options import EARLIEST, parse_options
from skiff.spark.planner import SkiffSourceError, resolve_bucket, run
from skiff.spark.typed_options import ERROR_COLUMN, SIDES

SOURCE_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


def read_topic_table(
    spark: Any,
    topic: str,
    *,
    metadata_url: str,
    catalog_uri: str,
    bucket: str | None = None,
    include_headers: bool = False,
    options: dict[str, str] | None = None,
) -> Any:
    """The topic's table (current snapshot) plus the records committed since, as one
    DataFrame (see the module docstring). `options` go to the skiff source of the tail
    (e.g. `metadata.token`, `kafka.isolation.level`)."""
    source_options = {"metadata.url": metadata_url, "subscribe": topic, **(options or {})}
    if bucket:
        source_options["bucket"] = bucket
    opts = parse_options({k.lower(): v for k, v in source_options.items()}, streaming=False)

    def describe(client: Any) -> tuple[str, int, str | None]:
        found = client.describe_topics([topic]).get(topic)
        if found is None:
            raise SkiffSourceError(f"no topic named {topic!r}")
        return (
            resolve_bucket(client, opts),
            found.partition_count,
            configs.config_value(found.configs, configs.TABLE_NAME),
        )

    bucket_url, partitions, configured_name = run(describe, opts)
    table = _load_table(catalog_uri, bucket_url, table_name_for(topic, configured_name))
    snapshot = table.current_snapshot()
    covered = covered_offsets(None if snapshot is None else snapshot.summary.additional_properties)
    columns = SOURCE_COLUMNS + (["headers"] if include_headers else [])
    materialized = _table_frame(spark, table, topic, columns)
    starting = {topic: {str(p): covered.get(p, EARLIEST) for p in range(partitions)}}
    reader = spark.read.format("skiff")
    for k, v in {**source_options, **_typed_tail_options(table, topic, source_options, opts)}.items():
        reader = reader.option(k, v)
    tail = (
        reader.option("startingOffsets", json.dumps(starting))
        .option("includeHeaders", "true" if include_headers else "false")
        .load()
    )
    if ERROR_COLUMN in tail.columns:  # the table's dead letters: not in the table, not in the tail
        tail = tail.where(tail[ERROR_COLUMN].isNull())
    tail = tail.select(*columns)
    return tail if materialized is None else materialized.unionByName(tail)


def _typed_tail_options(table: Any, topic: str, given: dict[str, str], opts: Any) -> dict[str, str]:
    """`keyFormat`/`valueFormat` for the tail where the table's column is typed (decoded
    through the registry by the materializer, compactor.tables_values) and the caller chose
    no format: the latest version's schema type of `<topic>-<side>`, the reader schema the
    materializer evolves the table to, so both parts have the same column type."""
    from pyiceberg.types import BinaryType

    chosen = {k.lower() for k in given}
    sides = [
        side
        for side in SIDES
        if f"{side}format" not in chosen
        and not isinstance(table.schema().find_field(side).field_type, BinaryType)
    ]
    if not sides:
        return {}
    types = run(
        lambda client: {s: client.schema_version(f"{topic}-{s}", -1).schema_type for s in sides}, opts
    )
    return {f"{side}Format": schema_type.lower() for side, schema_type in types.items()}


def _load_table(catalog_uri: str, bucket_url: str, name: str) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import NoSuchTableError

    catalog = SqlCatalog(CATALOG_NAME, **catalog_properties(catalog_uri, warehouse_for(bucket_url)))
    try:
        return catalog.load_table((NAMESPACE, name))
    except NoSuchTableError:
        raise SkiffSourceError(
            f"no table {NAMESPACE}.{name} in the catalog at {catalog_uri}: is skiff.table.enabled set on the topic"
            " and has `skiff compact` run since?"
        ) from None


def _table_frame(spark: Any, table: Any, topic: str, columns: list[str]) -> Any:
    """The current snapshot's rows with the source's columns (None for an empty table)."""
    from pyspark.sql import functions as F

    if table.current_snapshot() is None:
        return None
    tasks = list(table.scan().plan_files())
    if not tasks:
        return None
    if any(t.delete_files for t in tasks):  # deletes to apply: pyiceberg applies them
        frame = spark.createDataFrame(table.scan().to_arrow().to_pandas())
    else:
        frame = spark.read.parquet(*(spark_path(t.file.file_path) for t in tasks))
    return frame.withColumn("topic", F.lit(topic)).select(*columns)


def spark_path(path: str) -> str:
    """A data file's path as Spark's Parquet reader opens it: Iceberg's `s3://bucket/key` is
    hadoop-aws's `s3a://bucket/key` (Hadoop has no `s3://` filesystem); others unchanged."""
    return "s3a://" + path[len("s3://") :] if path.startswith("s3://") else path


def s3a_settings(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Spark settings that point hadoop-aws's s3a filesystem at the bucket the standard
    AWS variables name (the materializer's, fileformat.tables_layout.catalog_properties):
    endpoint with path-style access (MinIO, moto, any non-AWS endpoint), region, static keys.
    Pass them to the session (`skiff_session(..., conf)`); the session also needs the
    hadoop-aws jar and its AWS SDK on its classpath (`spark.jars.packages`), which this
    helper cannot provide. Without keys in the environment, s3a's own provider chain applies."""
    env = os.environ if env is None else env
    conf: dict[str, str] = {}
    if env.get("AWS_ENDPOINT_URL"):
        conf["spark.hadoop.fs.s3a.endpoint"] = env["AWS_ENDPOINT_URL"]
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        if env["AWS_ENDPOINT_URL"].startswith("http://"):
            conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = "false"
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = region
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        conf["spark.hadoop.fs.s3a.access.key"] = env["AWS_ACCESS_KEY_ID"]
        conf["spark.hadoop.fs.s3a.secret.key"] = env["AWS_SECRET_ACCESS_KEY"]
        if env.get("AWS_SESSION_TOKEN"):
            conf["spark.hadoop.fs.s3a.session.token"] = env["AWS_SESSION_TOKEN"]
            conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
                "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
            )
    return conf
