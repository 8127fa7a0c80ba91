"""The admin APIs tools call first (issue 23 item 4), against the Java AdminClient (kafka-clients
4.3: describeCluster, describeTopics, describeLogDirs, describeProducers, elections and
reassignments) and kafka-python's admin client; Kafka's own message classes parse every
version of every new response byte for byte. Agents over the real metadata service on SQLite
(tests.component.fake_metadata), data produced by confluent-kafka."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.component.fake_metadata import AgentHarness, connect, recv_frame, request_once
from tests.support.java_client import JavaClient

TIMEOUT = 15


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentHarness]:
    h = AgentHarness(tmp_path_factory.mktemp("tools")).start()
    yield h
    h.stop()


def _name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _topic(
    harness: AgentHarness, partitions: int, records: int = 0, idempotent: bool = False, prefix: str = "t"
) -> str:
    """A topic with `records` records on each partition (acked: committed in metadata)."""
    name = _name(prefix)
    admin = AdminClient({"bootstrap.servers": harness.bootstrap})
    admin.create_topics([NewTopic(name, partitions)])[name].result(TIMEOUT)
    if records:
        producer = Producer(
            {"bootstrap.servers": harness.bootstrap, "enable.idempotence": idempotent, "linger.ms": 5}
        )
        for p in range(partitions):
            for i in range(records):
                producer.produce(name, value=b"v" * 100, key=f"k{i}".encode(), partition=p)
        assert producer.flush(TIMEOUT) == 0
    return name


# --- the Java AdminClient ----------------------------------------------------------------------------


def test_java_describe_cluster_and_topics_page_by_page(harness, java_client: JavaClient):
    cluster = java_client.admin(harness.bootstrap, "describe-cluster")
    me = harness.agent.node_id
    assert [n["id"] for n in cluster["nodes"]] == [me] and cluster["controller"]["id"] == me
    a, b = _topic(harness, 5, prefix="a"), _topic(harness, 3, prefix="b")
    # 2 partitions per response: the client follows DescribeTopicPartitions' cursor to the end
    got = java_client.admin(harness.bootstrap, "describe-topics", f"{a},{b}", 2)["topics"]
    assert [t["topic"] for t in got] == [a, b]
    assert [[p["partition"] for p in t["partitions"]] for t in got] == [[0, 1, 2, 3, 4], [0, 1, 2]]
    assert all(p["leader"] == me and p["replicas"] == [me] == p["isr"] for t in got for p in t["partitions"])
    assert not any(t["internal"] for t in got) and all(t["operations"] for t in got)


def test_java_describe_log_dirs_sizes_come_from_metadata(harness, java_client: JavaClient):
    name = _topic(harness, 2, records=20)
    got = java_client.admin(harness.bootstrap, "describe-log-dirs")["brokers"]
    assert [b["broker"] for b in got] == [harness.agent.node_id]
    (log_dir,) = got[0]["log_dirs"]
    assert log_dir["path"] == harness.agent.ctx.config.bucket_url and log_dir["error"] is None
    assert log_dir["total_bytes"] is None and log_dir["usable_bytes"] is None  # unknown for a bucket
    mine = {r["partition"]: r for r in log_dir["replicas"] if r["topic"] == name}
    assert sorted(mine) == [0, 1]
    topic = harness.call(harness.metadata.describe_topics([name]))[name]
    from skiff.metadata.types import PartitionKey

    sizes = harness.call(harness.metadata.partition_sizes([PartitionKey(topic.topic_id, p) for p in (0, 1)]))
    assert [mine[p]["size"] for p in (0, 1)] == sizes and all(s > 20 * 100 for s in sizes)
    assert all(r["offset_lag"] == 0 and not r["future"] for r in mine.values())


def test_java_describe_producers_of_an_idempotent_producer(harness, java_client: JavaClient):
    name = _topic(harness, 1, records=7, idempotent=True)
    got = java_client.admin(harness.bootstrap, "describe-producers", name, 0)
    (producer,) = got["producers"]
    assert producer["producer_id"] >= 0 and producer["epoch"] == 0
    assert producer["last_sequence"] == 6  # seven records: sequences 0..6
    assert producer["last_timestamp"] > 0 and producer["txn_start_offset"] is None
    assert (
        java_client.admin(harness.bootstrap, "describe-producers", _topic(harness, 1), 0)["producers"] == []
    )


def test_java_elections_and_reassignments_have_nothing_to_do(harness, java_client: JavaClient):
    name = _topic(harness, 2)
    me = harness.agent.node_id
    for election in ("PREFERRED", "UNCLEAN"):
        got = java_client.admin(harness.bootstrap, "elect-leaders", election, name, 1)
        assert got["error"] == "ElectionNotNeededException", got
    assert java_client.admin(harness.bootstrap, "list-reassignments")["reassignments"] == []
    done = java_client.admin(harness.bootstrap, "alter-reassignment", name, 0, me)
    assert done["error"] is None
    assert java_client.admin(harness.bootstrap, "list-reassignments")["reassignments"] == []
    bad = java_client.admin(harness.bootstrap, "alter-reassignment", name, 0, f"{me},999")
    assert bad["error"] == "InvalidReplicaAssignmentException"
    cancel = java_client.admin(harness.bootstrap, "alter-reassignment", name, 0, "cancel")
    assert cancel["error"] == "NoReassignmentInProgressException"
    missing = java_client.admin(harness.bootstrap, "alter-reassignment", name, 5, me)
    assert missing["error"] == "UnknownTopicOrPartitionException"


# --- kafka-python ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kp_admin(harness: AgentHarness) -> Iterator[Any]:
    from kafka.admin import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=harness.bootstrap, request_timeout_ms=10000)
    yield client
    client.close()


def test_kafka_python_describe_topic_partitions_with_a_cursor(harness, kp_admin):
    a, b = _topic(harness, 3, prefix="a"), _topic(harness, 2, prefix="b")
    missing = _name("zz-missing")
    first = kp_admin.describe_topic_partitions([b, a, missing], response_partition_limit=4)
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in first["topics"]] == [
        (a, [0, 1, 2]),
        (b, [0]),
    ]
    assert first["next_cursor"] == {"topic_name": b, "partition_index": 1}
    rest = kp_admin.describe_topic_partitions(
        [b, a, missing], response_partition_limit=4, cursor=first["next_cursor"]
    )
    assert [(t["name"], t["error_code"]) for t in rest["topics"]] == [
        (b, 0),
        (missing, ErrorCode.unknown_topic_or_partition),
    ]
    assert [p["partition_index"] for p in rest["topics"][0]["partitions"]] == [1]
    assert rest["next_cursor"] is None
    # a page that ends exactly at a topic's end points at the next topic's first partition
    exact = kp_admin.describe_topic_partitions([a, b], response_partition_limit=3)
    assert exact["next_cursor"] == {"topic_name": b, "partition_index": 0}


def test_kafka_python_log_dirs_producers_elections_reassignments_quorum(harness, kp_admin):
    from kafka import TopicPartition
    from kafka.errors import IncompatibleBrokerVersion, NoReassignmentInProgressError

    name = _topic(harness, 2, records=3, idempotent=True)
    (broker,) = kp_admin.describe_log_dirs({name: [0, 1]})
    (log_dir,) = broker["log_dirs"]
    assert log_dir["log_dir"] == harness.agent.ctx.config.bucket_url and log_dir["error_code"] == 0
    (topic,) = log_dir["topics"]
    assert topic["name"] == name and [p["partition_index"] for p in topic["partitions"]] == [0, 1]
    assert all(p["partition_size"] > 0 for p in topic["partitions"])
    tps = [TopicPartition(name, 0), TopicPartition(name, 1)]
    states = kp_admin.describe_producers(tps)
    for tp in tps:
        (state,) = states[tp].active_producers
        assert state.last_sequence == 2 and state.coordinator_epoch == -1
        assert state.current_transaction_start_offset == -1
    (result,) = kp_admin.elect_leaders(0, {name: [0]}, raise_errors=False).replica_election_results
    assert [(r.partition_id, r.error_code) for r in result.partition_result] == [
        (0, ErrorCode.election_not_needed)
    ]
    assert kp_admin.list_partition_reassignments() == {}
    done = kp_admin.alter_partition_reassignments({tps[1]: [harness.agent.node_id], tps[0]: None})
    assert done == {tps[1]: None, tps[0]: NoReassignmentInProgressError}
    # DescribeQuorum is not served: Skiff's metadata is a SQL database, not a Raft quorum
    with pytest.raises(IncompatibleBrokerVersion):
        kp_admin.describe_metadata_quorum()


# --- several agents: each partition's size is counted once -------------------------------------------


def test_log_dirs_over_two_agents_count_each_partition_once(tmp_path, java_client: JavaClient):
    h = AgentHarness(tmp_path).start(agents=2)
    try:
        h.refresh_all()
        name = _topic(h, 8, records=2)
        brokers = java_client.admin(h.bootstrap, "describe-log-dirs")["brokers"]
        assert sorted(b["broker"] for b in brokers) == sorted(a.node_id for a in h.agents)
        seen = [
            (b["broker"], r["partition"])
            for b in brokers
            for d in b["log_dirs"]
            for r in d["replicas"]
            if r["topic"] == name
        ]
        assert sorted(p for _, p in seen) == list(range(8))  # once each
        topic = h.call(h.metadata.describe_topics([name]))[name]
        leaders = h.agent.ctx.agents.leaders_for_topic(topic.topic_id, 8)
        assert all(leaders[p] == broker for broker, p in seen)  # with Metadata's leader
    finally:
        h.stop()


# --- Kafka's own message classes as the judge ----------------------------------------------------------


def _requests(name: str, me: int) -> dict[int, Any]:
    from kio.schema.alter_partition_reassignments.v1.request import (
        AlterPartitionReassignmentsRequest,
        ReassignablePartition,
        ReassignableTopic,
    )
    from kio.schema.describe_log_dirs.v5.request import DescribableLogDirTopic, DescribeLogDirsRequest
    from kio.schema.describe_producers.v0.request import DescribeProducersRequest
    from kio.schema.describe_producers.v0.request import TopicRequest as ProducersTopic
    from kio.schema.describe_topic_partitions.v0.request import (
        Cursor,
        DescribeTopicPartitionsRequest,
        TopicRequest,
    )
    from kio.schema.elect_leaders.v2.request import ElectLeadersRequest, TopicPartitions
    from kio.schema.list_partition_reassignments.v0.request import (
        ListPartitionReassignmentsRequest,
        ListPartitionReassignmentsTopics,
    )
    from kio.schema.types import BrokerId, TopicName
    from kio.static.primitive import i8, i32

    topic = TopicName(name)
    return {
        35: DescribeLogDirsRequest(
            topics=(DescribableLogDirTopic(topic=topic, partitions=(i32(0), i32(1))),)
        ),
        43: ElectLeadersRequest(
            election_type=i8(0), topic_partitions=(TopicPartitions(topic=topic, partitions=(i32(0), i32(9))),)
        ),
        45: AlterPartitionReassignmentsRequest(
            topics=(
                ReassignableTopic(
                    name=topic,
                    partitions=(
                        ReassignablePartition(partition_index=i32(0), replicas=(BrokerId(me),)),
                        ReassignablePartition(partition_index=i32(1), replicas=None),
                    ),
                ),
            ),
        ),
        46: ListPartitionReassignmentsRequest(
            topics=(ListPartitionReassignmentsTopics(name=topic, partition_indexes=(i32(0),)),)
        ),
        61: DescribeProducersRequest(
            topics=(ProducersTopic(name=topic, partition_indexes=(i32(0), i32(7))),)
        ),
        75: DescribeTopicPartitionsRequest(
            topics=(TopicRequest(name=topic), TopicRequest(name=TopicName(name + "-absent"))),
            response_partition_limit=i32(1),
            cursor=Cursor(topic_name=topic, partition_index=i32(0)),
        ),
    }


@pytest.mark.slow
def test_every_new_response_reserializes_identically_with_kafkas_java_classes(
    harness, java_client: JavaClient
):
    from skiff.agent import protocol

    name = _topic(harness, 2, records=2, idempotent=True)
    items: list[tuple[int, int, bytes]] = []
    for key, latest in sorted(_requests(name, harness.agent.node_id).items()):
        spec = harness.agent.server.registry.get(key)
        assert spec is not None
        for version in range(spec.min_version, spec.max_version + 1):
            cls = protocol.request_schema(key, version)
            assert cls is not None
            req = protocol.convert(latest, cls)
            assert request_once(harness.bootstrap, req).__version__ == version
            with connect(harness.bootstrap) as sock:
                sock.sendall(protocol.encode_request(req, 7))
                frame = recv_frame(sock)
            body_at = 4 + (1 if protocol.response_header_version(key, version) >= 1 else 0)
            items.append((key, version, frame[body_at:]))
    results = java_client.api_oracle(items)
    bad = [
        (k, v, r)
        for (k, v, _), r in zip(items, results, strict=True)
        if not r["ok"] or r["remaining"] or not r["roundtrip"] or r["unknown_tagged_fields"]
    ]
    assert not bad
    assert len(items) == 4 + 1 + 3 + 2 + 1 + 1  # DescribeLogDirs v1-v4 (v5 is not advertised)


def test_java_describe_consumer_groups_of_both_protocols(harness, java_client: JavaClient):
    """The Java AdminClient's describeConsumerGroups (ConsumerGroupDescribe first, then
    DescribeGroups for a classic group, as Kafka 4 answers): a consumer-protocol group and a
    classic one, each with its live member and its partitions."""
    from confluent_kafka import Consumer

    name = _topic(harness, 4, records=2)
    members = {}
    for protocol in ("consumer", "classic"):
        group = f"{protocol}-{uuid.uuid4().hex[:8]}"
        config = {
            "bootstrap.servers": harness.bootstrap,
            "group.id": group,
            "group.protocol": protocol,
            "auto.offset.reset": "earliest",
        }
        if protocol == "classic":
            config["session.timeout.ms"] = 30_000
        c = Consumer(config)
        c.subscribe([name])
        members[protocol] = (group, c)
    try:
        deadline = time.monotonic() + 60
        for group, c in members.values():
            while not c.assignment() and time.monotonic() < deadline:
                c.poll(0.2)
            assert c.assignment(), group
        ids = ",".join(g for g, _ in members.values())
        got = {g["group"]: g for g in java_client.admin(harness.bootstrap, "describe-groups", ids)["groups"]}
        consumer, classic = got[members["consumer"][0]], got[members["classic"][0]]
        assert (consumer["type"], consumer["state"]) == ("Consumer", "Stable")
        assert consumer["assignor"] in ("uniform", "range") and consumer["epoch"] >= 1
        assert [m["assigned"] for m in consumer["members"]] == [4] and consumer["members"][0]["epoch"] >= 1
        assert (classic["type"], classic["state"]) == ("Classic", "Stable")
        assert [m["assigned"] for m in classic["members"]] == [4]
        assert consumer["coordinator"] == classic["coordinator"] == harness.agent.node_id
    finally:
        for _, c in members.values():
            c.close()
