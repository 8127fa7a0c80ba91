"""Benchmark: metadata commit_file throughput and latency.

For each backend (SQLite file, PostgreSQL), partitions per file (1, 100, 1000) and number
of concurrent committers (1, 8), commit files for `--duration` seconds with the service
in-process (direct calls, no HTTP) and print commits/s and p50/p99 commit latency (and
how many files each transaction committed on average: concurrent commits are grouped).

Each committer plays an agent: every file holds one chunk of one batch (10 records,
1 KiB) for each of `partitions` partitions drawn at random from a 1000-partition topic, so
concurrent committers contend on the same partition rows, as agents do. With
`--idempotent` (the default, as Kafka producers are idempotent by default since 3.0),
every batch comes from an idempotent producer, so each commit also reads and writes
producer state.

    python bench/metadata_commit.py --duration 4
    python bench/metadata_commit.py --backends postgresql --partitions 100 --concurrency 1,8

PostgreSQL: a fresh database is created (and dropped) per cell on the server given by
--pg-admin-url (default postgresql://postgres@127.0.0.1:5432/postgres).

The commit's object check (metadata.commits.object_check: one HEAD per commit, before the
transaction): with `--stores file,moto`, each cell runs twice over a bucket on that store
(file:// in a temporary directory; moto's S3 server, started here), with the check off and
on. The objects are made before the cell (`--objects` of them, each of the file's stated
size, sparse on file://), so the timed loop is the commit alone; a cell stops early when its
objects run out (its rate is then over the time it ran).

    python bench/metadata_commit.py --backends sqlite --partitions 1,100 --stores file,moto
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from skiff.metadata.inspection import count_rows  # noqa: E402
from skiff.metadata.service import MetadataService  # noqa: E402
from skiff.metadata.types import BatchSpec, ChunkSpec, FileSpec, PartitionKey  # noqa: E402

TOPIC_PARTITIONS = 1000
BATCH_BYTES = 1024
RECORDS = 10


@dataclass
class Cell:
    backend: str
    partitions: int
    committers: int
    commits: int
    seconds: float
    latencies_ms: list[float]
    files_per_txn: float = 1.0
    store: str = "-"
    check: str = "-"
    head_ms: float | None = None  # mean duration of the check's HEAD (from its own histogram)

    def row(self) -> list[str]:
        lat = sorted(self.latencies_ms)
        p50 = statistics.median(lat)
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        rate = self.commits / self.seconds
        return [
            self.backend,
            self.store,
            self.check,
            str(self.partitions),
            str(self.committers),
            f"{rate:,.0f}",
            f"{rate * self.partitions:,.0f}",
            f"{p50:.2f}",
            f"{p99:.2f}",
            f"{lat[-1]:.1f}",
            f"{self.files_per_txn:.1f}",
            "-" if self.head_ms is None else f"{self.head_ms:.3f}",
        ]


HEADER = [
    "backend",
    "store",
    "HEAD check",
    "partitions/file",
    "committers",
    "commits/s",
    "chunks/s",
    "p50 ms",
    "p99 ms",
    "max ms",
    "files/txn",
    "HEAD mean ms",
]


def _pg_database(admin_url: str) -> tuple[str, str]:
    import psycopg

    name = f"skiff_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = admin_url.rpartition("/")[0]
    return name, f"{base}/{name}"


def _pg_drop(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Bucket:
    """Where a cell's objects live: a store URL and how to make an object of a size."""

    kind: str
    url: str
    make: object  # Callable[[str, int], None]


@contextmanager
def open_bucket(kind: str, work: Path) -> Iterator[Bucket]:
    from skiff.fileformat.objectstore import open_store

    if kind == "file":
        root = work / "bucket"
        root.mkdir(parents=True)

        def make_file(key: str, size: int) -> None:
            path = root / key
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as f:
                f.truncate(size)  # sparse: HEAD (stat) sees the size, nothing is written

        yield Bucket(kind, f"file://{root}", make_file)
        return
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests.support.s3servers import start_moto

    server = start_moto(work)
    try:
        name = server.new_bucket()
        os.environ.update(server.env)  # the service's store finds moto through AWS_ENDPOINT_URL
        store = open_store(f"s3://{name}")

        def make_s3(key: str, size: int) -> None:
            store.put(key, bytes(size))

        yield Bucket(kind, f"s3://{name}", make_s3)
        store.close()
    finally:
        server.process.stop(grace=3)


def make_objects(bucket: Bucket, count: int, size: int) -> list[str]:
    keys = [f"bench/{uuid.uuid4().hex}" for _ in range(count)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: bucket.make(k, size), keys))  # type: ignore[operator]
    return keys


def run_cell(
    backend: str,
    partitions: int,
    committers: int,
    duration: float,
    warmup: float,
    idempotent: bool,
    args: argparse.Namespace,
    bucket: Bucket | None = None,
    check: bool = False,
) -> Cell:
    tmp = None
    pg_name = None
    if backend == "sqlite":
        tmp = tempfile.TemporaryDirectory(prefix="skiff-bench-")
        url = f"sqlite:///{tmp.name}/metadata.db"
    else:
        pg_name, url = _pg_database(args.pg_admin_url)
    keys: list[list[str]] | None = None
    per_chunk = args.batches_per_chunk
    if bucket is not None:
        made = make_objects(bucket, args.objects, partitions * per_chunk * BATCH_BYTES)
        keys = [made[i::committers] for i in range(committers)]
    svc = MetadataService.from_url(
        url,
        pool_size=max(8, committers),
        max_overflow=0,
        group_commit=args.group_commit,
        bucket_url=None if bucket is None else bucket.url,
        verify_objects=check,
    )
    assert (svc.commits.object_check is not None) == (bucket is not None and check)
    try:
        topic = svc.create_topic("bench", TOPIC_PARTITIONS, {})
        tid = topic.topic_id
        pids = [svc.init_producer_id()[0] for _ in range(committers)]
        stop_at = [0.0]
        measure_from = [0.0]
        results: list[tuple[int, list[float]]] = [(0, [])] * committers
        ended = [0.0] * committers
        errors: list[BaseException] = []
        start = threading.Barrier(committers + 1)
        gc.collect()
        gc.freeze()  # as run_metadata_server does: long-lived objects out of full collections

        def committer(i: int) -> None:
            try:
                rng = random.Random(i)
                seqs = [0] * TOPIC_PARTITIONS
                lat: list[float] = []
                n = 0
                start.wait()
                while True:
                    chosen = sorted(rng.sample(range(TOPIC_PARTITIONS), partitions))
                    specs = []
                    for j, p in enumerate(chosen):
                        batches = []
                        for k in range(per_chunk):
                            pos = (j * per_chunk + k) * BATCH_BYTES
                            if idempotent:
                                b = BatchSpec(pos, BATCH_BYTES, RECORDS, RECORDS, 1, pids[i], 0, seqs[p])
                                seqs[p] += RECORDS
                            else:
                                b = BatchSpec(pos, BATCH_BYTES, RECORDS, RECORDS, 1)
                            batches.append(b)
                        specs.append(ChunkSpec(tid, p, tuple(batches)))
                    if keys is not None and not keys[i]:
                        break  # out of objects: this committer stops early
                    key = keys[i].pop() if keys is not None else f"bench/{uuid.uuid4().hex}"
                    f = FileSpec(key, partitions * per_chunk * BATCH_BYTES, 0, f"c{i}")
                    t0 = time.perf_counter()
                    r = svc.commit_file(f, specs)
                    t1 = time.perf_counter()
                    if r[0].batches[0].error_code != 0:
                        raise RuntimeError(f"commit failed: {r[0]}")
                    if t0 >= measure_from[0]:
                        lat.append((t1 - t0) * 1000)
                        n += 1
                    if t1 >= stop_at[0]:
                        break
                ended[i] = time.perf_counter()
                results[i] = (n, lat)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=committer, args=(i,)) for i in range(committers)]
        for th in threads:
            th.start()
        now = time.perf_counter()
        measure_from[0] = now + warmup
        stop_at[0] = now + warmup + duration
        start.wait()
        for th in threads:
            th.join()
        if errors:
            raise errors[0]
        # Sanity: offsets were assigned to every committed record.
        states = svc.partition_states([PartitionKey(tid, p) for p in range(TOPIC_PARTITIONS)])
        assert sum(s.high_watermark for s in states) == count_rows(svc.engine)["chunks"] * RECORDS * per_chunk
        lat = [x for _, xs in results for x in xs]
        per_txn = 1.0
        if svc.commits.combiner is not None and svc.commits.combiner.groups:
            per_txn = svc.commits.combiner.requests / svc.commits.combiner.groups
        seconds = min(duration, max(ended) - measure_from[0])
        if keys is not None and seconds < duration:
            print(f"  (out of objects after {seconds:.2f} s: raise --objects)", file=sys.stderr)
        head_ms = None
        check_ = svc.commits.object_check
        if check_ is not None:
            assert check_.outcomes.keys() == {"ok"}, check_.outcomes
            head_ms = check_.mean_seconds() * 1000
        return Cell(
            backend,
            partitions,
            committers,
            sum(n for n, _ in results),
            seconds,
            lat,
            per_txn,
            "-" if bucket is None else bucket.kind,
            "-" if bucket is None else ("on" if check else "off"),
            head_ms,
        )
    finally:
        svc.close()
        if tmp is not None:
            tmp.cleanup()
        if pg_name is not None:
            _pg_drop(args.pg_admin_url, pg_name)


def print_table(cells: list[Cell]) -> None:
    rows = [HEADER] + [c.row() for c in cells]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(HEADER, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows[1:]:
        print(
            "| "
            + " | ".join(
                v.rjust(w) if i > 0 else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True))
            )
            + " |"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=4.0, help="measured seconds per cell")
    ap.add_argument("--warmup", type=float, default=0.5, help="unmeasured seconds per cell")
    ap.add_argument("--backends", default="sqlite,postgresql")
    ap.add_argument("--partitions", default="1,100,1000", help="partitions per file")
    ap.add_argument("--concurrency", default="1,8", help="concurrent committers")
    ap.add_argument("--idempotent", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument(
        "--batches-per-chunk",
        type=int,
        default=1,
        help="record batches in each partition's chunk (keyed produce: many small batches per "
        "partition per file); the commit's cost per batch against per chunk",
    )
    ap.add_argument(
        "--group-commit",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="group concurrent commits into one transaction (the service's default)",
    )
    ap.add_argument(
        "--pg-admin-url",
        default=os.environ.get("SKIFF_TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    ap.add_argument(
        "--stores",
        default="",
        help="file,moto: run each cell over a bucket on these stores, with the commit's object check"
        " off and on (default: no bucket, no check)",
    )
    ap.add_argument("--objects", type=int, default=6000, help="objects made per cell with --stores")
    args = ap.parse_args(argv)
    print(
        f"# {platform.node()} {platform.machine()} cpus={os.cpu_count()} python={platform.python_version()} "
        f"idempotent={args.idempotent} group_commit={args.group_commit} duration={args.duration}s",
        flush=True,
    )
    cells = []
    stores = [s for s in args.stores.split(",") if s]
    for backend in args.backends.split(","):
        for partitions in (int(x) for x in args.partitions.split(",")):
            for committers in (int(x) for x in args.concurrency.split(",")):
                if not stores:
                    cell = run_cell(
                        backend, partitions, committers, args.duration, args.warmup, args.idempotent, args
                    )
                    print("  " + " ".join(cell.row()), file=sys.stderr, flush=True)
                    cells.append(cell)
    for kind in stores:
        with (
            tempfile.TemporaryDirectory(prefix=f"skiff-bench-{kind}-") as work,
            open_bucket(kind, Path(work)) as b,
        ):
            for backend in args.backends.split(","):
                for partitions in (int(x) for x in args.partitions.split(",")):
                    for committers in (int(x) for x in args.concurrency.split(",")):
                        for check in (False, True):
                            cell = run_cell(
                                backend,
                                partitions,
                                committers,
                                args.duration,
                                args.warmup,
                                args.idempotent,
                                args,
                                b,
                                check,
                            )
                            print("  " + " ".join(cell.row()), file=sys.stderr, flush=True)
                            cells.append(cell)
    print_table(cells)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
