"""What a Spark query for the last or the first hour of a day-long topic reads, with and
without filter pushdown, counted as GETs and bytes by the S3 server (moto's request recorder).

Set-up (not timed): a moto S3 server, a `skiff metadata` process (SQLite), topics `day`
and `day_nomin` with `--partitions` partitions holding 24 hours of data each: one
agent-style file per hour (one chunk per partition), records with synthetic CreateTime
timestamps spread evenly over their hour, committed through metadata's HTTP client as
agents commit. `day`'s batches carry their min timestamp (as agents send it since
migration 0014); `day_nomin`'s do not (chunk rows with NULL min_timestamp: what agents
wrote before). Then, in one local Spark session, the queries

    spark.read.format("skiff")...load().where(timestamp >= <start of the last hour>).count()
    spark.read.format("skiff")...load().where(timestamp < <end of the first hour>).count()

run with option pushFilters=false (every chunk read, Spark filters) and true (chunks whose
max timestamp is before the lower bound, or whose min timestamp is after the upper bound,
are left out of the plan), the first-hour one on both topics. For each: rows counted, GETs
and bytes served (the Range headers of the GETs the server recorded), and the time.

    python bench/spark_pushdown.py --hours 24 --partitions 4 --records-per-hour 20000
"""

from __future__ import annotations

import argparse
import asyncio
import os
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
from tests.support.s3servers import start_moto  # noqa: E402

T0 = 1_700_000_000_000
HOUR_MS = 3_600_000
BATCH_RECORDS = 500


def hour_batches(hour: int, partition: int, records: int) -> list[tuple[bytes, int, int, int]]:
    """(batch bytes, record count, min timestamp, max timestamp) of one partition's hour."""
    step_ms = HOUR_MS // max(records, 1)
    out = []
    for first in range(0, records, BATCH_RECORDS):
        n = min(BATCH_RECORDS, records - first)
        stamps = [T0 + hour * HOUR_MS + (first + i) * step_ms for i in range(n)]
        rows = [
            (i, ts, f"k{partition}-{first + i:08d}".encode(), b"v" * 100, []) for i, ts in enumerate(stamps)
        ]
        out.append((build_batch(rows), n, stamps[0], stamps[-1]))
    return out


async def load(
    metadata_url: str, bucket: str, hours: int, partitions: int, per_hour: int, *, name: str, mins: bool
) -> int:
    """Commit `hours` files to topic `name` (batches with their min timestamps when `mins`);
    returns the bytes stored."""
    client = HttpMetadataClient(metadata_url)
    store = open_store(bucket)
    topic = await client.create_topic(name, partitions, {})
    stored = 0
    for hour in range(hours):
        per_partition = {p: hour_batches(hour, p, per_hour // partitions) for p in range(partitions)}
        chunks = [
            ChunkInput(topic.topic_id, p, [b[0] for b in bs], len(bs), sum(b[1] for b in bs))
            for p, bs in per_partition.items()
        ]
        data, placements = build_segment(chunks)
        key = f"segments/{uuid.uuid4().hex}"
        store.put(key, data)
        stored += len(data)
        specs = []
        for pl in placements:
            bs = per_partition[pl.partition]
            specs.append(
                ChunkSpec(
                    pl.topic_id,
                    pl.partition,
                    tuple(
                        BatchSpec(pos, len(b), n, n, max_ts, min_timestamp=min_ts if mins else None)
                        for pos, (b, n, min_ts, max_ts) in zip(pl.batch_positions, bs, strict=True)
                    ),
                )
            )
        results = await client.commit_file(FileSpec(key, len(data)), specs)
        assert all(r.error_code == 0 for r in results), results
    await client.close()
    return stored


def served(requests) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """(GETs, bytes) from the recorded requests' Range headers."""
    gets = [r for r in requests if r.method == "GET" and "/segments/" in r.path]
    total = 0
    for r in gets:
        ranges = {k.lower(): v for k, v in r.headers.items()}.get("range", "")
        first, _, last = ranges.removeprefix("bytes=").partition("-")
        total += int(last) - int(first) + 1
    return len(gets), total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--records-per-hour", type=int, default=20_000)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="skiff-pushdown-bench-"))
    s3 = start_moto(work)
    bucket_name = s3.new_bucket()
    os.environ.update(s3.env)  # the driver's and the Python workers' AWS settings
    try:
        with start_metadata(work) as url:
            bucket = f"s3://{bucket_name}"
            for name, mins in (("day", True), ("day_nomin", False)):
                stored = asyncio.run(
                    load(
                        url, bucket, args.hours, args.partitions, args.records_per_hour, name=name, mins=mins
                    )
                )
                print(f"loaded {name}: {args.hours} hours, {stored / 2**20:.1f} MiB in {args.hours} files")
            run_queries(s3, url, bucket, args)
    finally:
        s3.process.stop()


def run_queries(s3, url: str, bucket: str, args: argparse.Namespace) -> None:  # type: ignore[no-untyped-def]
    from skiff.spark import skiff_session

    spark = skiff_session(
        "skiff-pushdown-bench",
        args.master,
        {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    last_hour = f"timestamp >= timestamp_millis({T0 + (args.hours - 1) * HOUR_MS})"
    first_hour = f"timestamp < timestamp_millis({T0 + HOUR_MS})"
    print("| query | topic | pushFilters | rows | GETs | MiB read | s |")
    print("|---|---|---|---|---|---|---|")
    results = {}
    for query, topic, condition in (
        ("last hour", "day", last_hour),
        ("first hour", "day_nomin", first_hour),
        ("first hour", "day", first_hour),
    ):
        for push in ("false", "true"):
            df = (
                spark.read.format("skiff")
                .option("metadata.url", url)
                .option("bucket", bucket)
                .option("subscribe", topic)
                .option("pushFilters", push)
                .load()
                .where(condition)
            )
            s3.start_recording()
            t = time.perf_counter()
            rows = df.count()
            elapsed = time.perf_counter() - t
            gets, read = served(s3.stop_recording())
            results[(query, topic, push)] = read
            print(f"| {query} | {topic} | {push} | {rows} | {gets} | {read / 2**20:.2f} | {elapsed:.1f} |")
    for query, topic, _ in (
        ("last hour", "day", ""),
        ("first hour", "day_nomin", ""),
        ("first hour", "day", ""),
    ):
        ratio = results[(query, topic, "false")] / max(results[(query, topic, "true")], 1)
        print(f"{query} on {topic}: bytes read with pushdown / without: 1/{ratio:.1f}")
    spark.stop()


if __name__ == "__main__":
    main()
