"""Exactly-once consume-transform-produce with Apache Kafka's Java client (kafka-clients 4.3)
against `skiff playground`.

The Java program's `txn-transform` subcommand (tests/java/SkiffJavaClient.java) is the loop
the Kafka documentation describes: a read_committed consumer in a group, a transactional
producer, one transaction per poll holding the transformed records (value "T-" + input value,
same key, headers naming the source partition and offset) and the consumed offsets
(`sendOffsetsToTransaction(offsets, consumer.groupMetadata())`), then commit, or abort
every Nth round (the consumer then seeks back and processes those records again).

Checked: a read_committed consumer (confluent-kafka, to the end of every partition, and the
Java client) sees every input record transformed exactly once; the aborted rounds' records
are in the log (read_uncommitted sees them) but invisible to read_committed; the group's
committed offsets are the input's end offsets, as the last committed round reported; a
second instance with the same transactional.id fences the first (ProducerFencedException
at its commit) and finishes the work, and the zombie's open transaction stays invisible.

Synchronisation is on the program's JSON progress lines ("ready", "paused", "round"), never
on a clock; deadlines only bound a failing test.
"""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.java_client import JavaClient
from tests.support.txn_clients import read_to_end as read_to_end_messages

pytestmark = pytest.mark.slow

PARTITIONS = 3
DEADLINE_S = 90.0


def _topics(bootstrap: str, *prefixes: str) -> list[str]:
    names = [f"{p}-{uuid.uuid4().hex[:8]}" for p in prefixes]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names]).values():
        fut.result(timeout=30)
    return names


def read_to_end(
    bootstrap: str, topic: str, isolation: str, partitions: int = PARTITIONS
) -> list[tuple[str, str, tuple[int, int]]]:
    """Every (key, value, (src-partition, src-offset)) from offset 0 to the end of each
    partition (the last stable offset for read_committed)."""
    messages, _ends = read_to_end_messages(bootstrap, topic, isolation, partitions, DEADLINE_S)
    out: list[tuple[str, str, tuple[int, int]]] = []
    for m in messages:
        hs = {k: (v or b"").decode() for k, v in (m.headers() or [])}
        src = (int(hs["src-partition"]), int(hs["src-offset"]))
        out.append((m.key().decode(), m.value().decode(), src))
    return out


def end_offsets(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}"})
    try:
        return {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)
        }
    finally:
        c.close()


def _input_records(
    java_client: JavaClient, bootstrap: str, topic: str, count: int
) -> dict[tuple[int, int], str]:
    """Produce `count` keyed records (key "in-i", value "v-i", partition i % 3); {(p, o): key}."""
    produced = java_client.produce(bootstrap, topic, partitions=PARTITIONS, count=count, key_prefix="in")
    acks = produced.of_type("ack")
    assert len(acks) == count and all("error" not in a for a in acks)
    return {(a["partition"], a["offset"]): a["key"] for a in acks}


def _expected(inputs: dict[tuple[int, int], str]) -> list[tuple[str, str, tuple[int, int]]]:
    return sorted((key, f"T-v-{key.removeprefix('in-')}", src) for src, key in inputs.items())


def _group_offsets(java_client: JavaClient, bootstrap: str, group: str, topic: str) -> dict[int, int]:
    got = java_client.admin(bootstrap, "group-offsets", group)
    return {o["partition"]: o["offset"] for o in got["offsets"] if o["topic"] == topic}


def test_transform_commits_and_aborts_exactly_once(java_client: JavaClient, playground: str) -> None:
    src, dst = _topics(playground, "eos-in", "eos-out")
    inputs = _input_records(java_client, playground, src, 120)
    group = f"eos-{uuid.uuid4().hex[:8]}"
    args = java_client.txn_transform_args(
        playground,
        input_topic=src,
        output_topic=dst,
        group=group,
        transactional_id=f"tx-{uuid.uuid4()}",
        abort_every=3,
        max_records=len(inputs),
        batch=20,
    )
    result = java_client.run_checked(*args, timeout_s=180)
    rounds = result.of_type("round")
    summary = result.one("summary")
    committed = [r for r in rounds if r["outcome"] == "committed"]
    aborted = [r for r in rounds if r["outcome"] == "aborted"]
    assert summary["committed_total"] == len(inputs) == sum(r["count"] for r in committed)
    assert aborted and summary["aborted_rounds"] == len(aborted)
    assert [r["round"] for r in aborted] == [r["round"] for r in rounds if r["round"] % 3 == 0]
    # every input key was committed once; an aborted round's keys were processed again later
    assert Counter(k for r in committed for k in r["keys"]) == Counter(inputs.values())

    visible = read_to_end(playground, dst, "read_committed")
    assert sorted(visible) == _expected(inputs)
    everything = read_to_end(playground, dst, "read_uncommitted")
    # the aborted rounds' writes are in the log
    assert len(everything) == len(inputs) + sum(r["count"] for r in aborted)
    # The Java client's read_committed consumer agrees (it stops at `expect`, so compare sets).
    seen = java_client.consume(
        playground, dst, expect=len(inputs), props={"isolation.level": "read_committed"}
    ).of_type("record")
    assert sorted((r["key"], r["value"]) for r in seen) == [(k, v) for k, v, _ in _expected(inputs)]

    # The group's offsets are the input's ends, which the last committed round reported.
    ends = end_offsets(playground, src)
    assert _group_offsets(java_client, playground, group, src) == ends
    last: dict[int, int] = {}
    for r in committed:
        last.update({int(p): o for p, o in r["offsets"].items()})
    assert last == ends


def test_a_second_instance_fences_the_first(java_client: JavaClient, playground: str) -> None:
    src, dst = _topics(playground, "fence-in", "fence-out")
    inputs = _input_records(java_client, playground, src, 60)
    group = f"fence-{uuid.uuid4().hex[:8]}"
    txn_id = f"tx-{uuid.uuid4()}"

    def args(*, max_records: int, pause_before_commit: int | None = None) -> list[object]:
        return java_client.txn_transform_args(
            playground,
            input_topic=src,
            output_topic=dst,
            group=group,
            transactional_id=txn_id,
            batch=10,
            max_records=max_records,
            pause_before_commit=pause_before_commit,
        )

    zombie = java_client.start(*args(max_records=len(inputs), pause_before_commit=2))
    successor = None
    try:
        first = zombie.wait_for("round", round=1)
        assert first["outcome"] == "committed"
        paused = zombie.wait_for("paused", round=2)  # round 2's records and offsets are sent, not committed
        successor = java_client.start(*args(max_records=len(inputs) - first["count"]))
        successor.wait_for("ready")  # its InitProducerId bumped the epoch and aborted round 2
        zombie.send("go")
        fenced = zombie.wait_for("fenced", round=2)
        assert fenced["cause"] == "org.apache.kafka.common.errors.ProducerFencedException", fenced
        assert zombie.finish() == 1
        err = zombie.error()
        assert err is not None and err["class"] == fenced["cause"], err
        # The successor starts from round 1's committed offsets and does the rest.
        assert successor.finish(timeout_s=180) == 0, successor.stderr_tail()
        (summary,) = successor.of_type("summary")
        assert summary["committed_total"] == len(inputs) - first["count"]
    finally:
        zombie.close()
        if successor is not None:
            successor.close()

    assert sorted(read_to_end(playground, dst, "read_committed")) == _expected(inputs)
    everything = read_to_end(playground, dst, "read_uncommitted")
    assert len(everything) == len(inputs) + paused["count"]  # the zombie's round 2 is in the log, aborted
    assert _group_offsets(java_client, playground, group, src) == end_offsets(playground, src)
