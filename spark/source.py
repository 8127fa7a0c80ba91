"""`SkiffDataSource`: the PySpark (4.x) Python data source named `skiff`.

    spark.dataSource.register(SkiffDataSource)
    spark.read.format("skiff").option("metadata.url", url).option("subscribe", "orders").load()
    spark.readStream.format("skiff").option("metadata.url", url).option("subscribe", "orders").load()

The schema is Spark's Kafka source schema (`includeHeaders` adds `headers`); the options
are its options (see `spark.options`). `reader()` runs where Spark plans the query: it asks
metadata for the offsets and chunks (`spark.planner`) and hands Spark one
`SkiffInputPartition` per task; `read()` runs on executors and yields
`pyarrow.RecordBatch`es (`spark.executor`), with no metadata access. `streamReader()`
gives the Structured Streaming reader (`spark.stream`). Without the `bucket` option the
bucket URL comes from metadata. With `kafka.isolation.level=read_committed` each task
carries the aborted transactions of its range, so executors still need no metadata.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType
from skiff.metadata.wire.http_client import SyncHttpMetadataClient
from skiff.spark.options import SourceOptions, include_headers_option, parse_options
from skiff.spark.planner import PlannedRead, plan_batch, resolve_bucket, run

KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long,"
    " timestamp timestamp, timestampType int"
)
HEADERS_FIELD = ", headers array<struct<key: string, value: binary>>"


def schema_ddl(include_headers: bool) -> str:
    return KAFKA_SCHEMA + (HEADERS_FIELD if include_headers else "")


class SkiffInputPartition(InputPartition):
    """One task: a planned read (offset range + chunk locations) and how to read it."""

    def __init__(
        self, task: PlannedRead, bucket: str, include_headers: bool, fail_on_data_loss: bool
    ) -> None:
        super().__init__(task)
        self.task = task
        self.bucket = bucket
        self.include_headers = include_headers
        self.fail_on_data_loss = fail_on_data_loss


class SkiffBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        def plan(client: SyncHttpMetadataClient) -> tuple[str, list[PlannedRead]]:
            bucket = resolve_bucket(client, self.opts)
            return bucket, plan_batch(client, dataclasses.replace(self.opts, bucket=bucket))

        bucket, tasks = run(plan, self.opts)
        return [
            SkiffInputPartition(t, bucket, self.opts.include_headers, self.opts.fail_on_data_loss)
            for t in tasks
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(partition)


def read_partition(partition: InputPartition) -> Iterator[Any]:
    """An executor's read of one planned task (batch or micro-batch)."""
    from skiff.spark.executor import read_task

    if not isinstance(partition, SkiffInputPartition):
        return  # nothing was planned: Spark still runs one (placeholder) task
    yield from read_task(
        partition.task,
        partition.bucket,
        include_headers=partition.include_headers,
        fail_on_data_loss=partition.fail_on_data_loss,
    )


class SkiffDataSource(DataSource):
    """Format `skiff`: Skiff topics read straight from the bucket."""

    @classmethod
    def name(cls) -> str:
        return "skiff"

    def _opts(self, *, streaming: bool) -> SourceOptions:
        return parse_options(dict(self.options), streaming=streaming)

    def schema(self) -> StructType | str:
        # only includeHeaders matters here: the batch/streaming checks run in reader()/streamReader()
        return schema_ddl(include_headers_option(dict(self.options)))

    def reader(self, schema: StructType) -> DataSourceReader:
        return SkiffBatchReader(self._opts(streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from skiff.spark.stream import SkiffStreamReader

        return SkiffStreamReader(self._opts(streaming=True))
