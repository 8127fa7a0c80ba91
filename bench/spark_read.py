"""Spark reading a Skiff topic straight from the bucket vs Spark reading the same rows
from Parquet, in one run with one local session.

Set-up (not timed): a `skiff metadata` process (SQLite) and a file:// bucket; N records
of 100-byte values (16-byte keys) in batches of `--batch-records` records (as a producer
with linger writes them), 8 MiB agent-style files (relative offsets, one chunk per
partition per file) committed through metadata's HTTP client, as agents commit. Then:

1. skiff: `spark.read.format("skiff")` over the topic, with an aggregate that touches
   every column the Parquet query reads (key, value, offset, timestamp);
2. the same DataFrame written to Parquet (snappy, Spark's default), then
   `spark.read.parquet` with the same aggregate.

Each query runs once to warm up, then `--repeat` rounds run every query once each
(interleaved, so load from other work hits all alike); the best time counts. Rows/s and
MiB/s of record payload (key + value bytes) are printed, and the ratio.

`--values` chooses the records' values: `repeating` (the default; one of 26 letters
repeated 100 times, 4 distinct batches) lets Spark's Parquet writer dictionary-encode and
snappy-compress them to a few percent of their size, which flatters Parquet's rate;
`random` (random bytes, 64 distinct batches) gives Parquet plain-encoded, incompressible
columns, as real payloads mostly are. The Parquet files' size is printed.

One more row compares routes: `arrow` is the same read through `DataFrame.mapInArrow`
(the source's planned tasks as the rows of a small DataFrame, each read by the same
executor code), instead of the data source API.

Two more rows locate the cost (the profile in docs/benchmarks.md):

- `decode`: the executors' work alone, outside Spark: every planned task read from the
  bucket and decoded to Arrow (`spark.source.read_partition`) in this process, one core;
- `floor`: Spark's cost of taking the same rows from *any* Python data source: a source
  whose tasks (as many as skiff's) yield prebuilt Arrow batches of the same shape (16-byte
  key, 100-byte value, same schema) without reading or decoding anything. Spark 4.3 reads
  Python sources row by row (an UnsafeProjection of every column, no column pruning, no
  columnar path), so this bounds what any Python source can reach.

    python bench/spark_read.py --records 10000000 --partitions 4 --repeat 4 --values random
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from skiff.fileformat.objectstore import open_store  # noqa: E402
from skiff.fileformat.record_build import build_batch  # noqa: E402
from skiff.fileformat.segment import ChunkInput, build_segment  # noqa: E402
from skiff.metadata.types import BatchSpec, ChunkSpec, FileSpec  # noqa: E402
from skiff.metadata.wire.http_client import HttpMetadataClient  # noqa: E402

from bench.support import start_metadata  # noqa: E402

T0 = 1_700_000_000_000


def template_batches(values: str, per_batch: int) -> list[bytes]:
    """The batches the load repeats. `repeating`: 4 batches whose values are one of 26
    letters repeated 100 times (Parquet dictionary-encodes and snappy-compresses them to
    almost nothing); `random`: 64 batches of random 100-byte values and distinct keys
    (262,144 distinct values per 4096-record batch size: Parquet's dictionary overflows and
    falls back to plain encoding, and snappy finds nothing to compress, as with real data)."""
    if values == "repeating":
        return [
            build_batch(
                [
                    (i, T0 + i, f"key-{t:04d}-{i:07d}"[:16].encode(), bytes([65 + (i + t) % 26]) * 100, [])
                    for i in range(per_batch)
                ]
            )
            for t in range(4)
        ]
    rng = random.Random(7)
    return [
        build_batch(
            [(i, T0 + i, f"k{t:05d}-{i:09d}"[:16].encode(), rng.randbytes(100), []) for i in range(per_batch)]
        )
        for t in range(64)
    ]


async def load(
    metadata_url: str,
    bucket: str,
    records: int,
    partitions: int,
    per_batch: int,
    values: str = "repeating",
    topic_name: str = "bench",
    topic_configs: dict[str, str] | None = None,
) -> int:
    """Commit `records` records to topic `topic_name`; returns the payload bytes."""
    client = HttpMetadataClient(metadata_url)
    store = open_store(bucket, fsync=False)
    topic = await client.create_topic(topic_name, partitions, topic_configs or {})
    templates = template_batches(values, per_batch)
    batch_bytes = len(templates[0])
    batches_per_chunk = max(1, (8 * 1024 * 1024 // partitions) // batch_bytes)
    total_batches = records // per_batch
    done = 0
    n = 0
    while done < total_batches:
        chunks, specs = [], []
        for p in range(partitions):
            k = min(batches_per_chunk, (total_batches - done + partitions - 1 - p) // partitions)
            if k <= 0:
                continue
            bs = [templates[(n + j) % len(templates)] for j in range(k)]
            chunks.append(ChunkInput(topic.topic_id, p, bs, k, k * per_batch))
            done += k
        data, placements = build_segment(chunks)
        key = f"segments/{uuid.uuid4().hex}"
        store.put(key, data)
        for pl in placements:
            specs.append(
                ChunkSpec(
                    pl.topic_id,
                    pl.partition,
                    tuple(
                        BatchSpec(pos, batch_bytes, per_batch, per_batch, T0 + per_batch - 1)
                        for pos in pl.batch_positions
                    ),
                )
            )
        results = await client.commit_file(FileSpec(key, len(data)), specs)
        assert all(r.error_code == 0 for r in results), results
        n += 1
    await client.close()
    return total_batches * per_batch * (16 + 100)


def decode_only(url: str, bucket: str) -> float:
    """Seconds for one core to read and decode every planned task (no Spark)."""
    from skiff.spark.options import parse_options
    from skiff.spark.source import SkiffBatchReader, read_partition

    tasks = SkiffBatchReader(
        parse_options({"metadata.url": url, "bucket": bucket, "subscribe": "bench"})
    ).partitions()

    def run() -> None:
        for task in tasks:
            for _ in read_partition(task):
                pass

    return best_time(run, 2)


def floor_source(rows: int, tasks: int, batch_rows: int):  # type: ignore[no-untyped-def]
    """A Python data source (format `skiff_floor`) that yields `rows` rows shaped as the
    bench's in `tasks` tasks, from one prebuilt Arrow batch: Spark's cost alone."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class FloorReader(DataSourceReader):
        def partitions(self):  # type: ignore[no-untyped-def]
            return [InputPartition(rows // tasks + (1 if i < rows % tasks else 0)) for i in range(tasks)]

        def read(self, partition):  # type: ignore[no-untyped-def]
            import numpy as np
            import pyarrow as pa
            from skiff.spark.decode import arrow_schema

            n = batch_rows

            def binary(width: int) -> pa.Array:
                offsets = pa.py_buffer(np.arange(n + 1, dtype=np.int32) * width)
                return pa.Array.from_buffers(
                    pa.binary(), n, [None, offsets, pa.py_buffer(b"x" * (width * n))]
                )

            ts = np.arange(n, dtype=np.int64) * 1000
            batch = pa.RecordBatch.from_arrays(
                [
                    binary(16),
                    binary(100),
                    pa.array(["bench"] * n),
                    pa.array(np.zeros(n, np.int32)),
                    pa.array(np.arange(n, dtype=np.int64)),
                    pa.array(ts, pa.timestamp("us", tz="UTC")),
                    pa.array(np.zeros(n, np.int32)),
                ],
                schema=arrow_schema(False),
            )
            left = partition.value
            while left > 0:
                yield batch.slice(0, min(n, left))
                left -= n

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "skiff_floor"

        def schema(self) -> str:
            from skiff.spark.source import schema_ddl

            return schema_ddl(False)

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return FloorReader()

    return FloorSource


def map_in_arrow_frame(spark, options: dict[str, str]):  # type: ignore[no-untyped-def]
    """The same read through `DataFrame.mapInArrow` instead of the data source API: the
    source's planned tasks, one per row of a small DataFrame (one row per Spark partition,
    no shuffle), each read and decoded by the same executor code, yielding the same Arrow
    batches. Spark runs both routes with the same operator (`MapInBatchEvaluatorFactory`:
    Python data source scans are built on it), so this measures whether skipping the data
    source layer gains anything. The tasks are planned once, here, when the frame is built:
    the timed queries do not include planning, while the source plans on every query."""
    import pickle

    from skiff.spark.options import parse_options
    from skiff.spark.source import SkiffBatchReader, schema_ddl

    tasks = SkiffBatchReader(parse_options(options)).partitions()
    rows = [(i, pickle.dumps(t)) for i, t in enumerate(tasks)]
    plan = spark.createDataFrame(spark.sparkContext.parallelize(rows, len(rows)), "i int, task binary")

    def read(batches):  # type: ignore[no-untyped-def]
        import pickle

        from skiff.spark.source import read_partition

        for b in batches:
            for blob in b.column(1).to_pylist():
                yield from read_partition(pickle.loads(blob))

    return plan.mapInArrow(read, schema_ddl(False))


def interleaved_best_times(queries, repeat: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Best seconds per query over `repeat` rounds, each round running every query once
    (after one warm-up each) in a rotated order, so load from other work on the machine
    and the state one query leaves in the JVM hit all alike."""
    for fn in queries.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in queries}
    names = list(queries)
    for r in range(repeat):
        # each round starts one query later, so no query always follows the same one (a
        # query may pay for what the one before it left behind: garbage, evicted caches)
        for name in names[r % len(names) :] + names[: r % len(names)]:
            fn = queries[name]
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: min(ts) for name, ts in times.items()}


def best_time(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=4_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch-records", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument(
        "--values",
        choices=["repeating", "random"],
        default="repeating",
        help="record values: 26 distinct letters repeated (Parquet-friendly) or random bytes",
    )
    ap.add_argument("--min-partitions", type=int, help="the skiff source's minPartitions option")
    ap.add_argument("--no-map-in-arrow", action="store_true", help="skip the mapInArrow row")
    ap.add_argument("--conf", action="append", default=[], help="extra Spark setting KEY=VALUE")
    ap.add_argument("--no-profile", action="store_true", help="skip the decode-only and floor rows")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="skiff-spark-bench-"))
    try:
        with start_metadata(work) as url:
            run_bench(args, url, work)
    finally:
        os.system(f"rm -rf {work}")


def run_bench(args: argparse.Namespace, url: str, work: Path) -> None:
    """Load, then every query in one Spark session (see the module docstring)."""
    bucket = f"file://{work}/bucket"
    t = time.perf_counter()
    payload = asyncio.run(load(url, bucket, args.records, args.partitions, args.batch_records, args.values))
    rows = args.records // args.batch_records * args.batch_records
    print(f"loaded {rows} records ({payload / 2**20:.0f} MiB payload) in {time.perf_counter() - t:.1f}s")

    decode_s = None if args.no_profile else decode_only(url, bucket)

    from skiff.spark import skiff_session

    spark = skiff_session(
        "skiff-bench",
        args.master,
        {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            **dict(c.split("=", 1) for c in args.conf),
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    agg = [
        "count(*) n",
        "sum(length(key)) + sum(length(value)) bytes",
        "max(offset) o",
        "max(timestamp) ts",
    ]
    options = {"metadata.url": url, "bucket": bucket, "subscribe": "bench"}
    if args.min_partitions:
        options["minPartitions"] = str(args.min_partitions)
    skiff_df = spark.read.format("skiff").options(**options).load()
    check = skiff_df.selectExpr(*agg).collect()[0]
    assert check.n == rows, check
    skiff_df.write.parquet(str(work / "parquet"))
    parquet_df = spark.read.parquet(str(work / "parquet"))
    parquet_mib = sum(f.stat().st_size for f in (work / "parquet").rglob("*.parquet")) / 2**20
    assert parquet_df.selectExpr(*agg).collect()[0] == check
    frames = {"skiff": skiff_df, "parquet": parquet_df}
    if not args.no_map_in_arrow:
        frames["arrow"] = map_in_arrow_frame(spark, options)
        assert frames["arrow"].selectExpr(*agg).collect()[0] == check
    tasks_n = skiff_df.rdd.getNumPartitions()
    if not args.no_profile:
        spark.dataSource.register(floor_source(rows, tasks_n, 131072))
        frames["floor"] = spark.read.format("skiff_floor").load()
        assert frames["floor"].selectExpr("count(*) n").collect()[0].n == rows
    best = interleaved_best_times(
        {name: (lambda df=df: df.selectExpr(*agg).collect()) for name, df in frames.items()}, args.repeat
    )
    results = list(best.items())
    skiff_s, parquet_s = best["skiff"], best["parquet"]
    if decode_s is not None:
        results.append(("decode", decode_s))
    mib = payload / 2**20
    print(f"Parquet files: {parquet_mib:.0f} MiB for {mib:.0f} MiB of key + value bytes")
    print(f"values {args.values}, {tasks_n} tasks, load average {Path('/proc/loadavg').read_text().strip()}")
    print(f"{'source':<8} {'seconds':>8} {'rows/s':>12} {'MiB/s':>8}")
    for name, s in results:
        print(f"{name:<8} {s:>8.2f} {rows / s:>12,.0f} {mib / s:>8.1f}")
    print(f"skiff / parquet rate: {parquet_s / skiff_s:.2f}")
    if "arrow" in best:
        print(f"mapInArrow / parquet rate: {parquet_s / best['arrow']:.2f} (same decode, mapInArrow route)")
    if not args.no_profile:
        print(f"floor / parquet rate: {parquet_s / best['floor']:.2f} (any Python data source, no work)")
        print("decode: one core, no Spark (the executors' read + decode alone)")
    spark.stop()


if __name__ == "__main__":
    main()
