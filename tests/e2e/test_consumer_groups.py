"""Consumer groups end to end: real clients against `skiff playground` over TCP.

The classic group protocol (FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup) and durable offsets (OffsetCommit, OffsetFetch) with confluent-kafka
(librdkafka), kafka-python, aiokafka and the Java client: partitions are split among the
members of a group and move when one leaves; committed offsets survive the consumers
that wrote them; `auto.offset.reset` applies when there is no commit.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32

from tests.support.agents import SkiffProcess
from tests.support.java_client import JavaClient
from tests.support.kafka_wire import send_request
from tests.support.s3servers import S3Bucket

PARTITIONS = 4


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)


def produce(bootstrap: str, topic: str, per_partition: int, tag: str = "m") -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for part in range(PARTITIONS):
        for i in range(per_partition):
            p.produce(topic, value=f"{tag}-{part}-{i}".encode(), partition=part)
    assert p.flush(30) == 0


def consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 500,
    }
    conf.update(extra)
    return Consumer(conf)


def poll_until(consumers: list[Consumer], done: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        for c in consumers:
            m = c.poll(0.1)
            err = None if m is None else m.error()
            assert err is None or err.code() == KafkaError._PARTITION_EOF, err


def consume(c: Consumer, expected: int, timeout_s: float = 60) -> list[tuple[int, int, bytes]]:
    got: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expected:
        assert time.monotonic() < deadline, f"got {len(got)} of {expected}"
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        partition, offset, value = m.partition(), m.offset(), m.value()
        assert partition is not None and offset is not None and value is not None
        got.append((partition, offset, value))
    return got


def test_confluent_group_splits_partitions_and_rebalances_on_leave(playground: str) -> None:
    topic, group = _name("grp"), _name("g")
    create_topic(playground, topic)
    a, b = consumer(playground, group), consumer(playground, group)
    try:
        a.subscribe([topic])
        b.subscribe([topic])
        poll_until([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2)
        parts = {tp.partition for tp in a.assignment()} | {tp.partition for tp in b.assignment()}
        assert parts == set(range(PARTITIONS))
        b.close()
        poll_until([a], lambda: len(a.assignment()) == PARTITIONS)
    finally:
        a.close()


def test_confluent_commits_survive_and_new_consumer_resumes(playground: str) -> None:
    topic, group = _name("commit"), _name("g")
    create_topic(playground, topic)
    produce(playground, topic, 5, "old")
    c = consumer(playground, group)
    c.subscribe([topic])
    first = consume(c, 5 * PARTITIONS)
    assert {v for _, _, v in first} == {f"old-{p}-{i}".encode() for p in range(PARTITIONS) for i in range(5)}
    c.commit(asynchronous=False)
    committed = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    assert [tp.offset for tp in committed] == [5] * PARTITIONS
    c.close()

    produce(playground, topic, 3, "new")
    c2 = consumer(playground, group)
    c2.subscribe([topic])
    try:
        second = consume(c2, 3 * PARTITIONS)
        assert {v for _, _, v in second} == {
            f"new-{p}-{i}".encode() for p in range(PARTITIONS) for i in range(3)
        }
        assert all(off >= 5 for _, off, _ in second)
    finally:
        c2.close()


def test_confluent_offset_reset_latest_skips_history(playground: str) -> None:
    topic, group = _name("latest"), _name("g")
    create_topic(playground, topic)
    produce(playground, topic, 4, "old")
    c = consumer(playground, group, **{"auto.offset.reset": "latest"})
    c.subscribe([topic])
    try:
        poll_until([c], lambda: len(c.assignment()) == PARTITIONS)
        # The reset to "latest" (a ListOffsets) follows the assignment: give it time; nothing old arrives.
        settle = time.monotonic() + 3
        while time.monotonic() < settle:
            m = c.poll(0.1)
            assert m is None or m.error(), f"unexpected old record at offset {m.offset()}"
        produce(playground, topic, 2, "new")
        got = consume(c, 2 * PARTITIONS)
        assert {v for _, _, v in got} == {
            f"new-{p}-{i}".encode() for p in range(PARTITIONS) for i in range(2)
        }
    finally:
        c.close()


def test_kafka_python_group_commit_and_resume(playground: str) -> None:
    from kafka import KafkaConsumer

    topic, group = _name("kp"), _name("g")
    create_topic(playground, topic)
    produce(playground, topic, 5, "old")

    def run(expected: int) -> list[bytes]:
        kc = KafkaConsumer(
            topic,
            bootstrap_servers=playground,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=20_000,
        )
        got: list[bytes] = []
        try:
            for m in kc:
                got.append(m.value)
                if len(got) == expected:
                    break
            kc.commit()
        finally:
            kc.close()
        return got

    assert len(run(5 * PARTITIONS)) == 5 * PARTITIONS
    produce(playground, topic, 2, "new")
    assert sorted(run(2 * PARTITIONS)) == sorted(
        f"new-{p}-{i}".encode() for p in range(PARTITIONS) for i in range(2)
    )


def test_aiokafka_group_commit_and_resume(playground: str) -> None:
    from aiokafka import AIOKafkaConsumer

    topic, group = _name("aio"), _name("g")
    create_topic(playground, topic)
    produce(playground, topic, 5, "old")

    async def run(expected: int) -> list[bytes]:
        c = AIOKafkaConsumer(
            topic,
            bootstrap_servers=playground,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await c.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(60):
                async for m in c:
                    got.append(m.value)
                    if len(got) == expected:
                        break
            await c.commit()
        finally:
            await c.stop()
        return got

    assert len(asyncio.run(run(5 * PARTITIONS))) == 5 * PARTITIONS
    produce(playground, topic, 2, "new")
    assert sorted(asyncio.run(run(2 * PARTITIONS))) == sorted(
        f"new-{p}-{i}".encode() for p in range(PARTITIONS) for i in range(2)
    )


def test_java_group_consume_commit_and_admin_views(playground: str, java_client: JavaClient) -> None:
    topic, group = _name("java"), _name("g")
    create_topic(playground, topic)
    produce(playground, topic, 5, "old")
    first = java_client.consume(playground, topic, expect=5 * PARTITIONS, group=group, commit=True)
    assert len(first.of_type("record")) == 5 * PARTITIONS

    offsets = java_client.admin(playground, "group-offsets", group)
    assert [(o["topic"], o["partition"], o["offset"]) for o in offsets["offsets"]] == [
        (topic, p, 5) for p in range(PARTITIONS)
    ]
    assert group in java_client.admin(playground, "list-groups")["groups"]

    produce(playground, topic, 2, "new")
    second = java_client.consume(
        playground, topic, expect=2 * PARTITIONS, group=group, commit=True, from_committed=True
    )
    records = second.of_type("record")
    assert len(records) == 2 * PARTITIONS
    assert all(r["offset"] >= 5 for r in records)


def test_confluent_admin_list_describe_delete_groups(playground: str) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions

    topic, group = _name("adm"), _name("g")
    create_topic(playground, topic)
    produce(playground, topic, 2, "m")
    admin = AdminClient({"bootstrap.servers": playground})
    c = consumer(playground, group)
    c.subscribe([topic])
    try:
        consume(c, 2 * PARTITIONS)
        c.commit(asynchronous=False)
        desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
        assert str(desc.state).endswith("STABLE") and len(desc.members) == 1
        assert len(desc.members[0].assignment.topic_partitions) == PARTITIONS
        with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
            admin.delete_consumer_groups([group])[group].result(timeout=30)
    finally:
        c.close()

    listed = admin.list_consumer_groups().result(timeout=30)
    assert group in {g.group_id for g in listed.valid}
    assert str(admin.describe_consumer_groups([group])[group].result(timeout=30).state).endswith("EMPTY")

    # OffsetDelete of one partition, then DeleteGroups of the rest
    # (confluent-kafka's Python admin has no OffsetDelete: send it on the wire)
    resp = send_request(
        playground,
        OffsetDeleteRequest(
            group_id=GroupId(group),
            topics=(
                OffsetDeleteRequestTopic(
                    name=TopicName(topic), partitions=(OffsetDeleteRequestPartition(partition_index=i32(0)),)
                ),
            ),
        ),
    ).parse()
    assert resp.error_code == ErrorCode.none and resp.topics[0].partitions[0].error_code == ErrorCode.none
    left = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=30)
    assert sorted(tp.partition for tp in left.topic_partitions) == [1, 2, 3]
    admin.delete_consumer_groups([group])[group].result(timeout=30)
    gone = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=30)
    assert gone.topic_partitions == []


def test_two_agents_agree_on_coordinators_and_refuse_others_groups(
    spawn_skiff: Callable[..., SkiffProcess], moto_s3: S3Bucket, pg_url: str
) -> None:
    from tests.e2e.test_cluster import start_cluster, wait_for_brokers

    cluster = start_cluster(spawn_skiff, moto_s3, pg_url)
    a, b = cluster.agents
    wait_for_brokers(a.bootstrap, 2)
    wait_for_brokers(b.bootstrap, 2)
    groups = [f"g{i}" for i in range(12)]

    def coordinators(bootstrap: str) -> dict[str, int]:
        resp = send_request(
            bootstrap, FindCoordinatorRequest(key_type=i8(0), coordinator_keys=tuple(groups))
        ).parse()
        assert all(c.error_code == ErrorCode.none for c in resp.coordinators)
        return {c.key: int(c.port) for c in resp.coordinators}

    seen = coordinators(a.bootstrap)
    assert seen == coordinators(b.bootstrap)
    assert set(seen.values()) == {a.port, b.port}  # 12 groups over 2 agents: both get some
    for g, port in seen.items():
        other = b if port == a.port else a
        owner = a if port == a.port else b
        hb = HeartbeatRequest(
            group_id=GroupId(g), generation_id=i32(1), member_id="m", group_instance_id=None
        )
        assert send_request(other.bootstrap, hb).parse().error_code == ErrorCode.not_coordinator
        assert send_request(owner.bootstrap, hb).parse().error_code == ErrorCode.unknown_member_id

    # a group whose consumers bootstrap on different agents; offsets go through metadata's HTTP API
    topic, group = _name("cl"), _name("g")
    create_topic(a.bootstrap, topic)
    produce(a.bootstrap, topic, 3, "m")
    c1, c2 = consumer(a.bootstrap, group), consumer(b.bootstrap, group)
    try:
        c1.subscribe([topic])
        c2.subscribe([topic])
        poll_until([c1, c2], lambda: len(c1.assignment()) == 2 and len(c2.assignment()) == 2)
    finally:
        c1.close()
        c2.close()
    c3 = consumer(b.bootstrap, group)
    c3.subscribe([topic])
    try:
        consume(c3, 3 * PARTITIONS)
        c3.commit(asynchronous=False)
    finally:
        c3.close()
    c4 = consumer(a.bootstrap, group)
    committed = c4.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    c4.close()
    assert [tp.offset for tp in committed] == [3] * PARTITIONS


def test_confluent_static_member_restart_keeps_assignment_without_rebalance(playground: str) -> None:
    topic, group = _name("static"), _name("g")
    create_topic(playground, topic)
    assigns: list[int] = []

    def on_assign(_c: Consumer, parts: list[TopicPartition]) -> None:
        assigns.append(len(parts))

    c1 = consumer(playground, group, **{"group.instance.id": "one", "session.timeout.ms": 30_000})
    c2 = consumer(playground, group, **{"group.instance.id": "two", "session.timeout.ms": 30_000})
    c1.subscribe([topic], on_assign=on_assign)
    c2.subscribe([topic])
    try:
        poll_until([c1, c2], lambda: len(c1.assignment()) == 2 and len(c2.assignment()) == 2)
        before = {tp.partition for tp in c2.assignment()}
        rounds = len(assigns)
        c2.close()  # a static member does not leave the group on close
        c2 = consumer(playground, group, **{"group.instance.id": "two", "session.timeout.ms": 30_000})
        c2.subscribe([topic])
        poll_until([c1, c2], lambda: len(c2.assignment()) == 2)
        assert {tp.partition for tp in c2.assignment()} == before
        for _ in range(20):  # and c1 saw no rebalance
            c1.poll(0.1)
        assert len(assigns) == rounds and len(c1.assignment()) == 2
    finally:
        c1.close()
        c2.close()


def test_confluent_cooperative_sticky_moves_only_what_it_must(playground: str) -> None:
    """KIP-429 over the classic protocol: the coordinator carries the cooperative-sticky
    assignor's metadata (owned partitions) faithfully, so when a member joins, the
    incumbent gives up only the partitions that move and keeps consuming the others, and
    when it leaves, the survivor gets them back without losing what it owned."""
    topic, group = _name("coop"), _name("g")
    create_topic(playground, topic)
    produce(playground, topic, 10, "a")
    events: dict[str, list[tuple[str, set[int]]]] = {"a": [], "b": []}

    def cooperative(name: str) -> Consumer:
        c = consumer(playground, group, **{"partition.assignment.strategy": "cooperative-sticky"})

        def on_assign(cons: Consumer, parts: list[TopicPartition]) -> None:
            events[name].append(("assign", {tp.partition for tp in parts}))

        def on_revoke(cons: Consumer, parts: list[TopicPartition]) -> None:
            events[name].append(("revoke", {tp.partition for tp in parts}))

        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        return c

    a = cooperative("a")
    b: Consumer | None = None
    try:
        got = consume(a, 10 * PARTITIONS)
        assert len(a.assignment()) == PARTITIONS
        a.commit(asynchronous=False)
        assert len(got) == 10 * PARTITIONS
        events["a"].clear()

        b = cooperative("b")
        poll_until([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2)
        # a was asked to give up exactly the two partitions b now owns, nothing more
        revoked = set().union(*(p for kind, p in events["a"] if kind == "revoke"))
        assert revoked == {tp.partition for tp in b.assignment()}
        assert not {tp.partition for tp in a.assignment()} & revoked
        assert [kind for kind, p in events["a"] if p] == ["revoke"]  # no re-assign of what it kept

        produce(playground, topic, 5, "b")
        by_partition: dict[int, list[bytes]] = {}
        deadline = time.monotonic() + 60
        while sum(map(len, by_partition.values())) < 5 * PARTITIONS:
            assert time.monotonic() < deadline, by_partition
            for c in (a, b):
                m = c.poll(0.1)
                if m is not None and not m.error():
                    by_partition.setdefault(m.partition(), []).append(m.value())
        assert by_partition == {p: [f"b-{p}-{i}".encode() for i in range(5)] for p in range(PARTITIONS)}

        b.close()
        b = None
        events["a"].clear()
        poll_until([a], lambda: len(a.assignment()) == PARTITIONS)
        assert not any(kind == "revoke" and p for kind, p in events["a"])
    finally:
        if b is not None:
            b.close()
        a.close()


def test_java_cooperative_sticky_revokes_only_moved_partitions(
    playground: str, java_client: JavaClient
) -> None:
    """The Java client's CooperativeStickyAssignor through the coordinator: when a second
    member joins, the first is told to revoke only the partitions that move to it."""
    topic, group = _name("jcoop"), _name("g")
    create_topic(playground, topic)
    props = {
        "partition.assignment.strategy": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
        "session.timeout.ms": "10000",
        "heartbeat.interval.ms": "500",
    }
    events: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    members = {"a": java_client.group_member(playground, topic, group, props=props)}

    def poll_members(done: Callable[[], bool], timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, events
            for name, m in members.items():
                events[name].extend(m.call("poll 200")["events"])

    def owned(name: str) -> set[int]:
        return set(members[name].call("assignment")["partitions"])

    try:
        poll_members(lambda: len(owned("a")) == PARTITIONS)
        events["a"].clear()
        members["b"] = java_client.group_member(playground, topic, group, props=props)
        poll_members(lambda: len(owned("a")) == 2 and len(owned("b")) == 2)
        revoked = {p for e in events["a"] if e["type"] == "revoked" for p in e["partitions"]}
        assert revoked == owned("b"), events["a"]
        assert not any(e["type"] == "lost" for e in events["a"])
    finally:
        for m in members.values():
            m.close()
