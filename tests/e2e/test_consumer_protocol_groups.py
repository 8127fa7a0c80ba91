"""The consumer group protocol (KIP-848, `group.protocol=consumer`) with real clients over a
cluster of two agents (`skiff metadata` on PostgreSQL, a moto S3 bucket): librdkafka
(confluent-kafka 2.16, which speaks ConsumerGroupHeartbeat) and the Java client
(kafka-clients 4.3) in one group, the assignment computed by the coordinator.

Every member is driven from this one thread, so the rebalance callbacks of all members run
in one order, and a `Ledger` checks, as they run, that no partition is ever assigned to a
member while another one still holds it (the coordinator must see a revocation acked before
it hands the partition on). Each member commits every record it processed before it polls
again, so when members join and leave: every produced offset is consumed exactly once (no
record lost, none repeated), and the group's committed offsets end at the log end.

A rolling restart of a running classic group's members with group.protocol=consumer (librdkafka
and Java) converts the group at the first restart (Kafka 4's online upgrade, agent.groups.mixed):
the classic members left are served by the consumer group until they restart too, with no
record lost or repeated and every commit landing; and back (the group becomes classic again
when its last consumer-protocol member leaves).

Then the group admin APIs over both protocols: ListGroups with the v5 type filter
(consumer vs classic), ConsumerGroupDescribe for a consumer-protocol group (epochs,
assignor, each member's assignment), and what the Java AdminClient and librdkafka's admin
make of them.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.e2e.test_cluster import Cluster, start_cluster, wait_for_brokers
from tests.support.agents import SkiffProcess, _spawn
from tests.support.java_client import JavaClient, JavaGroupMember
from tests.support.s3servers import S3Bucket, S3Server, free_port

PARTITIONS = 6
PER_PARTITION = 40
WAIT_S = 90.0  # generous: 2 cores shared with other test runs


@pytest.fixture(scope="module")
def bootstrap(
    moto_s3_server: S3Server, pg_module_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("consumer-protocol")
    started: list[SkiffProcess] = []

    def spawn(*args: str, env: dict[str, str] | None = None, port: int | None = None) -> SkiffProcess:
        port = port or free_port()
        argv = [a.replace("{port}", str(port)) for a in args]
        p = _spawn(argv, port, logs / f"skiff-{len(started)}-{argv[0]}.log", env)
        started.append(p)
        return p

    bucket = S3Bucket(moto_s3_server, moto_s3_server.new_bucket())
    env = {
        "SKIFF_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "SKIFF_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": "500",
        "SKIFF_GROUP_CONSUMER_SESSION_TIMEOUT_MS": "10000",
    }
    try:
        cluster: Cluster = start_cluster(spawn, bucket, pg_module_url, n_agents=2, extra_env=env)
        for agent in cluster.agents:
            wait_for_brokers(agent.bootstrap, 2, timeout_s=60)
        yield ",".join(agent.bootstrap for agent in cluster.agents)
    finally:
        for p in reversed(started):
            p.kill(signal.SIGKILL if p.args[0] == "metadata" else signal.SIGTERM)
        moto_s3_server.drop_bucket(bucket.name)


def new_topic(bootstrap: str) -> str:
    topic = f"kip848-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=60)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for part in range(PARTITIONS):
        for i in range(PER_PARTITION):
            p.produce(topic, value=f"{part}-{i}".encode(), partition=part)
    assert p.flush(120) == 0
    return topic


@dataclass
class Ledger:
    """Who holds each partition, and every (partition, offset) consumed, checked as it happens."""

    owner: dict[int, str] = field(default_factory=dict)
    consumed: dict[tuple[int, int], str] = field(default_factory=dict)

    def assigned(self, member: str, partitions: list[int]) -> None:
        for p in partitions:
            holder = self.owner.get(p)
            assert holder in (None, member), f"partition {p} assigned to {member} while {holder} holds it"
            self.owner[p] = member

    def revoked(self, member: str, partitions: list[int]) -> None:
        for p in partitions:
            if self.owner.get(p) == member:
                del self.owner[p]

    def record(self, member: str, partition: int, offset: int) -> None:
        assert self.owner.get(partition) == member, f"{member} got {partition}@{offset} it does not hold"
        first = self.consumed.setdefault((partition, offset), member)
        assert first == member, f"{partition}@{offset} consumed twice ({first}, {member})"

    def held_by(self, member: str) -> set[int]:
        return {p for p, m in self.owner.items() if m == member}


class RdMember:
    """A librdkafka consumer (group.protocol=consumer unless told), committing each record it
    processes."""

    def __init__(
        self, ledger: Ledger, name: str, bootstrap: str, topic: str, group: str, protocol: str = "consumer"
    ) -> None:
        self.ledger, self.name, self.topic = ledger, name, topic
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": protocol,
                "client.id": name,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe(
            [topic],
            on_assign=lambda _c, tps: ledger.assigned(name, [tp.partition for tp in tps]),
            on_revoke=lambda _c, tps: ledger.revoked(name, [tp.partition for tp in tps]),
            on_lost=lambda _c, tps: ledger.revoked(name, [tp.partition for tp in tps]),
        )

    def poll(self) -> None:
        msg = self.consumer.poll(0.1)
        if msg is None or msg.error():
            assert msg is None or msg.error().retriable() or not msg.error().fatal(), msg.error()
            return
        self.ledger.record(self.name, msg.partition(), msg.offset())
        tp = TopicPartition(self.topic, msg.partition(), msg.offset() + 1)
        self.consumer.commit(offsets=[tp], asynchronous=False)

    def close(self) -> None:
        self.consumer.close()


class JvMember:
    """The Java client (kafka-clients 4.3) with group.protocol=consumer unless told, through
    `group-member`."""

    def __init__(
        self,
        ledger: Ledger,
        name: str,
        java: JavaClient,
        bootstrap: str,
        topic: str,
        group: str,
        protocol: str = "consumer",
    ) -> None:
        self.ledger, self.name = ledger, name
        self.member: JavaGroupMember = java.group_member(
            bootstrap, topic, group, props={"group.protocol": protocol}
        )

    def _events(self, answer: dict[str, Any]) -> None:
        done: dict[int, int] = {}
        for e in answer.get("events", []):
            if e["type"] == "assigned":
                self.ledger.assigned(self.name, e["partitions"])
            elif e["type"] in ("revoked", "lost"):
                self.ledger.revoked(self.name, e["partitions"])
            elif e["type"] == "record":
                self.ledger.record(self.name, e["partition"], e["offset"])
                done[e["partition"]] = e["offset"] + 1
        if done:  # before the next poll, where a revocation could happen
            self.member.call("commit " + ",".join(f"{p}:{o}" for p, o in sorted(done.items())))

    def poll(self) -> None:
        self._events(self.member.call("poll 100"))

    def close(self) -> None:
        answer = self.member.close()
        if answer is not None:
            self.ledger.revoked(
                self.name, [p for e in answer.get("events", []) for p in e.get("partitions", [])]
            )


Member = RdMember | JvMember


def poll_until(members: list[Member], done: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, f"not within {WAIT_S}s: {what}"
        for m in members:
            m.poll()


def balanced(ledger: Ledger, members: list[Member]) -> bool:
    held = [len(ledger.held_by(m.name)) for m in members]
    return sum(held) == PARTITIONS and max(held) - min(held) <= 1


def committed(bootstrap: str, topic: str, group: str) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        return [tp.offset for tp in tps]
    finally:
        c.close()


def run_group(ledger: Ledger, start: list[Callable[[], Member]]) -> list[Member]:
    """The first member alone, then the second, then the third join (each started only when
    the previous ones are settled: clients join as soon as they subscribe); the first one
    leaves; the other two finish the topic. Returns the two still running."""
    first = start[0]()
    poll_until([first], lambda: len(ledger.consumed) >= 60, "the first member consumes")
    assert ledger.held_by(first.name) == set(range(PARTITIONS))
    second = start[1]()
    poll_until([first, second], lambda: balanced(ledger, [first, second]), "the second member gets its share")
    third = start[2]()
    poll_until([first, second, third], lambda: balanced(ledger, [first, second, third]), "three shares")
    first.close()
    ledger.revoked(first.name, list(ledger.held_by(first.name)))
    rest: list[Member] = [second, third]
    poll_until(rest, lambda: len(ledger.consumed) == PARTITIONS * PER_PARTITION, "every record")
    poll_until(rest, lambda: balanced(ledger, rest), "the leaver's partitions taken over")
    by_partition = {p: sorted(o for (q, o) in ledger.consumed if q == p) for p in range(PARTITIONS)}
    assert all(offs == list(range(PER_PARTITION)) for offs in by_partition.values())
    assert len(set(ledger.consumed.values())) == 3
    return rest


def test_librdkafka_members_join_and_leave(bootstrap: str) -> None:
    topic, group = new_topic(bootstrap), f"g-{uuid.uuid4().hex[:8]}"
    ledger = Ledger()
    started: list[Member] = []

    def member(name: str) -> Callable[[], Member]:
        def start() -> Member:
            started.append(RdMember(ledger, name, bootstrap, topic, group))
            return started[-1]

        return start

    try:
        run_group(ledger, [member("rd0"), member("rd1"), member("rd2")])
    finally:
        for m in started[1:]:
            m.close()
    assert committed(bootstrap, topic, group) == [PER_PARTITION] * PARTITIONS


def test_java_and_librdkafka_in_one_group(bootstrap: str, java_client: JavaClient) -> None:
    topic, group = new_topic(bootstrap), f"g-{uuid.uuid4().hex[:8]}"
    ledger = Ledger()
    started: list[Member] = []

    def rd(name: str) -> Callable[[], Member]:
        def start() -> Member:
            started.append(RdMember(ledger, name, bootstrap, topic, group))
            return started[-1]

        return start

    def java() -> Member:
        started.append(JvMember(ledger, "java", java_client, bootstrap, topic, group))
        return started[-1]

    try:
        run_group(ledger, [rd("rd0"), java, rd("rd1")])
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: the futures need the handle
        d = admin.describe_consumer_groups([group])[group].result(timeout=30)
        assert d.type == ConsumerGroupType.CONSUMER
        assigned = {
            m.client_id: sorted(tp.partition for tp in m.assignment.topic_partitions) for m in d.members
        }
        assert sorted(assigned) == ["rd1", "skiff-java-member"]
        assert sorted(p for ps in assigned.values() for p in ps) == list(range(PARTITIONS))
    finally:
        for m in started[1:]:
            m.close()
    assert committed(bootstrap, topic, group) == [PER_PARTITION] * PARTITIONS


def test_admin_lists_and_describes_both_protocols(bootstrap: str) -> None:
    topic = new_topic(bootstrap)
    old, new = f"classic-{uuid.uuid4().hex[:8]}", f"consumer-{uuid.uuid4().hex[:8]}"
    members = {
        name: Consumer({"bootstrap.servers": bootstrap, "group.id": name, "group.protocol": protocol})
        for name, protocol in ((old, "classic"), (new, "consumer"))
    }
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        for c in members.values():
            c.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        while not all(c.assignment() for c in members.values()):
            assert time.monotonic() < deadline, "both groups get their assignment"
            for c in members.values():
                c.poll(0.1)

        def listed(*types: ConsumerGroupType) -> set[str]:
            result = admin.list_consumer_groups(types=set(types)).result(timeout=30)
            return {g.group_id for g in result.valid}

        assert {old, new} <= listed()
        assert new in listed(ConsumerGroupType.CONSUMER) and old not in listed(ConsumerGroupType.CONSUMER)
        assert old in listed(ConsumerGroupType.CLASSIC) and new not in listed(ConsumerGroupType.CLASSIC)
        described = {g: f.result(timeout=30) for g, f in admin.describe_consumer_groups([old, new]).items()}
        assert described[new].type == ConsumerGroupType.CONSUMER
        assert described[old].type == ConsumerGroupType.CLASSIC  # through DescribeGroups
        for d in described.values():
            assert sorted(tp.partition for tp in d.members[0].assignment.topic_partitions) == list(
                range(PARTITIONS)
            )
        members[new].commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        refused = admin.delete_consumer_groups([new])[new]
        with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
            refused.result(timeout=30)
    finally:
        for c in members.values():
            c.close()
    admin.delete_consumer_groups([new])[new].result(timeout=30)  # empty now: its offsets go
    assert committed(bootstrap, topic, new)[0] < 0


class SteadyProducer:
    """Produces one record to the next partition at each `poll()` until `stop()`: records keep
    arriving while the members restart."""

    name = "producer"

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.produced = [PER_PARTITION] * PARTITIONS  # new_topic's records come first
        self.running = True
        self.turn = 0

    def poll(self) -> None:
        if self.running:
            part = self.turn % PARTITIONS
            self.turn += 1
            self.producer.produce(self.topic, value=f"{part}-{self.produced[part]}".encode(), partition=part)
            self.produced[part] += 1
        self.producer.poll(0)

    def stop(self) -> None:
        self.running = False
        assert self.producer.flush(120) == 0

    def close(self) -> None:
        self.producer.flush(30)


def group_type(bootstrap: str, group: str) -> tuple[Any, set[str]]:
    """The group's type as librdkafka's admin sees it (ConsumerGroupDescribe first), and the
    groups ListGroups shows with the type filter "consumer"."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: the futures need the handle
    described = admin.describe_consumer_groups([group])[group].result(timeout=30)
    listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(timeout=30)
    return described.type, {g.group_id for g in listed.valid}


def test_online_upgrade_of_a_running_classic_group(bootstrap: str, java_client: JavaClient) -> None:
    """Kafka 4's online upgrade: a classic group of three members (two librdkafka, one Java
    4.3), a producer running throughout; the members restart one by one with
    group.protocol=consumer (librdkafka, Java, librdkafka). The first restart converts the group; the classic members
    left keep their protocol, served by the consumer group, and give partitions up before
    anyone else gets them (the ledger checks it as the callbacks run). Every record is
    consumed once, every commit lands (none refused, none repeated: each record is consumed
    by one member and committed by it), and the group ends of type consumer."""
    topic, group = new_topic(bootstrap), f"g-{uuid.uuid4().hex[:8]}"
    ledger = Ledger()
    producer = SteadyProducer(bootstrap, topic)
    classic: list[Member] = [
        RdMember(ledger, "classic0", bootstrap, topic, group, protocol="classic"),
        JvMember(ledger, "classic1", java_client, bootstrap, topic, group, protocol="classic"),
        RdMember(ledger, "classic2", bootstrap, topic, group, protocol="classic"),
    ]
    running: list[Any] = [producer, *classic]
    try:
        poll_until(running, lambda: balanced(ledger, classic), "the classic group balanced")
        assert group_type(bootstrap, group)[0] == ConsumerGroupType.CLASSIC
        replacements: list[Callable[[], Member]] = [
            lambda: RdMember(ledger, "new0", bootstrap, topic, group),
            lambda: JvMember(ledger, "new1", java_client, bootstrap, topic, group),
            lambda: RdMember(ledger, "new2", bootstrap, topic, group),
        ]
        members: list[Member] = list(classic)
        for i, start in enumerate(replacements):
            old = members[i]
            old.close()
            ledger.revoked(old.name, list(ledger.held_by(old.name)))
            members[i] = start()
            running = [producer, *members]
            target = len(ledger.consumed) + PARTITIONS
            poll_until(
                running,
                lambda t=target: balanced(ledger, members) and len(ledger.consumed) > t,
                f"restart {i}: the group balanced again over the restarted member",
            )
            kind, consumer_groups = group_type(bootstrap, group)
            assert kind == ConsumerGroupType.CONSUMER and group in consumer_groups, (i, kind)
        producer.stop()
        total = sum(producer.produced)
        poll_until(running, lambda: len(ledger.consumed) == total, f"all {total} records")
    finally:
        for m in running:
            m.close()
    for p in range(PARTITIONS):
        offsets = sorted(o for (q, o) in ledger.consumed if q == p)
        assert offsets == list(range(producer.produced[p])), f"partition {p}: lost or repeated records"
    assert committed(bootstrap, topic, group) == producer.produced
    assert {ledger.consumed[k] for k in ledger.consumed} >= {"classic1", "classic2", "new0", "new1", "new2"}


def test_online_downgrade_back_to_classic(bootstrap: str) -> None:
    """The rollback: a consumer-protocol group of two librdkafka members restarted one by one
    with group.protocol=classic. The first one back joins the consumer group as a classic
    member; when the last consumer-protocol member leaves the group is classic again and
    rebalances. Every record consumed once, every commit landing."""
    topic, group = new_topic(bootstrap), f"g-{uuid.uuid4().hex[:8]}"
    ledger = Ledger()
    producer = SteadyProducer(bootstrap, topic)
    members: list[Member] = [RdMember(ledger, f"new{i}", bootstrap, topic, group) for i in range(2)]
    running: list[Any] = [producer, *members]
    try:
        poll_until(running, lambda: balanced(ledger, members), "the consumer group balanced")
        for i in range(2):
            old = members[i]
            old.close()
            ledger.revoked(old.name, list(ledger.held_by(old.name)))
            members[i] = RdMember(ledger, f"classic{i}", bootstrap, topic, group, protocol="classic")
            running = [producer, *members]
            target = len(ledger.consumed) + PARTITIONS
            poll_until(
                running,
                lambda t=target: balanced(ledger, members) and len(ledger.consumed) > t,
                f"restart {i}: balanced again",
            )
            expected = ConsumerGroupType.CONSUMER if i == 0 else ConsumerGroupType.CLASSIC
            assert group_type(bootstrap, group)[0] == expected, i
        producer.stop()
        total = sum(producer.produced)
        poll_until(running, lambda: len(ledger.consumed) == total, f"all {total} records")
    finally:
        for m in running:
            m.close()
    for p in range(PARTITIONS):
        offsets = sorted(o for (q, o) in ledger.consumed if q == p)
        assert offsets == list(range(producer.produced[p])), f"partition {p}: lost or repeated records"
    assert committed(bootstrap, topic, group) == producer.produced


def test_regex_subscription_follows_new_topics(bootstrap: str) -> None:
    """librdkafka's `^` subscriptions go to the coordinator as SubscribedTopicRegex (v1)."""
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(f"{prefix}-a", 2, 1)])[f"{prefix}-a"].result(timeout=60)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{prefix}", "group.protocol": "consumer"})
    try:
        c.subscribe([f"^{prefix}-.*"])

        def topics() -> set[tuple[str, int]]:
            return {(tp.topic, tp.partition) for tp in c.assignment()}

        deadline = time.monotonic() + WAIT_S
        while topics() != {(f"{prefix}-a", 0), (f"{prefix}-a", 1)}:
            assert time.monotonic() < deadline, topics()
            c.poll(0.1)
        admin.create_topics([NewTopic(f"{prefix}-b", 1, 1)])[f"{prefix}-b"].result(timeout=60)
        while (f"{prefix}-b", 0) not in topics():  # within the topic cache's TTL
            assert time.monotonic() < deadline, topics()
            c.poll(0.1)
    finally:
        c.close()
