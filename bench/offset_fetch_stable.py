"""OffsetFetch with and without `require_stable`: what KIP-447's check costs a consumer.

    python bench/offset_fetch_stable.py [--requests 2000] [--partitions 10] [--db sqlite|postgresql://...]

Starts `skiff metadata` and one `skiff agent` (metadata over HTTP, as in production). A
group has committed offsets for `--partitions` partitions of one topic. Over one
connection, OffsetFetch v8 requests for every partition alternate between
require_stable=false (read_uncommitted consumers) and require_stable=true (read_committed
consumers: the Java consumer with isolation.level=read_committed, librdkafka by default),
for which the agent asks metadata `fetch_stable_offsets` (committed offsets plus the
partitions with offsets staged by open transactions, one call, one read transaction)
instead of `fetch_offsets`.
Reports per mode the latency p50 / p99 / mean and the ratio of the means (same run,
interleaved, so machine load moves both alike).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kio.schema.offset_fetch.v8.request import (  # noqa: E402
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)
from kio.schema.types import GroupId, TopicName  # noqa: E402
from kio.static.primitive import i32  # noqa: E402
from skiff.metadata.types import GroupOffset  # noqa: E402
from skiff.metadata.wire.http_client import HttpMetadataClient  # noqa: E402

from bench.support import pct, start  # noqa: E402
from tests.support.agents import free_port  # noqa: E402
from tests.support.kafka_wire import KafkaWire  # noqa: E402

TOPIC = "offset-fetch-bench"
GROUP = "offset-fetch-bench-group"


def request(partitions: int, stable: bool) -> OffsetFetchRequest:
    topics = (
        OffsetFetchRequestTopics(
            name=TopicName(TOPIC), partition_indexes=tuple(i32(p) for p in range(partitions))
        ),
    )
    return OffsetFetchRequest(
        groups=(OffsetFetchRequestGroup(group_id=GroupId(GROUP), topics=topics),), require_stable=stable
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000, help="per mode")
    ap.add_argument("--partitions", type=int, default=10)
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

            async def setup() -> None:
                md = HttpMetadataClient(f"http://127.0.0.1:{md_port}")
                await md.create_topic(TOPIC, args.partitions, {})
                await md.commit_offsets(
                    GROUP, [GroupOffset(TOPIC, p, 100 + p) for p in range(args.partitions)]
                )
                await md.close()

            asyncio.run(setup())
            port = free_port()
            agent = [
                "agent",
                "--bucket",
                f"file://{root / 'bucket'}",
                "--metadata",
                f"http://127.0.0.1:{md_port}",
            ]
            agent += ["--host", "127.0.0.1", "--port", str(port)]
            procs.append(start(agent, port, root / "agent.log", {**env, "SKIFF_AGENT_ID": "a0"}))
            seconds: dict[bool, list[float]] = {False: [], True: []}
            with KafkaWire(f"127.0.0.1:{port}") as wire:
                for stable in (False, True):  # warm-up: the group's lease, connections
                    for _ in range(20):
                        wire.request(request(args.partitions, stable)).parse()
                for _ in range(args.requests):
                    for stable in (False, True):
                        body = request(args.partitions, stable)
                        t0 = time.perf_counter()
                        got = wire.request(body).parse()
                        seconds[stable].append(time.perf_counter() - t0)
                        offsets = [
                            int(p.committed_offset) for t in got.groups[0].topics for p in t.partitions
                        ]
                        assert offsets == [100 + p for p in range(args.partitions)], offsets
            with open("/proc/loadavg") as f:
                load = f.read().split()[:3]
            print(
                f"{args.requests} requests per mode, {args.partitions} partitions, metadata over HTTP "
                f"({args.db}), load average {' '.join(load)}\n"
            )
            print("| require_stable | p50 ms | p99 ms | mean ms |")
            print("|---|---:|---:|---:|")
            for stable in (False, True):
                ms = [s * 1000 for s in seconds[stable]]
                print(
                    f"| {str(stable).lower()} | {pct(ms, 0.5):.2f} | {pct(ms, 0.99):.2f} | {statistics.mean(ms):.2f} |"
                )
            ratio = statistics.mean(seconds[True]) / statistics.mean(seconds[False])
            print(f"\nmean with / without require_stable: {ratio:.2f}")
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(30)


if __name__ == "__main__":
    main()
