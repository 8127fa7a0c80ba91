"""Benchmark: the cost of metadata's read snapshot on PostgreSQL.

Metadata's read transactions (metadata.db.read_tx) run at REPEATABLE READ READ ONLY on
PostgreSQL, so every statement of one read sees one snapshot. Before, they ran at the
server's READ COMMITTED, and the LSO read re-read the watermarks to pair them with the open
transactions. This times the hot reads four ways, alternated in one run:

- `after`: this code (`read_tx`: REPEATABLE READ READ ONLY, set per connection through
  SQLAlchemy's execution options, reset when the connection goes back to the pool);
- `before`: the same reads with `metadata.reads.read_tx` swapped for the previous helper
  (a plain BEGIN: READ COMMITTED, read-write): the cost of the isolation level as a whole;
- `before+opts`: READ COMMITTED set through the same execution options as `after`: what
  setting and resetting them costs the client (`before+opts`/`before`), and what the
  snapshot itself costs the server (`after`/`before+opts`);
- `old`: `before` plus the watermark re-read the previous code made after the open
  transactions (one more statement per LSO read, when no watermark moved in between):
  the code before this change.

The reads (the service in-process, direct calls, no HTTP):
- `find_chunks`: one read_committed fetch query at a random offset below the last stable
  offset of a random partition, 1 MiB: the partition row, its open transactions (the LSO),
  a page of the chunk index (4 chunks of 256 KiB) and its aborted transactions: 4
  statements in one transaction;
- `partition_states`: the watermark and LSO of every partition (what the commit feed's
  long poll reads): 2 statements.

Data: one topic of `--partitions` partitions; `--files` files, each with one chunk per
partition: plain batches of 10 records, and every 10th file a transaction per partition
(10 records) whose marker (commit or abort, alternately) is in the next file; the last
transaction stays open, with at least 5 plain files after it: LSO < high watermark.

The modes are alternated call by call, in groups: each group runs the same read (the
same query) once per mode, back to back, the order rotating from group to group, so every
mode sees the same load (the machine is shared). A round is `--calls` groups per read,
spread over `--threads` concurrent readers (each picks its mode per call through a
thread-local switch). Reported per read and threads: each mode's median call latency over
all rounds, and the median over all groups of the ratios between modes (for after/before,
also the lowest and highest of the rounds' medians).

    python bench/metadata_read_snapshot.py --rounds 6 --calls 2000 --threads 1,4

PostgreSQL: a fresh database is created (and dropped) on the server given by
--pg-admin-url (default postgresql://postgres@127.0.0.1:5432/postgres).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, event, text

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from skiff.metadata import reads, transactions  # noqa: E402
from skiff.metadata.db import read_tx  # noqa: E402
from skiff.metadata.service import MetadataService  # noqa: E402
from skiff.metadata.types import BatchSpec, ChunkSpec, FetchQuery, FileSpec, PartitionKey  # noqa: E402

CHUNK_BYTES = 256 * 1024
FETCH_MAX_BYTES = 1 << 20
RECORDS = 10
TS_MS = 1_700_000_000_000
READ_COMMITTED = 1
MODES = ("old", "before", "before+opts", "after")
RATIOS = (("after", "before"), ("before+opts", "before"), ("after", "before+opts"), ("after", "old"))
READS = ("find_chunks", "partition_states")


@contextmanager
def read_committed_tx(engine: Engine) -> Iterator[Connection]:
    """The read helper before the snapshot: a plain BEGIN (the server's READ COMMITTED)."""
    with engine.connect() as conn, conn.begin() as tx:
        yield conn
        tx.rollback()


@contextmanager
def read_committed_opts_tx(engine: Engine) -> Iterator[Connection]:
    """READ COMMITTED set through the execution options `read_tx` uses for its snapshot."""
    with engine.connect() as conn:
        conn.execution_options(isolation_level="READ COMMITTED", postgresql_readonly=False)
        with conn.begin() as tx:
            yield conn
            tx.rollback()


HELPERS = {"old": read_committed_tx, "before": read_committed_tx, "before+opts": read_committed_opts_tx}
HELPERS["after"] = read_tx
_mode = threading.local()


@contextmanager
def switched_read_tx(engine: Engine) -> Iterator[Connection]:
    """`metadata.reads.read_tx` during the run: the helper of this thread's current mode."""
    with HELPERS[_mode.name](engine) as conn:
        yield conn


def switch_stable_state(svc: MetadataService) -> Callable[[], None]:
    """Make `old` re-read the watermarks after the open transactions, as the previous code
    did; returns the undo."""
    real = transactions.stable_state
    dialect = svc.reads._db.dialect

    def stable_state(conn: Connection, keys: Sequence[tuple[uuid.UUID, int]]) -> dict[Any, int]:
        found = real(conn, keys)
        if _mode.name == "old" and keys:
            dialect.read_partitions(conn, keys)
        return found

    transactions.stable_state = stable_state

    def undo() -> None:
        transactions.stable_state = real

    return undo


def _pg_database(admin_url: str) -> tuple[str, str]:
    import psycopg

    name = f"skiff_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name, f"{admin_url.rpartition('/')[0]}/{name}"


def _pg_drop(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def populate(svc: MetadataService, partitions: int, files: int) -> tuple[uuid.UUID, list[int]]:
    """The topic (see the module docstring); returns its id and each partition's LSO."""
    topic = svc.create_topic(f"snap-{uuid.uuid4().hex[:8]}", partitions, {})
    next_pid = 10_000
    open_txns: dict[int, tuple[int, int]] = {}  # partition -> (producer id, file it opened in)
    last_txn_file = (files - 6) // 10 * 10  # the transaction left open
    for i in range(files):
        chunks = []
        pos = 0  # byte position in the file: one chunk per partition, one after the other
        for p in range(partitions):
            batches: list[BatchSpec] = []
            if p in open_txns and open_txns[p][1] != last_txn_file:  # its marker
                marker = 1 if i % 20 == 1 else 0  # commit, abort, alternately
                batches.append(BatchSpec(pos, 80, 1, 1, TS_MS, open_txns.pop(p)[0], 0, -1, 0, True, marker))
                pos += 80
            if i % 10 == 0 and i <= last_txn_file:
                # a real transaction holding the partition: the file commit checks it
                txn_id = f"snap-{topic.topic_id.hex[:8]}-{next_pid}"
                started = svc.transactions.init_producer_id(txn_id, 600_000)
                assert started.error == 0, started
                pid = started.producer_id
                svc.transactions.add_partitions(txn_id, pid, 0, [(str(topic.topic_id), p)])
                batches.append(
                    BatchSpec(pos, CHUNK_BYTES, RECORDS, RECORDS, TS_MS, pid, 0, 0, 0, True, -1, txn_id)
                )
                open_txns[p] = (pid, i)
                next_pid += 1
            else:
                batches.append(BatchSpec(pos, CHUNK_BYTES, RECORDS, RECORDS, TS_MS))
            pos += CHUNK_BYTES
            chunks.append(ChunkSpec(topic.topic_id, p, tuple(batches)))
        results = svc.commit_file(FileSpec(f"agents/bench/{uuid.uuid4().hex}", pos, 0, "bench"), chunks)
        assert all(r.error_code == 0 and all(b.error_code == 0 for b in r.batches) for r in results), results
    states = svc.partition_states([PartitionKey(topic.topic_id, p) for p in range(partitions)])
    lsos = [s.last_stable_offset for s in states]
    assert all(0 < s.last_stable_offset < s.high_watermark for s in states), states
    return topic.topic_id, lsos


def _caller(
    svc: MetadataService, name: str, topic_id: uuid.UUID, lsos: list[int], rng: random.Random
) -> Callable[[], Callable[[], None]]:
    """A maker of calls of one read: each made call repeats one query (drawn at random)."""
    keys = [PartitionKey(topic_id, p) for p in range(len(lsos))]

    def states() -> None:
        assert all(s.error_code == 0 for s in svc.partition_states(keys))

    def fetch_call() -> Callable[[], None]:
        p = rng.randrange(len(lsos))
        q = FetchQuery(topic_id, p, rng.randrange(lsos[p]), FETCH_MAX_BYTES, READ_COMMITTED)

        def fetch() -> None:
            (info,) = svc.find_chunks([q])
            assert info.error_code == 0 and info.chunks, info

        return fetch

    return (lambda: states) if name == "partition_states" else fetch_call


def run_round(
    svc: MetadataService,
    name: str,
    threads: int,
    groups: int,
    topic_id: uuid.UUID,
    lsos: list[int],
    seed: int,
) -> tuple[dict[str, list[float]], dict[tuple[str, str], list[float]]]:
    """`groups` groups of calls (one per mode) of one read spread over `threads` threads:
    the latencies (µs) per mode, and each group's ratios (`RATIOS`)."""
    latencies_us: dict[str, list[float]] = {m: [] for m in MODES}
    ratios: dict[tuple[str, str], list[float]] = {r: [] for r in RATIOS}
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def worker(n: int, worker_seed: int) -> None:
        make = _caller(svc, name, topic_id, lsos, random.Random(worker_seed))
        mine: dict[str, list[float]] = {m: [] for m in MODES}
        start.wait()
        for i in range(n):
            call = make()
            k = i % len(MODES)
            for mode in MODES[k:] + MODES[:k]:
                _mode.name = mode
                t0 = time.perf_counter_ns()
                call()
                mine[mode].append((time.perf_counter_ns() - t0) / 1000)
        with lock:
            for m in MODES:
                latencies_us[m].extend(mine[m])
            for a, b in RATIOS:
                ratios[(a, b)].extend(x / y for x, y in zip(mine[a], mine[b], strict=True))

    shares = [groups // threads + (1 if i < groups % threads else 0) for i in range(threads)]
    ts = [threading.Thread(target=worker, args=(n, seed * 100 + i)) for i, n in enumerate(shares)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return latencies_us, ratios


def statements_per_call(
    svc: MetadataService, topic_id: uuid.UUID, lsos: list[int]
) -> dict[str, dict[str, int]]:
    """How many statements one call of each read runs, per mode (the BEGIN not counted)."""
    count = [0]

    def counted(*_: Any) -> None:
        count[0] += 1

    event.listen(svc.engine, "before_cursor_execute", counted)
    try:
        out: dict[str, dict[str, int]] = {}
        for name in READS:
            call = _caller(svc, name, topic_id, lsos, random.Random(0))()
            for mode in MODES:
                _mode.name = mode
                count[0] = 0
                call()
                out.setdefault(name, {})[mode] = count[0]
        return out
    finally:
        event.remove(svc.engine, "before_cursor_execute", counted)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument(
        "--calls", type=int, default=2000, help="groups of calls (one per mode) per read and round"
    )
    ap.add_argument("--warmup", type=int, default=200, help="unmeasured groups per read")
    ap.add_argument("--threads", default="1,4", help="concurrent readers (a list)")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--pool-size", type=int, default=8)
    ap.add_argument(
        "--pg-admin-url",
        default=os.environ.get("SKIFF_TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    args = ap.parse_args(argv)
    thread_counts = [int(x) for x in args.threads.split(",")]
    print(
        f"# {platform.node()} cpus={os.cpu_count()} python={platform.python_version()} "
        f"loadavg={os.getloadavg()[0]:.1f} rounds={args.rounds} calls={args.calls} "
        f"partitions={args.partitions} files={args.files}",
        flush=True,
    )
    pg_name, url = _pg_database(args.pg_admin_url)
    svc = MetadataService.from_url(url, pool_size=args.pool_size)
    try:
        topic_id, lsos = populate(svc, args.partitions, args.files)
        for mode in MODES:  # what each helper really runs
            with HELPERS[mode](svc.engine) as conn:
                iso = conn.execute(text("SHOW transaction_isolation")).scalar_one()
                ro = conn.execute(text("SHOW transaction_read_only")).scalar_one()
            print(f"# {mode}: {iso}, read only {ro}", flush=True)
        reads.read_tx = switched_read_tx
        undo = switch_stable_state(svc)
        for name in READS:  # warm every helper's connections and the server's caches
            run_round(svc, name, 1, args.warmup, topic_id, lsos, 0)
        print(f"# statements per call: {statements_per_call(svc, topic_id, lsos)}", flush=True)
        latencies: dict[tuple[str, int, str], list[float]] = {}
        group_ratios: dict[tuple[str, int, tuple[str, str]], list[float]] = {}
        round_ratios: dict[tuple[str, int], list[float]] = {}  # after/before: median per round
        for r in range(args.rounds):
            for threads in thread_counts:
                for name in READS:
                    lat, ratios = run_round(svc, name, threads, args.calls, topic_id, lsos, r + 1)
                    for m in MODES:
                        latencies.setdefault((name, threads, m), []).extend(lat[m])
                    for pair in RATIOS:
                        group_ratios.setdefault((name, threads, pair), []).extend(ratios[pair])
                    round_ratios.setdefault((name, threads), []).append(statistics.median(ratios[RATIOS[0]]))
            print(
                f"  round {r + 1}/{args.rounds} loadavg={os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True
            )
        undo()
        reads.read_tx = read_tx
    finally:
        svc.close()
        _pg_drop(args.pg_admin_url, pg_name)

    print(f"# loadavg at the end {os.getloadavg()[0]:.1f}")
    heads = " | ".join(f"{m} p50 µs" for m in MODES) + " | " + " | ".join(f"{a}/{b}" for a, b in RATIOS)
    print(f"| read | threads | {heads} | after/before, rounds min-max |")
    print("|---|---|" + "---|" * (len(MODES) + len(RATIOS) + 1))
    for threads in thread_counts:
        for name in READS:
            p50s = " | ".join(f"{statistics.median(latencies[(name, threads, m)]):.0f}" for m in MODES)
            rs = " | ".join(
                f"{statistics.median(group_ratios[(name, threads, pair)]):.3f}" for pair in RATIOS
            )
            rr = round_ratios[(name, threads)]
            print(f"| {name} | {threads} | {p50s} | {rs} | {min(rr):.3f}-{max(rr):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
