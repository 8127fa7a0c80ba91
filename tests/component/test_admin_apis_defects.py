"""Two protocol defects the clients' own suites found (issue 23 item 6), against real clients:

- OffsetCommit with offset -2: KafkaJS's `admin.resetOffsets({earliest: true})` commits the
  sentinel -2 and reads it back with OffsetFetch; Kafka stores any offset (its coordinator
  checks only the metadata size). Driven here with kafka-python's admin client, which sends
  the same two requests (OffsetCommit with generation -1 and no member, then OffsetFetch);
- AlterConfigs / IncrementalAlterConfigs on a topic that does not exist, with a config name
  Kafka does not know: UNKNOWN_TOPIC_OR_PARTITION (resource errors before config errors,
  Kafka >= 2.7), with confluent-kafka's admin client.

Both also with KafkaJS itself (tests/support/kafkajs.py), the client whose suite found them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from tests.component.fake_metadata import AgentHarness
from tests.support.kafkajs import KafkaJS

TIMEOUT = 15


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentHarness]:
    h = AgentHarness(tmp_path_factory.mktemp("defects23")).start()
    yield h
    h.stop()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def test_offset_commit_of_minus_two_is_stored_and_read_back(harness):
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic
    from kafka.errors import NoError
    from kafka.structs import OffsetAndMetadata

    client = KafkaAdminClient(bootstrap_servers=harness.bootstrap, request_timeout_ms=10000)
    try:
        topic, group = _name("reset"), _name("g")
        client.create_topics([KNewTopic(topic, 2, 1)])
        tps = [KTopicPartition(topic, 0), KTopicPartition(topic, 1)]
        answers = client.alter_group_offsets(
            group, {tps[0]: OffsetAndMetadata(-2, "", None), tps[1]: OffsetAndMetadata(5, "m", None)}
        )
        assert answers == {tps[0]: NoError, tps[1]: NoError}
        got = client.list_group_offsets(group)[group]
        assert {tp: (o.offset, o.metadata) for tp, o in got.items()} == {tps[0]: (-2, ""), tps[1]: (5, "m")}
        # and a later commit replaces it, as any other offset
        client.alter_group_offsets(group, {tps[0]: OffsetAndMetadata(3, "", None)})
        assert client.list_group_offsets(group)[group][tps[0]].offset == 3
    finally:
        client.close()


def _error(future) -> KafkaError:  # type: ignore[no-untyped-def]
    with pytest.raises(KafkaException) as info:
        future.result(TIMEOUT)
    err: KafkaError = info.value.args[0]
    return err


# the legacy AlterConfigs is what the defect is about; confluent-kafka warns that it is legacy
@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
@pytest.mark.parametrize("validate_only", [False, True])
def test_alter_configs_of_a_missing_topic_is_unknown_topic_before_unknown_config(harness, validate_only):
    admin = AdminClient({"bootstrap.servers": harness.bootstrap})
    missing = _name("missing")
    legacy = ConfigResource(ResourceType.TOPIC, missing, set_config={"no.such.config": "1"})
    (future,) = admin.alter_configs([legacy], validate_only=validate_only).values()
    assert _error(future).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    op = ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)
    incremental = ConfigResource(ResourceType.TOPIC, missing, incremental_configs=[op])
    (future,) = admin.incremental_alter_configs([incremental], validate_only=validate_only).values()
    assert _error(future).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_alter_configs_of_an_existing_topic_still_refuses_an_unknown_config(harness):
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": harness.bootstrap})
    name = _name("exists")
    admin.create_topics([NewTopic(name, 1)])[name].result(TIMEOUT)
    legacy = ConfigResource(ResourceType.TOPIC, name, set_config={"no.such.config": "1"})
    (future,) = admin.alter_configs([legacy]).values()
    assert _error(future).code() == KafkaError.INVALID_CONFIG
    op = ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)
    incremental = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[op])
    (future,) = admin.incremental_alter_configs([incremental]).values()
    assert _error(future).code() == KafkaError.INVALID_CONFIG


# --- with the client that found them: KafkaJS (tests/support/kafkajs.py) -------------------------


def test_kafkajs_reset_offsets_to_earliest_reads_back_minus_two(harness, kafkajs: KafkaJS):
    """KafkaJS's own test: `admin.resetOffsets({earliest: true})` commits -2 and
    `admin.fetchOffsets` reads -2 back, as against Apache Kafka."""
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": harness.bootstrap})
    topic, group = _name("jsreset"), _name("jsg")
    admin.create_topics([NewTopic(topic, 2)])[topic].result(TIMEOUT)
    got = kafkajs.admin(harness.bootstrap, "reset-earliest", group, topic)
    assert sorted((p["partition"], p["offset"]) for p in got["offsets"]) == [(0, "-2"), (1, "-2")]


def test_kafkajs_alter_configs_of_a_missing_topic_is_unknown_topic(harness, kafkajs: KafkaJS):
    """KafkaJS's own test: AlterConfigs on a topic that does not exist, with a config name
    Kafka does not know, fails with UNKNOWN_TOPIC_OR_PARTITION (code 3), not INVALID_CONFIG."""
    got = kafkajs.admin(harness.bootstrap, "alter-config", _name("jsmissing"), "no.such.config", "1")
    assert (got["error"], got["code"]) == ("UNKNOWN_TOPIC_OR_PARTITION", 3)
