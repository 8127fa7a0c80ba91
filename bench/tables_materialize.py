"""Table materialization rate (compactor.tables): records/s and MiB/s per core.

    python bench/tables_materialize.py [--mib 64] [--partitions 4] [--value-bytes 100]
                                       [--keys 0] [--commit-mib 256]

Writes a topic with `skiff.table.enabled=true` as an agent writes it (8 MiB files, each
with a chunk of every partition, batches of 16 uncompressed records with a 10-byte key
and a `--value-bytes` value of random bytes) to a file:// bucket and a SQLite metadata
database in a temp dir, then materializes it in this process (`materialize_all`, the
SQL catalog in the same database, one commit per `--commit-mib` of chunks) and prints
records, topic MiB (chunk bytes), CPU seconds of this process (pyarrow's writer threads
included: the rate per core is bytes / CPU s), wall seconds, commits, small files the
upkeep rewrote, and objects written under `tables/` per commit (Parquet, manifests,
manifest list, metadata JSON: the PUTs an object store would bill; with upkeep's rewrites
and the files replaced, still there within the orphan grace).

`--keys N` (N > 0): the topic is compacted (cleanup.policy=compact) with keys drawn from N
distinct ones, so each commit upserts (compactor.tables_commit: delete the batch's keys,
copy-on-write, then append); 0: a delete-policy topic, appends only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skiff.compactor import metrics
from skiff.compactor.tables import TablesConfig, materialize_all
from skiff.fileformat.objectstore import ObjectStore, open_store
from skiff.fileformat.record_build import build_batch
from skiff.fileformat.record_decode import Record
from skiff.fileformat.segment import ChunkInput, build_segment
from skiff.fileformat.tables_layout import warehouse_for
from skiff.metadata.server.local_client import LocalMetadataClient
from skiff.metadata.service import MetadataService
from skiff.metadata.types import BatchSpec, ChunkSpec, FileSpec

BATCH_RECORDS = 16
FILE_BYTES = 8 << 20


def write_topic(
    svc: MetadataService, store: ObjectStore, args: argparse.Namespace, configs: dict[str, str]
) -> tuple[int, int]:
    """Agent-style files; (records, chunk bytes)."""
    topic = svc.create_topic("bench-table", args.partitions, configs)
    per_chunk = FILE_BYTES // args.partitions
    batches_per_chunk = max(1, per_chunk // (BATCH_RECORDS * (args.value_bytes + 30)))
    records = nbytes = 0
    next_offset = [0] * args.partitions
    for f in range(max(1, (args.mib << 20) // FILE_BYTES)):
        chunks = []
        for p in range(args.partitions):
            batches = []
            for _ in range(batches_per_chunk):
                recs = []
                for d in range(BATCH_RECORDS):
                    n = next_offset[p] + d
                    key = b"k%09d" % ((n * 2654435761) % args.keys if args.keys else n)
                    recs.append(Record(d, 1_700_000_000_000 + n, key, os.urandom(args.value_bytes)))
                batches.append(build_batch(recs))
                next_offset[p] += BATCH_RECORDS
            chunks.append(ChunkInput(topic.topic_id, p, batches, len(batches), BATCH_RECORDS * len(batches)))
        data, placements = build_segment(chunks)
        key = f"agent/{f:06d}.seg"
        store.put(key, data)
        specs = [
            ChunkSpec(
                topic.topic_id,
                pl.partition,
                tuple(
                    BatchSpec(pos, len(b), BATCH_RECORDS, BATCH_RECORDS, 1_700_000_000_000)
                    for pos, b in zip(pl.batch_positions, ch.batches, strict=True)
                ),
            )
            for pl, ch in zip(placements, chunks, strict=True)
        ]
        for r in svc.commit_file(FileSpec(key, len(data), 0, "bench-agent"), specs):
            assert r.error_code == 0, r
        records += sum(c.record_count for c in chunks)
        nbytes += len(data)
    return records, nbytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--keys", type=int, default=0)
    ap.add_argument("--commit-mib", type=int, default=256)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="skiff-bench-tables-") as tmp:
        db = f"sqlite:///{tmp}/md.db"
        svc = MetadataService.from_url(db)
        url = f"file://{tmp}/bucket"
        store = open_store(url, fsync=False)
        configs = {"skiff.table.enabled": "true", "retention.ms": "-1"}
        if args.keys:
            configs["cleanup.policy"] = "compact"
        records, nbytes = write_topic(svc, store, args, configs)
        config = TablesConfig(db, warehouse_for(url), max_commit_bytes=args.commit_mib << 20)
        md = LocalMetadataClient(svc)
        c0, w0 = time.process_time(), time.perf_counter()
        summary = asyncio.run(materialize_all(md, store, config))
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        assert summary.records == records and not summary.failed, summary
        objects = sum(1 for _ in Path(tmp, "bucket", "tables").rglob("*") if _.is_file())
        commits = int(metrics.TABLE_COMMITS._value.get())
        rewritten = int(metrics.TABLE_FILES_REWRITTEN._value.get())
        mib = nbytes / 2**20
        mode = f"upsert over {args.keys} keys" if args.keys else "append"
        print(
            f"{mode}: records={records} topic_MiB={mib:.0f} value_bytes={args.value_bytes} "
            f"partitions={args.partitions} cpu_s={cpu:.1f} wall_s={wall:.1f} "
            f"records_per_s_per_core={records / cpu:,.0f} MiB_per_s_per_core={mib / cpu:.1f} "
            f"commits={commits} small_files_rewritten={rewritten} objects_under_tables={objects} "
            f"objects_per_commit={objects / commits:.1f}",
            flush=True,
        )
        store.close()
        svc.close()


if __name__ == "__main__":
    main()
