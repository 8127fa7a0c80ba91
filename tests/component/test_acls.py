"""Kafka ACLs end to end with real clients over TCP: confluent-kafka (librdkafka) admin,
producer and consumer, kafka-python's admin, kcat, and raw kio requests for the details
clients hide. Two agents over one real metadata service (SQLite), authorization on.

Over PLAINTEXT every client is `User:ANONYMOUS`. The module grants it ALTER and DESCRIBE on
the cluster through metadata (the bootstrap an operator does through the metadata API),
so the Kafka ACL APIs work; each test then works on its own topics and groups. The agents
poll the ACL version only every 10 minutes here, so a test that sees a change on the
agent that made it proves the immediate reload, and the other agent is refreshed
explicitly (its poll is tested on its own)."""

from __future__ import annotations

import asyncio
import datetime
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.init_producer_id.v5.request import InitProducerIdRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64
from skiff.metadata.security import acl_types as m

from tests.component.fake_metadata import AgentHarness, request_once

TIMEOUT = 15
ANON = "User:ANONYMOUS"
NEVER_MS = 600_000  # the agents' poll interval in this module: effectively never
ZERO = i32Timedelta.parse(datetime.timedelta(0))


def _name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _bind(
    name: str,
    op: m.AclOperation,
    perm: m.AclPermissionType = m.AclPermissionType.ALLOW,
    *,
    rtype: m.ResourceType = m.ResourceType.TOPIC,
    pattern: m.PatternType = m.PatternType.LITERAL,
    principal: str = ANON,
) -> m.AclBinding:
    return m.AclBinding(rtype, name, pattern, principal, "*", op, perm)


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentHarness]:
    h = AgentHarness(
        tmp_path_factory.mktemp("acls"),
        authorizer_enabled=True,
        super_users="User:admin",
        acl_refresh_interval_ms=NEVER_MS,
    ).start(agents=2)
    assert h.metadata is not None
    cluster = [
        _bind(m.CLUSTER_NAME, op, rtype=m.ResourceType.CLUSTER)
        for op in (m.AclOperation.ALTER, m.AclOperation.DESCRIBE, m.AclOperation.IDEMPOTENT_WRITE)
    ]
    h.call(h.metadata.create_acls(cluster))
    refresh_all(h)
    yield h
    h.stop()


def refresh_all(h: AgentHarness) -> None:
    for a in h.agents:
        h.call(a.ctx.acls.refresh())


def grant(h: AgentHarness, *bindings: m.AclBinding) -> None:
    """Grant through the metadata API (not through an agent): every agent reloads explicitly."""
    assert h.metadata is not None
    h.call(h.metadata.create_acls(list(bindings)))
    refresh_all(h)


@pytest.fixture(scope="module")
def admin(harness: AgentHarness) -> AdminClient:
    return admin_client(harness.agents[0].bootstrap)


def one(futures: dict[Any, Any]) -> Any:
    """The result of a one-item admin call. (The dict must stay referenced until the results
    are in: confluent-kafka never completes the futures of a dropped dict.)"""
    return [f.result(TIMEOUT) for f in futures.values()][0]


def create_topic(h: AgentHarness, name: str, partitions: int = 1) -> None:
    """As a super user would: straight into metadata."""
    assert h.metadata is not None
    h.call(h.metadata.create_topic(name, partitions, {}))


def produce_one(bootstrap: str, topic: str, value: bytes = b"v") -> KafkaError | None:
    """The delivery error of one message (None: delivered)."""
    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000, "enable.idempotence": False})
    outcome: list[KafkaError | None] = []
    p.produce(topic, value, on_delivery=lambda err, msg: outcome.append(err))
    p.flush(TIMEOUT)
    assert len(outcome) == 1, "no delivery report"
    return outcome[0]


def metadata_request(names: list[str] | None, auto: bool = False) -> MetadataRequest:
    return MetadataRequest(
        topics=None
        if names is None
        else tuple(MetadataRequestTopic(topic_id=None, name=TopicName(n)) for n in names),
        allow_auto_topic_creation=auto,
        include_topic_authorized_operations=True,
    )


def topic_codes(bootstrap: str, names: list[str] | None, auto: bool = False) -> dict[str, Any]:
    resp = request_once(bootstrap, metadata_request(names, auto))
    return {t.name: t for t in resp.topics}


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def assert_produce_refused(bootstrap: str, topic: str) -> None:
    err = produce_one(bootstrap, topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def _code(futures: dict[Any, Any]) -> int:
    """The error code of a one-item admin call that must fail."""
    with pytest.raises(KafkaException) as info:
        one(futures)
    return info.value.args[0].code()


def confluent_read_acl(topic: str, principal: str) -> AclBinding:
    """confluent-kafka's binding: `principal` may READ the topic named `topic`, from any host."""
    return AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        principal,
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )


def creation(
    name: str, principal: str, operation: int, *, resource_type: int = 2, pattern_type: int = 3
) -> AclCreation:
    """A CreateAcls entry, allowing from any host; the wire codes: resource TOPIC 2, CLUSTER
    4; pattern LITERAL 3, MATCH 2; operation READ 3, WRITE 4, CREATE 7."""
    return AclCreation(
        resource_type=i8(resource_type),
        resource_name=name,
        resource_pattern_type=i8(pattern_type),
        principal=principal,
        host="*",
        operation=i8(operation),
        permission_type=i8(3),  # ALLOW
    )


def describe_acls_request(name: str | None) -> DescribeAclsRequest:
    """Every binding (ANY resource type, pattern, operation and permission) on resources
    named `name` (None: any name)."""
    return DescribeAclsRequest(
        resource_type_filter=i8(1),
        resource_name_filter=name,
        pattern_type_filter=i8(1),
        principal_filter=None,
        host_filter=None,
        operation=i8(1),
        permission_type=i8(1),
    )


# --- the ACL APIs with confluent-kafka's admin ---------------------------------------------------


def test_confluent_admin_create_describe_delete(harness, admin):
    topic = _name("c")
    allow = confluent_read_acl(topic, "User:app")
    deny = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.PREFIXED,
        "User:app",
        "10.1.2.3",
        AclOperation.WRITE,
        AclPermissionType.DENY,
    )
    for f in admin.create_acls([allow, deny]).values():
        assert f.result(TIMEOUT) is None
    mine = AclBindingFilter(
        ResourceType.ANY, topic, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    found = admin.describe_acls(mine).result(TIMEOUT)
    assert sorted(map(str, found)) == sorted(map(str, [allow, deny]))
    # MATCH: what applies to the topic named exactly so (the literal and the prefix)
    match = AclBindingFilter(
        ResourceType.TOPIC,
        topic + "-x",
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert [str(b) for b in admin.describe_acls(match).result(TIMEOUT)] == [str(deny)]
    deleted = one(admin.delete_acls([mine]))
    assert sorted(map(str, deleted)) == sorted(map(str, [allow, deny]))
    assert admin.describe_acls(mine).result(TIMEOUT) == []


def test_invalid_bindings_get_invalid_request_per_creation(harness):
    topic = _name("bad")
    creations = (
        creation(topic, "User:a", 3),
        creation(topic, "alice", 3),  # no colon in the principal
        creation(topic, "User:a", 3, pattern_type=2),  # MATCH is for filters only
        creation("other", "User:a", 7, resource_type=4),  # the cluster has one name
        creation(topic, "User:a", 99),  # operation 99 does not exist
    )
    resp = request_once(harness.bootstrap, CreateAclsRequest(creations=creations))
    codes = [r.error_code for r in resp.results]
    assert codes == [ErrorCode.none] + [ErrorCode.invalid_request] * 4
    assert "colon" in resp.results[1].error_message
    assert "kafka-cluster" in resp.results[3].error_message
    # the valid one was stored, the others not
    described = request_once(harness.bootstrap, describe_acls_request(topic))
    assert described.error_code == ErrorCode.none
    assert [(r.resource_name, len(r.acls)) for r in described.resources] == [(topic, 1)]


# --- the ACL APIs with kafka-python's admin ------------------------------------------------------


def test_kafka_python_admin_round_trip(harness):
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import (
        ResourceType as KResourceType,
    )

    group = _name("g")
    admin = KafkaAdminClient(bootstrap_servers=harness.bootstrap, request_timeout_ms=10000)
    try:
        wanted = ACL(
            principal="User:kp",
            host="*",
            operation=ACLOperation.READ,
            permission_type=ACLPermissionType.ALLOW,
            resource_pattern=ResourcePattern(KResourceType.GROUP, group, ACLResourcePatternType.LITERAL),
        )
        result = admin.create_acls([wanted])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        flt = ACLFilter(
            principal=None,
            host=None,
            operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(KResourceType.GROUP, group, ACLResourcePatternType.ANY),
        )
        acls, error = admin.describe_acls(flt)
        assert error.errno == 0 and acls == [wanted]
        ((_, deleted, error),) = admin.delete_acls([flt])
        assert error.errno == 0 and deleted == [wanted]
        assert admin.describe_acls(flt)[0] == []
    finally:
        admin.close()


# --- produce and consume refused, then allowed ---------------------------------------------------


def leader_of(h: AgentHarness, topic: str) -> tuple[Any, Any]:
    """(the agent leading partition 0 of the topic, another agent)."""
    resp = request_once(h.bootstrap, metadata_request([topic]))
    leader_id = resp.topics[0].partitions[0].leader_id
    leader = next(a for a in h.agents if a.node_id == leader_id)
    return leader, next(a for a in h.agents if a is not leader)


def write_acl(topic: str) -> AclCreation:
    return creation(topic, ANON, 4)


def test_produce_needs_write_and_a_change_applies_on_the_next_request(harness):
    topic = _name("p")
    create_topic(harness, topic)
    grant(harness, _bind(topic, m.AclOperation.DESCRIBE))  # metadata answers, produce is refused
    leader, _ = leader_of(harness, topic)  # where the producer sends its batches
    assert_produce_refused(harness.bootstrap, topic)
    # granted through the leader: its very next request obeys (no poll in this module)
    resp = request_once(leader.bootstrap, CreateAclsRequest(creations=(write_acl(topic),)))
    assert resp.results[0].error_code == ErrorCode.none
    assert produce_one(harness.bootstrap, topic) is None
    # revoked through the leader: refused again at once
    deleted = request_once(
        leader.bootstrap,
        DeleteAclsRequest(
            filters=(
                DeleteAclsFilter(
                    resource_type_filter=i8(2),
                    resource_name_filter=topic,
                    pattern_type_filter=i8(3),
                    principal_filter=ANON,
                    host_filter=None,
                    operation=i8(4),
                    permission_type=i8(1),
                ),
            )
        ),
    )
    assert len(deleted.filter_results[0].matching_acls) == 1
    assert_produce_refused(harness.bootstrap, topic)


def test_another_agent_follows_after_its_refresh(harness):
    topic = _name("x")
    create_topic(harness, topic)
    grant(harness, _bind(topic, m.AclOperation.DESCRIBE))
    leader, other = leader_of(harness, topic)
    assert_produce_refused(harness.bootstrap, topic)
    resp = request_once(other.bootstrap, CreateAclsRequest(creations=(write_acl(topic),)))  # not the leader
    assert resp.results[0].error_code == ErrorCode.none
    assert leader.ctx.acls.version < other.ctx.acls.version  # the leader has not polled yet
    assert_produce_refused(harness.bootstrap, topic)
    harness.call(leader.ctx.acls.refresh())  # what its poll does every acl_refresh_interval_ms
    assert produce_one(harness.bootstrap, topic) is None


def test_the_poll_picks_up_a_change_made_elsewhere(harness):
    """An AclCache with a short interval over the same metadata loads a change made
    through the metadata API, with nobody asking it to."""
    from skiff.agent.acl_cache import AclCache

    assert harness.metadata is not None
    cache = AclCache(harness.metadata, enabled=True, refresh_interval_ms=20)

    async def go() -> bool:
        await cache.start()
        try:
            topic = _name("poll")
            version = await harness.metadata.create_acls([_bind(topic, m.AclOperation.READ)])
            await asyncio.wait_for(cache.wait_for_version(version), TIMEOUT)
            return cache.authorize(ANON, "127.0.0.1", m.AclOperation.READ, m.ResourceType.TOPIC, topic)
        finally:
            await cache.close()

    assert harness.call(go())


def kcat(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    exe = shutil.which("kcat")
    assert exe is not None, "kcat is required"
    try:
        return subprocess.run([exe, *args], input=stdin, capture_output=True, timeout=60, check=False)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"kcat {args} did not finish: stderr {e.stderr!r}")


def test_kcat_produce_and_consume_refused_then_allowed(harness):
    topic = _name("k")
    create_topic(harness, topic)
    b = harness.bootstrap
    refused = kcat("-b", b, "-t", topic, "-P", "-X", "message.timeout.ms=5000", stdin=b"hello\n")
    assert b"authorization failed" in refused.stderr.lower(), refused.stderr

    grant(harness, _bind(topic, m.AclOperation.WRITE))
    ok = kcat("-b", b, "-t", topic, "-P", stdin=b"hello\n")
    assert ok.returncode == 0, ok.stderr

    refused = kcat("-b", b, "-t", topic, "-C", "-e", "-o", "beginning")
    assert refused.returncode != 0 and refused.stdout == b"", refused
    assert re.search(rb"Fetch from broker \d+ failed: Broker: Topic authorization failed", refused.stderr), (
        refused
    )

    grant(harness, _bind(topic, m.AclOperation.READ))
    # -c 1, not -e: the harness's agents do not run the commit watch that ends a tail long poll
    ok = kcat("-b", b, "-t", topic, "-C", "-c", "1", "-o", "beginning")
    assert ok.returncode == 0 and ok.stdout == b"hello\n", ok.stderr


# --- metadata filtering and auto-creation ---------------------------------------------------------


def test_metadata_lists_only_describable_topics(harness, admin):
    seen, hidden = _name("seen"), _name("hidden")
    create_topic(harness, seen)
    create_topic(harness, hidden)
    grant(harness, _bind(seen, m.AclOperation.READ))  # READ implies DESCRIBE
    listed = admin.list_topics(timeout=TIMEOUT).topics
    assert seen in listed and hidden not in listed
    named = topic_codes(harness.bootstrap, [seen, hidden, "never-created-" + seen])
    assert named[seen].error_code == ErrorCode.none
    assert named[hidden].error_code == ErrorCode.topic_authorization_failed
    assert named["never-created-" + seen].error_code == ErrorCode.topic_authorization_failed
    ops = named[seen].topic_authorized_operations
    assert ops == (1 << 3) | (1 << 8)  # READ and the DESCRIBE it implies


def test_auto_create_needs_create(harness):
    name = _name("auto")
    grant(harness, _bind(name, m.AclOperation.DESCRIBE))
    answer = topic_codes(harness.bootstrap, [name], auto=True)[name]
    assert answer.error_code == ErrorCode.topic_authorization_failed
    assert harness.call(harness.metadata.describe_topics([name])) == {}
    grant(harness, _bind(name, m.AclOperation.CREATE))
    assert topic_codes(harness.bootstrap, [name], auto=True)[name].error_code == ErrorCode.none


# --- deny beats allow, prefixes, groups ----------------------------------------------------------


def test_deny_beats_allow_and_prefixes_apply(harness):
    prefix = _name("pre")
    a, b = prefix + "-a", prefix + "-b"
    create_topic(harness, a)
    create_topic(harness, b)
    grant(
        harness,
        _bind(prefix, m.AclOperation.ALL, pattern=m.PatternType.PREFIXED),
        _bind(b, m.AclOperation.WRITE, m.AclPermissionType.DENY, principal="User:*"),
    )
    assert produce_one(harness.bootstrap, a) is None
    assert_produce_refused(harness.bootstrap, b)
    # the deny is on WRITE only: fetching b is still allowed by ALL on the prefix
    fetch = FetchRequest(
        replica_id=BrokerId(-1),
        max_wait=ZERO,
        min_bytes=i32(1),
        max_bytes=i32(1 << 20),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        rack_id="",
        forgotten_topics_data=(),
        topics=(
            FetchTopic(
                topic=TopicName(b),
                partitions=(
                    FetchPartition(
                        partition=i32(0),
                        current_leader_epoch=i32(-1),
                        fetch_offset=i64(0),
                        last_fetched_epoch=i32(-1),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(1 << 20),
                    ),
                ),
            ),
        ),
    )
    resp = request_once(harness.bootstrap, fetch)
    assert resp.responses[0].partitions[0].error_code == ErrorCode.none


def test_consumer_group_needs_group_read(harness):
    topic, group = _name("gt"), _name("grp")
    create_topic(harness, topic)
    grant(harness, _bind(topic, m.AclOperation.READ), _bind(topic, m.AclOperation.WRITE))
    assert produce_one(harness.bootstrap, topic, b"one") is None

    def consume() -> tuple[list[bytes], KafkaError | None]:
        c = Consumer(
            {
                "bootstrap.servers": harness.bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
            }
        )
        got: list[bytes] = []
        error: KafkaError | None = None
        try:
            c.subscribe([topic])
            for _ in range(40):
                msg = c.poll(0.5)
                if msg is None:
                    continue
                if msg.error():
                    error = msg.error()
                    break
                got.append(msg.value())
                break
        finally:
            c.close()
        return got, error

    got, error = consume()
    assert got == [] and error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    grant(harness, _bind(group, m.AclOperation.READ, rtype=m.ResourceType.GROUP))
    got, error = consume()
    assert error is None and got == [b"one"]


def test_idempotent_producer_needs_idempotent_write_or_write_somewhere(harness):
    resp = request_once(
        harness.bootstrap,
        InitProducerIdRequest(
            transactional_id=None,
            transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
            producer_id=i64(-1),
            producer_epoch=i32(-1),  # type: ignore[arg-type]
        ),
    )
    assert resp.error_code == ErrorCode.none  # the module grants IDEMPOTENT_WRITE on the cluster


# --- super users, and the cluster permission of the ACL APIs -------------------------------------


def test_super_users_and_cluster_permissions(tmp_path):
    h = AgentHarness(
        tmp_path, authorizer_enabled=True, super_users=ANON, acl_refresh_interval_ms=NEVER_MS
    ).start()
    try:
        admin = admin_client(h.bootstrap)
        topic = _name("su")
        assert h.metadata is not None
        h.call(
            h.metadata.create_acls(
                [_bind("*", m.AclOperation.ALL, m.AclPermissionType.DENY, principal="User:*")]
            )
        )
        h.call(h.agent.ctx.acls.refresh())
        for f in admin.create_topics([NewTopic(topic, 1)]).values():
            assert f.result(TIMEOUT) is None  # a super user passes whatever the ACLs deny
        assert produce_one(h.bootstrap, topic) is None
    finally:
        h.stop()
    h = AgentHarness(tmp_path / "plain", authorizer_enabled=True, acl_refresh_interval_ms=NEVER_MS)
    (tmp_path / "plain").mkdir()
    h.start()
    try:
        admin = admin_client(h.bootstrap)
        binding = confluent_read_acl("t", "User:x")
        assert _code(admin.create_acls([binding])) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        # librdkafka drops DescribeAcls' top-level error (it returns []): ask on the wire
        described = request_once(h.bootstrap, describe_acls_request(None))
        assert described.error_code == ErrorCode.cluster_authorization_failed
        # no ACL at all and allow_everyone_if_no_acl_found off: nothing is visible
        assert admin.list_topics(timeout=TIMEOUT).topics == {}
    finally:
        h.stop()


def test_acl_apis_answer_security_disabled_with_authorization_off(tmp_path):
    h = AgentHarness(tmp_path).start()
    try:
        admin = admin_client(h.bootstrap)
        binding = confluent_read_acl("t", "User:x")
        assert _code(admin.create_acls([binding])) == KafkaError.SECURITY_DISABLED
        # and everything else is open, as before: an unknown topic is auto-created and written
        assert produce_one(h.bootstrap, _name("open")) is None
    finally:
        h.stop()


# --- the Java client (Apache Kafka's own Admin) -----------------------------------------------


def test_java_admin_create_and_describe_acls(harness, java_client):
    topic = _name("java")
    created = java_client.admin(
        harness.bootstrap, "create-acl", "TOPIC", topic, "PREFIXED", "User:java", "*", "WRITE", "ALLOW"
    )
    expected = {
        "resource_type": "TOPIC",
        "name": topic,
        "pattern": "PREFIXED",
        "principal": "User:java",
        "host": "*",
        "operation": "WRITE",
        "permission": "ALLOW",
    }
    assert created == {"type": "acl_created", "acl": expected}
    # MATCH on a topic under the prefix finds it; the binding is in metadata, as stored
    found = java_client.admin(harness.bootstrap, "describe-acls", "TOPIC", topic + "-eu", "MATCH")
    assert found == {"type": "acls", "acls": [expected]}
    assert harness.call(
        harness.metadata.describe_acls(
            m.AclBindingFilter(m.ResourceType.TOPIC, topic, m.PatternType.PREFIXED)
        )
    )[1] == [
        m.AclBinding(
            m.ResourceType.TOPIC,
            topic,
            m.PatternType.PREFIXED,
            "User:java",
            "*",
            m.AclOperation.WRITE,
            m.AclPermissionType.ALLOW,
        )
    ]
    # and it decides: User:java may write under the prefix, nobody else may (on whichever agent
    # the Java admin sent it to, the controller, at once; here on every agent after a refresh)
    refresh_all(harness)
    acls = harness.agents[0].ctx.acls
    assert acls.authorize("User:java", "10.0.0.9", m.AclOperation.WRITE, m.ResourceType.TOPIC, topic + "-eu")
    assert not acls.authorize(
        "User:other", "10.0.0.9", m.AclOperation.WRITE, m.ResourceType.TOPIC, topic + "-eu"
    )


# --- every admin and group API refuses without its permission, with Kafka's code --------------


def test_admin_and_group_apis_refuse_without_permission(harness, admin):
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
    )
    from confluent_kafka.admin import ResourceType as ConfigType

    topic, group, new = _name("adm"), _name("admg"), _name("new")
    create_topic(harness, topic)
    topic_denied = KafkaError.TOPIC_AUTHORIZATION_FAILED
    group_denied = KafkaError.GROUP_AUTHORIZATION_FAILED
    assert _code(admin.create_topics([NewTopic(new, 1)])) == topic_denied  # no CREATE
    assert _code(admin.delete_topics([topic])) == topic_denied
    assert _code(admin.create_partitions([NewPartitions(topic, 3)])) == topic_denied
    resource = ConfigResource(ConfigType.TOPIC, topic)
    assert _code(admin.describe_configs([resource])) == topic_denied
    alter = ConfigResource(
        ConfigType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    assert _code(admin.incremental_alter_configs([alter])) == topic_denied
    assert _code(admin.describe_consumer_groups([group])) == group_denied
    assert _code(admin.delete_consumer_groups([group])) == group_denied
    assert _code(admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])) == group_denied
    # the cluster's authorized operations: what the module granted on it
    cluster = admin.describe_cluster(include_authorized_operations=True).result(TIMEOUT)
    assert sorted(op.name for op in cluster.authorized_operations) == [
        "ALTER",
        "DESCRIBE",
        "IDEMPOTENT_WRITE",
    ]

    # granted: the same calls succeed (ALL on the topic covers every topic operation)
    grant(
        harness,
        _bind(topic, m.AclOperation.ALL),
        _bind(new, m.AclOperation.CREATE),
        _bind(group, m.AclOperation.ALL, rtype=m.ResourceType.GROUP),
    )
    assert one(admin.create_topics([NewTopic(new, 1)])) is None
    assert one(admin.create_partitions([NewPartitions(topic, 3)])) is None
    assert one(admin.describe_configs([resource])).get("retention.ms") is not None
    assert one(admin.incremental_alter_configs([alter])) is None
    described = one(admin.describe_consumer_groups([group], include_authorized_operations=True))
    assert sorted(op.name for op in described.authorized_operations) == ["DELETE", "DESCRIBE", "READ"]
    assert one(admin.delete_topics([topic])) is None


def test_offset_commit_and_delete_records_refuse_per_topic(harness):
    from kio.schema.delete_records.v2.request import (
        DeleteRecordsPartition,
        DeleteRecordsRequest,
        DeleteRecordsTopic,
    )
    from kio.schema.offset_commit.v9.request import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
    )
    from kio.schema.types import GroupId

    allowed, denied, group = _name("oc-ok"), _name("oc-no"), _name("ocg")
    create_topic(harness, allowed)
    create_topic(harness, denied)
    grant(
        harness,
        _bind(allowed, m.AclOperation.READ),
        _bind(allowed, m.AclOperation.DELETE),
        _bind(group, m.AclOperation.READ, rtype=m.ResourceType.GROUP),
    )

    def commit(group_id: str) -> dict[str, ErrorCode]:
        node = harness.agent.ctx.agents.coordinator_for_group(group_id).node_id
        coordinator = next(a for a in harness.agents if a.node_id == node)
        req = OffsetCommitRequest(
            group_id=GroupId(group_id),
            generation_id_or_member_epoch=i32(-1),
            member_id="",
            group_instance_id=None,
            topics=tuple(
                OffsetCommitRequestTopic(
                    name=TopicName(t),
                    partitions=(
                        OffsetCommitRequestPartition(
                            partition_index=i32(0),
                            committed_offset=i64(0),
                            committed_leader_epoch=i32(-1),
                            committed_metadata=None,
                        ),
                    ),
                )
                for t in (allowed, denied)
            ),
        )
        resp = request_once(coordinator.bootstrap, req)
        return {t.name: t.partitions[0].error_code for t in resp.topics}

    assert commit(group) == {allowed: ErrorCode.none, denied: ErrorCode.topic_authorization_failed}
    assert commit(group + "-other") == {
        allowed: ErrorCode.group_authorization_failed,
        denied: ErrorCode.group_authorization_failed,
    }
    req = DeleteRecordsRequest(
        topics=tuple(
            DeleteRecordsTopic(
                name=TopicName(t), partitions=(DeleteRecordsPartition(partition_index=i32(0), offset=i64(0)),)
            )
            for t in (allowed, denied)
        ),
        timeout=ZERO,
    )
    resp = request_once(harness.bootstrap, req)
    codes = {t.name: t.partitions[0].error_code for t in resp.topics}
    assert codes == {allowed: ErrorCode.none, denied: ErrorCode.topic_authorization_failed}


def test_a_regex_subscription_is_assigned_only_topics_the_member_may_describe(harness: AgentHarness) -> None:
    """KIP-848 (Kafka 4.0's rule, KAFKA-18813): a member subscribing by regex is assigned the
    matching topics its principal may DESCRIBE, the others left out without an error; granted
    DESCRIBE later, the other topic is assigned at the member's next heartbeat."""
    prefix = _name("rx")
    allowed, denied, group = f"{prefix}-ok", f"{prefix}-no", _name("rxg")
    create_topic(harness, allowed, partitions=2)
    create_topic(harness, denied, partitions=2)
    grant(
        harness,
        _bind(allowed, m.AclOperation.DESCRIBE),
        _bind(group, m.AclOperation.READ, rtype=m.ResourceType.GROUP),
    )
    ids = {t.name: t.topic_id for t in harness.call(harness.metadata.list_topics())}  # type: ignore[union-attr]
    node = harness.agent.ctx.agents.coordinator_for_group(group).node_id  # type: ignore[union-attr]
    coordinator = next(a for a in harness.agents if a.node_id == node)

    def heartbeat(epoch: int) -> Any:
        return request_once(
            coordinator.bootstrap,
            ConsumerGroupHeartbeatRequest(
                group_id=GroupId(group),
                member_id="rx-member",
                member_epoch=i32(epoch),
                rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
                subscribed_topic_regex=f"{prefix}-.*",
                topic_partitions=(),
            ),
        )

    first = heartbeat(0)
    assert first.error_code == ErrorCode.none, first
    assigned = {tp.topic_id: set(tp.partitions) for tp in first.assignment.topic_partitions}
    assert assigned == {ids[allowed]: {0, 1}}  # the regex matches both topics; one may be described

    grant(harness, _bind(denied, m.AclOperation.DESCRIBE))
    again = heartbeat(int(first.member_epoch))
    assert again.error_code == ErrorCode.none, again
    assert again.member_epoch > first.member_epoch
    assigned = {tp.topic_id: set(tp.partitions) for tp in again.assignment.topic_partitions}
    assert assigned == {ids[allowed]: {0, 1}, ids[denied]: {0, 1}}
