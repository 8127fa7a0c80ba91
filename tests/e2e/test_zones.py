"""Zone-aware routing end to end: three agents in two zones (agent-0 and agent-1 in zone-a,
agent-2 in zone-b) as real processes over one S3 bucket (moto) and `skiff metadata` on
PostgreSQL, with real clients in each zone. The agents' own metrics
(`skiff_client_zone_bytes_total{direction,client_zone}`, agent.zones) count the bytes of every
Produce request received and every Fetch response sent, by the client's zone against the
agent's, so "stays in its zone" is measured, not inferred.

- Clients stating their zone in client.id (`az=`, `zone=`, `ws_az=`), bootstrapped on an agent
  of the OTHER zone: not one produce or fetch byte crosses zones, and both zones' agents serve.
- A consumer stating its zone only as `client.rack` (confluent-kafka, and the Java client):
  its first Metadata answer cannot know the zone, so it fetches from the other zone once;
  that agent answers with a preferred read replica in the client's zone (KIP-392) and no
  records (a few hundred bytes, counted as crossing), and every record byte is then served
  in zone.
- Zone B losing its agent: zone-B clients are routed to zone A (counted as cross-zone), and
  lose nothing.
- Consumer groups (agent.groups.placement): a group whose members are all in zone B is
  coordinated by zone B's agent (FindCoordinator's answers, counted by
  `skiff_find_coordinator_answers_total`, and every JoinGroup, SyncGroup, Heartbeat and
  OffsetCommit, counted by `skiff_requests_total{api}`, land there); a zone-A member joining
  it finds the same coordinator (one group, partitions split over all members); zone B
  losing its agent moves the group to zone A, where its members go on from their commits.
"""

from __future__ import annotations

import signal
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families
from skiff.agent import routing

from tests.e2e.test_clients_roundtrip import create_topic
from tests.e2e.test_cluster import wait_for_brokers
from tests.support.agents import SkiffProcess, agent_args
from tests.support.java_client import JavaClient
from tests.support.s3servers import S3Bucket

pytestmark = pytest.mark.slow

PARTITIONS = 12
RECORDS = 240  # per producer
VALUE_BYTES = 1000
ZONES = {"agent-0": "zone-a", "agent-1": "zone-a", "agent-2": "zone-b"}

Bytes = dict[tuple[str, str], float]  # (direction, client_zone) -> bytes


@dataclass
class ZonedAgent:
    process: SkiffProcess
    metrics_port: int
    zone: str

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap

    def zone_bytes(self) -> Bytes:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).read()
        out: Bytes = {}
        for family in text_string_to_metric_families(text.decode()):
            if family.name == "skiff_client_zone_bytes":
                for s in family.samples:
                    if s.name.endswith("_total"):
                        out[(s.labels["direction"], s.labels["client_zone"])] = s.value
        assert len(out) == 6, f"skiff_client_zone_bytes_total not served in full: {out}"
        return out


def _start(spawn_skiff: Callable[..., SkiffProcess], bucket: S3Bucket, pg_url: str) -> dict[str, ZonedAgent]:
    md = spawn_skiff("metadata", "--db", pg_url, "--port", "{port}")
    env = {
        **bucket.env,
        "SKIFF_HEARTBEAT_INTERVAL_MS": "500",
        "SKIFF_AGENT_TTL_MS": "3000",
        "SKIFF_TOPIC_CACHE_TTL_MS": "1000",
        "SKIFF_GROUP_LEASE_TTL_MS": "3000",
        "SKIFF_GROUP_LEASE_RENEW_INTERVAL_MS": "500",
    }
    agents = {}
    for agent_id, zone in ZONES.items():
        args = agent_args(
            bucket.url("data"), f"http://127.0.0.1:{md.port}", "--metrics-port", "{metrics_port}"
        )
        p = spawn_skiff(*args, "--agent-id", agent_id, "--zone", zone, env=env)
        assert p.metrics_port is not None
        agents[agent_id] = ZonedAgent(p, p.metrics_port, zone)
    for a in agents.values():
        wait_for_brokers(a.bootstrap, 3)
    return agents


def _produce(bootstrap: str, topic: str, client_id: str, tag: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "acks": "all"})
    errors: list[object] = []
    for i in range(RECORDS):
        p.produce(
            topic,
            key=f"{tag}-{i}".encode(),
            value=bytes([i % 251]) * VALUE_BYTES,
            partition=i % PARTITIONS,
            on_delivery=lambda err, _m: errors.append(err) if err else None,
        )
        p.poll(0)
    assert p.flush(120) == 0
    assert not errors, errors[:3]


def _consume(bootstrap: str, topic: str, expected: int, **conf: str) -> set[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 200,
            **conf,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    keys: set[bytes] = set()
    deadline = time.monotonic() + 90
    try:
        while len(keys) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            keys.add(m.key())
    finally:
        c.close()
    assert len(keys) == expected, f"consumed {len(keys)} of {expected}"
    return keys


def _family(agent: ZonedAgent, name: str, label: str) -> dict[str, float]:
    """The samples of one counter or gauge family by one label's value ("" when unlabelled)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{agent.metrics_port}/metrics", timeout=10).read()
    for family in text_string_to_metric_families(text.decode()):
        if family.name == name:
            return {
                s.labels.get(label, ""): s.value for s in family.samples if not s.name.endswith("_created")
            }
    return {}


def _totals(agents: dict[str, ZonedAgent]) -> dict[str, Bytes]:
    return {name: a.zone_bytes() for name, a in agents.items()}


def _delta(
    after: dict[str, Bytes], before: dict[str, Bytes], names: list[str], key: tuple[str, str]
) -> float:
    return sum(after[n][key] - before[n][key] for n in names)


def test_clients_stay_in_their_zone_and_move_when_it_loses_its_agents(
    spawn_skiff: Callable[..., SkiffProcess], moto_s3: S3Bucket, pg_url: str
) -> None:
    agents = _start(spawn_skiff, moto_s3, pg_url)
    a0, b = agents["agent-0"], agents["agent-2"]
    topic = f"zones-{uuid.uuid4().hex[:6]}"
    create_topic(a0.bootstrap, topic, partitions=PARTITIONS)
    payload = RECORDS * VALUE_BYTES

    # Clients stating their zone in client.id, each bootstrapped on the OTHER zone's agent.
    _produce(b.bootstrap, topic, "orders,az=zone-a", "a")
    _produce(a0.bootstrap, topic, "orders,ws_az=zone-b", "b")
    _consume(b.bootstrap, topic, 2 * RECORDS, **{"client.id": "reader,zone=zone-a"})
    _consume(a0.bootstrap, topic, 2 * RECORDS, **{"client.id": "reader,az=zone-b"})
    counts = _totals(agents)
    for name, c in counts.items():
        for direction in ("in", "out"):
            assert c[(direction, "other")] == 0, f"{name}: {direction} bytes crossed zones: {c}"
            assert c[(direction, "unknown")] == 0, f"{name}: {c}"
    zone_a = ["agent-0", "agent-1"]
    assert sum(counts[n][("in", "same")] for n in zone_a) >= payload  # zone A's producer
    assert counts["agent-2"][("in", "same")] >= payload  # zone B's
    assert sum(counts[n][("out", "same")] for n in zone_a) >= 2 * payload  # each consumer read all
    assert counts["agent-2"][("out", "same")] >= 2 * payload

    # client.rack only: redirected to its zone by the preferred read replica, records in zone.
    before = _totals(agents)
    _consume(a0.bootstrap, topic, 2 * RECORDS, **{"client.rack": "zone-b", "client.id": "rack-only"})
    after = _totals(agents)
    assert _delta(after, before, ["agent-2"], ("out", "same")) >= 2 * payload
    # its first Metadata answer (no zone yet) sent it out of zone: only the redirects crossed
    crossed = _delta(after, before, zone_a, ("out", "other"))
    assert 0 < crossed < 0.05 * payload, f"{crossed} fetch bytes crossed zones for a client.rack consumer"

    # Zone B loses its agent: its clients move to zone A and lose nothing.
    b.process.kill(signal.SIGTERM)
    wait_for_brokers(a0.bootstrap, 2)
    before = _totals({n: agents[n] for n in zone_a})
    _produce(a0.bootstrap, topic, "orders,az=zone-b", "b2")
    keys = _consume(a0.bootstrap, topic, 3 * RECORDS, **{"client.id": "reader,az=zone-b"})
    assert {f"b2-{i}".encode() for i in range(RECORDS)} <= keys
    after = _totals({n: agents[n] for n in zone_a})
    assert _delta(after, before, zone_a, ("in", "other")) >= payload
    assert _delta(after, before, zone_a, ("out", "other")) >= 3 * payload


def test_the_java_client_stays_in_its_zone(
    spawn_skiff: Callable[..., SkiffProcess], moto_s3: S3Bucket, pg_url: str, java_client: JavaClient
) -> None:
    """kafka-clients 4.3: a producer stating its zone in client.id, and a consumer stating it
    only as client.rack, which follows the preferred read replica because Metadata lists each
    zone's leader among the partition's replicas."""
    agents = _start(spawn_skiff, moto_s3, pg_url)
    a0 = agents["agent-0"]
    topic = f"zones-java-{uuid.uuid4().hex[:6]}"
    create_topic(a0.bootstrap, topic, partitions=PARTITIONS)
    payload = RECORDS * VALUE_BYTES
    java_client.produce(
        a0.bootstrap,
        topic,
        partitions=PARTITIONS,
        count=RECORDS,
        value_size=VALUE_BYTES,
        props={"client.id": "java-orders,az=zone-b"},
    )
    before = _totals(agents)
    java_client.consume(a0.bootstrap, topic, expect=RECORDS, props={"client.rack": "zone-b"})
    after = _totals(agents)
    zone_a = ["agent-0", "agent-1"]
    for n in zone_a:
        assert after[n][("in", "other")] == 0 and after[n][("in", "same")] == 0, after[n]
    assert after["agent-2"][("in", "same")] >= payload
    assert _delta(after, before, ["agent-2"], ("out", "same")) >= payload
    crossed = _delta(after, before, zone_a, ("out", "other"))  # the redirects, and only them
    assert 0 < crossed < 0.05 * payload, f"{crossed} fetch bytes crossed zones for the Java consumer"


GROUP_APIS = ("join_group", "sync_group", "heartbeat", "offset_commit")


def _group_requests(agents: dict[str, ZonedAgent]) -> dict[str, dict[str, float]]:
    out = {}
    for name, a in agents.items():
        served = _family(a, "skiff_requests", "api")
        out[name] = {api: served.get(api, 0.0) for api in GROUP_APIS}
    return out


def _groups_held(agents: dict[str, ZonedAgent]) -> dict[str, float]:
    return {name: _family(a, "skiff_groups", "").get("", 0.0) for name, a in agents.items()}


class Members:
    """Classic-protocol confluent-kafka members of one group, polled round-robin."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.consumers: list[Consumer] = []
        self.keys: set[bytes] = set()

    def add(self, client_id: str) -> Consumer:
        c = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "client.id": client_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 200,
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 500,
            }
        )
        c.subscribe([self.topic])
        self.consumers.append(c)
        return c

    def poll_until(self, done: Callable[[], bool], what: str, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            for c in self.consumers:
                m = c.poll(0.1)
                if m is not None and not m.error():
                    self.keys.add(m.key())
                    c.commit(message=m, asynchronous=False)

    def assigned(self) -> list[set[int]]:
        return [{tp.partition for tp in c.assignment()} for c in self.consumers]

    def split_over_all(self) -> bool:
        parts = self.assigned()
        return (
            all(parts)
            and sum(map(len, parts)) == PARTITIONS
            and set().union(*parts) == set(range(PARTITIONS))
        )

    def close(self) -> None:
        for c in self.consumers:
            c.close()


def test_groups_are_coordinated_in_their_members_zone_and_stay_put(
    spawn_skiff: Callable[..., SkiffProcess], moto_s3: S3Bucket, pg_url: str
) -> None:
    agents = _start(spawn_skiff, moto_s3, pg_url)
    a0, b = agents["agent-0"], agents["agent-2"]
    zone_a = ["agent-0", "agent-1"]
    topic = f"zones-groups-{uuid.uuid4().hex[:6]}"
    create_topic(a0.bootstrap, topic, partitions=PARTITIONS)
    _produce(b.bootstrap, topic, "orders,az=zone-b", "b")
    before = _group_requests(agents)

    # Two zone-B members, bootstrapped on a zone-A agent: coordinated in zone B. The group id
    # is one that hashing over every agent (the rule before zones) gives to zone A.
    group_id = next(
        g
        for g in (f"g-{uuid.uuid4().hex[:8]}" for _ in range(100))
        if routing.group_owner(g, list(ZONES)) != "agent-2"
    )
    group = Members(a0.bootstrap, group_id, topic)
    try:
        group.add("reader,az=zone-b")
        group.add("reader,az=zone-b")
        group.poll_until(lambda: len(group.keys) == RECORDS and group.split_over_all(), "zone-B members")
        after = _group_requests(agents)
        for api in GROUP_APIS:
            assert after["agent-2"][api] > before["agent-2"][api], (api, after)
            for n in zone_a:
                assert after[n][api] == before[n][api], f"{n} served {api} for a zone-B group: {after}"
        answers = {n: _family(a, "skiff_find_coordinator_answers", "client_zone") for n, a in agents.items()}
        assert sum(a.get("same", 0) for a in answers.values()) >= 2, answers
        assert sum(a.get("other", 0) for a in answers.values()) == 0, answers
        assert _groups_held(agents) == {"agent-0": 0, "agent-1": 0, "agent-2": 1}

        # A zone-A member joins: the group keeps its zone-B coordinator, split over all three.
        group.add("reader,az=zone-a")
        group.poll_until(group.split_over_all, "the zone-A member's share")
        assert _groups_held(agents) == {"agent-0": 0, "agent-1": 0, "agent-2": 1}
        answers = {n: _family(a, "skiff_find_coordinator_answers", "client_zone") for n, a in agents.items()}
        assert sum(a.get("other", 0) for a in answers.values()) >= 1, answers  # zone A sent to zone B

        # Zone B loses its agent: the group moves to zone A and its members go on.
        b.process.kill(signal.SIGTERM)
        wait_for_brokers(a0.bootstrap, 2)
        _produce(a0.bootstrap, topic, "orders,az=zone-b", "b2")
        group.poll_until(lambda: len(group.keys) == 2 * RECORDS, "records after the move")
        group.poll_until(group.split_over_all, "the group's assignment after the move")
        held = _groups_held({n: agents[n] for n in zone_a})
        assert sorted(held.values()) == [0, 1], held
    finally:
        group.close()
