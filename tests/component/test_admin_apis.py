"""The agent's non-data APIs against real clients over TCP: confluent-kafka (librdkafka), kafka-python,
aiokafka, kcat, and raw kio requests for what clients do not expose. Metadata is the real service on
SQLite (LocalMetadataClient), wrapped so tests can make it unreachable."""

from __future__ import annotations

import asyncio
import datetime
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from kio.schema.create_topics.v7.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.describe_cluster.v2.request import DescribeClusterRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v5.request import InitProducerIdRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import BrokerId, TopicName, TransactionalId
from kio.static.primitive import i8, i16, i32, i32Timedelta
from skiff.agent import protocol, routing

from tests.component.fake_metadata import AgentHarness, request_once
from tests.support.kafka_wire import list_offsets_request

ZERO = i32Timedelta.parse(datetime.timedelta(0))
TIMEOUT = 15


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentHarness]:
    h = AgentHarness(tmp_path_factory.mktemp("admin")).start()
    yield h
    h.stop()


@pytest.fixture(scope="module")
def admin(harness: AgentHarness) -> AdminClient:
    return AdminClient({"bootstrap.servers": harness.bootstrap, "socket.timeout.ms": 10000})


def _name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _kafka_error(future: Any) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(TIMEOUT)
    return info.value.args[0]


def _metadata(names: list[str] | None, auto: bool = False, version: int = 12) -> Any:
    req = MetadataRequest(
        topics=None
        if names is None
        else tuple(MetadataRequestTopic(topic_id=None, name=TopicName(n)) for n in names),
        allow_auto_topic_creation=auto,
        include_topic_authorized_operations=False,
    )
    cls = protocol.request_schema(3, version)
    assert cls is not None
    return protocol.convert(req, cls)


def _creatable(
    name: str, partitions: int = 1, replication: int = 1, configs: tuple[CreatableTopicConfig, ...] = ()
) -> CreatableTopic:
    """A CreateTopics entry without replica assignments (partitions or replication -1: the
    broker's default)."""
    return CreatableTopic(
        name=TopicName(name),
        num_partitions=i32(partitions),
        replication_factor=i16(replication),
        assignments=(),
        configs=configs,
    )


def _create_request(*topics: CreatableTopic, validate_only: bool = False) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=topics, timeout=ZERO, validate_only=validate_only)


def _create_raw(harness: AgentHarness, name: str, partitions: int = 1) -> None:
    req = _create_request(_creatable(name, partitions=partitions, replication=-1))
    assert request_once(harness.bootstrap, req).topics[0].error_code == ErrorCode.none


# --- confluent-kafka AdminClient -------------------------------------------------------------------------


def test_create_topics_and_list_them(admin):
    a, b, c = _name(), _name(), _name()
    futures = admin.create_topics(
        [
            NewTopic(a, 3),
            NewTopic(b, -1, config={"cleanup.policy": "compact"}),
            NewTopic(c, 2, replication_factor=3),
        ]
    )
    for f in futures.values():
        assert f.result(TIMEOUT) is None
    md = admin.list_topics(timeout=TIMEOUT)
    assert len(md.topics[a].partitions) == 3
    assert len(md.topics[b].partitions) == 1  # default_partitions
    assert len(md.topics[c].partitions) == 2  # replication factor accepted and ignored
    part = md.topics[a].partitions[0]
    assert part.leader in md.brokers and part.replicas == [part.leader] and part.isrs == [part.leader]
    assert md.cluster_id == "skiff" and md.controller_id in md.brokers


def test_create_topics_validate_only_creates_nothing(admin):
    name = _name()
    assert admin.create_topics([NewTopic(name, 2)], validate_only=True)[name].result(TIMEOUT) is None
    assert name not in admin.list_topics(timeout=TIMEOUT).topics
    err = _kafka_error(
        admin.create_topics([NewTopic(name, 1, config={"nope": "1"})], validate_only=True)[name]
    )
    assert err.code() == KafkaError.INVALID_CONFIG


@pytest.mark.parametrize(
    ("topic", "code", "text"),
    [
        (NewTopic("bad name!", 1), KafkaError.TOPIC_EXCEPTION, "illegal"),
        (NewTopic("x" * 250, 1), KafkaError.TOPIC_EXCEPTION, "249"),
        (NewTopic("..", 1), KafkaError.TOPIC_EXCEPTION, ""),
        (
            NewTopic("cfg-unknown", 1, config={"no.such.config": "1"}),
            KafkaError.INVALID_CONFIG,
            "Unknown topic config",
        ),
        (
            NewTopic("cfg-bad-value", 1, config={"retention.ms": "soon"}),
            KafkaError.INVALID_CONFIG,
            "retention.ms",
        ),
        (
            NewTopic("cfg-bad-policy", 1, config={"cleanup.policy": "shred"}),
            KafkaError.INVALID_CONFIG,
            "cleanup",
        ),
    ],
)
def test_create_topics_errors_are_what_kafka_reports(admin, topic, code, text):
    err = _kafka_error(admin.create_topics([topic])[topic.topic])
    assert err.code() == code
    assert text in err.str()


def test_create_existing_topic_is_topic_already_exists(admin):
    name = _name()
    admin.create_topics([NewTopic(name, 1)])[name].result(TIMEOUT)
    err = _kafka_error(admin.create_topics([NewTopic(name, 4)])[name])
    assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS


def test_create_partitions(admin):
    name = _name()
    admin.create_topics([NewTopic(name, 2)])[name].result(TIMEOUT)
    assert admin.create_partitions([NewPartitions(name, 5)])[name].result(TIMEOUT) is None
    assert len(admin.list_topics(name, timeout=TIMEOUT).topics[name].partitions) == 5
    err = _kafka_error(admin.create_partitions([NewPartitions(name, 3)])[name])
    assert err.code() == KafkaError.INVALID_PARTITIONS and "higher than the requested 3" in err.str()
    err = _kafka_error(admin.create_partitions([NewPartitions(name, 5)])[name])
    assert err.code() == KafkaError.INVALID_PARTITIONS
    missing = _name()
    err = _kafka_error(admin.create_partitions([NewPartitions(missing, 5)])[missing])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_configs_flags_defaults_and_overrides(admin):
    name = _name()
    admin.create_topics([NewTopic(name, 1, config={"retention.ms": "3600000"})])[name].result(TIMEOUT)
    res = ConfigResource(ResourceType.TOPIC, name)
    configs = admin.describe_configs([res])[res].result(TIMEOUT)
    assert configs["retention.ms"].value == "3600000"
    assert not configs["retention.ms"].is_default
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete" and configs["cleanup.policy"].is_default
    assert configs["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["max.message.bytes"].value == "1048588"
    assert len(configs) >= 25


def test_describe_configs_errors(admin):
    missing = ConfigResource(ResourceType.TOPIC, _name())
    assert _kafka_error(admin.describe_configs([missing])[missing]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_broker_configs(admin, harness):
    res = ConfigResource(ResourceType.BROKER, str(harness.agent.node_id))
    configs = admin.describe_configs([res])[res].result(TIMEOUT)
    assert configs["broker.id"].value == str(harness.agent.node_id)
    assert configs["num.partitions"].value == "1"
    assert configs["auto.create.topics.enable"].value == "true"
    assert configs["socket.request.max.bytes"].value == str(100 * 1024 * 1024)
    assert all(c.is_read_only for c in configs.values())


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_alter_configs_replaces_the_whole_set(admin):
    name = _name()
    admin.create_topics([NewTopic(name, 1, config={"cleanup.policy": "compact"})])[name].result(TIMEOUT)
    res = ConfigResource(ResourceType.TOPIC, name, set_config={"retention.ms": "1000"})
    assert admin.alter_configs([res])[res].result(TIMEOUT) is None
    configs = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name)])
    got = next(iter(configs.values())).result(TIMEOUT)
    assert got["retention.ms"].value == "1000"
    assert got["cleanup.policy"].value == "delete" and got["cleanup.policy"].is_default  # reset: not listed
    bad = ConfigResource(ResourceType.TOPIC, name, set_config={"retention.ms": "x"})
    assert _kafka_error(admin.alter_configs([bad])[bad]).code() == KafkaError.INVALID_CONFIG
    missing = ConfigResource(ResourceType.TOPIC, _name(), set_config={"retention.ms": "1"})
    assert _kafka_error(admin.alter_configs([missing])[missing]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def _describe(admin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(ResourceType.TOPIC, name)
    return admin.describe_configs([res])[res].result(TIMEOUT)


def _incremental(admin: AdminClient, name: str, *entries: ConfigEntry) -> Any:
    res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=list(entries))
    return admin.incremental_alter_configs([res])[res]


def test_incremental_alter_configs(admin):
    name = _name()
    admin.create_topics([NewTopic(name, 1, config={"retention.ms": "5000"})])[name].result(TIMEOUT)
    set_op, delete_op = AlterConfigOpType.SET, AlterConfigOpType.DELETE
    append_op, subtract_op = AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT

    assert (
        _incremental(admin, name, ConfigEntry("retention.bytes", "123", incremental_operation=set_op)).result(
            TIMEOUT
        )
        is None
    )
    got = _describe(admin, name)
    assert got["retention.bytes"].value == "123" and got["retention.ms"].value == "5000"  # others kept

    _incremental(admin, name, ConfigEntry("retention.ms", None, incremental_operation=delete_op)).result(
        TIMEOUT
    )
    assert _describe(admin, name)["retention.ms"].is_default

    _incremental(
        admin, name, ConfigEntry("cleanup.policy", "compact", incremental_operation=append_op)
    ).result(TIMEOUT)
    assert _describe(admin, name)["cleanup.policy"].value == "delete,compact"
    _incremental(
        admin, name, ConfigEntry("cleanup.policy", "delete", incremental_operation=subtract_op)
    ).result(TIMEOUT)
    assert _describe(admin, name)["cleanup.policy"].value == "compact"

    err = _kafka_error(
        _incremental(admin, name, ConfigEntry("retention.ms", "1", incremental_operation=append_op))
    )
    assert err.code() == KafkaError.INVALID_CONFIG
    err = _kafka_error(_incremental(admin, name, ConfigEntry("bogus.key", "1", incremental_operation=set_op)))
    assert err.code() == KafkaError.INVALID_CONFIG
    err = _kafka_error(
        _incremental(admin, _name(), ConfigEntry("retention.ms", "1", incremental_operation=set_op))
    )
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_cluster(admin, harness):
    desc = admin.describe_cluster(include_authorized_operations=True).result(TIMEOUT)
    assert desc.cluster_id == "skiff"
    assert [n.id for n in desc.nodes] == [harness.agent.node_id]
    assert desc.nodes[0].port == harness.agent.port and desc.controller.id == harness.agent.node_id
    assert desc.authorized_operations


def test_delete_topics(admin):
    name, missing = _name(), _name()
    admin.create_topics([NewTopic(name, 2)])[name].result(TIMEOUT)
    futures = admin.delete_topics([name, missing])
    assert futures[name].result(TIMEOUT) is None
    assert _kafka_error(futures[missing]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert name not in admin.list_topics(timeout=TIMEOUT).topics
    # the name can be used again, for a new topic
    assert admin.create_topics([NewTopic(name, 1)])[name].result(TIMEOUT) is None


def test_list_offsets_of_an_empty_topic(admin):
    name = _name()
    admin.create_topics([NewTopic(name, 2)])[name].result(TIMEOUT)
    specs = {TopicPartition(name, 0): OffsetSpec.earliest(), TopicPartition(name, 1): OffsetSpec.latest()}
    for tp, f in admin.list_offsets(specs).items():
        assert f.result(TIMEOUT).offset == 0, tp


# --- kafka-python ------------------------------------------------------------------------------------------


def test_kafka_python_admin(harness):
    from kafka import errors
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewPartitions as KNewPartitions
    from kafka.admin import NewTopic as KNewTopic

    client = KafkaAdminClient(bootstrap_servers=harness.bootstrap, request_timeout_ms=10000)
    try:
        name = _name("kp")
        client.create_topics([KNewTopic(name, 2, 1, topic_configs={"retention.ms": "1000"})])
        assert name in client.list_topics()
        with pytest.raises(errors.TopicAlreadyExistsError):
            client.create_topics([KNewTopic(name, 2, 1)])
        with pytest.raises(errors.InvalidTopicError):
            client.create_topics([KNewTopic("bad name", 1, 1)])
        with pytest.raises(errors.InvalidConfigurationError):
            client.create_topics([KNewTopic(_name("kp"), 1, 1, topic_configs={"retention.ms": "abc"})])
        described = client.describe_configs([KConfigResource(ConfigResourceType.TOPIC, name)])
        assert described["topic"][name]["retention.ms"]["value"] == "1000"
        client.create_partitions({name: KNewPartitions(3)})
        assert len(client.describe_topics([name])[0]["partitions"]) == 3
        assert client.describe_cluster()["controller_id"] == harness.agent.node_id
        client.delete_topics([name])
        assert name not in client.list_topics()
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            client.delete_topics([name])
    finally:
        client.close()


# --- aiokafka -----------------------------------------------------------------------------------------------


def test_aiokafka_admin(harness):
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as ANewTopic

    name = _name("aio")

    async def go() -> None:
        client = AIOKafkaAdminClient(bootstrap_servers=harness.bootstrap)
        await client.start()
        try:
            resp = await client.create_topics([ANewTopic(name, 3, 1)])
            assert [e[1] for e in resp.topic_errors] == [0]
            resp = await client.create_topics([ANewTopic(name, 3, 1)])
            assert [e[1] for e in resp.topic_errors] == [ErrorCode.topic_already_exists]
            assert name in await client.list_topics()
            (topic,) = await client.describe_topics([name])
            assert topic["error_code"] == 0 and len(topic["partitions"]) == 3
            await client.delete_topics([name])
            assert name not in await client.list_topics()
        finally:
            await client.close()

    asyncio.run(go())


# --- kcat ---------------------------------------------------------------------------------------------------


def _kcat(*args: str) -> str:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat, "kcat is required for these tests (apt-get install kcat)"
    out = subprocess.run([kcat, *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_kcat_lists_brokers_and_topics(harness):
    name = _name("kc")
    _create_raw(harness, name, 3)
    out = _kcat("-b", harness.bootstrap, "-L")
    assert f"broker {harness.agent.node_id} at 127.0.0.1:{harness.agent.port} (controller)" in out
    assert f'topic "{name}" with 3 partitions:' in out
    assert f"partition 2, leader {harness.agent.node_id}, replicas: {harness.agent.node_id}" in out


def test_kcat_metadata_for_an_unknown_topic_auto_creates_it(harness):
    name = _name("auto")
    out = _kcat("-b", harness.bootstrap, "-L", "-t", name)
    assert f'topic "{name}" with 1 partitions:' in out
    assert request_once(harness.bootstrap, _metadata([name])).topics[0].error_code == ErrorCode.none


# --- raw requests: Metadata details ------------------------------------------------------------------------


def test_metadata_unknown_invalid_and_auto_created_topics(harness):
    known, unknown, auto = _name(), _name(), _name()
    _create_raw(harness, known, 2)
    resp = request_once(harness.bootstrap, _metadata([known, unknown, "bad name", "__transaction_state"]))
    by_name = {t.name: t for t in resp.topics}
    assert by_name[known].error_code == ErrorCode.none and by_name[known].topic_id is not None
    assert len(by_name[known].partitions) == 2
    assert by_name[unknown].error_code == ErrorCode.unknown_topic_or_partition
    assert by_name["bad name"].error_code == ErrorCode.invalid_topic_exception
    assert by_name["__transaction_state"].error_code == ErrorCode.unknown_topic_or_partition
    resp = request_once(harness.bootstrap, _metadata([auto, "__transaction_state"], auto=True))
    by_name = {t.name: t for t in resp.topics}
    assert by_name[auto].error_code == ErrorCode.none and len(by_name[auto].partitions) == 1
    assert (
        by_name["__transaction_state"].error_code == ErrorCode.unknown_topic_or_partition
    )  # never auto-created
    # __consumer_offsets is served read-only from metadata (agent.handlers._consumer_offsets)
    (offsets,) = request_once(harness.bootstrap, _metadata(["__consumer_offsets"])).topics
    assert offsets.error_code == ErrorCode.none and offsets.is_internal and len(offsets.partitions) == 50


def test_metadata_v1_to_v3_always_allow_auto_creation(harness):
    name = _name()
    resp = request_once(harness.bootstrap, _metadata([name], auto=False, version=3))
    assert resp.topics[0].error_code == ErrorCode.none


def test_auto_creation_can_be_disabled(tmp_path):
    h = AgentHarness(tmp_path, auto_create_topics=False, default_partitions=4).start()
    try:
        name = _name()
        resp = request_once(h.bootstrap, _metadata([name], auto=True))
        assert resp.topics[0].error_code == ErrorCode.unknown_topic_or_partition
        req = _create_request(_creatable(name, partitions=-1, replication=-1))
        assert request_once(h.bootstrap, req).topics[0].num_partitions == 4
    finally:
        h.stop()


def test_metadata_by_topic_id(harness):
    name = _name()
    _create_raw(harness, name, 1)
    tid = request_once(harness.bootstrap, _metadata([name])).topics[0].topic_id
    missing = uuid.uuid4()
    req = MetadataRequest(
        topics=(
            MetadataRequestTopic(topic_id=tid, name=None),
            MetadataRequestTopic(topic_id=missing, name=None),
        ),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=True,
    )
    resp = request_once(harness.bootstrap, req)
    assert (resp.topics[0].name, resp.topics[0].error_code) == (name, ErrorCode.none)
    assert resp.topics[0].topic_authorized_operations > 0
    assert (resp.topics[1].topic_id, resp.topics[1].error_code) == (missing, ErrorCode.unknown_topic_id)


@pytest.mark.parametrize("version", range(1, 13))
def test_metadata_every_version(harness, version):
    name = _name()
    _create_raw(harness, name, 2)
    resp = request_once(harness.bootstrap, _metadata([name], version=version))
    assert resp.__version__ == version
    assert resp.topics[0].name == name and len(resp.topics[0].partitions) == 2
    assert resp.brokers[0].node_id == harness.agent.node_id


# --- raw requests: every version of every admin API parses ------------------------------------------------


def _latest_requests(name: str) -> dict[int, Any]:
    return {
        19: _create_request(
            _creatable(name + "-new", configs=(CreatableTopicConfig(name="retention.ms", value="1"),)),
            validate_only=True,
        ),
        20: DeleteTopicsRequest(
            topics=(DeleteTopicState(name=TopicName(name + "-absent"), topic_id=None),), timeout=ZERO
        ),
        32: DescribeConfigsRequest(
            resources=(
                DescribeConfigsResource(resource_type=i8(2), resource_name=name, configuration_keys=None),
            ),
            include_synonyms=True,
            include_documentation=True,
        ),
        60: DescribeClusterRequest(include_cluster_authorized_operations=True, include_fenced_brokers=False),
        22: InitProducerIdRequest(transactional_id=None, transaction_timeout=ZERO),
        2: list_offsets_request(name, [(0, -1)], isolation=1),
    }


def test_every_version_of_every_admin_api_answers_in_its_own_version(harness):
    name = _name()
    _create_raw(harness, name, 1)
    for key, latest in _latest_requests(name).items():
        spec = harness.agent.server.registry.get(key)
        assert spec is not None
        for version in range(spec.min_version, spec.max_version + 1):
            cls = protocol.request_schema(key, version)
            assert cls is not None
            if key == 20 and version < 6:  # topic_names (strings) before v6, topics (name or id) after
                req = cls(topic_names=(TopicName(name + "-absent"),), timeout=ZERO)
            else:
                req = protocol.convert(latest, cls)
            resp = request_once(harness.bootstrap, req)
            assert resp.__version__ == version, (spec.name, version)
            errors = [resp.error_code] if hasattr(resp, "error_code") else []
            for item_list in ("topics", "responses", "results"):
                for item in getattr(resp, item_list, ()):
                    if hasattr(item, "error_code"):
                        errors.append(item.error_code)
                    errors.extend(p.error_code for p in getattr(item, "partitions", ()))
            expected = ErrorCode.unknown_topic_or_partition if key == 20 else ErrorCode.none
            assert set(errors) == {expected}, (spec.name, version, resp)


def test_describe_configs_synonyms_and_documentation(harness):
    name = _name()
    _create_raw(harness, name, 1)
    req = DescribeConfigsRequest(
        resources=(
            DescribeConfigsResource(
                resource_type=i8(2), resource_name=name, configuration_keys=("retention.ms", "cleanup.policy")
            ),
            DescribeConfigsResource(resource_type=i8(4), resource_name="999999", configuration_keys=None),
            DescribeConfigsResource(resource_type=i8(8), resource_name="", configuration_keys=None),
        ),
        include_synonyms=True,
        include_documentation=True,
    )
    topic, other_broker, logger = request_once(harness.bootstrap, req).results
    assert {c.name for c in topic.configs} == {"retention.ms", "cleanup.policy"}
    retention = next(c for c in topic.configs if c.name == "retention.ms")
    assert [(s.name, s.source) for s in retention.synonyms] == [("log.retention.ms", 5)]
    assert retention.config_type == 5 and retention.documentation
    assert other_broker.error_code == ErrorCode.invalid_request
    assert logger.error_code == ErrorCode.invalid_request


def test_delete_topics_by_id(harness):
    name = _name()
    _create_raw(harness, name, 1)
    tid = request_once(harness.bootstrap, _metadata([name])).topics[0].topic_id
    missing = uuid.uuid4()
    req = DeleteTopicsRequest(
        topics=(DeleteTopicState(name=None, topic_id=tid), DeleteTopicState(name=None, topic_id=missing)),
        timeout=ZERO,
    )
    first, second = request_once(harness.bootstrap, req).responses
    assert (first.name, first.topic_id, first.error_code) == (name, tid, ErrorCode.none)
    assert (second.topic_id, second.error_code) == (missing, ErrorCode.unknown_topic_id)
    assert (
        request_once(harness.bootstrap, _metadata([name])).topics[0].error_code
        == ErrorCode.unknown_topic_or_partition
    )


def test_create_topics_request_level_checks(harness):
    dup = _name()
    assignment_topic = _name()
    from kio.schema.create_topics.v7.request import CreatableReplicaAssignment

    req = CreateTopicsRequest(
        topics=(
            _creatable(dup),
            _creatable(dup),
            _creatable(_name(), partitions=0),
            _creatable(_name(), replication=0),
            _creatable(_name(), configs=(CreatableTopicConfig(name="retention.ms", value=None),)),
            CreatableTopic(
                name=TopicName(assignment_topic),
                num_partitions=i32(-1),
                replication_factor=i16(-1),
                configs=(),
                assignments=tuple(
                    CreatableReplicaAssignment(partition_index=i32(p), broker_ids=(BrokerId(1), BrokerId(2)))
                    for p in range(3)
                ),
            ),
        ),
        timeout=ZERO,
        validate_only=False,
    )
    codes = [t.error_code for t in request_once(harness.bootstrap, req).topics]
    assert codes == [
        ErrorCode.invalid_request,
        ErrorCode.invalid_request,
        ErrorCode.invalid_partitions,
        ErrorCode.invalid_replication_factor,
        ErrorCode.invalid_config,
        ErrorCode.none,
    ]
    md = request_once(harness.bootstrap, _metadata([assignment_topic, dup]))
    assert len(md.topics[0].partitions) == 3
    assert md.topics[1].error_code == ErrorCode.unknown_topic_or_partition


# --- InitProducerId and ListOffsets -----------------------------------------------------------------------


def test_init_producer_id(harness):
    first = request_once(
        harness.bootstrap, InitProducerIdRequest(transactional_id=None, transaction_timeout=ZERO)
    )
    second = request_once(
        harness.bootstrap, InitProducerIdRequest(transactional_id=None, transaction_timeout=ZERO)
    )
    assert first.error_code == second.error_code == ErrorCode.none
    assert first.producer_id >= 0 and second.producer_id != first.producer_id and first.producer_epoch >= 0
    txn = request_once(
        harness.bootstrap,
        InitProducerIdRequest(transactional_id=TransactionalId("tx"), transaction_timeout=ZERO),
    )
    assert txn.error_code == ErrorCode.invalid_transaction_timeout and txn.producer_id == -1
    minute = i32Timedelta.parse(datetime.timedelta(minutes=1))
    one, two = (
        request_once(
            harness.bootstrap,
            InitProducerIdRequest(transactional_id=TransactionalId("tx"), transaction_timeout=minute),
        )
        for _ in range(2)
    )
    assert one.error_code == two.error_code == ErrorCode.none
    assert one.producer_id == two.producer_id >= 0 and (one.producer_epoch, two.producer_epoch) == (0, 1)


def test_list_offsets_special_timestamps_and_errors(harness):
    name = _name()
    _create_raw(harness, name, 2)
    resp = request_once(
        harness.bootstrap,
        list_offsets_request(name, [(0, -1), (0, -2), (1, -3), (1, -4), (0, -5), (0, 1_000), (2, -1)]),
    )
    parts = resp.topics[0].partitions
    assert [(p.partition_index, p.error_code, p.offset) for p in parts[:5]] == [
        (0, ErrorCode.none, 0),
        (0, ErrorCode.none, 0),
        (1, ErrorCode.none, parts[2].offset),
        (1, ErrorCode.none, 0),
        (0, ErrorCode.none, -1),
    ]
    assert parts[5].error_code == ErrorCode.none
    assert parts[6].error_code == ErrorCode.unknown_topic_or_partition
    missing = request_once(harness.bootstrap, list_offsets_request(_name(), [(0, -1)]))
    assert missing.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition


# --- metadata unreachable ---------------------------------------------------------------------------------


def test_metadata_outage_degrades_to_retriable_errors(tmp_path):
    h = AgentHarness(tmp_path).start()
    try:
        cached = _name()
        _create_raw(h, cached, 2)
        assert request_once(h.bootstrap, _metadata(None)).topics  # warm the all-topics cache
        assert h.metadata is not None
        h.metadata.down = True
        resp = request_once(h.bootstrap, _metadata([cached, "never-seen"]))
        assert resp.topics[0].error_code == ErrorCode.none and len(resp.topics[0].partitions) == 2
        assert resp.topics[1].error_code == ErrorCode.leader_not_available
        listed = request_once(h.bootstrap, _metadata(None)).topics
        assert [t.name for t in listed if not t.is_internal] == [cached]
        req = _create_request(_creatable(_name()))
        assert request_once(h.bootstrap, req).topics[0].error_code == ErrorCode.request_timed_out
        offsets = request_once(h.bootstrap, list_offsets_request(cached, [(0, -1)]))
        assert offsets.topics[0].partitions[0].error_code == ErrorCode.kafka_storage_error
        pid = request_once(
            h.bootstrap, InitProducerIdRequest(transactional_id=None, transaction_timeout=ZERO)
        )
        assert pid.error_code == ErrorCode.coordinator_not_available
        h.metadata.down = False
        assert request_once(h.bootstrap, req).topics[0].error_code == ErrorCode.none
    finally:
        h.stop()


# --- several agents ---------------------------------------------------------------------------------------


def test_several_agents_share_topics_and_spread_leadership(tmp_path):
    h = AgentHarness(tmp_path).start(agents=3)
    try:
        h.refresh_all()
        name = _name()
        _create_raw(h, name, 48)
        answers = [request_once(a.bootstrap, _metadata([name])) for a in h.agents]
        node_ids = {a.node_id for a in h.agents}
        for resp in answers:
            assert {b.node_id for b in resp.brokers} == node_ids
            assert {(b.host, b.port) for b in resp.brokers} == {("127.0.0.1", a.port) for a in h.agents}
        # every agent gives the same, rendezvous-hashed answer
        leaders = [[p.leader_id for p in r.topics[0].partitions] for r in answers]
        assert leaders[0] == leaders[1] == leaders[2]
        assert set(leaders[0]) == node_ids
        tid = answers[0].topics[0].topic_id
        agent_by_node = {a.node_id: a.ctx.config.agent_id for a in h.agents}
        ids = [a.ctx.config.agent_id for a in h.agents]
        assert [agent_by_node[n] for n in leaders[0]] == [
            routing.partition_owner(tid, p, ids) for p in range(48)
        ]
        assert len({r.controller_id for r in answers}) == 1
        # kcat sees all three brokers
        out = _kcat("-b", h.agents[1].bootstrap, "-L", "-t", name)
        assert " 3 brokers:" in out
        # one agent goes away: the others stop listing it after the TTL and take over its partitions
        gone = h.agents.pop()
        h.call(gone.registry.close())
        h.call(gone.server.close())
        assert h.service is not None
        survivors = {a.node_id for a in h.agents}
        original_ttl = h.service.agent_ttl_ms
        h.service.agent_ttl_ms = 0  # expire it now instead of waiting
        try:
            for a in h.agents:
                h.call(a.registry.beat_once())
        finally:
            h.service.agent_ttl_ms = original_ttl
        h.refresh_all()
        resp = request_once(h.agents[0].bootstrap, _metadata([name]))
        assert {b.node_id for b in resp.brokers} == survivors
        moved = [p.leader_id for p in resp.topics[0].partitions]
        assert set(moved) == survivors
        for before, after in zip(leaders[0], moved, strict=True):
            if before in survivors:
                assert after == before  # only the lost agent's partitions moved
    finally:
        h.stop()


# --- Kafka's own message classes as the judge ----------------------------------------------------------------


@pytest.mark.slow
def test_every_response_parses_and_reserializes_identically_with_kafkas_java_classes(harness):
    """Kafka's generated Java message classes (kafka-clients, via tests/support/java_client.py) parse
    each response of each version we serve with no bytes left over, and write it back byte for byte:
    no missing or extra field, no default-valued tagged field."""
    from kio.schema.alter_configs.v2.request import AlterableConfig, AlterConfigsRequest, AlterConfigsResource
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
    from kio.schema.incremental_alter_configs.v1.request import AlterableConfig as IncAlterableConfig
    from kio.schema.incremental_alter_configs.v1.request import AlterConfigsResource as IncResource
    from kio.schema.incremental_alter_configs.v1.request import IncrementalAlterConfigsRequest

    from tests.component.fake_metadata import connect, recv_frame
    from tests.support.java_client import build_java_client

    name = _name()
    _create_raw(harness, name, 2)
    requests = _latest_requests(name)
    requests[3] = _metadata([name, _name()])
    requests[18] = ApiVersionsRequest(client_software_name="skiff-test", client_software_version="1")
    requests[37] = CreatePartitionsRequest(
        topics=(CreatePartitionsTopic(name=TopicName(name), count=i32(3), assignments=None),),
        timeout=ZERO,
        validate_only=True,
    )
    requests[33] = AlterConfigsRequest(
        resources=(
            AlterConfigsResource(
                resource_type=i8(2),
                resource_name=name,
                configs=(AlterableConfig(name="retention.ms", value="5"),),
            ),
        ),
        validate_only=True,
    )
    requests[44] = IncrementalAlterConfigsRequest(
        resources=(
            IncResource(
                resource_type=i8(2),
                resource_name=name,
                configs=(IncAlterableConfig(name="retention.ms", config_operation=i8(0), value="5"),),
            ),
        ),
        validate_only=True,
    )
    items: list[tuple[int, int, bytes]] = []
    for key, latest in sorted(requests.items()):
        spec = harness.agent.server.registry.get(key)
        assert spec is not None
        for version in range(spec.min_version, spec.max_version + 1):
            cls = protocol.request_schema(key, version)
            assert cls is not None
            if key == 20 and version < 6:
                req = cls(topic_names=(TopicName(name + "-absent"),), timeout=ZERO)
            else:
                req = protocol.convert(latest, cls)
            with connect(harness.bootstrap) as sock:
                sock.sendall(protocol.encode_request(req, 7))
                frame = recv_frame(sock)
            body_at = 4 + (1 if protocol.response_header_version(key, version) >= 1 else 0)
            items.append((key, version, frame[body_at:]))
    results = build_java_client().api_oracle(items)
    bad = [
        (k, v, r)
        for (k, v, _), r in zip(items, results, strict=True)
        if not r["ok"] or r["remaining"] or not r["roundtrip"] or r["unknown_tagged_fields"]
    ]
    assert not bad
    assert len(items) >= 50


def test_agents_find_each_other_by_heartbeat_and_survive_a_metadata_outage(tmp_path):
    import time

    h = AgentHarness(tmp_path, heartbeat_interval_ms=100).start()
    try:
        first = h.agent
        second = h.add_agent("second")
        deadline = time.monotonic() + 10
        while len(first.ctx.agents.brokers()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert {b.agent_id for b in first.ctx.agents.brokers()} == {"1", "second"}
        described = request_once(
            first.bootstrap,
            DescribeClusterRequest(include_cluster_authorized_operations=False, include_fenced_brokers=False),
        )
        assert {(b.broker_id, b.port) for b in described.brokers} == {
            (first.node_id, first.port),
            (second.node_id, second.port),
        }
        assert h.metadata is not None
        h.metadata.down = True
        failures = first.registry.failures
        deadline = time.monotonic() + 10
        while first.registry.failures == failures and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.registry.failures > failures
        assert len(first.ctx.agents.brokers()) == 2  # the last known view is kept
        h.metadata.down = False
    finally:
        h.stop()
