"""Group coordinator fencing end to end: agents start and stop (SIGTERM and SIGKILL) while a
group of three confluent-kafka consumers (librdkafka) consumes six partitions.

Agents come and go, so their views of who is alive (and with them the rendezvous choice of
the group's coordinator) disagree for a while after each change; the coordinator is killed
or stopped twice, so the group moves at least twice. Each consumer polls in its own thread;
its rebalance callbacks record, with a timestamp, every partition it was given, revoked or
lost. Checked:

- no partition is ever owned by two members at once (a member owns a partition from the
  assignment callback until the revocation or loss callback);
- after every change the group converges again: three members, each partition owned once,
  and DescribeGroups shows one Stable group whose members' assignments are exactly those;
- agents started without `--agent-id` on this one host register as distinct brokers.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.e2e.test_cluster import start_cluster, wait_for_brokers
from tests.e2e.test_coordinator_failover import find_coordinator
from tests.e2e.test_group_clients import create_topic, produce, stop, tagged
from tests.support.agents import SkiffProcess, agent_args
from tests.support.s3servers import S3Bucket

pytestmark = [pytest.mark.timeout(600), pytest.mark.postgres, pytest.mark.s3]

PARTITIONS = 6
MEMBERS = 3
CONVERGE_S = 90.0
ENV = {
    "SKIFF_GROUP_LEASE_TTL_MS": "3000",
    "SKIFF_GROUP_LEASE_RENEW_INTERVAL_MS": "500",
    "SKIFF_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
}


@dataclass
class Ownership:
    """Every member's ownership intervals, from its rebalance callbacks."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    owned: list[set[int]] = field(default_factory=lambda: [set() for _ in range(MEMBERS)])
    # partition -> [(member, start, end or None)]
    intervals: dict[int, list[list]] = field(default_factory=lambda: defaultdict(list))  # type: ignore[type-arg]
    log: list[str] = field(default_factory=list)

    def gained(self, member: int, parts: list[TopicPartition]) -> None:
        now = time.monotonic()
        with self.lock:
            for tp in parts:
                if tp.partition not in self.owned[member]:
                    self.owned[member].add(tp.partition)
                    self.intervals[tp.partition].append([member, now, None])
            self.log.append(f"{now:.3f} m{member} +{sorted(tp.partition for tp in parts)}")

    def ended(self, member: int, parts: list[TopicPartition], how: str) -> None:
        now = time.monotonic()
        with self.lock:
            for tp in parts:
                if tp.partition in self.owned[member]:
                    self.owned[member].discard(tp.partition)
                    for iv in self.intervals[tp.partition]:
                        if iv[0] == member and iv[2] is None:
                            iv[2] = now
            self.log.append(f"{now:.3f} m{member} {how}{sorted(tp.partition for tp in parts)}")

    def converged(self) -> bool:
        with self.lock:
            counts = [len(o) for o in self.owned]
            union = [p for o in self.owned for p in o]
        return all(counts) and sorted(union) == list(range(PARTITIONS))

    def overlaps(self) -> list[str]:
        out = []
        with self.lock:
            for p, ivs in self.intervals.items():
                for i, (m1, s1, e1) in enumerate(ivs):
                    for m2, s2, e2 in ivs[i + 1 :]:
                        if (
                            m1 != m2
                            and s1 < (e2 if e2 is not None else float("inf"))
                            and s2 < (e1 if e1 is not None else float("inf"))
                        ):
                            out.append(f"partition {p}: m{m1} [{s1:.3f}, {e1}] and m{m2} [{s2:.3f}, {e2}]")
        return out


class Members:
    """Three consumers, each polled by its own thread."""

    def __init__(self, bootstrap: str, group: str, topic: str, own: Ownership) -> None:
        self.own = own
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.consumers = [
            Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": group,
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": True,
                    "auto.commit.interval.ms": 200,
                    "fetch.wait.max.ms": 100,
                    "session.timeout.ms": 6_000,
                    "heartbeat.interval.ms": 500,
                    "partition.assignment.strategy": "range",
                }
            )
            for _ in range(MEMBERS)
        ]
        for i, c in enumerate(self.consumers):
            c.subscribe(
                [topic],
                on_assign=lambda _c, parts, i=i: own.gained(i, parts),
                on_revoke=lambda _c, parts, i=i: own.ended(i, parts, "-"),
                on_lost=lambda _c, parts, i=i: own.ended(i, parts, "lost"),
            )
        self.threads = [threading.Thread(target=self._run, args=(c,), daemon=True) for c in self.consumers]
        for t in self.threads:
            t.start()

    def _run(self, c: Consumer) -> None:
        while not self.stop.is_set():
            m = c.poll(0.1)
            err = None if m is None else m.error()
            if err is not None and err.code() != KafkaError._PARTITION_EOF and not err.retriable():
                self.errors.append(str(err))

    def close(self) -> None:
        if self.stop.is_set():
            return
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)
        for c in self.consumers:
            c.close()


def wait_converged(own: Ownership, admin: AdminClient, group: str, what: str) -> None:
    """Until three members own each partition once and DescribeGroups agrees (Stable)."""
    deadline = time.monotonic() + CONVERGE_S
    last = ""
    while time.monotonic() < deadline:
        if own.converged():
            try:
                d = admin.describe_consumer_groups([group], request_timeout=5)[group].result(timeout=10)
            except Exception as e:  # the coordinator is moving: ask again
                last = repr(e)
            else:
                assigned = [tp.partition for m in d.members for tp in m.assignment.topic_partitions]
                with own.lock:
                    mine = sorted(p for o in own.owned for p in o)
                if (
                    d.state == ConsumerGroupState.STABLE
                    and len(d.members) == MEMBERS
                    and sorted(assigned) == mine
                ):
                    return
                last = f"{d.state} {len(d.members)} members, assigned {sorted(assigned)}"
        time.sleep(0.2)
    pytest.fail(f"group did not converge after {what} ({last}):\n" + "\n".join(own.log[-40:]))


def coordinator_of(agents: list[SkiffProcess], group: str) -> SkiffProcess:
    port = find_coordinator(agents[0].bootstrap, group)[1]
    (found,) = [a for a in agents if a.port == port]
    return found


def spawn_agent(
    spawn_skiff: Callable[..., SkiffProcess], bucket: S3Bucket, metadata_url: str
) -> SkiffProcess:
    """An agent without --agent-id: its identity defaults to hostname and pid."""
    env = {
        **bucket.env,
        "SKIFF_HEARTBEAT_INTERVAL_MS": "500",
        "SKIFF_AGENT_TTL_MS": "3000",
        "SKIFF_TOPIC_CACHE_TTL_MS": "1000",
        **ENV,
    }
    return spawn_skiff(
        *agent_args(bucket.url("data"), metadata_url),
        env=env,
    )


def test_no_partition_is_owned_twice_while_agents_come_and_go(
    spawn_skiff: Callable[..., SkiffProcess],
    moto_s3: S3Bucket,
    pg_url: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    cluster = start_cluster(spawn_skiff, moto_s3, pg_url, n_agents=2, extra_env=ENV)
    live = list(cluster.agents)

    def stop_cluster() -> None:
        for p in [*live, cluster.metadata]:
            stop(p)

    request.addfinalizer(stop_cluster)
    for a in live:
        wait_for_brokers(a.bootstrap, 2, timeout_s=60)
    bootstrap = ",".join(a.bootstrap for a in live)
    topic = create_topic(bootstrap, partitions=PARTITIONS, prefix="fence")
    produce(bootstrap, topic, tagged("a", 20, partitions=PARTITIONS))
    group = f"fence-{topic}"
    own = Ownership()
    members = Members(bootstrap, group, topic, own)
    request.addfinalizer(members.close)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wait_converged(own, admin, group, "the start")

    moves = 0
    for step in ("start", "stop coordinator", "start", "kill coordinator", "start"):
        before = coordinator_of(live, group)
        if step == "start":
            live.append(spawn_agent(spawn_skiff, moto_s3, cluster.metadata_url))
            for a in live:
                wait_for_brokers(a.bootstrap, len(live), timeout_s=60)
        else:
            live.remove(before)
            before.kill(signal.SIGTERM if step.startswith("stop") else signal.SIGKILL)
            for a in live:
                wait_for_brokers(a.bootstrap, len(live), timeout_s=60)
        admin = AdminClient({"bootstrap.servers": ",".join(a.bootstrap for a in live)})
        wait_converged(own, admin, group, step)
        moves += coordinator_of(live, group).port != before.port
        assert not own.overlaps(), "\n".join(own.overlaps() + own.log)

    assert moves >= 2
    assert not members.errors, members.errors
    members.close()
    assert not own.overlaps(), "\n".join(own.overlaps() + own.log)
