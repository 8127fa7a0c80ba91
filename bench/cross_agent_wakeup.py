"""Cross-agent long-poll wake-up: what waking a fetch on another agent adds to latency.

    python bench/cross_agent_wakeup.py [--trials 100] [--db sqlite|postgresql://...]

Starts `skiff metadata` (SQLite file by default, or the PostgreSQL URL given) and two
`skiff agent` processes on one file:// bucket. A consumer parks a Fetch (max_wait 10 s,
min_bytes 1) at the tail of a one-partition topic on agent A; once it is parked, one
record is produced (Produce v9, acks=all) either through agent A itself ("same agent") or
through agent B ("cross agent"). Per trial:
- produce->ack: from sending the Produce to its response (flush interval + PUT + commit);
- produce->fetch: from sending the Produce to the parked Fetch's response with the record.
The two modes alternate trial by trial in one run, so the difference of their
produce->fetch medians is what learning of another agent's commit costs: the metadata
long poll (`wait_for_commits`) answering agent A, plus the fetch's re-read. Before the
commit feed, agents polled metadata every `fetch_poll_interval_ms` (100 ms), which alone
added up to 100 ms (50 ms on average).
Prints a markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from skiff.fileformat.record_build import build_batch  # noqa: E402

from bench.support import pct, start  # noqa: E402
from tests.support.agents import free_port  # noqa: E402
from tests.support.kafka_wire import KafkaWire, fetch_request, produce_request  # noqa: E402

TOPIC = "wakeup"


def trial(fetcher: KafkaWire, producer: KafkaWire, offset: int) -> tuple[float, float]:
    """(produce->ack, produce->fetch) seconds for one record at `offset`."""
    got: dict[str, float] = {}

    def fetch() -> None:
        resp = fetcher.request(
            fetch_request(TOPIC, [(0, offset, 1 << 20)], max_wait_ms=10_000, max_bytes=1 << 20)
        ).parse()
        got["fetch"] = time.perf_counter()
        part = resp.responses[0].partitions[0]
        if int(part.error_code) != 0 or part.records is None or not bytes(part.records):
            got["error"] = (
                f"fetch at {offset}: error {part.error_code}, {len(bytes(part.records or b''))} bytes"
            )

    t = threading.Thread(target=fetch)
    t.start()
    time.sleep(0.15)  # let the fetch park in the purgatory
    sent = time.perf_counter()
    resp = producer.request(
        produce_request(TOPIC, {0: build_batch([(0, int(time.time() * 1000), None, b"x" * 100, ())])})
    ).parse()
    acked = time.perf_counter()
    pr = resp.responses[0].partition_responses[0]
    assert int(pr.error_code) == 0 and int(pr.base_offset) == offset, pr
    t.join(30)
    assert "fetch" in got, "the parked fetch was not answered"
    assert "error" not in got, got["error"]
    return acked - sent, got["fetch"] - sent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=100, help="trials per mode")
    ap.add_argument("--db", default="sqlite", help="'sqlite' or a PostgreSQL URL (an empty database)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        db = f"sqlite:///{root / 'metadata.db'}" if args.db == "sqlite" else args.db
        env = {**os.environ, "SKIFF_LOG_LEVEL": "WARNING"}
        procs = []
        try:
            md_port = free_port()
            procs.append(
                start(["metadata", "--db", db, "--port", str(md_port)], md_port, root / "md.log", env)
            )
            ports = [free_port(), free_port()]
            for i, port in enumerate(ports):
                agent_args = [
                    "agent",
                    "--bucket",
                    f"file://{root / 'bucket'}",
                    "--metadata",
                    f"http://127.0.0.1:{md_port}",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                ]
                procs.append(
                    start(agent_args, port, root / f"agent{i}.log", {**env, "SKIFF_AGENT_ID": f"a{i}"})
                )
            a, b = (f"127.0.0.1:{p}" for p in ports)
            admin = AdminClient({"bootstrap.servers": a})
            admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=30)
            results: dict[str, list[tuple[float, float]]] = {"same agent": [], "cross agent": []}
            with (
                KafkaWire(a, timeout_s=60) as fa,
                KafkaWire(a, timeout_s=60) as pa,
                KafkaWire(b, timeout_s=60) as pb,
            ):
                offset = 0
                for _ in range(3):  # warm-up: connections, caches, the long poll
                    for producer in (pa, pb):
                        trial(fa, producer, offset)
                        offset += 1
                for _ in range(args.trials):
                    for mode, producer in (("same agent", pa), ("cross agent", pb)):
                        results[mode].append(trial(fa, producer, offset))
                        offset += 1
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=30)
    print(f"{args.trials} trials per mode, metadata on {'SQLite' if args.db == 'sqlite' else 'PostgreSQL'}\n")
    print("| mode | produce->ack p50 / p99 (ms) | produce->fetch p50 / p99 (ms) |")
    print("|---|---|---|")
    for mode, rows in results.items():
        acks = [r[0] * 1000 for r in rows]
        fetches = [r[1] * 1000 for r in rows]
        print(
            f"| {mode} | {pct(acks, 0.5):.1f} / {pct(acks, 0.99):.1f} | "
            f"{pct(fetches, 0.5):.1f} / {pct(fetches, 0.99):.1f} |"
        )
    same = statistics.median(r[1] - r[0] for r in results["same agent"]) * 1000
    cross = statistics.median(r[1] - r[0] for r in results["cross agent"]) * 1000
    print(f"\nack->fetch median: same agent {same:.1f} ms, cross agent {cross:.1f} ms")


if __name__ == "__main__":
    main()
