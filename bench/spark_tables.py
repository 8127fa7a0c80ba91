"""Spark over a topic's Iceberg table vs over the topic's files vs over Parquet written by
Spark itself, on random and on repeating values, in one run with one local session (issue
26 item 6); and the table's object-store cost.

Set-up (not timed) for each of `--values` (default both): a `skiff metadata` process
(SQLite) and a file:// bucket; topic `t-<values>` with `skiff.table.enabled=true` loaded
with N records as bench/spark_read.py loads them (16-byte keys, 100-byte values, batches of
`--batch-records`, 8 MiB agent-style files committed through metadata's HTTP client); then
the table materialized in this process as `skiff compact --once` does (`materialize_all`,
the SQL catalog in the metadata database, one commit per `--commit-mib` of chunks), its CPU
seconds giving the materialization rate per core. Objects per commit are the files under
the table's prefix over the commits (Parquet, manifest, manifest list, metadata JSON: the
PUTs an object store bills), with the bytes of the table's Parquet data files.

Then, in one Spark session, the same aggregate (count, key + value bytes, max offset, max
timestamp: every column the comparison needs) over:

1. `table`: the table part of `skiff.spark.tables.read_topic_table`, the current
   snapshot's Parquet data files (planned by pyiceberg) read by Spark's Parquet reader;
2. `table+tail`: `read_topic_table` whole, the table plus the (here empty) fresh tail from
   the skiff source: what a user runs, with the tail's planning against metadata;
3. `skiff`: `spark.read.format("skiff")` over the topic files;
4. `parquet`: the skiff DataFrame written by Spark (snappy, Spark's default), read back.

Each query runs once to warm up, then `--repeat` interleaved rounds; the best time counts
(bench/spark_read.interleaved_best_times). Rows/s and MiB/s of key + value bytes, and each
rate over Parquet's. GETs are not counted (the bucket is file://: a query reads the same
column chunks of the same files whatever the store; the Parquet sizes say how many bytes).

    python bench/spark_tables.py --records 2000000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from skiff.compactor import metrics  # noqa: E402
from skiff.compactor.tables import DEFAULT_ROW_GROUP_ROWS, TablesConfig, materialize_all  # noqa: E402

ROW_GROUP_ROWS = [0]  # --row-group-rows (0: the default)
from skiff.fileformat.objectstore import open_store  # noqa: E402
from skiff.fileformat.tables_layout import warehouse_for  # noqa: E402
from skiff.metadata.wire.http_client import HttpMetadataClient  # noqa: E402

from bench.spark_read import interleaved_best_times, load  # noqa: E402
from bench.support import start_metadata  # noqa: E402

AGG = ["count(*) n", "sum(length(key)) + sum(length(value)) bytes", "max(offset) o", "max(timestamp) ts"]
PAYLOAD_BYTES = 16 + 100  # key + value of every record (bench/spark_read.template_batches)


async def materialize(url: str, bucket: str, catalog_uri: str, topic: str, commit_mib: int) -> dict[str, Any]:
    """Materialize `topic` once; its records, commits, CPU and wall seconds."""
    client = HttpMetadataClient(url)
    store = open_store(bucket, fsync=False)
    config = TablesConfig(
        catalog_uri,
        warehouse_for(bucket),
        topic=topic,
        max_commit_bytes=commit_mib << 20,
        row_group_rows=ROW_GROUP_ROWS[0] or DEFAULT_ROW_GROUP_ROWS,
    )
    commits0 = metrics.TABLE_COMMITS._value.get()
    c0, w0 = time.process_time(), time.perf_counter()
    try:
        summary = await materialize_all(client, store, config)
    finally:
        await client.close()
        store.close()
    assert summary.records and not summary.failed, summary
    return {
        "records": summary.records,
        "commits": int(metrics.TABLE_COMMITS._value.get() - commits0),
        "cpu_s": time.process_time() - c0,
        "wall_s": time.perf_counter() - w0,
    }


def table_files(work: Path, table: str) -> tuple[int, int, float]:
    """(objects under the table's prefix, its Parquet data files, their MiB)."""
    files = [f for f in (work / "bucket" / "tables" / "skiff" / table).rglob("*") if f.is_file()]
    data = [f.stat().st_size for f in files if f.suffix == ".parquet"]
    return len(files), len(data), sum(data) / 2**20


def table_part(spark: Any, catalog_uri: str, bucket: str, table: str) -> tuple[Any, int, float]:
    """The table part of read_topic_table: the current snapshot's data files, read by Spark;
    with their count and MiB (files replaced by upkeep's rewrite are not among them)."""
    from pyiceberg.catalog.sql import SqlCatalog
    from skiff.fileformat.tables_layout import CATALOG_NAME, NAMESPACE, catalog_properties

    catalog = SqlCatalog(CATALOG_NAME, **catalog_properties(catalog_uri, warehouse_for(bucket)))
    try:
        tasks = list(catalog.load_table((NAMESPACE, table)).scan().plan_files())
    finally:
        catalog.engine.dispose()
    assert tasks and not any(t.delete_files for t in tasks)
    live_mib = sum(t.file.file_size_in_bytes for t in tasks) / 2**20
    return spark.read.parquet(*(t.file.file_path for t in tasks)), len(tasks), live_mib


def prepare(args: argparse.Namespace, url: str, work: Path, values: str) -> dict[str, Any]:
    """Load topic t-<values> and materialize its table; what was measured."""
    bucket, catalog_uri, topic = f"file://{work}/bucket", f"sqlite:///{work}/md.db", f"t-{values}"
    configs = {"skiff.table.enabled": "true", "retention.ms": "-1"}
    asyncio.run(load(url, bucket, args.records, args.partitions, args.batch_records, values, topic, configs))
    done = asyncio.run(materialize(url, bucket, catalog_uri, topic, args.commit_mib))
    objects, parquets, parquet_mib = table_files(work, topic.replace(".", "_"))
    rows = args.records // args.batch_records * args.batch_records
    assert done["records"] == rows, done
    mib = rows * PAYLOAD_BYTES / 2**20
    print(
        f"{values}: materialized {rows} records ({mib:.0f} MiB key + value) in {done['commits']} commits, "
        f"{done['cpu_s']:.1f} CPU s ({rows / done['cpu_s']:,.0f} records/s, {mib / done['cpu_s']:.1f} MiB/s "
        f"per core), {done['wall_s']:.1f} s wall; {objects} objects under the table "
        f"({objects / done['commits']:.1f} per commit), {parquets} Parquet files of "
        f"{parquet_mib:.1f} MiB (replaced ones included)",
        flush=True,
    )
    return {
        **done,
        "values": values,
        "topic": topic,
        "rows": rows,
        "mib": mib,
        "objects": objects,
        "bucket": bucket,
        "catalog_uri": catalog_uri,
    }


def compare(spark: Any, url: str, work: Path, run: dict[str, Any], repeat: int) -> dict[str, float]:
    """Best seconds of each route for one topic, after checking they all agree."""
    from skiff.spark.tables import read_topic_table

    topic, bucket = run["topic"], run["bucket"]
    skiff_df = (
        spark.read.format("skiff")
        .options(**{"metadata.url": url, "bucket": bucket, "subscribe": topic})
        .load()
    )
    out = work / f"parquet-{run['values']}"
    skiff_df.write.parquet(str(out))
    written = [f.stat().st_size for f in out.rglob("*.parquet")]
    run["spark_parquet_mib"], run["spark_files"] = sum(written) / 2**20, len(written)
    table_df, run["live_files"], run["live_mib"] = table_part(spark, run["catalog_uri"], bucket, topic)
    frames = {
        "table": table_df,
        "table+tail": read_topic_table(
            spark, topic, metadata_url=url, catalog_uri=run["catalog_uri"], bucket=bucket
        ),
        "skiff": skiff_df,
        "parquet": spark.read.parquet(str(out)),
    }
    results = {name: df.selectExpr(*AGG).collect()[0] for name, df in frames.items()}
    assert len(set(results.values())) == 1 and results["skiff"].n == run["rows"], results
    return interleaved_best_times(
        {name: (lambda df=df: df.selectExpr(*AGG).collect()) for name, df in frames.items()}, repeat
    )


def report(run: dict[str, Any], best: dict[str, float]) -> None:
    rows, mib, parquet_s = run["rows"], run["mib"], best["parquet"]
    print(
        f"\nvalues {run['values']}: {rows} rows, {mib:.0f} MiB key + value; Parquet: the table's "
        f"{run['live_files']} live files, {run['live_mib']:.1f} MiB (pyiceberg's writer, zstd); Spark's "
        f"{run['spark_files']} files, {run['spark_parquet_mib']:.1f} MiB (snappy)"
    )
    print("| source | s | rows/s | MiB/s | rate / parquet |\n|---|---|---|---|---|")
    for name, s in best.items():
        print(f"| {name} | {s:.2f} | {rows / s:,.0f} | {mib / s:.1f} | {parquet_s / s:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2_000_000, help="records per topic")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch-records", type=int, default=4096)
    ap.add_argument("--commit-mib", type=int, default=256, help="chunk MiB per table commit")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--values", default="random,repeating", help="comma-separated: random, repeating")
    ap.add_argument(
        "--row-group-rows", type=int, default=0, help="the tables' Parquet row groups (0: default)"
    )
    args = ap.parse_args()
    ROW_GROUP_ROWS[0] = args.row_group_rows

    # the session binds to 127.0.0.1 anyway (skiff_session); this also keeps Spark's address
    # lookup from picking another interface in its start-up warning
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    work = Path(tempfile.mkdtemp(prefix="skiff-spark-tables-bench-"))
    try:
        with start_metadata(work) as url:
            runs = [prepare(args, url, work, v) for v in args.values.split(",")]
            from skiff.spark import skiff_session

            spark = skiff_session(
                "skiff-tables-bench",
                args.master,
                {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"},
            )
            spark.sparkContext.setLogLevel("ERROR")
            for run in runs:
                report(run, compare(spark, url, work, run, args.repeat))
            print(f"\nload average {Path('/proc/loadavg').read_text().strip()}")
            spark.stop()
    finally:
        os.system(f"rm -rf {work}")


if __name__ == "__main__":
    main()
