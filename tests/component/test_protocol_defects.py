"""Protocol defects the clients' own suites found (issue 11 item 10), against real clients:
IncrementalAlterConfigs SUBTRACT of a list config's last value leaves it empty (Kafka 4.2: an
empty `cleanup.policy` is infinite retention), and a transactional producer finds a coordinator
for its transactional id (see tests/e2e/test_transactions.py for the whole path)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest as FindCoordinatorRequestV3
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.static.primitive import i8
from skiff.metadata import configs

from tests.component.fake_metadata import AgentHarness, request_once

TIMEOUT = 15


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentHarness]:
    h = AgentHarness(tmp_path_factory.mktemp("defects")).start()
    yield h
    h.stop()


@pytest.fixture(scope="module")
def admin(harness: AgentHarness) -> AdminClient:
    return AdminClient({"bootstrap.servers": harness.bootstrap})


def _describe(admin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(ResourceType.TOPIC, name)
    return admin.describe_configs([res])[res].result(TIMEOUT)


def _incremental(admin: AdminClient, name: str, *entries: ConfigEntry) -> None:
    res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=list(entries))
    admin.incremental_alter_configs([res])[res].result(TIMEOUT)


def test_subtracting_the_last_cleanup_policy_leaves_it_empty(admin, harness):
    name = f"t-{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(name, 1)])[name].result(TIMEOUT)
    subtract = AlterConfigOpType.SUBTRACT
    _incremental(admin, name, ConfigEntry("cleanup.policy", "delete", incremental_operation=subtract))
    got = _describe(admin, name)["cleanup.policy"]
    assert got.value == "" and not got.is_default
    topic = harness.call(harness.metadata.describe_topics([name]))[name]
    assert topic.configs["cleanup.policy"] == ""
    assert configs.cleanup_policies(topic.configs) == frozenset()
    assert not configs.is_compacted(topic.configs)
    # appending to the empty list starts a new one
    _incremental(
        admin, name, ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)
    )
    assert _describe(admin, name)["cleanup.policy"].value == "compact"


@pytest.mark.parametrize("version", [3, 4])
def test_find_coordinator_for_a_transactional_id_names_an_agent(harness, version):
    if version >= 4:
        resp = request_once(
            harness.bootstrap, FindCoordinatorRequest(key_type=i8(1), coordinator_keys=("tx", ""))
        )
        entry, empty = resp.coordinators
        assert empty.error_code == ErrorCode.invalid_request and empty.node_id == -1
    else:
        entry = request_once(harness.bootstrap, FindCoordinatorRequestV3(key="tx", key_type=i8(1)))
    assert entry.error_code == ErrorCode.none
    assert f"{entry.host}:{entry.port}" == harness.bootstrap and entry.node_id >= 0


def test_find_coordinator_for_an_unknown_key_type_is_invalid_request(harness):
    resp = request_once(harness.bootstrap, FindCoordinatorRequest(key_type=i8(7), coordinator_keys=("x",)))
    assert resp.coordinators[0].error_code == ErrorCode.invalid_request


def test_confluent_init_transactions_succeeds(harness):
    producer = Producer({"bootstrap.servers": harness.bootstrap, "transactional.id": "skiff-tx"})
    producer.init_transactions(60)  # raises on any error or at the timeout
    producer.begin_transaction()
    producer.abort_transaction(60)
