"""`skiff topics` and `skiff groups` as real processes against `skiff metadata` (PostgreSQL)
with a running agent (moto S3) and real confluent-kafka clients: what the commands print
agrees with what the clients did (offsets, members, lag), and reset/delete follow Kafka's
rule (refused while the group has active members, done after)."""

from __future__ import annotations

import json
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.e2e.test_graceful_shutdown import Agent, spawn_agent, wait_until
from tests.support.agents import REPO, SkiffProcess, skiff_command
from tests.support.s3servers import S3Bucket


@dataclass
class Env:
    metadata_url: str
    agent: Agent

    @property
    def bootstrap(self) -> str:
        return self.agent.proc.bootstrap

    def skiff(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*skiff_command(), *args, "--metadata", self.metadata_url],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=str(REPO),
        )

    def ok(self, *args: str) -> str:
        r = self.skiff(*args)
        assert r.returncode == 0, f"skiff {' '.join(args)}: {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "--json"))


@pytest.fixture
def env(spawn_skiff: Callable[..., SkiffProcess], moto_s3: S3Bucket, pg_url: str) -> Env:
    md = spawn_skiff("metadata", "--db", pg_url, "--port", "{port}")
    url = f"http://127.0.0.1:{md.port}"
    return Env(url, spawn_agent(spawn_skiff, moto_s3, url, "ops-a"))


def produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for part, n in per_partition.items():
        for i in range(n):
            p.produce(topic, key=f"{part}-{i}".encode(), value=b"v", partition=part)
    assert p.flush(60) == 0


def test_topics_create_list_describe_alter_delete(env: Env) -> None:
    topic = f"ops-{uuid.uuid4().hex[:6]}"
    assert env.ok(
        "topics", "create", topic, "--partitions", "3", "--config", "cleanup.policy=compact"
    ).strip() == (f"Created topic {topic}.")
    again = env.skiff("topics", "create", topic, "--partitions", "3")
    assert again.returncode == 1 and "already exists" in again.stderr.lower(), again.stderr
    listed = {t["topic"]: t for t in env.json("topics", "list")}
    assert listed[topic]["partition_count"] == 3
    assert topic in env.ok("topics", "list")

    produce(env.bootstrap, topic, {0: 7, 2: 3})
    (d,) = env.json("topics", "describe", topic)
    assert d["configs"] == {"cleanup.policy": "compact"}
    assert [(p["partition"], p["log_start_offset"], p["log_end_offset"]) for p in d["partitions"]] == [
        (0, 0, 7),
        (1, 0, 0),
        (2, 0, 3),
    ]
    # the leader is shown by the agent's name, beside the broker id clients are told (Metadata)
    md = AdminClient({"bootstrap.servers": env.bootstrap}).list_topics(topic, timeout=10)
    assert [p["leader_node_id"] for p in d["partitions"]] == [
        md.topics[topic].partitions[i].leader for i in range(3)
    ]
    assert [p["leader"] for p in d["partitions"]] == ["ops-a"] * 3
    text = env.ok("topics", "describe", topic)
    assert (
        f"Topic: {topic}" in text
        and "PartitionCount: 3" in text
        and "Configs: cleanup.policy=compact" in text
    )
    assert "LOG-END-OFFSET" in text

    env.ok(
        "topics",
        "alter",
        topic,
        "--config",
        "retention.ms=3600000",
        "--delete-config",
        "cleanup.policy",
        "--partitions",
        "5",
    )
    (d,) = env.json("topics", "describe", topic)
    assert d["partition_count"] == 5 and d["configs"] == {"retention.ms": "3600000"}
    # what a Kafka client sees agrees
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = AdminClient({"bootstrap.servers": env.bootstrap})
    configs = admin.describe_configs([res])[res].result(timeout=30)
    assert configs["retention.ms"].value == "3600000" and configs["cleanup.policy"].value == "delete"
    bad = env.skiff("topics", "alter", topic, "--partitions", "2")
    assert bad.returncode == 1 and bad.stderr.startswith("skiff topics:"), bad.stderr
    bad_config = env.skiff("topics", "create", f"{topic}-x", "--partitions", "1", "--config", "nonsense")
    assert bad_config.returncode == 1 and "key=value" in bad_config.stderr

    assert env.ok("topics", "delete", topic).strip() == f"Deleted topic {topic}."
    assert topic not in {t["topic"] for t in env.json("topics", "list")}
    missing = env.skiff("topics", "describe", topic)
    assert missing.returncode == 1 and "not found" in missing.stderr


class GroupMember(threading.Thread):
    """A confluent-kafka group member that polls (keeping its membership) until stopped."""

    def __init__(self, bootstrap: str, group: str, topic: str, client_id: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": client_id,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self.topic = topic
        self.consumed = 0
        self.committed = threading.Event()
        self.stop = threading.Event()
        self.limit = 0
        self.offsets: dict[int, int] = {}  # what the member's commit stored (from this thread only)

    def run(self) -> None:
        self.consumer.subscribe([self.topic])
        try:
            while not self.stop.is_set():
                m = self.consumer.poll(0.2)
                if m is not None and not m.error() and self.consumed < self.limit:
                    self.consumed += 1
                    if self.consumed == self.limit:
                        done = self.consumer.commit(asynchronous=False) or []
                        self.offsets = {tp.partition: tp.offset for tp in done}
                        self.committed.set()
        finally:
            self.consumer.close()  # leaves the group

    def finish(self) -> None:
        self.stop.set()
        self.join(60)


@pytest.fixture
def member_factory() -> Iterator[Callable[..., GroupMember]]:
    started: list[GroupMember] = []

    def start(*args: str) -> GroupMember:
        m = GroupMember(*args)
        started.append(m)
        return m

    yield start
    for m in started:
        m.finish()


def test_groups_describe_reset_and_delete_follow_the_clients(
    env: Env, member_factory: Callable[..., GroupMember]
) -> None:
    topic = f"gops-{uuid.uuid4().hex[:6]}"
    group = f"gops-{uuid.uuid4().hex[:6]}"
    env.ok("topics", "create", topic, "--partitions", "2")
    produce(env.bootstrap, topic, {0: 10, 1: 6})
    member = member_factory(env.bootstrap, group, topic, "ops-client")
    member.limit = 12  # commits after 12 of 16: some lag remains
    member.start()
    assert member.committed.wait(60), "the member did not consume and commit"
    committed = member.offsets
    assert sum(committed.values()) == 12 and set(committed) == {0, 1}

    wait_until(lambda: env.json("groups", "describe", group)["state"] == "Stable", "the group to be Stable")
    d = env.json("groups", "describe", group)
    (m,) = d["members"]
    assert m["client_id"] == "ops-client" and m["host"]
    assert sorted((a["topic"], a["partition"]) for a in m["assignment"]) == [(topic, 0), (topic, 1)]
    rows = {r["partition"]: r for r in d["partitions"]}
    for p, end in ((0, 10), (1, 6)):
        r = rows[p]
        assert (r["current_offset"], r["log_end_offset"], r["lag"]) == (committed[p], end, end - committed[p])
        assert (r["consumer_id"], r["client_id"]) == (m["consumer_id"], "ops-client")
    assert {g["group"]: g["state"] for g in env.json("groups", "list")}[group] == "Stable"
    table = env.ok("groups", "describe", group)
    header = next(line for line in table.splitlines() if "CURRENT-OFFSET" in line).split()
    assert header == [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]

    # Kafka's rule: no reset and no delete while the group has active members
    refused = env.skiff("groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute")
    assert refused.returncode == 1
    assert f"Assignments can only be reset if the group '{group}' is inactive" in refused.stderr
    refused_delete = env.skiff("groups", "delete", group)
    assert refused_delete.returncode == 1 and "NonEmptyGroupException" in refused_delete.stderr

    member.finish()  # leaves the group
    wait_until(lambda: env.json("groups", "describe", group)["state"] == "Empty", "the group to be Empty")
    plan = env.json("groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--dry-run")
    assert not plan["executed"] and [r["new_offset"] for r in plan["offsets"]] == [0, 0]
    rows = {r["partition"]: r for r in env.json("groups", "describe", group)["partitions"]}
    assert {p: r["current_offset"] for p, r in rows.items()} == committed, "a dry run changed offsets"

    env.ok("groups", "reset-offsets", group, "--topic", f"{topic}:0", "--to-offset", "4", "--execute")
    env.ok("groups", "reset-offsets", group, "--topic", f"{topic}:1", "--to-offset", "99", "--execute")
    rows = {r["partition"]: r for r in env.json("groups", "describe", group)["partitions"]}
    assert (rows[0]["current_offset"], rows[0]["lag"]) == (4, 6)
    assert (rows[1]["current_offset"], rows[1]["lag"]) == (6, 0)  # clamped to the log end, as Kafka
    env.ok(
        "groups", "reset-offsets", group, "--all-topics", "--to-datetime", "2000-01-01T00:00:00Z", "--execute"
    )
    rows = {r["partition"]: r for r in env.json("groups", "describe", group)["partitions"]}
    assert {p: r["current_offset"] for p, r in rows.items()} == {0: 0, 1: 0}
    env.ok("groups", "reset-offsets", group, "--topic", topic, "--to-latest", "--execute")

    # a new member starts where the reset put the group: at the log end, so it reads only new records
    produce(env.bootstrap, topic, {0: 1})
    again = member_factory(env.bootstrap, group, topic, "ops-client-2")
    again.limit = 1
    again.start()
    assert again.committed.wait(60)
    assert again.offsets.get(0) == 11
    again.finish()

    wait_until(
        lambda: env.json("groups", "describe", group)["state"] == "Empty", "the group to be Empty again"
    )
    assert env.ok("groups", "delete", group).strip() == (
        f"Deletion of requested consumer groups ('{group}') was successful."
    )
    assert group not in {g["group"] for g in env.json("groups", "list")}
    gone = env.skiff("groups", "describe", group)
    assert gone.returncode == 1 and "does not exist" in gone.stderr
