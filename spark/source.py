"""`SkiffDataSource`: the PySpark (4.x) Python data source named `skiff`.

    spark.dataSource.register(SkiffDataSource)
    spark.read.format("skiff").option("metadata.url", url).option("bucket", bucket_url)
        .option("subscribe", "orders").load()

The schema is Spark's Kafka source schema (`includeHeaders` adds `headers`); the options
are its options (see `spark.options`). `reader()` runs where Spark plans the query: it asks
metadata for the offsets and chunks (`spark.planner`) and hands Spark one
`SkiffInputPartition` per task; `read()` runs on executors and yields
`pyarrow.RecordBatch`es (`spark.executor`), with no metadata access.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from spark.options import SourceOptions, parse_options
from spark.planner import PlannedRead, SkiffSourceError, plan_batch, run

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


def _bucket(opts: SourceOptions) -> str:
    if not opts.bucket:
        raise SkiffSourceError(
            "option bucket is required: the Skiff bucket URL (s3://bucket/prefix or file:///path),"
            " as given to `skiff agent --bucket`"
        )
    return opts.bucket


class SkiffBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.bucket = _bucket(opts)

    def partitions(self) -> Sequence[InputPartition]:
        tasks = run(lambda client: plan_batch(client, self.opts), self.opts.metadata_url)
        return [
            SkiffInputPartition(t, self.bucket, self.opts.include_headers, self.opts.fail_on_data_loss)
            for t in tasks
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from spark.executor import read_task

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
        return schema_ddl(self._opts(streaming=False).include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return SkiffBatchReader(self._opts(streaming=False))
