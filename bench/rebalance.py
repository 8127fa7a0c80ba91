"""Rebalance time, classic protocol against the consumer protocol (KIP-848), 10 members and
100 partitions, in one run.

    python bench/rebalance.py [--trials 5] [--members 10] [--partitions 100] [--heartbeat-ms 500]

Starts `skiff metadata` (SQLite) and one `skiff agent` (file:// bucket) with no initial
rebalance delay and the consumer protocol's heartbeat interval at --heartbeat-ms (the
classic members heartbeat at the same interval: `heartbeat.interval.ms`). All members are
librdkafka consumers in this one process, polled round robin from one thread, each watching
its own assignment (`Consumer.assignment()`).

Per protocol and trial, a fresh group on one topic of --partitions partitions:
- *start*: all members subscribe at once; the time until every partition is held by exactly
  one member and the spread is at most one (balanced);
- *join*: with members - 1 balanced, one more subscribes; the time until balanced again;
- *leave*: one member closes; the time until the others are balanced again.
For each it also reports the fewest partitions held at any sample during the rebalance
(`min held`): the classic protocol's eager assignors take every partition away while the
group rebalances (stop the world), the consumer protocol only moves what changes owner.

Classic members use librdkafka's default assignors (range, roundrobin: eager); the consumer
protocol uses the coordinator's `uniform` assignor.

The online upgrade (`classic->consumer`, agent.groups.mixed): a balanced classic group whose
members restart one by one with group.protocol=consumer; *restart* is the time from one
member's close until the group (classic and consumer members mixed) is balanced again, one
sample per restart (the first one converts the group).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.support import start  # noqa: E402
from tests.support.agents import free_port  # noqa: E402

TIMEOUT_S = 120.0


def make_member(bootstrap: str, group: str, protocol: str, heartbeat_ms: int) -> Consumer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "enable.auto.commit": False,
        "auto.offset.reset": "latest",
    }
    if protocol == "classic":  # the consumer protocol's timings are the coordinator's
        conf.update({"session.timeout.ms": 10_000, "heartbeat.interval.ms": heartbeat_ms})
    return Consumer(conf)


def held(members: list[Consumer]) -> list[int]:
    return [len(m.assignment()) for m in members]


def balanced(members: list[Consumer], partitions: int) -> bool:
    parts = [tp.partition for m in members for tp in m.assignment()]
    counts = held(members)
    return len(parts) == partitions == len(set(parts)) and max(counts) - min(counts) <= 1


def settle(members: list[Consumer], partitions: int, done: Callable[[], bool]) -> tuple[float, int]:
    """(seconds until `done`, fewest partitions held at any sample meanwhile)."""
    t0 = time.monotonic()
    fewest = partitions
    while not done():
        if time.monotonic() - t0 > TIMEOUT_S:
            raise TimeoutError(f"not balanced within {TIMEOUT_S}s: {held(members)}")
        for m in members:
            m.poll(0)
        fewest = min(fewest, sum(held(members)))
        time.sleep(0.002)
    return time.monotonic() - t0, fewest


def trial(
    bootstrap: str, topic: str, protocol: str, n: int, partitions: int, heartbeat_ms: int
) -> dict[str, tuple[float, int]]:
    group = f"bench-{protocol}-{uuid.uuid4().hex[:8]}"
    members = [make_member(bootstrap, group, protocol, heartbeat_ms) for _ in range(n - 1)]
    out: dict[str, tuple[float, int]] = {}
    try:
        for m in members:
            m.subscribe([topic])
        out["start"] = settle(members, partitions, lambda: balanced(members, partitions))
        members.append(make_member(bootstrap, group, protocol, heartbeat_ms))
        members[-1].subscribe([topic])
        out["join"] = settle(members, partitions, lambda: balanced(members, partitions))
        leaver = members.pop(0)
        leaver.close()
        out["leave"] = settle(members, partitions, lambda: balanced(members, partitions))
    finally:
        for m in members:
            m.close()
    return out


def upgrade_trial(
    bootstrap: str, topic: str, n: int, partitions: int, heartbeat_ms: int
) -> dict[str, list[tuple[float, int]]]:
    """A balanced classic group, then each member restarted with group.protocol=consumer."""
    group = f"bench-upgrade-{uuid.uuid4().hex[:8]}"
    members = [make_member(bootstrap, group, "classic", heartbeat_ms) for _ in range(n)]
    out: dict[str, list[tuple[float, int]]] = {"start": [], "restart": []}
    try:
        for m in members:
            m.subscribe([topic])
        out["start"].append(settle(members, partitions, lambda: balanced(members, partitions)))
        for i in range(n):
            members[i].close()
            members[i] = make_member(bootstrap, group, "consumer", heartbeat_ms)
            members[i].subscribe([topic])
            out["restart"].append(settle(members, partitions, lambda: balanced(members, partitions)))
    finally:
        for m in members:
            m.close()
    return out


def start_cluster(tmp: Path, heartbeat_ms: int) -> tuple[str, list[object]]:
    md_port, port = free_port(), free_port()
    env = {
        **os.environ,
        "SKIFF_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "SKIFF_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": str(heartbeat_ms),
        "SKIFF_METRICS_PORT": "0",
    }
    md = start(
        ["metadata", "--db", f"sqlite:///{tmp}/md.db", "--port", str(md_port)], md_port, tmp / "md.log", env
    )
    agent = start(
        [
            "agent",
            "--bucket",
            f"file://{tmp}/bucket",
            "--metadata",
            f"http://127.0.0.1:{md_port}",
            "--port",
            str(port),
        ],
        port,
        tmp / "agent.log",
        env,
    )
    return f"127.0.0.1:{port}", [agent, md]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--members", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--heartbeat-ms", type=int, default=500)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        bootstrap, procs = start_cluster(Path(d), args.heartbeat_ms)
        try:
            topic = "rebalance-bench"
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(timeout=60)
            results: dict[tuple[str, str], list[tuple[float, int]]] = {}
            for _ in range(args.trials):
                for protocol in ("classic", "consumer"):
                    got = trial(bootstrap, topic, protocol, args.members, args.partitions, args.heartbeat_ms)
                    for phase, value in got.items():
                        results.setdefault((protocol, phase), []).append(value)
                upgrade = upgrade_trial(bootstrap, topic, args.members, args.partitions, args.heartbeat_ms)
                for phase, values in upgrade.items():
                    results.setdefault(("classic->consumer", phase), []).extend(values)
            report(results, args)
        finally:
            for p in procs:
                p.terminate()  # type: ignore[attr-defined]
                p.wait()  # type: ignore[attr-defined]


def report(results: dict[tuple[str, str], list[tuple[float, int]]], args: argparse.Namespace) -> None:
    print(
        f"{args.members} members, {args.partitions} partitions, heartbeat {args.heartbeat_ms} ms, "
        f"{args.trials} trials (seconds until balanced; min held: fewest partitions held meanwhile)"
    )
    print("| protocol | phase | median s | min s | max s | min held (worst) |")
    print("|----------|-------|----------|-------|-------|------------------|")
    for (protocol, phase), values in results.items():
        secs = [v[0] for v in values]
        print(
            f"| {protocol} | {phase} | {statistics.median(secs):.2f} | {min(secs):.2f} | {max(secs):.2f} "
            f"| {min(v[1] for v in values)} |"
        )


if __name__ == "__main__":
    main()
