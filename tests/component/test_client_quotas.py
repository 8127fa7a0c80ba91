"""Client quotas through the Kafka protocol (DescribeClientQuotas 48, AlterClientQuotas 49) with
kafka-python's protocol messages and the Java AdminClient, agents following a change through
the version poll, and enforcement on real connections: a produce over its client's
`producer_byte_rate` is answered at once with Kafka's throttle time and its connection then
reads nothing (KIP-219), while another client on the same agent is served; a fetch over
`consumer_byte_rate` by its last batch is served with the throttle time, one with no room left
is answered empty.

The quota math runs on an injected clock (`QuotaCache.now_ms`), frozen, so the throttle times
asserted are Kafka's formula on known byte counts, not measurements."""

from __future__ import annotations

import datetime
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64
from skiff.agent.protocol import encode_request
from skiff.agent.quotas import QuotaType
from skiff.fileformat.record_build import build_batch
from skiff.metadata.security.quota_types import CLIENT_ID, USER, QuotaAlteration, QuotaEntity, QuotaOp

from tests.component.fake_metadata import AgentHarness, connect, recv_frame, roundtrip
from tests.support.java_client import JavaClient

TIMEOUT_S = 20.0


class FrozenClock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture(scope="module")
def clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory, clock: FrozenClock) -> Iterator[AgentHarness]:
    h = AgentHarness(tmp_path_factory.mktemp("quotas"), quota_refresh_interval_ms=50).start(agents=2)
    for a in h.agents:
        a.ctx.quotas.now_ms = clock
    yield h
    h.stop()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def kafka_python_admin(bootstrap: str) -> Any:
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)


def kp_alter(
    admin: Any,
    entity: dict[str, str | None],
    ops: dict[str, float | None],
    validate_only: bool = False,
    node_id: int | None = None,
) -> Any:
    from kafka.protocol.admin import AlterClientQuotasRequest as R

    entry = R.EntryData(
        entity=[R.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
        ops=[R.EntryData.OpData(key=k, value=v or 0.0, remove=v is None) for k, v in ops.items()],
    )
    request = R(entries=[entry], validate_only=validate_only)
    return admin._manager.run(admin._manager.send, request, node_id)


def kp_describe(admin: Any, components: list[tuple[str, int, str | None]], strict: bool = False) -> Any:
    from kafka.protocol.admin import DescribeClientQuotasRequest as R

    request = R(
        components=[R.ComponentData(entity_type=t, match_type=m, match=s) for t, m, s in components],
        strict=strict,
    )
    return admin._manager.run(admin._manager.send, request)


def _entries(response: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    return {
        tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {
            v.key: v.value for v in entry.values
        }
        for entry in response.entries
    }


# --------------------------------------------------------------------------- the admin APIs


def test_kafka_python_alter_and_describe(harness: AgentHarness) -> None:
    user = _name("u")
    admin = kafka_python_admin(harness.agents[0].bootstrap)
    try:
        resp = kp_alter(
            admin, {USER: user, CLIENT_ID: None}, {"producer_byte_rate": 4096.0}, validate_only=True
        )
        assert [e.error_code for e in resp.entries] == [0]
        assert _entries(kp_describe(admin, [(USER, 0, user)])) == {}  # validate_only changed nothing

        resp = kp_alter(
            admin, {USER: user, CLIENT_ID: None}, {"producer_byte_rate": 4096.0, "request_percentage": 25.0}
        )
        assert [e.error_code for e in resp.entries] == [0]
        resp = kp_alter(admin, {USER: user}, {"consumer_byte_rate": 8192.0})
        assert [e.error_code for e in resp.entries] == [0]
        described = kp_describe(admin, [(USER, 0, user)])
        assert described.error_code == 0
        assert _entries(described) == {
            ((CLIENT_ID, None), (USER, user)): {"producer_byte_rate": 4096.0, "request_percentage": 25.0},
            ((USER, user),): {"consumer_byte_rate": 8192.0},
        }
        assert list(_entries(kp_describe(admin, [(USER, 0, user)], strict=True))) == [((USER, user),)]
        assert list(_entries(kp_describe(admin, [(USER, 0, user), (CLIENT_ID, 1, None)]))) == [
            ((CLIENT_ID, None), (USER, user))
        ]

        refused = kp_alter(admin, {USER: user}, {"foobar": 1.0})
        assert [(e.error_code, e.error_message) for e in refused.entries] == [
            (ErrorCode.invalid_request.value, "Invalid configuration key foobar")
        ]
        bad_filter = kp_describe(admin, [("group", 0, "g")])
        assert (bad_filter.error_code, bad_filter.error_message) == (
            ErrorCode.unsupported_version.value,
            "Unsupported entity type group",
        )
        resp = kp_alter(admin, {USER: user}, {"consumer_byte_rate": None})
        assert [e.error_code for e in resp.entries] == [0]
        assert list(_entries(kp_describe(admin, [(USER, 0, user)]))) == [((CLIENT_ID, None), (USER, user))]
    finally:
        admin.close()


def test_a_change_through_one_agent_reaches_the_other_by_the_poll(harness: AgentHarness) -> None:
    first, second = harness.agents
    harness.call(second.ctx.quotas.start())  # the harness does not start the poll itself
    try:
        admin = kafka_python_admin(first.bootstrap)
        try:
            kp_alter(admin, {CLIENT_ID: _name("c")}, {"producer_byte_rate": 1000.0}, node_id=first.node_id)
        finally:
            admin.close()
        assert harness.metadata is not None
        version = harness.call(harness.metadata.client_quota_version())
        assert first.ctx.quotas.version == version  # the agent that answered: before its answer
        deadline = time.monotonic() + TIMEOUT_S
        while second.ctx.quotas.version != version:
            assert time.monotonic() < deadline, "the other agent never loaded the change"
            time.sleep(0.02)
    finally:
        harness.call(second.ctx.quotas.close())


def test_java_admin_client(harness: AgentHarness, java_client: JavaClient) -> None:
    user = _name("j")
    b = harness.agents[0].bootstrap
    java_client.admin(b, "alter-quota", f"user={user},client-id=<default>", "producer_byte_rate", "2048")
    java_client.admin(b, "alter-quota", f"user={user}", "request_percentage", "12.5")
    described = java_client.admin(b, "describe-quotas", "loose", f"user={user}")
    entries = [
        {"entity": e["entity"], "values": {k: float(v) for k, v in e["values"].items()}}  # JSON text numbers
        for e in described["entries"]
    ]
    assert sorted(entries, key=lambda e: len(e["entity"])) == [
        {"entity": {"user": user}, "values": {"request_percentage": 12.5}},
        {"entity": {"client-id": "<default>", "user": user}, "values": {"producer_byte_rate": 2048.0}},
    ]
    java_client.admin(b, "alter-quota", f"user={user}", "request_percentage", "remove")
    strict = java_client.admin(b, "describe-quotas", "strict", f"user={user}")
    assert strict["entries"] == []


# --------------------------------------------------------------------------- enforcement


def _set_quota(harness: AgentHarness, entity: QuotaEntity, key: str, value: float) -> None:
    assert harness.metadata is not None
    _, errors = harness.call(
        harness.metadata.alter_client_quotas([QuotaAlteration(entity, (QuotaOp(key, value),))], False)
    )
    assert errors == [None]
    for a in harness.agents:
        harness.call(a.ctx.quotas.refresh())


def _produce_request(topic: str, value_bytes: int) -> tuple[ProduceRequest, int]:
    records = Records.parse(
        build_batch([(0, 0, b"k", b"x" * value_bytes, ())], base_timestamp=1_700_000_000_000)
    )
    req = ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        topic_data=(
            TopicProduceData(
                name=topic, partition_data=(PartitionProduceData(index=i32(0), records=records),)
            ),
        ),
    )
    return req, len(records)


def test_produce_over_its_quota_is_throttled_and_its_connection_muted(
    harness: AgentHarness, clock: FrozenClock
) -> None:
    agent = harness.agents[0]
    topic, slow, other = _name("t"), _name("slow"), _name("other")
    assert harness.metadata is not None
    harness.call(harness.metadata.create_topic(topic, 1, {}))
    _set_quota(harness, QuotaEntity(((CLIENT_ID, slow),)), "producer_byte_rate", 1_000.0)
    clock.now_ms += 60_000  # a fresh window for this test's client

    request, size = _produce_request(topic, 15_000)
    with connect(agent.bootstrap) as sock:
        first = roundtrip(sock, request, client_id=slow)
        assert first.responses[0].partition_responses[0].error_code == ErrorCode.none
        # size bytes over Kafka's minimum window of 10 s against 1,000 B/s
        expected_ms = round((size / 10.0 - 1_000.0) / 1_000.0 * 10_000)
        assert first.throttle_time.total_seconds() * 1000 == expected_ms > 0
        # muted: a second request is read only after the throttle time (frozen here)
        sock.sendall(encode_request(request, 2, client_id=slow))
        sock.settimeout(1.0)
        with pytest.raises(socket.timeout):
            recv_frame(sock)
    # another client on the same agent is served, unthrottled
    with connect(agent.bootstrap) as sock:
        served = roundtrip(sock, request, client_id=other)
        assert served.throttle_time.total_seconds() == 0
        assert served.responses[0].partition_responses[0].error_code == ErrorCode.none
    assert agent.ctx.quotas.books[QuotaType.PRODUCE].throttled_clients(clock.now_ms) == 1
    # the metrics (agent.metrics exports these families)
    samples = {
        (s.name, s.labels["type"]): s.value for f in agent.ctx.quotas.metric_families() for s in f.samples
    }
    assert samples[("skiff_quota_throttled_clients", "produce")] == 1
    assert samples[("skiff_quota_throttled_responses_total", "produce")] >= 1
    assert samples[("skiff_quota_throttle_time_seconds_total", "produce")] >= expected_ms / 1000
    assert samples[("skiff_quota_throttled_clients", "fetch")] == 0


def test_fetch_over_its_quota_is_throttled(harness: AgentHarness, clock: FrozenClock) -> None:
    agent = harness.agents[0]
    topic, reader = _name("t"), _name("reader")
    assert harness.metadata is not None
    harness.call(harness.metadata.create_topic(topic, 1, {}))
    produce, size = _produce_request(topic, 12_000)
    with connect(agent.bootstrap) as sock:  # two batches of `size` bytes
        for correlation_id in (1, 2):
            answer = roundtrip(sock, produce, correlation_id=correlation_id)
            assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
    _set_quota(harness, QuotaEntity(((CLIENT_ID, reader),)), "consumer_byte_rate", 2_000.0)
    clock.now_ms += 60_000

    def fetch(offset: int) -> Any:
        req = FetchRequest(
            replica_id=i32(-1),
            max_wait=i32Timedelta.parse(datetime.timedelta(0)),
            min_bytes=i32(1),
            max_bytes=i32(50_000_000),
            isolation_level=i8(0),
            session_id=i32(0),
            session_epoch=i32(-1),
            topics=(
                FetchTopic(
                    topic=topic,
                    partitions=(
                        FetchPartition(
                            partition=i32(0),
                            current_leader_epoch=i32(-1),
                            fetch_offset=i64(offset),
                            log_start_offset=i64(-1),
                            partition_max_bytes=i32(1_000_000),
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
        with connect(agent.bootstrap) as sock:
            return roundtrip(sock, req, client_id=reader)

    # max_bytes is bounded to 10 windows of the quota (20,000 bytes): one batch is served,
    # 12,000 bytes over Kafka's minimum window of 10 s: 1,200 B/s, within the quota
    first = fetch(0)
    assert len(first.responses[0].partitions[0].records) == size
    assert first.throttle_time.total_seconds() == 0
    # asked within its room (8,000 bytes), over by the one batch it gets: served, throttled
    second = fetch(1)
    assert len(second.responses[0].partitions[0].records) == size
    assert second.throttle_time.total_seconds() * 1000 == round(
        (2 * size / 10.0 - 2_000.0) / 2_000.0 * 10_000
    )
    # a new connection (not muted) with no room left: answered empty, its bytes taken back out
    third = fetch(1)
    assert third.responses == () and third.throttle_time.total_seconds() > 0
    fetch_rates = agent.ctx.quotas.books[QuotaType.FETCH].rates
    assert fetch_rates[("", reader)].rate(clock.now_ms) == pytest.approx(2 * size / 10.0)
    # once the first batches' window has expired, the client is served again
    clock.now_ms += 11_000
    fourth = fetch(1)
    assert len(fourth.responses[0].partitions[0].records) == size
    assert fourth.throttle_time.total_seconds() == 0
