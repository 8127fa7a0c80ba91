"""Kafka wire helpers (agent.protocol), the handler registry, and AgentConfig parsing."""

from __future__ import annotations

import argparse
import contextlib
import io
import struct
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
from kio.schema.create_topics.v7.response import CreatableTopicResult, CreateTopicsResponse
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.init_producer_id.v4.response import InitProducerIdResponse as InitProducerIdResponseV4
from kio.schema.metadata.v1.request import MetadataRequest as MetadataRequestV1
from kio.schema.metadata.v1.request import MetadataRequestTopic as MetadataRequestTopicV1
from kio.schema.metadata.v1.response import MetadataResponse as MetadataResponseV1
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from kio.schema.types import BrokerId, TopicName
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.primitive import Records, i16, i32
from skiff.agent import protocol
from skiff.agent.config import AgentConfig, MiB, add_arguments, describe_fields, env_var
from skiff.agent.handlers import NO_THROTTLE, HandlerRegistry, HandlerSpec, default_registry
from skiff.agent.handlers._access import PRE_AUTH, Access, no_check
from skiff.agent.protocol import MalformedRequest


def _header_bytes(key: int, version: int, corr: int, client_id: bytes | None, tags: bytes | None) -> bytes:
    out = struct.pack(">hhi", key, version, corr)
    if client_id is None:
        out += struct.pack(">h", -1)
    else:
        out += struct.pack(">h", len(client_id)) + client_id
    if tags is not None:
        out += tags
    return out


# --- header versions ------------------------------------------------------------------------


def test_header_versions_follow_flexible_versions():
    assert protocol.request_header_version(18, 0) == 1
    assert protocol.request_header_version(18, 3) == 2
    assert protocol.request_header_version(18, 77) == 2  # newer than kio knows: the newest known
    assert protocol.request_header_version(3, 8) == 1
    assert protocol.request_header_version(3, 9) == 2
    assert protocol.response_header_version(3, 8) == 0
    assert protocol.response_header_version(3, 9) == 1
    # ApiVersions always answers with response header v0 (KIP-511)
    assert protocol.response_header_version(18, 3) == 0
    assert protocol.response_header_version(18, 99) == 0


def test_version_ranges_come_from_kio():
    assert protocol.kio_version_range(18) == (0, 4)
    assert protocol.kio_version_range(9999) is None
    assert protocol.request_schema(3, 12) is MetadataRequest
    assert protocol.request_schema(3, 99) is None
    assert protocol.response_schema(3, 12) is MetadataResponse


# --- request headers ------------------------------------------------------------------------


def test_parse_header_v1_and_v2():
    frame = _header_bytes(3, 8, 42, b"cli", None) + b"body"
    header, pos = protocol.parse_request_header(frame)
    assert header == protocol.RequestHeader(3, 8, 42, "cli", 1)
    assert frame[pos:] == b"body"

    tags = b"\x02" + b"\x00\x03abc" + b"\x05\x01z"  # two tagged fields, ignored
    frame = _header_bytes(3, 12, -7, None, tags) + b"B"
    header, pos = protocol.parse_request_header(frame)
    assert header == protocol.RequestHeader(3, 12, -7, None, 2)
    assert frame[pos:] == b"B"


@pytest.mark.parametrize(
    "frame",
    [
        b"\x00\x03\x00",  # shorter than the fixed prefix
        struct.pack(">hhi", 3, 8, 1),  # no client id length
        struct.pack(">hhih", 3, 8, 1, 10) + b"abc",  # client id truncated
        struct.pack(">hhih", 3, 8, 1, -2),  # bad negative length
        struct.pack(">hhih", 3, 8, 1, 2) + b"\xff\xfe",  # not UTF-8
        _header_bytes(3, 12, 1, b"c", b"\x01\x00\x09ab"),  # tagged field longer than the frame
        _header_bytes(3, 12, 1, b"c", b"\xff\xff\xff\xff\xff\xff"),  # varint too long
    ],
)
def test_malformed_headers_are_rejected(frame):
    with pytest.raises(MalformedRequest):
        protocol.parse_request_header(frame)


def test_uvarint():
    assert protocol.read_uvarint(b"\x00", 0) == (0, 1)
    assert protocol.read_uvarint(b"\xac\x02", 0) == (300, 2)
    with pytest.raises(MalformedRequest):
        protocol.read_uvarint(b"\x80", 0)


# --- bodies -----------------------------------------------------------------------------------


def test_request_roundtrip_through_encode_and_decode():
    body = MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=True
    )
    frame = protocol.encode_request(body, correlation_id=9, client_id="me")
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    header, pos = protocol.parse_request_header(frame[4:])
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, 12, 9, "me")
    assert protocol.decode_request_body(header, frame[4:], pos) == body


def test_requests_tolerate_trailing_bytes_but_entities_do_not():
    body = ApiVersionsRequestV3(client_software_name="a", client_software_version="1")
    frame = protocol.encode_request(body, 1)[4:] + b"\x01\x00\x00"
    header, pos = protocol.parse_request_header(frame)
    assert protocol.decode_request_body(header, frame, pos) == body
    with pytest.raises(MalformedRequest, match="trailing"):
        protocol.decode_entity(ApiVersionsRequestV3, frame, pos)


def test_truncated_and_hostile_bodies_are_malformed_not_crashes():
    header = protocol.RequestHeader(3, 1, 1, None, 1)
    with pytest.raises(MalformedRequest):
        protocol.decode_request_body(header, b"\x00\x00", 0)
    # an array claiming 2^31-1 elements in a 4-byte body: rejected without allocating it
    started = time.perf_counter()
    with pytest.raises(MalformedRequest):
        protocol.decode_request_body(header, struct.pack(">i", 2**31 - 1), 0)
    with pytest.raises(MalformedRequest):
        protocol.decode_request_body(protocol.RequestHeader(3, 12, 1, None, 2), b"\xff\xff\xff\xff\x07", 0)
    # found by fuzzing: kio alone would try to allocate 35 GB for this body and abort the process
    with pytest.raises(MalformedRequest):
        protocol.decode_request_body(
            protocol.RequestHeader(3, 12, 1, None, 2), bytes.fromhex("91d8cdc3101e7ec27378a661c935187c"), 0
        )
    assert time.perf_counter() - started < 1.0


st.register_type_strategy(Records, st.binary(max_size=40).map(Records))


def _all_schemas() -> list[type]:
    out = []
    for key, name in sorted(api_key_map.items()):
        for version in sorted(schema_name_map[name]):
            with contextlib.suppress(Exception):
                out.append(load_request_schema(key, version))
    return out


@pytest.mark.parametrize(
    "cls", _all_schemas(), ids=lambda c: f"{c.__module__.split('.')[2]}.v{c.__version__}.{c.__name__}"
)
def test_bounds_check_agrees_with_kio_on_every_request_schema(cls):
    """The pre-parse walk must end exactly where kio's reader does, for every request kio knows."""

    @settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(st.from_type(cls))
    def check(entity):
        buf = io.BytesIO()
        entity_writer(cls)(buf, entity)
        data = b"xyz" + buf.getvalue()
        assert protocol.check_bounds(cls, data, 3) == len(data)
        try:
            _, size = entity_reader(cls)(data, 3)
        except (SerialError, ValueError, OverflowError):
            return  # kio's own round-trip limits (e.g. huge timedeltas), not a bounds matter
        assert size == len(data) - 3

    check()


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([(3, 1), (3, 12), (19, 7), (32, 4), (2, 9), (18, 3), (20, 6), (44, 1)]),
    st.binary(max_size=64),
)
def test_random_bodies_never_raise_anything_but_malformed(api, data):
    header = protocol.RequestHeader(api[0], api[1], 1, None, protocol.request_header_version(*api))
    try:
        protocol.decode_request_body(header, data, 0)
    except MalformedRequest:
        pass


def test_response_frames_have_size_header_and_body():
    resp = ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=(ApiVersion(api_key=i16(18), min_version=i16(0), max_version=i16(3)),),
        throttle_time=NO_THROTTLE,
    )
    frame = protocol.encode_response(77, resp)
    (size, corr) = struct.unpack(">ii", frame[:8])
    assert size == len(frame) - 4 and corr == 77
    # header v0 (ApiVersions), then: error 0, compact array of 1, one entry + its empty tags,
    # throttle 0 and the top-level tagged fields: all default, so none is written (count 0).
    assert (
        bytes(frame[8:])
        == b"\x00\x00" + b"\x02" + b"\x00\x12\x00\x00\x00\x03\x00" + b"\x00\x00\x00\x00" + b"\x00"
    )
    assert protocol.decode_response(bytes(frame[4:]), ApiVersionsResponse) == (77, resp)


def test_default_tagged_fields_are_not_written():
    result = CreatableTopicResult(
        name=TopicName("t"), topic_id=None, error_code=ErrorCode.none, error_message=None, configs=None
    )
    resp = CreateTopicsResponse(throttle_time=NO_THROTTLE, topics=(result,))
    frame = bytes(protocol.encode_response(1, resp))
    # header v1: correlation id + empty tags; the topic's tag 0 (topic_config_error_code) is default
    assert frame.endswith(b"\x00\x00")
    _, back = protocol.decode_response(frame[4:], CreateTopicsResponse)
    assert back == resp
    tagged = CreatableTopicResult(
        name=TopicName("t"),
        topic_id=None,
        error_code=ErrorCode.none,
        error_message=None,
        configs=None,
        topic_config_error_code=i16(40),
    )
    bigger = bytes(
        protocol.encode_response(1, CreateTopicsResponse(throttle_time=NO_THROTTLE, topics=(tagged,)))
    )
    assert len(bigger) == len(frame) + 4  # tag, size, int16


# --- conversion -------------------------------------------------------------------------------


def _metadata_v12() -> MetadataResponse:
    tid = uuid.uuid4()
    return MetadataResponse(
        throttle_time=NO_THROTTLE,
        brokers=(MetadataResponseBroker(node_id=BrokerId(1), host="h", port=i32(9092), rack="az"),),
        cluster_id="c",
        controller_id=BrokerId(1),
        topics=(
            MetadataResponseTopic(
                error_code=ErrorCode.none,
                name=TopicName("t"),
                topic_id=tid,
                is_internal=False,
                partitions=(
                    MetadataResponsePartition(
                        error_code=ErrorCode.none,
                        partition_index=i32(0),
                        leader_id=BrokerId(1),
                        leader_epoch=i32(-1),
                        replica_nodes=(BrokerId(1),),
                        isr_nodes=(BrokerId(1),),
                        offline_replicas=(),
                    ),
                ),
            ),
        ),
    )


def test_convert_down_drops_fields_the_old_version_lacks():
    old = protocol.convert(_metadata_v12(), MetadataResponseV1)
    assert isinstance(old, MetadataResponseV1)
    assert old.controller_id == 1 and old.brokers[0].rack == "az"
    assert not hasattr(old.topics[0], "topic_id")
    assert not hasattr(old.topics[0].partitions[0], "leader_epoch")
    frame = protocol.encode_response(5, old)
    assert protocol.decode_response(bytes(frame[4:]), MetadataResponseV1) == (5, old)


def test_convert_up_fills_defaults_and_zero_values():
    old = MetadataRequestV1(topics=(MetadataRequestTopicV1(name=TopicName("a")),))
    new = protocol.convert(old, MetadataRequest)
    assert new.allow_auto_topic_creation is True  # the schema default
    assert new.include_topic_authorized_operations is False  # zero value
    assert new.topics is not None and new.topics[0].name == "a" and new.topics[0].topic_id is None
    assert protocol.convert(new, MetadataRequest) is new
    assert protocol.convert(ApiVersionsRequestV0(), ApiVersionsRequestV3) == ApiVersionsRequestV3(
        client_software_name="", client_software_version=""
    )


def test_error_response_sets_the_top_level_error_code():
    resp = protocol.error_response(22, 4, ErrorCode.unsupported_version)
    assert isinstance(resp, InitProducerIdResponseV4)
    assert resp.error_code == ErrorCode.unsupported_version and resp.producer_id == -1
    protocol.encode_response(1, resp)  # encodable as is
    assert protocol.error_response(19, 5, 35) is None  # CreateTopics: no top-level error code
    assert protocol.error_response(22, 99, 35) is None  # unknown version


def test_to_error_code():
    assert protocol.to_error_code(36) is ErrorCode.topic_already_exists
    assert protocol.to_error_code(ErrorCode.none) is ErrorCode.none
    assert protocol.to_error_code(31337) is ErrorCode.unknown_server_error


# --- registry -----------------------------------------------------------------------------------


async def _noop(ctx, request):
    return None


TEST_ACCESS = no_check("a test handler")


def test_a_handler_without_an_authorization_declaration_fails_at_import():
    with pytest.raises(TypeError, match="access"):
        HandlerSpec(3, 1, 12, _noop)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="why_none"):
        Access()
    with pytest.raises(ValueError, match="pre_auth"):
        HandlerRegistry([HandlerSpec(3, 1, 12, _noop, access=PRE_AUTH)])
    with pytest.raises(ValueError, match="pre_auth"):
        HandlerRegistry([HandlerSpec(18, 0, 3, _noop, access=TEST_ACCESS)])


def test_every_registered_api_declares_its_authorization():
    reg = default_registry()
    for spec in reg.specs():
        assert isinstance(spec.access, Access), spec.name
        assert spec.access.checks or spec.access.why_none, spec.name
    assert {s.api_key for s in reg.specs() if s.access.pre_auth} == {17, 18, 36}


def test_handler_specs_are_checked_against_kio():
    with pytest.raises(ValueError):
        HandlerSpec(3, 0, 99, _noop, access=TEST_ACCESS)
    with pytest.raises(ValueError):
        HandlerSpec(9999, 0, 0, _noop, access=TEST_ACCESS)
    with pytest.raises(ValueError):
        HandlerSpec(3, 5, 4, _noop, access=TEST_ACCESS)
    spec = HandlerSpec(3, 1, 12, _noop, access=TEST_ACCESS)
    assert spec.name == "metadata" and spec.supports(1) and spec.supports(12) and not spec.supports(0)


def test_registry_rejects_duplicates_unless_replacing():
    reg = HandlerRegistry([HandlerSpec(3, 1, 12, _noop, access=TEST_ACCESS)])
    with pytest.raises(ValueError):
        reg.register(HandlerSpec(3, 1, 5, _noop, access=TEST_ACCESS))
    reg.register(HandlerSpec(3, 1, 5, _noop, access=TEST_ACCESS), replace=True)
    spec = reg.get(3)
    assert spec is not None and spec.max_version == 5 and 3 in reg
    reg.unregister(3)
    assert reg.get(3) is None


def test_default_registry_serves_the_admin_apis():
    reg = default_registry()
    ranges = {s.api_key: (s.min_version, s.max_version) for s in reg.specs()}
    expected = {
        2: (1, 10),
        3: (1, 13),
        18: (0, 3),
        19: (2, 7),
        20: (1, 6),
        22: (0, 5),
        32: (1, 4),
        33: (0, 2),
        37: (0, 3),
        44: (0, 1),
        60: (0, 2),
    }
    for key, rng in expected.items():
        assert ranges[key] == rng
    assert [s.api_key for s in reg.specs()] == sorted(ranges)


# --- configuration ----------------------------------------------------------------------------


def test_config_defaults():
    cfg = AgentConfig(agent_id="a")
    assert cfg.flush_interval_ms == 250 and cfg.flush_max_bytes == 8 * MiB
    assert cfg.max_request_bytes == 100 * MiB and cfg.default_partitions == 1 and cfg.auto_create_topics
    assert cfg.max_inflight_requests == 4_096


def test_config_from_env_and_flags():
    env = {
        env_var("agent_id"): "7",
        "SKIFF_PORT": "19092",
        "SKIFF_FLUSH_MAX_BYTES": "16MiB",
        "SKIFF_AUTO_CREATE_TOPICS": "off",
        "SKIFF_ZONE": "",
        "SKIFF_MAX_BUFFERED_BYTES": "1_073_741_824",
        "UNRELATED": "x",
    }
    cfg = AgentConfig.from_env(env)
    assert cfg.agent_id == "7" and cfg.port == 19092 and cfg.flush_max_bytes == 16 * MiB
    assert cfg.auto_create_topics is False and cfg.zone is None and cfg.max_buffered_bytes == 2**30
    cfg2 = AgentConfig.from_args(
        ["--port", "9093", "--zone", "eu-1a", "--advertised-host", "kafka.local"], env
    )
    assert cfg2.port == 9093 and cfg2.zone == "eu-1a" and cfg2.advertised_host == "kafka.local"
    assert cfg2.flush_max_bytes == 16 * MiB  # from env, not overridden
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert AgentConfig.from_args(parser.parse_args(["--default-partitions", "3"]), {}).default_partitions == 3
    assert any(f[0] == "--bucket-url" and f[1] == "SKIFF_BUCKET_URL" for f in describe_fields())


@pytest.mark.parametrize(
    "env",
    [
        {"SKIFF_PORT": "eighty"},
        {"SKIFF_PORT": "70000"},
        {"SKIFF_AUTO_CREATE_TOPICS": "maybe"},
        {"SKIFF_DEFAULT_PARTITIONS": "0"},
        {"SKIFF_FLUSH_MAX_BYTES": "128MiB"},  # above max_buffered_bytes
        {"SKIFF_MAX_REQUEST_BYTES": "4GiB"},
        {"SKIFF_AGENT_TTL_MS": "100"},  # not above the heartbeat interval
    ],
)
def test_config_rejects_bad_values(env):
    with pytest.raises(ValueError):
        AgentConfig.from_env({"SKIFF_AGENT_ID": "a", **env})


def test_config_advertised_address():
    assert AgentConfig(agent_id="a", host="127.0.0.1").resolved_advertised_host() == "127.0.0.1"
    assert AgentConfig(agent_id="a", host="0.0.0.0", advertised_host="x").resolved_advertised_host() == "x"
    assert AgentConfig(agent_id="a", port=0).resolved_advertised_port(bound_port=4321) == 4321
    assert AgentConfig(agent_id="a", port=0, advertised_port=1).resolved_advertised_port(4321) == 1
    assert AgentConfig(agent_id="a").replace(port=1).port == 1
