"""`SkiffDataSource`: the PySpark (4.x) Python data source named `skiff`.

    spark.dataSource.register(SkiffDataSource)
    spark.read.format("skiff").option("metadata.url", url).option("subscribe", "orders").load()
    spark.readStream.format("skiff").option("metadata.url", url).option("subscribe", "orders").load()

The schema is Spark's Kafka source schema (`includeHeaders` adds `headers`); the options
are its options (see `spark.options`). `reader()` runs where Spark plans the query: it asks
metadata for the offsets and chunks (`spark.planner`) and hands Spark one
`SkiffInputPartition` per task; `read()` runs on executors and yields
`pyarrow.RecordBatch`es (`spark.executor`), with no metadata access. `streamReader()`
gives the Structured Streaming reader (`spark.stream`). Batch reads take Spark's pushed
filters (`spark.pushdown`) unless the option pushFilters is false. Without the `bucket` option the
bucket URL comes from metadata. With `kafka.isolation.level=read_committed` each task
carries the aborted transactions of its range, so executors still need no metadata.

Typed reads (`valueFormat`/`keyFormat` avro, json, protobuf): `schema()` asks the schema
registry for the reader schemas (`spark.typed`), so the column is the reader schema's type
and `_error` is added; Spark pickles the data source after `schema()`, so the reader schemas
asked there are the ones the query plans and reads with. Each task carries its topic's
schemas (`spark.typed.TypedTask`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    InputPartition,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from skiff.fileformat.objectstore import open_store
from skiff.metadata.wire.http_client import SyncHttpMetadataClient
from skiff.spark.options import SkiffOptionError, SourceOptions, include_headers_option, parse_options
from skiff.spark.planner import PlannedRead, metadata_client_credentials, plan_batch, resolve_bucket, run
from skiff.spark.pushdown import ScanBounds, bounds_of
from skiff.spark.typed import TypedPlanner, TypedTask, spark_type, topics_of
from skiff.spark.typed_options import ERROR_COLUMN, TypedOptionError, TypedOptions, parse_typed
from skiff.spark.usage import UsageTarget, report_task_usage

KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long,"
    " timestamp timestamp, timestampType int"
)
HEADERS_FIELD = ", headers array<struct<key: string, value: binary>>"


def schema_ddl(include_headers: bool) -> str:
    return KAFKA_SCHEMA + (HEADERS_FIELD if include_headers else "")


def typed_schema(include_headers: bool, types: dict[str, pa.DataType], error_column: bool) -> StructType:
    """The Kafka schema with the typed sides' columns of the reader schemas' types."""
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    columns: list[tuple[str, DataType]] = [
        ("key", BinaryType()),
        ("value", BinaryType()),
        ("topic", StringType()),
        ("partition", IntegerType()),
        ("offset", LongType()),
        ("timestamp", TimestampType()),
        ("timestampType", IntegerType()),
    ]
    if include_headers:
        columns.append(("headers", ArrayType(header)))
    fields = [StructField(name, spark_type(types[name]) if name in types else t) for name, t in columns]
    if error_column:
        fields.append(StructField(ERROR_COLUMN, StringType()))
    return StructType(fields)


def typed_options(raw: dict[str, str]) -> TypedOptions | None:
    try:
        return parse_typed({str(k).lower(): str(v) for k, v in raw.items()})
    except TypedOptionError as exc:
        raise SkiffOptionError(str(exc)) from None


class SkiffInputPartition(InputPartition):
    """One task: a planned read (offset range + chunk locations) and how to read it."""

    def __init__(
        self,
        task: PlannedRead,
        bucket: str,
        include_headers: bool,
        fail_on_data_loss: bool,
        typed: TypedTask | None = None,
        usage: UsageTarget | None = None,
    ) -> None:
        super().__init__(task)
        self.task = task
        self.bucket = bucket
        self.include_headers = include_headers
        self.fail_on_data_loss = fail_on_data_loss
        self.typed = typed
        self.usage = usage  # where the executor reports its object-store requests (spark.usage)


def input_partitions(
    tasks: list[PlannedRead], bucket: str, opts: SourceOptions, typed: dict[str, TypedTask]
) -> list[InputPartition]:
    usage = usage_target(opts)
    return [
        SkiffInputPartition(
            t,
            bucket,
            opts.include_headers,
            opts.fail_on_data_loss,
            typed.get(t.topic) if typed else None,
            usage,
        )
        for t in tasks
    ]


def usage_target(opts: SourceOptions) -> UsageTarget | None:
    """Where executors report their requests: the driver's metadata URL and credentials
    (resolved here, on the driver), or None with `metadata.reportUsage=false`."""
    if not opts.report_usage:
        return None
    return UsageTarget(opts.metadata_url, metadata_client_credentials(opts))


def typed_specs(
    planner: TypedPlanner | None, client: SyncHttpMetadataClient, tasks: list[PlannedRead]
) -> dict[str, TypedTask]:
    """Each planned topic's schemas (none for raw reads)."""
    if planner is None:
        return {}
    return planner.task_specs(client, sorted({t.topic for t in tasks}))


class SkiffBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions, typed: TypedPlanner | None = None) -> None:
        self.opts = opts
        self.typed = typed or (TypedPlanner(opts.typed) if opts.typed is not None else None)

    bounds: ScanBounds | None = None

    def partitions(self) -> Sequence[InputPartition]:
        def plan(client: SyncHttpMetadataClient) -> tuple[str, list[PlannedRead], dict[str, TypedTask]]:
            bucket = resolve_bucket(client, self.opts)
            tasks = plan_batch(client, dataclasses.replace(self.opts, bucket=bucket), self.bounds)
            return bucket, tasks, typed_specs(self.typed, client, tasks)

        bucket, tasks, typed = run(plan, self.opts)
        return input_partitions(tasks, bucket, self.opts, typed)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(partition)


class SkiffPushdownReader(SkiffBatchReader):
    """The batch reader taking Spark's pushed filters (`spark.pushdown`): those on
    partition, offset and timestamp prune the plan. Every filter is returned, so Spark
    still applies each one to the rows read: the answer is exact."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.bounds = bounds_of(filters)
        return filters


def read_partition(partition: InputPartition) -> Iterator[Any]:
    """An executor's read of one planned task (batch or micro-batch)."""
    from skiff.spark.executor import read_task

    if not isinstance(partition, SkiffInputPartition):
        return  # nothing was planned: Spark still runs one (placeholder) task
    store = open_store(partition.bucket)
    try:
        yield from read_task(
            partition.task,
            partition.bucket,
            include_headers=partition.include_headers,
            fail_on_data_loss=partition.fail_on_data_loss,
            typed=partition.typed,
            store=store,
        )
    finally:  # a failed or abandoned task's GETs are billed too
        if partition.usage is not None:
            report_task_usage(partition.usage, store)
        store.close()


class SkiffDataSource(DataSource):
    """Format `skiff`: Skiff topics read straight from the bucket."""

    @classmethod
    def name(cls) -> str:
        return "skiff"

    def _opts(self, *, streaming: bool) -> SourceOptions:
        return parse_options(dict(self.options), streaming=streaming)

    def schema(self) -> StructType | str:
        # the batch/streaming checks run in reader()/streamReader(); here includeHeaders and,
        # for typed reads, the reader schemas (asked once, pinned: see the module docstring)
        raw = dict(self.options)
        include_headers = include_headers_option(raw)
        typed = typed_options(raw)
        if typed is None:
            return schema_ddl(include_headers)
        opts = parse_options(raw, streaming=None)
        planner = TypedPlanner(typed)
        types = run(lambda client: planner.arrow_types(client, topics_of(client, opts)), opts)
        self._typed = planner
        return typed_schema(include_headers, types, error_column=not typed.fail_on_error)

    def _planner(self) -> TypedPlanner | None:
        return getattr(self, "_typed", None)

    def reader(self, schema: StructType) -> DataSourceReader:
        # Spark refuses a reader with pushFilters when its session has filter pushdown off
        # (spark.sql.python.filterPushdown.enabled): option pushFilters=false reads without
        opts = self._opts(streaming=False)
        if opts.push_filters:
            return SkiffPushdownReader(opts, self._planner())
        return SkiffBatchReader(opts, self._planner())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from skiff.spark.stream import SkiffStreamReader

        return SkiffStreamReader(self._opts(streaming=True), self._planner())
