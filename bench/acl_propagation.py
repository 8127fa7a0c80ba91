"""ACL propagation: how long after a CreateAcls/DeleteAcls answer an ACL change is enforced.

    python bench/acl_propagation.py [--trials 20] [--refresh-ms 1000] [--db sqlite|postgresql://...]

Starts `skiff metadata` and two `skiff agent` processes with SKIFF_AUTHORIZER_ENABLED=true
(SKIFF_ACL_REFRESH_INTERVAL_MS=--refresh-ms). `User:ANONYMOUS` (every PLAINTEXT client) gets
ALTER on the cluster through the metadata API, so it may change ACLs. Per trial, an ALLOW
DESCRIBE on a topic is created through agent B (CreateAcls), then deleted (DeleteAcls);
each after a random pause of up to the refresh interval (a random phase against
agent A's poll); after each answer, a Metadata request for the topic is sent every 2 ms to agent A (and once
to agent B) until its answer flips between TOPIC_AUTHORIZATION_FAILED and NONE. Reports:
- same agent: whether B's first request after its own change already obeyed it;
- other agent: the time from B's answer to A's first obeying answer (p50 / p99 / max).
Expected: the other agent within refresh interval + two metadata round trips (uniform over
the interval: the poll is not aligned with the change).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest  # noqa: E402
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest  # noqa: E402
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic  # noqa: E402
from kio.schema.types import TopicName  # noqa: E402
from kio.static.primitive import i8  # noqa: E402
from skiff.metadata.security import acl_types as m  # noqa: E402
from skiff.metadata.wire.http_client import HttpMetadataClient  # noqa: E402

from bench.support import pct, start  # noqa: E402
from tests.support.agents import free_port  # noqa: E402
from tests.support.kafka_wire import KafkaWire  # noqa: E402

TOPIC = "acl-bench"
ANON = "User:ANONYMOUS"


def describe_code(wire: KafkaWire) -> int:
    req = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=TopicName(TOPIC)),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    return int(wire.request(req).parse().topics[0].error_code)


def until(wire: KafkaWire, code: int, since: float) -> float:
    while describe_code(wire) != code:
        time.sleep(0.002)
    return time.perf_counter() - since


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--refresh-ms", type=int, default=1000)
    ap.add_argument("--db", default="sqlite", help="'sqlite' or a PostgreSQL URL (an empty database)")
    args = ap.parse_args()
    allow = AclCreation(
        resource_type=i8(2),
        resource_name=TOPIC,
        resource_pattern_type=i8(3),
        principal=ANON,
        host="*",
        operation=i8(8),
        permission_type=i8(3),
    )
    remove = DeleteAclsFilter(
        resource_type_filter=i8(2),
        resource_name_filter=TOPIC,
        pattern_type_filter=i8(3),
        principal_filter=ANON,
        host_filter=None,
        operation=i8(8),
        permission_type=i8(3),
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        db = f"sqlite:///{root / 'metadata.db'}" if args.db == "sqlite" else args.db
        env = {
            **os.environ,
            "SKIFF_LOG_LEVEL": "WARNING",
            "SKIFF_AUTHORIZER_ENABLED": "true",
            "SKIFF_ACL_REFRESH_INTERVAL_MS": str(args.refresh_ms),
        }
        procs = []
        try:
            md_port = free_port()
            procs.append(
                start(["metadata", "--db", db, "--port", str(md_port)], md_port, root / "md.log", env)
            )
            md = HttpMetadataClient(f"http://127.0.0.1:{md_port}")

            async def bootstrap() -> None:
                await md.create_topic(TOPIC, 1, {})
                await md.create_acls(
                    [
                        m.AclBinding(
                            m.ResourceType.CLUSTER,
                            m.CLUSTER_NAME,
                            m.PatternType.LITERAL,
                            ANON,
                            "*",
                            m.AclOperation.ALTER,
                            m.AclPermissionType.ALLOW,
                        )
                    ]
                )
                await md.close()

            asyncio.run(bootstrap())
            ports = [free_port(), free_port()]
            for i, port in enumerate(ports):
                agent_args = [
                    "agent",
                    "--bucket",
                    f"file://{root / 'bucket'}",
                    "--metadata",
                    f"http://127.0.0.1:{md_port}",
                ]
                agent_args += ["--host", "127.0.0.1", "--port", str(port)]
                procs.append(
                    start(agent_args, port, root / f"agent{i}.log", {**env, "SKIFF_AGENT_ID": f"a{i}"})
                )
            other: list[float] = []
            same_first_try = 0
            changes = 0
            with KafkaWire(f"127.0.0.1:{ports[0]}") as a, KafkaWire(f"127.0.0.1:{ports[1]}") as b:
                assert describe_code(a) == 29 and describe_code(b) == 29
                for _ in range(args.trials):
                    for request, expected in (
                        (CreateAclsRequest(creations=(allow,)), 0),
                        (DeleteAclsRequest(filters=(remove,)), 29),
                    ):
                        # a random phase against A's poll (changes right after a flip would all
                        # land just after a poll and measure only the worst case)
                        time.sleep(random.uniform(0, args.refresh_ms / 1000))
                        b.request(request).parse()
                        answered = time.perf_counter()
                        changes += 1
                        same_first_try += describe_code(b) == expected
                        other.append(until(a, expected, answered))
            ms = [x * 1000 for x in other]
            print(f"refresh interval {args.refresh_ms} ms, {changes} changes ({args.db})\n")
            print("| where | result |")
            print("|---|---|")
            print(f"| same agent (B), first request after the answer | obeyed {same_first_try}/{changes} |")
            print(
                f"| other agent (A), answer -> first obeying request | p50 {pct(ms, 0.5):.0f} ms, "
                f"p99 {pct(ms, 0.99):.0f} ms, max {max(ms):.0f} ms, mean {statistics.mean(ms):.0f} ms |"
            )
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(30)


if __name__ == "__main__":
    main()
